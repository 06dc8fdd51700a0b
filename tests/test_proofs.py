"""Property tests: every statement of docs/math.md §3, through its check in proofs/.

Each test asserts a check is *confirmed* (hypotheses hold, conclusion holds) on generated data, or
that it names the hypothesis a generated violation breaks. Tests of the engine's own heads
(``check_head``, ``check_step``) are what catch a broken construction: on generic data random
weights already give rank Z = T, so end-to-end rank tests alone cannot.
"""

import re

import numpy as np
import pytest
from hypothesis import assume, example, given, settings, strategies as st

import proofs
from construct import as_dataset, build, capacity
from construct.claim1 import interior_targets

from .strategies import Problem, arbitrary_weights, dataset, problems, seeds, violations

# Near-degenerate contexts (two tokens 1e-3 apart) that hypothesis found: the float64 weights'
# exact outputs were within tol/2 of the labels, yet mpmath at 53 bits evaluated them 1.7x tol
# away. auto must not keep float64 there (construct.build.EVALUATION_SLACK).
_NEAR_E = np.array([
    -0.6517911526116896, -0.17471729232577715, 1.6637239913911968, 0.659147749832255,
    -1.6413972945846467, -0.005203264171931977, -0.6234637409883934, 0.14863152325202633,
    -1.608187784186389, 0.2417718768768513, 0.23538091873745476, 1.5756260314314627,
    -0.6517778341305286, -0.17394314637875988, 1.66240797653245, 0.660519219289542,
    -1.6417497519505482, -0.005033847750828352, -0.3299040738738497, -0.8806465179277969,
    -0.6562850109290311, -0.6720146806586559, 0.3801890922489917, -0.11005869527805158,
    1.482571163033857, -1.8296040234453508, -0.0030809646658509597, -0.892055788321591,
    0.7758718474580595, -2.118060042185068, -0.3290569855699152, -0.8799857250060699,
    -0.6552257790428556, -0.671841482842224, 0.3801694788956172, -0.10974221673877198,
    0.9591848586745111, -0.9798545663746768, -0.7977957578895382, -0.20333248577190258,
    0.7479597259631346, 0.8509672909755427, -0.7096848707086849, -0.6071971852553313,
    -0.7978229151665286, -0.584238229157347, -0.2379233775647261, -0.13181504769026442,
    0.9581891432843245, -0.9786403790056927, -0.7985711441381792, -0.20459272965178518,
    0.7500161347440731, 0.8508308460360299]).reshape(3, 3, 6)
_NEAR_X = np.array([
    -1.179124872329948, 1.8522697201129288, -0.3297126244250999, 1.0620757877855616,
    -0.8294887233474758, -0.24878002125463117, -1.1799033329327484, 1.8510766094906281,
    -0.3297161788157764, 1.0613732733217631, -0.8282380262737279, -0.24862700154334968,
    -1.0318629950946103, 1.0090402997688306, -0.6043409584858992, -0.15252930610285104,
    -1.4811916182972398, -1.4789857368704227]).reshape(3, 6)
_NEAR_Y = np.array([
    0.14646922718474464, 0.693893127032335, 0.3226172174772325]).reshape(3, 1)
ROUNDING_SENSITIVE = Problem(as_dataset(_NEAR_E, _NEAR_X, _NEAR_Y), H=3, d_h=2, kind="near-degenerate")


# --- Proposition 1 ---------------------------------------------------------------------------------

@given(problems(extra_examples=3))
def test_prop1_construction_reaches_the_rank_bound(p: Problem):
    r = proofs.prop1.check(p.data, p.H, p.d_h)
    assert r.confirmed, str(r)
    assert r.quantities["rank_Z"] >= min(capacity(p.H, p.data.n, p.d_h), p.data.T)


@given(problems(max_heads=3, min_groups=2))
def test_prop1_claim2_every_head_of_the_construction_follows_the_proof(p: Problem):
    # Head by head: Claim 2 on the weights as built (targets met on the group, the earlier
    # examples' attention within Lemma 4's bound of the recorded tokens j*: at the small scales of
    # --scale rank that bound is mostly 2 or more and says little; see the explicit-scale test
    # below), and Prop. 1's induction step (the row reduction is Z'_S (Z'_A)^+, the rank grows).
    result = build(p.data, p.H, head_dim=p.d_h, trace=True, precision="float64")   # the checks are float64
    assert len(result.trace) >= 2                               # a later head to check (min_groups)
    for head in range(2, len(result.trace) + 1):
        _assert_head_follows_the_proof(result, head)


def _assert_head_follows_the_proof(result, head: int) -> None:
    # A head whose rank step holds without saturation is built with c = 0: Claim 2 (whose
    # hypothesis is c > 0) does not describe it, and Prop. 1's induction step must still hold.
    claim2, step = proofs.claim2.check_head(result, head), proofs.prop1.check_step(result, head)
    assert step.confirmed, str(step)
    if result.heads[head - 1].scale > 0:
        assert claim2.confirmed, str(claim2)
    else:
        assert claim2.failed == ["c > 0"], str(claim2)


def test_prop1_a_head_built_without_saturation_still_follows_the_induction_step():
    # Found by hypothesis: here head 2's explicit scale is 0 (the rank step needs no saturation).
    result = build(dataset("general-position", 3, 2, 5, 96), 2, head_dim=2, trace=True, precision="float64")
    assert result.heads[1].scale == 0
    _assert_head_follows_the_proof(result, 2)


# Found by hypothesis: ‖C‖ = 0.024 leaves room for Lemma 4's bound to be 3.34 on one earlier
# example at the explicit scale (its attention is one-hot to 8e-57 all the same).
_SMALL_C = Problem(as_dataset(
    [[[1.13332528, -0.00935761, 0.28614406, 2.16428933], [1.13355513, -0.00936724, 0.28649952, 2.16383749]],
     [[0.41716598, -0.47341753, 1.35778648, 0.0040515], [0.41656971, -0.47247625, 1.35837757, 0.00389772]],
     [[0.15734708, 0.5259036, 0.09637508, -0.09748168], [0.15805945, 0.52618439, 0.09515824, -0.09776323]]],
    [[-0.84430552, -0.01164054, -1.80505758, -0.13062328], [-0.84476992, -0.01199842, -1.80586025, -0.13007548],
     [-1.11717525, -0.31461706, 2.22659844, -1.14942249]],
    [[0.71303168], [0.80370117], [0.41121877]]), H=2, d_h=2, kind="near-degenerate")


@settings(max_examples=10, deadline=None)
@given(problems(max_heads=3, min_groups=2))
@example(_SMALL_C)
def test_at_the_explicit_scale_every_earlier_example_is_frozen(p: Problem):
    # The proof's own scale: every earlier example within Lemma 4's bound of its one-hot (Claim
    # 2), and the bound small enough that the Weyl perturbation stays below σ_min(M). The scale
    # asks no more: with a small ‖C‖ an example's bound may exceed 2 (it then says nothing about
    # that example); where it is below 1, the attention's largest weight is on j*.
    result = build(p.data, p.H, head_dim=p.d_h, trace=True, precision="float64", scale="explicit")
    for head in range(2, len(result.trace) + 1):
        ev = result.heads[head - 1]
        if ev.scale == 0:
            continue
        claim2, step = proofs.claim2.check_head(result, head), proofs.prop1.check_step(result, head)
        assert claim2.confirmed and step.confirmed, (str(claim2), str(step))
        q = claim2.quantities
        assert np.all(q["attends_j_star"][q["bound"] < 1])        # each such example, not a count
        assert q["examples_saturated"] == int(np.sum((q["bound"] < 2) & q["attends_j_star"]))
        assert step.quantities["perturbation"] <= ev.perturbation_bound < step.quantities["sigma_min_M"]


def test_prop1_step_allows_c_what_the_features_evaluation_moves():
    # Found by hypothesis (near-degenerate): head 1 fits queries 2e-4 apart with weights of 2e10,
    # so two float64 evaluations of its features (the build's, grouped its way, and the check's)
    # differ by 1e-6, and the build's C differs from Z'_S (Z'_A)^+ of the check's features by
    # 1.2e-6 of ‖C‖: beyond the fixed 1e-6, though Z'_A's condition number is 3.5.
    E = np.array([[[-0.33967624, -0.47990849, 1.42744828, -0.35149928],
                   [-0.32874765, 0.45335027, -0.76015061, 0.60482216],
                   [-0.33945838, -0.47941075, 1.42837095, -0.35009238]],
                  [[1.9413157, 1.43447649, 1.02045773, -3.42151741],
                   [-1.67028451, -0.8077283, 1.13211029, -1.44305822],
                   [1.94222128, 1.43321788, 1.01891259, -3.42300353]],
                  [[1.63936902, -1.09383019, -0.80398234, -1.71683267],
                   [0.819168, 0.05305276, -1.5045524, 0.59799263],
                   [1.63989839, -1.09591647, -0.80482923, -1.71738161]]])
    X = np.array([[1.26745245, -0.18227029, -0.46790518, 1.11123802],
                  [1.26764929, -0.18221975, -0.46796631, 1.11145901],
                  [1.34278057, -0.31284635, 0.59905985, 0.03044739]])
    import dataclasses
    result = build(as_dataset(E, X, np.array([0.06187048, 0.46655022, 0.86542525])), 2, head_dim=2,
                   trace=True, precision="float64")
    step = proofs.prop1.check_step(result, 2)
    assert step.confirmed, str(step)
    q = step.quantities
    assert q["C_error"] > proofs.prop1.ROW_REDUCTION_RTOL * q["C_norm"]          # the old tolerance
    good = result.trace[1]
    result.trace[1] = dataclasses.replace(good, C=2 * good.C, F=2 * good.F)
    assert proofs.prop1.check_step(result, 2).conclusion is False, "a C twice the row reduction"


