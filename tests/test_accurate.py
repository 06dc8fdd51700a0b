"""Shared contexts where float64's own rounding reaches the tolerance (issue #13, goal 3).

On a shared context the later heads' scales make the logits large; the float64 forward pass then
agrees with the readout it was solved against while the exact model is off by far more. Here
(H = 32, n = 16, d = 32, shared, the data's seed 10) the float64 forward pass of the plain float64
readout reports below 1e-12 while the exact model's error is above 3e-11, so at a tolerance of
2e-12 float64 alone cannot tell. Most data sets of this shape show it, but by how much depends
on the last bits of the weights, and so on the CPU's BLAS kernels: among the seeds 0..11, four
put the exact error above 2·2e-12 with float64's check below 1e-12 under both OpenBLAS's
Haswell and Sandybridge kernels (seed 10: 6.0e-13 and 5.4e-11, 2.9e-13 and 3.2e-11). Seed 2,
chosen on an AVX-512 machine, left only 3.4e-12 under the Haswell kernels.
"""

import math

import mpmath
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from construct import ConstructionError, as_dataset, as_weights, build, dword, synthetic, verify
from construct.accurate import VALUE_ROUNDINGS, VISIBLE, changed_outputs, gaps, reordered_outputs, rounding_visible, shared_context
from construct.accurate import outputs as accurate_outputs
from construct.arith import FLOAT64, Mpmath
from construct.certify import certify
from construct.dword import U
from construct.model import feature_matrix, forward, layer_inputs, mean_shift, output_from_features, sealed

TIGHT = 2e-12


@pytest.fixture(scope="module")
def shared():
    return synthetic("shared", T=32 * 15 + 1, n=16, d=32, seed=10)


def _exact_error_bound(weights, data) -> float:
    out = dword.shared_outputs(data.E[0], data.X, weights.W_K, weights.W_Q, weights.W_V, weights.W_O,
                               weights.W_D, weights.skip)
    return dword.error_bound(out, data.Y)


def test_float64_alone_misses_the_exact_error_here(shared):
    # The premise: the default build's float64 check is far below what the exact model does.
    result = build(shared, 32)
    assert result.verification.outputs == "float64"
    assert result.verification.max_abs_error < TIGHT / 2 < 2 * TIGHT < _exact_error_bound(result.weights, shared)


def test_a_tight_tolerance_builds_weights_whose_exact_model_memorizes(shared):
    result = build(shared, 32, tol=TIGHT)
    assert result.verification.outputs == "double words"
    assert _exact_error_bound(result.weights, shared) <= VISIBLE * TIGHT
    cert = certify(result.weights, shared, tol=TIGHT)
    assert cert.claims["memorization"]["proven"] and cert.claims["rank"]["proven"]


def test_verify_evaluates_in_double_words_where_float64_cannot_tell(shared):
    loose = build(shared, 32).weights                  # exact error above 3e-11
    refined = build(shared, 32, tol=TIGHT).weights
    v = verify(loose, shared, tol=TIGHT)
    assert v.outputs == "double words" and not v.passed
    assert v.max_abs_error > 2 * TIGHT                 # the float64 forward pass said below 1e-12
    assert np.abs(forward(shared.E, shared.X, loose) - shared.Y).max() < TIGHT / 2
    v = verify(refined, shared, tol=TIGHT)
    assert v.outputs == "double words" and v.passed
    # verify's figure is |f − y| with f the double words rounded to float64 (within u·|f|), the
    # bound the double words' own: the figure lies below the bound up to that rounding.
    assert v.max_abs_error <= _exact_error_bound(refined, shared) + 2 * U * np.abs(shared.Y).max()


def test_float64_is_kept_where_its_rounding_is_far_below_the_tolerance(shared):
    weights = build(shared, 32).weights
    v = verify(weights, shared)
    assert v.outputs == "float64" and v.passed
    independent = synthetic("independent", T=3 * 15 + 1, n=16, d=32, seed=1)
    assert verify(build(independent, 3).weights, independent, tol=TIGHT).outputs == "float64"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(1, 6), n=st.integers(2, 6), skip=st.booleans())
def test_the_reordered_evaluation_is_the_model(seed, H, n, skip):
    # The detector's second evaluation computes the same function as the forward pass.
    data = synthetic("shared", T=H * (n - 1) + 1, n=n, d=n + 2, seed=seed)
    weights = build(data, H, seed=seed, skip=skip).weights
    f = forward(data.E, data.X, weights)
    g = reordered_outputs(weights, data.E[0], data.X)
    scale = 1 + np.abs(f).max()
    assert np.abs(f - g).max() <= 1e-9 * scale
    assert not rounding_visible(weights, data.E[0], data.X, f, 1e-6 * scale)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(8, 24), n=st.integers(8, 16), skip=st.booleans())
def test_refined_builds_meet_tight_tolerances_in_the_exact_model(seed, H, n, skip):
    data = synthetic("shared", T=H * (n - 1) + 1, n=n, d=2 * n, seed=seed)
    tol = 1e-12
    result = build(data, H, seed=seed, skip=skip, tol=tol)
    allowed = tol * max(1.0, float(np.abs(data.Y).max()))
    if result.weights.bits is None:        # float64 weights: their exact model, in double words
        assert _exact_error_bound(result.weights, data) <= allowed
    # else auto chose mpmath (its float64 arrays are not the model): verify evaluates at its bits
    with FLOAT64.session():
        assert verify(result.weights, data, tol=tol).passed


def _corrected(kind: str, seed: int, H: int, n: int, skip: bool, change: float, d_o: int):
    """A build and the same weights with ``W_V`` and ``W_O`` moved by about ``10^change``
    (relative and absolute): a readout's correction, as the refinement makes one."""
    data = synthetic(kind, T=H * (n - 1) + 1, n=n, d=n + 2, d_o=d_o, seed=seed)
    old = build(data, H, seed=seed, skip=skip).weights
    rng = np.random.default_rng(seed)
    W_V = old.W_V * (1 + 10.0**change * rng.standard_normal(old.W_V.shape))
    W_O = old.W_O + 10.0**change * rng.standard_normal(old.W_O.shape)
    return data, old, sealed(old.W_K, old.W_Q, W_V, W_O, old.W_D, skip=skip, bits=None)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(1, 6), n=st.integers(2, 6), skip=st.booleans(),
       change=st.floats(-9, 0), d_o=st.integers(1, 2))
