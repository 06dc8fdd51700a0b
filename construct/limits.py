"""Checked options and the engine's resource limits, in one place.

Options are refused, never coerced: ``heads=3.7`` is an error, not 3 heads. Requests are sized
before anything large is allocated, against the memory this machine has available, and archives
are sized from their headers before anything is inflated (:func:`construct.io.load_npz`).

Documented limits:

- memory: a request that needs more than the memory available (``MemAvailable`` on Linux,
  otherwise the physical memory) is refused with its estimate;
- archives: an ``.npz`` member whose arrays would take more memory than is available, or that
  inflates more than :data:`MAX_INFLATION` times beyond :data:`INFLATION_FLOOR` bytes (a
  decompression bomb), is refused before it is read; an uncompressed archive (``np.savez``) is
  never refused for its ratio.
"""

from __future__ import annotations

import importlib
import math
import numbers
import operator
import os
import sys

import numpy as np

from .errors import InputError

# A compressed archive member may inflate to at most this many times its stored size, once it is
# larger than INFLATION_FLOOR. Real-valued data rarely compresses more than 10x; zeros do 1000x.
MAX_INFLATION = 200
INFLATION_FLOOR = 64 * 2**20


def integer(value, name: str, minimum: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer (Python or NumPy) ``≥ minimum``.

    Raises:
        InputError: a bool, a float (even ``3.0``: never truncated), another type, or too small.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r} ({type(value).__name__})",
                         what="invalid option")
    if int(value) < minimum:
        raise InputError(f"{name} must be an integer ≥ {minimum}, got {int(value)}", what="invalid option")
    return int(value)


def library(module: str, extra: str):
    """``module`` imported, or an :class:`InputError` naming the extra that installs it. The
    import runs with SIGINT and SIGTERM held (:func:`construct.signals.signals_held`): an
    extension module interrupted as it loads can fail as an ImportError, which would read as a
    missing library, or abort in its own code (onnx did both under Ctrl-C). An import that takes
    long (matplotlib's first font cache) takes Ctrl-C once it is done.

    Raises:
        InputError: the module is not installed (``what="missing library"``).
    """
    from .signals import signals_held
    try:
        with signals_held():
            return importlib.import_module(module)
    except ImportError:
        raise missing_library(f"this needs {module.split('.')[0]}", extra) from None


def missing_library(needs: str, extra: str) -> InputError:
    """The error where an optional library is not installed: ``needs`` says what needs which
    library, ``extra`` is the extra that installs it. The package is installed from its folder
    (README), so the command given is the one that works there: ``pip install
    'mha-construct[...]'`` would look for the name on the package index instead."""
    return InputError(f"{needs}, in the [{extra}] extra: pip install '.[{extra}]' in the project's folder",
                      what="missing library")


def shape_of(value) -> tuple[int, ...] | None:
    """``value``'s shape as NumPy reads it (a list's too), or None where it has none (ragged)."""
    try:
        return np.shape(value)
    except (ValueError, TypeError):
        return None


def same_values(a, b) -> bool:
    """Whether ``a`` and ``b`` are arrays of one shape with equal values (``0.0 == -0.0``), for
    :class:`Dataset` and :class:`Weights` equality; what NumPy cannot compare is equal only to itself."""
    if a is b:
        return True
    try:
        return bool(np.array_equal(a, b))
    except (ValueError, TypeError):          # ragged, or values without an ==
        return False


def restore_read_only(obj, state: dict) -> bool:
    """``obj.__setstate__``: a frozen object unpickled or copied gets ``state`` with its arrays
    read-only again, as the engine made them (pickle and deepcopy give writeable copies); a
    writeable array is seen through a read-only view, so that ``copy.copy`` leaves the arrays it
    shares with the original (a caller's own, in an object made by hand) as they were.

    Returns whether ``state`` said the object was validated; ``obj`` is left unvalidated: the
    flag is a claim of the pickle's (an array made writeable again and edited, or a crafted
    file), which the caller checks again before it restores it."""
    state = {k: _read_only(v) if isinstance(v, np.ndarray) else v for k, v in state.items()}
    claimed = state.pop("validated", False) is True
    obj.__dict__.update(state, validated=False)
    return claimed