@settings(max_examples=25, deadline=None)
@given(problems(max_heads=3, min_groups=2))
def test_prop1_feature_motion_bounds_another_grouping_of_the_products(p: Problem):
    # The features evaluated as the model does, E (W_K (W_Q^T x)), and grouped otherwise,
    # (E W_K)(W_Q^T x) with an explicit softmax, differ entrywise by at most the motion.
    from proofs.check import layer_data
    from construct.model import feature_matrix
    result = build(p.data, p.H, head_dim=p.d_h, precision="float64")
    E, X = layer_data(result)
    w = result.weights
    Z = feature_matrix(E, X, w, layered=True)
    other = []
    for g in range(w.H):
        logits = np.einsum("tie,te->ti", E @ w.W_K[g], X @ w.W_Q[g])
        s = np.exp(logits - logits.max(axis=1, keepdims=True))
        other.append(np.einsum("ti,tid->td", s / s.sum(axis=1, keepdims=True), E))
    motion = proofs.prop1._feature_motion(E, X, w, w.H)
    assert np.all(np.abs(Z - np.concatenate(other, axis=1)) <= motion)


def test_the_head_checks_read_what_the_layer_reads_after_a_prelayer():
    # With a pre-layer the trace refers to the shifted inputs; the checks of Claim 2 and of the
    # induction step read those (they reported CONTRADICTED on the raw data).
    from construct import synthetic
    data = synthetic("independent", T=7, n=3, d=4, seed=1)
    result = build(data, 3, prelayer="mean-shift", trace=True, precision="float64")
    for head in (2, 3):
        assert proofs.claim2.check_head(result, head).confirmed
        assert proofs.prop1.check_step(result, head).confirmed
    assert proofs.prop2.check(data, result.weights).quantities["rank_Z"] == 7


@given(violations())
def test_prop1_names_the_broken_hypothesis(case):
    p, name = case
    r = proofs.prop1.check(p.data, p.H, p.d_h)
    assert not r.applies and name in r.failed and r.conclusion is None


# --- Proposition 2 ---------------------------------------------------------------------------------

@given(seeds, st.integers(1, 3), st.integers(2, 4), st.integers(0, 3), st.integers(1, 5), st.data())
def test_prop2_shared_context_caps_the_rank_for_arbitrary_weights(seed, H, n, extra, d_h, draw):
    rng = np.random.default_rng(seed)
    d, bound = n + extra, H * (n - 1) + 1
    data = dataset("shared", bound + draw.draw(st.integers(0, 4)), n, d, seed)
    weights = draw.draw(arbitrary_weights(H, d, d_h, rng))
    r = proofs.prop2.check(data, weights)
    assert r.confirmed, str(r)
    assert r.quantities["rank_attention"] <= bound and r.quantities["null_residual"] <= 1e-12


@given(seeds, st.integers(1, 3), st.integers(2, 4), st.integers(0, 3))
def test_prop2_the_construction_attains_the_bound(seed, H, n, extra):
    data = dataset("shared", capacity(H, n, n), n, n + extra, seed)
    r = proofs.prop2.check(data, build(data, H).weights)
    assert r.confirmed and r.quantities["rank_Z"] == r.quantities["bound"]


@given(seeds, st.integers(2, 3), st.integers(2, 4))
def test_prop2_distinct_contexts_exceed_the_bound(seed, H, n):
    # Without its hypothesis the ceiling is gone: independent contexts pass H(n−1)+1.
    d = n + 2
    data = dataset("independent", H * d, n, d, seed)
    weights = build(dataset("independent", capacity(H, n, n), n, d, seed), H).weights
    r = proofs.prop2.check(data, weights)
    assert r.failed == ["all contexts equal"]
    assert r.quantities["rank_Z"] > r.quantities["bound"]


def _cancelling_tokens_z_is_all_rounding():
    # One shared context whose two tokens nearly cancel (e_2 = −e_1 + 1e-9 w) and queries of size
    # 1e-9: every feature z = s_1 e_1 + s_2 e_2 is about 1e-9, while rounding it costs ε|e_1|.
    e1, w = np.array([1.0, 0.5, -0.25]), np.array([0.0, 1e-9, 2e-9])
    E = np.broadcast_to(np.array([e1, -e1 + w]), (4, 2, 3)).copy()
    X = np.array([[1e-9 * t, 2e-9, -3e-9 * t * t] for t in range(1, 5)])
    from construct import Weights
    weights = Weights(W_K=np.eye(3)[None, :, :2], W_Q=np.eye(3)[None, :, :2], W_V=np.ones((1, 3, 1)),
                      W_O=np.ones((1, 3)), W_D=np.ones((3, 1)), skip=False)
    return as_dataset(E, X, np.zeros(4)), weights


def test_prop2_a_rank_float64_inflates_by_rounding_is_undecided_not_contradicted(monkeypatch):
    # Found in review: Z's exact singular values are 8.7e-9, 6.6e-10 and 1e-92 (mpmath, 300 bits):
    # rank 2 = H(n − 1) + 1. Float64's third was 3e-18 on the reviewer's machine, the rounding of
    # features of size 1e-9 made from tokens of size 1, far above Z's rank tolerance (8e-24):
    # rank 3, and the check said CONTRADICTED. The rounding of Z is relative to the tokens, not to
    # Z. Whether a machine's float64 rounds so depends on its kernels (another gives 4e-25, rank
    # 2), so the features here carry that rounding on purpose: 3e-18 in the third direction.
    from construct.arith import numerical_rank
    data, weights = _cancelling_tokens_z_is_all_rounding()
    exact = proofs.check.features_rank(data, weights)[0]
    U, s, Vt = np.linalg.svd(exact)
    s[2] = 3e-18
    inflated = (U[:, :3] * s) @ Vt[:3]

    def rounded_features(data, weights):                  # reads `inflated` when called
        return (inflated, *numerical_rank(inflated))
    monkeypatch.setattr(proofs.prop2, "features_rank", rounded_features)
    r = proofs.prop2.check(data, weights)
    assert r.quantities["rank_Z"] == 3 > r.quantities["bound"] and r.quantities["rounding_Z"] > 3e-18
    assert r.applies and r.conclusion is None and "undecided" in str(r), str(r)
    # Beyond the rounding the third direction is a contradiction.
    s[2] = 10 * r.quantities["rounding_Z"]
    inflated = (U[:, :3] * s) @ Vt[:3]
    assert proofs.prop2.check(data, weights).conclusion is False


# --- Proposition 5 ---------------------------------------------------------------------------------

@given(seeds, st.integers(1, 3), st.integers(1, 4), st.integers(0, 2), st.floats(-2, 2), st.data())
def test_prop5_constant_coordinate_sum_caps_the_rank_for_arbitrary_weights(seed, H, n, extra, const, draw):
    rng = np.random.default_rng(seed)
    d = n + extra + 1
    T = H * d + draw.draw(st.integers(0, 3))
    E = rng.standard_normal((T, n, d))
    E += (const - E.sum(axis=2, keepdims=True)) / d                 # project onto 1^T e = const
    data = as_dataset(E, rng.standard_normal((T, d)), rng.random(T))
    r = proofs.prop5.check(data, draw.draw(arbitrary_weights(H, d, n, rng)))
    assert r.confirmed, str(r)
    assert r.quantities["null_residual"] <= 1e-12 * max(1.0, abs(const) + np.abs(E).sum(axis=2).max())


@given(seeds, st.integers(1, 3), st.integers(2, 4))
def test_prop5_bound_is_reached_by_generic_weights(seed, H, d):
    rng = np.random.default_rng(seed)
    T = H * (d - 1) + 1 + 2
    E = rng.random((T, d, d))
    E /= E.sum(axis=2, keepdims=True)                               # tokens on the simplex: sum 1
    data = as_dataset(E, rng.standard_normal((T, d)), rng.random(T))
    from construct import Weights
    weights = Weights(W_K=rng.standard_normal((H, d, d)), W_Q=rng.standard_normal((H, d, d)),
                      W_V=np.ones((H, d, 1)), W_O=np.ones((H, d)), W_D=np.ones((d, 1)), skip=False)
    r = proofs.prop5.check(data, weights)
    assert r.confirmed and r.quantities["rank_Z"] == r.quantities["bound"]


def test_prop5_a_rank_float64_inflates_by_rounding_is_undecided_not_contradicted():
    # Found in review: four tokens ±u + 2^-30 w whose coordinates sum to 0 exactly (dyadic), one
    # shared context, queries of size 1e-9: Z's exact rank is 6 = H(d − 1) (mpmath, 400 bits;
    # its 7th and 8th singular values are 0), float64's 8 (the rounding of features of size 1e-8
    # made from tokens of size 1), and the check said CONTRADICTED.
    from construct import Weights
    rng = np.random.default_rng(0)
    d = n = 4
    H, T = 2, 12
    w = rng.integers(-8, 9, (n, d)).astype(float)
    w[:, -1] = -w[:, :-1].sum(axis=1)
    E0 = np.array([1.0, -1.0, 1.0, -1.0])[:, None] * np.array([1.0, 0.5, -1.25, -0.25]) + 2.0 ** -30 * w
    assert np.all(E0.sum(axis=1) == 0)
    X = np.ldexp(np.round(rng.standard_normal((T, d)) * 2 ** 20), -50)
    weights = Weights(W_K=rng.standard_normal((H, d, 3)), W_Q=rng.standard_normal((H, d, 3)), W_V=np.ones((H, d, 1)),
                      W_O=np.ones((H, d)), W_D=np.ones((d, 1)), skip=False)
    r = proofs.prop5.check(as_dataset(np.broadcast_to(E0, (T, n, d)).copy(), X, np.zeros(T)), weights)
    assert r.applies and r.conclusion is None and "undecided" in str(r), str(r)


