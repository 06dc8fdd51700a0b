"""The model as a PyTorch module (the ``[torch]`` extra): certified weights inside a user's code.

:class:`MemorizingAttention` computes exactly this project's model, batched::

    s_h = softmax(E W_K[h] W_Q[h]^T x)        (scale 1: any 1/sqrt(d_h) is inside W_K)
    f   = W_D^T (W_O^T [W_V[h]^T E^T s_h]_h  (+ x with the skip connection))

through ``torch.nn.functional.scaled_dot_product_attention`` with an explicit ``scale=1.0``: the
query is ``x W_Q[h]`` (one position), the keys ``E W_K[h]``, the values ``E W_V[h]``.
With Proposition 4's pre-layer (weights built with ``prelayer="mean-shift"``; the boolean buffer
``mean_shift``), every token of ``E`` and ``x`` first gets its context's mean added: that layer's
uniform attention (``softmax`` of zero logits) over the context, with identity value and output
maps and a skip connection. ``torch.nn.MultiheadAttention`` cannot hold these weights (it ties ``d_h = d/H``, uses one width
for keys and values, a fixed ``1/sqrt(d_h)`` scale and biases).

The paper authors' ``CustomAttention`` (github.com/smahdavi4/attention-memorization) computes
``softmax(Q K^T / sqrt(d))`` over a sequence whose token 0 is the query, with a mask that keeps
token 0 out of the keys. Their ``Wq, Wk, Wv`` (H, d, ·) and ``Wo`` (H·d_v, d) map to ours as
``Wq = W_Q``, ``Wk = sqrt(d) · W_K``, ``Wv = W_V``, ``Wo = W_O``, with their input
``[x; E]`` (n + 1 tokens) and the output read at token 0; ``W_D`` is their decoder's weight
transposed, with a zero bias (:func:`to_authors`). Multiplying by ``sqrt(d)`` rounds, so their
model reproduces ours to float64's rounding, not bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .errors import InputError
from .limits import require_memory
from .model import MATRICES as _NAMES
from .model import Weights, as_weights, checked_weights


# The dtypes a module holds: those PyTorch computes this model in on the CPU, each rounded to and
# range-checked by export.representable (bfloat16 by its own rounding: NumPy has no bfloat16).
# float8 has no matmul there, and its range is none of these.
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _dtype_names() -> str:
    return ", ".join(str(t) for t in DTYPES[:-1]) + f" or {DTYPES[-1]}"


class MemorizingAttention(nn.Module):
    """One layer of multi-head attention with per-head ``W_Q``, ``W_K`` (H, d, d_h), ``W_V``
    (H, d, d_v), ``W_O`` (H·d_v, d), ``W_D`` (d, d_o), a skip flag and a pre-layer flag
    ``mean_shift`` (buffers, so they travel in the state dict)."""

    def __init__(self, H: int, d: int, d_h: int, d_v: int, d_o: int, skip: bool = False,
                 dtype: torch.dtype = torch.float64, mean_shift: bool = False):
        super().__init__()
        self.W_K = nn.Parameter(torch.zeros(H, d, d_h, dtype=dtype))
        self.W_Q = nn.Parameter(torch.zeros(H, d, d_h, dtype=dtype))
        self.W_V = nn.Parameter(torch.zeros(H, d, d_v, dtype=dtype))
        self.W_O = nn.Parameter(torch.zeros(H * d_v, d, dtype=dtype))
        self.W_D = nn.Parameter(torch.zeros(d, d_o, dtype=dtype))
        self.register_buffer("skip", torch.tensor(bool(skip)))
        self.register_buffer("mean_shift", torch.tensor(bool(mean_shift)))

    @property
    def heads(self) -> int:
        return self.W_K.shape[0]

    def extra_repr(self) -> str:
        H, d, d_h = self.W_K.shape
        return (f"H={H}, d={d}, d_h={d_h}, d_v={self.W_V.shape[2]}, d_o={self.W_D.shape[1]}, "
                f"skip={bool(self.skip)}, mean_shift={bool(self.mean_shift)}, dtype={self.W_K.dtype}")

    def forward(self, E: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``E`` (B, n, d) contexts and ``x`` (B, d) queries → (B, d_o); unbatched (n, d), (d,) → (d_o,)."""
        single = x.dim() == 1
        if single:
            E, x = E[None], x[None]
        # The flags select, never branch: torch.export and torch.compile(fullgraph=True) cannot
        # trace a Python branch on a buffer's value. Both sides are formed; the one not selected
        # is dropped exactly (torch.where), so the result is the branch's to the bit.
        s = torch.softmax(torch.zeros(E.shape[1], dtype=E.dtype, device=E.device), dim=0)
        m = torch.einsum("bnd,n->bd", E, s)                                   # Proposition 4's layer
        E, x = torch.where(self.mean_shift, E + m[:, None, :], E), torch.where(self.mean_shift, x + m, x)
        q = torch.einsum("bd,hdk->bhk", x, self.W_Q)[:, :, None, :]          # (B, H, 1, d_h)
        k = torch.einsum("bnd,hdk->bhnk", E, self.W_K)                        # (B, H, n, d_h)
        v = torch.einsum("bnd,hdv->bhnv", E, self.W_V)                        # (B, H, n, d_v)
        heads = F.scaled_dot_product_attention(q, k, v, scale=1.0)[:, :, 0, :]  # (B, H, d_v)
        o = heads.flatten(1) @ self.W_O                                       # (B, d); B = 0 too
        o = torch.where(self.skip, o + x, o)
        out = o @ self.W_D
        return out[0] if single else out


