"""The single-layer multi-head attention model of docs/math.md §1: forward pass, features ``Z``, weights.

For head ``h`` and one example: ``s_h = softmax(E W_K[h] W_Q[h]^T x)``, ``z_h = E^T s_h``; then
``f = W_D^T (W_O^T [W_V[1]^T z_1; …; W_V[H]^T z_H])``, plus ``x`` inside ``W_D^T(·)`` with the skip
connection (App. C). No ``1/sqrt(d_h)`` factor: it is absorbed into ``W_K``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from . import precision
from .arith import FLOAT64, Arithmetic, for_bits
from .arith.mp import decimal_strings, from_decimal_strings
from .arith.threads import row_blocks
from .errors import InputError, numpy_error_defaults
from .io import load_npz, npz_bytes
from .limits import (as_float64, finite_examples, flag, index_list, integer, locked, real_array, require_memory,
                     restore_read_only, same_values, shape_of)


def capacity(H: int, n: int, d_h: int) -> int:
    """Theorem 1's number of examples ``H(k − 1) + 1`` with ``k = min(n, d_h)``.

    Raises:
        InputError: ``H``, ``n`` or ``d_h`` not an integer ≥ 1.
    """
    H, n, d_h = integer(H, "H"), integer(n, "n"), integer(d_h, "d_h")
    return H * (min(n, d_h) - 1) + 1


def heads_needed(T: int, k: int) -> int | None:
    """Fewest heads with ``H(k − 1) + 1 ≥ T``; None when no number suffices (``k = 1 < T``).

    Raises:
        InputError: ``T`` or ``k`` not an integer ≥ 1.
    """
    T, k = integer(T, "T"), integer(k, "k")
    if T <= 1:
        return 1
    if k < 2:
        return None
    return -(-(T - 1) // (k - 1))


def param_count(H: int, d: int, d_h: int, d_v: int, d_o: int) -> int:
    """Number of parameters: ``H·d·(2·d_h + d_v) + H·d_v·d + d·d_o`` (each size an integer ≥ 1)."""
    H, d, d_h, d_v, d_o = (integer(v, name) for v, name in ((H, "H"), (d, "d"), (d_h, "d_h"), (d_v, "d_v"),
                                                             (d_o, "d_o")))
    return H * d * (2 * d_h + d_v) + H * d_v * d + d * d_o


@dataclass(frozen=True, eq=False)
class Weights:
    """Weights of the model.

    Attributes:
        W_K, W_Q: key and query maps, shape (H, d, d_h).
        W_V: value maps, shape (H, d, d_v).
        W_O: output map, shape (H·d_v, d).
        W_D: readout, shape (d, d_o).
        skip: whether the output adds the query (App. C).
        bits: None for float64 weights; otherwise the arrays hold mpmath numbers of this many
            bits, and the file keeps them exactly (see :meth:`arrays`).
        prelayer: None, or ``"mean-shift"``: Proposition 4's first layer runs before this one
            (:func:`mean_shift`), and these weights act on its outputs.

    Two weights are equal (``==``) when their matrices have the same shapes and values and
    ``skip``, ``bits`` and ``prelayer`` agree; weights hold arrays, so they are not hashable.
    """

    W_K: np.ndarray
    W_Q: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray
    W_D: np.ndarray
    skip: bool = False
    bits: int | None = None
    prelayer: str | None = None
    # Set by sealed alone (not an argument: dataclasses.replace makes fresh, unchecked weights).
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def H(self) -> int:
        return self.W_K.shape[0]

    @property
    def d(self) -> int:
        return self.W_K.shape[1]

    @property
    def d_h(self) -> int:
        return self.W_K.shape[2]

    @property
    def d_v(self) -> int:
        return self.W_V.shape[2]

    @property
    def d_o(self) -> int:
        return self.W_D.shape[1]

    @property
    def parameters(self) -> int:
        return param_count(self.H, self.d, self.d_h, self.d_v, self.d_o)

    def arrays(self) -> dict[str, np.ndarray]:
        """The file's arrays. High-precision weights add, for each matrix, ``<name>_decimal``: the
        exact values as decimal strings (enough digits to round-trip at ``bits``), and ``bits``;
        the float64 arrays are their nearest float64 values, for tools that read only those.
        With a pre-layer, ``prelayer`` (its name) and ``prelayer_version`` (:data:`PRELAYER_VERSION`)."""
        out = {name: np.array(FLOAT64.to_host(getattr(self, name))) for name in _MATRICES}   # copies
        out["skip"] = np.asarray(bool(self.skip))
        if self.prelayer is not None:
            out["prelayer"] = np.asarray(self.prelayer)
            out["prelayer_version"] = np.asarray(PRELAYER_VERSION)
        if self.bits is not None:
            for name in _MATRICES:
                out[f"{name}_decimal"] = decimal_strings(getattr(self, name), self.bits)
            out["bits"] = np.asarray(self.bits)
        return out

    def map(self, fn, bits: int | None = None) -> Weights:
        """The same model with ``fn`` applied to each matrix: the weights in another arithmetic
        (float32, ``bits``-bit mpmath numbers, intervals)."""
        return Weights(**{name: fn(getattr(self, name)) for name in _MATRICES}, skip=self.skip, bits=bits,
                       prelayer=self.prelayer)

    def to_bytes(self) -> bytes:
        """The weights as a reproducible ``.npz`` file's bytes.

        Raises:
            InputError: a matrix holds NaN or inf (a diverged training run's): load_weights
                would refuse the file.
        """
        bad = [name for name in _MATRICES
               if np.asarray(getattr(self, name)).dtype != object and not np.isfinite(getattr(self, name)).all()]
        if bad:
            raise InputError(f"{', '.join(bad)}: non-finite values (NaN or inf); load_weights would refuse the "
                             "file, so it is not written", what="invalid weights")
        return npz_bytes(self.arrays())

    def save(self, path: str | os.PathLike) -> None:
        """Write the weights to ``path`` (``.npz``, atomically: the file is whole or absent)."""
        from .io import write_atomic
        write_atomic(path, self.to_bytes())

    @staticmethod
    def load(path: str | os.PathLike) -> Weights:
        """:func:`load_weights`."""
        return load_weights(path)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Weights):
            return NotImplemented
        return ((self.skip, self.bits, self.prelayer) == (other.skip, other.bits, other.prelayer)
                and all(same_values(getattr(self, name), getattr(other, name)) for name in _MATRICES))

    __hash__ = None  # type: ignore[assignment]

    def __setstate__(self, state: dict) -> None:
        if restore_read_only(self, state):      # validated when pickled: checked again
            try:
                fresh = _checked_again(self)
            except Exception:                   # refused, with the reasons, at the engine's door
                return
            if fresh == self:
                self.__dict__.update(fresh.__dict__)

    def __repr__(self) -> str:
        shapes = {name: shape_of(getattr(self, name)) for name in _MATRICES}
        if any(s is None or len(s) != 2 + (name in ("W_K", "W_Q", "W_V")) for name, s in shapes.items()):
            # made by hand and not validated (as_weights checks): the arrays' shapes as they are
            return f"Weights({', '.join(f'{name}: {s or type(getattr(self, name)).__name__}' for name, s in shapes.items())})"
        arithmetic = "float64" if self.bits is None else f"{self.bits} bits"
        layer = "" if self.prelayer is None else f", prelayer={self.prelayer!r}"
        return (f"Weights(H={self.H}, d={self.d}, d_h={self.d_h}, d_v={self.d_v}, d_o={self.d_o}, "
                f"skip={self.skip}, {arithmetic}{layer})")


_SHAPES = {"W_K": "(H, d, d_h)", "W_Q": "(H, d, d_h)", "W_V": "(H, d, d_v)", "W_O": "(H·d_v, d)",
           "W_D": "(d, d_o)"}
_MATRICES = tuple(_SHAPES)
# The five matrices' names, in the file's order: for code that handles the arrays one by one.
MATRICES = _MATRICES

# The layers that may run before the attention layer (Proposition 4), and the version of their
# description in the weights file: readers refuse a version they do not know.
PRELAYERS = ("mean-shift",)
PRELAYER_VERSION = 1


def sealed(W_K, W_Q, W_V, W_O, W_D, skip: bool, bits: int | None, prelayer: str | None = None) -> Weights:
    """:class:`Weights` over read-only arrays, marked as validated: for arrays the engine made or
    copied itself (no caller holds a reference that could change them)."""
    arrays = {name: locked(a) for name, a in (("W_K", W_K), ("W_Q", W_Q), ("W_V", W_V), ("W_O", W_O), ("W_D", W_D))}
    weights = Weights(**arrays, skip=bool(skip), bits=bits, prelayer=prelayer)
    object.__setattr__(weights, "validated", True)
    return weights


def not_weights(given, lead: str = "") -> InputError:
    """The error for ``given`` where :class:`Weights` are expected; a build's result (or anything
    holding its weights as ``.weights``) is pointed to them."""
    hint = "; pass its .weights" if isinstance(getattr(given, "weights", None), Weights) else ""
    return InputError(f"{lead}expected Weights (construct.as_weights), got {type(given).__name__}{hint}",
                      what="invalid weights")


def checked_weights(weights: Weights) -> Weights:
    """``weights`` if :func:`sealed` made them, else a validated copy (:func:`as_weights`).

    Raises:
        InputError: as :func:`as_weights`; high-precision weights made by hand.
    """
    if not isinstance(weights, Weights):
        raise not_weights(weights)
    arrays = [getattr(weights, name) for name in _MATRICES]
    if weights.validated and not any(np.asarray(a).flags.writeable for a in arrays):
        return weights
    if weights.bits is not None:
        raise InputError("high-precision weights come from build or load_weights; they cannot be checked "
                         "when made by hand", what="invalid weights")
    return as_weights(*arrays, skip=weights.skip, prelayer=weights.prelayer)


def _checked_again(weights: Weights) -> Weights:
    """Validated weights of the values of ``weights`` (not validated): :func:`checked_weights`'s
    copy, or for high-precision weights those of their file's arrays, read back as
    :func:`load_weights` reads them."""
    if weights.bits is None:
        return checked_weights(weights)
    arrays = weights.arrays()
    rounded = as_weights(*(arrays[name] for name in _MATRICES), skip=weights.skip, prelayer=weights.prelayer)
    return _exact_weights(arrays, rounded, "the copied weights")


def as_weights(W_K, W_Q, W_V, W_O, W_D, skip=False, prelayer=None) -> Weights:
    """Validate shapes and values and build :class:`Weights` from read-only copies.

    ``prelayer``: None (or ``"none"``, as :func:`construct.build` spells it) or ``"mean-shift"``.

    Raises:
        InputError: every wrong dimension, inconsistent shape or non-finite array, named; an
            unknown pre-layer.
    """
    if isinstance(prelayer, str) and prelayer == "none":
        prelayer = None
    given = {"W_K": W_K, "W_Q": W_Q, "W_V": W_V, "W_O": W_O, "W_D": W_D}
    problems, arr = [], {}
    for name, value in given.items():
        a = real_array(name, value, problems)
        a = None if a is None else as_float64(name, a, problems)
        if a is None:
            continue
        a = np.array(a, dtype=np.float64, order="C", copy=True)
        want = 3 if name in ("W_K", "W_Q", "W_V") else 2
        if a.ndim != want:
            problems.append(f"{name}: expected shape {_SHAPES[name]}, got shape {a.shape}")
            continue
        if not np.isfinite(a).all():
            problems.append(f"{name}: non-finite values (NaN or inf)")
        arr[name] = a
    if len(arr) == 5:
        H, d, d_h = arr["W_K"].shape
        d_v = arr["W_V"].shape[2]
        if arr["W_Q"].shape != (H, d, d_h):
            problems.append(f"W_Q: shape {arr['W_Q'].shape} differs from W_K's {arr['W_K'].shape}")
        if arr["W_V"].shape[:2] != (H, d):
            problems.append(f"W_V: shape {arr['W_V'].shape} does not start with (H, d) = {(H, d)}")
        if arr["W_O"].shape != (H * d_v, d):
            problems.append(f"W_O: expected shape (H·d_v, d) = {(H * d_v, d)}, got {arr['W_O'].shape}")
        if arr["W_D"].shape[0] != d:
            problems.append(f"W_D: expected {d} rows (d), got shape {arr['W_D'].shape}")
        sizes = (("W_K", "H", H, "head"), ("W_K", "d", d, "token dimension"), ("W_K", "d_h", d_h, "key dimension"),
                 ("W_V", "d_v", d_v, "value dimension"), ("W_D", "d_o", arr["W_D"].shape[1], "output"))
        problems += [f"{name}: {label} = 0 (shape {arr[name].shape}): a model needs at least one {what}"
                     for name, label, size, what in sizes if size == 0]
    skip_arr = np.asarray(skip)
    if skip_arr.shape != () or skip_arr.dtype.kind not in "biu" or (skip_arr.dtype.kind != "b"
                                                                      and int(skip_arr) not in (0, 1)):
        problems.append(f"skip: expected a boolean scalar (or 0 or 1), got {skip_arr.dtype} array of shape "
                        f"{skip_arr.shape}" + (f" holding {skip_arr.item()!r}" if skip_arr.shape == () else ""))
    if prelayer is not None and prelayer not in PRELAYERS:
        problems.append(f"prelayer: unknown layer {prelayer!r}; known: {', '.join(PRELAYERS)}")
    if problems:
        raise InputError(problems, what="invalid weights")
    return sealed(**arr, skip=bool(skip_arr), bits=None, prelayer=prelayer)


def load_weights(path: str | os.PathLike) -> Weights:
    """Read and validate a weights ``.npz`` (never unpickles).

    Raises:
        InputError: unreadable file, missing or unexpected arrays (refused before inflating, see
            :func:`construct.io.load_npz`), precision beyond :data:`construct.precision.MAX_BITS`,
            or a problem of :func:`as_weights`.
    """
    names = ("W_K", "W_Q", "W_V", "W_O", "W_D", "skip")
    extra = {"bits", "prelayer", "prelayer_version", *(f"{m}_decimal" for m in _MATRICES)}
    arrays = load_npz(path, what="weights", allowed=lambda k: k in names or k in extra,
                      other=("it looks like a dataset (E, X, Y), not weights",
                             lambda k: k in ("E", "X", "Y", "labels")),
                      holds="a weights file holds W_K, W_Q, W_V, W_O, W_D, skip, and where they apply bits, "
                            "prelayer, prelayer_version and the W_*_decimal arrays")
    missing = [k for k in names if k not in arrays]
    if missing:
        raise InputError([f"array {k!r} is missing from {str(path)!r}" for k in missing], what="invalid weights")
    weights = as_weights(*(arrays[k] for k in names), prelayer=_prelayer_of(arrays, path))
    if "bits" not in arrays:
        decimals = sorted(k for k in arrays if k.endswith("_decimal"))
        if decimals:                               # high-precision weights that lost their bits
            raise InputError(f"bits: missing from {str(path)!r}, though it holds {', '.join(decimals)}: "
                             "high-precision weights need both (without bits the decimals would be ignored)",
                             what="invalid high-precision weights")
        return weights
    return _exact_weights(arrays, weights, path)


def _prelayer_of(arrays: dict, path) -> str | None:
    """The pre-layer a weights file names (None without one); its version must be one we know."""
    if "prelayer" not in arrays and "prelayer_version" not in arrays:
        return None
    name, version = arrays.get("prelayer"), arrays.get("prelayer_version")
    problems = []
    if name is None:
        problems.append("prelayer: missing (the file has prelayer_version)")
    elif name.shape != () or name.dtype.kind != "U":
        problems.append(f"prelayer: expected one name (a string), got {name!r}")
    elif str(name) not in PRELAYERS:
        problems.append(f"prelayer: unknown layer {str(name)!r}; known: {', '.join(PRELAYERS)}")
    if version is None:
        problems.append("prelayer_version: missing (the file names a prelayer)")
    elif version.shape != () or version.dtype.kind not in "iu":
        problems.append(f"prelayer_version: expected an integer, got {version!r}")
    elif int(version) != PRELAYER_VERSION:
        problems.append(f"prelayer_version: {int(version)} is not {PRELAYER_VERSION}, the version this "
                        "release reads (a newer mha-construct wrote the file?)")
    if problems:
        raise InputError([f"{p} in {str(path)!r}" for p in problems], what="invalid weights")
    return str(name)


def _exact_weights(arrays: dict, rounded: Weights, path) -> Weights:
    """High-precision weights from their decimal arrays (validated against the float64 ones)."""
    problems = []
    bits_arr = arrays["bits"]
    if (bits_arr.shape != () or bits_arr.dtype.kind not in "iu"
            or not precision.MIN_FILE_BITS <= int(bits_arr) <= precision.MAX_BITS):
        raise InputError(f"bits: expected an integer from {precision.MIN_FILE_BITS} to {precision.MAX_BITS}, "
                         f"got {bits_arr!r}", what="invalid weights")
    bits = int(bits_arr)
    exact = {}
    for name in _MATRICES:
        text = arrays.get(f"{name}_decimal")
        if text is None or text.dtype.kind != "U" or text.shape != getattr(rounded, name).shape:
            problems.append(f"{name}_decimal: missing, not strings, or not of {name}'s shape in {str(path)!r}")
            continue
        odd = [i for i in np.ndindex(text.shape) if not _DECIMAL.fullmatch(str(text[i]))]
        if odd:
            problems.append(f"{name}_decimal{_entry(odd[0])}: {_clipped(text[odd[0]])} is not a decimal number "
                            f"(digits, a point, an exponent: {len(odd)} such entries)")
            continue
        try:
            values = from_decimal_strings(text, bits)
        except ValueError:
            problems.append(f"{name}_decimal: not decimal numbers")
            continue
        with np.errstate(over="ignore"):                 # beyond float64's range: not its rounding
            differ = np.argwhere(values.astype(np.float64) != getattr(rounded, name))
        if differ.size:
            at = tuple(int(k) for k in differ[0])
            problems.append(f"{name}{_entry(at)}: {float(getattr(rounded, name)[at])!r} is not the rounding of "
                            f"{name}_decimal{_entry(at)} = {_clipped(text[at])} ({len(differ)} such entries)")
        exact[name] = values
    if problems:
        raise InputError(problems, what="invalid high-precision weights")
    return sealed(**exact, skip=rounded.skip, bits=bits, prelayer=rounded.prelayer)


# A decimal number as the weights' files write them: an optional sign, digits with an optional
# point, an optional exponent (no spaces, underscores, nan or inf, which mpmath would also read).
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def _entry(index: tuple) -> str:
    """``[i, j, …]``, an entry's index as the messages write it."""
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def _clipped(text) -> str:
    """A string from a file, quoted, cut to 40 characters."""
    text = str(text)
    return repr(text if len(text) <= 40 else text[:40] + "…")


