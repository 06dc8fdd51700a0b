"""Double-word enclosures (construct.dword): every operation encloses the exact value (mpmath at
300 bits, or exact rationals), and the outputs on shared contexts enclose the exact model's."""

import contextlib
import threading
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from construct import build, synthetic
from construct import dword
from construct.arith import Mpmath
from construct.certify import certify
from construct.data import Dataset
from construct.dword import DW
from construct.model import Weights, forward

mpmath.mp.prec = 300

seeds = st.integers(0, 2**32 - 1)


def _value(x: DW, i) -> mpmath.mpf:
    return mpmath.mpf(float(x.hi.flat[i])) + mpmath.mpf(float(x.lo.flat[i]))


def _encloses(result: DW, exact) -> bool:
    """Every entry: ``|exact − (hi + lo)| ≤ rad``."""
    return all(abs(exact[i] - _value(result, i)) <= mpmath.mpf(float(result.rad.flat[i]))
               for i in range(result.hi.size))


def _random_dw(rng, size, scale_exp, radius: bool) -> DW:
    hi = rng.standard_normal(size) * np.exp2(rng.integers(-scale_exp, scale_exp + 1, size))
    lo = hi * rng.uniform(-1, 1, size) * 2.0 ** -53
    rad = np.abs(hi) * rng.uniform(0, 1, size) * 2.0 ** -100 if radius else np.zeros(size)
    return DW(hi, lo, rad)


def _corners(x: DW, i):
    """The two ends of entry ``i``'s enclosure (an exact function of them must lie in the result's)."""
    v, r = _value(x, i), mpmath.mpf(float(x.rad.flat[i]))
    return (v - r, v + r)


def test_ln2_digits():
    assert abs(mpmath.log(2) - (mpmath.mpf(dword.LN2_HI) + mpmath.mpf(dword.LN2_MID) + mpmath.mpf(dword.LN2_LO))) \
        <= dword.LN2_REST
    assert float(dword.LN2_HI).hex().endswith("00000p-1")              # 33 significant bits


