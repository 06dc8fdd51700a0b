"""Datasets ``(E, X, Y)``: validation, files, and synthetic generators (docs/math.md §1).

Shapes: contexts ``E`` (T, n, d), queries ``X`` (T, d), labels ``Y`` (T, d_o); a 1-D ``Y`` means
``d_o = 1``. A dataset file is an ``.npz`` with exactly these three arrays.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .io import load_npz, npz_bytes
from .limits import (as_float64, finite_examples, flag, integer, locked, real_array, require_memory, restore_read_only,
                     same_values, shape_of)

SYNTHETIC_KINDS = ("independent", "shared", "general-position")


@dataclass(frozen=True, eq=False)
class Dataset:
    """A validated dataset: finite float64 arrays of consistent shapes.

    Made by :func:`as_dataset`, :func:`load_dataset` or :func:`synthetic`, which validate private,
    read-only copies: a later change of the caller's arrays cannot reach a validated dataset.

    Attributes:
        E: contexts, shape (T, n, d).
        X: queries, shape (T, d).
        Y: labels, shape (T, d_o).
        classes: for classification data given as integer labels, the class id of each column
            of ``Y`` (the ids present, ascending); None otherwise.

    Two datasets are equal (``==``) when their arrays have the same shapes and values and their
    ``classes`` agree; a dataset holds arrays, so it is not hashable.
    """

    E: np.ndarray
    X: np.ndarray
    Y: np.ndarray
    classes: tuple[int, ...] | None = None
    # Set by as_dataset alone (not an argument: dataclasses.replace makes a fresh, unchecked one).
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def T(self) -> int:
        return self.E.shape[0]

    @property
    def n(self) -> int:
        return self.E.shape[1]

    @property
    def d(self) -> int:
        return self.E.shape[2]

    @property
    def d_o(self) -> int:
        return self.Y.shape[1]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"E": self.E, "X": self.X, "Y": self.Y}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Dataset):
            return NotImplemented
        return (_ids(self.classes) == _ids(other.classes)
                and all(same_values(getattr(self, k), getattr(other, k)) for k in ("E", "X", "Y")))

    __hash__ = None  # type: ignore[assignment]

    def __setstate__(self, state: dict) -> None:
        if restore_read_only(self, state):      # validated when pickled: checked again (checked)
            try:
                fresh = checked(self)
            except Exception:                   # refused, with the reasons, at the engine's door
                return
            self.__dict__.update(E=fresh.E, X=fresh.X, Y=fresh.Y, classes=fresh.classes, validated=True)

    def to_bytes(self) -> bytes:
        """The dataset as a reproducible ``.npz`` file's bytes."""
        return npz_bytes(self.arrays())

    def save(self, path: str | os.PathLike) -> None:
        """Write the dataset to ``path`` (``.npz``, atomically: the file is whole or absent)."""
        from .io import write_atomic
        write_atomic(path, self.to_bytes())

    @staticmethod
    def load(path: str | os.PathLike) -> Dataset:
        """:func:`load_dataset`."""
        return load_dataset(path)

    def __repr__(self) -> str:
        shapes = {k: shape_of(getattr(self, k)) for k in ("E", "X", "Y")}
        if [None if s is None else len(s) for s in shapes.values()] != [3, 2, 2]:
            # made by hand and not validated (as_dataset checks): the arrays' shapes as they are
            return f"Dataset({', '.join(f'{k}: {s or type(getattr(self, k)).__name__}' for k, s in shapes.items())})"
        classes = "" if self.classes is None else f", classes={len(self.classes)}"
        return f"Dataset(T={self.T}, n={self.n}, d={self.d}, d_o={self.d_o}{classes})"