def test_changed_outputs_are_a_second_pass_in_double_words(seed, H, n, skip, change, d_o):
    # The refinement's outputs after a correction of the readout: the first pass's outputs plus
    # the change, through its probabilities, within the stated bound of a full second pass. The
    # values W_V and W_O both change (a correction changes W_V; W_O may as well).
    data, old, new = _corrected("shared", seed, H, n, skip, change, d_o)
    W_V, W_O = new.W_V, new.W_O
    E, X = data.E[0], data.X
    p = np.empty((data.T, H, n))
    first_dw = accurate_outputs(old, E, X, p)
    got = changed_outputs(first_dw, p, old, new, E)
    full = dword.shared_outputs(E, X, new.W_K, new.W_Q, new.W_V, new.W_O, new.W_D, skip)
    first = dword.shared_outputs(E, X, old.W_K, old.W_Q, old.W_V, old.W_O, old.W_D, skip)
    assert np.array_equal(first_dw.hi, first.hi) and np.array_equal(first_dw.lo, first.lo)
    assert np.array_equal(got.rad, first_dw.rad)
    out, got = first.hi + first.lo, got.hi + got.lo
    assert np.all(p >= 0) and np.allclose(p.sum(axis=2), 1, rtol=0, atol=8 * n * U)
    # The change's own size, Σ p |Δc|, by the definition c_h = E W_V,h W_O,h W_D in float64.
    d_v = old.d_v
    dc = np.stack([E @ (W_V[h] @ W_O[h * d_v:(h + 1) * d_v] - old.W_V[h] @ old.W_O[h * d_v:(h + 1) * d_v])
                   @ old.W_D for h in range(H)])
    size = p.reshape(data.T, H * n) @ np.abs(dc).reshape(H * n, -1)
    gamma = (H * n + 1) * U / (1 - (H * n + 1) * U)
    allowed = (1.01 * ((4 * U + gamma) * size + U * (np.abs(out) + 2 * np.abs(got)))
               + 2 * (full.rad + first.rad) + 1e-300)
    assert np.all(np.abs(got - (full.hi + full.lo)) <= allowed)


def test_changed_outputs_refuse_another_attention():
    data = synthetic("shared", T=7, n=3, d=5, seed=3)
    old = build(data, 3, seed=3).weights
    p = np.empty((data.T, 3, 3))
    out = accurate_outputs(old, data.E[0], data.X, p)
    others = [sealed(old.W_K * 2, old.W_Q, old.W_V, old.W_O, old.W_D, skip=old.skip, bits=None),
              sealed(old.W_K, old.W_Q * 2, old.W_V, old.W_O, old.W_D, skip=old.skip, bits=None),
              sealed(old.W_K, old.W_Q, old.W_V, old.W_O, old.W_D * 2, skip=old.skip, bits=None),
              sealed(old.W_K, old.W_Q, old.W_V, old.W_O, old.W_D, skip=not old.skip, bits=None)]
    for other in others:
        with pytest.raises(ValueError, match="W_V and W_O alone"):
            changed_outputs(out, p, old, other, data.E[0])


# Square contexts (n = d), independent: Claim 1's key map U (X_S^T X_S)^{-1} X_S^T is as
# ill-conditioned as the group's queries, so the logits cancel and float64 rounds them far above
# u·|ℓ|. Here (H = 4, n = d = 48, the data's seed 1) the float64 forward pass of the plain readout
# reports about 1e-15 while the exact model misses by about 2e-8, above the default tolerance.
@pytest.fixture(scope="module")
def square():
    return synthetic("independent", T=4 * 47 + 1, n=48, d=48, seed=1)


def _exact_error(weights, data) -> float:
    with FLOAT64.session():
        out = dword.outputs(data.E, data.X, weights.W_K, weights.W_Q, weights.W_V, weights.W_O,
                            weights.W_D, weights.skip, rows=FLOAT64.rows)
    return dword.error_bound(out, data.Y)


def test_square_contexts_float64_alone_misses_the_exact_error(square):
    # The premise: at a loose tolerance the plain readout is kept, and float64 agrees with itself.
    loose = build(square, 4, tol=1e-6)
    assert loose.verification.outputs == "float64"
    assert loose.verification.max_abs_error < 1e-12 < 1.5e-8 < _exact_error(loose.weights, square)


def test_square_contexts_default_build_memorizes_in_the_exact_model_and_is_certified(square):
    result = build(square, 4)
    assert result.verification.outputs == "double words" and result.verification.passed
    assert _exact_error(result.weights, square) <= VISIBLE * 1e-8
    cert = certify(result.weights, square)
    assert cert.claims["memorization"]["proven"] and cert.claims["rank"]["proven"]


def test_verify_on_square_contexts_evaluates_in_double_words(square):
    loose = build(square, 4, tol=1e-6).weights
    v = verify(loose, square)
    assert v.outputs == "double words" and not v.passed and v.max_abs_error > 1.5e-8
    # while the float64 forward pass passes the tolerance: it rounds in another order than the
    # build's (heads in groups), and sees 2e-9 of the exact model's 1.5e-8
    assert np.abs(forward(square.E, square.X, loose) - square.Y).max() <= 1e-8
    v = verify(build(square, 4).weights, square)
    assert v.outputs == "double words" and v.passed


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(1, 6), n=st.integers(2, 6), skip=st.booleans(),
       d_o=st.integers(1, 4))           # heads folded in groups of d // d_o, one at a time where d_o > d / 2
def test_the_reordered_evaluation_is_the_model_on_independent_contexts(seed, H, n, skip, d_o):
    data = synthetic("independent", T=H * (n - 1) + 1, n=n, d=n + 2, d_o=d_o, seed=seed)
    weights = build(data, H, seed=seed, skip=skip).weights
    f = forward(data.E, data.X, weights)
    g = reordered_outputs(weights, data.E, data.X)
    scale = 1 + np.abs(f).max()
    assert g.shape == f.shape and np.abs(f - g).max() <= 1e-9 * scale
    assert not rounding_visible(weights, data.E, data.X, f, 1e-6 * scale)
    assert rounding_visible(weights, data.E, data.X, f + 1e-6 * scale, 1e-6 * scale)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(1, 6), n=st.integers(2, 6), skip=st.booleans(),
       change=st.floats(-9, 0), d_o=st.integers(1, 2))