def test_prop2_and_prop5_read_what_the_layer_reads_after_a_prelayer():
    # Found in review: with mean-shift weights both checks measured Z on the shifted inputs but
    # their other numbers on the raw data: Prop. 5 printed "constant = 0.5" and
    # "null_residual = 0.5" (the layer's tokens sum to 1.0, and Z's blocks do too), Prop. 2 the
    # attention of the raw queries.
    from construct.model import head_attention, layer_inputs
    rng = np.random.default_rng(0)
    T, n, d, H = 7, 3, 4, 3
    E = rng.standard_normal((T, n, d))
    E += (0.5 - E.sum(axis=2, keepdims=True)) / d
    data = as_dataset(E, rng.standard_normal((T, d)), rng.random(T))
    r = proofs.prop5.check(data, build(data, H, prelayer="mean-shift").weights)
    assert r.confirmed and r.quantities["constant"] == pytest.approx(1.0), str(r)
    assert r.quantities["null_residual"] <= 1e-12, str(r)
    from construct import synthetic
    shared = synthetic("shared", T=7, n=3, d=4, seed=0)
    weights = build(shared, 3, prelayer="mean-shift").weights
    E_l, X_l = layer_inputs(weights, shared.E, shared.X)
    expected = np.hstack([head_attention(E_l, X_l, weights.W_K[h], weights.W_Q[h]) for h in range(3)])
    np.testing.assert_allclose(proofs.prop2.attention_matrix(shared, weights), expected, rtol=0, atol=1e-15)


# --- Lemmas ----------------------------------------------------------------------------------------

@given(seeds, st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.integers(1, 5))
def test_lemma1_block_triangular_rank(seed, p, q, r_, s):
    rng = np.random.default_rng(seed)
    A, C = _low_rank(rng, p, q), _low_rank(rng, s, r_)
    r = proofs.lemma1.check(A, rng.standard_normal((p, r_)), C)
    assert r.confirmed, str(r)


def test_lemma1_does_not_call_a_true_instance_contradicted_across_scales():
    # [[1e-10, 1e10], [0, 1]] has rank 2 = 1 + 1, but at M's scale (1e10) float64 cannot see the
    # 1e-10: the check says it cannot decide, not that the lemma failed.
    r = proofs.lemma1.check([[1e-10]], [[1e10]], [[1]])
    assert r.conclusion is None and r.applies and not r.quantities["ranks_visible"]
    assert proofs.lemma1.check([[1.0]], [[2.0]], [[1]]).confirmed


def test_lemma1_a_true_instance_beyond_float64_s_resolution_is_undecided_not_contradicted():
    # [[1, b], [0, 1]] has rank 2 = 1 + 1 for every b (determinant 1), but its smallest singular
    # value, about 1/b, falls below M's rank tolerance 2·ε·b from b ≈ 7e7 on: float64 sees rank 1.
    # Every block's own singular value (1) is far above that tolerance; the check called the
    # lemma CONTRADICTED there.
    for b in (1e8, 1e10, 1e15, 1e300):
        r = proofs.lemma1.check([[1.0]], [[b]], [[1.0]])
        assert r.applies and r.conclusion is None and not r.quantities["ranks_visible"], (b, str(r))
    assert proofs.lemma1.check([[1.0]], [[1e3]], [[1.0]]).confirmed       # where float64 sees it, it says so


@given(seeds, st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.floats(0, 20))
def test_lemma1_never_contradicts_a_true_instance_whatever_the_scale_of_b(seed, p, q, r_, s, exponent):
    rng = np.random.default_rng(seed)
    A, C = _low_rank(rng, p, q), _low_rank(rng, s, r_)
    r = proofs.lemma1.check(A, 10.0 ** exponent * rng.standard_normal((p, r_)), C)
    assert not r.contradicted, str(r)


def _low_rank(rng, m, k):
    rank = rng.integers(0, min(m, k) + 1)
    return rng.standard_normal((m, rank)) @ rng.standard_normal((rank, k))


@given(seeds, st.integers(1, 5), st.integers(0, 3), st.floats(-5, 5).filter(lambda a: abs(a + 1) > 1e-3))
def test_lemma2_mean_shift_keeps_independence(seed, n, extra, alpha):
    V = np.random.default_rng(seed).standard_normal((n, n + extra))
    r = proofs.lemma2.check(V, alpha)
    assert r.confirmed, str(r)
    q = r.quantities
    assert q["sigma_min_shifted"] >= q["sigma_min_factor"] * q["sigma_min_V"] * (1 - 1e-9)


def test_lemma2_rows_whose_shift_float64_cannot_resolve_are_undecided_not_contradicted():
    # Found in review: σ_min(V) = 3.4e-15 and the exact shifted rows' σ_min = 3.6e-15, both above
    # the rank tolerance 3.19e-15; rounding V + mean(V) and its SVD took the computed σ_min to
    # 3.13e-15, and the lemma was called CONTRADICTED.
    V = [[0.1848484152118282, -2.17524630595259, -0.2612932625694376],
         [0.07971443895883436, -0.9380580227187049, -0.1126806838218084]]
    r = proofs.lemma2.check(V, 1.0)
    assert r.applies and r.conclusion is None and not r.contradicted, str(r)


@given(seeds, st.integers(2, 5), st.integers(0, 2), st.sampled_from([1.0, 7.0, -0.5, -3.0, 1e3, 1e6, -1e6]),
       st.floats(1e-3, 0.2))
def test_lemma2_never_contradicts_independent_rows_near_the_rank_tolerance(seed, n, extra, alpha, above):
    # V's smallest singular value a little above what the lemma's bound needs to clear the
    # shifted rows' rank tolerance: the lemma holds, and float64 may or may not see it.
    from construct.arith import rank_tol
    rng = np.random.default_rng(seed)
    d = n + extra
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    R, _ = np.linalg.qr(rng.standard_normal((d, n)))
    sv = np.sort(10 ** rng.uniform(-1, 1, n))[::-1]
    V0 = (U * sv) @ R.T
    scale = max(np.linalg.svd(proofs.lemma2.shifted(V0, alpha), compute_uv=False)[0], sv[0] * (1 + abs(alpha)))
    sv[-1] = rank_tol(scale, (n, d)) / min(1.0, abs(1 + alpha)) * (1 + above)
    r = proofs.lemma2.check((U * sv) @ R.T, alpha)
    assert not r.contradicted, str(r)


@given(seeds, st.integers(2, 5))
def test_lemma2_alpha_minus_one_breaks_it(seed, n):
    r = proofs.lemma2.check(np.random.default_rng(seed).standard_normal((n, n + 1)), -1.0)
    assert r.failed == ["alpha ≠ −1"] and r.conclusion is False


@given(problems(kinds=("independent", "general-position", "near-degenerate"), max_heads=1), seeds)
def test_lemma3_separator(p: Problem, seed):
    data, n = p.data, p.data.n
    rng = np.random.default_rng(seed)
    X_S = rng.standard_normal((n - 1, data.d))
    assume(data.d > n - 1)
    r = proofs.lemma3.check(X_S, data.E, data.X, seed=seed)
    assert r.confirmed, str(r)


@given(seeds, st.integers(2, 4), st.integers(1, 3))
def test_lemma3_names_a_query_inside_the_span(seed, n, extra):
    rng = np.random.default_rng(seed)
    d = n + extra
    X_S = rng.standard_normal((n - 1, d))
    X_A = np.vstack([rng.standard_normal(n - 1) @ X_S, rng.standard_normal(d)])
    r = proofs.lemma3.check(X_S, rng.standard_normal((2, n, d)), X_A, seed=seed)
    assert r.failed == ["other queries outside span X_S"]


