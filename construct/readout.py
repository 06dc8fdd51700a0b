"""Stage 5: the readout (Step 2 of the proof).

With ``rank Z = T``, solve ``Z B = Y`` for ``B`` (H·d, d_o) with minimum norm, then factor
``B = blkdiag(W_V) W_O W_D``: ``W_D = [I_{d_o}; 0]``, ``W_O`` block ``h`` = ``[I_{d_o} 0; 0 0]``,
``W_V[h] = [B_h, 0]``. With the skip connection the target is ``Y − X[:, :d_o]`` (App. C).
"""

from __future__ import annotations

import numpy as np

from . import precision
from .linalg import gram_solve

_REFINEMENT_STEPS = 4


def min_norm_solve(Z: np.ndarray, R: np.ndarray | None, Y: np.ndarray) -> np.ndarray:
    """Minimum-norm ``B`` with ``Z B = Y``, given ``R`` from ``Z^T = Q R`` (so ``Z Z^T = R^T R``).

    At high precision (``mpf`` arrays) ``R`` is not needed: ``B = Z^T (Z Z^T)^{-1} Y``.

    ``B = Z^T R^{-1} R^{-T} Y`` (the semi-normal equations, which need no ``Q``), refined by
    iterative correction while the residual decreases: each step costs two triangular solves and
    two products with ``Z``, and brings the error from ``ε·cond(Z)²`` towards ``ε·cond(Z)``.
    """
    if precision.is_mp(Z):                                # R is not used: normal equations, exact enough
        return Z.T @ precision.gram_solve_rows(Z, Y)

    def step(rhs: np.ndarray) -> np.ndarray:
        return Z.T @ gram_solve(R, rhs)

    B = step(Y)
    r = Y - Z @ B
    best = np.abs(r).max()
    for _ in range(_REFINEMENT_STEPS):
        B_new = B + step(r)
        r_new = Y - Z @ B_new
        err = np.abs(r_new).max()
        if err >= best:
            break
        B, r, best = B_new, r_new, err
    return B


def readout_weights(B: np.ndarray, H: int, d: int, d_v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Factor ``B`` (H·d, d_o) into ``W_V`` (H, d, d_v), ``W_O`` (H·d_v, d), ``W_D`` (d, d_o); ``d_o ≤ min(d_v, d)``."""
    d_o = B.shape[1]
    prec = precision.of(B)
    W_V = prec.zeros((H, d, d_v))
    W_V[:, :, :d_o] = B.reshape(H, d, d_o)
    W_O = np.zeros((H * d_v, d))
    for h in range(H):
        W_O[h * d_v + np.arange(d_o), np.arange(d_o)] = 1.0
    W_D = np.zeros((d, d_o))
    W_D[np.arange(d_o), np.arange(d_o)] = 1.0
    return W_V, prec.asarray(W_O), prec.asarray(W_D)


def readout_target(Y: np.ndarray, X: np.ndarray, skip: bool) -> np.ndarray:
    """What ``Z B`` must equal: ``Y``, or ``Y − x[:d_o]`` with the skip connection."""
    return Y - X[:, :Y.shape[1]] if skip else Y
