"""Claim 2: fit ``|S| ≤ n − 1`` new examples exactly and freeze every other one.

``W = W_S + c·a b^T`` with ``W_S`` from Claim 1 on ``S`` and ``a b^T`` from Lemma 3: on ``S`` the
logits are those of ``W_S`` (``b ⊥ X_S``), so the targets are met; on every other example the
attention is within Lemma 4's bound of the one-hot ``e_{j*(t)}``, whatever ``W_S`` is.
``rank W ≤ |S| + 1``, so ``W = W_K W_Q^T`` with ``W_K = [K, c a]``, ``W_Q = [X_S^T, b]``.
"""

from __future__ import annotations

import numpy as np

from construct.build import BuildResult
from construct.claim1 import claim1_factors
from construct.arith import EPS
from construct.limits import integer
from construct.model import head_attention
from construct.saturation import one_hot_distance

from . import claim1, lemma3, lemma4
from .check import (CONFIRM_TOL, Check, arrays, factored_rank, layer_data, logit_radius, one_blas_thread, real,
                    target_error, target_tol, traced_head)

STATEMENT = "Claim 2"


def _conclusion(E_S, X_S, s, E_A, X_A, K, Q, a, b, c, j_star=None) -> tuple[bool | None, dict]:
    """Targets on S, saturation on the others, rank: for ``W = K Q^T + c a b^T``. None when the
    float64 evaluation cannot decide the targets: their relative tolerance (grown with the logits'
    rounding, :func:`proofs.check.target_tol`) reaches 1, a factor of 2 on a probability, or
    everything holds but the targets only within a tolerance above
    :data:`proofs.check.CONFIRM_TOL`."""
    W_K, W_Q = np.column_stack([K, c * a]), np.column_stack([Q, b])
    err = target_error(head_attention(E_S, X_S, W_K, W_Q), s) if len(s) else 0.0
    tol = target_tol(logit_radius(E_S, X_S, W_K, W_Q).max(initial=0.0))
    sat = lemma4.check(E_A, X_A, K @ Q.T, np.outer(a, b), c)
    same_tokens = j_star is None or np.array_equal(sat.quantities["j_star"], j_star)
    # Lemma 4 reasons about the exact logits; the check looks at the model's own attention.
    dist = one_hot_distance(np.einsum("tnd,td->tn", E_A, X_A @ (W_K @ W_Q.T).T),
                                   sat.quantities["j_star"]) if len(X_A) else np.zeros(0)
    bound = sat.quantities["bound"]
    # The model's logits carry rounding (docs/math.md §5) that the exact ones do not; a logit error η
    # changes the distance by a factor of at most exp(2η).
    eta = logit_radius(E_A, X_A, W_K, W_Q).max(initial=0.0)
    with np.errstate(over="ignore"):
        slack = float(np.exp(2 * eta))
    # Where that factor overflows, the model's logits may be off by more than any gap: the
    # numbers cannot decide the saturation (the bound may have underflowed to 0 as well).
    seen = np.isfinite(slack) and sat.conclusion is not None
    with np.errstate(over="ignore", invalid="ignore"):    # where 0·inf, np.where takes the 0
        allowed = np.where(bound > 0, bound * (1 + 4 * E_A.shape[1] * EPS) * slack, 0.0) if seen else np.inf
    frozen = bool(np.all(dist <= allowed))
    rank_W = factored_rank(W_K, W_Q)
    # What the bound says: only where it is below 2 (the largest distance of two points of the
    # simplex) does it keep an example near its one-hot; at the small scales of --scale rank it
    # rarely is, and the claim then holds without saying much. Reported, so that a reader sees it.
    attends = (np.argmax(np.einsum("tnd,td->tn", E_A, X_A @ (W_K @ W_Q.T).T), axis=1) == sat.quantities["j_star"]
               if len(X_A) else np.zeros(0, dtype=bool))
    q = {"target_error": err, "target_tol": tol, "max_distance_over_bound":
         float(np.max(dist / np.maximum(bound, np.finfo(float).tiny))) if dist.size else 0.0,
         "rank_W": rank_W, "c": c, "distance": dist, "bound": bound, "j_star": sat.quantities["j_star"],
         "attends_j_star": attends, "examples_bound_below_2": int(np.sum(bound < 2)),
         "examples_saturated": int(np.sum((bound < 2) & attends)),
         "examples_other": int(len(X_A))}
    if tol >= 1:
        return None, q
    holds = bool(err <= tol and frozen and same_tokens and rank_W <= len(s) + 1)
    # Held, but the targets only within a tolerance too coarse to call them exact, or the
    # saturation unseen: undecided.
    return (None if holds and (tol > CONFIRM_TOL or not seen) else holds), q