def test_lemma3_entries_that_tie_exactly_are_not_called_distinct():
    # e_1·a = 1e16 + 1 − 1e16 = 1 = e_2·a exactly, so E W' x = (1, 1): the separator does not
    # separate. Float64 rounds e_1·a to 0 and saw a gap of 1; the check confirmed the lemma.
    a, b = np.array([1e16, 1.0, -1e16]), np.array([1.0, 0.0, 0.0])
    E_A, X_A, X_S = np.array([[[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]]), np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 0.0, 1.0]])
    r = proofs.lemma3.check(X_S, E_A, X_A, a=a, b=b)
    assert r.applies and r.conclusion is not True, str(r)
    # Ties float64 computes without rounding (e_1·a = e_2·a = 3) are no separation either.
    r = proofs.lemma3.check(X_S, np.array([[[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]]), X_A, a=np.array([1.0, 1.0, 0.0]), b=b)
    assert r.applies and r.conclusion is not True, str(r)
    assert proofs.lemma3.check(X_S, E_A, X_A, a=np.array([1.0, 2.0, 3.0]), b=b).confirmed


def test_lemma3_a_separator_off_the_orthogonal_complement_is_refused():
    # b must vanish on S to rounding: 1e-12 of X_S's direction in b is far above it.
    rng = np.random.default_rng(0)
    X_S, E_A, X_A = rng.standard_normal((2, 4)), rng.standard_normal((3, 3, 4)), rng.standard_normal((3, 4))
    good = proofs.lemma3.check(X_S, E_A, X_A, seed=0)
    assert good.confirmed
    a, b = good.quantities["a"], good.quantities["b"]
    r = proofs.lemma3.check(X_S, E_A, X_A, a=a, b=b + 1e-12 * X_S[0] / np.linalg.norm(X_S[0]))
    assert r.applies and r.conclusion is False, str(r)


@given(seeds, st.integers(1, 6), st.integers(0, 3), st.floats(1e-3, 100.0))
def test_lemma4_bound_holds(seed, n, extra, c):
    rng = np.random.default_rng(seed)
    d, T = n + extra, 5
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    W = rng.standard_normal((d, d)) * rng.uniform(0, 2)
    W_prime = np.outer(rng.standard_normal(d), rng.standard_normal(d))
    r = proofs.lemma4.check(E, X, W, W_prime, c)
    assert r.confirmed, str(r)


def test_lemma4_does_not_confirm_where_rounding_makes_the_maximum_unique():
    # Found in review: g = E W' x = (1, 1) exactly (e_1·a = 1 + 1e16 − 1e16, e_2·a = 1), a tie, so
    # the lemma does not apply and the attention at c = 100 is (0.5, 0.5), at distance 1 from
    # either one-hot. Float64 computes g = (0, 1): a unique maximum with gap 1, a distance of
    # 7.4e-44 within the bound 7.4e-44, and the check CONFIRMED the lemma.
    E, X = np.array([[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]]), np.array([[1.0, 0.0, 0.0]])
    for a in ([1.0, 1e16, -1e16], [3.0, 1e16, -1e16]):                 # ties at 1 and at 3
        r = proofs.lemma4.check(E, X, np.zeros((3, 3)), np.outer(a, [1.0, 0.0, 0.0]), 100.0)
        assert not r.confirmed and r.quantities["undecided_examples"] == 1, (a, str(r))
    r = proofs.lemma4.check(E, X, np.zeros((3, 3)), np.outer([1.0, 0.5, 0.0], [1.0, 0.0, 0.0]), 100.0)
    assert r.confirmed, str(r)


@given(st.integers(2, 8), st.floats(0.0, 3.0), st.floats(0.1, 2.0), st.floats(0.1, 60.0))
def test_lemma4_bound_is_attained_in_the_limit(n, L, delta, excess):
    # Design: ℓ = −L on the winner, +L elsewhere; g = δ on the winner. The ratio distance/bound is
    # exactly 1 / (1 + (n−1) e^{2L − cδ}): it tends to 1, so neither constant can be lowered.
    c = (2 * L + excess) / delta
    r = proofs.lemma4.check(*proofs.lemma4.extremal(n, n + 1, L, delta), c)
    expected = 1.0 / (1.0 + (n - 1) * np.exp(-excess))
    assert r.confirmed
    assert r.quantities["max_ratio"] == pytest.approx(expected, rel=1e-12)
    if excess >= 40:                                     # exponents near 50 carry ~50ε rounding
        assert r.quantities["max_ratio"] >= 1 - 1e-12


@given(seeds, st.integers(1, 5), st.integers(1, 5), st.floats(0.0, 0.99))
def test_lemma5_weyl(seed, m, k, frac):
    rng = np.random.default_rng(seed)
    A = _low_rank(rng, m, k)
    r0 = proofs.lemma5.check(A, A)
    P = rng.standard_normal((m, k))
    B = A + frac * r0.quantities["sigma_min_plus_A"] * P / np.linalg.norm(P, 2)
    r = proofs.lemma5.check(A, B)
    assert r.confirmed or (r.quantities["rank_A"] == 0 and r.failed), str(r)


def test_lemma5_a_true_instance_float64_cannot_resolve_is_undecided_not_contradicted():
    # ‖A − B‖₂ = 1e-10 − 3e-16 < σ_min⁺(A) = 1e-10, and B = diag(1, 3e-16) has rank 2 = rank A, as
    # Weyl says; but 3e-16 is below B's rank tolerance 2·ε: float64 sees rank 1. The check
    # called the lemma CONTRADICTED; Weyl's own bound σ⁺(A) − ‖A − B‖₂ = 3e-16 is what float64
    # cannot resolve.
    r = proofs.lemma5.check(np.diag([1.0, 1e-10]), np.diag([1.0, 3e-16]))
    assert r.applies and r.conclusion is None and "undecided" in str(r), str(r)
    assert proofs.lemma5.check(np.diag([1.0, 1e-10]), np.diag([1.0, 5e-11])).confirmed


@given(seeds, st.integers(1, 5), st.integers(1, 5), st.floats(0.0, 20.0))
def test_lemma5_never_contradicts_a_true_instance_at_the_edge_of_its_hypothesis(seed, m, k, e):
    # B shrinks A's smallest singular value by a factor 10^-e: ‖A − B‖₂ = σ⁺(A)(1 − 10^-e), just
    # inside the (strict) hypothesis, and Weyl's bound on σ_r(B) goes down to float64's rounding.
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k))
    U, sv, Vt = np.linalg.svd(A, full_matrices=False)
    t = sv.copy()
    t[-1] = sv[-1] * 10.0 ** -e
    r = proofs.lemma5.check(A, (U * t) @ Vt)
    assert not r.contradicted, str(r)


@given(seeds, st.integers(1, 4), st.integers(1, 4))
def test_lemma5_without_its_hypothesis_the_rank_can_drop(seed, m, k):
    # B drops A's smallest singular value and doubles the rest: ‖A − B‖₂ = max(σ_min, σ_max) ≥
    # σ_min⁺(A), so the hypothesis fails, and the rank drops by one.
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k))
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    t = 2 * s
    t[-1] = 0.0
    B = (U * t) @ Vt
    r = proofs.lemma5.check(A, B)
    assert r.failed == ["‖A − B‖₂ < σ_min⁺(A)"] and r.conclusion is False


# --- Claims ----------------------------------------------------------------------------------------

@given(problems(kinds=("independent", "general-position", "near-degenerate"), max_heads=1), seeds)
def test_claim1_exact_targets(p: Problem, seed):
    data = p.data
    m = min(data.T, data.n)
    s = interior_targets(np.random.default_rng(seed), m, data.n)
    r = proofs.claim1.check(data.E[:m], data.X[:m], s, d_h=p.d_h if p.d_h >= m else None)
    q = r.quantities
    if p.kind == "near-degenerate" and q["tol"] > proofs.check.CONFIRM_TOL:
        # Factors of 1e11 for queries and tokens 1e-3 apart: about 1% of such draws have a
        # rounding allowance above 1e-3 (4% at worst in 3000), too coarse to call a fit exact.
        assert r.applies and r.conclusion is None and q["target_error"] <= q["tol"], str(r)
    else:
        assert r.confirmed, str(r)


def _factors_for(wrong_targets):
    """Claim 1's factors for other targets than the check asks for: an engine that misses."""
    from construct.claim1 import claim1_factors

    def factors(E_S, X_S, s):
        return claim1_factors(E_S, X_S, wrong_targets)
    return factors


@given(seeds, st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.integers(1, 4),
       st.floats(-12, 12), st.floats(0, 1))
def test_logit_radius_encloses_the_exact_logits_in_every_grouping(seed, T, n, d, d_h, log_scale, near):
    # Weights of 10^±12 and queries, tokens and weight columns that nearly cancel: the float64
    # logits, grouped as the model groups them and as the claims do, are within the radius of
    # the exact logits of the same float64 arrays (rational arithmetic).
    from fractions import Fraction
    rng = np.random.default_rng(seed)
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    W_K, W_Q = rng.standard_normal((d, d_h)) * 10.0 ** log_scale, rng.standard_normal((d, d_h))
    if d_h > 1:
        W_K[:, 1] = -W_K[:, 0] * (1 + near * 1e-4 * rng.standard_normal(d))  # cancellation in W_K W_Q^T
    radius = proofs.check.logit_radius(E, X, W_K, W_Q)
    model = np.einsum("tid,td->ti", E, (X @ W_Q) @ W_K.T)
    claims = np.einsum("tid,td->ti", E, X @ (W_K @ W_Q.T).T)
    F = np.vectorize(Fraction, otypes=[object])
    M = F(W_K) @ F(W_Q).T
    for t in range(T):
        exact = F(E[t]) @ (M @ F(X[t]))
        for got in (model[t], claims[t]):
            assert all(abs(Fraction(g) - x) <= Fraction(radius[t]) for g, x in zip(got, exact))


def test_claims_1_and_2_judge_small_target_probabilities_relative_to_themselves(monkeypatch):
    # A probability of 1e-12 fitted as 1e-11 is missed by a factor of 10, but only by 9e-12 in
    # absolute terms: an absolute tolerance of 1e-9 confirmed both claims on factors built for the
    # wrong targets.
    rng = np.random.default_rng(3)
    n, d = 4, 6
    E_S, X_S = rng.standard_normal((2, n, d)), rng.standard_normal((2, d))
    E_A, X_A = rng.standard_normal((3, n, d)), rng.standard_normal((3, d))
    s = np.array([[1 - 3e-12, 1e-12, 1e-12, 1e-12], [0.25, 0.25, 0.25, 0.25]])
    wrong = s.copy()
    wrong[0, :2] = 1 - 12e-12, 10e-12
    assert proofs.claim1.check(E_S, X_S, s).confirmed
    assert proofs.claim2.check(E_S, X_S, s, E_A, X_A, 10.0).confirmed
    monkeypatch.setattr(proofs.claim1, "claim1_factors", _factors_for(wrong))
    monkeypatch.setattr(proofs.claim2, "claim1_factors", _factors_for(wrong))
    one = proofs.claim1.check(E_S, X_S, s)
    assert one.conclusion is False and one.quantities["target_error"] > 8, str(one)
    two = proofs.claim2.check(E_S, X_S, s, E_A, X_A, 10.0)
    assert two.conclusion is False and two.quantities["target_error"] > 8, str(two)


@settings(max_examples=40)
@given(seeds, st.integers(2, 6), st.floats(-300, -1))
def test_claim1_fits_every_target_to_its_own_relative_accuracy(seed, n, exponent):
    # Targets spread over many orders of magnitude, down to 1e-300: each is met relative to itself.
    rng = np.random.default_rng(seed)
    m, d = min(n, 3), n + 2
    s = 10.0 ** (exponent * rng.random((m, n)))
    s /= s.sum(axis=1, keepdims=True)
    r = proofs.claim1.check(rng.standard_normal((m, n, d)), rng.standard_normal((m, d)), s)
    assert r.confirmed, str(r)
    assert r.quantities["target_error"] < 1e-10, str(r)


