"""LAPACK and BLAS on a view of a larger Fortran array, in place, through SciPy's Cython interface.

SciPy's Python wrappers of LAPACK take contiguous arrays only: a view ``buf[:a, :a]`` of a
Fortran array ``buf`` (T, T), whose columns lie ``T`` entries apart, is copied in and out on
every call. The row-space factor (:mod:`construct.arith.factor`) grows its triangular factor in
such a view, a group of rows at a time, and without this it copied the whole factor once per
head to give it its new leading dimension (about 4 s of a 76 s build at T = 7937, and a second
T × T buffer). :mod:`scipy.linalg.cython_lapack` and :mod:`scipy.linalg.cython_blas` export the
routines of the very LAPACK and BLAS that SciPy's wrappers call, with the leading dimension an
argument; their addresses are taken from the modules' capsules, and ctypes calls them without
the GIL, as the wrappers do.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_double, c_int, c_void_p

import numpy as np
from scipy.linalg import cython_blas, cython_lapack

_int_p, _double_p = POINTER(c_int), POINTER(c_double)
_capsule_name = ctypes.PYFUNCTYPE(c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))


def _routine(module, name: str, *argtypes):
    capsule = module.__pyx_capi__[name]
    return ctypes.CFUNCTYPE(None, *argtypes)(_capsule_pointer(capsule, _capsule_name(capsule)))


# void dtpqrt(int *m, int *n, int *l, int *nb, d *a, int *lda, d *b, int *ldb, d *t, int *ldt, d *work, int *info)
_dtpqrt = _routine(cython_lapack, "dtpqrt", _int_p, _int_p, _int_p, _int_p, c_void_p, _int_p, c_void_p, _int_p,
                   c_void_p, _int_p, c_void_p, _int_p)
# void dtrsm(char *side, char *uplo, char *transa, char *diag, int *m, int *n, d *alpha, d *a, int *lda,
#            d *b, int *ldb)
_dtrsm = _routine(cython_blas, "dtrsm", c_char_p, c_char_p, c_char_p, c_char_p, _int_p, _int_p, _double_p,
                  c_void_p, _int_p, c_void_p, _int_p)

_INT_MAX = 2**31 - 1


def _leading_dimension(A: np.ndarray, written: bool = False) -> int:
    """The column stride of a float64 Fortran-ordered matrix or view: its rows adjacent, its
    columns apart by at least its rows (none overlapping, none reversed); ``written``: one
    LAPACK writes, which must be writeable."""
    rows, columns = A.shape if A.ndim == 2 else (0, 0)
    if (A.dtype != np.float64 or A.ndim != 2 or (rows > 1 and A.strides[0] != 8)
            or (columns > 1 and (A.strides[1] % 8 or A.strides[1] < 8 * rows))):
        raise ValueError("a float64 matrix whose rows are adjacent and whose columns do not overlap "
                         "(a Fortran array or a view of one) is needed")
    if written and not A.flags.writeable:
        raise ValueError("a writeable matrix is needed: LAPACK writes it")
    ld = max(1, rows, A.strides[1] // 8 if columns > 1 else rows)
    if max(ld, columns) > _INT_MAX:                  # each argument a 32-bit integer (offsets are not)
        raise ValueError(f"a matrix of {rows} × {columns} (leading dimension {ld}) is beyond LAPACK's "
                         "32-bit arguments")
    return ld


def tpqrt(R: np.ndarray, B: np.ndarray, nb: int) -> np.ndarray:
    """``qr([R; B])`` in place (LAPACK ``tpqrt`` with ``l = 0``): ``R`` (n, n) upper triangular, a
    Fortran view of any column stride, becomes the new triangular factor (its strict lower part is
    not touched); ``B`` (m, n), a Fortran array, the reflectors. Returns the block reflectors' ``T``
    (nb, n), what ``tpmqrt`` applies them with.

    Raises:
        ValueError: arrays of other layouts or shapes; LAPACK's error code.
    """
    n, m = R.shape[1], B.shape[0]
    if (R.shape[0] != n or B.shape[1] != n or not B.flags.f_contiguous or B.dtype != np.float64
            or not B.flags.writeable):
        raise ValueError("tpqrt needs R (n, n) and a writeable Fortran float64 B (m, n)")
    ld = _leading_dimension(R, written=True)
    if n == 0 or m == 0:
        return np.zeros((max(1, nb), n), order="F")
    nb = max(1, min(nb, n))
    T = np.zeros((nb, n), order="F")                # (tpmqrt reads its blocks' triangles only)
    work = np.empty(nb * n)
    info = c_int(0)
    _dtpqrt(byref(c_int(m)), byref(c_int(n)), byref(c_int(0)), byref(c_int(nb)), R.ctypes.data,
            byref(c_int(ld)), B.ctypes.data, byref(c_int(max(1, m))), T.ctypes.data,
            byref(c_int(nb)), work.ctypes.data, byref(info))
    if info.value != 0:
        raise ValueError(f"tpqrt: argument {-info.value} is invalid")
    return T


def tri_solve(R: np.ndarray, rhs: np.ndarray, trans: str = "N") -> np.ndarray:
    """``R^{-1} rhs`` (``R^{-T} rhs`` with ``trans="T"``) for ``R`` (a, a) upper triangular, a
    Fortran view of any column stride (its strict lower part is not read); ``rhs`` (a,) or (a, k).
    A new array: ``rhs`` is not changed."""
    a = R.shape[0]
    if R.shape != (a, a) or rhs.ndim not in (1, 2) or rhs.shape[0] != a or trans not in ("N", "T"):
        raise ValueError("tri_solve needs R (a, a), rhs (a,) or (a, k), and trans N or T")
    ld = _leading_dimension(R)
    X = np.array(rhs if rhs.ndim == 2 else rhs[:, None], dtype=np.float64, order="F")
    if a and X.shape[1]:
        _dtrsm(b"L", b"U", trans.encode(), b"N", byref(c_int(a)), byref(c_int(X.shape[1])), byref(c_double(1.0)),
               R.ctypes.data, byref(c_int(ld)), X.ctypes.data, byref(c_int(a)))
    return X if rhs.ndim == 2 else X[:, 0]
