"""Theorem 1: under A1, A2, ``n ≤ d``, ``d_o ≤ d_v``, ``d_o ≤ d``, an MHA layer with ``H`` heads
memorizes ``T ≤ H(k−1)+1`` examples, ``k = min(n, d_h)``, with ``Θ(H d (d_h + d_v))`` parameters.

The proof is the construction: :func:`check` decides each hypothesis, runs :func:`construct.build`
and verifies the weights with the model's own forward pass.
"""

from __future__ import annotations

from construct.build import build, capacity
from construct.data import Dataset
from construct.errors import ConstructError
from construct.limits import integer, tolerance
from construct.model import param_count
from construct.verify import DEFAULT_TOL

from . import prop1
from .check import Check, a1_status, machine_limit, one_blas_thread, options, weaker_than_a1

STATEMENT = "Theorem 1"


def hypotheses(data: Dataset, heads: int, d_h: int, d_v: int) -> dict[str, bool]:
    """Theorem 1's hypotheses for this dataset and model shape (A1 through the partition condition)."""
    k = min(data.n, d_h)
    hyp = prop1.hypotheses(data, k, min(data.T, capacity(heads, data.n, d_h)))
    hyp.update({"d_o ≤ d_v": data.d_o <= d_v, "d_o ≤ d": data.d_o <= data.d,
                "T ≤ H(k−1)+1": data.T <= capacity(heads, data.n, d_h)})
    return hyp


@one_blas_thread
def check(data: Dataset, heads: int, head_dim: int | None = None, value_dim: int | None = None, *,
          skip: bool = False, seed: int = 0, tol: float = DEFAULT_TOL, trace: bool = False) -> Check:
    """Theorem 1 on ``data``: the construction's weights reproduce every label within ``tol``.

    A False conclusion is a float64 failure of the construction (``construction_error``), not a
    counterexample: the theorem is about exact arithmetic. A1 is decided through the partition
    condition, which it implies (what the construction needs); quantity ``A1`` says whether A1
    itself holds, and where it fails the check is named for the weaker statement.
    """
    data, heads, d_h, d_v = options(data, heads, head_dim, value_dim)
    seed, tol = integer(seed, "seed", 0), tolerance(tol)
    hyp = hypotheses(data, heads, d_h, d_v)
    a1_line, a1 = a1_status(data.X, data.n)
    q: dict = {"T": data.T, "capacity": capacity(heads, data.n, d_h),
               "parameters": param_count(heads, data.d, d_h, d_v, data.d_o), "A1": a1_line}
    statement = weaker_than_a1(STATEMENT, a1)
    if not all(hyp.values()):
        return Check(statement, hyp, None, q)
    try:
        result = build(data, heads, head_dim=d_h, value_dim=d_v, skip=skip, seed=seed, tol=tol, trace=trace)
    except ConstructError as exc:
        if machine_limit(exc):
            raise
        return Check(statement, hyp, False, {**q, "construction_error": str(exc)})
    v = result.verification
    q.update(rank_Z=v.rank_Z, max_abs_error=v.max_abs_error, tol=v.tol, result=result)
    return Check(statement, hyp, v.passed, q)
