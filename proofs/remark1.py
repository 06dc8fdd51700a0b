"""Remark 1: if the queries only have Kruskal rank ``r < n``, Theorem 1 holds with ``k = min(r, n, d_h)``.

Groups of ``k`` examples (then ``k − 1``) need only ``k`` queries at a time to be independent, so
the construction runs with key/query dimension ``min(r, d_h)``; the weights are zero-padded to
``d_h`` columns, which changes nothing in the model.
"""

from __future__ import annotations

import numpy as np

from construct.assumptions import kruskal_rank
from construct.build import capacity
from construct.data import Dataset
from construct.model import Weights

from . import theorem1
from .check import Check, one_blas_thread, options

STATEMENT = "Remark 1"


@one_blas_thread
def check(data: Dataset, heads: int, head_dim: int | None = None, *, seed: int = 0) -> Check:
    """Remark 1 on ``data``: the exact Kruskal rank ``r`` of the queries sets ``k``, then Theorem 1."""
    data, heads, d_h, _ = options(data, heads, head_dim)
    r = kruskal_rank(data.X)
    if r is None:
        return Check(STATEMENT, {"queries' Kruskal rank computable exactly": False}, None, {})
    k = min(r, data.n, d_h)
    hyp = {"queries' Kruskal rank computable exactly": True, "k ≥ 1": k >= 1}
    q: dict = {"r": r, "k": k, "T": data.T}
    if k < 1:
        return Check(STATEMENT, hyp, None, q)
    q["capacity"] = capacity(heads, data.n, k)
    inner = theorem1.check(data, heads, head_dim=k, seed=seed)
    hyp.update(inner.hypotheses)
    if inner.conclusion:
        w = inner.quantities["result"].weights
        pad = ((0, 0), (0, 0), (0, d_h - k))
        q["weights"] = Weights(W_K=np.pad(w.W_K, pad), W_Q=np.pad(w.W_Q, pad), W_V=w.W_V, W_O=w.W_O,
                               W_D=w.W_D, skip=w.skip)
        q["max_abs_error"] = inner.quantities["max_abs_error"]
    return Check(STATEMENT, hyp, inner.conclusion, q)
