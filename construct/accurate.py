"""The model's outputs where float64's own rounding reaches the tolerance (shared contexts).

On a shared context the construction's later heads have large scales, so the logits are large
and their rounding (about ``u·|ℓ|``) moves the softmax weights by far more than ``u``. The
readout, solved against the float64 ``Z``, then reproduces the labels for *that* ``Z`` while the
exact model (and any other float64 evaluation, in another order of operations) is off by up to
about a thousand times more: at H = 256 (n = 32, d = 64) the float64 forward pass reports 7e-12
and the exact model's error is 2.2e-8, above the default tolerance.

Two tools, both for float64 weights on a shared context:

- :func:`rounding_visible`: evaluate the model a second time in another order of operations
  (the logits as ``X · (W_Q W_K^T E^T)`` instead of ``E (W_K (W_Q^T x))``, the values folded before
  the softmax); where the two float64 evaluations differ by more than a fraction of the
  tolerance, float64 cannot tell whether the labels hold. The cost is one more forward pass.
  It is a detector, not a bound: the certificate is what proves.
- :func:`outputs`: then the outputs in double words (:func:`construct.dword.shared_outputs`),
  within about ``u²·cond`` of the exact model: what ``verify`` reports, and the residual the build
  refines its readout against (one step of iterative refinement, the residual computed in double
  words, the correction solved with the float64 factor the construction already has).
"""

from __future__ import annotations

import numpy as np

from . import dword
from .arith import FLOAT64
from .model import Weights

# Float64 rounding counts as visible when two evaluations differ by more than this fraction of
# the allowed error.
VISIBLE = 1 / 16


def shared_context(E: np.ndarray) -> bool:
    """Every example has the same context."""
    return bool(np.all(E == E[:1]))


def reordered_outputs(weights: Weights, E: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The float64 outputs (T, d_o) on one shared context ``E`` (n, d), in another order of
    operations than :func:`construct.model.forward`'s."""
    H, d_v = weights.H, weights.d_v
    out = X @ weights.W_D if weights.skip else np.zeros((X.shape[0], weights.d_o))
    for h in range(H):
        logits = X @ (weights.W_Q[h] @ (weights.W_K[h].T @ E.T))                 # (T, n)
        values = E @ (weights.W_V[h] @ (weights.W_O[h * d_v:(h + 1) * d_v] @ weights.W_D))   # (n, d_o)
        s = np.exp(logits - logits.max(axis=1, keepdims=True))
        out += (s @ values) / s.sum(axis=1, keepdims=True)
    return out


def rounding_visible(weights: Weights, E: np.ndarray, X: np.ndarray, out: np.ndarray, allowed: float) -> bool:
    """Whether a second float64 evaluation of the model on the shared context ``E`` differs from
    the outputs ``out`` by more than :data:`VISIBLE` of ``allowed`` (or is not finite)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        gap = np.abs(reordered_outputs(weights, E, X) - out).max(initial=0.0)
    return not gap <= VISIBLE * allowed


def outputs(weights: Weights, E: np.ndarray, X: np.ndarray, probabilities: np.ndarray | None = None) -> np.ndarray:
    """The model's outputs on one shared context ``E`` (n, d), rounded to float64 from double
    words: within about ``u`` of the exact model's (not finite where those overflow).

    ``probabilities`` (T, H, n), if given, receives every example's softmax under every head in
    float64 (each within ``3u`` plus the double words' radii, relative), for
    :func:`changed_outputs`."""
    with FLOAT64.session():
        out = dword.shared_outputs(E, X, weights.W_K, weights.W_Q, weights.W_V, weights.W_O, weights.W_D,
                                   weights.skip, rows=FLOAT64.rows, probabilities=probabilities)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(out.rad), out.hi + out.lo, np.nan)


def changed_outputs(out: np.ndarray, probabilities: np.ndarray, old: Weights, new: Weights,
                    E: np.ndarray) -> np.ndarray:
    """The outputs of ``new`` from those of ``old`` (``out``, from :func:`outputs` with its
    ``probabilities``), for weights that differ in ``W_V`` and ``W_O`` alone: a readout corrected.

    On one context the model is ``f(t) = Σ_h Σ_j p_hj(t) c_hj (+ x(t)^T W_D)`` with
    ``c_h = E W_V,h W_O,h W_D``: linear in the values, the attention ``p`` the same for both. So
    ``f_new = f_old + Σ_hj p_hj Δc_hj``, with ``Δc`` computed in double words and rounded, and the
    sum in float64 over the stored probabilities: one product of ``T × H·n`` by ``H·n × d_o``
    instead of a second pass in double words. Its error is at most about
    ``(4u + γ_{H·n+1}) Σ_hj p_hj |Δc_hj| + u |f|`` beyond ``out``'s own: where the correction is
    small, as a refinement's is, that is far below the error being corrected.

    Raises:
        ValueError: the weights differ in their attention, ``W_D`` or the skip connection.
    """
    same = (old.skip == new.skip and all(np.array_equal(getattr(old, k), getattr(new, k))
                                         for k in ("W_K", "W_Q", "W_D")))
    if not same:
        raise ValueError("changed_outputs: the two models must differ in W_V and W_O alone")
    c_new = dword.shared_values(E, new.W_V, new.W_O, new.W_D)
    c_old = dword.shared_values(E, old.W_V, old.W_O, old.W_D)
    delta = dword.add(c_new, dword.DW(-c_old.hi, -c_old.lo, c_old.rad))                   # (H, n, d_o)
    T, H, n = probabilities.shape
    return out + probabilities.reshape(T, H * n) @ (delta.hi + delta.lo).reshape(H * n, -1)