def check_compatible(weights: Weights, d: int, d_o: int) -> None:
    """Raise :class:`InputError` if the weights cannot be applied to data of dimensions ``d``, ``d_o``."""
    problems = []
    if weights.d != d:
        problems.append(f"weights expect token dimension d = {weights.d}, the data has d = {d}")
    if weights.d_o != d_o:
        problems.append(f"weights produce d_o = {weights.d_o} outputs, the labels Y have {d_o} columns")
    if problems:
        raise InputError(problems, what="weights and data do not match")


# The forward pass, written once for every arithmetic: the construction computes its features
# with head_features, verify and teach with feature_matrix, certificates with the same functions
# in interval arithmetic (construct.arith.Interval). In float64 on the CPU, feature_matrix takes
# the heads in groups (_group_features): the same order of operations, rounded by BLAS's products.

def softmax(logits, ar: Arithmetic = FLOAT64):
    """Softmax over the last axis, shifted (by the row maximum) so that no exponential overflows."""
    shifted = ar.exp(logits - ar.softmax_shift(logits))
    return shifted / ar.xp.sum(shifted, axis=-1, keepdims=True)


def logit_term_sizes(E: np.ndarray, X: np.ndarray, W_K: np.ndarray, W_Q: np.ndarray) -> np.ndarray:
    """``|e_i|^T |W_K| |W_Q|^T |x|`` for every token of every example (float64, shape (T, n)): the
    sum of the magnitudes of the terms of each logit ``e_i^T W_K W_Q^T x``, which its rounding
    scales with (in any arithmetic, in any order). Overflow is the caller's to judge."""
    return np.einsum("tid,td->ti", np.abs(E), (np.abs(X) @ np.abs(W_Q)) @ np.abs(W_K).T)


