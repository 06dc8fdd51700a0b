"""The model's outputs where float64's own rounding reaches the tolerance.

Two kinds of data make float64's rounding of the logits far larger than ``u·|ℓ|``:

- **Shared contexts.** The construction's later heads have large scales, so the logits are
  large and their rounding (about ``u·|ℓ|``) moves the softmax weights by far more than ``u``.
  At H = 256 (n = 32, d = 64) the float64 forward pass reports 7e-12 and the exact model's error
  is 2.2e-8, above the default tolerance.
- **Square contexts** (``n = d``, independent). Claim 1's key map ``U (X_S^T X_S)^{-1} X_S^T``
  is as ill-conditioned as the group's ``n`` queries in ``d = n`` dimensions, so its products
  cancel: at H = 4, n = d = 64 the float64 forward pass reports 6e-15 and the exact model's
  error is 1.1e-7.

In both, the readout, solved against the float64 ``Z``, reproduces the labels for *that* ``Z``
while the exact model (and any other float64 evaluation, in another order of operations) is off
by far more. Two tools, for float64 weights:

- :func:`rounding_visible`: evaluate the model a second time in another order of operations
  (on a shared context the logits as ``X · (W_Q W_K^T E^T)``, on independent ones as
  ``E ((W_K W_Q^T) x)``, instead of ``E (W_K (W_Q^T x))``; the values folded before the
  softmax); where the two float64 evaluations differ by more than a fraction of the tolerance,
  float64 cannot tell whether the labels hold; so too where the rounding that every order
  shares could move an output by the tolerance: the logits' at the size of their terms (``|ℓ|``,
  or the root sum of squares of its terms where they cancel), and the values' (``Σ_hj p_hj
  |e_j|ᵀ|W_V,h W_O,h W_D|``, a few roundings each). A pre-layer's outputs, rounded once to
  float64 and read by both, are no evaluation's rounding: weights with one are evaluated in
  double words (:mod:`construct.verify`). The cost is one more forward pass and a few products
  of magnitudes. It is a detector, not a bound: the certificate is what proves.
- :func:`outputs`: then the outputs in double words (:func:`construct.dword.outputs`), within
  about ``u²·cond`` of the exact model: what ``verify`` reports, and the residual the build
  refines its readout against (iterative refinement, the residual computed in double words, the
  correction solved with the float64 factor the construction already has).
"""

from __future__ import annotations

import math

import numpy as np

from . import dword
from .arith import FLOAT64, Arithmetic
from .arith.threads import row_blocks
from .model import Weights, head_groups

# Float64 rounding counts as visible when two evaluations differ by more than this fraction of
# the allowed error.
VISIBLE = 1 / 16
# Roundings counted per term of the values' sum p_hj e_j^T B_h in the estimate of what every
# float64 order shares: the exponential, the normalizer, the product and the sums each round at
# about u of the term's size (a review's case: 1.9 u beyond the outputs' one).
VALUE_ROUNDINGS = 4


def shared_context(E: np.ndarray) -> bool:
    """Every example has the same context. Contexts of their own mostly differ already in the
    second example: that one context is compared first, before the whole array."""
    if E.shape[0] > 1 and not np.array_equal(E[1], E[0]):
        return False
    return bool(np.all(E == E[:1]))


def reordered_outputs(weights: Weights, E, X, ar: Arithmetic = FLOAT64):
    """The float64 outputs (T, d_o) in another order of operations than
    :func:`construct.model.forward`'s: ``E`` is one shared context (n, d), host NumPy, or one
    context per example (T, n, d), in the arithmetic ``ar`` with ``X`` and the weights."""
    return _reordered(weights, E, X, ar)[0]