def test_claim1_does_not_confirm_a_fit_its_rounding_allowance_cannot_resolve():
    # Found in review: queries 1e-6 apart put the logits' rounding allowance at 31% of each
    # probability, and a fit 1% off was confirmed as exact (at 10^-6.2 apart, 97% would have been).
    rng = np.random.default_rng(0)
    E, x, v = rng.random((2, 3, 4)), rng.random(4), rng.standard_normal(4)
    s = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    r = proofs.claim1.check(E, np.array([x, x + 1e-6 * v]), s)
    assert r.quantities["tol"] > proofs.check.CONFIRM_TOL and r.quantities["target_error"] < r.quantities["tol"]
    assert r.conclusion is None and "undecided" in str(r), str(r)
    assert proofs.claim1.check(E, np.array([x, x + 1e-2 * v]), s).confirmed          # farther apart
    # A tolerance that cannot confirm can still refute: factors for other targets, 50% off.
    import unittest.mock
    wrong = _factors_for(np.array([[0.1, 0.3, 0.6], [0.6, 0.3, 0.1]]))
    with unittest.mock.patch.object(proofs.claim1, "claim1_factors", wrong):
        far = proofs.claim1.check(E, np.array([x, x + 1e-6 * v]), s)
    assert far.conclusion is False and far.quantities["target_error"] > far.quantities["tol"], str(far)


def test_claim1_does_not_confirm_targets_it_cannot_see():
    # Found in review: queries 1e-8 from parallel (independent, numerical rank 2) put the logits'
    # rounding at 1.3e3, and targets missed by 0.7 were confirmed against that tolerance. A
    # tolerance of 1 or more (the largest difference of two probabilities) decides nothing.
    rng = np.random.default_rng(0)
    E, s = rng.standard_normal((2, 3, 4)), np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    for gap in (1e-8, 1e-10, 1e-12):
        r = proofs.claim1.check(E, np.array([[1.0, 0.5, 0.0, 0.0], [1.0, 0.5 + gap, 0.0, 0.0]]), s)
        assert r.quantities["tol"] >= 1 and r.applies, str(r)
        assert r.conclusion is None and "undecided" in str(r), str(r)
    assert proofs.claim1.check(E, np.array([[1.0, 0.5, 0.0, 0.0], [1.0, 0.5 + 1e-3, 0.0, 0.0]]), s).confirmed


@given(seeds, st.integers(2, 4), st.integers(1, 3), st.integers(1, 6), st.floats(0.5, 200.0))
def test_claim2_exact_on_S_frozen_elsewhere(seed, n, extra, others, c):
    rng = np.random.default_rng(seed)
    d = n + extra
    m = rng.integers(1, n)
    E_S, X_S = rng.standard_normal((m, n, d)), rng.standard_normal((m, d))
    s = interior_targets(rng, m, n)
    r = proofs.claim2.check(E_S, X_S, s, rng.standard_normal((others, n, d)), rng.standard_normal((others, d)),
                            c, seed=seed)
    assert r.confirmed, str(r)


# --- Propositions 3 and 4 ----------------------------------------------------------------------------

@given(seeds, st.integers(1, 3), st.integers(0, 2), st.integers(1, 4))
def test_prop3_relu_context_collapses_into_a_bias(seed, n, extra, m):
    rng = np.random.default_rng(seed)
    d = n + extra
    T = m * (d + 2) + 2
    data = proofs.prop3.hard_dataset(n, d, T, seed=seed)
    W1 = rng.standard_normal((m, n * d + d))
    r = proofs.prop3.check(data, W1, rng.standard_normal(m), rng.standard_normal(m), 0.1)
    assert r.confirmed, str(r)
    # the network has at least T parameters, and still its Jacobian cannot reach rank T
    assert r.quantities["jacobian_rank"] < T <= r.quantities["relu_params"]


def test_prop3_names_the_hypotheses_its_datasets_must_meet():
    # The proposition is about A1/A2 datasets with more than m(d + 2) + 1 examples. Found in
    # review: the check confirmed it on one example, and on queries that are all equal (not A1),
    # where no attention layer memorizes either and the comparison says nothing.
    rng = np.random.default_rng(0)
    n, d, m = 2, 3, 2
    W1, b1, w2 = rng.standard_normal((m, n * d + d)), rng.standard_normal(m), rng.standard_normal(m)
    count = m * (d + 2) + 1
    data = proofs.prop3.hard_dataset(n, d, count + 1, seed=0)
    r = proofs.prop3.check(data, W1, b1, w2, 0.1)
    assert r.confirmed, str(r)
    assert r.quantities["collapsed_params"] == count and r.quantities["relu_params"] == m * (n * d + d + 2) + 1
    assert r.quantities["cannot_memorize_almost_every_labelling"]
    few = proofs.prop3.check(proofs.prop3.hard_dataset(n, d, count, seed=0), W1, b1, w2, 0.1)
    assert few.failed == ["T > m(d+2)+1"] and not few.quantities["cannot_memorize_almost_every_labelling"], str(few)
    same = as_dataset(data.E, np.broadcast_to(data.X[:1], data.X.shape).copy(), data.Y)
    r = proofs.prop3.check(same, W1, b1, w2, 0.1)
    assert r.failed == ["queries have Kruskal rank ≥ n (A1)"], str(r)


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(1, 3), st.integers(0, 2), st.integers(1, 3))
def test_prop3_conclusion_fails_where_the_contexts_differ(seed, n, extra, m):
    """The conclusion is measured, not true by construction: with a context of its own per
    example the context part of the first layer no longer collapses into the bias, and the
    check's conclusion is False (the hypothesis of one shared context is named too). The
    Jacobian's rank then usually passes m(d+2)+1 as well, but not always (a unit active on few
    of the examples adds few directions: 7 of 2,520 draws stayed at or below it, a review found
    one such draw failing this test when it asserted the rank), so the rank is not asserted."""
    assume(n * (n + extra) >= 2)                      # n = d = 1: nothing to collapse
    rng = np.random.default_rng(seed)
    d = n + extra
    T = 2 * m * (n * d + d + 1) + 8
    data = as_dataset(rng.standard_normal((T, n, d)), rng.standard_normal((T, d)), rng.random(T))
    r = proofs.prop3.check(data, rng.standard_normal((m, n * d + d)), np.zeros(m), rng.standard_normal(m), 0.1)
    assert r.conclusion is False and "all contexts equal" in r.failed, str(r)
    assert r.quantities["collapse_error"] > 1e-3


@given(seeds, st.integers(2, 3), st.integers(0, 2))
def test_prop4_uniform_skip_layer_turns_a3_into_a1(seed, n, extra):
    rng = np.random.default_rng(seed)
    d, T = n + extra, n + 3
    E = rng.standard_normal((T, n, d))
    X = rng.standard_normal((T, d))
    X[1] = X[0]                                                       # A1 fails: a repeated query
    data = as_dataset(E, X, rng.random(T))
    before = proofs.prop4.kruskal_check(data.X, n, "queries", trials=200, seed=seed)
    r = proofs.prop4.check(data, trials=200, seed=seed)
    assert not before.holds
    assert r.confirmed, str(r)


def test_prop4_checks_the_layer_s_shift_not_only_its_outcome():
    # A map that is not the uniform layer (another shift) also gives A1 and A2 on generic data:
    # the check must refuse it for not moving every token by its context's mean.
    rng = np.random.default_rng(0)
    n, d, T = 3, 4, 6
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    X[1] = X[0]
    data = as_dataset(E, X, rng.random(T))
    assert proofs.prop4.check(data, trials=200).confirmed
    wrong = lambda dt: as_dataset(2 * dt.E + dt.E.mean(axis=1)[:, None, :], 2 * dt.X + dt.E.mean(axis=1), dt.Y)
    r = proofs.prop4.check(data, trials=200, layer=wrong)
    assert r.applies and r.conclusion is False and r.quantities["shift_error"] > 1


def test_prop4_judges_each_example_s_shift_at_its_own_scale():
    # Found in review: the shift's slack came from the largest example (1e12 here), so a layer
    # that shifted only that example, leaving the other three unmoved by their means (1.9e-3),
    # was confirmed.
    rng = np.random.default_rng(0)
    T, n, d = 4, 2, 50
    V = rng.random((T, d))
    E, X = np.stack([V, -V + 1e-3 * rng.standard_normal((T, d))], 1), rng.random((T, d))
    E[0], X[0] = rng.random((n, d)) * 1e12, X[0] * 1e12
    data = as_dataset(E, X, rng.random(T))

    def first_only(dt):
        E, X = dt.E.copy(), dt.X.copy()
        m = E[0].mean(axis=0)
        E[0] += m
        X[0] += m
        return as_dataset(E, X, dt.Y)
    r = proofs.prop4.check(data, trials=200, layer=first_only)
    assert r.conclusion is False, str(r)
    assert r.quantities["shift_error"] > 1e-3 and r.quantities["shift_slack"] < 1e-10, str(r)
    assert proofs.prop4.check(data, trials=200).conclusion is not False


def test_prop5_asks_every_token_to_sum_to_the_constant_at_its_own_scale():
    # Found in review: one token of size 1e13 made the tolerance on "one constant" 0.02 for every
    # token, so sums from 0.98 to 1.02 passed and a false rank bound (exact rank 8 > 7) was confirmed.
    rng = np.random.default_rng(1)
    E = rng.dirichlet(np.ones(4), size=(12, 3))
    E[1:, :, 0] += rng.uniform(-0.02, 0.02, (11, 3))
    E[0, 0] = [1e13, -1e13, 0.25, 0.75]
    data = as_dataset(E, rng.random((12, 4)), rng.random(12))
    from construct import as_weights
    w = as_weights(rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 1)),
                   rng.standard_normal((2, 4)), rng.standard_normal((4, 1)))
    r = proofs.prop5.check(data, w)
    assert r.failed == ["token coordinates sum to one constant"] and not r.confirmed, str(r)
    E[1:] = rng.dirichlet(np.ones(4), size=(11, 3))                   # sums of 1, to rounding
    assert proofs.prop5.check(as_dataset(E, data.X, data.Y), w).applies


