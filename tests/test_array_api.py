"""The stages are generic: the whole construction runs on array-api-strict arrays (issue #12).

array-api-strict implements the Python array API standard and nothing more: any stray NumPy call,
NumPy-only method or implicit conversion in stage code fails here. This is what keeps a new
arithmetic (CuPy) from failing or silently copying to the host. The kernels used are the
standard's ``linalg`` extension, through :class:`construct.arith.Arithmetic`'s generic methods.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from construct import synthetic, verify
from construct.arith import FLOAT64, Arithmetic
from construct.build import build_in
from construct.model import Weights, capacity, feature_matrix, forward, head_features, output_from_features

xp = pytest.importorskip("array_api_strict")


@pytest.fixture
def strict():
    """Float64 on array-api-strict's second device: its arrays refuse conversion to NumPy, as a
    GPU's do, so a stray NumPy call on them fails instead of copying silently."""
    return Arithmetic(xp, device=xp.Device("device1"), host_device=xp.Device("CPU_DEVICE"))


def options(H, **kw):
    return dict(heads=H, head_dim=kw.pop("head_dim", 4), value_dim=kw.pop("value_dim", 1), skip=False, seed=3,
                tol=1e-8, scale="rank", **kw)


@pytest.mark.parametrize("kind", ["independent", "general-position"])
@pytest.mark.parametrize("scale", ["rank", "saturating", "explicit"])
def test_the_construction_runs_on_strict_arrays_and_memorizes(strict, kind, scale):
    H, n = 4, 4
    data = synthetic(kind, T=capacity(H, n, n), n=n, d=7, seed=5)
    result = build_in(strict, data, "array-api-strict", **{**options(H), "scale": scale})
    assert result.verification.passed and result.verification.rank_Z == data.T
    assert result.precision == "float64 (array_api_strict)"
    assert all(type(a) is np.ndarray for a in (result.weights.W_K, result.weights.W_V))
    # The weights are ordinary float64 arrays: the CPU arithmetic verifies them.
    check = verify(result.weights, data)
    assert check.passed and check.max_abs_error <= 1e-9


@pytest.mark.parametrize("skip,d_o,d_h", [(True, 1, 4), (False, 3, 4), (False, 1, 3)])
def test_skip_outputs_and_narrow_heads_on_strict_arrays(strict, skip, d_o, d_h):
    H, n = 4, 4
    data = synthetic("independent", T=capacity(H, n, d_h), n=n, d=7, d_o=d_o, seed=9)
    result = build_in(strict, data, "array-api-strict",
                      **{**options(H, head_dim=d_h, value_dim=d_o + 1), "skip": skip})
    assert verify(result.weights, data).passed


def test_the_forward_pass_is_one_definition_for_both_arithmetics(strict):
    rng = np.random.default_rng(0)
    T, n, d, H, d_h = 6, 3, 5, 2, 3
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    w = Weights(rng.standard_normal((H, d, d_h)), rng.standard_normal((H, d, d_h)), rng.standard_normal((H, d, 2)),
                rng.standard_normal((H * 2, d)), rng.standard_normal((d, 2)), skip=True)
    on_strict = w.map(strict.asarray)
    Es, Xs = strict.asarray(E), strict.asarray(X)
    assert np.allclose(strict.to_host(head_features(Es, Xs, on_strict.W_K[0, ...], on_strict.W_Q[0, ...], strict)),
                       head_features(E, X, w.W_K[0], w.W_Q[0]), rtol=1e-13, atol=1e-13)
    Z = feature_matrix(Es, Xs, on_strict, strict)
    assert np.allclose(strict.to_host(Z), feature_matrix(E, X, w), rtol=1e-13, atol=1e-13)
    out = output_from_features(Z, Xs, on_strict, strict)
    assert np.allclose(strict.to_host(out), forward(E, X, w), rtol=1e-12, atol=1e-12)


def test_strict_arrays_refuse_numpy_calls(strict):
    """The test above means something: NumPy's own functions do not take strict arrays silently."""
    with pytest.raises((TypeError, RuntimeError, ValueError)):
        np.einsum("ij->i", strict.asarray(np.ones((2, 2))))


def test_the_generic_rank_agrees_with_lapack(strict):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((6, 9)) @ np.diag(10.0 ** -np.arange(9))
    rank, s = strict.numerical_rank(strict.asarray(A))
    rank64, s64 = FLOAT64.numerical_rank(A)
    assert rank == rank64 and np.allclose(s, s64, rtol=1e-10)


