"""The forward pass against a plain per-example loop, the file formats, atomic writes."""

import numpy as np
import pytest
from hypothesis import given

from construct import InputError, as_weights, forward, load_dataset, load_weights, param_count
from construct.io import npz_bytes, write_atomic
from construct.model import feature_matrix

from .strategies import seeds


def naive_forward(E, X, W_K, W_Q, W_V, W_O, W_D, skip):
    out = []
    for Et, x in zip(E, X):
        a = []
        for h in range(W_K.shape[0]):
            logits = Et @ W_K[h] @ W_Q[h].T @ x
            s = np.exp(logits - logits.max())
            s /= s.sum()
            a.append(W_V[h].T @ (Et.T @ s))
        o = W_O.T @ np.concatenate(a) + (x if skip else 0)
        out.append(W_D.T @ o)
    return np.array(out)


@given(seeds)
def test_forward_matches_the_definition(seed):
    rng = np.random.default_rng(seed)
    H, n, d, d_h, d_v, d_o, T = 3, 4, 5, 2, 3, 2, 6
    arrays = dict(W_K=rng.standard_normal((H, d, d_h)), W_Q=rng.standard_normal((H, d, d_h)),
                  W_V=rng.standard_normal((H, d, d_v)), W_O=rng.standard_normal((H * d_v, d)),
                  W_D=rng.standard_normal((d, d_o)), skip=bool(rng.integers(2)))
    w = as_weights(**arrays)
    E, X = rng.standard_normal((T, n, d)), rng.standard_normal((T, d))
    assert np.allclose(forward(E, X, w), naive_forward(E, X, **arrays))
    assert feature_matrix(E, X, w).shape == (T, H * d)
    assert w.parameters == param_count(H, d, d_h, d_v, d_o) == H * d * (2 * d_h + d_v) + H * d_v * d + d * d_o


def test_weights_round_trip_and_bytes_are_reproducible(tmp_path):
    rng = np.random.default_rng(0)
    w = as_weights(rng.random((2, 3, 2)), rng.random((2, 3, 2)), rng.random((2, 3, 1)), rng.random((2, 3)),
                   rng.random((3, 1)), True)
    path = tmp_path / "w.npz"
    path.write_bytes(w.to_bytes())
    back = load_weights(path)
    assert back.skip is True and np.array_equal(back.W_K, w.W_K)
    assert back.to_bytes() == w.to_bytes()
    with np.load(path, allow_pickle=False) as z:                  # loads with plain numpy
        assert set(z.files) == {"W_K", "W_Q", "W_V", "W_O", "W_D", "skip"}


def test_inconsistent_weights_are_named(tmp_path):
    path = tmp_path / "w.npz"
    path.write_bytes(npz_bytes(dict(W_K=np.zeros((2, 3, 2)), W_Q=np.zeros((2, 3, 1)), W_V=np.zeros((2, 3, 1)),
                                    W_O=np.zeros((5, 3)), W_D=np.zeros((3, 1)), skip=np.asarray(False))))
    with pytest.raises(InputError) as err:
        load_weights(path)
    assert "W_Q" in str(err.value) and "W_O" in str(err.value)


def test_one_dimensional_labels_mean_d_o_1(tmp_path):
    path = tmp_path / "d.npz"
    path.write_bytes(npz_bytes(dict(E=np.eye(3)[None].repeat(2, 0), X=np.eye(3)[:2], Y=np.array([1.0, 2.0]))))
    assert load_dataset(path).Y.shape == (2, 1)


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    write_atomic(target, b"abc")
    assert target.read_bytes() == b"abc"

    with pytest.raises(TypeError):
        write_atomic(tmp_path / "g.bin", object())           # fails while writing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


def test_outputs_get_ordinary_file_permissions(tmp_path):
    import os

    from construct.io import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "f.bin", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o644


def test_replacing_a_file_keeps_its_permissions(tmp_path):
    # A hostile trial: a private 0600 certificate came back 0644 after `certify --out` replaced it,
    # where a plain open(path, "wb") keeps the file's mode.
    import os
    target = tmp_path / "secret.json"
    target.write_bytes(b"old")
    os.chmod(target, 0o600)
    old = os.umask(0o022)
    try:
        write_atomic(target, b"new")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o7777 == 0o600