@given(seeds)
def test_error_free_transformations_are_exact(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(50) * np.exp2(rng.integers(-300, 300, 50))
    b = rng.standard_normal(50) * np.exp2(rng.integers(-300, 300, 50))
    s, e = dword.two_sum(a, b)
    p, q = dword.two_prod(a, b)
    for i in range(50):
        assert Fraction(s[i]) + Fraction(e[i]) == Fraction(a[i]) + Fraction(b[i])
        assert Fraction(p[i]) + Fraction(q[i]) == Fraction(a[i]) * Fraction(b[i])


@settings(deadline=None)
@given(seeds, st.booleans())
def test_add_mul_div_enclose_the_exact_results(seed, radius):
    rng = np.random.default_rng(seed)
    a, b = _random_dw(rng, 20, 30, radius), _random_dw(rng, 20, 30, radius)
    for op, f in ((dword.add, lambda x, y: x + y), (dword.mul, lambda x, y: x * y), (dword.div, lambda x, y: x / y)):
        r = op(a, b)
        for i in range(20):
            for x in _corners(a, i):
                for y in _corners(b, i):
                    assert abs(f(x, y) - _value(r, i)) <= mpmath.mpf(float(r.rad.flat[i])), (op.__name__, i)
        if not radius and op is not dword.div:            # and tight: a few u² of the operands
            scale = np.abs(a.hi) + np.abs(b.hi) if op is dword.add else np.abs(a.hi * b.hi)
            assert np.all(r.rad <= 1e-29 * scale + 1e-300)


@settings(deadline=None)
@given(seeds, st.booleans())
def test_add_and_mul_give_the_same_bits_broadcast_and_on_single_values(seed, radius):
    # add and mul work in place on the arrays they create; broadcast operands (the softmax's
    # y_j · c_j) and single values (0-d) must come out as the same elementwise operations.
    rng = np.random.default_rng(seed)
    a, b = _random_dw(rng, 12, 30, radius), _random_dw(rng, 12, 30, radius)
    col = DW(*(v.reshape(4, 3)[:, :1] for v in (a.hi, a.lo, a.rad)))        # (4, 1)
    row = DW(*(v[:3].reshape(1, 3) for v in (b.hi, b.lo, b.rad)))           # (1, 3)
    wide = [DW(*(np.broadcast_to(v, (4, 3)).copy() for v in (x.hi, x.lo, x.rad))) for x in (col, row)]
    for op in (dword.add, dword.mul):
        broadcast, explicit = op(col, row), op(*wide)
        for i in range(12):
            scalar = op(a[i], b[i])
            assert np.ndim(scalar.hi) == 0
            assert (scalar.hi, scalar.lo, scalar.rad) == (op(a, b).hi[i], op(a, b).lo[i], op(a, b).rad[i])
        for f in ("hi", "lo", "rad"):
            assert np.array_equal(getattr(broadcast, f), getattr(explicit, f))


@settings(deadline=None)
@given(seeds, st.floats(-700.0, 5.0), st.booleans())
def test_exp_encloses_the_exact_exponential(seed, centre, radius):
    rng = np.random.default_rng(seed)
    hi = centre + rng.uniform(-3, 3, 12)
    x = DW(hi, hi * rng.uniform(-1, 1, 12) * 2.0 ** -54,
           np.abs(hi) * 2.0 ** -100 * rng.uniform(0, 1, 12) if radius else np.zeros(12))
    r = dword.exp(x)
    for i in range(12):
        for v in _corners(x, i):
            assert abs(mpmath.exp(v) - _value(r, i)) <= mpmath.mpf(float(r.rad.flat[i]))
        if hi[i] > -600 and not radius:                                   # and tight: 1e-27 relative
            assert r.rad.flat[i] <= 1e-27 * mpmath.exp(_value(x, i))


@settings(deadline=None, max_examples=30)
@given(seeds, st.sampled_from([1, 2, 7, 64, 256, 257, 600]), st.integers(0, 40))
def test_exact_matmul_encloses_the_exact_product(seed, k, spread):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((5, k)) * np.exp2(rng.integers(-spread, spread + 1, (5, k)))
    A = _random_dw(rng, (k, 4), spread, True)
    r = dword.exact_matmul(X, A)
    for t in range(5):
        for j in range(4):
            exact = sum(mpmath.mpf(float(X[t, i])) * (_value(A, i * 4 + j)) for i in range(k))
            slack = sum(abs(mpmath.mpf(float(X[t, i]))) * mpmath.mpf(float(A.rad[i, j])) for i in range(k))
            got, rad = _value(r, t * 4 + j), mpmath.mpf(float(r.rad[t, j]))
            assert abs(exact - got) + slack <= rad + slack * 2        # the radius covers A's and the rounding
            assert abs(exact - got) <= rad
            # and tight: the slices leave 2^-110 of the largest entries
            assert rad <= 1e-30 * k * np.abs(X[t]).max() * (np.abs(A.hi[:, j]).max() + A.rad[:, j].max() * 1e30) \
                + 2 * float(slack)


@settings(deadline=None, max_examples=20)
@given(seeds, st.integers(1, 3), st.integers(1, 3), st.integers(0, 30))
def test_batched_exact_matmul_encloses_each_product(seed, batch, k, spread):
    # leading axes are batch axes (broadcast as by @); each product is one of the 2-D ones
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch, 3, k)) * np.exp2(rng.integers(-spread, spread + 1, (batch, 3, k)))
    A = _random_dw(rng, (batch, k, 2), spread, True)
    r = dword.exact_matmul(X, A)
    assert r.hi.shape == (batch, 3, 2)
    for b in range(batch):
        for t in range(3):
            for j in range(2):
                exact = sum(mpmath.mpf(float(X[b, t, i])) * _value(A, (b * k + i) * 2 + j) for i in range(k))
                got = mpmath.mpf(float(r.hi[b, t, j])) + mpmath.mpf(float(r.lo[b, t, j]))
                slack = sum(abs(mpmath.mpf(float(X[b, t, i]))) * mpmath.mpf(float(A.rad[b, i, j])) for i in range(k))
                # the exact product of every A within its radius lies inside
                assert abs(exact - got) + slack <= mpmath.mpf(float(r.rad[b, t, j]))
    one = dword.exact_matmul(X[0], A[0])                         # the same bits as the 2-D call
    assert np.array_equal(one.hi, r.hi[0]) and np.array_equal(one.lo, r.lo[0])


def _exact_outputs(data, w: Weights):
    p = Mpmath(300)
    with p.working():
        out = forward(p.asarray(data.E), p.asarray(data.X), w.map(p.asarray), p)
    return [out.flat[i] for i in range(out.size)]