def test_prop5_one_constant_is_not_judged_against_the_mean_of_every_token_s_rounding():
    # Found in CI: tokens summing to 0, one of them of size 0.003 summing to 0 exactly and one of
    # size 0.3 summing to 5.6e-17. Each was compared with the mean of all sums (1.4e-17) at its
    # own scale (2e-18 for the small one): "no one constant", though every sum is 0 to rounding.
    E = np.array([[[1.4288501889, -1.4288501889]], [[0.24160865, -0.24160865]],
                  [[0.00174619, -0.00174619]], [[0.15022473, -0.15022473]]])
    E[3, 0, 1] = -E[3, 0, 0] + 5.551115123125783e-17
    assert E[3].sum() != 0 and E[2].sum() == 0
    data = as_dataset(E, np.eye(2)[[0, 1, 0, 1]], np.arange(4.0))
    rng = np.random.default_rng(0)
    from construct import as_weights
    w = as_weights(*(rng.standard_normal(s) for s in [(2, 2, 1), (2, 2, 1), (2, 2, 1), (2, 2), (2, 1)]))
    r = proofs.prop5.check(data, w)
    assert r.applies and r.confirmed and abs(r.quantities["constant"]) < 1e-16, str(r)


def test_prop1_step_compares_F_at_the_scale_of_the_features():
    # Found in review: F was compared within 1e-6 · max(1, |F|), an absolute 1e-6 where the
    # features are small; on data of size 1e-7 a trace whose F was all zeros was confirmed.
    import dataclasses
    from construct import synthetic
    D = synthetic("independent", T=9, n=3, d=5, seed=1)
    data = as_dataset(D.E * 1e-7, D.X * 1e-7, D.Y)
    r = build(data, heads=4, precision="float64", trace=True)
    assert proofs.prop1.check_step(r, 2).confirmed
    r.trace[1] = dataclasses.replace(r.trace[1], F=np.zeros_like(r.trace[1].F))
    step = proofs.prop1.check_step(r, 2)
    assert step.conclusion is False, str(step)


# --- Theorem 1, Remark 1, Appendix C -----------------------------------------------------------------

@given(problems(), st.integers(1, 3), st.booleans())
def test_theorem1_memorizes_every_valid_dataset(p: Problem, d_o, skip):
    data = dataset(p.kind, p.data.T, p.data.n, p.data.d, seed=int(p.data.X[0, 0] * 1e6) % 2**32,
                   d_o=min(d_o, p.data.d))
    r = proofs.theorem1.check(data, p.H, p.d_h, value_dim=data.d_o + 1, skip=skip, tol=1e-9)
    assert r.confirmed, str(r)
    assert r.quantities["rank_Z"] == data.T and r.quantities["max_abs_error"] <= 1e-9


@given(violations())
def test_theorem1_names_the_broken_hypothesis(case):
    p, name = case
    r = proofs.theorem1.check(p.data, p.H, p.d_h)
    assert name in r.failed and r.conclusion is None


@given(seeds, st.integers(1, 3))
def test_remark1_lower_kruskal_rank_lowers_k(seed, H):
    rng = np.random.default_rng(seed)
    n, d = 3, 4
    T = H + 1                                                        # capacity with k = 2
    X = rng.standard_normal((T + 1, d))
    X[2] = X[0] + X[1]                                               # three dependent queries: r = 2
    data = as_dataset(rng.standard_normal((T + 1, n, d))[:T], X[:T], rng.random(T))
    r = proofs.remark1.check(data, H, head_dim=n, seed=seed)
    assert r.quantities["r"] == (2 if T >= 3 else min(T, d))
    assert r.confirmed, str(r)
    assert r.quantities["weights"].d_h == n


@given(problems())
@example(ROUNDING_SENSITIVE)
def test_appendix_c_skip_connection_memorizes_shifted_labels(p: Problem):
    r = proofs.appendix_c.check(p.data, p.H, p.d_h)
    assert r.confirmed, str(r)


def test_lemma4_and_claim2_at_scales_where_the_rounding_allowance_overflows():
    # A student's trial: at c ≥ 2e18 the allowance exp(4·size·ε) overflowed, 0·inf gave NaN, and
    # a distance of 0 within a bound of 0 was reported CONTRADICTED.
    from construct import synthetic
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    for c in (1e18, 2e18, 1e300):
        assert not proofs.lemma4.check(E, X, W, Wp, c).contradicted, c
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    r = proofs.claim2.check(data.E[3:5], data.X[3:5], np.full((2, 3), 1 / 3), data.E[:3], data.X[:3], 1e18)
    assert not r.contradicted, str(r)


def test_claim2_does_not_confirm_targets_it_cannot_see():
    # A student's trial: at c = 1e17 the targets were missed by 0.48 and the check confirmed
    # them, its tolerance (the logits' rounding) having grown to 1824.
    from construct import synthetic
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    args = (data.E[3:5], data.X[3:5], np.full((2, 3), 1 / 3), data.E[:3], data.X[:3])
    far = proofs.claim2.check(*args, 1e17)
    assert far.quantities["target_tol"] >= 1
    assert far.conclusion is None and not far.confirmed and not far.contradicted
    assert "undecided" in str(far)
    assert proofs.claim2.check(*args, 10.0).confirmed


def test_bad_options_are_refused_not_reported_as_counterexamples():
    # A student's trial: tol = NaN, seed = −1 and a size beyond memory came back CONTRADICTED
    # ("a counterexample, or a bug"), and head_dim = 2.5 was truncated to 2.
    from construct import synthetic
    from construct.errors import InputError
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    for call in (lambda: proofs.theorem1.check(data, 3, tol=float("nan")),
                 lambda: proofs.theorem1.check(data, 3, seed=-1),
                 lambda: proofs.theorem1.check(data, 10 ** 12),
                 lambda: proofs.theorem1.check(data, 3, head_dim=2.5),
                 lambda: proofs.prop1.check(data, 3, seed=-1),
                 lambda: proofs.prop1.check(data, 3, head_dim=2.5),
                 lambda: proofs.remark1.check(data, 3, head_dim=2.5),
                 lambda: proofs.theorem1.check(None, 3)):
        with pytest.raises(InputError):
            call()
    assert proofs.theorem1.check(data, 3).confirmed


def test_odd_arguments_to_the_checks_are_refused_or_fail_a_hypothesis():
    # A student's trial: raw NumPy errors ("need at least one array to stack", "SVD did not
    # converge") and TypeErrors instead of an answer.
    from construct import build, synthetic
    from construct.errors import InputError
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    for trials in (0, -5, 2.5):
        with pytest.raises(InputError, match="trials"):
            proofs.prop4.check(data, trials=trials)
    args = (data.E[3:5], data.X[3:5], np.full((2, 3), 1 / 3), data.E[:3], data.X[:3])
    for c in (float("nan"), float("inf")):
        r = proofs.claim2.check(*args, c)
        assert not r.applies and not r.contradicted, str(r)
    result = build(data, 3, trace=True, precision="float64")
    assert proofs.claim2.check_head(result, np.int64(2)).confirmed
    for head in ("2", 2.5):
        with pytest.raises(InputError, match="head"):
            proofs.claim2.check_head(result, head)


def test_the_lemma_checks_name_a_wrong_argument():
    # A student's trial: broadcast and matmul ValueErrors, an IndexError, "could not convert string".
    from construct import synthetic
    from construct.errors import InputError
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    cases = [(lambda: proofs.lemma3.check(data.X[3:5], data.E[:3], data.X[:2]), "X_A: p = 2, but E_A has p = 3"),
             (lambda: proofs.lemma4.check(E, X, np.eye(3), Wp, 1.0), "W: d = 3"),
             (lambda: proofs.lemma2.check(np.zeros((0, 3))), "V: no rows"),
             (lambda: proofs.lemma1.check("a", "b", "c"), "A: not an array of real numbers"),
             (lambda: proofs.claim1.check(data.E[:2], data.X[:3], np.full((2, 3), 1 / 3)), "X_S: m = 3"),
             (lambda: proofs.claim2.check(data.E[3:5], data.X[3:5], np.full((2, 3), 1 / 3), data.E[:3],
                                          data.X[:3, :2], 1.0), "X_A: d = 2")]
    for call, message in cases:
        with pytest.raises(InputError, match=re.escape(message)):
            call()
    assert proofs.lemma1.check([[1.0]], [[2.0]], [[1]]).confirmed          # lists still do
    with pytest.raises(InputError, match="W1: expected 16 columns"):
        proofs.prop3.check(data, np.ones((5, 7)), np.ones(5), np.ones(5), 0.0)
    with pytest.raises(InputError, match="b1: m = 4, but W1 has m = 5"):
        proofs.prop3.check(data, np.ones((5, 16)), np.ones(4), np.ones(5), 0.0)


def test_lemma4_where_the_bound_underflows_and_the_rounding_allowance_overflows():
    # A review: the exact logit gap is 746, float64's 512 (c·g rounds at c ≈ 3.4e18); the bound
    # underflowed to 0 while the allowance exp(4·size·ε) overflowed, and a distance of 8.75e-223
    # was called CONTRADICTED. Float64 cannot decide there.
    E, X = np.eye(2)[None], np.array([[1.0, 0.0]])
    g = np.array([1.0, 1.0 - 2.0 ** -52])
    c = 746 / (g[0] - g[1])
    r = proofs.lemma4.check(E, X, np.zeros((2, 2)), np.outer(g, [1.0, 0.0]), c)
    assert r.applies and r.conclusion is None, str(r)
    assert "undecided" in str(r)
    r = proofs.lemma4.check(E, X, np.zeros((2, 2)), np.outer(g, [1.0, 0.0]), float("inf"))
    assert not r.applies and not r.contradicted and "c finite" in r.failed, str(r)
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    assert proofs.lemma4.check(E, X, W, Wp, 40.0).confirmed            # where it can decide, it does


