"""Exports of the weights for other frameworks: PyTorch, safetensors, ONNX.

- ``torch``: the state dict of :class:`construct.torch_model.MemorizingAttention` saved with
  ``torch.save`` (tensors only: ``torch.load(path, weights_only=True)`` reads it); extra ``[torch]``.
- ``safetensors``: the five matrices under their names (``W_K``, ``W_Q``, ``W_V``, ``W_O``,
  ``W_D``) and string metadata ``format``, ``version``, ``H``, ``d``, ``d_h``, ``d_v``, ``d_o``,
  ``skip`` (``"true"``/``"false"``), ``bits`` (the precision the weights were built at: 53 for
  float64; the arrays hold their nearest ``dtype`` values), ``dtype`` and, when
  given, ``report_sha256``; with Proposition 4's pre-layer, ``prelayer`` (``"mean-shift"``) and
  ``prelayer_version``; any framework's safetensors loader reads it; extra ``[safetensors]``.
- ``onnx``: a graph of standard operators (opset :data:`OPSET`: MatMul, Reshape, Transpose,
  Softmax; Add with the skip connection or the pre-layer) with inputs ``E`` (B, n, d) and ``x`` (B, d) and output ``f`` (B, d_o), the weights as
  initializers (with the pre-layer, a ReduceMean over the context and two Adds first); it runs
  in onnxruntime; extra ``[onnx]``.

``dtype`` is ``float64`` (the weights' own values; high-precision weights are rounded to float64)
or ``float32``. With a dataset, :func:`export` evaluates the written file at its dtype
(:func:`evaluate`) and reports the max error and whether every label holds at the tolerance.
"""

from __future__ import annotations

import io
import math
import os
import re
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from .arith import FLOAT64
from .errors import InputError, OutputError, numpy_error_defaults
from .io import as_path
from .limits import library, missing_library, require_memory
from .model import MATRICES as _NAMES
from .model import PRELAYER_VERSION, Weights, as_weights, check_compatible, checked_weights

FORMATS = ("torch", "safetensors", "onnx")
DTYPES = ("float64", "float32")
OPSET = 17
FORMAT_NAME = "mha-construct weights"
FORMAT_VERSION = "1"


@numpy_error_defaults
def export_bytes(weights: Weights, fmt: str, dtype: str = "float64", report_sha256: str | None = None) -> bytes:
    """The exported file's bytes."""
    if not (isinstance(fmt, str) and fmt in FORMATS):
        raise InputError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}"[:200], what="invalid option")
    _check_dtype(dtype)
    if report_sha256 is not None and not (isinstance(report_sha256, str)
                                          and re.fullmatch(r"[0-9a-f]{64}", report_sha256)):
        raise InputError(f"report_sha256 must be None or 64 lowercase hex digits, got {report_sha256!r}"[:200],
                         what="invalid option")
    w = checked_weights(weights)
    arrays = representable(w, np.dtype(dtype), "export them as float64 (--dtype float64), or build from rescaled data")
    if fmt == "safetensors":
        save = library("safetensors.numpy", "safetensors").save
        return _sorted_metadata(save(arrays, metadata=_metadata(w, dtype, report_sha256)))
    if fmt == "onnx":
        return onnx_model(w, dtype).SerializeToString()
    torch = library("torch", "torch")
    from .torch_model import to_torch
    buffer = io.BytesIO()
    torch.save(to_torch(w, dtype=getattr(torch, dtype)).state_dict(), buffer)
    return buffer.getvalue()


def _check_dtype(dtype) -> None:
    """Refuse a dtype the exports do not write. float16 is one: onnxruntime runs these operators
    in it, but float16's 11 bits miss the labels by 4e-3 to 0.7 on small problems, beyond any
    tolerance this package judges an export by (docs/exports.md)."""
    if not (isinstance(dtype, str) and dtype in DTYPES):
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}"[:200], what="invalid option")