def to_torch(weights: Weights, dtype: torch.dtype = torch.float64) -> MemorizingAttention:
    """The module holding ``weights`` in ``dtype`` (rounded to it once, to nearest, ties to even;
    high-precision weights too).

    Raises:
        InputError: ``dtype`` is not one of :data:`DTYPES`, or the weights' values leave its range
            (infinite, or flushed to 0 where they matter).
    """
    if not (isinstance(dtype, torch.dtype) and dtype in DTYPES):
        raise InputError(f"dtype: expected {_dtype_names()}, got {dtype!r}"[:200], what="invalid option")
    w = checked_weights(weights)
    from .export import representable
    # Refused where the values do not fit, never inf or 0. The values come rounded once, from
    # NumPy (PyTorch's copy from float64 to float16 or bfloat16 goes through float32); bfloat16's,
    # which NumPy lacks, as float64 numbers that PyTorch's copy then keeps exactly.
    advice = f"use torch.float64, or build from rescaled data (dtype {dtype})"
    kin = {torch.float16: np.dtype(np.float16), torch.float32: np.dtype(np.float32),
           torch.bfloat16: "bfloat16"}.get(dtype, np.dtype(np.float64))
    values = representable(w, kin, advice)
    module = MemorizingAttention(w.H, w.d, w.d_h, w.d_v, w.d_o, w.skip, dtype=dtype,
                                 mean_shift=w.prelayer == "mean-shift")
    with torch.no_grad():
        for name in _NAMES:
            getattr(module, name).copy_(torch.tensor(values[name]))
    return module


def from_torch(module: MemorizingAttention) -> Weights:
    """The module's weights as float64 :class:`~construct.model.Weights` (checked)."""
    if not isinstance(module, MemorizingAttention):
        raise InputError(f"expected a MemorizingAttention module (to_torch, load_state_dict), got "
                         f"{type(module).__name__}", what="invalid module")
    arrays = {name: getattr(module, name).detach().cpu().to(torch.float64).numpy().copy() for name in _NAMES}
    return checked_weights(Weights(**arrays, skip=bool(module.skip),
                                   prelayer="mean-shift" if bool(module.mean_shift) else None))