def head_logits(E, X, W_K, W_Q, ar: Arithmetic = FLOAT64):
    """Logits ``E W_K W_Q^T x`` of one head for every example, shape (T, n).

    ``W_K`` and ``W_Q`` have shape (d, d_h); computed as ``E (W_K (W_Q^T x))`` so the cost is
    ``O(T·d·(d_h + n))``.
    """
    return ar.token_dot(E, (X @ W_Q) @ W_K.T)


def head_attention(E, X, W_K, W_Q, ar: Arithmetic = FLOAT64):
    """Attention ``s`` of one head over each context, shape (T, n); rows lie in the simplex."""
    return softmax(head_logits(E, X, W_K, W_Q, ar), ar)


def head_features(E, X, W_K, W_Q, ar: Arithmetic = FLOAT64):
    """Features ``z = E^T s`` of one head for every example, shape (T, d)."""
    return ar.token_mix(E, head_attention(E, X, W_K, W_Q, ar))


@numpy_error_defaults
def feature_matrix(E, X, weights: Weights, ar: Arithmetic | None = None, *, layered: bool | None = None):
    """The feature matrix ``Z`` (T, H·d): row t is ``[z_1; …; z_H]`` of example t.

    ``layered``: for weights with a pre-layer, which inputs ``E`` and ``X`` are: ``False``, the
    data (the layer is applied first, as :func:`forward` does); ``True``, what the attention layer
    reads already (``layer_inputs(weights, E, X)``). Without it such weights raise
    :class:`InputError` (the two readings give different ``Z``). Weights without a pre-layer take
    either.

    ``ar``: the arithmetic to evaluate in; by default the weights' own (float64, or mpmath at
    ``weights.bits``), and then ``E`` and ``X`` must be in it too.

    Raises:
        InputError: as :func:`forward`: inputs of the wrong shapes or not finite real numbers;
            with float64 weights and ``ar`` None, float64 overflows on some examples (their
            rows of ``Z`` would be NaN).
    """
    if ar is None:                  # the caller's weights (the engine's come with their arithmetic)
        weights = checked_weights(weights)
    public = ar is None and weights.bits is None if isinstance(weights, Weights) else False
    E, X = _public_inputs(E, X, weights, ar)
    layered = None if layered is None else flag(layered, "layered")
    if weights.prelayer is not None and layered is None:
        raise InputError(f"these weights have a pre-layer ({weights.prelayer}): pass layered=False to apply it "
                         "to E and X first (as forward does), or layered=True where E and X are its outputs "
                         "already (layer_inputs(weights, E, X))", what="invalid arguments")
    if public:                  # float64 in the weights' own arithmetic: overflow is judged, not warned
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            Z = _features(E, X, weights, FLOAT64, layered)
        _refuse_overflow(~np.isfinite(Z).all(axis=1))
        return Z
    return _features(E, X, weights, for_bits(weights.bits) if ar is None else ar, layered)