def _sorted_metadata(payload: bytes) -> bytes:
    """A safetensors file with its metadata in sorted order: the library writes it in a hash
    map's order, which changes from one process to the next, and so did the file's sha256.

    The header is an 8-byte little-endian length, then that much JSON padded with spaces to a
    multiple of 8; the tensors' offsets count from after it, so only the JSON changes.
    """
    import json
    size = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8:8 + size])
    header["__metadata__"] = dict(sorted(header.get("__metadata__", {}).items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + payload[8 + size:]


def _metadata(w: Weights, dtype: str, report_sha256: str | None) -> dict[str, str]:
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "H": str(w.H), "d": str(w.d), "d_h": str(w.d_h),
            "d_v": str(w.d_v), "d_o": str(w.d_o), "skip": "true" if w.skip else "false",
            "bits": str(w.bits or 53), "dtype": dtype}
    if report_sha256:
        meta["report_sha256"] = report_sha256
    if w.prelayer is not None:
        meta.update(prelayer=w.prelayer, prelayer_version=str(PRELAYER_VERSION))
    return meta


def read_safetensors(path: str | os.PathLike) -> Weights:
    """:class:`Weights` (float64) from a safetensors file written by :func:`export_bytes`."""
    return _read_safetensors(as_path(path, "path"))[0]


def _read_safetensors(path: Path) -> tuple[Weights, dict[str, np.ndarray]]:
    """The file's :class:`Weights` (float64) and its five matrices at their own dtype."""
    library("safetensors", "safetensors")
    from safetensors import SafetensorError, safe_open
    try:
        if not path.is_file():
            raise OSError(_not_a_file(path))
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            names = set(f.keys())
            if meta.get("format") != FORMAT_NAME:
                raise InputError(f"{path}: not an {FORMAT_NAME} safetensors file (metadata format = "
                                 f"{_cut(repr(meta.get('format')))})", what="invalid weights")
            problems = [f"{name}: missing" for name in _NAMES if name not in names]
            problems += [f"{name}: unexpected tensor" for name in sorted(names - set(_NAMES))]
            tensors = {}
            present = [n for n in _NAMES if n in names]
            # The shapes the header declares, before any values are read: a sparse file can
            # declare hundreds of GiB, which safetensors meets with a MemoryError and a panic.
            shapes = {name: tuple(int(k) for k in f.get_slice(name).get_shape()) for name in present}
            require_memory(sum(2 * 8 * math.prod(shape) for shape in shapes.values()),
                           f"{path}: reading " + ", ".join(f"{name} {shape}" for name, shape in shapes.items()))
            for name in present:
                try:
                    tensors[name] = f.get_tensor(name)
                except (TypeError, AttributeError) as exc:   # bfloat16, float8: no NumPy dtype
                    problems.append(f"{name}: a dtype NumPy cannot hold ({exc}); expected {_READ}")
    except (SafetensorError, OSError) as exc:
        raise InputError(f"{path}: not a readable safetensors file ({exc})", what="invalid weights") from None
    # float16 too: it widens to float64 exactly, and load_state_dict reads it (to_torch makes it).
    problems += [f"{name}: {a.dtype} tensor, expected {_READ}" for name, a in tensors.items()
                 if a.dtype not in (np.float16, np.float32, np.float64)]
    problems += _metadata_problems(meta, tensors)
    if problems:
        raise InputError([f"{path}: {p}" for p in problems], what="invalid weights")
    arrays = {name: a.astype(np.float64) for name, a in tensors.items()}
    try:
        w = as_weights(**arrays, skip=meta["skip"] == "true", prelayer=meta.get("prelayer"))
    except InputError as exc:
        raise InputError([f"{path}: {p}" for p in exc.problems], what=exc.what) from None
    contradicted = [f"{path}: metadata {key} = {meta[key]!r}, but the tensors have {key} = {getattr(w, key)}"
                    for key in _SIZES if int(meta[key]) != getattr(w, key)]
    if contradicted:
        raise InputError(contradicted, what="invalid weights")
    return w, tensors


_SIZES = ("H", "d", "d_h", "d_v", "d_o")
_READ = "float16, float32 or float64"


def _metadata_problems(meta: dict[str, str], tensors: dict[str, np.ndarray]) -> list[str]:
    """What in a safetensors file's metadata (every field :func:`_metadata` writes) is missing,
    malformed, or contradicts the tensors' dtypes; the sizes are compared with the tensors' once
    their shapes are checked. A field the reader ignored would let the file say one model and
    hold another."""
    from .precision import MAX_BITS

    def integer(text: str) -> bool:             # (digits beyond 18: no such size, and Python
        return text.isascii() and text.isdigit() and len(text) <= 18    # refuses 4300 and more)

    problems = []
    if meta.get("version") != FORMAT_VERSION:
        problems.append(f"metadata version = {meta.get('version')!r}; this release reads version {FORMAT_VERSION}")
    for key in (*_SIZES, "bits", "skip", "dtype"):
        if key not in meta:
            problems.append(f"metadata {key}: missing")
    problems += [f"metadata {key} = {meta[key]!r}, expected an integer" for key in _SIZES
                 if key in meta and not integer(meta[key])]
    bits = meta.get("bits")
    if bits is not None and not (integer(bits) and 53 <= int(bits) <= MAX_BITS):
        problems.append(f"metadata bits = {bits!r}, expected an integer from 53 (float64's) to {MAX_BITS}")
    if "skip" in meta and meta["skip"] not in ("true", "false"):
        problems.append(f"metadata skip = {meta['skip']!r}, expected 'true' or 'false'")
    if "dtype" in meta:
        problems += [f"metadata dtype = {meta['dtype']!r}, but {name} is {a.dtype}" for name, a in tensors.items()
                     if a.dtype.name != meta["dtype"]]
    prelayer, version = meta.get("prelayer"), meta.get("prelayer_version")
    if prelayer is None and version is not None:
        problems.append("metadata prelayer: missing (the file has prelayer_version)")
    elif prelayer is not None and version is None:
        problems.append("metadata prelayer_version: missing (the file names a prelayer)")
    elif prelayer is not None and version != str(PRELAYER_VERSION):
        problems.append(f"metadata prelayer_version = {version!r}; this release reads version {PRELAYER_VERSION}")
    sha = meta.get("report_sha256")
    if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
        problems.append(f"metadata report_sha256 = {sha!r}, expected 64 lowercase hex digits"[:200])
    return [_cut(p) for p in problems]


def _cut(text: str) -> str:
    """``text`` with every quoted value beyond 80 characters cut short: a file's metadata may
    hold megabytes."""
    return re.sub(r"'[^']{80}[^']+'", lambda m: m.group(0)[:81] + "…'", text)


def onnx_model(weights: Weights, dtype: str = "float64"):
    """The model as an ``onnx.ModelProto`` (checked with ``onnx.checker``), its inputs, output and
    initializers of ``dtype``.

    Raises:
        InputError: ``dtype`` is not one of :data:`DTYPES` (float16 among them: docs/exports.md),
            the weights' values leave its range (:func:`representable`), or onnx is not installed.
    """
    onnx = library("onnx", "onnx")
    from onnx import TensorProto, helper, numpy_helper

    _check_dtype(dtype)
    w = checked_weights(weights)
    H, d, d_h, d_v, d_o = w.H, w.d, w.d_h, w.d_v, w.d_o
    elem = TensorProto.DOUBLE if dtype == "float64" else TensorProto.FLOAT
    a = representable(w, np.dtype(dtype), "use dtype float64, or build from rescaled data")

    def init(name, value):
        return numpy_helper.from_array(np.ascontiguousarray(value, dtype=dtype), name)

    def shape(name, dims):
        return numpy_helper.from_array(np.asarray(dims, dtype=np.int64), name)

    inits = [
        init("Wq", a["W_Q"].transpose(1, 0, 2).reshape(d, H * d_h)),     # x Wq → (B, H·d_h)
        init("Wk", a["W_K"].transpose(1, 0, 2).reshape(d, H * d_h)),     # E Wk → (B, n, H·d_h)
        init("Wv", a["W_V"].transpose(1, 0, 2).reshape(d, H * d_v)),     # E Wv → (B, n, H·d_v)
        init("Wo", a["W_O"]), init("Wd", a["W_D"]),
        shape("q_shape", [0, H, d_h, 1]), shape("kv_k_shape", [0, 0, H, d_h]), shape("kv_v_shape", [0, 0, H, d_v]),
        shape("z_shape", [0, H * d_v]),
    ]
    nodes = []
    E_in, x_in = "E", "x"
    if w.prelayer is not None:                     # Proposition 4's layer: every token plus its context's mean
        inits.append(shape("m_shape", [0, d]))
        nodes += [helper.make_node("ReduceMean", ["E"], ["m"], axes=[1], keepdims=1),      # (B, 1, d)
                  helper.make_node("Add", ["E", "m"], ["E1"]),
                  helper.make_node("Reshape", ["m", "m_shape"], ["m_flat"]),
                  helper.make_node("Add", ["x", "m_flat"], ["x1"])]
        E_in, x_in = "E1", "x1"
    nodes += [
        helper.make_node("MatMul", [x_in, "Wq"], ["q_flat"]),
        helper.make_node("Reshape", ["q_flat", "q_shape"], ["q"]),                      # (B, H, d_h, 1)
        helper.make_node("MatMul", [E_in, "Wk"], ["k_flat"]),
        helper.make_node("Reshape", ["k_flat", "kv_k_shape"], ["k_bnhk"]),
        helper.make_node("Transpose", ["k_bnhk"], ["k"], perm=[0, 2, 1, 3]),          # (B, H, n, d_h)
        helper.make_node("MatMul", ["k", "q"], ["logits"]),                             # (B, H, n, 1)
        helper.make_node("Softmax", ["logits"], ["s"], axis=2),
        helper.make_node("MatMul", [E_in, "Wv"], ["v_flat"]),
        helper.make_node("Reshape", ["v_flat", "kv_v_shape"], ["v_bnhv"]),
        helper.make_node("Transpose", ["v_bnhv"], ["v_t"], perm=[0, 2, 3, 1]),        # (B, H, d_v, n)
        helper.make_node("MatMul", ["v_t", "s"], ["z"]),                                # (B, H, d_v, 1)
        helper.make_node("Reshape", ["z", "z_shape"], ["z_flat"]),                      # (B, H·d_v)
        helper.make_node("MatMul", ["z_flat", "Wo"], ["o"]),                            # (B, d)
    ]
    if w.skip:
        nodes.append(helper.make_node("Add", ["o", x_in], ["o_skip"]))
    nodes.append(helper.make_node("MatMul", ["o_skip" if w.skip else "o", "Wd"], ["f"]))
    graph = helper.make_graph(
        nodes, "mha_construct",
        [helper.make_tensor_value_info("E", elem, ["B", "n", d]), helper.make_tensor_value_info("x", elem, ["B", d])],
        [helper.make_tensor_value_info("f", elem, ["B", d_o])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="mha-construct")
    model.ir_version = min(model.ir_version, 9)        # what current onnxruntime releases accept
    onnx.checker.check_model(model)
    return model


@numpy_error_defaults
def evaluate(path: str | os.PathLike, fmt: str, E, X) -> np.ndarray:
    """The exported file's outputs on ``(E, X)`` at the file's dtype (returned as float64): ONNX
    by onnxruntime, the torch state dict by PyTorch, safetensors read by its NumPy loader and run
    by this package's forward pass (the format holds arrays, no computation).

    ``E`` (T, n, d) and ``X`` (T, d): arrays or nested lists of finite real numbers, with the
    file's ``d``; returns (T, d_o).

    Raises:
        InputError: an unknown format; ``path`` is not a readable file of ``fmt`` written by
            :func:`export` (missing, a folder, another format, truncated, another state dict,
            another graph: other inputs, or an output other than one ``f`` (B, d_o) of the
            inputs' dtype, checked before the run where the file declares it and after it
            otherwise), named; ``E`` or ``X`` is not of those shapes with the file's ``d``, or holds
            something else than finite real numbers; the format's library is not installed.
    """
    if not (isinstance(fmt, str) and fmt in FORMATS):
        raise InputError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}"[:200], what="invalid option")
    path = as_path(path, "path")
    if fmt == "onnx":
        ort = library("onnxruntime", "onnx")
        if not path.is_file():
            raise InputError(f"{path}: not a readable ONNX model ({_not_a_file(path)})", what="invalid weights")
        try:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as exc:            # onnxruntime's errors derive from Exception alone
            raise InputError(f"{path}: not a readable ONNX model ({_why(exc)})", what="invalid weights") from None
        d, dtype, d_o = _onnx_signature(session, path)
        E, X = _fitting_inputs(path, E, X, d)
        # The file holds W_K and W_V (d × H·d_h, d × H·d_v): n times its size over d bounds the
        # keys (or values) of one example, the largest tensors of the run.
        parts = []
        for rows in _blocks(X.shape[0], E.shape[1] * path.stat().st_size // max(d, 1)):
            try:
                f = session.run(["f"], {"E": E[rows].astype(dtype), "x": X[rows].astype(dtype)})[0]
            except Exception as exc:
                raise InputError(f"{path}: onnxruntime could not run the model ({_why(exc)})",
                                 what="invalid weights") from None
            T = X[rows].shape[0]
            if not (f.ndim == 2 and f.shape[0] == T and f.shape[1] >= 1 and d_o in (None, f.shape[1])):
                raise InputError(f"{path}: output f has shape {f.shape} on {T} examples; expected (T, d_o) = "
                                 f"({T}, {'d_o' if d_o is None else d_o})", what="invalid weights")
            parts.append(f.astype(np.float64))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    if fmt == "safetensors":
        from .model import forward_unchecked
        w, arrays = _read_safetensors(path)
        E, X = _fitting_inputs(path, E, X, w.d)
        if E.shape[0] == 0:                      # as forward: the pass itself cannot shape no rows
            return np.zeros((0, w.d_o))
        dtype = arrays["W_K"].dtype
        native = Weights(**arrays, skip=w.skip, prelayer=w.prelayer)
        return forward_unchecked(E.astype(dtype), X.astype(dtype), native).astype(np.float64)
    torch = library("torch", "torch")
    from .torch_model import load_state_dict
    if not path.is_file():
        raise InputError(f"{path}: not a readable PyTorch state dict ({_not_a_file(path)})", what="invalid weights")
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:                # a zoo: RuntimeError, EOFError, UnpicklingError, IndexError, …
        raise InputError(f"{path}: not a readable PyTorch state dict ({_why(exc)})", what="invalid weights") from None
    try:
        module = load_state_dict(state)
    except InputError as exc:
        raise InputError([f"{path}: {p}" for p in exc.problems], what=exc.what) from None
    E, X = _fitting_inputs(path, E, X, module.W_K.shape[1])
    t = module.W_K.dtype
    H, _, d_h = module.W_K.shape
    per_example = t.itemsize * E.shape[1] * H * max(d_h, module.W_V.shape[2])      # its keys (or values)
    with torch.no_grad():
        parts = [module(torch.tensor(E[rows], dtype=t), torch.tensor(X[rows], dtype=t)).to(torch.float64).numpy()
                 for rows in _blocks(X.shape[0], per_example)]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


# What the target library may hold at once for one block of examples, in its largest tensors
# (every head's keys): evaluated whole, H = 128 (n = 32, d = 64, T = 3,969) took 13.1 GB of
# memory in PyTorch and 8.9 GB in onnxruntime, 4.2 GB a copy of the keys.
EVAL_BLOCK_BYTES = 64 * 2**20


def _blocks(T: int, per_example: int) -> list[slice]:
    """The rows of ``T`` examples in blocks of at most :data:`EVAL_BLOCK_BYTES` at
    ``per_example`` bytes each (one example at least; one empty block where there are none)."""
    rows = max(1, EVAL_BLOCK_BYTES // max(1, per_example))
    return [slice(i, min(i + rows, T)) for i in range(0, T, rows)] or [slice(0, 0)]


def _why(exc: Exception) -> str:
    """A library's error in one short line: its first line, without onnxruntime's status prefix
    and the path it repeats; PyTorch's weights-only refusal without its advice to load unsafely."""
    import pickle
    if isinstance(exc, pickle.UnpicklingError):
        return "PyTorch's weights-only loader refuses it: not a file of tensors torch.save wrote"
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Load model from .* failed:)?", "", text)[:200]


def _not_a_file(path: Path) -> str:
    return "no such file" if not path.exists() else "not a regular file"


def _onnx_signature(session, path: Path) -> tuple[int, type, int | None]:
    """The token dimension ``d``, the dtype and the output dimension ``d_o`` (None where the file
    does not declare it) of an ONNX model :func:`onnx_model` wrote: inputs ``E`` (B, n, d) and
    ``x`` (B, d) of one floating dtype and one output ``f`` (B, d_o) of that dtype.

    Raises:
        InputError: naming the file and what about its inputs or its output differs.
    """
    types = {"tensor(double)": np.float64, "tensor(float)": np.float32}
    inputs = {i.name: i for i in session.get_inputs()}
    E, x = inputs.get("E"), inputs.get("x")
    fits = (set(inputs) == {"E", "x"} and E.type == x.type and E.type in types and len(E.shape) == 3
            and len(x.shape) == 2 and isinstance(E.shape[2], int) and E.shape[2] == x.shape[1])
    if not fits:
        found = ", ".join(f"{i.name} {i.type} {list(i.shape)}" for i in session.get_inputs())
        raise InputError(f"{path}: not an mha-construct ONNX model (inputs {found or 'none'}; expected E (B, n, d) "
                         "and x (B, d) of float64 or float32)", what="invalid weights")
    outputs = session.get_outputs()
    f = outputs[0] if [o.name for o in outputs] == ["f"] else None
    # onnxruntime reads an undeclared rank as [], a scalar's shape: both are checked after the run.
    if f is None:
        wrong = "outputs " + (", ".join(f"{o.name} {o.type} {list(o.shape)}" for o in outputs) or "none")
    elif f.type != E.type:
        wrong = f"output f is {f.type}, the inputs {E.type}"
    elif len(f.shape) not in (0, 2) or (len(f.shape) == 2 and isinstance(f.shape[1], int) and f.shape[1] < 1):
        wrong = f"output f has shape {list(f.shape)}, expected (B, d_o)"
    else:
        d_o = f.shape[1] if len(f.shape) == 2 and isinstance(f.shape[1], int) else None
        return E.shape[2], types[E.type], d_o
    raise InputError(f"{path}: not an mha-construct ONNX model ({wrong}; expected one output f (B, d_o) of the "
                     "inputs' dtype)", what="invalid weights")


def _fitting_inputs(path: Path, E, X, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``E`` and ``X`` as arrays of finite real numbers of shapes (T, n, d) and (T, d), with the
    file's ``d`` (read from it, before any library sees the data).

    Raises:
        InputError: naming the file, the array and the shape expected and found.
    """
    from .model import _real_inputs, input_shape_problems
    E, X = _real_inputs(E, X)
    problems = input_shape_problems(E, X, d)
    if problems:
        raise InputError(problems, what=f"inputs do not fit {path} (its token dimension is d = {d})")
    return E, X


@numpy_error_defaults
def export(weights: Weights, fmt: str, out: str | os.PathLike, *, dtype: str = "float64", data=None,
           tol: float | None = None, report_sha256: str | None = None) -> dict:
    """Write ``weights`` to ``out`` in format ``fmt`` (atomically) and, with ``data``, evaluate
    the file in its target library.

    Returns:
        ``{"format", "dtype", "path"}`` and, with data, ``"max_abs_error"``, ``"allowed"``
        (``tol · max(1, max|Y|)``; by default ``tol`` is verify's 1e-8 for float64 and its
        float32 tolerance, 1e-4, for float32) and ``"labels_hold"``.

    Raises:
        InputError: an unknown format or dtype, the format's library is not installed, the
            weights do not fit ``data``'s dimensions, or ``tol`` given without ``data``.
    """
    from .io import write_atomic
    from .limits import allowed_error, tolerance
    from .verify import DEFAULT_TOL, FLOAT32_TOL
    out = as_path(out, "out")
    if tol is not None and data is None:            # as the command line: not ignored
        raise InputError("tol is the tolerance of the check on data, and there is none: give data, or leave tol out",
                         what="invalid arguments")
    tol = tolerance((DEFAULT_TOL if dtype == "float64" else FLOAT32_TOL) if tol is None else tol)
    # Each format's library has its extra of the same name; ONNX files are checked by onnxruntime.
    needed = ([fmt] if fmt in FORMATS else []) + (["onnxruntime"] if fmt == "onnx" and data is not None else [])
    missing = [m for m in needed if not _importable(m)]
    if missing:
        raise missing_library(f"the {fmt} format needs {', '.join(missing)}", fmt)
    if data is not None:                             # refused before anything is written
        from .data import checked
        data = checked(data)
        check_compatible(checked_weights(weights), data.d, data.d_o)
        allowed = allowed_error(tol, float(np.abs(data.Y).max()))
    payload = export_bytes(weights, fmt, dtype, report_sha256)
    info: dict = {"format": fmt, "dtype": dtype, "path": str(out)}
    if data is not None:            # checked before it is written: an interruption leaves ``out`` as it was
        with _scratch(out) as scratch:
            trial = Path(scratch) / f"model.{fmt}"
            try:
                trial.write_bytes(payload)
            except OSError as exc:
                raise OutputError(f"{trial}: the model's trial copy (evaluated before {out} is written) cannot be "
                                  f"written in {scratch} ({exc.strerror or exc}); set TMPDIR to a folder with room; "
                                  f"nothing written") from None
            with np.errstate(over="ignore", invalid="ignore"):   # beyond float32's range: labels do not hold
                f = evaluate(trial, fmt, data.E, data.X)
        err = float(np.abs(f - data.Y).max()) if np.all(np.isfinite(f)) else float("inf")
        info.update(max_abs_error=err, allowed=allowed, labels_hold=bool(err <= allowed))
    write_atomic(out, payload)
    return info


def _scratch(out) -> tempfile.TemporaryDirectory:
    """A temporary folder for the trial evaluation of an export to ``out``, or an
    :class:`OutputError` naming where it could not be made (``TMPDIR``)."""
    try:
        return tempfile.TemporaryDirectory()
    except OSError as exc:
        raise OutputError(f"{tempfile.gettempdir()}: no folder for the model's trial copy (evaluated before {out} "
                          f"is written) can be made there ({exc.strerror or exc}); set TMPDIR to a folder with "
                          "room; nothing written") from None


# PyTorch's bfloat16, which NumPy lacks: float32's exponents with 8 significant bits (7 stored).
BFLOAT16 = SimpleNamespace(max=(2 - 2.0 ** -7) * 2.0 ** 127, eps=2.0 ** -7, smallest_subnormal=2.0 ** -133)


def representable(w: Weights, dtype: np.dtype | str, advice: str) -> dict[str, np.ndarray]:
    """``w``'s matrices in ``dtype`` (contiguous), where each keeps its values; for
    ``"bfloat16"``, float64 arrays of bfloat16's values (:func:`bfloat16_values`).

    Raises:
        InputError: a matrix has values beyond ``dtype``'s range, or values that matter at its own
            scale (above ``dtype``'s precision of its largest entry) flushed to 0; ``advice`` ends
            the message.
    """
    name_of = f"{dtype}"
    nearest = {name: FLOAT64.to_host(getattr(w, name)) for name in _NAMES}     # float64's nearest values
    if isinstance(dtype, str):                          # "bfloat16"
        with np.errstate(over="ignore"):
            arrays = {name: bfloat16_values(nearest[name], getattr(w, name) if w.bits is not None else None)
                      for name in _NAMES}
        info = BFLOAT16
    elif dtype == np.float64:
        return {name: np.array(a, order="C") for name, a in nearest.items()}         # copies
    else:
        with np.errstate(over="ignore", under="ignore"):   # beyond or below the range: refused below, by name
            arrays = {name: _rounded_once(getattr(w, name), nearest[name], dtype) if w.bits is not None
                      else np.ascontiguousarray(nearest[name], dtype=dtype) for name in _NAMES}
        info = np.finfo(dtype)
    beyond = []
    matters = _mattering(nearest, w.skip, float(info.eps) / 2)
    for name, a in arrays.items():
        exact = nearest[name]
        if not np.all(np.isfinite(a)):
            beyond.append(f"{name}: values up to {float(np.abs(exact).max()):.3g} exceed {name_of}'s range "
                          f"({float(info.max):.3g})")
        # Values flushed to 0 that matter beside the terms they are summed with; far smaller ones
        # vanish in that arithmetic anyway.
        lost = (a == 0) & matters[name]
        if lost.any():
            beyond.append(f"{name}: values up to {float(np.abs(exact[lost]).max()):.3g} are below {name_of}'s range "
                          f"({float(info.smallest_subnormal):.3g}) and would become 0")
    if beyond:
        raise InputError(beyond + [advice], what=f"weights not representable in {name_of}", counted=False)
    return arrays


def _mattering(nearest: dict[str, np.ndarray], skip: bool, relative: float) -> dict[str, np.ndarray]:
    """For each matrix of float64 weights, which entries matter: those whose part in what they
    are summed with exceeds ``relative`` times the largest part there, each entry weighed by the
    largest entries of the factors it is multiplied by.

    - ``W_K[h]`` and ``W_Q[h]``: column ``c`` of each meets column ``c`` of the other in head
      ``h``'s logits ``Σ_c (eᵀK_c)(Q_cᵀx)``, and a head's logits are not summed with another's:
      ``|K_kc| max|Q_c|`` against the largest such in head ``h`` (a head whose keys are far below
      the others', with large queries, is no less a head).
    - The values go into every output, summed over the heads, along ``W_V → W_O → W_D``:
      ``W_V[h]``'s column ``c`` meets row ``r = h·d_v + c`` of ``W_O``, whose column ``k`` meets
      row ``k`` of ``W_D``. Each entry is weighed by the largest product of the others along its
      paths (``W_V``'s column by ``max_k |W_O[r, k]| max|W_D[k]|``, ``W_O[r, k]`` by ``W_V``'s
      column ``r`` and ``W_D``'s row ``k``, ``W_D``'s row ``k`` by ``max_r |W_O[r, k]|`` times
      ``W_V``'s column ``r``), against the largest in its matrix. ``W_D`` also meets the query
      alone with the skip connection: there an entry matters at ``W_D``'s own scale too.

    The weights are scaled to the largest of each before they multiply (nothing overflows); a
    weight that underflows counts as not mattering, far below any ``relative``.
    """
    A = {name: np.abs(a) for name, a in nearest.items()}

    def unit(v: np.ndarray, axis=None) -> np.ndarray:
        top = v.max(axis=axis, keepdims=True, initial=0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(top > 0, v / np.where(top > 0, top, 1.0), 0.0)

    def large(part: np.ndarray, axis=None) -> np.ndarray:
        return part > relative * part.max(axis=axis, keepdims=True, initial=0.0)

    K, Q, V, O, D = (A[name] for name in ("W_K", "W_Q", "W_V", "W_O", "W_D"))
    H, d_v = V.shape[0], V.shape[2]
    keys = large(K * unit(Q.max(axis=1, keepdims=True, initial=0.0), axis=(1, 2)), axis=(1, 2))
    queries = large(Q * unit(K.max(axis=1, keepdims=True, initial=0.0), axis=(1, 2)), axis=(1, 2))
    O_unit = unit(O)                                                   # (H·d_v, d)
    rows_D = unit(D.max(axis=1, initial=0.0))                          # (d,): W_D's rows
    columns_V = unit(V.max(axis=1, initial=0.0).reshape(H * d_v))       # (H·d_v,): W_V's columns
    values = large(V * (O_unit * rows_D[None, :]).max(axis=1, initial=0.0).reshape(H, 1, d_v))
    outputs = large(O * columns_V[:, None] * rows_D[None, :])
    readout = large(D * (O_unit * columns_V[:, None]).max(axis=0, initial=0.0)[:, None])
    if skip:
        readout |= large(D)
    return {"W_K": keys, "W_Q": queries, "W_V": values, "W_O": outputs, "W_D": readout}


def _rounded_once(exact: np.ndarray, nearest: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """High-precision values ``exact`` (mpmath numbers) rounded to ``dtype`` (narrower than
    float64) once, to nearest, ties to even, as contiguous arrays; ``nearest`` their float64
    values.

    Rounding to float64 first and then to ``dtype`` is wrong only where the float64 value lies
    exactly halfway between two neighbours in ``dtype`` and the exact value does not: float64
    holds every such midpoint, so its rounding can land on one but not cross it. There the
    neighbour on the exact value's side is taken. The threshold of overflow (the largest value
    plus half a unit in its last place) is such a midpoint too, between the largest value and
    infinity.
    """
    out = np.ascontiguousarray(nearest, dtype=dtype)
    top = np.finfo(dtype).max
    threshold = float(top) + (float(top) - float(np.nextafter(top, top.dtype.type(0)))) / 2    # exact in float64
    with np.errstate(over="ignore", invalid="ignore"):
        back = out.astype(np.float64)
        other = np.nextafter(out, np.where(nearest > back, np.inf, -np.inf).astype(dtype))   # toward the value
        halfway = (back != nearest) & ((back + other.astype(np.float64) == 2 * nearest)
                                       | (np.abs(nearest) == threshold))
    for i in zip(*np.nonzero(halfway)):            # mpmath compares exactly
        if exact[i] != nearest[i]:
            out[i] = max(out[i], other[i]) if exact[i] > nearest[i] else min(out[i], other[i])
    return out


def bfloat16_values(nearest: np.ndarray, exact: np.ndarray | None = None) -> np.ndarray:
    """The float64 values ``nearest`` rounded to bfloat16's (:data:`BFLOAT16`), to nearest, ties
    to even, as float64 arrays (C order; ±inf from the largest value plus half a unit on).
    PyTorch fills a bfloat16 tensor from float64 through float32, rounding twice
    (``1 + 2^-8 + 2^-30`` became 1, not ``1 + 2^-7``); from these values it rounds nothing.

    ``exact``: high-precision values (mpmath numbers) of which ``nearest`` are float64's nearest;
    as in :func:`_rounded_once`, where float64's value is a midpoint of bfloat16 and the exact
    one is not, the neighbour on the exact value's side is taken.

    A value ``m·2^e`` (``1/2 ≤ |m| < 1``) scaled by the unit of bfloat16 at it, ``2^max(e − 8,
    −133)``, is exact in float64; rounding that to an integer and scaling back is the rounding.
    """
    _, e = np.frexp(nearest)
    unit = np.maximum(e - 8, -133)
    scaled = np.ldexp(nearest, -unit)
    q = np.rint(scaled)
    if exact is not None:
        for i in zip(*np.nonzero(scaled - np.floor(scaled) == 0.5)):      # mpmath compares exactly
            if exact[i] != nearest[i]:
                q[i] = np.ceil(scaled[i]) if exact[i] > nearest[i] else np.floor(scaled[i])
    out = np.ldexp(q, unit)
    return np.ascontiguousarray(np.where(np.abs(out) > BFLOAT16.max, np.copysign(np.inf, out), out))


def _importable(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None