def test_shared_context_refinement_runs_on_strict_arrays(strict):
    # The readout's refinement against the outputs in double words (construct.accurate) on a
    # device whose arrays refuse NumPy: host copies where NumPy is needed, the correction solved
    # on the device. At this tolerance float64's rounding is visible (tests/test_accurate.py).
    data = synthetic("shared", T=32 * 15 + 1, n=16, d=32, seed=0)
    result = build_in(strict, data, "array-api-strict", **{**options(32, head_dim=16), "tol": 2e-12})
    assert result.verification.passed and result.verification.outputs == "double words"
    assert verify(result.weights, data, tol=2e-12).passed


def test_shared_context_rank_by_row_space_coordinates_on_strict_arrays(strict):
    # verify's route for shared contexts (n < d) in the standard's own functions: the same rank
    # and extremes as on NumPy.
    import sys
    row_rank = sys.modules["construct.verify"]._row_rank
    rng = np.random.default_rng(4)
    T, H, n, d = 10, 3, 4, 7
    E0 = rng.standard_normal((n, d))
    Z = np.concatenate([rng.dirichlet(np.ones(n), size=T) @ E0 for _ in range(H)], axis=1)
    E = np.broadcast_to(E0, (T, n, d)).copy()
    r = row_rank(strict, strict.asarray(Z), strict.asarray(E))
    r64 = row_rank(FLOAT64, Z, E)
    assert r.rank == r64.rank == T
    assert r.sigma_min == pytest.approx(r64.sigma_min, rel=1e-9) and r.sigma_max == pytest.approx(r64.sigma_max, rel=1e-9)


@pytest.mark.parametrize("e", [1070, 1100, -1070, -1100, 0, 5, -5, 10 ** 12, -(10 ** 12)])
def test_the_generic_ldexp_agrees_with_numpy_beyond_float64s_powers_of_two(strict, e):
    # 2.0 ** e raised OverflowError for e > 1023 and flushed to 0.0 below -1074, so the generic
    # arithmetic (CuPy's path too) could not scale subnormal contexts back from unit scale.
    values = np.array([2.0 ** -1060, 3.0 * 2.0 ** -1040, 1.5, -2.0 ** 1000, 2.0 ** 1020, 5e-324, 0.0, 0.75 * 2 ** -1020])
    with np.errstate(over="ignore"):
        expected = np.ldexp(values, int(np.clip(e, -3000, 3000)))   # (numpy's exponent is an int32)
        got = strict.to_host(strict.ldexp(strict.asarray(values), e))
    assert np.array_equal(got, expected, equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False, width=64), min_size=1, max_size=8), st.integers(-2300, 2300))
def test_the_generic_ldexp_rounds_once_as_numpy_does(values, e):
    ar = Arithmetic(xp, device=xp.Device("device1"), host_device=xp.Device("CPU_DEVICE"))
    values = np.array(values)
    with np.errstate(over="ignore"):
        expected = np.ldexp(values, e)
        got = ar.to_host(ar.ldexp(ar.asarray(values), e))
        on_cpu = FLOAT64.ldexp(values, e)                   # NumPy's arithmetic takes the same route
    for result in (got, on_cpu):
        assert np.array_equal(result, expected) and np.array_equal(np.signbit(result), np.signbit(expected))


def test_the_rounding_detector_holds_no_array_of_zs_size_without_blocks_of_rows(strict):
    # The generic arithmetic (CuPy's) takes all rows at once (no cache_rows). The detector's
    # groups of heads were sized for 1 row then: up to 2^17 / d heads at a time, so N x, the logits
    # and their softmax for all T rows and the whole group, 2.6 times Z's size here (41 MB beside
    # Z's 16 MB), where head by head they were T × d. On a GPU with Z near its memory, that ran out.
    import tracemalloc
    from construct.accurate import reordered_outputs
    rng = np.random.default_rng(0)
    T, H, n, d = 4000, 64, 4, 8
    w = Weights(*(rng.standard_normal(s) for s in ((H, d, 2), (H, d, 2), (H, d, 1), (H, d), (d, 1))))
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    on_strict, Es, Xs = w.map(strict.asarray), strict.asarray(E), strict.asarray(X)
    tracemalloc.start()
    try:
        out = reordered_outputs(on_strict, Es, Xs, strict)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * T * H * d / 2                  # 6.8 MB: groups of 4 heads, 1 MB arrays
    assert np.allclose(strict.to_host(out), reordered_outputs(w, E, X), rtol=1e-12, atol=1e-12)