@one_blas_thread
def check(E_S: np.ndarray, X_S: np.ndarray, s: np.ndarray, E_A: np.ndarray, X_A: np.ndarray, c: float,
          *, seed: int = 0) -> Check:
    """Claim 2 for new examples ``E_S`` (m, n, d), ``X_S`` (m, d) with targets ``s`` (m, n), the
    other examples ``E_A`` (p, n, d), ``X_A`` (p, d), and the scale ``c``.

    The separator is drawn by the engine's Lemma 3 with ``seed``; the saturation part holds for
    every ``c > 0``, with a bound that shrinks as ``c`` grows.
    """
    E_S, X_S, s, E_A, X_A = arrays(E_S=(E_S, "m n d"), X_S=(X_S, "m d"), s=(s, "m n"), E_A=(E_A, "p n d"),
                                   X_A=(X_A, "p d"))
    c, seed = real(c, "c"), integer(seed, "seed", 0)
    n = E_S.shape[1]
    sep = lemma3.check(X_S, E_A, X_A, seed=seed)
    hyp = {k: v for k, v in claim1.hypotheses(E_S, X_S, s).items() if k not in ("m ≤ n", "m ≤ d_h")}
    hyp["|S| ≤ n − 1"] = E_S.shape[0] <= n - 1
    hyp.update({k: v for k, v in sep.hypotheses.items() if k not in hyp})
    hyp["c > 0"] = bool(c > 0)
    if not np.isfinite(c):                           # nothing to evaluate at an infinite or NaN scale
        hyp["c finite"] = False
    if not (hyp.get("c finite", True) and hyp["queries linearly independent"] and hyp["targets strictly positive, rows sum to 1"]
            and hyp["contexts have full row rank (A2)"]) or sep.conclusion is None:
        return Check(STATEMENT, hyp, None, {})
    K, Q = claim1_factors(E_S, X_S, s)
    holds, q = _conclusion(E_S, X_S, s, E_A, X_A, K, Q, sep.quantities["a"], sep.quantities["b"], c)
    return Check(STATEMENT, hyp, None if holds is None else holds and bool(sep.conclusion), q)


@one_blas_thread
def check_head(result: BuildResult, head: int) -> Check:
    """Claim 2 on head ``head`` (from 2) of a build made with ``trace=True``.

    Reads the head's weights as built: ``W_K[h] = [K, c a, 0…]``, ``W_Q[h] = [X_S^T, b, 0…]``, and
    checks them against the targets and the saturation tokens ``j*`` the construction recorded
    (and its separator's ``a``, when ``c = 0`` leaves none in the weights).
    """
    tr, ev = traced_head(result, head, "check_head")
    h = head - 1
    E, X = layer_data(result)
    S, m, c = tr.examples, len(tr.examples), ev.scale
    W_K, W_Q = result.weights.W_K[h], result.weights.W_Q[h]
    # At c = 0 the weights hold no trace of a (their column is c·a = 0): take the recorded one.
    a = W_K[:, m] / c if c > 0 else tr.a
    E_S, X_S, E_A, X_A = E[S.start:S.stop], X[S.start:S.stop], E[:S.start], X[:S.start]
    sep = lemma3.check(X_S, E_A, X_A, a=a, b=W_Q[:, m])
    hyp = {"c > 0": c > 0, "separator vanishes on S and separates the others (Lemma 3)": bool(sep.conclusion),
           "unused key/query columns are zero": not (np.any(W_K[:, m + 1:]) or np.any(W_Q[:, m + 1:]))}
    holds, q = _conclusion(E_S, X_S, tr.targets, E_A, X_A, W_K[:, :m], W_Q[:, :m], a, W_Q[:, m], c,
                           j_star=tr.j_star)
    return Check(f"{STATEMENT} (head {head})", hyp, holds, q)