@settings(deadline=None, max_examples=15)
@given(seeds, st.integers(1, 3), st.integers(2, 4), st.integers(0, 3), st.booleans(), st.integers(1, 2))
def test_shared_outputs_enclose_the_exact_model(seed, H, n, extra, skip, d_o):
    rng = np.random.default_rng(seed)
    d, T = n + extra, 6
    E = rng.standard_normal((n, d))
    data = synthetic("shared", T=T, n=n, d=d, seed=seed % 1000)
    data_E = np.broadcast_to(E, (T, n, d)).copy()
    d_h, d_v = rng.integers(1, 4), rng.integers(1, 3)
    w = Weights(W_K=rng.standard_normal((H, d, d_h)) * 4, W_Q=rng.standard_normal((H, d, d_h)),
                W_V=rng.standard_normal((H, d, d_v)) * 1e6, W_O=rng.standard_normal((H * d_v, d)),
                W_D=rng.standard_normal((d, d_o)), skip=skip)
    out = dword.shared_outputs(E, data.X, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, skip)
    assert _encloses(out, _exact_outputs(Dataset(data_E, data.X, np.zeros((T, d_o))), w))


@settings(deadline=None, max_examples=15)
@given(seeds, st.integers(1, 3), st.integers(2, 4), st.integers(0, 3), st.booleans(), st.integers(1, 2))
def test_per_example_outputs_enclose_the_exact_model(seed, H, n, extra, skip, d_o):
    rng = np.random.default_rng(seed)
    d, T = n + extra, 5
    E = rng.standard_normal((T, n, d)) * np.exp2(rng.integers(-3, 4, (T, n, d)))
    X = rng.standard_normal((T, d))
    d_h, d_v = rng.integers(1, 4), rng.integers(1, 3)
    w = Weights(W_K=rng.standard_normal((H, d, d_h)) * 8, W_Q=rng.standard_normal((H, d, d_h)),
                W_V=rng.standard_normal((H, d, d_v)) * 1e6, W_O=rng.standard_normal((H * d_v, d)),
                W_D=rng.standard_normal((d, d_o)), skip=skip)
    out = dword.outputs(E, X, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, skip)
    assert _encloses(out, _exact_outputs(Dataset(E, X, np.zeros((T, d_o))), w))
    assert np.all(out.rad <= 1e-20 * (1 + np.abs(out.hi)))     # and to about u² (weights of 1e6)


def _softmax(values: list) -> list:
    top = max(values)
    e = [mpmath.exp(v - top) for v in values]
    return [x / sum(e) for x in e]


@settings(deadline=None, max_examples=30)
@given(seeds, st.integers(1, 6), st.sampled_from([0.0, 2.0 ** -70, 2.0 ** -30]), st.integers(0, 9))
def test_the_softmax_and_its_radius_enclose_every_exact_softmax(seed, n, radius, spread):
    # Every exact softmax of logits within the double words' radii lies within the stated radius
    # of the float64 probabilities: checked where each probability is pushed furthest (its own
    # logit up and the others down, and the reverse). Spreads up to 2^9 saturate the softmax
    # and underflow its smaller terms.
    rng = np.random.default_rng(seed)
    rows, heads = 3, 2
    hi = rng.standard_normal((rows, heads, n)) * 2.0 ** spread
    L = DW(hi, hi * rng.uniform(-1, 1, hi.shape) * 2.0 ** -54, (np.abs(hi) + 1) * radius)
    c = DW.exact(rng.standard_normal((heads, n, 1)))
    p, r = np.empty((rows, heads, n)), np.empty((rows, heads, n))
    dword._attend(L, c, p, r)
    U = 2.0 ** -53
    for i in np.ndindex(rows, heads):
        centre = [_value(L, np.ravel_multi_index(i + (j,), hi.shape)) for j in range(n)]
        rad = [mpmath.mpf(float(L.rad[i + (j,)])) for j in range(n)]
        for j in range(n):
            for sign in (1, -1):
                pushed = [v + sign * (q if k == j else -q) for k, (v, q) in enumerate(zip(centre, rad))]
                assert abs(_softmax(pushed)[j] - mpmath.mpf(float(p[i + (j,)]))) <= mpmath.mpf(float(r[i + (j,)]))
        if radius == 0:           # and tight: the roundings' 4u, and exp's own radius near underflow
            assert np.all(r[i] <= 4.01 * U * p[i] + 1e-290)


def test_per_example_and_shared_routes_agree_on_a_shared_context():
    data = synthetic("shared", T=3 * 5 + 1, n=6, d=8, seed=4)
    w = build(data, 3).weights
    args = (w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, w.skip)
    shared, each = dword.outputs(data.E[0], data.X, *args), dword.outputs(data.E, data.X, *args)
    assert np.all(np.abs((shared.hi - each.hi) + (shared.lo - each.lo)) <= shared.rad + each.rad)