def _reordered(weights: Weights, E, X, ar: Arithmetic = FLOAT64):
    """:func:`reordered_outputs`, and for each example an estimate of how far the rounding that
    every float64 evaluation shares could move its outputs (T,): each logit's (:func:`_moved`,
    summed over the heads) and the values' at the size of their terms, :data:`VALUE_ROUNDINGS`
    roundings each (``4u Σ_hj p_hj |e_j|ᵀ|B_h|`` with the skip connection's ``4u |x|ᵀ|W_D|``,
    the largest over the outputs; on contexts of their own bounded by the largest token's norm
    times ``Σ_h ‖B_h[:, o]‖``). Every evaluation
    rounds the logits it forms, whatever its order, so two of them can agree where both are far
    from the exact model (a logit ``10^17 + 1`` is ``10^17`` in either; terms of 4.5e15 that
    cancel to 2 give 2.5 or 3 in either); and a pre-layer's outputs, rounded once to float64,
    are what both read."""
    if E.ndim == 3:
        return _reordered_per_example(weights, E, X, ar)
    H, d_v = weights.H, weights.d_v
    out = X @ weights.W_D if weights.skip else np.zeros((X.shape[0], weights.d_o))
    moved = np.zeros(X.shape[0])
    # Σ|terms| of each output: the skip connection's, then every head's values (below).
    value_sizes = np.abs(X) @ np.abs(weights.W_D) if weights.skip else np.zeros((X.shape[0], weights.d_o))
    e_X, a_E = _row_exponents(FLOAT64, X), _exponent(FLOAT64, E)
    X_unit, E_unit, E_abs = np.ldexp(X, -e_X[:, None]), np.ldexp(E, -a_E), np.abs(E)
    for h in range(H):
        W_O = weights.W_O[h * d_v:(h + 1) * d_v]
        logits = X @ (weights.W_Q[h] @ (weights.W_K[h].T @ E.T))                 # (T, n)
        values = E @ (weights.W_V[h] @ (W_O @ weights.W_D))                       # (n, d_o)
        s = np.exp(logits - logits.max(axis=1, keepdims=True))
        total = s.sum(axis=1, keepdims=True)
        out += (s @ values) / total
        spread = values.max(axis=0, initial=-np.inf) - values.min(axis=0, initial=np.inf)   # (d_o,)
        half_range = np.max(spread, initial=0.0) / 2
        # Each logit's terms, root-sum-squared through the three products that form it, from
        # every factor at unit scale (powers of two, so that no square overflows).
        a_K, a_Q = _exponent(FLOAT64, weights.W_K[h]), _exponent(FLOAT64, weights.W_Q[h])
        K, Q = np.ldexp(weights.W_K[h], -a_K), np.ldexp(weights.W_Q[h], -a_Q)
        M = K.T @ E_unit.T                                                           # (d_h, n)
        P = Q @ M                                                                    # (d, n)
        spread2 = X_unit**2 @ (P**2 + Q**2 @ (M**2 + (K**2).T @ (E_unit**2).T))
        rss = np.ldexp(np.sqrt(spread2), (e_X + a_E + a_K + a_Q)[:, None])
        moved += _moved(np, np.maximum(np.max(np.abs(logits), axis=1), np.max(rss, axis=1)),
                        _outside_top(FLOAT64, s, logits) / total[:, 0], half_range)
        value_sizes += (s @ (E_abs @ np.abs(weights.W_V[h] @ (W_O @ weights.W_D)))) / total   # |e_j|ᵀ|B_h|
    return out, moved + VALUE_ROUNDINGS * dword.U * np.max(value_sizes, axis=1, initial=0.0)


def _outside_top(ar: Arithmetic, shifted, logits):
    """The softmax's weight outside its largest entry, ``Σ_{j ≠ j*} e^{ℓ_j − ℓ_max}``, over the last
    axis, from ``shifted = exp(logits − max)``: summed directly, not as ``total − 1``, which is 0
    once every other weight is below ``2^-53`` however much they matter (ties at the top count)."""
    xp, n = ar.xp, logits.shape[-1]
    top = xp.argmax(logits, axis=-1)
    positions = xp.reshape(ar.constant(np.arange(n)), (1,) * (logits.ndim - 1) + (n,))
    return xp.sum(xp.where(positions == top[..., None], 0.0, shifted), axis=-1)


def _moved(xp, largest, p_rest, half_range):
    """How far rounding each of a softmax's logits by ``u`` times ``largest`` could move
    ``Σ_j p_j c_j``, for values within ``half_range`` of a midpoint and ``p_rest`` the weight
    outside the largest one (:func:`_outside_top` over the total): the weights move by factors
    within ``e^{±2uL}`` and still sum to 1 (so only the values' spread about the midpoint
    counts), and where one weight holds nearly all (saturation) only the rest moves, on both
    sides of the sum. ``largest`` is the larger of ``|ℓ|`` and the root sum of squares of the
    logit's terms through the products that form it (on contexts of their own a bound on it by
    Cauchy–Schwarz, with the largest token's norm): a dot product whose terms cancel is rounded
    at the terms' size, in every order (terms of 4.5e15 that cancel to 2 leave float64 2.5 or
    3). An estimate, for :func:`rounding_visible` (not a bound on float64's error)."""
    return xp.expm1(2 * dword.U * largest) * xp.minimum(2 * p_rest, 1.0) * half_range


