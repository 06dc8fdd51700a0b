"""Real and realistic datasets, offline (``mha-construct build --dataset NAME``).

- :func:`digits`: the 8×8 handwritten digits that scikit-learn ships (the ``[data]`` extra), as
  ViT-style patch tokens: each image cut into four patches of ``4 × 4`` pixels (pixel values
  divided by 16), one token per patch, with the sinusoidal positional encoding added by default;
  the query is the mean token (``query="mean"``) or one fixed CLS token for every image
  (``query="cls"``: the queries are then all equal and A1 fails); the label is the digit.
- :func:`tokens`: sequences of distinct tokens from a vocabulary with embeddings (Gaussian, or an
  array you give), the query being the sequence's last token (``"last"``) or a fixed CLS token
  (``"cls"``); labels are random classes. With a vocabulary much smaller than the number of
  sequences the queries repeat, so A1 fails while A3 (the queries shifted by their context's
  mean) holds: the case of Proposition 4.
- :func:`from_arrays`: your own contexts, queries and integer labels (classes remapped to
  ``0..C−1`` in sorted order; :attr:`Dataset.classes` keeps the original ids).

:func:`describe` reports A1, A2, A3 and general position for any of them
(:func:`construct.assumptions.check_assumptions`).
"""

from __future__ import annotations

import inspect

import numpy as np

from .data import Dataset, as_dataset, sinusoidal_encoding
from .errors import InputError
from .limits import as_float64, finite_examples, flag, integer, missing_library, real_array, require_memory
from .signals import signals_held

NAMES = ("digits", "tokens")

# The images in scikit-learn's digits dataset.
DIGITS = 1797