def load_state_dict(state: dict) -> MemorizingAttention:
    """A module from a state dict (``torch.load(path, weights_only=True)``), shapes read from it.

    The matrices keep their dtype, one of :data:`DTYPES` and the same for all five (a module has
    one: a float64 ``W_D`` beside a float16 ``W_K`` would be rounded to float16 without a word);
    ``construct.export.read_safetensors`` reads float16, float32 and float64 alike.

    Raises:
        InputError: a matrix missing, an unexpected entry, a matrix that is not a tensor of one of
            :data:`DTYPES`, of finite values, of the other matrices' dtype, or a
            ``skip``/``mean_shift`` that is not one boolean; a tensor without plain values
            (:func:`_storage_problem`: sparse, nested, mkldnn, meta, a subclass); then the weights' own checks
            (:func:`construct.model.as_weights`: the shapes).
    """
    if not isinstance(state, Mapping):
        raise InputError(f"expected a state dict (a mapping of names to tensors, as torch.load gives), got "
                         f"{type(state).__name__}", what="invalid state dict")
    matrices = tuple(_NAMES)
    problems = [f"{k}: missing" for k in matrices + ("skip",) if k not in state]
    unexpected = set(state) - set(matrices) - {"skip", "mean_shift"}
    problems += [f"{k}: unexpected entry" for k in sorted(unexpected, key=str)]     # keys of any type
    held: dict[torch.dtype, list[str]] = {}      # the matrices of each dtype a module holds
    for k in matrices:
        v = state.get(k)
        if v is None:
            continue
        if not (isinstance(v, torch.Tensor) and v.is_floating_point()):
            problems.append(f"{k}: {getattr(v, 'dtype', type(v).__name__)}, expected a floating-point tensor")
        elif why := _storage_problem(v):
            problems.append(f"{k}: {why}")
        elif v.dtype not in DTYPES:
            problems.append(f"{k}: {v.dtype}, expected {_dtype_names()}")
        else:
            held.setdefault(v.dtype, []).append(k)
    # The shapes before the values, all five at once: torch.save keeps an expand()ed view as the
    # one value it repeats, so a small file can hold tensors of any shape, and every test of their
    # values would make them whole (the weights' float64 copies too, together).
    tensors = {k: state[k] for ks in held.values() for k in ks}
    require_memory(sum(3 * 8 * v.numel() for v in tensors.values()),
                   "the state dict's " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in tensors.items()))
    problems += [f"{k}: non-finite values (NaN or inf)" for k, v in tensors.items() if not bool(torch.isfinite(v).all())]
    if len(held) > 1:
        problems.append("matrices of several dtypes (" + "; ".join(f"{', '.join(ks)} {t}" for t, ks in held.items())
                        + "): a module holds one dtype")
    for k in ("skip", "mean_shift"):
        v = state.get(k)
        if v is not None and not (isinstance(v, torch.Tensor) and v.dtype == torch.bool and v.dim() == 0):
            problems.append(f"{k}: expected one boolean (a 0-d bool tensor), got {v!r}"[:200])
        elif v is not None and (why := _storage_problem(v)):
            problems.append(f"{k}: {why}")
    if problems:
        raise InputError(problems, what="invalid state dict")
    # The shapes, through the weights' own validation (float64 on the host; the module keeps the dtype).
    as_weights(*(state[k].detach().cpu().double().resolve_neg().numpy() for k in matrices), skip=bool(state["skip"]))
    H, d, d_h = state["W_K"].shape
    d_v, d_o = state["W_V"].shape[2], state["W_D"].shape[1]
    shift = bool(state.get("mean_shift", False))
    module = MemorizingAttention(H, d, d_h, d_v, d_o, bool(state["skip"]), dtype=state["W_K"].dtype,
                                 mean_shift=shift)
    module.load_state_dict({"mean_shift": torch.tensor(shift), **state})     # files from before the flag
    return module


def _storage_problem(v: torch.Tensor) -> str | None:
    """Why ``v`` holds no plain values to read, or None: a nested tensor, a layout other than
    strided (sparse, mkldnn: PyTorch's isfinite, item and copy raise on them), the meta device
    (a shape without values), or a subclass of ``torch.Tensor`` other than ``Parameter`` (a
    ``MaskedTensor``'s numpy raises). A strided view that is not contiguous, one that requires
    grad, or one with the negative bit (values held negated; torch.save keeps it) holds plain values."""
    if type(v) not in (torch.Tensor, torch.nn.Parameter):
        return f"a tensor subclass, {type(v).__name__}; expected a plain torch.Tensor"
    if v.is_nested:
        return "a nested tensor; expected a dense (strided) one"
    if v.layout != torch.strided:
        return f"a {v.layout} tensor; expected a dense (strided) one (to_dense() gives it)"
    if v.is_meta:
        return "a tensor on the meta device, which holds no values"
    return None


def to_authors(weights: Weights) -> dict[str, np.ndarray]:
    """The authors' ``CustomAttention`` parameters for ``weights`` (module docstring), float64:
    ``Wq``, ``Wk``, ``Wv``, ``Wo``, and their decoder's ``weight`` (d_o, d) and ``bias``."""
    w = checked_weights(weights)
    if w.skip:
        raise InputError("the authors' model has no skip connection", what="weights the authors' model cannot hold")
    if w.prelayer is not None:
        raise InputError(f"the authors' model is one layer; these weights have the pre-layer {w.prelayer}",
                         what="weights the authors' model cannot hold")
    a = w.arrays()
    return {"Wq": a["W_Q"], "Wk": a["W_K"] * math.sqrt(w.d), "Wv": a["W_V"], "Wo": a["W_O"],
            "decoder.weight": a["W_D"].T.copy(), "decoder.bias": np.zeros(w.d_o)}