def _reordered_per_example(weights: Weights, E, X, ar: Arithmetic):
    """:func:`reordered_outputs` on one context per example: per head the key map
    ``N = W_K W_Q^T`` (d, d) is formed first, the logits are ``E (N x)``, and the values
    ``E (W_V W_O W_D)`` are folded before the softmax weighs them. In blocks of rows, as the
    forward pass runs (two halves on two threads inside a session), and the heads in groups
    (:func:`construct.model.head_groups`): ``N x`` for a group in one product, the logits by
    products that read a block's contexts once per group. On the CPU the folded values take the
    heads in spans as wide as a block's contexts (``d // d_o`` heads), each span one product with
    the block, whatever the groups: with one output and groups of 8 heads a product per group
    (8 columns) took 2.9 ms a block against 1.7 ms for the 64 at once (n = 32, d = 64, one
    thread, best of 50).

    Each ``N`` is formed from ``W_K`` and ``W_Q`` scaled by powers of two to unit size, and each
    query ``x`` is scaled to unit size too, by its own power of two; the scales come back on
    ``N x``, rounded once: weights of data far from unit scale (``2^±665``, say) would otherwise
    give products that underflow where the forward pass's order stays in range, and one scale
    for every query would take a query far below the largest to 0."""
    xp = ar.xp
    T, d = X.shape
    H, n, d_o = weights.H, E.shape[1], weights.d_o
    span = max(1, d // d_o)             # heads whose folded values take no more room than the block
    # Spans across groups where blocks of rows are small (the CPU's): a span's softmax is held
    # until it is weighed, a few arrays of a block's size, which for all T rows at once (CuPy's
    # arithmetic) are each as large as E; there each group is weighed on its own.
    wide = ar.cache_rows
    groups = [_reordered_group(weights, ar, h0, h1) for h0, h1 in head_groups(H, d, ar, T)]
    d_v = weights.d_v
    values = xp.concat([weights.W_V[h, ...] @ (weights.W_O[h * d_v:(h + 1) * d_v, ...] @ weights.W_D)
                        for h in range(H)], axis=1)                             # (d, H·d_o)
    out, moved = ar.zeros((T, d_o)), ar.zeros((T,))
    # Σ_h ‖B_h[:, o]‖ per output: with a context's largest token norm, Cauchy–Schwarz's bound on
    # Σ_hj p_hj |e_j|ᵀ|B_h[:, o]| (the weights p_hj of each head sum to 1).
    folded = xp.reshape(values, (d, H, d_o))
    top = xp.max(xp.abs(folded), axis=0)                            # each column's norm at unit scale
    scale = xp.where(top > 0, top, 1.0)
    value_norms = xp.sum(scale * ar.vector_norm(folded / scale, axis=0), axis=0)        # (d_o,)
    W_D_abs = xp.abs(weights.W_D)

    def part(lo: int, hi: int) -> None:
        for r0, r1 in row_blocks(lo, hi, ar.cache_rows):
            block, x, m = E[r0:r1, ...], X[r0:r1, ...], r1 - r0
            o = x @ weights.W_D if weights.skip else ar.zeros((m, d_o))
            shift = ar.zeros((m,))
            flat, e = xp.reshape(block, (m * n, d)), _row_exponents(ar, x)
            x = ar.ldexp(x, -e[:, None])                                       # unit scale
            # For the logits' terms: each context's largest token norm (at unit scale: no square
            # overflows) and the queries' squares.
            e_E = _row_exponents(ar, xp.reshape(block, (m, n * d)))
            unit_E = ar.ldexp(block, -e_E[:, None, None])
            norms = xp.sqrt(xp.max(xp.sum(unit_E * unit_E, axis=2), axis=1))                # (m,)
            del unit_E
            x2 = xp.sum(x * x, axis=1)                                                     # ‖x‖² (unit scale)
            pending: list = []                  # (softmax, largest logit size, weight off the top) of heads not yet weighed
            done = 0                            # heads weighed

            def weigh() -> None:                # the pending heads' values, a span at a time
                nonlocal o, shift, done
                s, largest, p_rest = [xp.concat([p[i] for p in pending], axis=1) if len(pending) > 1
                                      else pending[0][i] for i in range(3)]
                for g0 in range(0, s.shape[1], span):
                    g1 = min(s.shape[1], g0 + span)
                    columns = slice((done + g0) * d_o, (done + g1) * d_o)
                    p = xp.reshape(xp.permute_dims(s[:, g0:g1, :], (0, 2, 1)), (m, 1, n * (g1 - g0)))
                    c = xp.reshape(flat @ values[:, columns], (m, n * (g1 - g0), d_o))          # e_j^T c_h
                    o = o + xp.reshape(xp.matmul(p, c), (m, d_o))                          # Σ_hj s_hj e_j^T c_h
                    c = xp.reshape(c, (m, n, g1 - g0, d_o))
                    half_range = xp.max(xp.max(c, axis=1) - xp.min(c, axis=1), axis=2) / 2            # (m, heads)
                    shift = shift + xp.sum(_moved(xp, largest[:, g0:g1], p_rest[:, g0:g1], half_range), axis=1)
                done += s.shape[1]
                pending.clear()

            for keys, keys2, shifts in groups:
                unit = xp.reshape(x @ keys, (m, -1, d))                                    # N x at unit scale
                w = ar.ldexp(unit, e[:, None, None] + shifts[None, :, None])
                logits = xp.matmul(w, xp.matrix_transpose(block))                          # (m, heads, n)
                del w
                if pending and (wide is None or sum(p[0].shape[1] for p in pending) + logits.shape[1] > span):
                    weigh()
                top = ar.softmax_shift(logits)                 # softmax(logits, ar), with its parts:
                shifted = ar.exp(logits - top)
                total = xp.sum(shifted, axis=-1, keepdims=True)
                # The root sum of squares of each logit's terms, through N and N x and e^T (N x):
                # where they cancel, rounding goes by their size, not |ℓ|. Σ_k e_k² t_k with
                # t_k = (N x)_k² + Σ_i S_ki x_i² is at most ‖e‖² (max_k (N x)_k² + ‖x‖² max S):
                # no product with the contexts, nor with the queries, a second time.
                t = xp.max(unit * unit, axis=2) + x2[:, None] * keys2[None, :]             # (m, heads)
                spread = xp.sqrt(t) * norms[:, None]
                del unit
                rss = ar.ldexp(spread, (e + e_E)[:, None] + shifts[None, :])
                largest = xp.maximum(xp.maximum(top[..., 0], -xp.min(logits, axis=2)), rss)
                pending.append((shifted / total, largest, _outside_top(ar, shifted, logits) / total[..., 0]))
            weigh()
            out[r0:r1, ...] = o
            # The values' own rounding at the size of their terms, Σ_hj p_hj |e_j|ᵀ|c_h| (and the
            # skip connection's |x|ᵀ|W_D|), bounded by the largest token's norm (Cauchy–Schwarz).
            sizes = ar.ldexp(norms, e_E)[:, None] * value_norms[None, :]
            if weights.skip:
                sizes = sizes + xp.abs(X[r0:r1, ...]) @ W_D_abs
            moved[r0:r1] = shift + VALUE_ROUNDINGS * dword.U * xp.max(sizes, axis=1)
    with ar.session():                                   # the rows on every core
        ar.rows(part, T)
    return out, moved


def _reordered_group(weights: Weights, ar: Arithmetic, h0: int, h1: int):
    """For heads ``h0..h1−1`` of :func:`_reordered_per_example`: their key maps ``N_h^T`` at unit
    scale side by side (d, heads·d); for each, the largest ``S_ki = N_ki² + Σ_l K_kl² Q_il²``
    (heads,), the squares of the terms of ``N`` and of ``N x`` (their rounding); and the
    exponents (host integers) that bring ``x N_h^T`` back to ``N_h x`` for a query ``x`` at
    unit scale."""
    xp = ar.xp
    keys, squares, shifts = [], [], []
    for h in range(h0, h1):
        a, b = _exponent(ar, weights.W_K[h, ...]), _exponent(ar, weights.W_Q[h, ...])
        K, Q = ar.ldexp(weights.W_K[h, ...], -a), ar.ldexp(weights.W_Q[h, ...], -b)
        N = K @ xp.matrix_transpose(Q)                                                 # (d, d)
        keys.append(xp.matrix_transpose(N))
        squares.append(xp.max(N**2 + (K**2) @ xp.matrix_transpose(Q**2)))
        shifts.append(a + b)
    return xp.concat(keys, axis=1), xp.stack(squares), np.array(shifts, dtype=np.int64)


def _row_exponents(ar: Arithmetic, A) -> np.ndarray:
    """The binary exponent of each row's largest ``|a|`` (host integers; 0 for a zero or
    non-finite row)."""
    top = ar.to_host(ar.xp.max(ar.xp.abs(A), axis=1)) if A.shape[1] else np.zeros(A.shape[0])
    with np.errstate(invalid="ignore"):
        e = np.frexp(top)[1].astype(np.int64)
    return np.where(np.isfinite(top), e, 0)


def _exponent(ar: Arithmetic, A) -> int:
    """The binary exponent of ``max |A|`` (0 for a zero or non-finite ``A``)."""
    top = float(ar.to_host(ar.xp.max(ar.xp.abs(A)))) if A.size else 0.0
    return math.frexp(top)[1] if math.isfinite(top) else 0


def rounding_visible(weights: Weights, E, X, out, allowed: float, ar: Arithmetic = FLOAT64) -> bool:
    """Whether a second float64 evaluation of the model (:func:`reordered_outputs`: ``E`` one
    shared context (n, d) on the host, or (T, n, d) in ``ar`` with ``X``, ``out`` and the
    weights) differs from the outputs ``out`` by more than :data:`VISIBLE` of ``allowed`` (or
    is not finite), or float64's rounding of the outputs alone, ``u·max |f|``, does: below that
    no float64 evaluation can tell (tolerances near ``u``); or where rounding the logits alone
    could, at worst, move an output by ``allowed`` itself (:func:`_moved`): large logits round
    alike in every order."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        again, moved = _reordered(weights, E, X, ar)
        gap = again - out
        gap = float(ar.to_host(ar.xp.max(ar.xp.abs(gap)))) if gap.size else 0.0
        size = float(ar.to_host(ar.xp.max(ar.xp.abs(out)))) if out.size else 0.0
        moved = float(ar.to_host(ar.xp.max(moved))) if moved.size else 0.0
    # Two evaluations that agree to the last bit still round the outputs themselves (u·|f|), and
    # each logit they form: moved is that rounding's worst case (every logit's in the direction
    # that moves the output most), so it is held to the tolerance itself, not to a fraction of it
    # as the gap, a measurement, is (shared contexts at H = 64: 4.6e-10 where the exact model's
    # error and float64's differ by 1.4e-11). NaN where it overflows counts as visible.
    return not (max(gap, dword.U * size) <= VISIBLE * allowed and moved <= allowed)


def outputs(weights: Weights, E, X, probabilities: np.ndarray | None = None) -> dword.DW:
    """The model's outputs on one shared context ``E`` (n, d) or one context per example
    (T, n, d) in double words: ``hi + lo`` within about ``u²·cond`` of the exact model's, ``rad``
    a bound on the rest (not finite where the outputs overflow). :func:`gaps` subtracts labels.
    ``E`` and ``X`` are float64, or double words: a pre-layer's outputs (:func:`layer_inputs`).

    ``probabilities`` (T, H, n), if given, receives every example's softmax under every head in
    float64 (each within ``3u`` plus the double words' radii, relative), for
    :func:`changed_outputs`."""
    args = (weights.W_K, weights.W_Q, weights.W_V, weights.W_O, weights.W_D, weights.skip)
    with FLOAT64.session():
        return dword.outputs(E, X, *args, rows=FLOAT64.rows, probabilities=probabilities)


def layer_inputs(prelayer: str | None, E: np.ndarray, X: np.ndarray):
    """What the attention layer reads, for :func:`outputs`: ``(E, X)`` as given (host float64;
    ``E`` one shared context (n, d) or one per example), or after the pre-layer ``prelayer`` (a
    weights' name for it) as double words (:func:`construct.dword.mean_shift`). The
    pre-layer's outputs in float64 are each rounded by ``u·|e + m|``; taken as exact, that
    rounding passed through the attention layer moved the outputs by several percent of an
    error near ``u``."""
    if prelayer is None:
        return E, X
    if prelayer != "mean-shift":
        raise ValueError(f"layer_inputs: no double-word route for the pre-layer {prelayer!r}")
    return dword.mean_shift(E, X)


def gaps(out: dword.DW, Y: np.ndarray) -> np.ndarray:
    """``f − y`` from outputs ``out`` in double words, as ``(hi − y) + lo``: rounded once, to
    about ``u`` of its own size (rounding ``hi + lo`` first would leave half a unit of ``y``,
    and an error below that would read as 0 or as one unit); NaN where ``out`` is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        s, e = dword.two_sum(out.hi, -np.asarray(Y, dtype=np.float64))
        return np.where(np.isfinite(out.rad), s + (e + out.lo), np.nan)


def _value_change(old: Weights, new: Weights, E=None) -> np.ndarray:
    """``c_new − c_old`` in double words, rounded: ``c_h = E W_V,h W_O,h W_D`` (H, n, d_o) on a
    shared context ``E``, or ``B_h = W_V,h W_O,h W_D`` (H, d, d_o) without one."""
    def values(w: Weights) -> dword.DW:
        return (dword.value_maps(w.W_V, w.W_O, w.W_D) if E is None else
                dword.shared_values(E, w.W_V, w.W_O, w.W_D))
    c_new, c_old = values(new), values(old)
    delta = dword.add(c_new, dword.DW(-c_old.hi, -c_old.lo, c_old.rad))
    return delta.hi + delta.lo


def changed_outputs(out: dword.DW, probabilities: np.ndarray, old: Weights, new: Weights,
                    E) -> dword.DW:
    """The outputs of ``new`` from those of ``old`` (``out``, double words from :func:`outputs`
    with its ``probabilities``, and its ``E``), for weights that differ in ``W_V`` and ``W_O``
    alone: a readout corrected. Double words again, the change added without rounding ``out``
    (its ``rad`` is ``out``'s: the change's own error, below, is not in it).

    The model is ``f(t) = Σ_h Σ_j p_hj(t) c_hj(t) (+ x(t)^T W_D)`` with ``c_h(t) = E^(t) B_h``,
    ``B_h = W_V,h W_O,h W_D``: linear in the values, the attention ``p`` the same for both. So
    ``f_new = f_old + Σ_hj p_hj Δc_hj``, over the stored probabilities: on one shared context
    ``E`` (n, d), ``Δc`` computed in double words and rounded, the sum one float64 product of
    ``T × H·n`` by ``H·n × d_o``; on one context per example (``E`` (T, n, d)), ``ΔB`` in double
    words and rounded, ``Δc = E^(t) ΔB_h`` in float64 (within ``γ_d |E^(t)||ΔB_h|``). Instead of
    a second pass in double words. The error is at most about
    ``(4u + γ_{H·n+1}) Σ_hj p_hj |Δc_hj| + u |f|`` beyond ``out``'s own, plus
    ``γ_{d+2} Σ_hj p_hj |E^(t)||ΔB_h|`` on contexts of their own: where the correction is small,
    as a refinement's is, far below the error being corrected.

    Raises:
        ValueError: the weights differ in their attention, ``W_D`` or the skip connection.
    """
    same = (old.skip == new.skip and all(np.array_equal(getattr(old, k), getattr(new, k))
                                         for k in ("W_K", "W_Q", "W_D")))
    if not same:
        raise ValueError("changed_outputs: the two models must differ in W_V and W_O alone")
    T, H, n = probabilities.shape
    if dword.as_parts(E)[0].ndim == 2:
        delta = _value_change(old, new, E)                                                # (H, n, d_o)
        change = probabilities.reshape(T, H * n) @ delta.reshape(H * n, -1)
    else:
        if isinstance(E, dword.DW):    # a pre-layer's outputs: E.lo·ΔB is within the γ_{d+2} term
            E = E.hi
        delta = _value_change(old, new)                                                   # (H, d, d_o)
        change = np.zeros_like(out.hi)
        for h in range(H):
            change += np.einsum("tn,tno->to", probabilities[:, h, :], E @ delta[h])
    hi, e = dword.two_sum(out.hi, change)
    return dword.DW(hi, out.lo + e, out.rad)