@pytest.mark.parametrize("alpha", [np.nextafter(-1.0, 0.0), 1e300, -1.0 - 1e-15])
def test_lemma2_says_undecided_where_float64_cannot_see_the_shift(alpha):
    # A review: α = −1 + 2^-53 and α = 1e300 were CONTRADICTED; the lemma holds for every α ≠ −1,
    # but |1 + α|·σ_min(V) lies below the shifted matrix's rounding there.
    r = proofs.lemma2.check(np.eye(3), alpha)
    assert r.applies and r.conclusion is None and "undecided" in str(r), str(r)
    assert proofs.lemma2.check(np.eye(3), -0.5).confirmed
    assert proofs.lemma2.check(np.eye(3), 1e3).confirmed


def test_the_checks_refuse_arguments_that_are_not_real_numbers():
    # A review: complex input was cast to its real part ("confirmed", with a ComplexWarning), a
    # string α or c reached NumPy, NaN α a raw ValueError, inf α LAPACK's DLASCL message.
    from construct import synthetic
    from construct.errors import InputError
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    cases = [(lambda: proofs.lemma1.check([[1j]], [[1.0]], [[1.0]]), "A: complex"),
             (lambda: proofs.lemma2.check(np.array(["1", "2"])), "V: not an array of real numbers"),
             (lambda: proofs.lemma2.check(np.eye(3), float("nan")), "alpha"),
             (lambda: proofs.lemma2.check(np.eye(3), float("inf")), "alpha"),
             (lambda: proofs.lemma2.check(np.eye(3), "1"), "alpha"),
             (lambda: proofs.lemma2.check(np.eye(3), 1j), "alpha"),
             (lambda: proofs.lemma4.check(E, X, W, Wp, "1"), "c"),
             (lambda: proofs.lemma3.check(data.X[3:5], data.E[:3], data.X[:3], seed=-1), "seed"),
             (lambda: proofs.lemma3.check(data.X[3:5], data.E[:3], data.X[:3], seed=1.5), "seed"),
             (lambda: proofs.claim2.check(data.E[3:5], data.X[3:5], np.full((2, 3), 1 / 3), data.E[:3],
                                          data.X[:3], 1.0, seed=-1), "seed")]
    for call, message in cases:
        with pytest.raises(InputError, match=re.escape(message)):
            call()


def test_a_wrong_size_is_named_once_and_empty_inputs_are_answered():
    from construct.errors import InputError
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    with pytest.raises(InputError) as err:
        proofs.lemma4.check(E, X, np.eye(3), Wp, 1.0)
    lines = str(err.value).splitlines()
    assert len(lines) == len(set(lines)), str(err.value)
    r = proofs.claim1.check(E[:0], X[:0], np.zeros((0, 3)))           # no examples: nothing to fit
    assert not r.contradicted, str(r)


def test_lemma1_when_the_numbers_cannot_decide_is_undecided_not_inapplicable():
    r = proofs.lemma1.check([[1e-10]], [[1e10]], [[1]])
    assert r.applies and r.conclusion is None and "undecided" in str(r), str(r)
    assert r.quantities["ranks_visible"] is False


def test_prop4_refuses_a_layer_that_does_not_shift_at_any_scale():
    # A review: with data scaled by 1e-15 the identity map (no shift at all) was confirmed, the
    # shift's slack having an absolute floor of 4(n + d)u.
    from construct import synthetic
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    for scale in (1.0, 1e-15, 1e-200):
        small = as_dataset(data.E * scale, data.X * scale, data.Y)
        assert not proofs.prop4.check(small, layer=lambda D: D).confirmed, scale
        assert proofs.prop4.check(small).confirmed, scale


def test_the_checks_run_their_linear_algebra_on_one_blas_thread(monkeypatch):
    # Their many SVDs of a few hundred rows ran 5-15 times slower on two OpenBLAS threads of a
    # busy 2-core machine (Theorem 1 and Proposition 1 at H = 16, n = 8, d = 16: 0.7-2.2 s
    # against 0.13-0.15 s), as teach's did.
    from construct import synthetic
    from construct.arith import numerical_rank
    from construct.arith.threads import blas_threads
    seen = []

    def rank(A):
        seen.append(blas_threads())
        return numerical_rank(A)
    monkeypatch.setattr(proofs.lemma1, "numerical_rank", rank)
    monkeypatch.setattr(proofs.check, "numerical_rank", rank)
    assert proofs.lemma1.check([[1.0]], [[2.0]], [[1.0]]).confirmed
    assert proofs.prop1.check(synthetic("independent", T=7, n=3, d=4, seed=0), 3).confirmed
    assert seen and set(seen) == {1}


def test_scalars_of_any_real_kind_are_accepted_and_lemma5_validates_its_arrays():
    # A review of the validators: a 0-d array, a Fraction or an mpmath number for c or α was
    # refused; Lemma 5 cast complex input to its real part and let strings and NaN reach NumPy
    # and SciPy; an integer beyond float64 raised OverflowError from arrays().
    from fractions import Fraction
    import mpmath
    from construct.errors import InputError
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    for c in (np.array(40.0), Fraction(40), mpmath.mpf(40), np.float32(40)):
        assert proofs.lemma4.check(E, X, W, Wp, c).confirmed, c
    assert proofs.lemma2.check(np.eye(3), np.array(0.5)).confirmed
    for bad, needle in [(np.array([1.0, 2.0]), "c must be a real number"), (True, "c must be a real number")]:
        with pytest.raises(InputError, match=needle):
            proofs.lemma4.check(E, X, W, Wp, bad)
    for args, needle in [((np.array([[1 + 2j]]), [[1.0]]), "A: complex"), (([["a"]], [["b"]]), "A: not an array"),
                         (([[np.nan]], [[1.0]]), "A: non-finite")]:
        with pytest.raises(InputError, match=re.escape(needle)):
            proofs.lemma5.check(*args)
    assert proofs.lemma5.check([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.1], [0.0, 1.0]]).confirmed
    assert proofs.lemma5.check([[1.0, 0.0]], [[1.0], [0.0]]).failed == ["same shape"]
    with pytest.raises(InputError, match="A: not an array of real numbers"):
        proofs.lemma1.check([[10 ** 400]], [[1]], [[1]])


def test_a_check_that_does_not_apply_names_the_hypothesis_that_fails():
    # A new user's trial: "does not apply: alpha ≠ −1" read as if alpha were not −1, and
    # Proposition 5 printed "constant = 3.19" for tokens whose sums are not one constant.
    import proofs
    from construct import build, synthetic
    assert str(proofs.lemma2.check(np.eye(3), alpha=-1.0)).splitlines()[0] == \
        "Lemma 2: does not apply: hypothesis “alpha ≠ −1” fails"
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    check = proofs.prop5.check(data, build(data, 3).weights)
    assert not check.applies and "constant" not in check.quantities
    assert not any(line.strip().startswith("constant =") for line in str(check).splitlines())


def test_each_check_names_a_hypothesis_broken_at_its_boundary():
    # Mutation testing in review: loosening any of these hypotheses by one (T ≤ H(k−1)+2,
    # |S| ≤ n, m ≤ n + 1, c ≥ 0, or dropping d_o ≤ d_v, d_o ≤ d) left every test passing.
    from construct import synthetic
    rng = np.random.default_rng(0)
    over = proofs.theorem1.check(synthetic("independent", T=8, n=3, d=4, seed=0), 3)
    assert over.failed == ["T ≤ H(k−1)+1"] and over.conclusion is None, str(over)
    narrow = proofs.theorem1.check(synthetic("independent", T=7, n=3, d=4, d_o=2, seed=0), 3, value_dim=1)
    assert narrow.failed == ["d_o ≤ d_v"] and narrow.conclusion is None, str(narrow)
    wide = as_dataset(rng.standard_normal((7, 3, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 5)))
    wide_check = proofs.theorem1.check(wide, 3, value_dim=5)
    assert wide_check.failed == ["d_o ≤ d"] and wide_check.conclusion is None, str(wide_check)
    n, d = 2, 4
    many = proofs.claim1.check(rng.standard_normal((n + 1, n, d)), rng.standard_normal((n + 1, d)),
                               np.full((n + 1, n), 1 / n))
    assert many.failed == ["m ≤ n"], str(many)
    assert proofs.claim1.check(rng.standard_normal((2, n, d)), rng.standard_normal((2, d)), np.full((2, n), 1 / n),
                               d_h=1).failed == ["m ≤ d_h"]
    n = 3
    X_S, E_A, X_A = rng.standard_normal((n, 5)), rng.standard_normal((2, n, 5)), rng.standard_normal((2, 5))
    assert proofs.lemma3.check(X_S, E_A, X_A).failed == ["|S| ≤ n − 1"]
    assert proofs.claim2.check(rng.standard_normal((n, n, 5)), X_S, np.full((n, n), 1 / n), E_A, X_A,
                               2.0).failed == ["|S| ≤ n − 1"]
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    for c in (0.0, -1.0):
        r = proofs.lemma4.check(E, X, W, Wp, c)
        assert r.failed == ["c > 0"] and not r.contradicted, (c, str(r))


def test_lemma4_refuses_a_distance_beyond_its_bound(monkeypatch):
    # The check allows the bound only the rounding of its own numbers: at the extremal example
    # the ratio is 1 − 1e-17, so a bound 10% too small must be reported as failing. (Review: an
    # allowance of twice the bound passed every test.)
    from construct.saturation import saturation_bound
    monkeypatch.setattr(proofs.lemma4, "saturation_bound", lambda *args: 0.9 * saturation_bound(*args))
    E, X, W, Wp = proofs.lemma4.extremal(3, 4, 1.0, 0.5)
    r = proofs.lemma4.check(E, X, W, Wp, (2.0 + 40.0) / 0.5)
    assert r.applies and r.conclusion is False, str(r)


