"""Stage 6: verification with the model's own forward pass on the final weights.

Memorization holds when every output is within the tolerance of its label:
``max_t |f(E^(t), x^(t)) − y^(t)| ≤ tol · max(1, max |Y|)`` (relative to the labels' scale, so
rescaling labels does not change the verdict); the default ``tol`` is ``1e-8``. The rank of ``Z``
(the paper's Proposition 1) is decided with the arithmetic's one rank tolerance
(:meth:`construct.arith.Arithmetic.rank_tol`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from .accurate import gaps as gaps_from
from .accurate import layer_inputs as accurate_inputs
from .accurate import outputs as accurate_outputs
from .accurate import rounding_visible, shared_context
from .arith import FLOAT64, Arithmetic, gpu
from .arith.base import RowRank
from .arith.lapack import all_finite
from .data import Dataset, checked
from .errors import numpy_error_defaults
from .limits import allowed_error, require_memory, tolerance
from .model import (Weights, check_compatible, checked_weights, feature_matrix, forward_unchecked, layer_inputs,
                    logit_term_sizes, output_from_features)

DEFAULT_TOL = 1e-8

# Verification.outputs where some examples' double words overflowed and float64 measured them.
OVERFLOW_FALLBACK = "float64 where they overflow"

# float32 evaluation "survives" when every label is reproduced within this, relative to
# max(1, max|Y|): about 1000 float32 units of rounding (ε_32 ≈ 1.2e-7).
FLOAT32_TOL = 1e-4

# High-precision weights are evaluated with this many bits beyond their own: they are exact
# numbers at their bits, and large scales amplify the rounding of an evaluation at those same bits
# (a later head's scale near 1e9 took 165-bit weights from 2.3e-47 at 165 bits to 1.2e-41 for the
# exact model). With 32 more, what is reported is the exact model's error to about 2^-32 of that.
EXTRA_BITS = 32


@dataclass(frozen=True)
class Verification:
    """Evidence that weights memorize a dataset.

    Attributes:
        T: number of examples.
        rank_Z: numerical rank of the feature matrix ``Z``.
        sigma_min_Z, sigma_max_Z: its extreme singular values.
        rank_tol: the tolerance the rank was decided with.
        max_abs_error: ``max |f(E, x) − y|`` over the dataset.
        tol: allowed error, ``tol_rel · max(1, max |Y|)``.
        passed: every label reproduced within ``tol`` and ``rank Z = T``; never where some
            examples' double words overflowed (``outputs`` says so): float64's measure of those
            is reported, but the detector has judged it unreliable.
        device: where it ran (``"cpu"`` or ``"gpu"``), and ``device_reason`` why.
        outputs: how the outputs were evaluated: the arithmetic's own forward pass (its name), or
            ``"double words"`` where float64's rounding reaches the tolerance (shared contexts,
            :mod:`construct.accurate`); ``"double words, float64 where they overflow"`` where
            some examples' double words overflowed (outputs near 1e300) and float64's finite
            outputs gave their error (which cannot pass them).
        float64_error: where the outputs are in double words, the float64 evaluation's own
            ``max |f − y|`` (of the outputs from ``Z``; a float64 forward pass in another order,
            ``construct.forward``'s or an export's, rounds as much but not alike): what float64
            weights give in float64, which may miss the tolerance the exact model meets (square
            contexts). None otherwise (then it is ``max_abs_error``, or the weights are not
            float64's).
    """

    T: int
    rank_Z: int
    sigma_min_Z: float
    sigma_max_Z: float
    rank_tol: float
    max_abs_error: float
    tol: float
    passed: bool
    outputs: str = "float64"
    device: str = "cpu"
    device_reason: str = ""
    float64_error: float | None = None

    def to_dict(self) -> dict:
        """The fields as a dict; ``rank_Z`` None where it was not computed (``Z`` not finite:
        then the attribute is 0 and ``sigma_min_Z`` NaN)."""
        out = asdict(self)
        if self.rank_Z == 0 and math.isnan(self.sigma_min_Z):
            out["rank_Z"] = None
        return out


def check(ar: Arithmetic, Z, weights: Weights, data: Dataset, tol: float = DEFAULT_TOL,
          reduction=None, outputs=None, detect: bool = True, overwrite: bool = False,
          before_layer: Dataset | None = None) -> Verification:
    """Verify from a computed feature matrix ``Z`` (T, H·d) in arithmetic ``ar``, with ``data`` in it.

    ``reduction``: the row-space factor the construction grew over all of ``Z``, when there is
    one (the rank then comes from its triangular factor); otherwise the arithmetic factors ``Z``.
    ``outputs``: the model's outputs in double words (:class:`construct.dword.DW`), when the caller
    has them; their gaps to the labels are taken before rounding. Otherwise they
    come from ``Z``, and, for float64 weights on a shared context where a second float64
    evaluation shows rounding near the tolerance, again in double words (``detect=False``: the
    caller has already looked, as the build does). ``overwrite``: ``Z`` is the caller's to
    spend: once the outputs are known, the rank may factor it in place. ``before_layer``: with a
    pre-layer, the data as given (host float64), ``data`` holding the layer's outputs: the
    double words then take the layer's outputs in double words too.
    """
    allowed = allowed_error(tol, float(np.abs(ar.to_host(data.Y)).max()))
    how, sigma_above, err64, unsettled = ar.name, None, None, False
    float64 = weights.bits is None and ar.weights_bits is None
    with np.errstate(over="ignore", invalid="ignore"):        # overflow is a failure, not a warning
        if outputs is None or float64:
            out = output_from_features(Z, data.X, weights, ar)
            gaps = ar.to_host(out - data.Y)
        if outputs is None:
            if reduction is None and ar.xp is np and float64:
                sigma_above = _readout_sigma(weights, out, data.X)
            if detect and float64:
                outputs = _where_rounding_shows(ar, weights, data, out, allowed, before_layer)
        if outputs is not None:
            words, how = gaps_from(outputs, ar.to_host(data.Y)), "double words"
            if float64:
                err64 = _largest(np.abs(gaps).max())
                # Double words split products, which can overflow (logits near 1e300; a readout of
                # that size they take at unit scale) where float64's outputs are finite: there
                # float64's measure is reported, but it cannot pass them, since the detector has
                # just judged float64 unreliable.
                overflowed = ~np.all(np.isfinite(words), axis=1) & np.all(np.isfinite(gaps), axis=1)
                if overflowed.any():
                    words, how = np.where(overflowed[:, None], gaps, words), f"{how}, {OVERFLOW_FALLBACK}"
                    unsettled = True
            gaps = words
        err = _largest(np.abs(gaps).max())
    if Z.dtype != object and not _all_finite(ar, Z):   # overflowed logits: no rank
        return Verification(T=data.T, rank_Z=0, sigma_min_Z=float("nan"), sigma_max_Z=float("nan"),
                            rank_tol=float("nan"), max_abs_error=err, tol=allowed, passed=False, outputs=how,
                            float64_error=err64)
    r = _row_rank(ar, Z, data.E, reduction, overwrite, sigma_above)
    return Verification(T=data.T, rank_Z=r.rank, sigma_min_Z=r.sigma_min, sigma_max_Z=r.sigma_max,
                        rank_tol=r.tol, max_abs_error=err, tol=allowed,
                        passed=bool(err <= allowed and r.rank == data.T and not unsettled), outputs=how,
                        float64_error=err64)


def _largest(value) -> float:
    """A largest error as a float: ``inf`` where it is not finite (overflow, NaN)."""
    value = float(value)
    return value if np.isfinite(value) else float("inf")


def _all_finite(ar: Arithmetic, Z) -> bool:
    """Every entry of the float64 ``Z`` is finite (on the host, without a copy of ``Z``'s size)."""
    return all_finite(Z) if ar.xp is np else bool(ar.to_host(ar.xp.all(ar.xp.isfinite(Z))))


def _readout_sigma(weights: Weights, out: np.ndarray, X: np.ndarray) -> float | None:
    """``‖Z B‖_F / ‖B‖_F`` for the readout ``B`` (H·d, d_o) that maps features to outputs
    (``W_V,h W_O,h W_D`` for head ``h``), from the outputs ``out = Z B (+ X W_D)``; None where
    it is not a positive number.

    Where ``B``'s columns lie in the row space of ``Z`` (the construction's readout is a
    minimum-norm solution: they do), ``σ_min(Z) ≤ ‖Z B‖_F / ‖B‖_F``. It only steers the rank's
    method (:func:`construct.arith.lapack.row_factor`), so other weights cost time, not truth.
    """
    H, _, d_v = weights.W_V.shape
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):   # extreme scales: None
        M = (weights.W_O @ weights.W_D).reshape(H, d_v, -1)             # (H, d_v, d_o)
        B = np.matmul(weights.W_V, M)                                  # (H, d, d_o)
        ZB = out - X @ weights.W_D if weights.skip else out
        ratio = np.float64(np.linalg.norm(ZB)) / np.float64(np.linalg.norm(B))
    return float(ratio) if np.isfinite(ratio) and ratio > 0 else None


def _row_rank(ar: Arithmetic, Z, E, reduction=None, overwrite: bool = False,
              sigma_above: float | None = None) -> RowRank:
    """``ar.row_rank(Z, reduction)``; on a shared context with fewer tokens than dimensions
    (``n < d``), from ``Z``'s coordinates in the context's row space when they settle it.
    ``sigma_above``: what ``σ_min(Z)`` is expected to lie below (:func:`_readout_sigma`).

    Each head's features ``E_0^T s`` lie in the row space of the shared context ``E_0`` (n, d).
    With ``Q`` (d, n) an orthonormal basis of it (the QR of ``E_0^T``), ``P = Z (I_H ⊗ Q)`` has
    ``P P^T = Z Z^T``, so the same singular values, in ``H·n`` columns instead of ``H·d``: its QR
    (which these ill-conditioned matrices need) costs about 2.5 times less at ``n = d/2``. In
    floating point ``P`` moves by about ``u·√d·σ_max``, as much as a QR of ``Z`` itself does.
    The rank tolerance stays ``Z``'s; a rank below ``T`` is decided on ``Z``.
    """
    T, F = Z.shape
    if reduction is None and ar.weights_bits is None and T > 1 and E.shape[1] < E.shape[2]:
        H, n, d = F // E.shape[2], E.shape[1], E.shape[2]
        if H * n >= T and shared_context(ar.to_host(E)):
            xp = ar.xp
            Q, _ = xp.linalg.qr(xp.matrix_transpose(E[0, ...]))                 # (d, n)
            P = xp.reshape(xp.reshape(Z, (T * H, d)) @ Q, (T, H * n))
            r = ar.row_rank(P, overwrite=True, sigma_above=sigma_above)
            tol = ar.rank_tol(r.sigma_max, Z.shape)
            if r.sigma_min > tol:
                return RowRank(T, r.sigma_max, r.sigma_min, tol)
    return ar.row_rank(Z, reduction, overwrite, sigma_above)


def _where_rounding_shows(ar: Arithmetic, weights: Weights, data: Dataset, out, allowed: float,
                          before_layer: Dataset | None = None):
    """Float64 outputs ``out`` where a second float64 evaluation, in another order of operations,
    differs by a visible fraction of ``allowed`` (shared contexts, square ones), or where
    ``allowed`` is near float64's rounding of the outputs: the outputs in double words (host),
    on the pre-layer's outputs in double words where ``before_layer`` (the data it reads) is
    given. Otherwise None."""
    host, E, X = weights.map(ar.to_numpy), ar.to_host(data.E), ar.to_host(data.X)
    shared = shared_context(E)
    if shared:
        visible = rounding_visible(host, E[0], X, ar.to_host(out), allowed)
    else:                                      # the weights, E and X are in the arithmetic
        visible = rounding_visible(weights, data.E, data.X, out, allowed, ar)
    # After a pre-layer, both float64 evaluations read its outputs rounded once to float64, and
    # the mean it adds can cancel (tokens ±2^40): that rounding is no evaluation's, and no
    # estimate of theirs sees it. Such weights are evaluated in double words from the raw data,
    # except where those overflow (data near float64's top) and the detector saw nothing.
    if not visible and before_layer is None:
        return None
    if before_layer is not None:                # the pre-layer's outputs in double words, on the raw
        E, X = before_layer.E, before_layer.X   # contexts: ones that differ may shift to one float64 context
        shared = shared_context(E)
    with np.errstate(over="ignore", invalid="ignore"):
        E, X = accurate_inputs(weights.prelayer if before_layer is not None else None, E[0] if shared else E, X)
        words = accurate_outputs(host, E, X)
    if not visible and not np.all(np.isfinite(words.rad)):
        return None
    return words


@numpy_error_defaults
def verify(weights: Weights, data: Dataset, tol: float = DEFAULT_TOL, *, device: str = "cpu") -> Verification:
    """Recompute ``Z`` and the outputs from the weights and decide whether they memorize ``data``.

    With a pre-layer (``weights.prelayer``) the model is the two layers: ``Z`` is the attention
    layer's features on the pre-layer's outputs, computed here in the same arithmetic.

    High-precision weights are evaluated at :data:`EXTRA_BITS` more than their own precision
    (``weights.bits``), and more where their logits are large (:func:`evaluation_bits`), on the
    CPU: the exact model's error, not that of the rounding at their bits.
    ``device``: ``"cpu"``, ``"gpu"`` or ``"auto"``, as for :func:`construct.build`.

    Raises:
        InputError: the weights' dimensions do not match the data's, or ``tol`` is not a finite
            positive number.
    """
    weights, data, tol = checked_weights(weights), checked(data), tolerance(tol)
    check_compatible(weights, data.d, data.d_o)
    what = f"verifying T = {data.T} examples on H = {weights.H} heads"
    where = gpu.resolve(device)
    ar = gpu.arithmetic(where, None if weights.bits is None else evaluation_bits(weights, data))
    if isinstance(ar, gpu.CuPyFloat64):
        gpu.require_device_memory(ar, gpu.device_memory_estimate(data, weights.H), what)
    else:
        require_memory(8 * (2 * data.T * weights.H * data.d + 2 * data.T ** 2 + weights.H * data.d ** 2), what)
    with ar.working():
        E, X = layer_inputs(weights, ar.asarray(data.E), ar.asarray(data.X), ar)   # the pre-layer, if any
        data_ar = Dataset(E, X, ar.asarray(data.Y))
        w_ar = weights if ar.xp is np else weights.map(ar.asarray, bits=weights.bits)
        with ar.session(), np.errstate(over="ignore", invalid="ignore"):   # rows in parallel; overflow
            Z = feature_matrix(data_ar.E, data_ar.X, w_ar, ar, layered=True)                # is judged below, not warned
        with ar.heavy():                            # the rank: LAPACK on every thread
            v = check(ar, Z, w_ar, data_ar, tol, overwrite=True,
                      before_layer=data if weights.prelayer is not None else None)
    ran = "gpu" if isinstance(ar, gpu.CuPyFloat64) else "cpu"
    return replace(v, device=ran,
                   device_reason=where.why if ran == where.name else f"{weights.bits}-bit mpmath runs on the CPU")


# The most bits evaluation_bits adds for large logits' terms (logits of 2^4096 have no softmax).
MAX_LOGIT_BITS = 4096


def evaluation_bits(weights: Weights, data: Dataset) -> int:
    """The precision high-precision weights are evaluated at: :data:`EXTRA_BITS` more than their
    own, and more where the logits' terms are large. A softmax is exact to a relative ``δ`` where
    its logits are to an absolute ``δ``, and a ``p``-bit evaluation leaves each logit within
    about ``2^-p Σ|terms|``: logits whose terms reach ``2^k`` need ``k + 53 + EXTRA_BITS`` bits to
    be as exact as float64's units with the margin ``EXTRA_BITS`` gives (terms near ``2^91`` that
    differ by 3 were equal at 85 bits, and the model attended (1/2, 1/2) for (0.953, 0.047)).
    The terms' sizes ``|e|ᵀ|W_K||W_Q|ᵀ|x|`` are taken in float64, on the pre-layer's outputs if any."""
    with np.errstate(over="ignore", invalid="ignore"):
        E, X = layer_inputs(weights, data.E, data.X)
        sizes = [logit_term_sizes(E, X, FLOAT64.to_host(weights.W_K[h]),
                                  FLOAT64.to_host(weights.W_Q[h])).max(initial=0.0) for h in range(weights.H)]
        largest = max(sizes, default=0.0)
    k = MAX_LOGIT_BITS if not np.isfinite(largest) else max(0, math.frexp(largest)[1])
    return max(weights.bits + EXTRA_BITS, min(k, MAX_LOGIT_BITS) + 53 + EXTRA_BITS)


def float32_error(weights: Weights, data: Dataset) -> dict:
    """The forward pass with weights and data rounded to float32: does the memorization survive?

    Returns:
        ``{"max_abs_error": ..., "tol": FLOAT32_TOL · max(1, max|Y|), "survives": bool}``; the
        error is ``inf`` when float32 overflows (``null`` in JSON).
    """
    with np.errstate(over="ignore", invalid="ignore"):       # beyond float32's range: does not survive
        w32 = weights.map(lambda a: FLOAT64.to_host(a).astype(np.float32))
        out = forward_unchecked(data.E.astype(np.float32), data.X.astype(np.float32), w32).astype(np.float64)
        err = float(np.abs(out - data.Y).max()) if np.all(np.isfinite(out)) else float("inf")
    allowed = allowed_error(FLOAT32_TOL, float(np.abs(data.Y).max()))
    return {"max_abs_error": err, "tol": allowed, "survives": bool(err <= allowed)}