def test_blocks_of_heads_and_examples_give_the_same_bits(monkeypatch):
    data = synthetic("independent", T=3 * 5 + 1, n=6, d=8, seed=5)
    w = build(data, 3).weights
    args = (data.E, data.X, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, w.skip)
    whole = dword.outputs(*args)
    monkeypatch.setattr(dword, "_BLOCK_ROWS", 4)
    pieces = dword.outputs(*args, heads_per_block=2)
    assert all(np.array_equal(getattr(whole, f), getattr(pieces, f)) for f in ("hi", "lo"))


def test_only_the_examples_float64_misses_are_enclosed_again(monkeypatch):
    # Rows within the tolerance keep their float64 bound; the others get their own double-word
    # bound (the smaller of the two), aligned with their examples.
    import construct.certify as certify_module
    data = synthetic("independent", T=3 * 5 + 1, n=6, d=8, seed=2)
    w = build(data, 3).weights
    args = (w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, w.skip)
    tight = dword.row_bounds(dword.outputs(data.E, data.X, *args), data.Y)
    f64 = np.full(data.T, 1e-9)
    f64[[2, 7, 11]] = [1e-6, np.nan, 3e-7]
    seen = []
    real = dword.outputs
    monkeypatch.setattr(dword, "outputs", lambda E, X, *a, **k: seen.append(X.copy()) or real(E, X, *a, **k))
    got, again = certify_module._tighter(f64, w, data, 1e-8)
    assert again == 3 and len(seen) == 1 and np.array_equal(seen[0], data.X[[2, 7, 11]])
    assert np.array_equal(got[[2, 7, 11]], tight[[2, 7, 11]])
    others = np.setdiff1d(np.arange(data.T), [2, 7, 11])
    assert np.array_equal(got[others], f64[others])


def test_independent_contexts_are_certified_below_float64s_own_bound():
    # The float64 enclosure bounds this model's error by about 3e-11; the exact error is 5e-15 to
    # 9e-15 (by the CPU's BLAS kernels).
    data = synthetic("independent", T=3 * 5 + 1, n=6, d=8, seed=2)
    w = build(data, 3).weights
    assert certify(w, data, tol=1e-8, method="float64").claims["memorization"]["max_abs_error_bound"] > 1e-12
    cert = certify(w, data, tol=1e-13, method="float64")
    assert cert.passed and cert.claims["memorization"]["max_abs_error_bound"] <= 1e-13
    exact = max(abs(v - mpmath.mpf(float(y))) for v, y in zip(_exact_outputs(data, w), data.Y.ravel()))
    # (the certificate rounds its numbers up to three digits)
    assert exact <= cert.claims["memorization"]["max_abs_error_bound"] <= 1.02 * exact + 1e-20
    # a label moved so that the exact error there exceeds what is allowed by 1e-14 is refused
    allowed = cert.claims["allowed"]
    Y = data.Y.copy()
    Y[7, 0] += allowed + 1e-14 + 1e-14
    refused = certify(w, Dataset(data.E, data.X, Y), tol=1e-13, method="float64")
    assert not refused.claims["memorization"]["proven"]
    assert refused.claims["memorization"]["max_abs_error_bound"] >= allowed + 1e-14


def test_shared_contexts_are_certified_at_1e_8_and_a_label_moved_past_it_is_not():
    data = synthetic("shared", T=4 * 31 + 1, n=32, d=64, seed=0)
    w = build(data, 4).weights
    cert = certify(w, data, method="float64")
    assert cert.passed and cert.claims["memorization"]["max_abs_error_bound"] <= 1e-8
    # the float64 enclosure alone could not: its bound was 1.1e-7 here
    Y = data.Y.copy()
    Y[17, 0] += 1.5e-8                        # the exact error at example 17 is now above 1e-8
    moved = type(data)(data.E, data.X, Y)
    refused = certify(w, moved, method="float64")
    assert not refused.claims["memorization"]["proven"]
    assert refused.claims["memorization"]["max_abs_error_bound"] >= 1.5e-8 - 1e-11


