"""The precision policy: float64 while it provably or measurably holds, mpmath otherwise.

``build(precision="auto")`` runs the construction in float64 and keeps the result when docs/math.md
§5's predicted rounding stays below what keeps the rank (each head's ``σ_min(N)``) and, through
the readout's conditioning, below the tolerance; on small problems a prediction that fails is
replaced by a measurement of the weights' exact outputs. Otherwise it rebuilds with mpmath at the
bits the prediction asks for (:func:`construct.precision.bits_needed`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import accurate, dword, enclose
from .arith import FLOAT64
from .data import Dataset
from .errors import ConstructionError
from .limits import allowed_error
from .model import Weights, forward
from .precision import ERROR_TARGET, FLOAT64 as F64, MAX_BITS, Precision, bits_needed

# The mpmath construction takes on problems up to this many operations, T·H·max(d, d_h)·(n + T)
# (mp_cost; seconds of Python); so does auto's measurement of float64 outputs (errors_at), which
# costs far less.
MP_BUDGET = 1_000_000
# auto keeps measured float64 weights when their exact outputs' error plus this many times the
# rounding of numpy's float64 forward pass stays within the tolerance: any other float64
# evaluation rounds in its own order (mpmath at 53 bits rounded 3x more than numpy on a
# near-degenerate problem hypothesis found).
EVALUATION_SLACK = 4


def logit_rounding(E: np.ndarray, X: np.ndarray, W_K: np.ndarray, W_Q: np.ndarray, eps: float = FLOAT64.eps) -> float:
    """docs/math.md §5's estimate of the rounding of the logits ``E^(t) W_K W_Q^T x^(t)`` over the examples.

    The standard bound for a product evaluated through its factors, ``γ_k ‖E‖ ‖W_K‖ ‖W_Q‖ ‖x‖``
    with ``γ_k ≈ k ε`` and ``k = d + d_h``. With a saturation scale ``c`` in ``W_K`` it contains
    the rank-one term's ``c ε ‖a‖ ‖b‖ ‖x‖ ‖E‖``; with nearly dependent tokens or queries it is the
    cancellation inside ``W_K W_Q^T``. Host float64 arrays.
    """
    E, X, W_K, W_Q = (FLOAT64.to_host(v) for v in (E, X, W_K, W_Q))
    if not E.size or not W_K.size:
        return 0.0
    k = E.shape[-1] + W_K.shape[1]
    norms = FLOAT64.vector_norm(E, axis=(1, 2)) * FLOAT64.vector_norm(X, axis=1)
    return float(k * eps * FLOAT64.norm2(W_K) * FLOAT64.norm2(W_Q) * norms.max())


def rounding_ratio(result) -> float:
    """docs/math.md §5 for a build: the largest ratio, over heads, of the rounding of the group's
    features (``2ρ`` times the predicted logit rounding, ``rounding_estimate``) to what the rank
    step can absorb, ``σ_min(N)`` of the reduced new rows. Above 1, the build's precision is not
    enough to trust the rank step."""
    rho = _largest_token_norm(result.data)
    worst = 0.0
    for e in result.heads:
        room = e.sigma_min_N
        worst = max(worst, 2 * rho * e.rounding_estimate / room if room > 0 else float("inf"))
    return worst


def _largest_token_norm(data: Dataset) -> float:
    """``max_{t,i} ‖e_i^(t)‖``, scaled by the largest entry first: tokens near float64's top have
    norms whose squares would overflow (the norm itself may still; then it is ``inf``)."""
    E = FLOAT64.to_host(data.E)
    top = float(np.abs(E).max(initial=0.0))
    if not 0 < top < np.inf:
        return top
    return top * float(FLOAT64.vector_norm(E / top, axis=2).max())


def _prediction(result, data: Dataset) -> tuple[float, float]:
    """A float64 build's predicted feature rounding (docs/math.md §5: ``2ρ`` times the largest
    head's estimate) and the condition number of its ``Z`` (inf where ``σ_min`` is not positive)."""
    v = result.verification
    condition = v.sigma_max_Z / v.sigma_min_Z if v.sigma_min_Z > 0 else float("inf")
    return 2 * _largest_token_norm(data) * max(e.rounding_estimate for e in result.heads), condition


def mp_cost(data: Dataset, H: int, d_h: int | None = None) -> int:
    """Rough count of scalar operations of the mpmath path: forward pass plus the T × T solves,
    with key/query width ``d_h`` (default ``n``) where it exceeds ``d``."""
    return data.T * H * max(data.d, d_h or data.n) * (data.n + data.T)


def mpmath_size(data: Dataset, H: int, d_h: int | None = None) -> str | None:
    """How far a problem is beyond :data:`MP_BUDGET`, in words, or ``None`` within it: for an
    explicit mpmath precision, which runs at any size (auto would not use mpmath there)."""
    cost = mp_cost(data, H, d_h)
    if cost <= MP_BUDGET:
        return None
    times = cost / MP_BUDGET
    return (f"{times:.1f}x" if times < 10 else f"{times:,.0f}x") + (
        f" the largest size at which auto uses mpmath (T·H·max(d, d_h)·(n + T) = {cost:,}, "
        f"against {MP_BUDGET:,})")