def _numeric(name: str, value, problems: list[str]) -> np.ndarray | None:
    arr = real_array(name, value, problems)
    return None if arr is None else as_float64(name, arr, problems)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A private, read-only (:func:`~construct.limits.locked`), C-ordered float64 copy."""
    return locked(np.asarray(a, dtype=np.float64))


def as_dataset(E, X, Y=None, *, labels=None) -> Dataset:
    """Validate ``(E, X, Y)`` and copy it into a :class:`Dataset` (read-only copies).

    Checks dtypes, dimensions, that every array has the same number of examples T ≥ 1, and that
    every value is finite; non-finite values are reported by example index. Instead of ``Y`` a
    classification dataset may give integer class ``labels`` (T,): they become one-hot targets
    over the classes present (:func:`as_one_hot`).

    Raises:
        InputError: every problem found, each naming the array and the examples.
    """
    classes = None
    problems: list[str] = []
    if (Y is None) == (labels is None):
        problems.append("give exactly one of Y (targets) and labels (integer classes)")
    elif labels is not None:
        Y, classes = as_one_hot(labels)
    E = _numeric("E", E, problems)
    X = _numeric("X", X, problems)
    Y = None if Y is None else _numeric("Y", Y, problems)
    if E is not None and E.ndim != 3:
        problems.append(f"E: expected shape (T, n, d), got {E.ndim}-D array of shape {E.shape}")
        E = None
    if X is not None and X.ndim != 2:
        problems.append(f"X: expected shape (T, d), got {X.ndim}-D array of shape {X.shape}")
        X = None
    if Y is not None:
        if Y.ndim == 1:
            Y = Y[:, None]
        elif Y.ndim != 2:
            problems.append(f"Y: expected shape (T, d_o) or (T,), got {Y.ndim}-D array of shape {Y.shape}")
            Y = None
    present = {k: v for k, v in (("E", E), ("X", X), ("Y", Y)) if v is not None}
    counts = {("labels" if k == "Y" and classes is not None else k): v.shape[0] for k, v in present.items()}
    if len(set(counts.values())) > 1:
        problems.append("number of examples differs: " + ", ".join(f"{k} has {c}" for k, c in counts.items()))
    if any(c == 0 for c in counts.values()):
        problems.append("the dataset has no examples (T = 0)")
    if E is not None and X is not None and E.shape[2] != X.shape[1]:
        problems.append(f"dimension differs: E has token dimension d = {E.shape[2]}, X has {X.shape[1]}")
    if E is not None and 0 in E.shape[1:]:
        problems.append(f"E: empty contexts or tokens, shape {E.shape}")
    if Y is not None and Y.shape[1] == 0:
        problems.append("Y: zero output columns")
    if not problems:                          # the copies below: named, not a MemoryError
        require_memory(8 * sum(v.size for v in present.values()), f"a dataset of T = {E.shape[0]} examples")
    for name, arr in present.items():
        finite_examples(name, arr, problems)
    if not problems and classes is not None and len(classes) > E.shape[2]:
        problems.append(f"labels: {len(classes)} classes need d_o = {len(classes)} outputs, but the model "
                        f"outputs at most d = {E.shape[2]} values (Theorem 1 needs d_o ≤ d); merge classes "
                        "or embed the tokens in more dimensions")
    if problems:
        raise InputError(problems, what="invalid dataset")
    return _sealed(Dataset(_frozen(E), _frozen(X), _frozen(Y), classes=classes))


def _sealed(data: Dataset) -> Dataset:
    """``data`` marked as validated (its arrays read-only copies the engine made)."""
    object.__setattr__(data, "validated", True)
    return data


def checked(data: Dataset) -> Dataset:
    """``data`` if :func:`as_dataset` made it, else a validated copy (a :class:`Dataset` built by
    hand is validated at the door of every public function).

    Raises:
        InputError: as :func:`as_dataset`.
    """
    if not isinstance(data, Dataset):
        raise InputError(f"expected a Dataset (construct.as_dataset), got {type(data).__name__}",
                         what="invalid dataset")
    if data.validated and not any(a.flags.writeable for a in (data.E, data.X, data.Y)):
        return data
    fresh = as_dataset(data.E, data.X, data.Y)
    classes = data.classes
    if classes is not None:
        if (not isinstance(classes, (tuple, list)) or len(classes) != fresh.d_o
                or not all(isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) for c in classes)):
            raise InputError(f"classes: expected None or one integer class id per column of Y ({fresh.d_o}), "
                             f"got {classes!r}"[:300], what="invalid dataset")
        classes = tuple(int(c) for c in classes)
    return _sealed(Dataset(fresh.E, fresh.X, fresh.Y, classes=classes))


def _ids(classes):
    """Class ids as the engine reads them (:func:`checked` takes a list or a tuple alike)."""
    return tuple(classes) if isinstance(classes, (list, tuple)) else classes


def as_one_hot(labels) -> tuple[np.ndarray, tuple[int, ...]]:
    """Integer class labels (T,) → one-hot targets (T, classes) over the classes present.

    Class ids may be any 64-bit integers (int64, or uint64 when none is negative: sparse, large,
    negative): column ``j`` stands for the ``j``-th smallest id present.

    Returns:
        The targets, and the class id of each column.

    Raises:
        InputError: labels that are not a 1-D integer array.
    """
    lab = np.asarray(labels)
    if lab.dtype == object and lab.ndim == 1 and lab.size and all(type(v) is int for v in lab):   # noqa: E721
        lo, hi = min(lab), max(lab)                  # Python integers (not bools): int64 or uint64 if they fit
        if -2 ** 63 <= lo and hi < 2 ** 63:
            lab = lab.astype(np.int64)
        elif 0 <= lo and hi < 2 ** 64:
            lab = lab.astype(np.uint64)
        else:
            raise InputError("labels: class ids must fit in 64-bit integers (int64, or uint64 when none is "
                             f"negative); these reach {max(lab, key=abs)}: map them to smaller ids",
                             what="invalid class labels")
    if lab.ndim != 1 or lab.dtype.kind not in "iu":
        raise InputError(f"labels: expected a 1-D integer array, got {lab.dtype} of shape {lab.shape}",
                         what="invalid class labels")
    classes, index = np.unique(lab, return_inverse=True)
    Y = np.zeros((lab.size, max(classes.size, 1)))
    Y[np.arange(lab.size), index] = 1.0
    return Y, tuple(int(c) for c in classes)


def load_dataset(path: str | os.PathLike) -> Dataset:
    """Read and validate a dataset ``.npz`` holding ``E``, ``X``, ``Y`` (never unpickles).

    A classification dataset may hold integer ``labels`` (T,) instead of ``Y``: they become
    one-hot targets, ``d_o`` = number of classes.

    Raises:
        InputError: unreadable file, missing or unexpected arrays (refused before inflating, see
            :func:`construct.io.load_npz`), or any problem of :func:`as_dataset`.
    """
    arrays = load_npz(path, what="dataset", allowed=lambda k: k in ("E", "X", "Y", "labels"),
                      other=("it looks like weights, not a dataset",
                             lambda k: k.startswith("W_") or k in ("skip", "bits", "prelayer", "prelayer_version")),
                      holds="a dataset holds E, X, and Y or labels")
    problems = [f"array {k!r} is missing from {str(path)!r}" for k in ("E", "X") if k not in arrays]
    if "Y" not in arrays and "labels" not in arrays:
        problems.append(f"array 'Y' is missing from {str(path)!r} (a classification dataset may hold integer 'labels' instead)")
    elif "Y" in arrays and "labels" in arrays:
        problems.append(f"{str(path)!r} holds both Y and labels; a dataset holds one of them")
    if problems:
        raise InputError(problems, what="invalid dataset")
    return as_dataset(arrays["E"], arrays["X"], arrays.get("Y"), labels=arrays.get("labels"))


def sinusoidal_encoding(n: int, d: int) -> np.ndarray:
    """Sinusoidal positional encoding (Vaswani et al. 2017), shape (n, d)."""
    pos = np.arange(n)[:, None]
    i = np.arange(d)[None, :]
    angle = pos / np.power(10000.0, (2 * (i // 2)) / d)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def synthetic(kind: str, *, T: int, n: int, d: int, d_o: int = 1, seed: int = 0,
              positional: bool = False) -> Dataset:
    """A random dataset of one of the paper's set-ups; labels are uniform on [0, 1).

    - ``independent``: a fresh uniform context per example, uniform queries (App. I.1's
      distribution: contexts not shared).
    - ``shared``: one uniform context for all examples, uniform queries (§5.2; the tight case of
      Prop. 2, ill-conditioned).
    - ``general-position``: every context token and query i.i.d. standard Gaussian, so all
      ``T(n+1)`` vectors are jointly in general position almost surely (centred, unlike uniform).

    ``positional`` adds the sinusoidal encoding to every context's tokens.

    Raises:
        InputError: unknown kind, sizes that are not positive integers, a negative seed, or a
            problem larger than the memory available.
    """
    T, n, d, d_o = (integer(v, name) for name, v in
                    (("examples T", T), ("context n", n), ("dim d", d), ("out-dim d_o", d_o)))
    seed, positional = integer(seed, "seed", 0), flag(positional, "positional")
    if kind not in SYNTHETIC_KINDS:
        raise InputError(f"unknown synthetic kind {kind!r}; choose one of {', '.join(SYNTHETIC_KINDS)}",
                         what="invalid synthetic problem")
    require_memory(8 * 3 * T * (n * d + d + d_o), f"a synthetic problem of T = {T} examples")
    rng = np.random.default_rng(seed)
    if kind == "independent":
        E = rng.random((T, n, d))
        X = rng.random((T, d))
    elif kind == "shared":
        E = np.broadcast_to(rng.random((n, d)), (T, n, d)).copy()
        X = rng.random((T, d))
    else:
        E = rng.standard_normal((T, n, d))
        X = rng.standard_normal((T, d))
    if positional:
        E = E + sinusoidal_encoding(n, d)
    Y = rng.random((T, d_o))
    return as_dataset(E, X, Y)
