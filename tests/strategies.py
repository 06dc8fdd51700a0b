"""Hypothesis strategies that generate valid domain objects (datasets satisfying A1/A2)."""

import numpy as np
from hypothesis import strategies as st

from construct.data import as_dataset


@st.composite
def shapes(draw, max_n=5, max_extra_d=4):
    n = draw(st.integers(1, max_n))
    d = n + draw(st.integers(0, max_extra_d))
    return n, d


@st.composite
def datasets(draw, T=None, max_n=5, shared=None):
    """A dataset with full-rank contexts and queries in general position (almost surely)."""
    n, d = draw(shapes(max_n=max_n))
    n = max(n, 2) if d > 1 else n
    T = T if T is not None else draw(st.integers(1, 12))
    d_o = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    shared = draw(st.booleans()) if shared is None else shared
    rng = np.random.default_rng(seed)
    E = np.broadcast_to(rng.random((n, d)), (T, n, d)).copy() if shared else rng.random((T, n, d))
    return as_dataset(E, rng.standard_normal((T, d)), rng.random((T, d_o)))


seeds = st.integers(0, 2**32 - 1)
