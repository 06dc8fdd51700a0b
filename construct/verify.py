"""Stage 6: verification with the model's own forward pass on the final weights.

Memorization holds when every output is within the tolerance of its label:
``max_t |f(E^(t), x^(t)) − y^(t)| ≤ tol · max(1, max |Y|)`` (relative to the labels' scale, so
rescaling labels does not change the verdict); the default ``tol`` is ``1e-8``. The rank of ``Z``
(the paper's Proposition 1) is decided with :func:`construct.linalg.rank_tol`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from . import precision
from .data import Dataset, checked
from .limits import require_memory, tolerance
from .linalg import blas_threads, numerical_rank, rank_tol, row_factor, scipy_threads, triangular_extremes
from .model import Weights, check_compatible, checked_weights, feature_matrix, forward, output_from_features

DEFAULT_TOL = 1e-8

# float32 evaluation "survives" when every label is reproduced within this, relative to
# max(1, max|Y|): about 1000 float32 units of rounding (ε_32 ≈ 1.2e-7).
FLOAT32_TOL = 1e-4


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
        passed: every label reproduced within ``tol`` and ``rank Z = T``.
    """

    T: int
    rank_Z: int
    sigma_min_Z: float
    sigma_max_Z: float
    rank_tol: float
    max_abs_error: float
    tol: float
    passed: bool

    def to_dict(self) -> dict:
        return asdict(self)


def check(Z: np.ndarray, R: np.ndarray | None, weights: Weights, data: Dataset,
          tol: float = DEFAULT_TOL, extremes: tuple[float, float] | None = None) -> Verification:
    """Verify from a computed feature matrix ``Z`` (T, H·d) and an ``R`` with ``R^T R = Z Z^T``.

    ``R`` is None when ``Z`` has fewer columns than rows (then ``rank Z < T``) or is held at high
    precision: the rank comes from the singular values of ``Z`` itself. ``extremes``: ``(σ_max, σ_min)`` of
    ``Z`` when already known (:func:`construct.linalg.row_factor`).
    """
    with np.errstate(over="ignore", invalid="ignore"):        # overflow is a failure, not a warning
        out = output_from_features(Z, data.X, weights)
        err = float(np.abs(out - data.Y).max())
    if not np.isfinite(err):
        err = float("inf")
    if precision.is_mp(Z) or R is None:             # high precision, or fewer features than examples
        rank, s = numerical_rank(Z)                 # (then rank Z < T): singular values of Z
        s_max = float(s[0]) if s.size else 0.0
        s_min = float(s[data.T - 1]) if s.size >= data.T else 0.0
        rtol = float(rank_tol(s_max, Z.shape, precision.of(Z).eps))
    else:
        s_max, s_min = triangular_extremes(R) if extremes is None else extremes
        rtol = rank_tol(s_max, Z.shape)
        # σ_min(Z) > tolerance ⇔ all T singular values count: rank Z = T.
        rank = data.T if s_min > rtol else numerical_rank(R)[0]
    allowed = tol * max(1.0, float(np.abs(data.Y).max()))
    return Verification(T=data.T, rank_Z=rank, sigma_min_Z=s_min, sigma_max_Z=s_max, rank_tol=rtol,
                        max_abs_error=err, tol=allowed, passed=bool(err <= allowed and rank == data.T))


def verify(weights: Weights, data: Dataset, tol: float = DEFAULT_TOL) -> Verification:
    """Recompute ``Z`` and the outputs from the weights and decide whether they memorize ``data``.

    High-precision weights are evaluated at their own precision (``weights.bits``).

    Raises:
        InputError: the weights' dimensions do not match the data's, or ``tol`` is not a finite
            positive number.
    """
    weights, data, tol = checked_weights(weights), checked(data), tolerance(tol)
    check_compatible(weights, data.d, data.d_o)
    require_memory(8 * (2 * data.T * weights.H * data.d + 2 * data.T ** 2),
                   f"verifying T = {data.T} examples on H = {weights.H} heads")
    if weights.bits is None:
        with scipy_threads(blas_threads()):         # numpy's pool stays idle: see scipy_threads
            Z = feature_matrix(data.E, data.X, weights)
            if Z.shape[1] < Z.shape[0]:
                return check(Z, None, weights, data, tol)
            R, extremes = row_factor(Z)
            return check(Z, R, weights, data, tol, extremes)
    prec = precision.Precision(weights.bits)
    with prec.working():                            # evaluate at the weights' own precision
        data_p = Dataset(prec.asarray(data.E), prec.asarray(data.X), prec.asarray(data.Y))
        return check(feature_matrix(data_p.E, data_p.X, weights), None, weights, data_p, tol)


def float32_error(weights: Weights, data: Dataset) -> dict:
    """The forward pass with weights and data rounded to float32: does the memorization survive?

    Returns:
        ``{"max_abs_error": ..., "tol": FLOAT32_TOL · max(1, max|Y|), "survives": bool}``; the
        error is ``inf`` when float32 overflows (``null`` in JSON).
    """
    with np.errstate(over="ignore", invalid="ignore"):       # beyond float32's range: does not survive
        w32 = weights.map(lambda a: precision.to_float(a).astype(np.float32))
        out = forward(data.E.astype(np.float32), data.X.astype(np.float32), w32).astype(np.float64)
        err = float(np.abs(out - data.Y).max()) if np.all(np.isfinite(out)) else float("inf")
    allowed = FLOAT32_TOL * max(1.0, float(np.abs(data.Y).max()))
    return {"max_abs_error": err, "tol": allowed, "survives": bool(err <= allowed)}