def test_changed_outputs_on_independent_contexts_are_a_second_pass_in_double_words(seed, H, n, skip, change, d_o):
    # On contexts of their own a correction's outputs are the first pass's plus Σ p_hj Δc_hj(t),
    # Δc_h(t) = E^(t) ΔB_h with ΔB the change of every head's W_V,h W_O,h W_D in double words,
    # within the stated bound of a full second pass.
    data, old, new = _corrected("independent", seed, H, n, skip, change, d_o)
    W_V, W_O = new.W_V, new.W_O
    p = np.empty((data.T, H, n))
    first_dw = accurate_outputs(old, data.E, data.X, p)
    got = changed_outputs(first_dw, p, old, new, data.E)
    full = dword.outputs(data.E, data.X, new.W_K, new.W_Q, new.W_V, new.W_O, new.W_D, skip)
    first = dword.outputs(data.E, data.X, old.W_K, old.W_Q, old.W_V, old.W_O, old.W_D, skip)
    assert np.array_equal(first_dw.hi, first.hi) and np.array_equal(first_dw.lo, first.lo)
    assert np.array_equal(got.rad, first_dw.rad)
    out, got = first.hi + first.lo, got.hi + got.lo
    assert np.all(p >= 0) and np.allclose(p.sum(axis=2), 1, rtol=0, atol=8 * n * U)
    d, d_v = data.d, old.d_v
    dB = np.stack([(W_V[h] @ W_O[h * d_v:(h + 1) * d_v] - old.W_V[h] @ old.W_O[h * d_v:(h + 1) * d_v]) @ old.W_D
                   for h in range(H)])                                                  # (H, d, d_o)
    size = sum(np.einsum("tn,tno->to", p[:, h], np.abs(data.E @ dB[h])) for h in range(H))
    reach = sum(np.einsum("tn,tno->to", p[:, h], np.abs(data.E) @ np.abs(dB[h])) for h in range(H))
    gamma = lambda k: k * U / (1 - k * U)                                              # noqa: E731
    allowed = (1.01 * ((4 * U + gamma(H * n + 1)) * (size + gamma(d + 2) * reach) + gamma(d + 2) * reach
                       + U * (np.abs(out) + 2 * np.abs(got))) + 2 * (full.rad + first.rad) + 1e-300)
    assert np.all(np.abs(got - (full.hi + full.lo)) <= allowed)


@pytest.fixture(scope="module")
def near_twins():
    """Contexts of their own whose first two tokens differ by 1e-7: the saturating and explicit
    scales reach 1e16 there, and float64's rounding of the logits (b·x times the scale) reaches
    the outputs, far above the tolerance, while the float64 forward pass agrees with itself."""
    rng = np.random.default_rng(2)
    E = rng.normal(size=(141, 8, 16))
    E[:, 1] = E[:, 0] + 1e-7 * rng.normal(size=(141, 16))
    return as_dataset(E, rng.normal(size=(141, 16)), rng.uniform(size=141))


def test_large_scales_on_independent_contexts_are_refined_or_refused(near_twins):
    result = build(near_twins, 20, scale="saturating")
    assert result.verification.outputs == "double words" and result.verification.passed
    assert _exact_error(result.weights, near_twins) <= 1e-8
    with pytest.raises(ConstructionError, match="verification failed.*the default scale rule, rank"):
        build(near_twins, 20, scale="explicit")


# Below float64's rounding of the labels themselves. Here (general position, T = 13, n = 4,
# d = 8, H = 4, the data's and the build's seed 0) the exact model misses by 1.62e-16 while the
# outputs, rounded to float64, are within 1.11e-16 of the labels: verify, in double words at
# such a tolerance, rounded them before subtracting the labels and so passed a tolerance of
# 1.2e-16 that the exact model misses (an independent implementation found it).
@pytest.fixture(scope="module")
def fine():
    data = synthetic("general-position", T=13, n=4, d=8, seed=0)
    return data, build(data, 4, seed=0).weights


def _error_at_300_bits(weights, data) -> float:
    exact = Mpmath(300)                                  # float64 weights and data, taken as exact
    with exact.working():
        w = weights.map(exact.asarray, bits=None)
        Z = feature_matrix(exact.asarray(data.E), exact.asarray(data.X), w, exact, layered=True)
        out = output_from_features(Z, exact.asarray(data.X), w, exact)
        return max(abs(float(o - y)) for o, y in zip(out.ravel(), data.Y.ravel()))


def test_verify_reports_the_exact_error_below_the_labels_own_rounding(fine):
    data, weights = fine
    error = _error_at_300_bits(weights, data)
    # The premise: a few float64 units of y (1e-16 to 2e-16 with AVX2 kernels, 4.2e-16 with AVX-512's:
    # the build's rounding is the machine's).
    assert 1e-17 < error < 1e-15
    for tol, passes in ((0.95 * error, False), (1.05 * error, True)):
        v = verify(weights, data, tol=tol)
        assert v.outputs == "double words" and v.passed is passes
        assert abs(v.max_abs_error - error) <= 1e-6 * error



# With Proposition 4's pre-layer (general position, T = 21, n = 6, d = 8, H = 4, the data's seed
# 2, the build's 0): verify took the layer's outputs in float64, each token rounded to u·|e|,
# and evaluated the attention layer in double words on those. The exact two-layer model misses
# by 1.87e-15; verify reported 1.70e-15 and passed a tolerance of 0.999 times the exact error.
@pytest.fixture(scope="module")
def layered():
    data = synthetic("general-position", T=4 * 5 + 1, n=6, d=8, seed=2)
    return data, build(data, 4, seed=0, prelayer="mean-shift").weights


def _two_layer_error_at_300_bits(weights, data) -> float:
    exact = Mpmath(300)
    with exact.working():
        w = weights.map(exact.asarray, bits=None)
        E, X = layer_inputs(weights, exact.asarray(data.E), exact.asarray(data.X), exact)
        out = output_from_features(feature_matrix(E, X, w, exact, layered=True), X, w, exact)
        return max(abs(float(o - y)) for o, y in zip(out.ravel(), data.Y.ravel()))


def test_verify_after_the_pre_layer_reports_the_exact_two_layer_error(layered):
    data, weights = layered
    error = _two_layer_error_at_300_bits(weights, data)
    # The premise: a few float64 units of y, not zero (1.87e-15 here; 8.1e-16 on NumPy 2.5.2 with
    # its OpenBLAS, whose kernels round otherwise: the build's rounding is the machine's).
    assert 1e-16 < error < 1e-14
    for tol, passes in ((0.95 * error, False), (1.05 * error, True)):
        v = verify(weights, data, tol=tol)
        assert v.outputs == "double words" and v.passed is passes
        assert abs(v.max_abs_error - error) <= 1e-6 * error