def test_the_bound_sits_on_the_exact_error():
    # The double-word bound lies above the exact max |f − y| (300-bit forward pass) and within
    # 1e-20 (plus 1e-15 relative) of it.
    data = synthetic("shared", T=2 * 5 + 1, n=6, d=8, seed=3)
    w = build(data, 2).weights
    exact = max(abs(v - mpmath.mpf(float(y))) for v, y in zip(_exact_outputs(data, w), data.Y.ravel()))
    out = dword.shared_outputs(data.E[0], data.X, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, w.skip)
    bound = dword.error_bound(out, data.Y)
    assert exact <= bound <= exact + mpmath.mpf(1e-20) + 1e-15 * exact


def _overflowing_partial_sums():
    """x·W_Q is exactly 0, but BLAS's partial sums overflow (2^523·2^250·2): found by review."""
    T, big, s = 4, 2.0 ** 523, 2.0 ** 250
    W_K = np.array([[[1.0], [0], [0], [0]]])
    W_Q = np.array([[[-s], [-s], [s], [s]]])
    W_V = np.array([[[0.0], [1], [0], [0]]])
    W_O, W_D = np.array([[1.0, 0, 0, 0]]), np.array([[1.0], [0], [0], [0]])
    E = np.array([[s, 0, 0, 0], [0, 1.0, 0, 0]])
    w = Weights(W_K=W_K, W_Q=W_Q, W_V=W_V, W_O=W_O, W_D=W_D)
    return w, Dataset(np.broadcast_to(E, (T, 2, 4)).copy(), np.full((T, 4), big), np.ones((T, 1)))


def test_an_overflow_in_the_logits_proves_nothing():
    # The exact logits are 0 for both tokens, so f = 1/2 everywhere and max |f − y| = 1/2: no
    # certificate may claim memorization of y = 1.
    w, data = _overflowing_partial_sums()
    out = dword.shared_outputs(data.E[0], data.X, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, w.skip)
    assert dword.error_bound(out, data.Y) >= 0.5
    each = dword.outputs(data.E, data.X, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, w.skip)    # per example
    assert dword.error_bound(each, data.Y) >= 0.5
    assert not certify(w, data, method="float64").claims["memorization"]["proven"]
    E = data.E.copy()
    E[1:, 1, 1] = 2.0                     # no longer shared (the per-example route); f = 1/2 at example 0
    assert not certify(w, Dataset(E, data.X, data.Y), method="float64").claims["memorization"]["proven"]


def test_the_table_of_powers_of_two_encloses_them():
    hi, lo, rest = dword._exp2_table()
    for j in range(hi.size):
        exact = mpmath.power(2, mpmath.mpf(j) / hi.size)
        gap = abs(exact - mpmath.mpf(float(hi[j])) - mpmath.mpf(float(lo[j])))
        assert gap <= mpmath.mpf(float(rest[j])) and rest[j] <= 2.0 ** -105


def test_the_table_does_not_depend_on_mpmaths_global_precision(monkeypatch):
    # The table is built at exp's first use, which happens in two threads at once (the two
    # halves of the examples). mpmath's precision is one global setting: a thread that leaves its
    # workprec puts back 53 bits while the other still computes. The table must come out the
    # same (it once spun for ever in its correction loop, from an estimate 2^60 off).
    expected = tuple(a.copy() for a in dword._exp2_table())
    monkeypatch.setattr(mpmath, "workprec", lambda bits: contextlib.nullcontext())
    monkeypatch.setattr(mpmath.mp, "prec", 53)
    dword._exp2_table.cache_clear()
    done = []
    worker = threading.Thread(target=lambda: done.append(dword._exp2_table()), daemon=True)
    worker.start()
    worker.join(timeout=60)
    dword._exp2_table.cache_clear()
    assert done, "the table did not finish in 60 s at mpmath's default precision"
    assert all(np.array_equal(a, b) for a, b in zip(done[0], expected))


def test_exp_catches_a_forged_table_entry(monkeypatch):
    # An entry moved by 2^-100 (far below float64's resolution of 2^(j/256)): exp's enclosures of
    # the values that use it no longer hold the exact exponential, so the test above has teeth.
    hi, lo, rest = (a.copy() for a in dword._exp2_table())
    x = np.array([float(37 * mpmath.log(2) / 256) + 1e-4])          # k = 37: entry 37
    honest = dword.exp(DW.exact(x))
    lo[37] += 2.0 ** -100
    monkeypatch.setattr(dword, "_exp2_table", lambda: (hi, lo, rest))
    forged = dword.exp(DW.exact(x))
    exact = mpmath.exp(mpmath.mpf(float(x[0])))
    assert abs(exact - _value(honest, 0)) <= mpmath.mpf(float(honest.rad[0]))
    assert abs(exact - _value(forged, 0)) > mpmath.mpf(float(forged.rad[0]))