def _refuse_overflow(overflowed: np.ndarray) -> None:
    """Refuse the examples where float64 overflowed in the model's evaluation (``overflowed``,
    one flag per example): the exact model is finite there, float64 cannot say what it is."""
    if overflowed.any():
        raise InputError(f"float64 overflows (the logits or the outputs pass about 1.8e308) in example(s) "
                         f"{index_list(np.flatnonzero(overflowed))}: the inputs there are far larger "
                         "than those the weights were built for; the model is finite, but float64 cannot "
                         "evaluate it (weights built with --precision can)", what="invalid inputs")


def _features(E, X, weights: Weights, ar: Arithmetic, layered: bool | None):
    """:func:`feature_matrix` on inputs already checked, in ``ar``."""
    T, d = X.shape
    with ar.working():
        if not layered:
            E, X = layer_inputs(weights, E, X, ar)
        Z = ar.zeros((T, weights.H * d))
        groups = _head_groups(weights, ar, T) if ar.batches_heads else None

        def part(lo: int, hi: int) -> None:                    # rows lo..hi−1, every head
            for a, b in row_blocks(lo, hi, ar.cache_rows):
                if groups is not None:
                    for h0, h1, queries, keys_T in groups:
                        Z[a:b, h0 * d:h1 * d] = _group_features(E[a:b, ...], X[a:b, ...], queries, keys_T, ar)
                    continue
                for h in range(weights.H):
                    Z[a:b, h * d:(h + 1) * d] = head_features(E[a:b, ...], X[a:b, ...], weights.W_K[h, ...],
                                                              weights.W_Q[h, ...], ar)
        with ar.session():          # BLAS on one thread, whatever it had: a group's products round
            ar.rows(part, T)        # by how BLAS splits them, and the bits must not depend on it
    return Z


