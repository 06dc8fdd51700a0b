"""The device choice, and float64 on a GPU through CuPy (the ``[gpu]`` extra).

:func:`resolve` turns ``device = "auto" | "cpu" | "gpu"`` into the device that runs and why:
``auto`` takes the GPU only when CuPy imports *and* a device can allocate and compute (probed
with a small product: an importable CuPy without a usable GPU is common), otherwise the CPU.

:class:`CuPyFloat64` is the seam's generic :class:`~construct.arith.base.Arithmetic` on CuPy's
arrays, through array-api-compat's CuPy namespace: the stages run on it unchanged, as they run
on array-api-strict in the tests. Float64 only: CuPy's float64 products call cuBLAS ``dgemm``
and its factorizations cuSOLVER's double routines, which have no TF32 or reduced-precision mode
(TF32 applies to float32 alone); nothing here creates an array of another dtype. The mpmath
path stays on the CPU. See ``docs/gpu.md`` for what is written and what is not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .base import Arithmetic

DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class DeviceChoice:
    """Where a stage runs: ``name`` is ``"cpu"`` or ``"gpu"``; ``why`` says why, for the report."""

    name: str
    why: str


def probe() -> tuple[bool, str]:
    """Whether a GPU can be used through CuPy: ``(True, description)`` or ``(False, reason)``."""
    try:
        import cupy
    except Exception as exc:                              # not installed, or a broken CUDA install
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            return False, "CuPy found no CUDA device"
        a = cupy.arange(4, dtype=cupy.float64)
        if float(a @ a) != 14.0:                          # allocate, launch, copy back
            return False, "the GPU computed a wrong product"
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        free, total = cupy.cuda.Device().mem_info
    except Exception as exc:                              # no driver, no device, out of memory
        return False, f"CuPy cannot use a GPU ({type(exc).__name__}: {exc})"
    name = props["name"].decode() if isinstance(props.get("name"), bytes) else props.get("name", "GPU")
    return True, f"{name}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free (CuPy {cupy.__version__})"


def resolve(device: str) -> DeviceChoice:
    """The device that runs for the option ``device``.

    Raises:
        InputError: an unknown option, or ``"gpu"`` when no GPU can be used (with the reason).
    """
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}", what="invalid option")
    if device == "cpu":
        return DeviceChoice("cpu", "asked for (--device cpu)")
    ok, what = probe()
    if ok:
        return DeviceChoice("gpu", f"{'asked for' if device == 'gpu' else 'auto'}: {what}")
    if device == "gpu":
        raise InputError(f"--device gpu: no GPU can be used: {what}. Install the [gpu] extra on a machine "
                         "with a CUDA GPU, or use --device cpu", what="invalid option")
    return DeviceChoice("cpu", f"auto: {what}")


class CuPyFloat64(Arithmetic):
    """Float64 on the current CUDA device, through CuPy (generic kernels of the base class)."""

    def __init__(self):
        import array_api_compat.cupy as xp
        import cupy
        super().__init__(xp)
        self._cupy = cupy

    @property
    def name(self) -> str:
        return "float64 (cupy)"

    def to_numpy(self, A) -> np.ndarray:
        if isinstance(A, np.ndarray):
            return A
        return self._cupy.asnumpy(A)

    def free_bytes(self) -> int:
        """Free memory on the device, counting what CuPy's pool holds but does not use."""
        pool = self._cupy.get_default_memory_pool()
        free, _ = self._cupy.cuda.Device().mem_info
        return int(free + pool.free_bytes())


def require_device_memory(ar: Arithmetic, needed: int, what: str) -> None:
    """Refuse, with the estimate, a job that will not fit in the device's free memory."""
    free = getattr(ar, "free_bytes", None)
    if free is None:
        return
    available = free()
    if needed > available:
        raise InputError(f"{what} needs about {needed / 2**30:.1f} GiB on the GPU; "
                         f"{available / 2**30:.1f} GiB are free. Use --device cpu or fewer examples",
                         what="too large")


def arithmetic(choice: DeviceChoice, bits: int | None):
    """The arithmetic for a device choice and weights of ``bits`` bits (None: float64). On a GPU
    only float64: other precisions (mpmath) run on the CPU."""
    from . import for_bits
    if choice.name == "gpu" and bits is None:
        return CuPyFloat64()
    return for_bits(bits)