def _series_tail(r: mpmath.mpf) -> mpmath.mpf:
    """Σ_{i≥5} r^i/i! for |r| ≤ 0.005 (the terms past 40 are below 1e-130 of the first)."""
    return mpmath.fsum(r ** k / mpmath.factorial(k) for k in range(5, 45))


@settings(deadline=None)
@given(seeds, st.floats(-0.005, 0.005), st.floats(0, 1e-3))
def test_the_series_tail_encloses_the_rest_of_the_exponential(seed, centre, spread):
    # Σ_{i≥5} r^i/i! for every r within lo_rad of rho.
    rng = np.random.default_rng(seed)
    rho = np.clip(centre + rng.uniform(-1e-3, 1e-3, 8) * rng.choice([1, 1e-10, 1e-80], 8), -0.004, 0.004)
    lo_rad = spread * rng.uniform(0, 1, 8) * rng.choice([1, 1e-13], 8)
    reach = (np.abs(rho) + lo_rad) * (1 + 1e-15)
    t, rad = dword._tail(rho, lo_rad, reach)
    for i in range(8):
        for r in (mpmath.mpf(float(rho[i])) - mpmath.mpf(float(lo_rad[i])), mpmath.mpf(float(rho[i])),
                  mpmath.mpf(float(rho[i])) + mpmath.mpf(float(lo_rad[i]))):
            assert abs(_series_tail(r) - mpmath.mpf(float(t[i]))) <= mpmath.mpf(float(rad[i]))
    # and the bound is the size of float64's rounding of the terms, not more
    assert np.all(rad <= 1e-16 * np.abs(reach) ** 5 + 1.01 * lo_rad * reach ** 4 / 24 * (1 + 1e-14) + 1e-300)
    # An interval's end is missed without the term for moving from rho to r, and that term is
    # within a factor 1000 of what it must cover.
    wide = np.array([0.004]), np.array([1e-4]), np.array([0.0041])
    t, rad = dword._tail(*wide)
    miss = abs(_series_tail(mpmath.mpf(0.0041)) - mpmath.mpf(float(t[0])))
    assert miss > float(dword._tail(wide[0], np.zeros(1), wide[2])[1][0])
    assert miss > 1e-3 * mpmath.mpf(float(rad[0]))


@settings(deadline=None, max_examples=40)
@given(seeds, st.floats(-600.0, 5.0), st.floats(1e-12, 1.0))
def test_exp_of_wide_intervals_encloses_their_ends(seed, centre, width):
    rng = np.random.default_rng(seed)
    hi = centre + rng.uniform(-3, 3, 6)
    x = DW(hi, np.zeros(6), width * rng.uniform(0, 1, 6))
    r = dword.exp(x)
    for i in range(6):
        for v in _corners(x, i):
            assert abs(mpmath.exp(v) - _value(r, i)) <= mpmath.mpf(float(r.rad.flat[i]))
    assert not np.isfinite(dword.exp(DW(np.array([0.0]), np.array([0.0]), np.array([1.5]))).rad[0])


def test_exp_never_returns_a_nan_radius_and_takes_a_large_low_part():
    # Found in review: a low part above 0.0036 (hand-built double words) gave a NaN radius, and
    # huge magnitudes NaN everywhere. Such inputs are enclosed, or marked unproven (rad = inf).
    hi = np.array([1.0, 0.0, -5.0, -1e300, 0.0, 3.0, 699.0, -689.0])
    lo = np.array([0.01, 1.0, -0.5, 0.0, 1e100, 1e-3, 0.9, -0.99])
    rad = np.array([0.0, 0.0, 1e-3, 1e301, 0.0, 0.0, 0.0, 0.5])
    x = DW(hi, lo, rad)
    r = dword.exp(x)
    assert not np.any(np.isnan(r.rad))
    for i in range(hi.size):
        if np.isfinite(r.rad[i]):
            for v in _corners(x, i):
                assert abs(mpmath.exp(v) - _value(r, i)) <= mpmath.mpf(float(r.rad.flat[i])), i
    assert np.all(np.isfinite(r.rad[[0, 1, 2, 5, 7]]))       # as before the table, these are proven