# Entries of N x (rows × heads × d) per group of heads in the batched forward pass: 1 MB (8 heads
# of d = 64 for 256 rows). From 1 to 8 MB the pass took the same time at H = 64 and 256 (n = 32,
# d = 64); each thread holds a few arrays of this size.
_GROUP_ENTRIES = 1 << 17


def head_groups(H: int, d: int, ar: Arithmetic, T: int, entries: int = _GROUP_ENTRIES) -> list[tuple[int, int]]:
    """Consecutive heads ``(h0, h1)`` covering ``0..H−1``, as many per group as keep ``N x`` of
    a block of rows (rows × heads × d) near ``entries`` (:data:`_GROUP_ENTRIES`): a block is
    :attr:`~construct.arith.Arithmetic.cache_rows` examples, or all ``T`` where the arithmetic
    takes them at once (then one head per group from ``T·d`` entries on, as head by head)."""
    size = max(1, entries // (max(1, ar.cache_rows or T) * d))
    return [(h0, min(H, h0 + size)) for h0 in range(0, H, size)]


def _head_groups(weights: Weights, ar: Arithmetic, T: int) -> list:
    """:func:`head_groups` with each group's queries side by side, ``[W_Q,h0 … W_Q,h1−1]``
    (d, (h1 − h0)·d_h), and its keys ``W_K,h^T`` stacked ((h1 − h0), d_h, d), for
    :func:`_group_features`."""
    xp = ar.xp
    return [(h0, h1, xp.concat([weights.W_Q[h, ...] for h in range(h0, h1)], axis=1),
             xp.matrix_transpose(weights.W_K[h0:h1, ...])) for h0, h1 in head_groups(weights.H, weights.d, ar, T)]


def _group_features(E, X, queries, keys_T, ar: Arithmetic):
    """:func:`head_features` of a group of heads (:func:`_head_groups`) side by side, shape
    (T, heads·d), in the same order of operations (``E (W_K (W_Q^T x))``, softmax, ``E^T s``) by
    products over the group at once: each context is read once per group, where head by head it
    is read twice per head. Each product rounds as BLAS's matrix kernels do, not as
    :meth:`~construct.arith.Arithmetic.token_dot`'s sums, so the last bits may differ."""
    xp = ar.xp
    m, n, d = E.shape
    heads, d_h = keys_T.shape[0], keys_T.shape[1]
    q = xp.permute_dims(xp.reshape(X @ queries, (m, heads, d_h)), (1, 0, 2))            # W_Q^T x
    w = xp.permute_dims(xp.matmul(q, keys_T), (1, 0, 2))                               # W_K W_Q^T x
    s = softmax(xp.matmul(w, xp.matrix_transpose(E)), ar)                              # (T, heads, n)
    return xp.reshape(xp.matmul(s, E), (m, heads * d))


def output_from_features(Z, X, weights: Weights, ar: Arithmetic | None = None):
    """The model's output from its features: ``W_D^T (W_O^T [W_V^T z] (+ x))``, shape (T, d_o)."""
    ar = for_bits(weights.bits) if ar is None else ar
    with ar.working():
        o = ar.head_values(Z, weights.W_V) @ weights.W_O
        if weights.skip:
            o = o + X
        return o @ weights.W_D


@numpy_error_defaults
def forward(E, X, weights: Weights, ar: Arithmetic | None = None):
    """The model ``f(E, x; θ)`` for every example, shape (T, d_o), its pre-layer included.

    ``E`` and ``X``: arrays or nested lists of finite real numbers within float64's range
    (evaluated in the weights' arithmetic: float64, or their own precision); with high-precision
    weights also object arrays of mpmath numbers. ``T = 0`` gives an empty (0, d_o) result.

    Raises:
        InputError: the weights are not valid :class:`Weights` (made by hand: as :func:`as_weights`
            checks them); ``E`` (T, n, d) and ``X`` (T, d) do not have those shapes, with the weights'
            ``d``, or hold something else than finite real numbers (named by example); or, with
            float64 weights, float64 overflows on some examples (inputs far larger than those the
            weights were built for): the exact model is finite there, float64 cannot say what it is.
    """
    misplaced = [name for name, a in (("E", E), ("X", X)) if isinstance(a, Weights)]
    if misplaced:
        raise InputError(f"{' and '.join(misplaced)}: got the weights; the call is forward(E, X, weights)",
                         what="invalid arguments")
    if ar is None:                  # weights made by hand (construct.Weights) are checked as verify does
        weights = checked_weights(weights)
    high = isinstance(weights, Weights) and weights.bits is not None
    E, X = _public_inputs(E, X, weights, ar)
    if ar is not None:
        return forward_unchecked(E, X, weights, ar)
    if E.shape[0] == 0:
        return np.zeros((0, weights.d_o), dtype=object if high else np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):   # judged below, not warned
        out = forward_unchecked(E, X, weights)
    if not high:
        _refuse_overflow(~np.isfinite(out).all(axis=1))
    return out


def forward_unchecked(E, X, weights: Weights, ar: Arithmetic | None = None):
    """:func:`forward` on inputs already checked, whatever their values: the engine's float32
    checks (inputs and weights rounded to float32, then evaluated), where data near float64's
    top become infinite and that is the answer."""
    ar = for_bits(weights.bits) if ar is None else ar
    E, X = layer_inputs(weights, E, X, ar)
    return output_from_features(feature_matrix(E, X, weights, ar, layered=True), X, weights, ar)


def _public_inputs(E, X, weights: Weights, ar: Arithmetic | None):
    """``E`` and ``X`` checked for :func:`forward` and :func:`feature_matrix`: with ``ar`` None
    (the weights' own arithmetic), finite real numbers (:func:`_real_inputs`; with high-precision
    weights also mpmath numbers); with ``ar`` given, the caller's arrays in it, as they are."""
    if ar is not None and not isinstance(ar, Arithmetic):
        raise InputError(f"ar: expected an arithmetic (construct.arith: FLOAT64, Mpmath(bits), …) or None, "
                         f"got {type(ar).__name__}", what="invalid arguments")
    high = isinstance(weights, Weights) and weights.bits is not None
    if ar is None and high and any(getattr(a, "dtype", None) == object for a in (E, X)):
        E, X = _mp_inputs(E, X)               # high-precision weights also take mpmath numbers
    elif ar is None:
        E, X = _real_inputs(E, X)
    _check_inputs(E, X, weights)
    if ar is None:                          # Z and the outputs: named, not a MemoryError
        require_memory(8 * E.shape[0] * (weights.H * weights.d + weights.d_o),
                       f"the model on T = {E.shape[0]} examples (H = {weights.H})")
    return E, X


def _mp_inputs(E, X) -> tuple[np.ndarray, np.ndarray]:
    """``E`` and ``X`` as object arrays of finite real numbers (mpmath's ``mpf``, Python or NumPy
    integers and floats, not booleans), or :class:`InputError` naming the array and the examples."""
    import mpmath
    problems: list[str] = []
    arrays = []
    for name, value in (("E", E), ("X", X)):
        a = np.asarray(value, dtype=object)

        def bad(v) -> bool:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (mpmath.mpf, int, float, np.integer,
                                                                     np.floating)):
                return True
            return not mpmath.isfinite(mpmath.mpf(v)) if not isinstance(v, (int, np.integer)) else False
        flags = np.frompyfunc(bad, 1, 1)(a).astype(bool) if a.size else np.zeros(a.shape, dtype=bool)
        if a.ndim and flags.any():
            rows = np.flatnonzero(flags.reshape(a.shape[0], -1).any(axis=1))
            problems.append(f"{name}: not a finite real number (an mpf, int or float) in example(s) "
                            f"{index_list(rows)}")
        arrays.append(a)
    if problems:
        raise InputError(problems, what="invalid inputs")
    return arrays[0], arrays[1]