def errors_at(weights: Weights, data: Dataset, layer_words=None) -> tuple[float, float]:
    """For float64 weights: upper bounds on ``max |f − y|`` of their exact model and on
    ``max |f_64 − f|``, the rounding of numpy's float64 forward pass, from the outputs in double
    words (:func:`construct.accurate.outputs`: within about ``u²·cond`` of the exact ones, with a
    rigorous radius; ``inf`` where they are not finite). Milliseconds where mpmath at 106 bits took
    seconds (3 s at T = 57 on a shared context).

    ``layer_words()``, if given: a pre-layer's outputs in double words (as the build's
    refinement takes them), where ``data`` holds that layer's float64 outputs: the exact model is
    then the two layers on the data the layer read, not this layer on ``data``'s rounded values."""
    out64 = forward(data.E, data.X, weights)
    if layer_words is not None:
        out = accurate.outputs(weights, *layer_words())
    else:
        E = data.E[0] if accurate.shared_context(data.E) else data.E
        out = accurate.outputs(weights, *accurate.layer_inputs(weights.prelayer, E, data.X))
    return dword.error_bound(out, data.Y), dword.error_bound(out, out64)


def choose(data: Dataset, heads: int, chosen, build_at: Callable, d_h: int | None = None,
           tol: float | None = None, layer_words=None):
    """The build at the precision ``chosen`` (a :class:`Precision`, or ``"auto"``), with key/query
    width ``d_h`` (default ``n``). ``layer_words``: as in :func:`errors_at`, where ``data`` are a
    pre-layer's float64 outputs.

    ``build_at(prec, why)`` runs the construction at one precision and returns its result. With
    ``tol``, auto's mpmath path aims below a sixteenth of the error it allows, where that is
    below :data:`construct.precision.ERROR_TARGET`.

    Raises:
        ConstructionError: float64 failed and mpmath is beyond its budget at this size, or the
            prediction asks for more than :data:`construct.precision.MAX_BITS` bits.
    """
    if chosen != "auto":
        result = build_at(chosen, "requested")
        beyond = None if chosen.is_float64 else mpmath_size(data, heads, d_h)
        if beyond is not None:
            result.precision_reason += f"; {beyond}"
        if chosen.is_float64 and rounding_ratio(result) > 1:
            result.precision_reason += (f"; docs/math.md §5 predicts rounding {rounding_ratio(result):.3g}x what "
                                        "keeps the rank: the float64 check passed, certify before relying on it")
        return result
    result = None
    small = mp_cost(data, heads, d_h) <= MP_BUDGET
    try:
        result = build_at(F64, "auto: float64 holds the construction")
        ratio = rounding_ratio(result)
        v = result.verification
        feature_rounding, condition = _prediction(result, data)
        # float64 must keep the rank step and, through the readout (cond Z), the labels. The
        # output prediction is a worst case; when it fails on a small problem, measure instead.
        if ratio <= 1.0 and feature_rounding * condition <= v.tol:
            return result
        if ratio <= 1.0 and small:
            exact, rounding = errors_at(result.weights, data, layer_words)
            if exact + EVALUATION_SLACK * rounding <= v.tol:
                exact, rounding = (enclose.round3(x, up=True) for x in (exact, rounding))   # as stated: up
                result.precision_reason = (f"auto: float64; the exact outputs of these weights (enclosed in "
                                           f"double words) are within {exact:.3g} of the labels, and float64 "
                                           f"evaluation moves them by at most {rounding:.3g}")
                return result
        why = (f"auto: in float64, docs/math.md §5's worst-case estimate puts the rounding at {ratio:.3g}x what "
               f"keeps the rank and up to {feature_rounding * condition:.3g} on the outputs (allowed "
               f"{v.tol:.3g}); largest c_h = {max(e.scale for e in result.heads):.3g}, cond(Z) = {condition:.3g}")
    except ConstructionError as exc:
        if not small:
            raise ConstructionError(f"{exc}; the mpmath path is beyond its budget at this size "
                                    f"(T·H·max(d, d_h)·(n+T) > {MP_BUDGET})") from None
        # A float64 build that ran to the end and failed its check still predicts its rounding.
        feature_rounding, condition = (1.0, float("inf")) if exc.result is None else _prediction(exc.result, data)
        why = f"auto: float64 failed ({str(exc).split(';')[0]})"
    target = ERROR_TARGET
    if tol is not None:
        target = min(target, allowed_error(tol, float(np.abs(data.Y).max(initial=0.0))) / 16)
    bits = bits_needed(feature_rounding, condition, target)
    if bits > MAX_BITS:
        raise ConstructionError(f"{why}; the prediction asks for {bits} bits, beyond the most this engine "
                                f"uses ({MAX_BITS}): the data is too close to degenerate")
    if not small and result is not None:
        result.precision_reason = (f"{why}; the mpmath path ({bits} bits) is beyond its budget for this size, "
                                   "so these are the float64 weights: certify before relying on them")
        return result
    return build_at(Precision(bits), f"{why}; {bits} bits bring the predicted output rounding below "
                                     f"{target:g}")
