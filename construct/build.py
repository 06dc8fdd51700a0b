"""The construction of Theorem 1 (MATH.md §4), read top to bottom like the proof.

validate → partition → head 1 (Claim 1) → heads 2..H (Lemma 3, row reduction, Claim 2 with the
explicit saturation scale) → readout → verification by the model's own forward pass.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from .assumptions import a2_violations
from .claim1 import claim1_factors, interior_targets
from .data import Dataset, as_dataset, checked
from .errors import CapacityError, ConstructionError, InputError
from .limits import integer, require_memory, tolerance
from .linalg import blas_limit, blas_threads, halves, numerical_rank, scipy_threads, spectral_norm
from .model import Weights, feature_matrix, forward, head_features, head_logits, param_count, sealed, softmax
from .partition import partition
from .readout import min_norm_solve, readout_target, readout_weights
from . import precision as precision_mod
from .precision import FLOAT64, Precision, bits_needed
from .rowreduce import GramRowReduction, RowSpaceFactor
from .saturation import MARGIN, explicit_scale, perturbation_at, rank_perturbation_bound, smallest_scale
from .separator import rank_one_separator
from .verify import DEFAULT_TOL, Verification, check, verify

# Fresh random draws (targets, separator) before a numerical failure is reported; each draw
# succeeds almost surely, so a repeated failure means the data is (numerically) degenerate.
_MAX_DRAWS = 8

Progress = Callable[[int, int], None]

SCALES = ("rank", "saturating", "explicit")

# The mpmath construction, and auto's measurement of float64 outputs at MEASURE_BITS, take on
# problems up to this many operations, T·H·d·(n + T) (seconds of Python).
MP_BUDGET = 1_000_000
MEASURE_BITS = 106
# auto keeps measured float64 weights when their exact outputs' error plus this many times the
# rounding of numpy's float64 forward pass stays within the tolerance: any other float64
# evaluation rounds in its own order (mpmath at 53 bits rounded 3x more than numpy on a
# near-degenerate problem hypothesis found).
EVALUATION_SLACK = 4


@dataclass(frozen=True)
class HeadEvidence:
    """What the construction proved for one head.

    Attributes:
        head: head number, from 1.
        examples: the group it fits exactly, as ``[first, last]`` example indices.
        scale: the saturation scale ``c_h`` used (0 for head 1, which has no earlier examples).
        scale_explicit: the explicit scale of MATH.md §4.4.5 (Lemma 4 + Weyl), what the
            existence argument asks for; ``scale`` is smaller when the build searched for the
            smallest scale that keeps the rank (``rank``) or the proof's saturation argument
            (``saturating``).
        delta_min: smallest Lemma 3 gap ``δ_t`` over the earlier examples (None for head 1).
        sigma_min_M: ``σ_min`` of the reduced new rows ``M`` (Z's rows for head 1).
        C_norm: ``‖C‖_2`` of the row reduction.
        ell_inf_max: largest ``‖ℓ^(t)‖_∞`` over the earlier examples.
        perturbation_bound: Lemma 4 + Weyl bound on ``‖C(Z''_A − Z̄_A)‖_2`` at ``c_h``; below
            ``σ_min(M)`` proves the rank grows by the group size.
        perturbation_measured: ``‖C(Z''_A − Z̄_A)‖_2`` measured on the head's features at
            ``c_h``; below ``σ_min(M)`` shows the same by Weyl (Lemma 5) on the actual matrices.
        sigma_min_N: ``σ_min`` of the reduced new rows ``N = Z''_S − C Z''_A`` at ``c_h``, measured:
            positive is the rank step itself (Lemma 1 after the row operation).
        rounding_estimate: MATH.md §5's size of the rounding of the group's logits at the build's
            precision (:func:`construct.precision.logit_rounding`: the rank-one term's
            ``c_h ε ‖a‖ ‖b‖ ‖x‖ ‖E‖`` and any cancellation inside ``W_K W_Q^T``).
        target_error: measured ``max |z^(t) − E^(t)T s^(t)|`` on the group (exact up to rounding).
        draws: random draws used (targets and separator).
    """

    head: int
    examples: list[int]
    scale: float
    scale_explicit: float
    delta_min: float | None
    sigma_min_M: float
    C_norm: float
    ell_inf_max: float
    perturbation_bound: float
    perturbation_measured: float
    sigma_min_N: float
    rounding_estimate: float
    target_error: float
    draws: int


@dataclass(frozen=True)
class HeadTrace:
    """The arrays one head's step produced (kept only with ``build(..., trace=True)``).

    Attributes:
        examples: the group ``S`` it fits.
        targets: the attention targets ``s^(t)`` on ``S``, shape (|S|, n).
        a, b: Lemma 3's separator ``W' = a b^T`` (None for head 1), shape (d,) each.
        j_star: the token each earlier example saturates to, ``j*(t)`` for ``t ∈ A``, shape (|A|,).
        delta: Lemma 3's gaps ``δ_t``, shape (|A|,).
        C: the row reduction's ``Z'_S (Z'_A)^+``, shape (|S|, |A|).
        F: ``C Z̄_A``, shape (|S|, d).
        M: the reduced new rows ``E^(t)T s^(t) − f^(t)``, shape (|S|, d).
    """

    examples: range
    targets: np.ndarray
    a: np.ndarray | None
    b: np.ndarray | None
    j_star: np.ndarray
    delta: np.ndarray
    C: np.ndarray
    F: np.ndarray
    M: np.ndarray


@dataclass
class BuildResult:
    """Weights and the evidence that they memorize the dataset.

    Attributes:
        weights: the constructed weights.
        data: the dataset they memorize.
        k: ``min(n, d_h)``; capacity is ``H(k − 1) + 1``.
        capacity: the number of examples Theorem 1 guarantees.
        heads: evidence per head used.
        verification: the final check by the forward pass (rank Z, max error).
        seed: the random seed; the same seed gives identical weights.
        timings: seconds per stage.
        scale: how the saturation scales were chosen (``"rank"``, ``"saturating"`` or ``"explicit"``).
        precision: the arithmetic the construction ran in, and ``precision_reason`` why.
        trace: per head, the arrays of its step (empty unless built with ``trace=True``).
    """

    weights: Weights
    data: Dataset
    k: int
    capacity: int
    heads: list[HeadEvidence]
    verification: Verification
    seed: int
    timings: dict[str, float] = field(default_factory=dict)
    trace: list[HeadTrace] = field(default_factory=list)
    scale: str = "rank"
    precision: str = "float64"
    precision_reason: str = ""

    @property
    def max_abs_error(self) -> float:
        return self.verification.max_abs_error


def capacity(H: int, n: int, d_h: int) -> int:
    """Theorem 1's number of examples ``H(k − 1) + 1`` with ``k = min(n, d_h)``."""
    return H * (min(n, d_h) - 1) + 1


def heads_needed(T: int, k: int) -> int | None:
    """Fewest heads with ``H(k − 1) + 1 ≥ T``; None when no number suffices (``k = 1 < T``)."""
    if T <= 1:
        return 1
    if k < 2:
        return None
    return -(-(T - 1) // (k - 1))


def validate(data: Dataset, H: int, d_h: int, d_v: int) -> int:
    """Stage 1: check the request against Theorem 1's hypotheses; returns ``k``.

    Raises:
        CapacityError: ``T > H(k − 1) + 1`` (the message says how many heads would suffice).
        InputError: every other problem, listed at once: non-positive sizes, ``n > d``,
            ``d_o > d_v`` or ``d_o > d``, contexts without full row rank (A2), by example.
    """
    problems = [f"{name} must be a positive integer, got {v}" for name, v in
                (("heads H", H), ("head dim d_h", d_h), ("value dim d_v", d_v)) if v < 1]
    if problems:
        raise InputError(problems, what="invalid model shape")
    T, n, d, d_o = data.T, data.n, data.d, data.d_o
    k = min(n, d_h)
    if n > d:
        problems.append(f"E: context size n = {n} exceeds token dimension d = {d}; A2 needs n ≤ d")
    if d_o > d_v:
        problems.append(f"Y: d_o = {d_o} output columns need value dim d_v ≥ {d_o}, got d_v = {d_v}")
    if d_o > d:
        problems.append(f"Y: d_o = {d_o} output columns exceed the token dimension d = {d}")
    if n <= d:
        bad = a2_violations(data.E)
        if bad.size:
            shown = ", ".join(map(str, bad[:20])) + (f", … ({bad.size} in all)" if bad.size > 20 else "")
            problems.append(f"E: context of example(s) {shown} is not of full row rank (A2 needs "
                            f"rank E^(t) = n = {n}: distinct, linearly independent tokens)")
    cap = capacity(H, n, d_h)
    if T > cap:
        need = heads_needed(T, k)
        hint = (f"{need} heads would suffice" if need is not None
                else "no number of heads suffices with k = 1; raise the head dim and context size")
        problems.append(f"T = {T} examples exceed the capacity H(k−1)+1 = {cap} of H = {H} heads "
                        f"with k = min(n = {n}, d_h = {d_h}) = {k}; {hint}")
        raise CapacityError(problems, what="dataset over capacity")
    if problems:
        raise InputError(problems, what="the dataset does not meet Theorem 1's hypotheses")
    return k


def _fit_group(data: Dataset, S: range, F: np.ndarray, rng: np.random.Generator):
    """Claim 1 on group ``S`` with targets whose reduced rows ``M = E^T s − F`` have full row rank."""
    E_S, X_S = data.E[S.start:S.stop], data.X[S.start:S.stop]
    for draw in range(1, _MAX_DRAWS + 1):
        s = precision_mod.of(E_S).asarray(interior_targets(rng, len(S), data.n))
        s = s / s.sum(axis=1, keepdims=True)         # in the simplex at the working precision
        M = np.einsum("tnd,tn->td", E_S, s) - F
        rank, sv = numerical_rank(M)
        if rank == len(S):
            K, Q = claim1_factors(E_S, X_S, s)
            return s, K, Q, M, float(sv[-1]), draw
    raise ConstructionError(f"examples {S.start}..{S.stop - 1}: no targets with linearly independent reduced "
                            f"rows after {_MAX_DRAWS} draws (contexts nearly dependent across examples?)")


def _construct_heads(data: Dataset, groups: list[range], H: int, d_h: int, seed: int, scale: str,
                     progress: Progress | None, parallel: bool, trace: list[HeadTrace] | None,
                     prec: Precision = FLOAT64):
    """Stages 3-4: head 1 by Claim 1, heads 2.. by Lemma 3, the row reduction and Claim 2.

    Returns ``W_K``, ``W_Q`` (H, d, d_h), the feature matrix ``Z`` (T, H·d) computed head by head
    with the forward pass's own :func:`head_features`, the factor of ``Z`` and the evidence.
    Appends each head's arrays to ``trace`` unless it is None.

    ``data`` is held at the precision ``prec`` (float64 or ``mpf`` arrays); the same steps run at
    either, with the incremental factorization for float64 and normal equations at high
    precision. Scales and norms that only need to be large enough are computed in float64.
    ``parallel``: the passes over all examples run in two halves on two threads
    (:func:`construct.linalg.together`).
    """
    T, n, d = data.T, data.n, data.d
    rng = np.random.default_rng(seed)
    W_K = prec.zeros((H, d, d_h))
    W_Q = prec.zeros((H, d, d_h))
    Z = prec.zeros((T, H * d))
    parallel = parallel and prec.is_float64
    factor = RowSpaceFactor(Z, parallel) if prec.is_float64 else GramRowReduction(Z)

    def features(h: int) -> None:                                    # the head's one forward pass
        def rows(lo: int, hi: int) -> None:
            Z[lo:hi, h * d:(h + 1) * d] = head_features(data.E[lo:hi], data.X[lo:hi], W_K[h], W_Q[h])
        halves(rows, T, parallel)

    E64, X64 = precision_mod.to_float(data.E), precision_mod.to_float(data.X)
    token_norms = np.linalg.norm(E64, axis=2).max(axis=1)           # ρ per example
    evidence: list[HeadEvidence] = []
    for h, S in enumerate(groups):
        cols = slice(h * d, (h + 1) * d)
        a = S.start                                                  # fitted examples: 0..a−1
        if h == 0:
            factor.stage(S.stop)
            C, F = prec.zeros((len(S), 0)), prec.zeros((len(S), d))
            s, K, Q, M, sigma_M, draws = _fit_group(data, S, F, rng)
            W_K[h, :, :len(S)], W_Q[h, :, :len(S)] = K, Q
            features(h)
            c = c_explicit = C_norm = ell_max = bound = measured = 0.0
            sigma_N = sigma_M
            delta_min, sep = None, None
        else:
            X_S = data.X[S.start:S.stop]
            for draws in range(1, _MAX_DRAWS + 1):                  # Lemma 3
                sep = rank_one_separator(X_S, data.E[:a], data.X[:a], rng)
                if sep.delta.min() > 0:
                    break
            else:
                raise ConstructionError(f"head {h + 1}: Lemma 3's logits tie on some earlier example after "
                                        f"{_MAX_DRAWS} draws (duplicate context tokens?)")
            Z_bar = data.E[np.arange(a), sep.j_star]                 # limit rows z̄^(t) = e_{j*(t)}
            C = factor.advance(h * d, S.stop)                        # row reduction: C = Z'_S (Z'_A)^+
            F = C @ Z_bar
            s, K, Q, M, sigma_M, more = _fit_group(data, S, F, rng)
            draws += more - 1
            ell = np.vstack(halves(lambda lo, hi: head_logits(data.E[lo:hi], data.X[lo:hi], K, Q),
                                   a, parallel))                   # ℓ^(t) = E W_S x on earlier rows
            ell_inf = precision_mod.to_float(np.abs(ell).max(axis=1))
            C_norm = spectral_norm(C)
            rho = float(token_norms[:a].max())
            delta = precision_mod.to_float(sep.delta)
            c_explicit = explicit_scale(C_norm, rho, ell_inf, delta, n, sigma_M)
            m = len(S)
            W_K[h, :, :m], W_Q[h, :, :m] = K, Q                      # Claim 2: W_S + c a b^T
            guess = evidence[-1].scale or None                       # the search starts at the last head's scale
            if scale == "saturating":        # bisection on the actual attention, not Lemma 4
                C64, ell64, g64 = (precision_mod.to_float(v) for v in (C, ell, sep.g))

                def perturbation(c_try: float) -> float:
                    return perturbation_at(C64, C_norm, E64[:a], token_norms[:a], ell64, g64, sep.j_star, c_try)

                c = smallest_scale(perturbation, c_explicit, MARGIN * sigma_M, guess)
            elif scale == "rank":             # only what the rank step needs (Lemma 1 on N)
                C64, ell64, g64 = (precision_mod.to_float(v) for v in (C, ell, sep.g))
                N0 = precision_mod.to_float(M + F)                   # Z''_S: the targets' rows

                def shortfall(c_try: float) -> float:
                    def part(lo: int, hi: int) -> np.ndarray:          # C Z''_A over rows lo..hi−1
                        s_A = softmax(ell64[lo:hi] + c_try * g64[lo:hi])
                        return C64[:, lo:hi] @ np.einsum("tnd,tn->td", E64[lo:hi], s_A)
                    first, second = halves(part, a, parallel)
                    N = N0 - (first + second)
                    return -float(np.linalg.svd(N, compute_uv=False)[-1])

                c = smallest_scale(shortfall, c_explicit, -(1 - MARGIN) * sigma_M, guess)
            else:
                c = c_explicit
            W_K[h, :, m], W_Q[h, :, m] = c * sep.a, sep.b
            features(h)
            Z_h = Z[:, cols]
            CZ = C @ Z_h[:a]                                         # C Z''_A; F = C Z̄_A
            measured = spectral_norm(F - CZ)
            sigma_N = float(numerical_rank(Z_h[S.start:S.stop] - CZ)[1][-1])
            bound = rank_perturbation_bound(C_norm, rho, ell_inf, delta, c, n)
            delta_min, ell_max = float(delta.min()), float(ell_inf.max())

        rounding = precision_mod.logit_rounding(E64[S.start:S.stop], X64[S.start:S.stop], W_K[h], W_Q[h],
                                                prec.eps)
        target_rows = np.einsum("tnd,tn->td", data.E[S.start:S.stop], s)
        evidence.append(HeadEvidence(
            head=h + 1, examples=[S.start, S.stop - 1], scale=c, scale_explicit=c_explicit, delta_min=delta_min,
            sigma_min_M=sigma_M, C_norm=C_norm, ell_inf_max=ell_max, perturbation_bound=bound,
            perturbation_measured=measured, sigma_min_N=sigma_N, rounding_estimate=rounding,
            target_error=float(np.abs(Z[S.start:S.stop, cols] - target_rows).max()), draws=draws))
        if trace is not None:
            empty = np.zeros(0, dtype=int)
            trace.append(HeadTrace(
                examples=S, targets=s, a=None if sep is None else sep.a, b=None if sep is None else sep.b,
                j_star=empty if sep is None else sep.j_star, delta=np.zeros(0) if sep is None else sep.delta,
                C=C, F=F, M=M))
        if progress is not None:
            progress(h + 1, len(groups))
    for h in range(len(groups), H):                                  # unused heads: W = 0, uniform
        features(h)
    return W_K, W_Q, Z, factor, evidence


def build(data: Dataset, heads: int, *, head_dim: int | None = None, value_dim: int | None = None,
          skip: bool = False, seed: int = 0, tol: float = DEFAULT_TOL, scale: str = "rank",
          precision: str | Precision = "auto", progress: Progress | None = None,
          trace: bool = False) -> BuildResult:
    """Construct weights that memorize ``data`` exactly (Theorem 1; MATH.md §4).

    Args:
        data: the dataset (T, n, d) / (T, d) / (T, d_o).
        heads: number of heads H.
        head_dim: key/query dimension d_h (default n, the smallest reaching full capacity).
        value_dim: value dimension d_v (default d_o, the smallest allowed).
        skip: build the skip-connection variant (App. C).
        seed: seed of every random draw; the same seed gives identical weights.
        tol: verification tolerance (relative to ``max(1, max|Y|)``).
        scale: ``"rank"`` (default): each head's scale is the smallest found (bisection on
            ``log c``, to 10%, the result verified) at which the reduced new rows keep
            ``σ_min(N) ≥ (1 − MARGIN) σ_min(M)``: only what the rank step needs, often almost no
            saturation; ``"saturating"``: the smallest whose measured perturbation
            ``‖C(Z''_A − Z̄_A)‖`` stays below ``MARGIN · σ_min(M)`` (the proof's Weyl argument,
            measured: the head still saturates the earlier examples); ``"explicit"``: the bound
            of MATH.md §4.4.5. The evidence has the explicit bound beside the scale used.
        progress: called as ``progress(head, heads_used)`` after each head.
        precision: ``"auto"`` (float64 while MATH.md §5's predicted rounding stays below what
            keeps the rank and the labels, otherwise mpmath at the bits that prediction asks
            for), ``"float64"``, a number of bits, or a :class:`Precision`.
        trace: keep every head's arrays (:class:`HeadTrace`) in the result, for checking the
            steps against the paper's statements (``proofs``) and for teaching; O(T²) memory.

    Returns:
        :class:`BuildResult` with the weights and the evidence.

    Raises:
        InputError, CapacityError: the request fails a hypothesis (every problem listed).
        ConstructionError: a numerical step failed, or the final verification did not pass.
    """
    data = checked(data)
    H = integer(heads, "heads")
    d_h = data.n if head_dim is None else integer(head_dim, "head_dim")
    d_v = data.d_o if value_dim is None else integer(value_dim, "value_dim")
    seed = integer(seed, "seed", 0)
    tol = tolerance(tol)
    if scale not in SCALES:
        raise InputError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}", what="invalid option")
    try:
        chosen = precision_mod.parse(precision)
    except ValueError as exc:
        raise InputError(str(exc), what="invalid option") from None
    require_memory(memory_estimate(data, H, d_h, d_v),
                   f"a build of T = {data.T} examples (n = {data.n}, d = {data.d}) with H = {H} heads")
    args = dict(heads=H, head_dim=d_h, value_dim=d_v, skip=bool(skip), seed=seed, tol=tol, scale=scale,
                progress=progress, trace=trace)
    exponents = scaling_exponents(data, bool(skip))
    if exponents is not None:
        return _build_scaled(data, exponents, chosen, args)
    return _build(data, chosen, args)


def memory_estimate(data: Dataset, H: int, d_h: int, d_v: int) -> int:
    """Bytes a float64 build holds at its peak, about: ``Z`` and its copy in the final check,
    three ``T × T`` triangular factors (old, bordered, checked), the data three times over, and
    the weights."""
    T, n, d = data.T, data.n, data.d
    return 8 * (2 * T * H * d + 3 * T * T + 3 * T * (n * d + d + data.d_o) + H * d * (2 * d_h + d_v))


# Data whose largest magnitude lies outside [2^-SCALE_WINDOW, 2^SCALE_WINDOW] is built at unit
# scale (see scaling_exponents); inside it, the build runs on the data as given.
SCALE_WINDOW = 64


def scaling_exponents(data: Dataset, skip: bool) -> tuple[int, int, int] | None:
    """Powers of two ``(e_E, e_X, e_Y)`` that bring ``E``, ``X`` and the readout's target to unit
    scale, or None when the data is within :data:`SCALE_WINDOW` and is built as given.

    The model is scale-invariant up to its weights: with ``E = 2^e_E E'``, ``X = 2^e_X X'`` and
    targets ``2^e_Y Y'``, weights that memorize ``(E', X', Y')`` memorize the data once
    ``W_K ← 2^-e_E W_K``, ``W_Q ← 2^-e_X W_Q``, ``W_V ← 2^(e_Y − e_E) W_V``; scaling by powers of
    two is exact in floating point.
    """
    def exponent(a: np.ndarray) -> int:
        top = float(np.abs(a).max())
        return int(np.frexp(top)[1]) if top > 0 else 0

    e_E, e_X = exponent(data.E), exponent(data.X)
    target = np.abs(data.Y).max(axis=0)
    if skip:
        target = np.maximum(target, np.abs(data.X[:, :data.d_o]).max(axis=0))
    e_Y = exponent(target)
    if abs(e_E) <= SCALE_WINDOW and abs(e_X) <= SCALE_WINDOW and e_Y <= SCALE_WINDOW:
        return None
    return e_E, e_X, max(e_Y, 0)


def _build_scaled(data: Dataset, exponents: tuple[int, int, int], chosen, args: dict) -> BuildResult:
    """:func:`build` on data at unit scale (:func:`scaling_exponents`), the weights scaled back
    and checked by the forward pass on the data as given.

    Raises:
        InputError: weights at the data's scale are beyond float64's range, or do not reproduce
            the labels there although they do at unit scale.
    """
    e_E, e_X, e_Y = exponents
    X_o = data.X[:, :data.d_o]
    target = np.ldexp(data.Y, -e_Y) - (np.ldexp(X_o, -e_Y) if args["skip"] else 0.0)
    unit = as_dataset(np.ldexp(data.E, -e_E), np.ldexp(data.X, -e_X), target)
    result = _build(unit, chosen, {**args, "skip": False})
    w = result.weights
    with np.errstate(over="ignore", under="ignore"):             # out of range: refused below
        weights = sealed(precision_mod.ldexp(w.W_K, -e_E), precision_mod.ldexp(w.W_Q, -e_X),
                         precision_mod.ldexp(w.W_V, e_Y - e_E), w.W_O.copy(), w.W_D.copy(),
                         skip=args["skip"], bits=w.bits)
    scales = (f"max |E| ≈ 2^{e_E}, max |X| ≈ 2^{e_X}, targets up to 2^{e_Y}")
    if not all(np.isfinite(precision_mod.to_float(getattr(weights, m))).all() for m in ("W_K", "W_Q", "W_V")):
        raise InputError(f"the data's scale ({scales}) puts the weights that memorize it beyond float64's "
                         "range; rescale E, X or Y towards 1", what="data out of range")
    check = verify(weights, data, args["tol"])
    if not check.passed:
        raise InputError(f"the weights memorize the data at unit scale, but not at its own scale ({scales}): "
                         f"there rank Z = {check.rank_Z} of T = {check.T}, max |f − y| = "
                         f"{check.max_abs_error:.3g} (allowed {check.tol:.3g}), because float64 overflows or "
                         "underflows; rescale E, X or Y towards 1", what="data out of range")
    result.weights, result.data, result.verification = weights, data, check
    result.precision_reason += (f"; built at unit scale (E, X, targets divided by 2^{e_E}, 2^{e_X}, 2^{e_Y}) "
                                "and the weights scaled back exactly")
    return result


def _build(data: Dataset, chosen, args: dict) -> BuildResult:
    """:func:`build` on checked arguments: the precision policy around :func:`_build_at`."""
    heads = args["heads"]
    if chosen != "auto":
        result = _build_at(data, prec=chosen, why="requested", **args)
        if chosen.is_float64 and rounding_ratio(result) > 1:
            result.precision_reason += (f"; MATH.md §5 predicts rounding {rounding_ratio(result):.3g}x what keeps "
                                        "the rank: the float64 check passed, certify before relying on it")
        return result
    result = None
    small = mp_cost(data, heads) <= MP_BUDGET
    try:
        result = _build_at(data, prec=FLOAT64, why="auto: float64 holds the construction", **args)
        ratio = rounding_ratio(result)
        v = result.verification
        condition = v.sigma_max_Z / v.sigma_min_Z if v.sigma_min_Z > 0 else float("inf")
        rho = float(np.linalg.norm(data.E, axis=2).max())
        feature_rounding = 2 * rho * max(e.rounding_estimate for e in result.heads)
        # float64 must keep the rank step and, through the readout (cond Z), the labels. The
        # output prediction is a worst case; when it fails on a small problem, measure instead.
        if ratio <= 1.0 and feature_rounding * condition <= v.tol:
            return result
        if ratio <= 1.0 and small:
            exact, rounding = _errors_at(result.weights, data, MEASURE_BITS)
            if exact + EVALUATION_SLACK * rounding <= v.tol:
                result.precision_reason = (f"auto: float64; the outputs of these weights, evaluated at "
                                           f"{MEASURE_BITS} bits, are within {exact:.3g} of the labels, and "
                                           f"float64 evaluation moves them by {rounding:.3g}")
                return result
        why = (f"auto: in float64, MATH.md §5's worst-case estimate puts the rounding at {ratio:.3g}x what "
               f"keeps the rank and up to {feature_rounding * condition:.3g} on the outputs (allowed "
               f"{v.tol:.3g}); largest c_h = {max(e.scale for e in result.heads):.3g}, cond(Z) = {condition:.3g}")
    except ConstructionError as exc:
        if not small:
            raise ConstructionError(f"{exc}; the mpmath path is beyond its budget at this size "
                                    f"(T·H·d·(n+T) > {MP_BUDGET})") from None
        feature_rounding, condition = 1.0, float("inf")
        why = f"auto: float64 failed ({str(exc).split(';')[0]})"
    bits = bits_needed(feature_rounding, condition)
    if bits > precision_mod.MAX_BITS:
        raise ConstructionError(f"{why}; the prediction asks for {bits} bits, beyond the most this engine "
                                f"uses ({precision_mod.MAX_BITS}): the data is too close to degenerate")
    if not small and result is not None:
        result.precision_reason = (f"{why}; the mpmath path ({bits} bits) is beyond its budget for this size, "
                                   "so these are the float64 weights: certify before relying on them")
        return result
    return _build_at(data, prec=Precision(bits), why=f"{why}; {bits} bits bring the predicted output "
                     f"rounding below {precision_mod.ERROR_TARGET:g}", **args)


def mp_cost(data: Dataset, H: int) -> int:
    """Rough count of scalar operations of the mpmath path: forward pass plus the T × T solves."""
    return data.T * H * data.d * (data.n + data.T)


def _errors_at(weights: Weights, data: Dataset, bits: int) -> tuple[float, float]:
    """For float64 weights: ``max |f − y|`` with ``f`` evaluated at ``bits`` bits (their exact
    model, nearly), and ``max |f_64 − f|``, the rounding of numpy's float64 forward pass."""
    out64 = forward(data.E, data.X, weights)
    prec = Precision(bits)
    with prec.working():
        w = weights.map(prec.asarray, bits=bits)
        out = forward(prec.asarray(data.E), prec.asarray(data.X), w)
        return (float(np.abs(out - prec.asarray(data.Y)).max()),
                float(np.abs(prec.asarray(out64) - out).max()))


def rounding_ratio(result: BuildResult) -> float:
    """MATH.md §5 for a build: the largest ratio, over heads, of the rounding of the group's
    features (``2ρ`` times the predicted logit rounding, ``rounding_estimate``) to what the rank
    step can absorb, ``σ_min(N)`` of the reduced new rows. Above 1, the build's precision is not
    enough to trust the rank step."""
    rho = float(np.linalg.norm(precision_mod.to_float(result.data.E), axis=2).max())
    worst = 0.0
    for e in result.heads:
        room = e.sigma_min_N
        worst = max(worst, 2 * rho * e.rounding_estimate / room if room > 0 else float("inf"))
    return worst


def _build_at(data: Dataset, *, heads: int, head_dim: int | None, value_dim: int | None, skip: bool,
              seed: int, tol: float, scale: str, progress: Progress | None, trace: bool,
              prec: Precision, why: str) -> BuildResult:
    """:func:`build` at one precision."""
    clock = time.perf_counter()
    timings: dict[str, float] = {}
    d_h, d_v, H = head_dim, value_dim, heads
    threads = blas_threads()
    # Up to the readout BLAS runs on one thread: many small operations, no OpenBLAS worker left
    # busy-waiting beside the construction's own two threads (construct.linalg.blas_limit), and
    # weights whose bits do not depend on the core count.
    with blas_limit(1), prec.working():
        k = validate(data, H, d_h, d_v)
        T, n, d = data.T, data.n, data.d
        timings["validate"] = time.perf_counter() - clock

        clock = time.perf_counter()
        groups = partition(data.X, k)
        timings["partition"] = time.perf_counter() - clock

        clock = time.perf_counter()
        traces: list[HeadTrace] | None = [] if trace else None
        data_p = Dataset(prec.asarray(data.E), prec.asarray(data.X), prec.asarray(data.Y))
        W_K, W_Q, Z, factor, evidence = _construct_heads(data_p, groups, H, d_h, seed, scale, progress,
                                                         threads > 1, traces, prec)
        timings["heads"] = time.perf_counter() - clock

        clock = time.perf_counter()
        factor.add_features(H * d)                                   # the factor now covers all of Z
        factor.commit()
        R = getattr(factor, "R", None)
        B = min_norm_solve(Z, R, readout_target(data_p.Y, data_p.X, skip))
        W_V, W_O, W_D = readout_weights(B, H, d, d_v)
        # The weights are numbers of exactly prec.bits bits: what the file stores and what verify
        # and certify evaluate.
        W_K, W_Q, W_V, W_O, W_D = (prec.rounded(A) for A in (W_K, W_Q, W_V, W_O, W_D))
        weights = sealed(W_K, W_Q, W_V, W_O, W_D, skip=skip, bits=prec.bits)
        timings["readout"] = time.perf_counter() - clock

    clock = time.perf_counter()
    with prec.working(), scipy_threads(threads):                     # as verify: one BLAS pool at work
        # Z was computed head by head with the forward pass's own function on these very W_K, W_Q,
        # so it is the forward pass's Z (at high precision, recomputed from the rounded weights);
        # the outputs go through the model's readout.
        if not prec.is_float64:
            Z = feature_matrix(data_p.E, data_p.X, weights)
        verification = check(Z, R, weights, data_p, tol)
    timings["verify"] = time.perf_counter() - clock
    result = BuildResult(weights=weights, data=data, k=k, capacity=capacity(H, n, d_h), heads=evidence,
                         verification=verification, seed=seed, timings=timings, trace=traces or [],
                         scale=scale, precision=str(prec), precision_reason=why)
    if not verification.passed:
        raise ConstructionError(
            f"verification failed at {prec}: rank Z = {verification.rank_Z} of T = {T}, max |f − y| = "
            f"{verification.max_abs_error:.3g} (allowed {verification.tol:.3g}); σ_min(Z) = "
            f"{verification.sigma_min_Z:.3g}; largest scale used: {max(e.scale for e in evidence):.3g}. "
            + ("Float64 cannot hold this construction (MATH.md §5): use precision auto or more bits"
               if prec.is_float64 else "raise the precision"))
    return result


def evidence_dict(result: BuildResult) -> dict:
    """The evidence of a build as plain JSON-ready data (without the arrays)."""
    w, data = result.weights, result.data
    return {
        "T": data.T, "n": data.n, "d": data.d, "d_o": data.d_o,
        "H": w.H, "d_h": w.d_h, "d_v": w.d_v, "skip": w.skip, "k": result.k, "capacity": result.capacity,
        "parameters": param_count(w.H, w.d, w.d_h, w.d_v, w.d_o),
        "heads_used": len(result.heads), "scale": result.scale,
        "precision": {"arithmetic": result.precision, "bits": result.weights.bits or 53,
                      "why": result.precision_reason, "rounding_ratio": rounding_ratio(result)},
        "verification": result.verification.to_dict(),
        "heads": [asdict(e) for e in result.heads],
        "seed": result.seed, "timings_s": result.timings,
    }