def test_replacing_an_output_folder_keeps_its_permissions(tmp_path):
    # A hostile trial: build --out into a private 0700 folder swapped in a 0755 one (and dropped
    # a setgid bit), making the weights and data readable to every user.
    import os

    from construct.io import OutputFolder
    for mode in (0o700, 0o2750):
        folder = tmp_path / f"run{mode:o}"
        folder.mkdir()
        os.chmod(folder, mode)
        old = os.umask(0o022)
        try:
            with OutputFolder(folder, ["a.bin"]) as out:
                out.publish({"a.bin": b"x"})
        finally:
            os.umask(old)
        assert (folder / "a.bin").read_bytes() == b"x"
        assert folder.stat().st_mode & 0o7777 == mode


def test_weights_arrays_are_fresh_copies():
    # Weights.arrays() hands out copies: changing one changes neither the weights nor a second call.
    from construct import build, synthetic
    w = build(synthetic("independent", T=7, n=3, d=4, seed=1), 3, seed=0).weights
    a = w.arrays()
    before = a["W_D"].copy()
    a["W_D"] *= 2.0
    assert np.array_equal(w.arrays()["W_D"], before) and np.array_equal(np.asarray(w.W_D), before)


def test_an_unexpected_array_name_is_answered_with_the_names_expected(tmp_path):
    # A new user's trial: "unexpected member 'x.npy' in 'lower.npz'" did not say what a dataset
    # file holds; a lower-case x is a likely slip for X.
    from construct import InputError, load_dataset, load_weights
    from construct.io import npz_bytes
    path = tmp_path / "lower.npz"
    path.write_bytes(npz_bytes({"E": np.zeros((2, 2, 3)), "x": np.zeros((2, 3)), "Y": np.zeros((2, 1))}))
    with pytest.raises(InputError, match=r"unexpected member 'x.npy'.*a dataset holds E, X, and Y or labels"):
        load_dataset(path)
    with pytest.raises(InputError, match=r"a weights file holds W_K, W_Q, W_V, W_O, W_D, skip"):
        load_weights(path)


def test_decimal_arrays_without_bits_are_refused_not_ignored(tmp_path):
    # A hostile trial: a high-precision weights file with its `bits` member removed was read as
    # plain float64 weights, its W_*_decimal arrays (edited to "123.5") ignored without a word.
    from construct import build, synthetic
    from construct.io import load_npz
    w = build(synthetic("independent", T=7, n=3, d=4, seed=0), 3, precision=80).weights
    w.save(tmp_path / "hp.npz")
    arrays = load_npz(tmp_path / "hp.npz", what="weights", allowed=lambda k: True)
    del arrays["bits"]
    (tmp_path / "nobits.npz").write_bytes(npz_bytes(arrays))
    with pytest.raises(InputError, match=r"bits: missing.*_decimal"):
        load_weights(tmp_path / "nobits.npz")


def test_datasets_and_weights_compare_by_value_and_are_unhashable(tmp_path):
    # == on two Dataset (or Weights) objects raised numpy's "truth value of an array ... is
    # ambiguous" ValueError (the dataclass compared tuples of arrays): a dataset loaded back, or
    # unpickled, could not be compared with the original at all.
    import pickle

    from construct import as_dataset, build, synthetic
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    data.save(tmp_path / "d.npz")
    assert load_dataset(tmp_path / "d.npz") == data and pickle.loads(pickle.dumps(data)) == data
    assert as_dataset(data.E, data.X, data.Y[:, 0]) == data
    assert data != synthetic("independent", T=7, n=3, d=4, seed=1) and data != "data" and data != None  # noqa: E711
    labelled = as_dataset(data.E, data.X, labels=[0, 1, 2, 0, 1, 2, 0])
    assert labelled == as_dataset(data.E, data.X, labels=[0, 1, 2, 0, 1, 2, 0])
    assert labelled != as_dataset(data.E, data.X, Y=labelled.Y)                  # no class ids
    w = build(data).weights
    w.save(tmp_path / "w.npz")
    assert load_weights(tmp_path / "w.npz") == w and pickle.loads(pickle.dumps(w)) == w
    assert w != build(data, seed=1).weights and w != as_weights(w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, skip=True)
    with pytest.raises(TypeError, match="unhashable"):
        hash(data)
    with pytest.raises(TypeError, match="unhashable"):
        hash(w)


def test_class_ids_compare_as_the_engine_reads_them():
    # A Dataset made by hand with classes=[0, 1, 2] (a list, as the engine accepts and reads it)
    # was unequal to the same data from as_dataset (a tuple) and to itself validated.
    from construct import Dataset, as_dataset, synthetic
    from construct.data import checked
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    labelled = as_dataset(data.E, data.X, labels=[0, 1, 2, 0, 1, 2, 0])
    by_hand = Dataset(labelled.E, labelled.X, labelled.Y, classes=[0, 1, 2])
    assert by_hand == labelled and labelled == by_hand and checked(by_hand) == by_hand
    assert Dataset(labelled.E, labelled.X, labelled.Y, classes=(np.int64(0), 1, 2)) == labelled
    assert Dataset(labelled.E, labelled.X, labelled.Y, classes=[0, 1, 3]) != labelled
    assert Dataset(labelled.E, labelled.X, labelled.Y) != labelled