@pytest.mark.parametrize("scale", [0, 80])
def test_a_tight_build_after_the_pre_layer_memorizes_in_the_exact_two_layer_model(scale):
    # Shared contexts (T = 21, n = 6, d = 8, H = 4, the data's seed 2) at a tolerance of 2e-13:
    # the refinement, against the layer's float64 outputs, reported 8e-15 for weights whose exact
    # two-layer model misses by 5.1e-13. Scaled by 2^80, the data are built at unit scale and
    # checked at their own.
    data = synthetic("shared", T=4 * 5 + 1, n=6, d=8, seed=2)
    data = as_dataset(np.ldexp(data.E, scale), np.ldexp(data.X, scale), data.Y)
    result = build(data, 4, seed=0, prelayer="mean-shift", tol=2e-13, precision="float64")
    v = result.verification
    error = _two_layer_error_at_300_bits(result.weights, data)
    assert v.outputs == "double words" and error <= v.tol
    assert abs(v.max_abs_error - error) <= 1e-6 * error



def test_contexts_that_the_pre_layer_rounds_to_one_are_not_taken_as_shared():
    # A review: raw contexts that differ by ulps, whose float64 shifted contexts are all the
    # same, were taken as one shared context, and the double words evaluated every example on
    # example 0's raw context: verify reported 2.5e-14 for a two-layer model missing by 6.6e-14.
    data = synthetic("shared", T=4 * 5 + 1, n=6, d=8, seed=2)
    E = data.E.copy()
    first = mean_shift(E[:1], data.X[:1])[0]
    for t in range(1, data.T):                 # move each coordinate by an ulp where the shift stays
        for j, k in np.ndindex(*E.shape[1:]):
            for direction in (np.inf, -np.inf):
                old = E[t, j, k]
                E[t, j, k] = np.nextafter(old, direction)
                if np.array_equal(mean_shift(E[t:t + 1], data.X[:1])[0], first):
                    break
                E[t, j, k] = old
    moved = as_dataset(E, data.X, data.Y)
    assert not shared_context(moved.E) and shared_context(mean_shift(moved.E, moved.X)[0])
    weights = build(data, 4, seed=0, prelayer="mean-shift", tol=2e-13, precision="float64").weights
    error = _two_layer_error_at_300_bits(weights, moved)
    v = verify(weights, moved, tol=1.05 * error)
    assert v.outputs == "double words" and v.passed and abs(v.max_abs_error - error) <= 1e-6 * error
    assert not verify(weights, moved, tol=0.95 * error).passed
    result = build(moved, 4, seed=0, prelayer="mean-shift", tol=2e-13, precision="float64")
    error = _two_layer_error_at_300_bits(result.weights, moved)
    assert error <= result.verification.tol and abs(result.verification.max_abs_error - error) <= 1e-6 * error

def test_certificates_after_the_pre_layer_bound_the_exact_error_to_double_words(layered):
    # The float64 enclosure bounds this model's error by about 4e-11; on the layer's outputs in
    # double words the bound sits on the exact error, and a label moved past what is allowed is
    # refused.
    data, weights = layered
    error = _two_layer_error_at_300_bits(weights, data)
    cert = certify(weights, data, tol=4 * error, method="float64")
    bound = cert.claims["memorization"]["max_abs_error_bound"]
    assert cert.passed and error <= bound <= 1.02 * error            # (rounded up to three digits)
    Y = data.Y.copy()
    Y[5, 0] += cert.claims["allowed"] + 2 * error
    refused = certify(weights, type(data)(data.E, data.X, Y), tol=4 * error, method="float64")
    assert not refused.claims["memorization"]["proven"]
    assert refused.claims["memorization"]["max_abs_error_bound"] >= cert.claims["allowed"] + error

def test_rounding_is_visible_where_float64_cannot_resolve_the_outputs_themselves():
    # Two evaluations that agree to the last bit say nothing below float64's own rounding of the
    # outputs: with no attention (zero heads) and the skip connection, f = x W_D in either order.
    data = synthetic("independent", T=5, n=3, d=4, seed=0)
    zero = np.zeros((1, 4, 4))
    weights = sealed(zero, zero, zero, np.zeros((4, 4)), np.ones((4, 1)), skip=True, bits=None)
    out = forward(data.E, data.X, weights)
    size = float(np.abs(out).max())
    assert np.array_equal(reordered_outputs(weights, data.E, data.X), out)
    assert rounding_visible(weights, data.E, data.X, out, allowed=U * size)
    assert not rounding_visible(weights, data.E, data.X, out, allowed=1e6 * U * size)


@settings(max_examples=300, deadline=None)
@given(hi=st.floats(-1e6, 1e6, allow_subnormal=False), frac=st.floats(-0.5, 0.5),
       y_off=st.integers(-64, 64))
def test_gaps_from_double_words_are_the_exact_difference_rounded_once(hi, frac, y_off):
    # f = hi + lo exactly (|lo| ≤ half an ulp of hi), y a float near it: (hi − y) + lo is the
    # exact f − y to within one rounding of its own size, not of y's.
    lo = frac * float(np.spacing(hi))
    y = float(hi + y_off * np.spacing(hi))
    out = dword.DW(np.array([[hi]]), np.array([[lo]]), np.zeros((1, 1)))
    gap = float(gaps(out, np.array([[y]]))[0, 0])
    exact = Fraction(hi) + Fraction(lo) - Fraction(y)
    assert abs(Fraction(gap) - exact) <= Fraction(U) * abs(exact)


def test_the_reordered_evaluation_keeps_queries_far_below_the_largest():
    # Two examples whose logits are at unit scale, one of contexts 2^-600 and query 2^600, one of
    # contexts 2^500 and query 2^-500. The forward pass is exact to rounding on both; the
    # detector, once its heads went in groups, scaled x by 2^-601 for every example, the second
    # query to 2^-1101, which is 0: its N x was 0, and its reordered outputs missed by 3.5 times
    # their size (per head, with x scaled by W_Q's exponent, they were within 2e-15), so float64's
    # rounding read as visible where it is not. Each query now has its own scale.
    rng = np.random.default_rng(3)
    H, d, n, T = 2, 4, 3, 6
    weights = sealed(rng.standard_normal((H, d, 2)), rng.standard_normal((H, d, 2)), rng.standard_normal((H, d, 1)),
                     rng.standard_normal((H, d)), rng.standard_normal((d, 1)), skip=False, bits=None)
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    E[0], X[0] = np.ldexp(E[0], -600), np.ldexp(X[0], 600)
    E[1], X[1] = np.ldexp(E[1], 500), np.ldexp(X[1], -500)
    f, g = forward(E, X, weights), reordered_outputs(weights, E, X)
    assert np.all(np.abs(g - f) <= 1e-12 * np.abs(f).max(axis=1, keepdims=True))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=6),
       st.lists(st.integers(-3300, 3300), min_size=1, max_size=6))
