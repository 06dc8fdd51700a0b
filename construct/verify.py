"""Stage 6: verification with the model's own forward pass on the final weights.

Memorization holds when every output is within the tolerance of its label:
``max_t |f(E^(t), x^(t)) − y^(t)| ≤ tol · max(1, max |Y|)`` (relative to the labels' scale, so
rescaling labels does not change the verdict); the default ``tol`` is ``1e-8``. The rank of ``Z``
(the paper's Proposition 1) is decided with :func:`construct.linalg.rank_tol`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .data import Dataset
from .linalg import numerical_rank, qr_r, rank_tol, triangular_extremes
from .model import Weights, check_compatible, feature_matrix, output_from_features

DEFAULT_TOL = 1e-8


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


def check(Z: np.ndarray, R: np.ndarray, weights: Weights, data: Dataset,
          tol: float = DEFAULT_TOL) -> Verification:
    """Verify from a computed feature matrix ``Z`` (T, H·d) and the ``R`` of ``Z^T = Q R``.

    ``R`` is used when ``Z`` has at least as many columns as rows; otherwise ``rank Z < T`` and
    the rank comes from the singular values of ``Z`` itself.
    """
    out = output_from_features(Z, data.X, weights)
    err = float(np.abs(out - data.Y).max())
    if Z.shape[1] < Z.shape[0]:                     # fewer features than examples: rank Z < T
        rank, s = numerical_rank(Z)
        s_max, s_min, rtol = float(s[0]), 0.0, rank_tol(s[0], Z.shape)
    else:
        s_max, s_min = triangular_extremes(R)
        rtol = rank_tol(s_max, Z.shape)
        # σ_min(Z) > tolerance ⇔ all T singular values count: rank Z = T.
        rank = data.T if s_min > rtol else numerical_rank(R)[0]
    allowed = tol * max(1.0, float(np.abs(data.Y).max()))
    return Verification(T=data.T, rank_Z=rank, sigma_min_Z=s_min, sigma_max_Z=s_max, rank_tol=rtol,
                        max_abs_error=err, tol=allowed, passed=bool(err <= allowed and rank == data.T))


def verify(weights: Weights, data: Dataset, tol: float = DEFAULT_TOL) -> Verification:
    """Recompute ``Z`` and the outputs from the weights and decide whether they memorize ``data``.

    Raises:
        InputError: the weights' dimensions do not match the data's.
    """
    check_compatible(weights, data.d, data.d_o)
    Z = feature_matrix(data.E, data.X, weights)
    return check(Z, qr_r(Z.T), weights, data, tol)
