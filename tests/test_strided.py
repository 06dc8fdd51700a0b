"""LAPACK and BLAS on views of a larger Fortran array (construct.arith.strided): the same numbers
as SciPy's wrappers give on a contiguous copy, in place, touching only what they may."""

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, strategies as st
from scipy.linalg import lapack

from construct.arith import strided
from construct.arith.factor import RowSpaceFactor

from .strategies import seeds


def _view(rng, a: int, spare: int) -> tuple[np.ndarray, np.ndarray]:
    """An upper-triangular (a, a) view of a NaN-filled Fortran buffer ``spare`` rows and columns
    larger, and the buffer."""
    buffer = np.full((a + spare, a + spare), np.nan, order="F")
    R = buffer[:a, :a]
    R[...] = np.triu(rng.standard_normal((a, a))) + 4 * np.eye(a)
    return R, buffer


@given(seeds, st.integers(1, 40), st.integers(0, 9), st.integers(1, 12), st.sampled_from([1, 5, 32]))
def test_tpqrt_on_a_view_is_scipys_in_place(seed, a, spare, m, nb):
    rng = np.random.default_rng(seed)
    R, buffer = _view(rng, a, spare)
    strict_lower = np.tril(np.ones((a, a), bool), -1)
    R[strict_lower] = np.nan                        # tpqrt reads (and writes) the upper triangle only
    B0 = np.asfortranarray(rng.standard_normal((m, a)))
    expected_R, expected_V, expected_T, info = lapack.dtpqrt(0, min(nb, a), np.triu(R).copy(order="F"),
                                                             B0.copy(order="F"))
    assert info == 0
    B = B0.copy(order="F")
    T = strided.tpqrt(R, B, nb)
    assert np.array_equal(np.triu(R), np.triu(expected_R))          # bit for bit, in the buffer itself
    assert np.isnan(R[strict_lower]).all() and np.isnan(buffer[a:]).all() and np.isnan(buffer[:, a:]).all()
    assert np.array_equal(B, expected_V)
    # The block reflectors apply as SciPy's do (tpmqrt reads their triangles only).
    W0, Y0 = np.asfortranarray(rng.standard_normal((a, 3))), np.asfortranarray(rng.standard_normal((m, 3)))
    ours = lapack.dtpmqrt(0, B, T, W0.copy(order="F"), Y0.copy(order="F"), trans="T")
    theirs = lapack.dtpmqrt(0, expected_V, expected_T, W0.copy(order="F"), Y0.copy(order="F"), trans="T")
    assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
    # The orthogonal update: R'^T R' = R^T R + B^T B.
    G = np.triu(expected_R).T @ np.triu(expected_R)
    assert np.allclose(np.triu(R).T @ np.triu(R), G, atol=1e-12 * np.abs(G).max())


@given(seeds, st.integers(1, 40), st.integers(0, 9), st.integers(1, 6), st.sampled_from(["N", "T"]))
def test_tri_solve_on_a_view_solves(seed, a, spare, k, trans):
    rng = np.random.default_rng(seed)
    R, buffer = _view(rng, a, spare)
    R[np.tril(np.ones((a, a), bool), -1)] = np.nan  # never read
    U = np.triu(R).copy(order="F")
    for rhs in (rng.standard_normal((a, k)), rng.standard_normal(a)):
        before = rhs.copy()
        X = strided.tri_solve(R, rhs, trans)
        assert X.shape == rhs.shape and np.array_equal(rhs, before)
        expected = sla.solve_triangular(U, rhs, trans=trans)
        assert np.allclose(X, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
        product = (U.T if trans == "T" else U) @ X
        assert np.allclose(product, rhs, atol=1e-10 * max(1, np.abs(rhs).max()))


def test_strided_routines_refuse_views_they_would_misread_or_must_not_write():
    # A review: a reversed view (negative column stride) and one whose columns overlap were read
    # as other memory, a read-only R was written, and an empty system raised in a reshape.
    buffer = np.asfortranarray(np.triu(np.ones((6, 6))) + 5 * np.eye(6))
    with pytest.raises(ValueError, match="do not overlap"):
        strided.tri_solve(buffer[:3, ::-1][:, :3], np.ones(3))
    overlapping = np.lib.stride_tricks.as_strided(buffer, shape=(4, 4), strides=(8, 16))
    with pytest.raises(ValueError, match="do not overlap"):
        strided.tri_solve(overlapping, np.ones(4))
    frozen = buffer[:4, :4]
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        strided.tpqrt(frozen, np.asfortranarray(np.ones((2, 4))), 2)
    assert strided.tri_solve(np.zeros((0, 0), order="F"), np.zeros(0)).shape == (0,)
    assert strided.tri_solve(np.zeros((0, 0), order="F"), np.zeros((0, 3))).shape == (0, 3)


def test_strided_routines_refuse_other_layouts():
    R = np.triu(np.ones((4, 4))) + np.eye(4)
    with pytest.raises(ValueError, match="rows are adjacent"):
        strided.tri_solve(np.ascontiguousarray(R)[:3, :3], np.ones(3))       # a C-ordered view
    with pytest.raises(ValueError, match="rows are adjacent"):
        strided.tri_solve(R.astype(np.float32), np.ones(4))
    with pytest.raises(ValueError, match="Fortran float64 B"):
        strided.tpqrt(np.asfortranarray(R), np.ones((2, 4)), 2)             # B in C order
    with pytest.raises(ValueError, match="trans"):
        strided.tri_solve(np.asfortranarray(R), np.ones(4), "C")


@given(seeds, st.lists(st.integers(1, 5), min_size=2, max_size=6))
def test_the_factor_grows_in_one_buffer(seed, sizes):
    """The row-space factor borders and updates R where it lies: every commit's R is the leading
    block of one (T, T) array, and its strict lower part is zero (what the dense checks read)."""
    rng = np.random.default_rng(seed)
    T, F = sum(sizes), 6 * len(sizes) + 6
    Z = rng.standard_normal((T, F))
    factor = RowSpaceFactor(Z)
    factor._buffer = np.full((T, T), np.nan, order="F")        # what commit would take: unwritten is NaN
    stop = sizes[0]
    factor.stage(stop)
    buffers = set()
    for i, m in enumerate(sizes[1:], start=1):
        factor.advance(6 * i, stop + m)
        stop += m
        if factor.a:
            buffers.add(factor.R.__array_interface__["data"][0])
            assert factor.R.shape == (factor.a, factor.a)
            assert not np.tril(factor.R, -1).any() and not np.isnan(factor.R).any()
    factor.add_features(F)
    factor.commit()
    buffers.add(factor.R.__array_interface__["data"][0])
    assert len(buffers) == 1 and factor.R.flags.f_contiguous and factor.R.shape == (T, T)
    assert not np.tril(factor.R, -1).any() and not np.isnan(factor.R).any()
    G = Z @ Z.T
    assert np.allclose(factor.R.T @ factor.R, G, atol=1e-10 * np.abs(G).max())