@example([1.5, 3e-300, 5e300, 2.445259689852401e-12], [-1060, 2000, -2400, -1001])   # in steps, and not
def test_scaling_by_powers_of_two_entry_by_entry_rounds_once(values, exponents):
    # The detector's per-query scales: A · 2^S for integer arrays S, in steps where one power of
    # two is out of range, is numpy.ldexp's single rounding (subnormal and overflowing results too).
    k = min(len(values), len(exponents))
    A, S = np.array(values[:k]), np.array(exponents[:k])
    with np.errstate(over="ignore"):
        assert np.array_equal(FLOAT64.ldexp(A, S), np.ldexp(A, S))


def _huge_logit_weights():
    """One head whose logits are about 1e17 apart from 1: ``1e17 + 1`` rounds to ``1e17`` in
    float64 whatever the order of operations, so two float64 evaluations agree on attention
    ``(1/2, 1/2)`` where the exact model's is ``(e, 1)/(1 + e)``."""
    return as_weights(np.array([[[1e17], [1.0]]]), np.array([[[1.0], [0.0]]]), np.array([[[0.0], [1.0]]]),
                      np.array([[1.0, 0.0]]), np.array([[1.0], [0.0]]), skip=False)


@pytest.mark.parametrize("shared", [False, True])
def test_verify_does_not_pass_logits_that_float64_rounds_alike_in_every_order(shared):
    # Found in review: weights whose exact model misses a label by 0.23 passed verify (error 0,
    # tolerance 1e-8): the second float64 evaluation rounds the logit 1e17 + 1 as the first
    # does, and on contexts of their own no double-word pass ran.
    w = _huge_logit_weights()
    E = (np.array([[[1.0, 1.0], [1.0, 0.0]]] * 2) if shared else
         np.array([[[1.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]]))
    X = np.array([[1.0, 0.0], [1.0, 0.0]])
    Y = forward(E, X, w)                                # what float64 computes: the labels it "fits"
    assert Y[0, 0] == 0.5                               # exact: e/(1 + e); the other example's logits are small
    v = verify(w, as_dataset(E, X, Y))
    assert v.outputs == "double words" and not v.passed, v     # (the shared Z has rank 1 as well)
    assert abs(v.max_abs_error - (math.e / (1 + math.e) - 0.5)) < 1e-9, v
    assert rounding_visible(w, E[0] if shared else E, X, Y, allowed=1e-8)


def test_where_the_double_words_overflow_float64_does_not_decide_a_pass(tmp_path, capsys):
    """From review: the overflow fallback let float64's measure decide `passed` on exactly the
    examples where the detector had judged float64 unreliable. The weights above, whose exact
    model misses a label by 0.23, with W_D and the labels scaled by 2^996 (exact, no decision
    changes) passed with error 0. The double words are now taken at the readout's unit scale
    (the exact error, scaled: a fail); where they overflow even so (here a logit near 1e300),
    float64's measure is reported and cannot pass."""
    w = _huge_logit_weights()
    E = np.array([[[1.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])
    X = np.array([[1.0, 0.0], [1.0, 0.0]])
    big = as_weights(w.W_K, w.W_Q, w.W_V, w.W_O, np.ldexp(np.asarray(w.W_D), 996), skip=False)
    v = verify(big, as_dataset(E, X, np.ldexp(forward(E, X, w), 996)))
    assert v.outputs == "double words" and not v.passed, v
    assert abs(v.max_abs_error / 2.0 ** 996 - (math.e / (1 + math.e) - 0.5)) < 1e-9, v
    far = as_weights(np.array([[[1e300], [1.0]]]), w.W_Q, w.W_V, w.W_O, w.W_D, skip=False)
    labels = forward(E, X, far)                        # float64's own outputs: its error is 0
    v = verify(far, as_dataset(E, X, labels))
    assert v.outputs == "double words, float64 where they overflow" and not v.passed, v
    assert v.max_abs_error == 0.0                       # float64's measure, which passes: not enough
    from construct.cli import main
    far.save(tmp_path / "w.npz")
    as_dataset(E, X, labels).save(tmp_path / "d.npz")
    assert main(["verify", str(tmp_path / "w.npz"), str(tmp_path / "d.npz")]) == 1
    assert "FAIL: the double words overflowed on some examples" in capsys.readouterr().out


@settings(max_examples=60, deadline=None)
@given(T=st.integers(0, 6), n=st.integers(1, 3), d=st.integers(1, 3), seed=st.integers(0, 2 ** 32 - 1),
       differ=st.integers(-1, 5), signed_zero=st.booleans())
def test_shared_context_is_every_context_equal_to_the_first(T, n, d, seed, differ, signed_zero):
    """A context that differs anywhere (the second, or only a later one) makes the contexts not
    shared; -0.0 equals 0.0 as a number."""
    E = np.broadcast_to(np.random.default_rng(seed).standard_normal((1, n, d)), (T, n, d)).copy()
    if signed_zero and T:
        E[:, 0, 0] = 0.0
        E[-1, 0, 0] = -0.0
    if 0 <= differ < T and differ > 0:
        E[differ, -1, -1] = np.nextafter(E[differ, -1, -1], np.inf)
    assert shared_context(E) == bool(np.all(E == E[:1]))
    assert shared_context(E) == (not 0 < differ < T)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), H=st.integers(9, 26), d_o=st.sampled_from([1, 3, 16, 70]),
       skip=st.booleans(), T=st.sampled_from([1, 300]))
def test_the_reordered_evaluation_weighs_every_head_once_across_groups_and_spans(seed, H, d_o, skip, T):
    """At d = 64 the detector's heads go in groups of 8 and its values in spans of d // d_o heads
    (64, 21, 4 or 1), which cut across the groups; its outputs and its estimate of the rounding
    (the logits' and the values', docs in construct.accurate) are those of the model evaluated
    example by example and head by head."""
    from construct.accurate import _moved, _reordered
    rng = np.random.default_rng(seed)
    n, d, d_v = 3, 64, 5
    weights = sealed(rng.standard_normal((H, d, 4)) / 4, rng.standard_normal((H, d, 4)) / 4,
                     rng.standard_normal((H, d, d_v)), rng.standard_normal((H * d_v, d)), rng.standard_normal((d, d_o)),
                     skip=skip, bits=None)
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    out, moved = _reordered(weights, E, X)
    want, want_moved = (X @ weights.W_D if skip else np.zeros((T, d_o))), np.zeros(T)
    for t in range(T):
        # The values' Σ|terms| per output, Σ_hj p_hj |e_j|^T |B_h|, bounded by the largest token's
        # norm times Σ_h ‖B_h[:, o]‖ (the skip connection's |x|^T |W_D| added).
        value_sizes = np.abs(X[t]) @ np.abs(weights.W_D) if skip else np.zeros(d_o)
        for h in range(H):
            K, Q = weights.W_K[h], weights.W_Q[h]
            N = K @ Q.T
            logits = E[t] @ (N @ X[t])
            s = np.exp(logits - logits.max())
            B = weights.W_V[h] @ weights.W_O[h * d_v:(h + 1) * d_v] @ weights.W_D
            c = E[t] @ B                                                                         # (n, d_o)
            want[t] += s @ c / s.sum()
            half_range = np.max(c.max(axis=0) - c.min(axis=0)) / 2
            # Each logit's terms through N = K Q^T, N x and e^T (N x), root-sum-squared: at most
            # the largest token's norm times the root of max_k (N x)_k² + ‖x‖² max S.
            S = N**2 + K**2 @ (Q**2).T
            terms = (N @ X[t]) ** 2 + S @ X[t] ** 2
            bound = (N @ X[t]) ** 2 + np.sum(X[t] ** 2) * S.max()
            rss = np.linalg.norm(E[t], axis=1).max() * np.sqrt(bound.max())
            assert rss >= np.sqrt(E[t] ** 2 @ terms).max() * (1 - 1e-12)
            rest = np.delete(s, np.argmax(logits)).sum()                    # the weight off the top
            want_moved[t] += _moved(np, max(np.abs(logits).max(), rss), rest / s.sum(), half_range)
            exact_terms = (s / s.sum()) @ (np.abs(E[t]) @ np.abs(B))
            bound = np.linalg.norm(E[t], axis=1).max() * np.linalg.norm(B, axis=0)
            assert np.all(bound >= exact_terms * (1 - 1e-12))
            value_sizes += bound
        want_moved[t] += VALUE_ROUNDINGS * U * np.max(value_sizes)
    assert np.allclose(out, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    assert np.allclose(moved, want_moved, rtol=1e-9, atol=0)


def test_square_contexts_report_float64s_own_error_beside_the_exact_models(square, tmp_path, capsys):
    """From an independent review: on square contexts a build that passes (in double words) gives
    float64 weights that every float64 forward pass, construct.forward's and the exports', scores
    above the tolerance, and nothing said so. The verification now carries float64's own error
    (its outputs from Z, exactly), the summaries print it, and where float64 is what the outputs
    are in there is no such field."""
    import json
    from construct.cli import main
    result = build(square, 4)
    v = result.verification
    assert v.outputs == "double words" and v.passed and v.max_abs_error <= 1e-8
    with FLOAT64.session():
        Z = feature_matrix(square.E, square.X, result.weights, FLOAT64, layered=True)
    own = float(np.abs(output_from_features(Z, square.X, result.weights, FLOAT64) - square.Y).max())
    again = verify(result.weights, square)
    assert again.float64_error == own and again.passed
    assert v.float64_error > 1e-8 and np.abs(forward(square.E, square.X, result.weights) - square.Y).max() > 1e-8
    assert again.to_dict()["float64_error"] == own
    plain = verify(*(lambda d: (build(d, 4).weights, d))(synthetic("independent", T=4 * 3 + 1, n=4, d=8, seed=0)))
    assert plain.outputs == "float64" and plain.float64_error is None and plain.to_dict()["float64_error"] is None

    folder = tmp_path / "run"
    square.save(tmp_path / "square.npz")
    assert main(["build", str(tmp_path / "square.npz"), "--heads", "4", "--out", str(folder)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("float64 "))
    assert "MISSES the tolerance" in line
    report = json.loads((folder / "report.json").read_text())
    assert report["verification"]["float64_error"] > 1e-8
    assert main(["verify", str(folder / "weights.npz"), str(folder / "data.npz")]) == 0
    assert "about as much): MISSES the tolerance" in capsys.readouterr().out


def test_where_the_double_words_overflow_verify_reports_a_finite_error():
    """From a hostile trial: weights whose readout was scaled by 1e300 made verify report
    `max |f - y| inf` in double words (their splitting of products overflows), while the model's
    outputs, near 1e300, are finite (certify bounds the error by the same 9.3e299). The double
    words are now taken at the readout's unit scale, and the error comes out finite."""
    from construct import as_weights
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    w = build(data, 3).weights
    huge = as_weights(w.W_K, w.W_Q, w.W_V, w.W_O, np.asarray(w.W_D) * 1e300, skip=w.skip)
    v = verify(huge, data)
    assert v.outputs == "double words" and not v.passed
    assert math.isfinite(v.max_abs_error) and v.max_abs_error > 1e299
    assert np.isclose(v.max_abs_error, np.abs(forward(data.E, data.X, huge) - data.Y).max(), rtol=1e-12)


def test_double_words_near_overflow_are_taken_at_the_readouts_unit_scale(square):
    """From a second review: after the overflow fix, weights that memorize (square contexts,
    where float64's rounding shows) with W_D and the labels scaled by 2^996 failed verify, and a
    build of such labels failed: their double words overflow near 1e300. The model is linear in
    W_D, so the double words are taken with W_D and the labels scaled back by a power of two
    (exact), and the gaps scaled up again: the same verdict as at unit scale."""
    w = build(square, 4).weights
    small = verify(w, square)
    assert small.outputs == "double words" and small.passed
    big = as_weights(w.W_K, w.W_Q, w.W_V, w.W_O, np.ldexp(np.asarray(w.W_D), 996), skip=w.skip)
    scaled = as_dataset(square.E, square.X, np.ldexp(square.Y, 996))
    v = verify(big, scaled)
    assert v.outputs == "double words" and v.passed, v
    assert abs(v.max_abs_error / 2.0 ** 996 - small.max_abs_error) <= 1e-3 * small.max_abs_error + 1e-30
    built = build(scaled, 4)                          # built at unit scale: the scale goes into W_V
    assert built.verification.passed and built.verification.outputs == "double words"


def _cancelling_logit_weights():
    """One head, one example, two tokens: the logit of the first token is ``x1·K1 + x2·K2`` with
    terms near 4.5e15 that cancel to 2.0065 exactly, where float64 gets 2.5 or 3 in any order of
    summation, with or without FMA (an independent soundness review's case)."""
    x1, x2, a, b = 4532593205260889, 4532593205260888, 162836514681, 162836514680
    K1, K2 = 1 + a * 2.0 ** -52, -(1 + b * 2.0 ** -52)                     # exact float64 numbers
    E = np.array([[[float(x1), float(x2)], [0.0, 1.0]]])
    X = np.array([[1.0, 0.0]])
    w = as_weights(np.array([[[K1], [K2]]]), np.array([[[1.0], [0.0]]]), np.array([[[2.0 ** -52], [0.0]]]),
                   np.array([[1.0, 0.0]]), np.array([[1.0], [0.0]]))
    return w, E, X


def _exact_output(weights, E, X) -> float:
    """The one output of the first example at 300 bits, the pre-layer (if any) applied exactly."""
    exact = Mpmath(300)
    with exact.working():
        w = weights.map(exact.asarray, bits=None)
        E2, X2 = layer_inputs(weights, exact.asarray(E), exact.asarray(X), exact)
        return float(output_from_features(feature_matrix(E2, X2, w, exact, layered=True), X2, w, exact)[0, 0])


@pytest.mark.parametrize("shared", [False, True])
def test_verify_sees_cancellation_inside_the_logits_dot_products(shared):
    # Found by a soundness review: both float64 evaluations form the cancelling dot product
    # alike, so they agreed, the logit itself is small (u·|ℓ| tiny), and verify passed labels
    # the exact model misses by 0.018 (and failed the exact ones), "outputs in float64". On a
    # shared context (the example twice) the detector takes the other route, W_K^T E^T first.
    w, E, X = _cancelling_logit_weights()
    if shared:
        E, X = np.concatenate([E, E]), np.concatenate([X, X])
    exact = _exact_output(w, E, X)
    f64 = forward(E, X, w)
    assert abs(f64[0, 0] - exact) > 0.01                        # the premise: float64 is far off
    wrong = verify(w, as_dataset(E, X, f64))
    assert wrong.outputs == "double words" and not wrong.passed
    assert abs(wrong.max_abs_error - abs(f64[0, 0] - exact)) < 1e-9
    right = verify(w, as_dataset(E, X, np.full((len(X), 1), exact)))
    assert right.outputs == "double words" and right.max_abs_error < 1e-15
    assert right.passed is (not shared)                        # twice the same example: rank Z = 1


def test_verify_sees_the_pre_layers_rounding_of_its_outputs():
    # Found by a soundness review: with the mean shift, both float64 evaluations read the
    # layer's outputs rounded once to float64 (B + 2^-13 loses its 2^-13); the mean of the two
    # tokens then cancels B and shows that loss (exact 2.44e-4, float64 1.83e-4), and verify
    # passed the float64 outputs as labels.
    B = 2.0 ** 40
    E = np.array([[[B, 0.0], [-B + 2.0 ** -12, 1.0]]])
    X = np.array([[0.0, 1.0]])
    zero = np.zeros((1, 2, 1))
    w = as_weights(zero, zero, np.array([[[1.0], [0.0]]]), np.array([[1.0, 0.0]]), np.array([[1.0], [0.0]]),
                   prelayer="mean-shift")
    exact = _exact_output(w, E, X)
    f64 = forward(E, X, w)
    assert abs(f64[0, 0] - exact) > 1e-5                        # the premise
    wrong = verify(w, as_dataset(E, X, f64))
    assert wrong.outputs == "double words" and not wrong.passed
    right = verify(w, as_dataset(E, X, np.array([[exact]])))
    assert right.outputs == "double words" and right.passed


def _saturated_head(T: int):
    """A second soundness review's case: one head whose logits near 3e17 are each rounded once,
    alike in every float64 order; float64 puts weight e^-64 on the second token where the exact
    model puts e^-85.3, and that token carries a value of e^64. The normalizer rounds to 1."""
    x0 = float.fromhex("0x1.5555555555555p-2")                           # fl(1/3)
    top = 301061970003599360.0
    E, X = np.zeros((T, 2, 2)), np.zeros((T, 2))
    for t in range(T):
        a = top + 2.0 ** 10 * t * 7                                      # a context of its own each
        E[t] = [[a, 0.0], [a - 256.0, 1.0 + t]]
        X[t] = [x0, 0.0]
    gap = E[0, 0, 0] * x0 - E[0, 1, 0] * x0                              # float64's logit gap
    w = as_weights(np.array([[[1.0], [0.0]]]), np.array([[[1.0], [0.0]]]),
                   np.array([[[0.0], [float(mpmath.exp(gap))]]]), np.array([[1.0, 0.0]]), np.array([[1.0], [0.0]]))
    return w, E, X


def _saturated_unit_tokens():
    """The same on contexts of their own with unit-size tokens: logits near 1.5e17 from the key
    map, an exact gap of 32.6 that float64 makes 64, and a value of 3e7 on the second token."""
    k = float.fromhex("0x1.04ccd32cf4b6cp+57")
    e1, e2 = float.fromhex("0x1.03b29d299355bp+0"), float.fromhex("0x1.03b29d299355ap+0")
    E, X = np.zeros((2, 2, 3)), np.zeros((2, 3))
    E[0] = [[e1, 0.0, 0.25], [e2, 1.0, 0.0]]
    E[1] = [[e1, 0.0, -0.25], [e2, 1.0, 0.125]]
    X[:] = [1.0, 0.0, 0.0]
    w = as_weights(np.array([[[k], [0.0], [0.0]]]), np.array([[[1.0], [0.0], [0.0]]]),
                   np.array([[[0.0], [3e7], [0.0]]]), np.array([[1.0, 0.0, 0.0]]), np.array([[1.0], [0.0], [0.0]]))
    return w, E, X


@pytest.mark.parametrize("case", ["shared context", "contexts of their own"])
def test_verify_sees_the_rounding_of_a_saturated_softmax(case):
    # Found by a second soundness review: the estimate weighed the logits' rounding by 1 − p_max
    # with p_max = 1/total in float64, which is exactly 0 once the other weights are below 2^-53;
    # verify passed float64's outputs where the exact model is 0.995 off (one shared context) and
    # 2.1e-7 off (unit tokens, their own contexts), "outputs in float64".
    w, E, X = _saturated_head(1) if case == "shared context" else _saturated_unit_tokens()
    f64 = forward(E, X, w)
    exact = _exact_output(w, E, X)
    assert abs(f64[0, 0] - exact) > 1.5e-7                        # the premise
    v = verify(w, as_dataset(E, X, f64))
    assert v.outputs == "double words" and v.max_abs_error > 1.5e-7 and not v.passed


def test_verify_sees_the_pre_layers_rounding_through_the_skip_connection():
    # A second soundness review: the mean of tokens ±2^40 cancels, float64's mean (2.36e-4) is
    # far from the exact one (2.5e-4), and the skip connection carries x' = x + mean to the
    # outputs times 1e4; both float64 orders read the same rounded x'. Passed 0.14 off.
    E = np.array([[[2.0**40, 0.0, 1, 0], [3e-4, 1.0, 0, 1], [-2.0**40, 2.0, 0, 0], [7e-4, 3.0, 1, 1]],
                  [[2.0**40, 0.5, 0, 1], [3e-4, 1.0, 1, 1], [-2.0**40, 2.0, 1, 0], [7e-4, 3.0, 0, 0]]])
    X = np.zeros((2, 4))
    W_K, W_Q, W_D = np.zeros((1, 4, 1)), np.zeros((1, 4, 1)), np.zeros((4, 1))
    W_K[0, 1, 0], W_Q[0, 3, 0], W_D[0, 0] = 1.0, 1.0, 1e4
    w = as_weights(W_K, W_Q, np.zeros((1, 4, 1)), np.zeros((1, 4)), W_D, skip=True, prelayer="mean-shift")
    f64 = forward(E, X, w)
    exact = _exact_output(w, E, X)
    assert abs(f64[0, 0] - exact) > 0.1                            # the premise
    v = verify(w, as_dataset(E, X, f64))
    assert v.outputs == "double words" and not v.passed


def test_verify_counts_the_several_roundings_of_each_values_term():
    # A second soundness review: two heads whose outputs (about 1e8) cancel; every float64 order
    # rounds the softmax (exp, its normalizer) and the sum over tokens alike. The values' estimate
    # counted one rounding (u) per term and passed float64's outputs 1.9 times that away from the
    # exact model: 4.25e-8 off at an allowed 3e-8.
    K = [['0x1.2655ddd7ddc00p-3', '-0x1.b0cebdad6b654p-1', '0x1.e89f23505375cp-1', '-0x1.8e99d692d9664p-1',
          '-0x1.0392edc864300p-6', '-0x1.e0c217924335ep-1', '-0x1.81c26506cc648p-3', '-0x1.140b6792fdc40p-6'],
         ['0x1.6cdbdc17b2c2ep-1', '0x1.6b9d0eda1f2e0p-2', '-0x1.2e891ab56acc8p-2', '-0x1.44100a2c37685p-1',
          '-0x1.d1b2213d2ca36p-1', '-0x1.5f34d5ac8995cp-2', '-0x1.b8489fcf37698p-1', '-0x1.4bdf5ab7d6f20p-1']]
    V = [['0x1.7d8b2b0729f4bp+26', '0x1.7d9cc3f59eea3p+26', '0x1.7d78f132a35a4p+26', '0x1.7dd1cabf4c3a6p+26',
          '0x1.7dca5d6d9154ap+26', '0x1.7d817d7efb0fbp+26', '0x1.7dbc4c71dfeabp+26', '0x1.7da846aac1817p+26'],
         ['-0x1.7dc8834bec0d0p+26', '-0x1.7d8c077dc4a75p+26', '-0x1.7d89d69b887d2p+26', '-0x1.7dd56a11547b9p+26',
          '-0x1.7d8c9696598a3p+26', '-0x1.7da2bad26c707p+26', '-0x1.7d88949de4decp+26', '-0x1.7d96aca249fb4p+26']]
    n = d = 8
    hexed = lambda rows: np.array([[[float.fromhex(v)] for v in row] for row in rows])    # noqa: E731
    W_Q, W_O, W_D = np.zeros((2, d, 1)), np.zeros((2, d)), np.zeros((d, 1))
    W_Q[:, 0, 0], W_O[:, 0], W_D[0, 0] = 1.0, 1.0, 1.0
    w = as_weights(hexed(K), W_Q, hexed(V), W_O, W_D)
    E, X = np.eye(n)[None], np.eye(d)[:1]
    f64 = forward(E, X, w)
    exact = _exact_output(w, E, X)
    allowed = 3e-8
    assert abs(f64[0, 0] - exact) > allowed                       # the premise
    v = verify(w, as_dataset(E, X, f64), tol=allowed / max(1.0, abs(f64[0, 0])))
    assert v.outputs == "double words" and not v.passed


def test_the_estimate_takes_values_near_float64s_top_without_overflowing():
    # The values' norms were sums of squares: a readout near 1e300 (data near 1e-300 at their
    # own scale) overflowed to inf, the detector fired, and the double words' overflow failed a
    # build that memorizes.
    from construct.accurate import _reordered
    rng = np.random.default_rng(0)
    w = as_weights(rng.standard_normal((1, 4, 2)), rng.standard_normal((1, 4, 2)), 1e300 * rng.standard_normal((1, 4, 1)),
                   rng.standard_normal((1, 4)), rng.standard_normal((4, 1)))
    E, X = 1e-300 * rng.standard_normal((3, 3, 4)), rng.standard_normal((3, 4))
    _, moved = _reordered(w, E, X)
    assert np.all(np.isfinite(moved)) and moved.max() < 1e-10


def test_verify_evaluates_high_precision_weights_past_their_logits_size(tmp_path):
    # A second soundness review: 53-bit weights (stored as decimals) were evaluated at 53 + 32 =
    # 85 bits, where two logits near 2^91 that differ by exactly 3 are equal: the 85-bit model
    # attends (1/2, 1/2) instead of (0.953, 0.047), and verify passed labels of 0.5, 0.45 off.
    from construct import load_weights
    e = 2.0 ** -52
    E, X = np.array([[[1.0, 1.0, 0.0], [1.0 + e, 1.0 - e, 1.0]]]), np.array([[1.0, 0.0, 0.0]])
    w64 = as_weights(np.array([[[2.0 ** 90], [2.0 ** 90 + 3 * 2.0 ** 52], [0.0]]]), np.array([[[1.0], [0.0], [0.0]]]),
                     np.array([[[0.0], [0.0], [1.0]]]), np.array([[1.0, 0.0, 0.0]]), np.array([[1.0], [0.0], [0.0]]))
    arrays = w64.arrays()
    for name in ("W_K", "W_Q", "W_V", "W_O", "W_D"):
        arrays[name + "_decimal"] = np.vectorize(lambda v: repr(float(v)))(arrays[name]).astype(str)
    np.savez(tmp_path / "w.npz", **arrays, bits=np.asarray(53))
    w = load_weights(tmp_path / "w.npz")
    assert w.bits == 53
    exact = _exact_output(w64, E, X)
    assert abs(exact - 0.5) > 0.4                                   # the premise
    assert not verify(w, as_dataset(E, X, np.array([[0.5]]))).passed
    v = verify(w, as_dataset(E, X, np.array([[exact]])))
    assert v.passed and v.max_abs_error < 1e-15
