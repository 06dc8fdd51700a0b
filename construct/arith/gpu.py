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
from ..signals import signals_held
from .base import Arithmetic, RowRank

DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class DeviceChoice:
    """Where a stage runs: ``name`` is ``"cpu"`` or ``"gpu"``; ``why`` says why, for the report."""

    name: str
    why: str


def probe() -> tuple[bool, str]:
    """Whether a GPU can be used through CuPy: ``(True, description)`` or ``(False, reason)``."""
    try:
        with signals_held():            # an extension interrupted as it loads fails as an ImportError
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
        return DeviceChoice("cpu", "device = cpu, the default")
    ok, what = probe()
    if ok:
        return DeviceChoice("gpu", f"{'asked for' if device == 'gpu' else 'auto'}: {what}")
    if device == "gpu":
        raise InputError(f"--device gpu: no GPU can be used: {what}. Install the [gpu] extra on a machine "
                         "with a CUDA GPU, or use --device cpu", what="invalid option")
    return DeviceChoice("cpu", f"auto: {what}")


class CuPyFloat64(Arithmetic):
    """Float64 on the current CUDA device, through CuPy: the base class's generic kernels, with
    cuBLAS's triangular solves, cuSOLVER's QR for the row-space factor's panels and for ``R``,
    and Lanczos (on products and triangular solves with ``R``) for ``R``'s extreme singular
    values."""

    # Columns per panel of the row-space factor's update (construct.arith.blocked), by the
    # number of fitted rows: a panel costs about thirty kernel launches whatever its width, so
    # wider panels as R grows (H100, T = 7937: 128 columns 22.8 s, 256 16.8 s, 512 16.3 s).
    @staticmethod
    def factor_panel(a: int) -> int:
        return 256 if a < 4096 else 512 if a < 16384 else 1024

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

    # -- kernels ----------------------------------------------------------------------------

    def head_values(self, Z, W_V):
        """As the base class's, a block of rows at a time: the heads' columns are regrouped by a
        copy, of one block rather than of all of ``Z`` (27 GB at T = 40,301 ran out of memory)."""
        T, F = Z.shape
        rows = max(1, (1 << 27) // max(F, 1))            # about 1 GB of Z per block
        if T <= rows:
            return super().head_values(Z, W_V)
        H, _, d_v = W_V.shape
        out = self._cupy.empty((T, H * d_v), dtype=self._cupy.float64)
        for lo in range(0, T, rows):
            out[lo:lo + rows] = super().head_values(Z[lo:lo + rows], W_V)
        return out

    def qr_r(self, A):
        return self._cupy.linalg.qr(A, mode="r")

    def tri_solve(self, R, B, trans: bool = False):
        from cupyx.scipy.linalg import solve_triangular
        return solve_triangular(R, B, trans=1 if trans else 0, lower=False)

    def householder(self, P):
        from cupyx.scipy.linalg import solve_triangular

        from .base import compact_t
        cp = self._cupy
        k = P.shape[1]
        h, tau = cp.linalg.qr(P, mode="raw")
        if h.shape != P.shape:                            # NumPy's convention: h is transposed
            h = h.T
        Y = cp.ascontiguousarray(h[k:])
        # T^{-1}'s inverse by one triangular solve (a panel's cost is mostly its kernels' launches)
        T = compact_t(cp, Y, tau, lambda A: solve_triangular(A, cp.eye(k), lower=False))
        return cp.triu(h[:k]), Y, T

    def _gemm(self, A, lda: int, B, ldb: int, m: int, n: int, k: int):
        """Column-major ``A (m × k) @ B (k × n)`` by cuBLAS ``dgemm`` on the arrays' memory with
        the given leading dimensions; returns the C-ordered (n, m) array holding the product's
        transpose."""
        from cupy.cuda import device
        from cupy_backends.cuda.libs import cublas
        cp = self._cupy
        out = cp.empty((n, m), dtype=cp.float64)
        if 0 in (m, n):
            return out
        if k == 0:
            return cp.zeros((n, m), dtype=cp.float64)
        one, zero = np.array(1.0), np.array(0.0)
        cublas.dgemm(device.get_cublas_handle(), cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, m, n, k,
                     one.ctypes.data, A.data.ptr, lda, B.data.ptr, ldb, zero.ctypes.data, out.data.ptr, m)
        return out

    def prefix_times(self, Z, a: int, f: int, B):
        """``Z[:a, :f] @ B`` without copying ``Z[:a, :f]``: in column-major terms ``B^T (k × f)``
        times ``Z[:a, :f]^T`` (f × a, leading dimension ``Z``'s row length)."""
        if not Z.flags.c_contiguous:
            return super().prefix_times(Z, a, f, B)
        B = self._cupy.ascontiguousarray(B)
        return self._gemm(B, B.shape[1], Z, Z.shape[1], B.shape[1], a, f)

    def times_prefix(self, C, Z, a: int, f: int):
        """``C @ Z[:a, :f]`` without copying ``Z[:a, :f]``: column-major ``Z[:a, :f]^T (f × a)``
        times ``C^T`` (a × k)."""
        if not Z.flags.c_contiguous:
            return super().times_prefix(C, Z, a, f)
        C = self._cupy.ascontiguousarray(C)
        return self._gemm(Z, Z.shape[1], C, a, f, C.shape[0], a)

    def rows_r_factor(self, Z, overwrite: bool = False):
        """``R`` (T, T) of ``Z^T = Q R`` for ``Z`` (T, F), ``F ≥ T``. With ``overwrite`` (and ``Z``
        C-contiguous) cuSOLVER's ``geqrf`` runs on ``Z``'s own memory, which holds ``Z^T`` in
        column-major order, so that only ``R`` is allocated beside it."""
        cp = self._cupy
        T, F = Z.shape
        if not (overwrite and Z.flags.c_contiguous):
            return self.qr_r(Z.T)
        from cupy.cuda import device
        from cupy_backends.cuda.libs import cusolver
        handle = device.get_cusolver_handle()
        lwork = cusolver.dgeqrf_bufferSize(handle, F, T, Z.data.ptr, F)
        work = cp.empty(lwork, dtype=cp.float64)
        tau = cp.empty(T, dtype=cp.float64)
        info = cp.zeros((), dtype=cp.int32)
        cusolver.dgeqrf(handle, F, T, Z.data.ptr, F, tau.data.ptr, work.data.ptr, lwork, info.data.ptr)
        del work, tau
        if int(info) != 0:
            from ..errors import ConstructionError
            raise ConstructionError(f"cuSOLVER geqrf failed (info = {int(info)}) factoring Z")
        return cp.triu(Z[:, :T].T)                        # column j of Z^T's factor is row j of Z

    def triangular_extremes(self, R) -> tuple[float, float]:
        """``σ_max(R)`` and ``σ_min(R)``: Lanczos (``eigsh``) on ``R^T R`` and on ``(R^T R)^{-1}``
        (two triangular solves a step); singular values of ``R`` for small ``R`` or where Lanczos
        meets no finite answer (a singular ``R``)."""
        cp = self._cupy
        n = R.shape[0]
        if n <= 256:
            s = self.to_host(self.svdvals(R))
            return float(s[0]), float(s[-1])
        from cupyx.scipy.sparse.linalg import LinearOperator, eigsh

        def largest(matvec) -> float:
            op = LinearOperator((n, n), matvec=matvec, dtype=cp.float64)
            v0 = cp.full(n, 1.0 / np.sqrt(n))
            return float(eigsh(op, k=1, which="LM", v0=v0, return_eigenvectors=False)[0])

        with np.errstate(all="ignore"):
            lam_max = largest(lambda v: R.T @ (R @ v))
            inv_min = largest(lambda v: self.gram_solve(R, v))
        if not (np.isfinite(lam_max) and np.isfinite(inv_min) and inv_min > 0):
            s = self.to_host(self.svdvals(R))
            return float(s[0]), float(s[-1])
        return float(np.sqrt(lam_max)), float(1.0 / np.sqrt(inv_min))

    def row_rank(self, Z, reduction=None, overwrite: bool = False, sigma_above: float | None = None) -> RowRank:
        """Rank of ``Z`` (T rows) from the extremes of ``R`` (``R^T R = Z Z^T``): the row
        reduction's when given, else :meth:`rows_r_factor`'s; from the singular values of ``Z``
        when it has fewer columns than rows."""
        T = Z.shape[0]
        if Z.shape[1] < T:
            return super().row_rank(Z)
        R = getattr(reduction, "R", None)
        if R is None or R.shape[0] != T:
            R = self.rows_r_factor(Z, overwrite)
        s_max, s_min = self.triangular_extremes(R)
        tol = self.rank_tol(s_max, Z.shape)
        rank = T if s_min > tol else self.numerical_rank(R)[0]
        return RowRank(rank, s_max, s_min, tol)


def device_memory_estimate(data, H: int) -> int:
    """Bytes a float64 GPU build or verify of ``data`` on ``H`` heads holds at its peak, about:
    ``Z`` (T, H·d) once, one ``T × T`` triangular factor, the data three times over, a scratch
    of ``H·d`` columns by 512 rows (panels, blocks), and every head's ``d × d`` key map (the
    rounding detector's second evaluation)."""
    T, F = data.T, H * data.d
    per_example = 3 * (data.n * data.d + data.d + data.d_o)
    return 8 * (T * F + T * T + T * per_example + 512 * F + F * data.d) + (1 << 27)


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