def test_exp_of_a_wide_interval_below_the_floor_is_not_clamped():
    r = dword.exp(DW(np.array([-700.0]), np.array([0.0]), np.array([800.0])))
    assert r.hi[0] + r.rad[0] >= np.exp(100.0) or not np.isfinite(r.rad[0])
    r = dword.exp(DW(np.array([np.nan]), np.array([0.0]), np.array([0.0])))
    assert not np.isfinite(r.rad[0]) or not np.isfinite(r.hi[0])


def test_exact_matmul_counts_underflow():
    X, A = np.array([[3.425171953517392e-157]]), DW.exact(np.array([[1.7542637641219138e-159]]))
    r = dword.exact_matmul(X, A)
    exact = Fraction(X[0, 0]) * Fraction(A.hi[0, 0])
    assert abs(exact - Fraction(r.hi[0, 0]) - Fraction(r.lo[0, 0])) <= Fraction(r.rad[0, 0])


def test_div_counts_underflow():
    rng = np.random.default_rng(0)
    n = DW.exact(rng.uniform(1, 2, 200))
    d = DW.exact(np.ldexp(rng.uniform(1, 2, 200), rng.integers(960, 995, 200)))
    r = dword.div(n, d)
    for i in range(200):
        exact = Fraction(n.hi[i]) / Fraction(d.hi[i])
        assert abs(exact - Fraction(r.hi[i]) - Fraction(r.lo[i])) <= Fraction(r.rad[i])


@settings(deadline=None, max_examples=300)
@given(st.floats(-4, 4, allow_subnormal=False), st.floats(-1, 1), st.floats(-1e-12, 1e-12),
       st.floats(0, 1e-28), st.integers(-1060, 10))
def test_row_bounds_enclose_the_error_and_do_not_add_the_low_words_size(hi, lo_frac, gap, rad, e):
    # |hi + lo − y| bounded from the double word: sound, and within a few roundings of the exact
    # value plus the radius. It summed |hi − y| and |lo| separately, which adds up to 2|lo|
    # (about u·|f|, 1.1e-16 on outputs near 1) when they have opposite signs: a certificate's
    # bound was 5.28e-15 where the exact error was 5.16e-15.
    hi = np.ldexp(hi, e)
    lo = lo_frac * np.spacing(hi) / 2
    y = hi + np.ldexp(gap, e)
    exact = abs(Fraction(hi) + Fraction(lo) - Fraction(y))
    out = DW(np.array([[hi]]), np.array([[lo]]), np.array([[rad]]))
    bound = dword.row_bounds(out, np.array([[y]]))[0]
    assert Fraction(bound) >= exact + Fraction(rad)
    assert bound <= (float(exact) + rad) * (1 + 64 * dword.U) + 8 * dword.TINY


# --- inputs that are themselves double words: Proposition 4's pre-layer ------------------------

def _exact_two_layer_outputs(data, w: Weights):
    """The two-layer model (``w.prelayer`` first) in 300-bit mpmath, the data taken as exact."""
    from construct.model import feature_matrix, layer_inputs, output_from_features
    p = Mpmath(300)
    with p.working():
        wp = w.map(p.asarray)
        E, X = layer_inputs(w, p.asarray(data.E), p.asarray(data.X), p)
        out = output_from_features(feature_matrix(E, X, wp, p, layered=True), X, wp, p)
    return [out.flat[i] for i in range(out.size)]


@settings(deadline=None, max_examples=40)
@given(seeds, st.integers(1, 7), st.integers(1, 5), st.integers(0, 30))
def test_mean_shift_encloses_the_exact_layer(seed, n, d, spread):
    # e + mean(E) and x + mean(E) exactly (rationals), for tokens of widely spread sizes
    rng = np.random.default_rng(seed)
    T = 3
    E = rng.standard_normal((T, n, d)) * np.exp2(rng.integers(-spread, spread + 1, (T, n, d)))
    X = rng.standard_normal((T, d)) * np.exp2(rng.integers(-spread, spread + 1, (T, d)))
    E2, X2 = dword.mean_shift(E, X)
    assert E2.hi.shape == E.shape and X2.hi.shape == X.shape
    for t in range(T):
        for k in range(d):
            mean = sum(Fraction(float(E[t, j, k])) for j in range(n)) / n
            for got, base in [((E2, (t, j, k)), E[t, j, k]) for j in range(n)] + [((X2, (t, k)), X[t, k])]:
                dw, i = got
                exact = Fraction(float(base)) + mean
                centre = Fraction(float(dw.hi[i])) + Fraction(float(dw.lo[i]))
                assert abs(exact - centre) <= Fraction(float(dw.rad[i]))
                assert dw.rad[i] <= 2.0 ** -100 * (abs(float(base)) + np.abs(E[t, :, k]).max()) + 1e-300


