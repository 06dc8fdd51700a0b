"""Appendix C: with the skip connection ``o = x + W_O^T[a_1; …; a_H]``, memorize ``y − x[:d_o]``.

The skip adds ``x`` to the attention output before ``W_D = [I_{d_o}; 0]``, so the readout fits the
shifted labels ``y^(t) − x^(t)[:d_o]`` on the same feature matrix ``Z``; the capacity is unchanged.
"""

from __future__ import annotations

import numpy as np

from construct.data import Dataset
from construct.model import feature_matrix, forward, output_from_features
from construct.arith import for_bits

from . import theorem1
from .check import Check, one_blas_thread, weaker_than_a1

STATEMENT = "Appendix C"


@one_blas_thread
def check(data: Dataset, heads: int, head_dim: int | None = None, value_dim: int | None = None, *,
          seed: int = 0) -> Check:
    """App. C on ``data``: the skip-connection build reproduces ``Y`` and its readout fits ``Y − X[:, :d_o]``."""
    inner = theorem1.check(data, heads, head_dim, value_dim, skip=True, seed=seed)
    # Theorem 1's check names itself for the weaker statement where A1 fails: so does this one.
    statement = weaker_than_a1(STATEMENT, False if inner.statement != theorem1.STATEMENT else None)
    if inner.conclusion is not True:
        return Check(statement, inner.hypotheses, inner.conclusion, dict(inner.quantities))
    w = inner.quantities["result"].weights
    ar = for_bits(w.bits)                                   # evaluate at the weights' precision
    with ar.working():
        E, X, Y = (ar.asarray(v) for v in (data.E, data.X, data.Y))
        Z = feature_matrix(E, X, w)
        attention_part = output_from_features(Z, ar.zeros(X.shape), w)     # the model without x
        shifted = Y - X[:, :data.d_o]
        q = {"shifted_label_error": float(np.abs(attention_part - shifted).max()),
             "max_abs_error": float(np.abs(forward(E, X, w) - Y).max()), "skip": w.skip}
    q["tol"], q["A1"] = inner.quantities["tol"], inner.quantities["A1"]
    holds = w.skip and q["shifted_label_error"] <= q["tol"] and q["max_abs_error"] <= q["tol"]
    return Check(statement, inner.hypotheses, bool(holds), q)
