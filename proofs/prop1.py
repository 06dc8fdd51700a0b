"""Proposition 1 (rank): under A1, A2 some ``θ`` gives ``rank Z ≥ min(H(k−1)+1, T)``, ``k = min(n, d_h)``.

The proof is the construction (:func:`construct.build`): :func:`check` runs it on the first
``min(T, H(k−1)+1)`` examples and measures the rank of ``Z`` over all of them; :func:`check_step`
checks one head's induction step of a traced build (docs/math.md §4.4).
"""

from __future__ import annotations

import numpy as np

from construct.assumptions import a2_violations
from construct.build import BuildResult, build, capacity
from construct.data import Dataset, as_dataset
from construct.errors import ConstructError, InputError
from construct.arith import EPS, numerical_rank
from construct.model import feature_matrix
from construct.limits import integer
from construct.partition import partition

from .check import (Check, a1_status, features_rank, layer_data, logit_radius, machine_limit, one_blas_thread,
                    options, traced_head, weaker_than_a1)

STATEMENT = "Proposition 1"

# C is a least-squares solution: its rounding grows like ε·κ(Z'_A)²; 1e-6 covers κ up to ~1e5.
ROW_REDUCTION_RTOL = 1e-6


def hypotheses(data: Dataset, k: int, fitted: int) -> dict[str, bool]:
    """A2, ``n ≤ d``, and the partition condition (docs/math.md §4.2; A1 implies it) on the fitted examples."""
    try:
        partition(data.X[:fitted], k)
        split = True
    except InputError:
        split = False
    return {"n ≤ d": data.n <= data.d, "contexts have full row rank (A2)": a2_violations(data.E).size == 0,
            "queries satisfy the partition condition (implied by A1)": split}


@one_blas_thread
def check(data: Dataset, heads: int, head_dim: int | None = None, *, seed: int = 0) -> Check:
    """Proposition 1 on ``data`` with ``heads`` heads of key/query dimension ``head_dim`` (default n).

    A False conclusion means the float64 construction did not reach the rank (quantity
    ``construction_error`` says why): a failure to confirm this existential statement, not a
    counterexample. As for Theorem 1, A1 is decided through the partition condition, and
    quantity ``A1`` says whether A1 itself holds (where it fails, the check is so named).
    """
    data, heads, d_h, _ = options(data, heads, head_dim)
    seed = integer(seed, "seed", 0)
    k = min(data.n, d_h)
    fitted = min(data.T, capacity(heads, data.n, d_h))
    bound = fitted
    hyp = hypotheses(data, k, fitted)
    a1_line, a1 = a1_status(data.X, data.n)
    q: dict = {"T": data.T, "H": heads, "k": k, "bound": bound, "A1": a1_line}
    statement = weaker_than_a1(STATEMENT, a1)
    if not all(hyp.values()):
        return Check(statement, hyp, None, q)
    try:
        sub = as_dataset(data.E[:fitted], data.X[:fitted], data.Y[:fitted])
        weights = build(sub, heads, head_dim=d_h, seed=seed).weights
    except ConstructError as exc:
        if machine_limit(exc):
            raise
        return Check(statement, hyp, False, {**q, "construction_error": str(exc)})
    _, rank_Z, s = features_rank(data, weights)
    q.update(rank_Z=rank_Z, sigma_min_Z=float(s[min(bound, s.size) - 1]), weights=weights)
    return Check(statement, hyp, rank_Z >= bound, q)