@settings(deadline=None, max_examples=15)
@given(seeds, st.integers(1, 3), st.integers(2, 4), st.integers(0, 3), st.booleans(), st.integers(1, 2),
       st.booleans())
def test_outputs_after_the_pre_layer_enclose_the_exact_two_layer_model(seed, H, n, extra, skip, d_o, shared):
    # The pre-layer's outputs as double words, then the attention layer on them: the exact model
    # of the two layers lies inside, to about u² (in float64 the shift alone rounds by u·|e|).
    rng = np.random.default_rng(seed)
    d, T = n + extra, 5
    E = rng.standard_normal((T, n, d)) * np.exp2(rng.integers(-3, 4, (T, n, d)))
    if shared:
        E[:] = E[0]
    X = rng.standard_normal((T, d))
    d_h, d_v = rng.integers(1, 4), rng.integers(1, 3)
    w = Weights(W_K=rng.standard_normal((H, d, d_h)) * 8, W_Q=rng.standard_normal((H, d, d_h)),
                W_V=rng.standard_normal((H, d, d_v)) * 1e6, W_O=rng.standard_normal((H * d_v, d)),
                W_D=rng.standard_normal((d, d_o)), skip=skip, prelayer="mean-shift")
    E2, X2 = dword.mean_shift(E, X)
    out = dword.outputs(E2[0] if shared else E2, X2, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, skip)
    assert _encloses(out, _exact_two_layer_outputs(Dataset(E, X, np.zeros((T, d_o))), w))
    assert np.all(out.rad <= 1e-20 * (1 + np.abs(out.hi)))


def test_input_matmul_bounds_the_rounding_of_the_low_part_below_the_normal_range():
    # A review: the rounding of X.lo·A.hi was bounded as |X.lo|·(2(k+2)u·|A.hi|), whose factor
    # underflows to 0 for a subnormal A.hi while the product itself (|X.lo| near 2^845) is
    # normal: the radius was 5e-323 for a miss of 1e-84.
    X = DW(np.array([[2.0 ** 900, -2.0 ** 900]]), np.array([[3.0 * 2.0 ** 845 + 2.0 ** 795, -3.0 * 2.0 ** 845]]),
           np.zeros((1, 2)))
    A = DW.exact(np.array([[0x0000FFFFFFFFFFFF * 2.0 ** -1074]] * 2))
    out = dword.input_matmul(X, A)
    exact = sum((Fraction(X.hi[0, i]) + Fraction(X.lo[0, i])) * Fraction(A.hi[i, 0]) for i in range(2))
    assert abs(exact - Fraction(out.hi[0, 0]) - Fraction(out.lo[0, 0])) <= Fraction(out.rad[0, 0])


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_a_readout_far_from_unit_size_gives_the_outputs_scaled_exactly(skip, shared):
    """Double words split products, which overflows from about 1e300 on: weights that memorize,
    with W_D (or W_V) and the labels scaled by 2^996, gave non-finite outputs (a review). The
    readout is taken at unit size and the outputs scaled back: the same double words times the
    scale, bit for bit, and finite."""
    rng = np.random.default_rng(3)
    H, n, d, T = 3, 3, 4, 5
    W_K, W_Q, W_V = (rng.standard_normal((H, d, 2)), rng.standard_normal((H, d, 2)), rng.standard_normal((H, d, 1)))
    W_O, W_D = rng.standard_normal((H, d)), rng.standard_normal((d, 1))
    E = rng.standard_normal((n, d)) if shared else rng.standard_normal((T, n, d))
    X = rng.standard_normal((T, d))
    unit = dword.outputs(E, X, W_K, W_Q, W_V, W_O, W_D, skip)
    for W_V_k, W_D_k, k in ((W_V, np.ldexp(W_D, 996), 996), (np.ldexp(W_V, 600), np.ldexp(W_D, 390), 990)):
        if skip and W_V_k is not W_V:
            continue                                     # with the skip connection only W_D scales the outputs
        far = dword.outputs(E, X, W_K, W_Q, W_V_k, W_O, W_D_k, skip)
        assert np.all(np.isfinite(far.hi)) and np.all(np.isfinite(far.rad))
        assert np.array_equal(far.hi, np.ldexp(unit.hi, k)) and np.array_equal(far.lo, np.ldexp(unit.lo, k))
        assert np.all(far.rad >= np.ldexp(unit.rad, k))
