"""A hostile trial of the built-in datasets: every bad ``embeddings`` and every unknown option is
an InputError naming it, never a raw NumPy or Python error, a warning or a silent rounding."""

import warnings

import numpy as np
import pytest

from construct import InputError, limits
from construct import datasets

V = np.random.default_rng(3).standard_normal((12, 5))


def tokens(embeddings, **options):
    """``datasets.tokens`` of a few short sequences, with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return datasets.tokens(6, n=3, classes=2, embeddings=embeddings, **options)


@pytest.mark.parametrize("big", [2**53 + 1, -(2**53 + 1), 2**63 - 1])
def test_integer_embeddings_float64_cannot_hold_are_refused_not_rounded(big):
    # The trial: 2**53 + 1 became 2**53 in the tokens without a word.
    ints = np.arange(12 * 5, dtype=object).reshape(12, 5)
    ints[4, 2] = big
    given = ints.tolist()
    with pytest.raises(InputError, match=r"embeddings: values float64 cannot hold exactly \(integers beyond 2\^53.* row\(s\) 4;"):
        tokens(given)
    with pytest.raises(InputError, match=r"embeddings: values float64 cannot hold exactly"):
        tokens(np.array(given, dtype=np.int64))
    with pytest.raises(InputError, match=r"embeddings: values float64 cannot hold exactly"):
        tokens(np.abs(np.array(given, dtype=np.int64)).astype(np.uint64) + np.uint64(2**63))
    exact = ints.copy()
    exact[4, 2] = 2**53                                   # a float64 number: taken as it is
    data = tokens(exact.tolist())
    assert data.E.dtype == np.float64 and set(data.E.ravel()) <= set(np.arange(60.0)) | {2.0**53}


def test_integers_beyond_every_integer_type_are_refused_as_numpy_reads_them():
    with pytest.raises(InputError, match="embeddings: object array"):
        tokens([[2**70] * 5] + [[float(i)] * 5 for i in range(11)])


def test_long_double_embeddings_with_more_bits_than_float64_are_refused():
    third = np.full((12, 5), np.longdouble(1) / 3)
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("long double is float64 on this platform")
    with pytest.raises(InputError, match="embeddings: values float64 cannot hold exactly"):
        tokens(third)


def test_complex_embeddings_are_refused_not_cut_to_their_real_part():
    # The trial: the imaginary part was dropped with only a ComplexWarning.
    with pytest.raises(InputError, match="embeddings: dtype complex128 .*complex values"):
        tokens(V + 1j)
    with pytest.raises(InputError, match="embeddings: dtype complex128"):
        tokens(V + 0j)                                    # even with no imaginary part: not a real type


@pytest.mark.parametrize("given, says", [
    ([["a", "b"], ["c", "d"], ["e", "f"]], "embeddings: dtype <U1 is not a real number type"),
    ("abc", "embeddings: dtype <U3 is not a real number type"),
    ([[1.0, 2.0], [3.0]], "embeddings: not an array of numbers"),                  # ragged
    (np.array([[1.0, None], [2.0, 3.0], [4.0, 5.0]], dtype=object), "embeddings: object array"),
    (np.ones((12, 5), dtype=bool), "embeddings: dtype bool is not a real number type"),
    (np.ma.masked_array(V, mask=np.eye(12, 5, dtype=bool)), r"embeddings: masked values"),
])
def test_embeddings_that_are_not_real_numbers_are_named(given, says):
    # The trial: strings raised "could not convert string to float", a ragged list "setting an
    # array element with a sequence"; a masked array lost its mask.
    with pytest.raises(InputError, match=says):
        tokens(given)


def test_non_finite_embeddings_are_named_by_row_even_where_no_sequence_draws_them():
    bad = V.copy()
    bad[7, 1], bad[9, 0] = np.nan, -np.inf
    with pytest.raises(InputError, match=r"embeddings: non-finite values .* in row\(s\) 7, 9$"):
        tokens(bad)


@pytest.mark.parametrize("shape", [(0, 5), (12, 0), (12,), (2, 6, 5), ()])
def test_embeddings_of_the_wrong_shape_are_named(shape):
    # The trial: (12, 0) was reported as "E: empty contexts", (0, 5) as a too small vocabulary.
    with pytest.raises(InputError, match=r"embeddings must .*got shape"):
        tokens(np.zeros(shape) if shape else 1.0)


def test_good_embeddings_of_every_real_type_give_the_same_dataset():
    ints = np.arange(60).reshape(12, 5)
    ref = tokens(ints.astype(np.float64))
    for given in (ints, ints.astype(np.int8), ints.astype(np.uint16), ints.astype(np.float32), ints.tolist()):
        data = tokens(given)
        assert np.array_equal(data.E, ref.E) and np.array_equal(data.Y, ref.Y)


@pytest.mark.parametrize("sizes", [dict(vocabulary=10**12, d=4), dict(vocabulary=4, d=10**12),
                                   dict(n=10**12, vocabulary=10**12, d=4)])
def test_a_vocabulary_beyond_memory_is_refused_before_it_is_drawn(sizes):
    # The trial: vocabulary=10**12 raised NumPy's MemoryError ("Unable to allocate 29.1 TiB").
    options = dict(n=2, classes=2) | sizes
    with pytest.raises(InputError, match=r"request too large .*memory"):
        datasets.tokens(5, **options)


def test_the_vocabulary_counts_in_the_memory_a_token_dataset_needs(monkeypatch):
    # 10^5 x 16 Gaussian embeddings take 12.8 MB; the sequences themselves only a few KB.
    monkeypatch.setattr(limits, "available_memory", lambda: 2**20)
    with pytest.raises(InputError, match=r"vocabulary of 100000 .*memory"):
        datasets.tokens(5, n=2, vocabulary=10**5, d=16, classes=2)
    assert datasets.tokens(5, n=2, vocabulary=100, d=16, classes=2).T == 5


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.float32])
def test_embeddings_too_large_to_check_are_refused_before_they_are_converted(dtype):
    # A read-only view of 10^13 entries: converting or checking it would take terabytes.
    huge = np.broadcast_to(np.ones((), dtype=dtype), (10**7, 10**6))
    with pytest.raises(InputError, match=r"request too large .*embeddings of shape \(10000000, 1000000\).*memory"):
        tokens(huge)


@pytest.mark.parametrize("name, takes", [("digits", "count, patch, positional, query"),
                                         ("tokens", "count, n, d, vocabulary, classes, query, embeddings, seed")])
def test_an_unknown_option_of_a_built_in_dataset_is_named_with_those_it_takes(name, takes):
    # The trial: load("digits", foo=1) raised "TypeError: digits() got an unexpected keyword argument".
    with pytest.raises(InputError, match=rf"invalid option: dataset '{name}' takes no option 'foo'; "
                                         rf"its options are {takes}$"):
        datasets.load(name, foo=1)
    with pytest.raises(InputError, match=r"takes no options 'foo', 'bar'"):
        datasets.load(name, count=5, foo=1, bar=2)


@pytest.mark.parametrize("call", [lambda q: datasets.tokens(5, n=2, query=q), lambda q: datasets.digits(5, query=q)],
                         ids=["tokens", "digits"])
def test_a_query_that_is_not_a_string_is_named(call):
    # An array query raised NumPy's "truth value of an array … is ambiguous".
    with pytest.raises(InputError, match=r"query must be .* got array\(\['last', 'cls'\]"):
        call(np.array(["last", "cls"]))


def test_a_dataset_name_that_is_not_a_string_is_named():
    with pytest.raises(InputError, match=r"unknown dataset array\(\['digits', 'tokens'\]"):
        datasets.load(np.array(["digits", "tokens"]))


@pytest.mark.parametrize("sizes, says", [(dict(vocabulary=100), r"vocabulary = 100 .*embeddings of shape \(12, 5\)"),
                                         (dict(d=16), r"d = 16 .*embeddings of shape \(12, 5\)"),
                                         (dict(vocabulary="x"), r"vocabulary must be an integer, got 'x'")])
def test_sizes_that_contradict_the_embeddings_are_refused_not_ignored(sizes, says):
    # vocabulary and d were ignored without a word once embeddings were given, even "x".
    with pytest.raises(InputError, match=says):
        tokens(V, **sizes)
    assert tokens(V, vocabulary=12, d=5).d == 5                       # the same sizes: as without them


def test_float32_embeddings_are_sized_as_one_float64_copy(monkeypatch):
    # A review: float32 embeddings were sized as if cast back and compared (integers and long
    # doubles are), 20 bytes per entry where a float64 copy and a mask take 9: 114 MiB refused
    # for a conversion that took 46 MiB.
    import construct.limits as limits
    emb = np.random.default_rng(0).standard_normal((1_000_000, 6)).astype(np.float32)
    monkeypatch.setattr(limits, "available_memory", lambda: 100 * 2 ** 20)
    data = datasets.tokens(10, n=3, embeddings=emb)
    assert data.E.dtype == np.float64 and data.T == 10