@one_blas_thread
def check_step(result: BuildResult, head: int) -> Check:
    """The induction step of head ``head`` (from 2) of a build made with ``trace=True``.

    Checks, on the features the weights produce: the row reduction ``C = Z'_S (Z'_A)^+`` and
    ``F = C Z̄_A`` (docs/math.md §4.4.3); the rank step itself, full row rank of the reduced new rows
    ``N = Z''_S − C Z''_A`` (Lemma 1 after the row operation; the saturation of §4.4.5 is how the
    proof makes ``N`` close to ``M``, and the perturbation ``‖C(Z''_A − Z̄_A)‖_2`` is reported);
    and that ``Z`` restricted to heads ``1..h`` has full row rank on the examples fitted so far.

    ``C`` is compared within ``C_tol``: the solve's rounding plus how far the features' own
    rounding can move it (the build evaluated them grouped its own way); where weights are large
    that is far above ε (7% of ``‖C‖`` for head 1 fitting queries 2e-4 apart), and where it is
    unbounded the step is undecided.
    """
    tr, ev = traced_head(result, head, "check_step")
    E, X = layer_data(result)
    d, S = result.data.d, tr.examples
    Z = feature_matrix(E, X, result.weights, layered=True)
    Z1 = Z[:, :(head - 1) * d]
    Z_A, Z_S = Z1[:S.start], Z1[S.start:S.stop]
    C_ref = Z_S @ np.linalg.pinv(Z_A)
    C_err = float(np.linalg.norm(tr.C - C_ref, 2))
    C_tol = _reduction_tol(C_ref, Z_A, Z_S, _feature_motion(E[:S.stop], X[:S.stop], result.weights, head - 1))
    Z_bar = E[np.arange(S.start), tr.j_star]
    F_ref = tr.C @ Z_bar
    F_err = float(np.abs(tr.F - F_ref).max())
    Z_h = Z[:, (head - 1) * d:head * d]
    perturbation = float(np.linalg.norm(tr.C @ (Z_bar - Z_h[:S.start]), 2))
    rank_N = numerical_rank(Z_h[S.start:S.stop] - tr.C @ Z_h[:S.start])[0]
    rank_after = numerical_rank(Z[:S.stop, :head * d])[0]
    hyp = {"head uses earlier examples": S.start > 0}
    q = {"C_error": C_err, "C_tol": C_tol, "C_norm": float(np.linalg.norm(C_ref, 2)), "F_error": F_err,
         "sigma_min_M": ev.sigma_min_M, "perturbation": perturbation, "rank_N": rank_N, "scale": ev.scale,
         "rank_after": rank_after, "rows": S.stop}
    # F at the scale of its terms, |C| |Z̄_A| (a floor of 1 made it absolute: features of size
    # 1e-7 passed any F).
    F_scale = float((np.abs(tr.C) @ np.abs(Z_bar)).max(initial=0.0))
    holds: bool | None = bool(C_err <= C_tol and F_err <= ROW_REDUCTION_RTOL * F_scale
                              and rank_N == len(S) and rank_after == S.stop)
    if holds and C_tol == float("inf"):
        holds = None                      # the features' evaluation could move C anywhere: no verdict on C
    return Check(f"{STATEMENT} (step of head {head})", hyp, holds, q)


def _feature_motion(E: np.ndarray, X: np.ndarray, weights, heads: int) -> np.ndarray:
    """How far two float64 evaluations of the first ``heads`` heads' features may differ, per
    entry, shape (T, heads·d).

    The build formed ``C`` from its own evaluation, whose products may be grouped otherwise than
    this one's. Logits within ``η`` of exact (:func:`proofs.check.logit_radius`, per example)
    move the attention by a factor within ``e^{±2η}``, so a feature ``Σ_i s_i e_ij`` by
    ``(e^{2η} − 1) max_i |e_ij|``, and the sum and the quotient add ``(2n + 4) ε`` of it
    (:func:`proofs.check.features_rounding`); twice, for two evaluations. Where the logits are
    large (head 1 fitting nearly equal queries has weights of 1e10) this is far above ε.
    """
    n = E.shape[1]
    largest = np.abs(E).max(axis=1)                                   # (T, d): max_i |e_ij|
    motion = []
    with np.errstate(over="ignore", invalid="ignore"):
        for g in range(heads):
            eta = logit_radius(E, X, weights.W_K[g], weights.W_Q[g])
            factor = 2 * (np.expm1(2 * eta) + (2 * n + 4) * EPS)
            motion.append(factor[:, None] * largest)
    return np.concatenate(motion, axis=1)


def _reduction_tol(C_ref: np.ndarray, Z_A: np.ndarray, Z_S: np.ndarray, motion: np.ndarray) -> float:
    """The tolerance on ``‖C − Z'_S (Z'_A)^+‖_2``: the least-squares solve's own rounding
    (:data:`ROW_REDUCTION_RTOL` of ``‖C‖``), plus what features moved by at most ``motion`` per
    entry move it. For ``Z'_A`` of full row rank with smallest singular value ``σ`` and ``ΔZ`` no
    larger than ``σ/2`` in 2-norm, ``C`` moves by at most ``2((‖ΔZ_S‖ + ‖C‖ ‖ΔZ_A‖)/σ +
    ‖R‖ ‖ΔZ_A‖/σ²)`` with ``R = Z'_S − C Z'_A`` (the first-order terms, doubled for the rest);
    beyond ``σ/2``, inf: these features cannot tell.
    """
    a = Z_A.shape[0]
    dA, dS = float(np.linalg.norm(motion[:a])), float(np.linalg.norm(motion[a:]))     # Frobenius ≥ 2-norm
    sigma = float(np.linalg.svd(Z_A, compute_uv=False)[-1]) if Z_A.size else 0.0
    if not dA <= sigma / 2:
        return float("inf")
    C_norm = float(np.linalg.norm(C_ref, 2))
    R = float(np.linalg.norm(Z_S - C_ref @ Z_A, 2))
    moved = 2 * ((dS + C_norm * dA) / sigma + R * dA / sigma ** 2)
    return ROW_REDUCTION_RTOL * max(1.0, C_norm) + moved
