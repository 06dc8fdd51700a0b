"""Stage 5: the readout (Step 2 of the proof).

With ``rank Z = T``, solve ``Z B = Y`` for ``B`` (H·d, d_o) with minimum norm, then factor
``B = blkdiag(W_V) W_O W_D``: ``W_D = [I_{d_o}; 0]``, ``W_O`` block ``h`` = ``[I_{d_o} 0; 0 0]``,
``W_V[h] = [B_h, 0]``. With the skip connection the target is ``Y − X[:, :d_o]`` (App. C).
"""

from __future__ import annotations

import numpy as np

from .arith import FLOAT64, Arithmetic


def readout_target(Y, X, skip: bool):
    """What ``Z B`` must equal: ``Y``, or ``Y − x[:d_o]`` with the skip connection."""
    return Y - X[:, :Y.shape[1]] if skip else Y


def min_norm_solve(Z, reduction, Y, ar: Arithmetic = FLOAT64):
    """Minimum-norm ``B`` with ``Z B = Y`` for ``Z`` of full row rank, given the row-space factor
    the construction grew (:meth:`Arithmetic.min_norm_solve`)."""
    return ar.min_norm_solve(Z, reduction, Y)


def readout_weights(B, H: int, d: int, d_v: int, ar: Arithmetic = FLOAT64):
    """Factor ``B`` (H·d, d_o) into ``W_V`` (H, d, d_v), ``W_O`` (H·d_v, d), ``W_D`` (d, d_o); ``d_o ≤ min(d_v, d)``."""
    d_o = B.shape[1]
    W_V = ar.zeros((H, d, d_v))
    W_V[:, :, :d_o] = ar.xp.reshape(B, (H, d, d_o))
    W_O = np.zeros((H * d_v, d))
    for h in range(H):
        W_O[h * d_v + np.arange(d_o), np.arange(d_o)] = 1.0
    W_D = np.zeros((d, d_o))
    W_D[np.arange(d_o), np.arange(d_o)] = 1.0
    return W_V, ar.asarray(W_O), ar.asarray(W_D)