def test_the_head_checks_notice_a_trace_that_does_not_match_the_weights():
    # Review: dropping the row-reduction comparison from check_step, or the comparison of the
    # saturation tokens j* from check_head, left every test passing (the traces were always right).
    import dataclasses
    from construct import synthetic
    result = build(synthetic("independent", T=7, n=3, d=4, seed=0), 3, trace=True, precision="float64",
                   scale="explicit")
    n = result.data.n
    good = result.trace[1]
    assert proofs.prop1.check_step(result, 2).confirmed and proofs.claim2.check_head(result, 2).confirmed
    result.trace[1] = dataclasses.replace(good, C=2 * good.C, F=2 * good.F)       # F = C Z̄_A still holds
    assert proofs.prop1.check_step(result, 2).conclusion is False
    result.trace[1] = dataclasses.replace(good, F=2 * good.F)
    assert proofs.prop1.check_step(result, 2).conclusion is False
    result.trace[1] = dataclasses.replace(good, j_star=(good.j_star + 1) % n)
    assert proofs.claim2.check_head(result, 2).conclusion is False
    result.trace[1] = dataclasses.replace(good, targets=good.targets[:, ::-1].copy())
    assert proofs.claim2.check_head(result, 2).conclusion is False
    result.trace[1] = good


def test_the_rank_checks_notice_a_rank_that_breaks_their_inequality(monkeypatch):
    # The lemmas are theorems: only a wrong rank (a broken numerical_rank, a broken shift) can
    # break them, and then the checks must say so. Review: weakening each final comparison by
    # one (rank M ≥ rank A + rank C − 1, rank B ≥ rank A − 1, rank ≥ n − 1) passed every test.
    from construct.arith import numerical_rank
    calls = []

    def short_of_one(target):
        def rank(A):
            calls.append(A.shape)
            r, s = numerical_rank(A)
            return (r - 1, s) if len(calls) == target else (r, s)
        return rank
    monkeypatch.setattr(proofs.lemma1, "numerical_rank", short_of_one(1))        # M is ranked first
    r = proofs.lemma1.check([[1.0]], [[2.0]], [[1.0]])
    assert r.applies and r.conclusion is False, str(r)
    calls.clear()
    monkeypatch.setattr(proofs.lemma5, "numerical_rank", short_of_one(2))        # then A, then B
    r = proofs.lemma5.check(np.eye(3), np.eye(3) + 0.1 * np.triu(np.ones((3, 3)), 1))
    assert r.applies and r.conclusion is False, str(r)
    monkeypatch.setattr(proofs.lemma2, "shifted", lambda V, alpha=1.0: np.vstack([V[:-1], V[:1]]))
    r = proofs.lemma2.check(np.eye(3), 0.5)
    assert r.applies and r.conclusion is False, str(r)


def test_lemma1_confirms_where_float64_sees_the_rank_whatever_the_lower_bound():
    # Review: M = [[1, 0], [0, 1e9], [0, 1]] (A = [1, 0]^T, B = [0, 1e9]^T, C = [1]) has singular
    # values 1e9 and 1, float64 rank 2 = 1 + 1; the lower bound σ_A σ_C / (max + ‖B‖) = 1e-9 lies
    # below twice M's tolerance, and the check said undecided where float64 sees the lemma hold
    # (it was confirmed before the bound). The bound only decides whether a rank short of
    # rank A + rank C is a counterexample.
    r = proofs.lemma1.check([[1.0], [0.0]], [[0.0], [1e9]], [[1.0]])
    assert r.quantities["rank_M"] == 2 and r.confirmed, str(r)


def test_lemma2_confirms_where_float64_sees_the_rank_whatever_the_rounding():
    # Review: V = diag(1, 1e-15), α = 1: the shifted rows' float64 rank is 2 (σ_min 1.26e-15
    # above the tolerance 8.9e-16), but the lemma's bound less the rounding is not, and the check
    # said undecided where float64 sees the lemma hold (it was confirmed before the rounding).
    r = proofs.lemma2.check(np.diag([1.0, 1e-15]), 1.0)
    assert r.quantities["rank_shifted"] == 2 and r.confirmed, str(r)


# --- the checks' refutations: a proofs audit found these branches untested -------------------------
# Weakening each comparison below by one (or a refutation into "undecided") passed every test.

def _shortened(target: int, by: int = 1):
    """A ``numerical_rank`` whose ``target``-th call reports ``by`` less (negative: more)."""
    from construct.arith import numerical_rank
    calls = []

    def rank(A):
        calls.append(A.shape)
        r, s = numerical_rank(A)
        return (r - by, s) if len(calls) == target else (r, s)
    return rank


@pytest.fixture(scope="module")
def traced():
    from construct import synthetic
    return build(synthetic("independent", T=7, n=3, d=4, seed=0), 3, trace=True, precision="float64")


@pytest.mark.parametrize("call", [1, 2], ids=["rank N", "rank of the rows so far"])
def test_prop1_step_refutes_a_rank_one_short(traced, call, monkeypatch):
    assert proofs.prop1.check_step(traced, 2).confirmed
    monkeypatch.setattr(proofs.prop1, "numerical_rank", _shortened(call))     # N first, then Z[:stop]
    r = proofs.prop1.check_step(traced, 2)
    assert r.applies and r.conclusion is False, str(r)


def test_claim1_and_claim2_refute_a_key_query_product_of_rank_one_too_many(traced, monkeypatch):
    assert proofs.claim2.check_head(traced, 2).confirmed
    monkeypatch.setattr(proofs.claim2, "factored_rank", lambda K, Q: K.shape[1] + 1)   # |S| + 2
    r = proofs.claim2.check_head(traced, 2)
    assert r.applies and r.conclusion is False, str(r)
    rng = np.random.default_rng(0)
    E_S, X_S = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4))
    s = interior_targets(rng, 2, 3)
    assert proofs.claim1.check(E_S, X_S, s).confirmed
    monkeypatch.setattr(proofs.claim1, "factored_rank", lambda K, Q: K.shape[1] + 1)   # m + 1
    r = proofs.claim1.check(E_S, X_S, s)
    assert r.applies and r.conclusion is False, str(r)


def test_prop5_refutes_a_rank_beyond_its_bound_and_its_rounding(monkeypatch):
    # As Proposition 2's check does: a sixth direction far above Z's rounding contradicts the
    # bound H(d − 1) + 1 = 5 (H = 2, d = 3).
    from construct import Weights
    from construct.arith import numerical_rank
    rng = np.random.default_rng(1)
    T, n, d, H = 8, 2, 3, 2
    E = rng.uniform(0.1, 1, (T, n, d))
    E /= E.sum(axis=2, keepdims=True)                   # every token's coordinates sum to 1
    data = as_dataset(E, rng.standard_normal((T, d)), rng.standard_normal(T))
    weights = Weights(rng.standard_normal((H, d, 2)), rng.standard_normal((H, d, 2)), rng.standard_normal((H, d, 1)),
                      rng.standard_normal((H, d)), rng.standard_normal((d, 1)))
    r = proofs.prop5.check(data, weights)
    assert r.confirmed and r.quantities["bound"] == 5, str(r)
    Z = rng.standard_normal((T, H * d))                 # rank 6, its singular values of order 1
    monkeypatch.setattr(proofs.prop5, "features_rank", lambda data, weights: (Z, *numerical_rank(Z)))
    r = proofs.prop5.check(data, weights)
    assert r.quantities["rank_Z"] == 6 > r.quantities["bound"]
    assert r.applies and r.conclusion is False, str(r)


@pytest.mark.parametrize("statement", ["theorem1", "prop1"])
def test_theorem1_and_prop1_say_false_where_the_construction_fails(statement, monkeypatch):
    # The construction is the proof: a failed build (or, for Theorem 1, a failed verification)
    # is a False conclusion, never a confirmation.
    from construct import ConstructionError, synthetic
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    module = getattr(proofs, statement)
    assert module.check(data, 3).confirmed

    def failing(*args, **kwargs):
        raise ConstructionError("a numerical step failed (a test double)")
    monkeypatch.setattr(module, "build", failing)
    r = module.check(data, 3)
    assert r.applies and r.conclusion is False and "test double" in r.quantities["construction_error"], str(r)
    if statement == "theorem1":
        from dataclasses import replace
        result = build(data, 3)
        monkeypatch.setattr(module, "build", lambda *a, **k: replace(
            result, verification=replace(result.verification, passed=False)))
        r = module.check(data, 3)
        assert r.applies and r.conclusion is False, str(r)


def test_lemma3_tokens_that_tie_with_every_term_zero_refute_the_separation():
    # e_1·a = e_2·a = 0 exactly, every term 0: no rounding can hide a gap, so the draw is a
    # failure of separation (False), not "undecided".
    b, X_A, X_S = np.array([1.0, 0.0, 0.0]), np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 0.0, 1.0]])
    r = proofs.lemma3.check(X_S, np.array([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]), X_A, a=np.array([1.0, 0.0, 0.0]), b=b)
    assert r.applies and r.conclusion is False, str(r)


@pytest.mark.parametrize("statement", ["theorem1", "prop1", "appendix_c"])
def test_theorem1_and_prop1_name_the_weaker_statement_where_a1_itself_fails(statement):
    # A proofs audit: with x_6 = x_3 + x_4 (Kruskal rank 2 < n = 3) both printed "confirmed"
    # under the paper's name, although A1 fails: they decide the partition condition (which A1
    # implies, and which these queries meet). They now say which statement they confirmed.
    rng = np.random.default_rng(0)
    H, n, d = 3, 3, 4
    E, X = rng.standard_normal((H * (n - 1) + 1, n, d)), rng.standard_normal((H * (n - 1) + 1, d))
    X[6] = X[3] + X[4]
    data = as_dataset(E, X, rng.standard_normal(len(X)))
    module = getattr(proofs, statement)
    r = module.check(data, H)
    assert r.confirmed and "in place of A1" in r.statement and r.quantities["A1"].startswith("fails"), str(r)
    assert "in place of A1" in str(r).splitlines()[0]
    X[6] = rng.standard_normal(d)
    r = module.check(as_dataset(E, X, data.Y), H)
    assert r.confirmed and r.statement == module.STATEMENT and r.quantities["A1"] == "holds", str(r)