def locked(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a`` whose flag cannot be set back to writeable (on an array that
    owns its memory it could, and an edit locked again passed as validated): numbers over an
    immutable ``bytes`` (one copy of ``a``, C order); object arrays (mpmath numbers), which no
    buffer holds, as a read-only view of a read-only copy (NumPy refuses the view's flag; the
    copy's own, reached through ``.base``, it does not)."""
    if a.dtype == object:
        own = a.copy()
        own.flags.writeable = False
        view = own.view()
        view.flags.writeable = False
        return view
    return np.frombuffer(a.tobytes(order="C"), dtype=a.dtype).reshape(a.shape)


def _read_only(a: np.ndarray) -> np.ndarray:
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


def callback(value, name: str):
    """``value`` if it is None or callable (a function the engine calls as it goes).

    Raises:
        InputError: anything else, before any work (it would fail only once called).
    """
    if value is None or callable(value):
        return value
    raise InputError(f"{name} must be a function or None, got {type(value).__name__}", what="invalid option")


def flag(value, name: str) -> bool:
    """``value`` as a ``bool`` if it is one (Python or NumPy, a 0-d array too), or the integer 0 or 1.

    Raises:
        InputError: anything else (a string such as ``"no"`` is not read as True).
    """
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "biu":
        value = value.item()                             # a 0-d array: what np.load gives for a scalar
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and int(value) in (0, 1)):
        return bool(value)
    raise InputError(f"{name} must be True or False, got {value!r}", what="invalid option")


def tolerance(value, name: str = "tol") -> float:
    """``value`` as a finite positive ``float``, a normal float64 number.

    Raises:
        InputError: not a real number, NaN, infinite, zero or negative, or below float64's
            smallest normal number (errors that small carry fewer significant bits).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a positive number, got {value!r}", what="invalid option")
    try:
        tol = float(value)
    except OverflowError:                              # an integer beyond float's range
        tol = math.inf
    if not (math.isfinite(tol) and tol > 0):
        raise InputError(f"{name} must be a finite positive number, got {tol!r}", what="invalid option")
    if tol < sys.float_info.min:
        raise InputError(f"{name} must be at least {sys.float_info.min!r}, float64's smallest normal number "
                         f"(an error below it has fewer significant bits), got {tol!r}", what="invalid option")
    return tol


def allowed_error(tol: float, y_max: float) -> float:
    """The allowed error ``tol · max(1, y_max)`` of a tolerance relative to labels of largest
    magnitude ``y_max``.

    Raises:
        InputError: it overflows float64 (then every error, an infinite one included, would be
            within it).
    """
    top = max(1.0, float(y_max))
    allowed = tol * top                                # inf where it overflows
    if not math.isfinite(allowed):
        raise InputError(f"the allowed error tol · max(1, max |Y|) = {tol:.3g} · {top:.3g} overflows float64: "
                         "no error could fail it; choose a smaller tolerance", what="invalid option")
    return allowed


def available_memory() -> int:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``; else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**63


def gib(nbytes: float) -> str:
    """``nbytes`` in readable units."""
    if nbytes >= 2 ** 1000:                        # a size of hundreds of digits: no float holds it
        return f"about 2^{int(nbytes).bit_length() - 1} bytes"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} bytes"


def require_memory(nbytes: float, what: str) -> None:
    """Refuse ``what`` when it needs about ``nbytes`` and less is available.

    Raises:
        InputError: with the estimate and what is available.
    """
    free = available_memory()
    if nbytes > free:
        raise InputError(f"{what} needs about {gib(nbytes)} of memory; {gib(free)} is available",
                         what="request too large for this machine")


def index_list(idx, limit: int = 20) -> str:
    """Example indices for a message: the first ``limit``, then how many in all."""
    idx = [int(i) for i in idx]
    shown = ", ".join(map(str, idx[:limit]))
    return shown + (f", … ({len(idx)} in all)" if len(idx) > limit else "")


def finite_examples(name: str, arr: np.ndarray, problems: list[str]) -> None:
    """Append to ``problems`` the examples (first axis) of ``arr`` that hold NaN or inf. In
    blocks of examples of about a million entries: the test's temporary for the whole array was
    as large as the array (a broadcast view of 10^9 examples ran out of memory there)."""
    axes = tuple(range(1, arr.ndim))
    step = max(1, (1 << 20) // max(1, math.prod(arr.shape[1:])))
    bad = np.concatenate([~np.isfinite(arr[i:i + step]).all(axis=axes) for i in range(0, arr.shape[0], step)]
                         or [np.zeros(0, dtype=bool)])                  # per example; empty arrays too
    if bad.any():
        problems.append(f"{name}: non-finite values (NaN or inf) in example(s) {index_list(np.flatnonzero(bad))}")


# The refusal of values float64 cannot hold exactly, in an integer or long double array or in a
# list NumPy made float64; integers of magnitude below 2^53 are all float64 numbers.
_INEXACT = "values float64 cannot hold exactly (integers beyond 2^53, long doubles with more than 53 significant bits)"
_INEXACT_ADVICE = ("the engine computes on float64 values, so rounding them would build and certify other data: "
                   "convert them yourself (astype(np.float64)) where the rounded values are the data you mean")
_EXACT_INTEGERS = 2.0 ** 53


def real_array(name: str, value, problems: list[str]) -> np.ndarray | None:
    """``value`` as a NumPy array of real numbers (its own dtype: float or integer), or None with
    the reason appended to ``problems``: a ragged list, an object, string or complex array, or a
    list whose integers NumPy rounded as it made it float64 (:func:`_rounded_integers`)."""
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):     # asarray drops the mask
        mask = np.ma.getmaskarray(value)
        rows = mask.any(axis=tuple(range(1, mask.ndim))) if mask.ndim else np.array([True])
        problems.append(f"{name}: masked values in example(s) {index_list(np.flatnonzero(rows))}; "
                        "fill them (filled()) or drop those examples")
        return None
    if value is None:
        problems.append(f"{name}: missing (None); give an array of numbers")
        return None
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, RuntimeError) as exc:  # a ragged list; a tensor that requires grad
        problems.append(f"{name}: not an array of numbers ({exc})")
        return None
    if arr.dtype == object:
        problems.append(f"{name}: object array; give a numeric (float or int) array")
    elif arr.dtype.kind == "c":
        problems.append(f"{name}: dtype {arr.dtype} is not a real number type (float or int): complex values")
    elif arr.dtype.kind not in "fiu":
        problems.append(f"{name}: dtype {arr.dtype} is not a real number type (float or int)")
    else:
        rounded = _rounded_integers(value, arr)
        if rounded is None:
            return arr
        _refuse(name, rounded, _INEXACT, _INEXACT_ADVICE, problems)
    return None


def _rounded_integers(value, arr: np.ndarray) -> np.ndarray | None:
    """A mask of the examples (``arr``'s first axis) where ``arr``, the array NumPy made of the
    nested sequence ``value``, holds an integer of ``value`` that float64 cannot hold, or None
    where there is none: beside a float, a list's integers become float64 as NumPy converts it,
    and beyond 2^53 not every integer is a float64 number. An array, or anything NumPy reads
    through an array interface or a buffer (a tensor, a memoryview), has one dtype and is no
    such list (None at once); of a list, only where an entry reaches 2^53 are its entries read
    again (:func:`_holds_rounded_integer`), the arrays inside it by their dtype, so float data
    pay two reductions."""
    if _typed(value) or arr.dtype.kind != "f" or arr.size == 0 or arr.ndim == 0:
        return None                                      # a 0-d float array was a float
    flat = arr.reshape(-1)
    if not (np.fmax.reduce(flat) >= _EXACT_INTEGERS or np.fmin.reduce(flat) <= -_EXACT_INTEGERS):
        return None                                      # (fmax and fmin pass over NaN)
    lost = np.array([_holds_rounded_integer(v) for v in value], dtype=bool)
    return lost if lost.any() else None


def _typed(v) -> bool:
    """Whether NumPy reads ``v`` as an array of one dtype (an array, a NumPy scalar, a tensor,
    anything with an array interface or a buffer) rather than as a sequence of entries."""
    if isinstance(v, (np.ndarray, np.generic)) or any(hasattr(v, k) for k in ("__array__", "__array_interface__",
                                                                               "__array_struct__")):
        return True
    try:
        memoryview(v)
    except TypeError:
        return False
    return True


def _holds_rounded_integer(v) -> bool:
    """Whether the entry ``v`` of a nested sequence is or holds an integer float64 cannot hold:
    a Python integer, or an integer array (or NumPy integer) with such values (:func:`as_float64`,
    one pass); a float array holds none."""
    if _typed(v):
        a = np.asarray(v)
        return a.dtype.kind in "iu" and as_float64("", a, []) is None
    i = _integer(v)
    if i is not None:
        return abs(i) >= _EXACT_INTEGERS and float(i) != i
    if isinstance(v, (float, complex, str, bytes)):
        return False
    try:
        entries = iter(v)
    except TypeError:
        return False
    return any(_holds_rounded_integer(u) for u in entries)


def _integer(v) -> int | None:
    """``v`` as a Python ``int`` if it is an integer (Python's, NumPy's, a 0-d integer array),
    else None (floats, booleans: those float64 holds as they are)."""
    if isinstance(v, (float, bool)):                     # np.float64 is a float
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _refuse(name: str, lost: np.ndarray, what: str, advice: str, problems: list[str]) -> bool:
    """Append ``name: what in example(s) …; advice`` to ``problems`` where the mask ``lost`` (of
    the array's shape) holds; whether it did."""
    if not lost.any():
        return False
    per_example = lost.any(axis=tuple(range(1, lost.ndim))) if lost.ndim else np.array([True])
    problems.append(f"{name}: {what} in example(s) {index_list(np.flatnonzero(per_example))}; {advice}")
    return True


def as_float64(name: str, arr: np.ndarray, problems: list[str]) -> np.ndarray | None:
    """A real array as float64, or None with the reason in ``problems``, named by example, where
    float64 cannot hold its values exactly: integers beyond ``2^53`` that are not float64 numbers,
    and long doubles beyond float64's range, nonzero below its smallest, or with more significant
    bits. The engine computes on float64 values: rounding them would build and certify other data."""
    with np.errstate(over="ignore", under="ignore"):
        out = arr.astype(np.float64, copy=False)
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and arr.dtype.itemsize > 8):
        return out
    refused = False
    with np.errstate(over="ignore", invalid="ignore"):
        back = out.astype(arr.dtype)                     # exact where float64 holds the value
    if arr.dtype.kind == "f":
        beyond = np.isinf(out) & np.isfinite(arr)
        below = (out == 0) & (arr != 0)
        refused |= _refuse(name, beyond, "values beyond float64's range (about 1.8e308)", "rescale them", problems)
        refused |= _refuse(name, below, "nonzero values below float64's range (about 4.9e-324)", "rescale them",
                           problems)
        inexact = np.isfinite(arr) & ~beyond & ~below & (back != arr)
    else:
        # Past the integer type's top the cast back is undefined (x86 gives the type's minimum, ARM
        # saturates to the value itself): 2^63 − 1 rounds to 2^63, which no int64 holds.
        top = 2.0 ** (8 * arr.dtype.itemsize - (1 if arr.dtype.kind == "i" else 0))
        inexact = (out >= top) | (back != arr)
    refused |= _refuse(name, inexact, _INEXACT, _INEXACT_ADVICE, problems)
    return None if refused else out
