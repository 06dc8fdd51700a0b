"""Proposition 3 (ReLU comparison): a one-hidden-layer ReLU network on ``[vec(E); x]`` with ``m``
hidden units cannot memorize every A1/A2 dataset with more than ``m(d+2)+1`` examples.

The hard datasets share one full-rank context ``E = [I_n 0]`` and have queries in general
position. On them the context part of the first layer, ``W_E vec(E)``, is the same for every
example: it collapses into the bias. The network's outputs then depend on the parameters only
through ``m(d+2)+1`` numbers, so the Jacobian of the ``T`` outputs with respect to *all* the
parameters has rank at most ``m(d+2)+1``; with more examples the reachable label vectors form a
set of measure zero (Sard), and almost every labelling cannot be memorized.
:func:`check` verifies the collapse and the Jacobian rank at given parameters, on a dataset of
the statement's kind: one shared context, A1 and A2, and more than ``m(d+2)+1`` examples.
"""

from __future__ import annotations

from math import comb

import numpy as np

from construct.assumptions import EXACT_BUDGET, a2_violations, kruskal_check
from construct.data import Dataset, as_dataset
from construct.arith import EPS, numerical_rank
from construct.errors import InputError
from construct.limits import integer

from .check import Check, arrays, one_blas_thread

STATEMENT = "Proposition 3"


def hard_dataset(n: int, d: int, T: int, *, seed: int = 0) -> Dataset:
    """The proof's dataset: every context ``[I_n 0]`` (n, d), Gaussian queries, uniform labels."""
    rng = np.random.default_rng(seed)
    E = np.broadcast_to(np.eye(n, d), (T, n, d)).copy()
    return as_dataset(E, rng.standard_normal((T, d)), rng.random(T))


def relu_inputs(data: Dataset) -> np.ndarray:
    """The network's inputs ``[vec(E^(t)); x^(t)]``, shape (T, n·d + d)."""
    return np.hstack([data.E.reshape(data.T, -1), data.X])


def relu_params(m: int, n: int, d: int) -> int:
    """Parameters of the network: ``W_1`` (m, nd + d), ``b_1`` (m), ``w_2`` (m), ``b_2``."""
    return m * (n * d + d + 2) + 1


@one_blas_thread
def check(data: Dataset, W1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: float, *, trials: int = 5000,
          seed: int = 0) -> Check:
    """Proposition 3's argument on ``data`` for the network ``f(u) = w_2^T relu(W_1 u + b_1) + b_2``.

    Hypotheses: the statement's datasets, one shared context, A1 (every ``n`` queries
    independent: exact when at most 20,000 subsets, else the sampled test with ``trials``),
    A2, and ``T > m(d+2)+1`` (with fewer examples the proposition says nothing).

    Returns:
        A :class:`Check` with the Jacobian's rank, the collapsed count ``m(d+2)+1`` and ``T``.
    """
    trials, seed = integer(trials, "trials"), integer(seed, "seed", 0)
    T, n, d = data.E.shape
    W1, b1, w2 = arrays(W1=(W1, "m k"), b1=(b1, "m"), w2=(w2, "m"))
    if W1.shape[1] != n * d + d:
        raise InputError(f"W1: expected {n * d + d} columns (the network's input [vec(E); x] has n·d + d = "
                         f"{n * d + d} entries), got {W1.shape[1]}", what="invalid arrays")
    m = W1.shape[0]
    U = relu_inputs(data)
    pre = U @ W1.T + b1
    # The collapse: W_E vec(E) is one vector, so the pre-activations are W_x x + (b_1 + W_E vec(E)).
    W_E, W_x = W1[:, :n * d], W1[:, n * d:]
    collapsed = data.X @ W_x.T + (b1 + W_E @ data.E[0].ravel())
    collapse_err = float(np.abs(pre - collapsed).max())
    collapse_tol = (n * d + d + 1) * EPS * float((np.abs(U) @ np.abs(W1).T + np.abs(b1)).max())
    act = pre > 0
    J = np.hstack([                                               # ∂f/∂(W_1, b_1, w_2, b_2)
        ((act * w2)[:, :, None] * U[:, None, :]).reshape(T, -1),
        act * w2, np.maximum(pre, 0.0), np.ones((T, 1))])
    rank_J = numerical_rank(J)[0]
    collapsed_count = m * (d + 2) + 1
    # Every n queries independent is Kruskal rank ≥ n: only the n-subsets are enumerated (and
    # where they are, the sampled test decides nothing: one trial).
    exact = comb(T, n) <= EXACT_BUDGET
    a1 = kruskal_check(data.X, n, "queries", 1 if exact else trials, seed, budget=min(comb(T, n), EXACT_BUDGET))
    hyp = {"all contexts equal": bool(np.all(data.E == data.E[:1])),
           "contexts have full row rank (A2)": a2_violations(data.E).size == 0,
           "queries have Kruskal rank ≥ n (A1)": bool(a1.holds),
           "T > m(d+2)+1": T > m * (d + 2) + 1}
    q = {"T": T, "m": m, "collapsed_params": collapsed_count, "relu_params": relu_params(m, n, d),
         "jacobian_rank": rank_J, "collapse_error": collapse_err,
         "cannot_memorize_almost_every_labelling": T > collapsed_count}
    return Check(STATEMENT, hyp, bool(collapse_err <= collapse_tol and rank_J <= collapsed_count), q)
