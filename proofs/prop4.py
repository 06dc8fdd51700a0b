"""Proposition 4: one attention layer creates A1 from A3.

A single head with skip connection, ``W_K W_Q^T = 0`` (uniform attention) and identity value and
output maps sends each token ``v ↦ v + mean_i e_i``. Its outputs' queries are A3's vectors
``x + mean_i e_i`` (so A3 becomes A1), and its outputs' contexts are ``e_j + mean_i e_i``, of full
rank by Lemma 2 with ``α = 1`` (so A2 is kept).
"""

from __future__ import annotations

import numpy as np

from construct.assumptions import a2_violations, kruskal_check
from construct.data import Dataset, as_dataset, checked
from construct.limits import integer
from construct.model import Weights, forward

from .check import Check, one_blas_thread

STATEMENT = "Proposition 4"


def uniform_layer(d: int) -> Weights:
    """The layer of the proof: one head, zero key/query, identity value, output and readout, skip."""
    zeros, eye = np.zeros((1, d, 1)), np.eye(d)
    return Weights(W_K=zeros, W_Q=zeros.copy(), W_V=eye[None], W_O=eye, W_D=eye, skip=True)


def apply_layer(data: Dataset) -> Dataset:
    """Every token (context tokens and the query) passed through :func:`uniform_layer`, by the model itself."""
    T, n, d = data.E.shape
    layer = uniform_layer(d)
    contexts = np.repeat(data.E, n, axis=0)                       # example t, once per token
    E_out = forward(contexts, data.E.reshape(T * n, d), layer).reshape(T, n, d)
    X_out = forward(data.E, data.X, layer)
    return as_dataset(E_out, X_out, data.Y)


@one_blas_thread
def check(data: Dataset, *, trials: int = 5000, seed: int = 0, layer=apply_layer) -> Check:
    """Proposition 4 on ``data``: A2 and A3 before the layer; after it, every token moved by its
    context's mean (``v ↦ v + mean_i e_i``, to rounding), and A1 and A2.

    Kruskal ranks are exact for small sets and sampled otherwise (:func:`kruskal_check`).
    ``layer``: the map checked (by default the proof's layer, run by the model itself).
    """
    data, trials, seed = checked(data), integer(trials, "trials"), integer(seed, "seed", 0)
    n, d = data.n, data.d
    a3 = kruskal_check(data.X + data.E.mean(axis=1), n, "x + mean_i e_i", trials, seed)
    out = layer(data)
    mean = data.E.mean(axis=1)
    # The shift: what the uniform head adds is the mean, up to the rounding of its sums (n and d
    # terms of size |E|): 4(n + d)u of the example's largest entry is far above it and far below
    # a wrong map. Relative to each example, at any scale (a floor of 1 let the identity pass on
    # data of size 1e-15; the largest example's size, a layer that shifted only that one), plus
    # what underflow may take from each of those terms.
    size = np.maximum(np.abs(data.E).max(axis=(1, 2), initial=0.0), np.abs(data.X).max(axis=1, initial=0.0))
    slack = 4 * (n + d) * (np.finfo(float).eps * size + np.finfo(float).smallest_subnormal)     # (T,)
    moved = np.maximum(np.abs(out.E - (data.E + mean[:, None, :])).max(axis=(1, 2), initial=0.0),
                       np.abs(out.X - (data.X + mean)).max(axis=1, initial=0.0))
    worst = int(np.argmax(moved / slack)) if moved.size else 0
    shift_error, slack = (float(moved[worst]), float(slack[worst])) if moved.size else (0.0, 0.0)
    a1_out = kruskal_check(out.X, n, "layer's queries", trials, seed)
    a2_out = a2_violations(out.E).size == 0
    hyp = {"contexts have full row rank (A2)": a2_violations(data.E).size == 0, "A3": a3.holds}
    q = {"A3_exact_rank": a3.exact_rank, "A3_sampled_fraction": a3.sampled_fraction,
         "A1_after_exact_rank": a1_out.exact_rank, "A1_after_sampled_fraction": a1_out.sampled_fraction,
         "A2_after": a2_out, "shift_error": shift_error, "shift_slack": slack, "layer_output": out}
    return Check(STATEMENT, hyp, bool(shift_error <= slack and a1_out.holds and a2_out), q)