def _real_inputs(E, X) -> tuple[np.ndarray, np.ndarray]:
    """``E`` and ``X`` as NumPy arrays of finite real numbers (floats keep their dtype, integers
    become float64), or :class:`InputError` naming the array and the examples."""
    problems: list[str] = []
    arrays = []
    for name, value in (("E", E), ("X", X)):
        a = real_array(name, value, problems)
        if a is not None and (a.dtype.kind != "f" or a.dtype.itemsize > 8):    # integers, long doubles
            a = as_float64(name, a, problems)
        if a is not None and a.ndim >= 1:
            finite_examples(name, a, problems)
        arrays.append(a)
    if problems:
        raise InputError(problems, what="invalid inputs")
    return arrays[0], arrays[1]


def _check_inputs(E, X, weights: Weights) -> None:
    """Raise :class:`InputError` unless ``weights`` are :class:`Weights`, ``E`` is (T, n, d) and
    ``X`` (T, d) with the weights' ``d``, and ``n ≥ 1``."""
    if not isinstance(weights, Weights):
        raise not_weights(weights, "weights: ")
    d = weights.d
    problems = input_shape_problems(E, X, d)
    if problems:
        raise InputError(problems, what=f"inputs do not fit the weights (d = {d})")


def input_shape_problems(E, X, d: int) -> list[str]:
    """What keeps ``E`` and ``X`` from being (T, n, d) and (T, d) inputs with ``n ≥ 1``, one line
    per array (their shapes only)."""
    E_shape, X_shape = tuple(getattr(E, "shape", ())), tuple(getattr(X, "shape", ()))
    problems = []
    if len(E_shape) != 3 or E_shape[1:] == () or E_shape[1] < 1 or E_shape[2] != d:
        problems.append(f"E: expected shape (T, n, {d}) with n ≥ 1, got {E_shape}")
    if len(X_shape) != 2 or X_shape[1] != d:
        problems.append(f"X: expected shape (T, {d}), got {X_shape}")
    if not problems and E_shape[0] != X_shape[0]:
        problems.append(f"E holds {E_shape[0]} contexts but X {X_shape[0]} queries")
    return problems


def mean_shift(E, X, ar: Arithmetic = FLOAT64):
    """Proposition 4's layer: one head with skip connection, ``W_K W_Q^T = 0`` and identity value
    and output maps, applied to every token of each example (context tokens and query).

    Its logits are all zero, so its attention is uniform over the context, whatever token asks:
    each token ``v`` becomes ``v + E^T s`` with ``s = softmax(0) = 1/n``, the context's mean. The
    head's output is computed once per example (with :func:`head_features`, the layer's own
    forward pass) and added to every token. Returns the new ``(E, X)``.
    """
    with ar.working():
        zero = X[:1, :].T * 0                                      # (d, 1) zeros of X's own type and dtype
        mean = head_features(E, X, zero, zero, ar)                # (T, d): E^T softmax(0)
        return E + mean[:, None, :], X + mean


def layer_inputs(weights: Weights, E, X, ar: Arithmetic = FLOAT64):
    """What the attention layer reads: ``(E, X)`` after the weights' pre-layer, if they have one."""
    return (E, X) if weights.prelayer is None else mean_shift(E, X, ar)