def test_copies_and_unpickled_datasets_and_weights_keep_their_arrays_read_only():
    # A Dataset's and Weights' arrays are read-only; pickle.loads and copy.deepcopy gave writeable
    # ones, so a copy of an immutable object could be edited in place.
    import copy
    import pickle

    from construct import build, synthetic
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    weights = build(data).weights
    high = build(data, precision=80).weights                                    # object arrays
    for obj, names in ((data, "EXY"), (weights, ("W_K", "W_Q", "W_V", "W_O", "W_D")),
                       (high, ("W_K", "W_Q", "W_V", "W_O", "W_D"))):
        for twin in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
            assert twin == obj
            for name in names:
                with pytest.raises(ValueError, match="read-only"):
                    getattr(twin, name)[(0,) * getattr(twin, name).ndim] = 1.0


def test_as_weights_takes_the_pre_layers_names_that_build_takes():
    # From an API review: build(prelayer="none") is the documented default, while
    # as_weights(..., prelayer="none") was refused as an unknown layer.
    arrays = dict(W_K=np.ones((1, 3, 2)), W_Q=np.ones((1, 3, 2)), W_V=np.ones((1, 3, 3)),
                  W_O=np.ones((3, 3)), W_D=np.ones((3, 1)))
    assert as_weights(**arrays, prelayer="none").prelayer is None
    assert as_weights(**arrays, prelayer="mean-shift").prelayer == "mean-shift"
    with pytest.raises(InputError, match="prelayer: unknown layer 'auto'"):
        as_weights(**arrays, prelayer="auto")           # build's choice, not a layer


def test_build_results_with_traces_compare_by_value():
    # From an API review: a result built with trace=True raised numpy's ambiguous-truth-value
    # ValueError on ==, even against its own pickled copy (its traces hold arrays).
    import pickle

    from construct import build, synthetic
    result = build(synthetic("independent", T=7, n=4, d=6, seed=0), 2, trace=True)
    again = pickle.loads(pickle.dumps(result))
    assert again == result and again.trace == result.trace
    other = build(synthetic("independent", T=7, n=4, d=6, seed=1), 2, trace=True)
    assert other.trace != result.trace


def test_unpickled_and_copied_datasets_and_weights_are_checked_again():
    # A review of the read-only copies: unpickled and deep-copied objects came back with the flag
    # that says "validated" and, now, read-only arrays, so the engine took them unchecked. A pickle
    # made after an array was made writeable again and edited (or crafted) carried NaN, inf or
    # shapes that as_dataset and as_weights refuse, and build raised LinAlgError, verify reported
    # an infinite error, instead of the input errors. And copy.copy of a Dataset made by hand
    # made the caller's own arrays read-only.
    import copy
    import pickle

    from construct import build, synthetic, verify
    from construct.data import Dataset
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    weights, high = build(data).weights, build(data, precision=80).weights
    for twin in (pickle.loads(pickle.dumps(high)), copy.deepcopy(high), copy.copy(high)):
        assert twin == high and verify(twin, data).passed      # still taken: built, then copied
    for twin in (pickle.loads(pickle.dumps(data)), copy.deepcopy(data)):
        assert twin == data and verify(weights, twin).passed
    edited, bad = copy.deepcopy(data), copy.deepcopy(weights)
    for obj, name, value in ((edited, "E", np.nan), (bad, "W_K", np.inf)):
        changed = np.array(getattr(obj, name))           # the arrays themselves cannot be made writeable
        changed[(0,) * changed.ndim] = value             # again (limits.locked): a state that says so
        object.__setattr__(obj, name, changed)
    for copied in (lambda o: pickle.loads(pickle.dumps(o)), copy.deepcopy, copy.copy):
        with pytest.raises(InputError, match=r"E: non-finite values \(NaN or inf\) in example\(s\) 0"):
            build(copied(edited))
        with pytest.raises(InputError, match=r"W_K: non-finite values"):
            verify(copied(bad), data)
    E, X, Y = np.ones((2, 2, 2)), np.eye(2), np.ones((2, 1))
    copy.copy(Dataset(E, X, Y))
    assert E.flags.writeable and X.flags.writeable and Y.flags.writeable       # the caller's own
