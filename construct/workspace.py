"""What the head loop builds up, and the step both kinds of head share (Claim 1 on a group)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .accurate import shared_context
from .arith import Arithmetic
from .arith.threads import row_blocks
from .claim1 import claim1_factors, interior_targets
from .data import Dataset
from .errors import ConstructionError
from .model import head_features
from .policy import logit_rounding

# Fresh random draws (targets, separator) before a numerical failure is reported; each draw
# succeeds almost surely, so a repeated failure means the data is (numerically) degenerate.
MAX_DRAWS = 8


@dataclass
class Workspace:
    """The construction's state between heads.

    Attributes:
        ar: the arithmetic everything is computed in.
        E, X: the data in ``ar``; ``E_low`` the contexts in ``ar.low`` (float64).
        token_norms: ``ρ_t``, the largest token norm of each context (host float64).
        W_K, W_Q: the key and query maps so far, (H, d, d_h) in ``ar``.
        Z: the feature matrix, (T, H·d), filled head by head.
        reduction: the row-space factor of the fitted rows of ``Z`` (``ar.row_reduction``).
        rng: the seed's random stream (targets, separators).
    """

    ar: Arithmetic
    E: object
    X: object
    E_low: object
    token_norms: np.ndarray
    W_K: object
    W_Q: object
    Z: object
    reduction: object
    rng: np.random.Generator

    @classmethod
    def start(cls, ar: Arithmetic, data: Dataset, H: int, d_h: int, seed: int, inputs=None) -> Workspace:
        """``inputs(ar)``, if given: the layer's ``(E, X)`` in ``ar`` itself (a pre-layer's outputs
        at the build's precision), in place of ``data``'s float64 ones."""
        E, X = (ar.asarray(data.E), ar.asarray(data.X)) if inputs is None else inputs(ar)
        E_low = ar.lowered(E)
        Z = ar.zeros((data.T, H * data.d))
        norms = ar.low.to_host(ar.low.xp.max(ar.low.vector_norm(E_low, axis=2), axis=1))
        context = data.E[0] if shared_context(data.E) else None
        return cls(ar, E, X, E_low, norms, ar.zeros((H, data.d, d_h)), ar.zeros((H, data.d, d_h)), Z,
                   ar.row_reduction(Z, context), np.random.default_rng(seed))

    @property
    def d(self) -> int:
        return self.E.shape[2]

    def features(self, h: int) -> None:
        """Head ``h``'s columns of ``Z``: the forward pass's own features on the current weights."""
        d, ar = self.d, self.ar

        def rows(lo: int, hi: int) -> None:
            # In blocks that stay in cache between the logits and the mix, which read each context
            for a, b in row_blocks(lo, hi, ar.cache_rows):
                self.Z[a:b, h * d:(h + 1) * d] = head_features(self.E[a:b, ...], self.X[a:b, ...], self.W_K[h, ...],
                                                               self.W_Q[h, ...], ar)
        ar.rows(rows, self.E.shape[0])

    def rounding(self, h: int, S: range) -> float:
        """docs/math.md §5's estimate of the rounding of group ``S``'s logits under head ``h``."""
        ar = self.ar
        return logit_rounding(ar.to_host(self.E[S.start:S.stop, ...]), ar.to_host(self.X[S.start:S.stop, ...]),
                              ar.to_host(self.W_K[h, ...]), ar.to_host(self.W_Q[h, ...]), ar.eps)

    def target_error(self, h: int, S: range, targets) -> float:
        """``max |z^(t) − E^(t)T s^(t)|`` over group ``S``: how exactly the head hit its targets."""
        ar, d = self.ar, self.d
        rows = ar.token_mix(self.E[S.start:S.stop, ...], targets)
        return float(np.abs(ar.to_host(self.Z[S.start:S.stop, h * d:(h + 1) * d] - rows)).max())


@dataclass(frozen=True)
class GroupFit:
    """Claim 1 on a group: targets whose reduced rows have full row rank, and the head's factors.

    Attributes:
        targets: the attention targets ``s^(t)``, (m, n), in the simplex at the working precision.
        K, Q: Claim 1's factors of ``W_S = K Q^T``, (d, m) each.
        M: the reduced new rows ``E^(t)T s^(t) − f^(t)``, (m, d).
        sigma_min_M: ``σ_min(M)``.
        draws: target draws used.
    """

    targets: object
    K: object
    Q: object
    M: object
    sigma_min_M: float
    draws: int


def fit_group(ws: Workspace, S: range, F) -> GroupFit:
    """Claim 1 on group ``S`` with targets whose reduced rows ``M = E^T s − F`` have full row rank.

    Raises:
        ConstructionError: no such targets after :data:`MAX_DRAWS` draws.
    """
    ar = ws.ar
    E_S, X_S = ws.E[S.start:S.stop, ...], ws.X[S.start:S.stop, ...]
    n = E_S.shape[1]
    for draw in range(1, MAX_DRAWS + 1):
        s = ar.asarray(interior_targets(ws.rng, len(S), n))
        s = s / ar.xp.sum(s, axis=1, keepdims=True)             # in the simplex at the working precision
        M = ar.token_mix(E_S, s) - F
        rank, sv = ar.numerical_rank(M)
        if rank == len(S):
            K, Q = claim1_factors(E_S, X_S, s, ar)
            return GroupFit(s, K, Q, M, float(sv[-1]), draw)
    raise ConstructionError(f"examples {S.start}..{S.stop - 1}: no targets with linearly independent reduced "
                            f"rows after {MAX_DRAWS} draws (contexts nearly dependent across examples?)")