def digits(count: int = 301, *, patch: int = 4, positional: bool = True, query: str = "mean") -> Dataset:
    """The first ``count`` of scikit-learn's 1,797 digits as patch tokens (module docstring).

    ``patch``: the side of the square patches, 4 (the only size Theorem 1 takes: 1 and 2, which
    also divide 8, give more tokens than dimensions and fewer outputs than classes).

    Raises:
        InputError: scikit-learn is not installed, ``count`` is out of range, ``patch`` is not 4,
            or an unknown ``query``.
    """
    count, patch = integer(count, "count"), integer(patch, "patch")
    positional = flag(positional, "positional")
    if patch in (1, 2):                    # they divide 8, but Theorem 1 takes neither
        n, d = (8 // patch) ** 2, patch * patch
        raise InputError(f"patch {patch}: {patch}×{patch} patches give {n} tokens of {d} values, more tokens than "
                         f"dimensions (A2 needs n ≤ d) and at most {d} outputs for the 10 digit classes; patch 4 "
                         "(4 tokens of 16 values) is the size the construction takes", what="invalid option")
    if patch != 4:
        raise InputError(f"patch: the images are 8×8 and cut into 4×4 patches (patch 4), got {patch}",
                         what="invalid option")
    if not isinstance(query, str) or query not in ("mean", "cls"):
        raise InputError(f"query must be mean or cls, got {query!r}", what="invalid option")
    try:
        with signals_held():            # an extension interrupted as it loads fails as an ImportError
            from sklearn.datasets import load_digits
    except ImportError:
        raise missing_library("the digits dataset needs scikit-learn", "data") from None
    images, labels = load_digits(return_X_y=True)
    assert len(images) == DIGITS, f"scikit-learn's digits have {len(images)} images, not {DIGITS}"
    if count > len(images):
        raise InputError(f"count must be at most {len(images)} (the digits there are), got {count}", what="invalid option")
    g = 8 // patch
    img = images[:count].reshape(count, g, patch, g, patch) / 16.0
    E = img.transpose(0, 1, 3, 2, 4).reshape(count, g * g, patch * patch)          # row-major patches
    if positional:
        E = E + sinusoidal_encoding(g * g, patch * patch)
    X = E.mean(axis=1) if query == "mean" else np.broadcast_to(_cls(patch * patch), (count, patch * patch)).copy()
    return as_dataset(E, X, labels=labels[:count].astype(np.int64))


def tokens(count: int = 200, *, n: int = 8, d: int | None = None, vocabulary: int | None = None,
           classes: int = 4, query: str = "last", embeddings=None, seed: int = 0) -> Dataset:
    """``count`` sequences of ``n`` distinct tokens (module docstring) from a Gaussian vocabulary
    of ``vocabulary`` tokens (default 64) in ``d`` dimensions (default 16); ``embeddings`` (V, d)
    replaces it (then ``vocabulary`` and ``d`` are its shape, and may be given only as that).

    Raises:
        InputError: sizes that are not positive integers (or not the shape of ``embeddings``),
            an unknown ``query``, ``n`` beyond the vocabulary, ``embeddings`` that are not a
            finite real (V, d) array float64 holds exactly (named, by row where it can), or a
            dataset larger than the memory available.
    """
    count, n, classes, seed = (integer(v, name, lo) for name, v, lo in
                               (("count", count, 1), ("n", n, 1), ("classes", classes, 1), ("seed", seed, 0)))
    if not isinstance(query, str) or query not in ("last", "cls"):
        raise InputError(f"query must be last or cls, got {query!r}", what="invalid option")
    given = {k: integer(v, k) for k, v in (("vocabulary", vocabulary), ("d", d)) if v is not None}
    if embeddings is None:
        vocabulary, d = given.get("vocabulary", 64), given.get("d", 16)
    else:
        V = _embeddings(embeddings)
        vocabulary, d = V.shape
        shape = {"vocabulary": vocabulary, "d": d}
        contradicted = [f"{k} = {v}" for k, v in given.items() if v != shape[k]]
        if contradicted:
            raise InputError(f"{' and '.join(contradicted)} contradict{'s' if len(contradicted) == 1 else ''} "
                             f"embeddings of shape {V.shape} (vocabulary, d); leave them out", what="invalid option")
    if n > vocabulary:
        raise InputError(f"n = {n} distinct tokens need a vocabulary of at least n, got {vocabulary}",
                         what="invalid option")
    # The Gaussian vocabulary where none is given; one draw's permutation of the vocabulary (NumPy
    # permutes it when n is a large part of it); the contexts, queries and one-hot labels, with the
    # indices drawn and a copy on the way. All sized before anything is drawn.
    drawn = 8 * vocabulary * d if embeddings is None else 0
    require_memory(drawn + 8 * vocabulary + 8 * 3 * count * (n * d + d + classes),
                   f"a token dataset of {count} sequences over a vocabulary of {vocabulary}")
    rng = np.random.default_rng(seed)
    if embeddings is None:
        V = rng.standard_normal((vocabulary, d))
    E = V[np.array([rng.choice(vocabulary, n, replace=False) for _ in range(count)])]
    X = E[:, -1, :].copy() if query == "last" else np.broadcast_to(_cls(d), (count, d)).copy()
    return as_dataset(E, X, labels=rng.integers(0, classes, count))


def _embeddings(value) -> np.ndarray:
    """``value`` as a finite float64 (V, d) array, refused (never rounded, cut or coerced) as
    :func:`~construct.data.as_dataset` refuses its arrays: the tokens are these values exactly.

    Raises:
        InputError: not real numbers (strings, ragged, object, bool, complex, masked), values
            float64 cannot hold exactly, non-finite rows, or not a non-empty 2-D array.
    """
    problems: list[str] = []
    V = real_array("embeddings", value, problems)
    if V is not None and (V.ndim != 2 or 0 in V.shape):
        problems.append(f"embeddings must be (vocabulary, d) with at least one token of at least one "
                        f"dimension, got shape {V.shape}")
        V = None
    if V is not None:
        # as_float64 makes a float64 copy (other dtypes) and casts it back to compare (integers,
        # long doubles), and the checks make one-byte masks: sized before any of them is made.
        compared = V.dtype.kind in "iu" or (V.dtype.kind == "f" and V.itemsize > 8)
        per_entry = 1 if V.dtype == np.float64 else 8 + 1 + (V.itemsize + 8 if compared else 0)
        require_memory(per_entry * V.size, f"checking embeddings of shape {V.shape}")
        V = as_float64("embeddings", V, problems)
    if V is not None:
        finite_examples("embeddings", V, problems)
    if problems:
        # the helpers count the first axis as examples; here a row is a token of the vocabulary
        raise InputError([p.replace(" in example(s) ", " in row(s) ") for p in problems], what="invalid option")
    return V


def from_arrays(E, X, labels) -> Dataset:
    """Your contexts (T, n, d), queries (T, d) and integer labels (T,), one-hot over the classes present."""
    return as_dataset(E, X, labels=labels)


def load(name: str, **options) -> Dataset:
    """The dataset ``name`` (:data:`NAMES`) with its options (the keyword arguments of
    :func:`digits` or :func:`tokens`).

    Raises:
        InputError: an unknown name, an option that dataset does not take (named, with those it
            takes), or any problem of the dataset's own function.
    """
    if not isinstance(name, str) or name not in NAMES:
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}", what="invalid option")
    make = digits if name == "digits" else tokens
    takes = tuple(inspect.signature(make).parameters)
    unknown = [k for k in options if k not in takes]
    if unknown:
        raise InputError(f"dataset {name!r} takes no option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; its options are {', '.join(takes)}", what="invalid option")
    return make(**options)


def describe(data: Dataset, trials: int = 2000, seed: int = 0) -> str:
    """A1, A2, A3 and general position, as ``mha-construct assumptions`` prints them."""
    from .assumptions import assumptions_text, check_assumptions
    return assumptions_text(check_assumptions(data, trials=trials, seed=seed))


def _cls(d: int) -> np.ndarray:
    """The fixed CLS token: a deterministic unit vector with no zero entry."""
    v = np.cos(np.arange(1, d + 1) * 1.2345)
    return v / np.linalg.norm(v)
