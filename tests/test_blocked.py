"""The blocked row-space factor for array-API arithmetics (the GPU's, construct.arith.blocked).

Checked here on NumPy and array-api-strict arrays, against LAPACK's triangular-pentagonal QR and
against the CPU's factor (construct.arith.factor.RowSpaceFactor); tests/test_gpu.py runs the same
comparisons on CuPy where a GPU is.
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.linalg import lapack

from construct import ConstructionError
from construct.arith import FLOAT64, Arithmetic, blocked
from construct.arith.base import compact_t
from construct.arith.blocked import BlockedRowFactor, tp_update
from construct.arith.factor import RowSpaceFactor

xps = pytest.importorskip("array_api_strict")
seeds = st.integers(0, 2**32 - 1)


def strict_arithmetic():
    return Arithmetic(xps, device=xps.Device("device1"), host_device=xps.Device("CPU_DEVICE"))


ARITHMETICS = {"numpy": lambda: FLOAT64, "strict": strict_arithmetic}


def upper(rng, k):
    R = np.triu(rng.standard_normal((k, k)))
    R[np.arange(k), np.arange(k)] += np.sign(np.diag(R)) * 2          # away from singular
    return R


@given(seeds, st.integers(1, 12), st.integers(1, 6), st.integers(1, 4), st.integers(1, 5), st.booleans(),
       st.sampled_from(sorted(ARITHMETICS)))
@example(0, 5, 3, 2, 2, True, "numpy")                    # identity reflectors: zero columns of B
@settings(max_examples=60, deadline=None)
def test_tp_update_is_lapacks_tpqrt(seed, k, p, m, panel, zero_columns, which):
    """[R; B] = Q [R'; 0] panel by panel gives LAPACK's R' (same reflectors), and Q^T [X; Y]."""
    ar = ARITHMETICS[which]()
    rng = np.random.default_rng(seed)
    R, B = upper(rng, k), rng.standard_normal((p, k))
    X, Y = rng.standard_normal((k, m)), rng.standard_normal((p, m))
    if zero_columns:
        B[:, ::2] = 0.0
    R_ref, V, Tq, info = lapack.dtpqrt(0, 1, np.asfortranarray(R), np.asfortranarray(B))
    assert info == 0
    X_ref, Y_ref, info = lapack.dtpmqrt(0, V, Tq, np.asfortranarray(X), np.asfortranarray(Y), trans="T")
    assert info == 0
    R_ar = ar.asarray(R)
    X_out, Y_out = tp_update(ar, R_ar, ar.asarray(B), (ar.asarray(X), ar.asarray(Y)), panel)
    scale = np.abs(R).max() + np.abs(B).max()
    assert np.allclose(ar.to_host(R_ar), np.triu(R_ref), atol=1e-13 * scale)
    assert np.all(ar.to_host(R_ar)[np.tril_indices(k, -1)] == 0)
    assert np.allclose(ar.to_host(X_out), X_ref, atol=1e-13 * scale * (1 + np.abs(X).max() + np.abs(Y).max()))
    assert np.allclose(ar.to_host(Y_out), Y_ref, atol=1e-13 * scale * (1 + np.abs(X).max() + np.abs(Y).max()))


@given(seeds, st.integers(1, 8), st.integers(1, 5))
def test_compact_form_is_the_product_of_the_reflectors(seed, k, p):
    rng = np.random.default_rng(seed)
    P = np.vstack([upper(rng, k), rng.standard_normal((p, k))])
    P[k:, 0] = 0.0                                            # one identity reflector (τ = 0)
    R, Y, T = FLOAT64.householder(P)
    V = np.vstack([np.eye(k), Y])
    Q = np.eye(k + p) - V @ T @ V.T
    assert np.allclose(Q.T @ Q, np.eye(k + p), atol=1e-14 * (k + p))
    assert np.allclose(Q @ np.vstack([R, np.zeros((p, k))]), P, atol=1e-13 * np.abs(P).max())
    h, tau = np.linalg.qr(P, mode="raw")
    assert tau[0] == 0 and np.array_equal(compact_t(np, h.T[k:], tau), T)


def drive(factor, Z, sizes, f_step):
    """The head loop's calls on a factor: the C of each group, then R over all of Z."""
    Cs, stop = [], sizes[0]
    factor.stage(stop)
    for i, m in enumerate(sizes[1:], start=1):
        if i % 2:
            Cs.append(factor.advance(f_step * i, stop + m))
        else:
            factor.add_features(f_step * i)
            factor.commit()
            Cs.append(factor.stage(stop + m))
        stop += m
    factor.add_features(Z.shape[1])
    factor.commit()
    return Cs


@given(seeds, st.lists(st.integers(1, 5), min_size=1, max_size=7), st.booleans(), st.integers(1, 6),
       st.sampled_from(sorted(ARITHMETICS)), st.integers(1, 40))
@settings(max_examples=60, deadline=None)
def test_blocked_factor_matches_the_cpu_factor_and_the_projection(seed, sizes, ill, panel, which, move_block):
    """The same C at every head as the CPU's factor and as the pseudo-inverse, the same R at the
    end (R^T R = Z Z^T), through panels of any width and bordering moved in blocks of any size."""
    ar = ARITHMETICS[which]()
    rng = np.random.default_rng(seed)
    T, F = sum(sizes), 6 * len(sizes) + 6
    Z = rng.standard_normal((T, F))
    if ill:
        Z = Z @ np.diag(np.logspace(0, -6, F))
    saved = blocked._MOVE_BLOCK
    blocked._MOVE_BLOCK = move_block
    try:
        factor = BlockedRowFactor(ar.asarray(Z), ar)
        factor.panel = panel
        Cs = drive(factor, Z, sizes, 6)
    finally:
        blocked._MOVE_BLOCK = saved
    reference = RowSpaceFactor(Z.copy())
    expected_Cs = drive(reference, Z, sizes, 6)
    stop = sizes[0]
    for C, C_cpu, m, i in zip(Cs, expected_Cs, sizes[1:], range(1, len(sizes))):
        expected = Z[stop:stop + m, :6 * i] @ np.linalg.pinv(Z[:stop, :6 * i])
        C = ar.to_host(C)
        assert np.allclose(C, expected, atol=1e-7 * max(1, np.abs(expected).max()))
        assert np.allclose(C, C_cpu, atol=1e-9 * max(1, np.abs(C_cpu).max()))
        stop += m
    R = ar.to_host(factor.R)
    G = Z @ Z.T
    assert R.shape == (T, T) and np.all(R[np.tril_indices(T, -1)] == 0)
    assert np.allclose(R.T @ R, G, atol=1e-10 * np.abs(G).max())
    assert np.allclose(np.abs(R), np.abs(reference.R), atol=1e-9 * np.abs(reference.R).max())
    assert np.isclose(factor._frob2, np.sum(R**2), rtol=1e-12)


def test_dependent_rows_are_refused_at_commit():
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((6, 12))
    Z[4] = 0.0
    factor = BlockedRowFactor(Z, FLOAT64)
    factor.stage(3)
    factor.advance(6, 6)
    factor.add_features(12)
    with pytest.raises(ConstructionError, match="rows 3..5 of Z are dependent"):
        factor.commit()


@pytest.mark.parametrize("which", sorted(ARITHMETICS))
def test_min_norm_solve_from_the_factor(which):
    """The readout's semi-normal solve with refinement, from the blocked factor's R."""
    ar = ARITHMETICS[which]()
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((9, 20)) @ np.diag(np.logspace(0, -5, 20))
    Y = rng.standard_normal((9, 2))
    factor = BlockedRowFactor(ar.asarray(Z), ar)
    factor.panel = 2
    drive(factor, Z, [3, 3, 3], 6)
    B = ar.to_host(ar.min_norm_solve(ar.asarray(Z), factor, ar.asarray(Y)))
    expected = np.linalg.pinv(Z) @ Y
    assert np.allclose(B, expected, atol=1e-9 * np.abs(expected).max())
