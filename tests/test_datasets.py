"""Built-in datasets (issue #16, item 1): digits as patch tokens, token sequences, your arrays."""

import builtins

import numpy as np
import pytest

from construct import InputError, build, heads_needed
from construct import datasets
from construct.assumptions import check_assumptions
from construct.certify import certify
from construct.cli import main

pytest.importorskip("sklearn")


def test_digits_are_patch_tokens_of_the_images():
    from sklearn.datasets import load_digits
    images, labels = load_digits(return_X_y=True)
    data = datasets.digits(5, positional=False)
    assert (data.T, data.n, data.d, data.d_o) == (5, 4, 16, 5)
    img = images[0].reshape(8, 8) / 16
    assert np.array_equal(data.E[0, 1], img[:4, 4:].ravel())             # patch (0, 1): top right
    assert np.allclose(data.X[0], data.E[0].mean(axis=0))
    assert data.classes == tuple(sorted(set(labels[:5].tolist())))


def test_digits_build_verify_and_certify_with_zero_misclassification():
    data = datasets.digits(301)
    H = heads_needed(data.T, data.n)
    result = build(data, H)
    assert H == 100 and result.verification.passed
    cert = certify(result.weights, data)
    assert cert.claims["classification"]["proven"] and cert.claims["classification"]["misclassified_upper_bound"] == 0
    assert cert.claims["rank"]["proven"] and cert.claims["memorization"]["proven"]


def test_a_cls_query_fails_a1_and_the_error_says_so():
    data = datasets.digits(40, query="cls")
    rep = check_assumptions(data, trials=200)
    assert not rep.a1.holds and rep.a3.holds
    with pytest.raises(InputError, match="Proposition 4"):
        build(data, heads_needed(data.T, data.n))


def test_token_sequences_fail_a1_and_satisfy_a3():
    data = datasets.tokens(200, n=8, d=16, vocabulary=64)
    rep = check_assumptions(data, trials=300)
    assert not rep.a1.holds and rep.a2 and rep.a3.holds
    assert len({tuple(x) for x in data.X}) < data.T                        # the queries repeat


def test_tokens_take_given_embeddings():
    V = np.random.default_rng(3).standard_normal((12, 5))
    data = datasets.tokens(10, n=3, embeddings=V, classes=2, seed=1)
    assert data.d == 5 and all(any(np.array_equal(t, v) for v in V) for t in data.E.reshape(-1, 5))
    with pytest.raises(InputError, match="vocabulary of at least n"):
        datasets.tokens(10, n=13, embeddings=V)


def test_from_arrays_remaps_classes():
    rng = np.random.default_rng(0)
    data = datasets.from_arrays(rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 3)), [7, 3, 7, 9])
    assert data.classes == (3, 7, 9)
    assert np.array_equal(data.Y.argmax(axis=1), [1, 0, 1, 2])


def test_without_scikit_learn_digits_name_the_extra(monkeypatch):
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", refuse)
    with pytest.raises(InputError, match=r"scikit-learn, in the \[data\] extra: pip install '\.\[data\]' in the project's folder"):
        datasets.digits(10)


def test_cli_build_dataset_digits(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["build", "--dataset", "digits", "--examples", "61", "--heads", "20", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "A1                holds" in printed and "every label reproduced" in printed
    assert main(["certify", str(out / "weights.npz"), str(out / "data.npz")]) == 0
    assert main(["build", "--dataset", "digits", "--synthetic", "shared", "--out", str(tmp_path / "x")]) == 2
    assert "--synthetic cannot be given with --dataset" in capsys.readouterr().err


def test_a_token_dataset_beyond_memory_is_refused_before_it_is_drawn():
    # A hostile trial: --dataset tokens --examples 30000000 drew sequences for minutes (one at a
    # time), grew to 5.7 GB and ended in "out of memory"; 1e8 was still running after 300 s.
    import time
    from construct import InputError
    from construct.datasets import tokens
    start = time.perf_counter()
    with pytest.raises(InputError, match="memory"):
        tokens(10 ** 11, n=8, d=16)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("patch", [1, 2])
def test_digits_refuse_patches_whose_tokens_cannot_be_built_naming_patch(patch):
    # A review: patch 1 and 2 were advertised, but give (8/p)² = 64 or 16 tokens of p² = 1 or 4
    # values (n > d, A2 fails) and at most d = p² outputs for 10 classes; the refusal came from the
    # dataset checks ("labels: 10 classes need d_o = 10 outputs…") and named no patch.
    with pytest.raises(InputError, match=rf"patch {patch}: .*{(8 // patch) ** 2} tokens of {patch * patch} values"):
        datasets.digits(50, patch=patch)
