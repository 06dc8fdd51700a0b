"""Double-word enclosures in float64: the outputs of the exact model to about ``u²``.

On shared contexts the readout's weights are of size ``1/σ_min(Z)``, and a float64 enclosure of
the attention (relative radius about ``u`` per probability) bounds the outputs' error only by
``u·|Z|·|B|`` (about 1e-5 at H = 64, n = 32, d = 64), far above the error the weights have; on
independent contexts the same slack reaches 1e-8 at H = 512. Here
every quantity is a *double word*: an unevaluated sum ``hi + lo`` of two floats with a radius,
``|exact − (hi + lo)| ≤ rad`` elementwise (:class:`DW`), so the radius of the attention is about
``u²`` relative and the bound on ``max |f − y|`` comes down by the same factor.

The tools, all in IEEE-754 double arithmetic in round-to-nearest, with every rounding bounded:

- error-free transformations: ``two_sum`` (Knuth) and ``two_prod`` (Dekker's splitting, no FMA
  needed); exact barring overflow and underflow, whose cost is added as an absolute slack;
- ``add``, ``mul``, ``div`` and ``exp`` of double words with a *running* error bound: each
  rounding of the standard model (``|fl(a ∘ b) − a ∘ b| ≤ u|fl(a ∘ b)|/(1 − u)``) and each
  dropped term is bounded from the computed values, and input radii are propagated; nothing
  relies on a published constant;
- products ``X·A`` with ``X`` float64 and ``A`` a double word, split into slices of at most 23
  significant bits on a common grid per row (column) (Rump–Ogita–Oishi's extraction; Ozaki's
  scheme): each slice product of up to 256 terms is then computed *exactly* by BLAS, in any
  summation order, with or without FMA; the remainders are bounded.

For shared contexts ``E``, the model is ``f(t) = Σ_h s_h(t)^T c_h (+ x(t)^T W_D)`` with
``s_h(t) = softmax(X A_h)``, ``A_h = W_Q,h W_K,h^T E^T`` and ``c_h = E W_V,h W_O,h W_D``:
:func:`shared_outputs` encloses it. :func:`outputs` also takes one context per example.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

U = 2.0 ** -53
TINY = 2.0 ** -1074
# Absolute slack per product that may underflow: a product below 2^-969 (where Dekker's
# splitting stops being exact) contributes less than this even if dropped altogether.
_UNDER = 2.0 ** -960
_SPLITTER = 2.0 ** 27 + 1
_STD = 1 + 16 * U                # inflation of a nonnegative bound past its own roundings (up to 16)


@dataclass
class DW:
    """Arrays ``hi``, ``lo``, ``rad`` of one shape: every exact value lies in
    ``[hi + lo − rad, hi + lo + rad]``."""

    hi: np.ndarray
    lo: np.ndarray
    rad: np.ndarray

    @classmethod
    def exact(cls, x) -> DW:
        x = np.asarray(x, dtype=np.float64)
        return cls(x, np.zeros_like(x), np.zeros_like(x))

    def magnitude(self) -> np.ndarray:
        """An upper bound on ``|hi + lo|`` (not including the radius)."""
        out = np.abs(self.hi) + np.abs(self.lo)
        out *= 1 + 2 * U
        return out

    def __getitem__(self, key) -> DW:
        return DW(self.hi[key], self.lo[key], self.rad[key])

    def scaled(self, k) -> DW:
        """``2^k`` times this (``k`` integer, elementwise); a result below the normal range
        rounds, which ``TINY`` per part covers."""
        return DW(np.ldexp(self.hi, k), np.ldexp(self.lo, k), np.ldexp(self.rad, k) + 2 * TINY)


def two_sum(a, b):
    """``a + b = s + e`` exactly (Knuth), for finite ``a + b``."""
    s = a + b
    bb = s - a
    if np.ndim(s) == 0:
        return s, (a - (s - bb)) + (b - bb)
    # The same operations in the same order, into arrays made here: at the block sizes used
    # (arrays of about 1 MB) each fresh array costs more than the arithmetic on it.
    e = s - bb
    np.subtract(a, e, out=e)
    np.subtract(b, bb, out=bb)
    e += bb
    return s, e


def _split(a):
    c = _SPLITTER * a
    if np.ndim(c) == 0:
        hi = c - (c - a)
        return hi, a - hi
    hi = c - a
    np.subtract(c, hi, out=hi)                       # c − (c − a)
    np.subtract(a, hi, out=c)                        # a − hi
    return hi, c


def two_prod(a, b):
    """``a·b = p + e`` exactly (Dekker), for ``|a|, |b| < 2^996`` and no underflow."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    if np.ndim(p) == 0:
        return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl
    e = ah * bh                                      # ((ah·bh − p) + ah·bl + al·bh) + al·bl
    e -= p
    t = ah * bl
    e += t
    np.multiply(al, bh, out=t)
    e += t
    np.multiply(al, bl, out=t)
    e += t
    return p, e


def _on_scalars(op, a: DW, b: DW) -> DW:
    """``op`` on two double words of one value each, as arrays of one element (the in-place
    steps of :func:`add` and :func:`mul` need arrays to write into)."""
    one = op(*(DW(*(np.reshape(v, 1) for v in (x.hi, x.lo, x.rad))) for x in (a, b)))
    return DW(one.hi[0], one.lo[0], one.rad[0])


def add(a: DW, b: DW) -> DW:
    if np.ndim(a.hi) == 0 and np.ndim(b.hi) == 0:
        return _on_scalars(add, a, b)
    s, e = two_sum(a.hi, b.hi)
    t = a.lo + b.lo
    e += t                                           # e2 = e + t
    hi, lo = two_sum(s, e)
    np.abs(t, out=t)                                 # err = U·(|t| + |e2|)
    t += np.abs(e, out=s)
    t *= U
    rad = a.rad + b.rad
    rad += t
    rad *= _STD
    return DW(hi, lo, rad)


def mul(a: DW, b: DW) -> DW:
    if np.ndim(a.hi) == 0 and np.ndim(b.hi) == 0:
        return _on_scalars(mul, a, b)
    p, e = two_prod(a.hi, b.hi)
    t1, t2 = a.hi * b.lo, a.lo * b.hi
    t = t1 + t2
    e += t                                           # e2 = e + t
    hi, lo = two_sum(p, e)
    # err = U·(|t1| + |t2| + |t| + |e2|) + |a.lo·b.lo| + _UNDER
    err = np.abs(t1, out=t1)
    err += np.abs(t2, out=t2)
    err += np.abs(t, out=t)
    err += np.abs(e, out=e)
    err *= U
    err += np.abs(np.multiply(a.lo, b.lo, out=t2), out=t2)
    err += _UNDER
    # rad = |a|·b.rad + |b|·a.rad + a.rad·b.rad + err
    rad = a.magnitude() * b.rad
    rad += np.multiply(b.magnitude(), a.rad, out=t)
    rad += np.multiply(a.rad, b.rad, out=t)
    rad += err
    rad *= _STD
    return DW(hi, lo, rad)


def div(n: DW, d: DW) -> DW:
    """``n / d`` where ``|d| > d.rad`` (``rad = inf`` elsewhere)."""
    q = n.hi / d.hi
    p, e = two_prod(q, d.hi)
    r1 = n.hi - p
    r2 = r1 - e
    r3 = r2 + n.lo
    qd = q * d.lo
    rho = r3 - qd
    err_rho = U * (np.abs(r1) + np.abs(r2) + np.abs(r3) + np.abs(qd) + np.abs(rho)) * _STD + _UNDER
    ql = rho / d.hi
    hi, lo = two_sum(q, ql)
    d_low = (np.abs(d.hi) - np.abs(d.lo)) * (1 - 4 * U)                # ≤ |d.hi + d.lo|
    own = ((err_rho + np.abs(d.hi) * U * np.abs(ql) * _STD + np.abs(ql * d.lo) * _STD) / d_low * _STD
           + TINY * (2 + np.abs(d.hi) / d_low))                   # ql may round below the normal range
    # the inputs' radii: |n'/d' − n/d| ≤ (n.rad + |n/d|·d.rad) / (|d| − d.rad)
    room = (d_low - d.rad) * (1 - 2 * U)
    q_mag = (np.abs(hi) + np.abs(lo) + own) * _STD
    with np.errstate(divide="ignore", invalid="ignore"):
        prop = np.where(room > 0, (n.rad + q_mag * d.rad) / room * _STD, np.inf)
    return DW(hi, lo, (own + prop) * _STD)


def _fraction_dw(value: Fraction) -> tuple[float, float, float]:
    """``value`` as ``hi + lo`` and an upper bound on what is left."""
    hi = float(value)
    lo = float(value - Fraction(hi))
    rest = abs(value - Fraction(hi) - Fraction(lo))
    return hi, lo, float(rest) * 2 + TINY


# ln 2 = LN2_HI + LN2_MID + LN2_LO + ζ, |ζ| ≤ 6e-43; LN2_HI has 33 significant bits, so k·LN2_HI
# is exact for |k| < 2^20 (tests/test_dword.py checks these digits against mpmath).
LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
LN2_MID = float.fromhex("0x1.a39ef35793c76p-33")
LN2_LO = float.fromhex("0x1.cc01f97b57a08p-87")
LN2_REST = 6e-43
# exp(x) = 2^q · 2^(j/2^_STEPS) · exp(r) with k = 2^_STEPS·q + j the integer nearest x·2^_STEPS/ln 2
# and |r| ≤ ln 2 / 2^(_STEPS+1) ≈ 0.00135.
_STEPS = 8
_SCALE_BY = 2.0 ** _STEPS * 1.4426950408889634                  # 2^8 / ln 2, rounded: it only picks k
_TAYLOR = [_fraction_dw(Fraction(1, math.factorial(i))) for i in range(5)]      # 1/i!, i ≤ 4, in double words
_TAIL = [1.0 / math.factorial(i) for i in range(5, 10)]                          # 1/i!, 5 ≤ i ≤ 9, float64
# Below this, exp(x) < 2^-990: enclosed by [0, 2^-990] without computing it.
_EXP_FLOOR = -690.0


@functools.cache
def _exp2_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``2^(j/256)`` for ``j = 0..255`` as ``hi + lo`` and a bound on what is left.

    In integers scaled by ``F = 2^200``: from ``x_0 = 2^j·F`` (exact), eight integer square
    roots ``x_{i+1} = ⌊√(x_i·F)⌋``, each of ``v_i = 2^(j/2^i)·F``. If ``v_i − e_i ≤ x_i ≤ v_i``,
    then ``√(x_i F) ≥ v_{i+1} − e_i·F/(2√(x_i F)) ≥ v_{i+1} − e_i/2`` (as ``x_i ≥ F``), so
    ``e_{i+1} ≤ e_i/2 + 1`` and ``e_8 < 2``: ``2^(j/256)`` lies in ``[x_8, x_8 + 2]·2^-200``.
    Integers of at most 656 bits (``x_0·F`` at ``j = 255``; a few milliseconds for the table;
    the 256th root of ``2^(j + 30720)`` it was once taken from took a quarter of a second), and
    integers only: the table is built at ``exp``'s first use, in whichever threads call it, and
    mpmath's working precision is one setting for the whole process.
    """
    bits = 200
    hi, lo, rest = (np.empty(2 ** _STEPS) for _ in range(3))
    for j in range(2 ** _STEPS):
        x = 1 << (j + bits)
        for _ in range(_STEPS):
            x = math.isqrt(x << bits)
        hi[j], lo[j], r = _fraction_dw(Fraction(x, 1 << bits))
        rest[j] = (r + 2.0 ** (1 - bits)) * _STD
    return hi, lo, rest


def _tail(rho: np.ndarray, lo_rad: np.ndarray, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Σ_{i≥5} r^i/i!`` for every ``r`` within ``lo_rad`` of ``rho`` (``|r| ≤ reach ≤ 0.005``):
    the degree-9 polynomial at ``rho`` in float64, and a bound on the rest (``inf`` beyond).

    - its roundings: the Horner sum of ``1/i!`` (each rounded) times ``rho^5``, at most 14
      roundings of terms summing to at most ``1.01·|rho|^5/120``;
    - moving from ``rho`` to ``r``: ``|r − rho|`` times the derivative, at most ``reach^4/4!·e^reach``;
    - Taylor's remainder ``reach^10/10!·e^reach``; ``e^reach ≤ 1.01``;
    - what underflow may take: ``TINY`` per operation.
    """
    q = np.full_like(rho, _TAIL[-1])
    for c in reversed(_TAIL[:-1]):
        q = q * rho + c
    rho2 = rho * rho
    t = q * (rho2 * rho2 * rho)
    with np.errstate(over="ignore", invalid="ignore"):
        bound = (32 * U * reach ** 5 / 100 + lo_rad * reach ** 4 / 24 * 1.01
                 + reach ** 10 / math.factorial(10) * 1.01 + 16 * TINY) * _STD
    return t, np.where(reach <= 0.005, bound, np.inf)


def exp(x: DW) -> DW:
    """``exp`` of every value in ``x`` (elementwise), for ``x ≤ 700``.

    At the centre ``hi + lo``: ``r = hi + lo − k ln 2/256`` with ``ln 2`` to 140 bits, then
    ``exp(r)`` as ``Σ_{i≤4} r^i/i!`` in double words plus the rest of the series in float64
    (:func:`_tail`, whose terms are below ``u·|r|^5/5!``), times ``2^(j/256)`` from a table in
    double words (:func:`_exp2_table`) and ``2^q``. The input's radius ``ρ ≤ 1`` then adds
    ``exp(x)·(e^ρ − 1) ≤ exp(x)·(ρ + ρ²)``.
    """
    # Clamped only where the whole interval lies below the floor (a NaN part never is).
    small = x.hi + (np.abs(x.lo) + x.rad) * _STD < _EXP_FLOOR
    # Unproven (rad = inf): not finite, above 700, or so far below the floor that only a radius
    # beyond 1 (itself unproven) keeps the interval above it.
    bad = ~(np.isfinite(x.hi) & np.isfinite(x.lo) & np.isfinite(x.rad) & (x.hi + x.lo <= 700)
            & (x.hi + x.lo >= 2 * _EXP_FLOOR)) & ~small
    off = small | bad
    xh, xl = np.where(off, 0.0, x.hi), np.where(off, 0.0, x.lo)
    k = np.rint((xh + xl) * _SCALE_BY)                                  # |k| < 2^19
    kc = k * (LN2_HI / 2 ** _STEPS)                                    # exact (see LN2_HI)
    p, e = two_prod(k, LN2_MID / 2 ** _STEPS)
    klo = k * (LN2_LO / 2 ** _STEPS)
    zero = np.zeros_like(xh)
    r = add(DW(xh, xl, zero), DW(-kc, zero, zero))
    r = add(r, DW(-p, -e, zero))
    r = add(r, DW(-klo, zero, (U * np.abs(klo) + np.abs(k) * LN2_REST / 2 ** _STEPS) * _STD + TINY))
    reach = (np.abs(r.hi) + np.abs(r.lo) + r.rad) * _STD                # |r| for every value
    t, t_rad = _tail(r.hi, (np.abs(r.lo) + r.rad) * _STD, reach)
    hi, lo, rest = _TAYLOR[4]
    acc = DW(np.full_like(xh, hi), np.full_like(xh, lo), np.full_like(xh, rest))
    for i in range(3, -1, -1):
        hi, lo, rest = _TAYLOR[i]
        acc = add(mul(acc, r), DW(np.full_like(xh, hi), np.full_like(xh, lo), np.full_like(xh, rest)))
    acc = add(acc, DW(t, zero, t_rad))
    ki = k.astype(np.int64)
    j = ki & (2 ** _STEPS - 1)
    acc = mul(acc, DW(*(part[j] for part in _exp2_table())))
    out = acc.scaled(ki >> _STEPS)
    # the input's radius: |exp(x') − exp(x)| ≤ exp(x)·(e^ρ − 1) ≤ exp(x)·(ρ + ρ²) for ρ ≤ 1
    rho = np.where(off, 0.0, x.rad)
    with np.errstate(invalid="ignore"):
        spread = np.where(rho == 0, 0.0, np.where(rho <= 1, (out.magnitude() + out.rad) * (rho + rho * rho) * _STD,
                                                   np.inf))
        rad = (out.rad + spread) * _STD
    rad = np.where(np.isnan(rad), np.inf, rad)
    return DW(np.where(off, 0.0, out.hi), np.where(off, 0.0, out.lo),
              np.where(bad, np.inf, np.where(small, 2.0 ** -990, rad)))


# --- exact products by slices ------------------------------------------------------------------

# Extraction constant: slices hold at most 23 significant bits on their grid.
_BETA = 31


def _slices(M: np.ndarray, axis: int, count: int) -> tuple[list[np.ndarray], np.ndarray]:
    """``M = Σ slices + rest`` exactly (Rump–Ogita–Oishi's extraction along ``axis``).

    With ``2^e`` the first power of two above every entry left along ``axis`` and
    ``σ = 2^(e+31)``, the slice ``fl(fl(rest + σ) − σ)`` is ``rest`` rounded to a multiple of
    ``ulp`` near ``σ`` (at least ``2^(e−22)``), and ``rest`` minus it is exact and at most
    ``2^(e−22)``: each slice is a multiple of ``2^(e−22)`` of size at most ``2^e(1 + 2^-21)``, at most
    23 significant bits on that grid, and each further slice starts 22 bits lower.
    """
    rest = np.array(M, dtype=np.float64, copy=True)
    out = []
    for _ in range(count):
        mu = np.max(np.abs(rest), axis=axis, keepdims=True)
        if not np.any(mu):
            break
        _, e = np.frexp(mu)                                   # mu < 2^e exactly
        sigma = np.where(mu > 0, np.ldexp(1.0, e + _BETA), 0.0)
        piece = (rest + sigma) - sigma
        rest = rest - piece
        out.append(piece)
    return out, rest


# Terms per exact slice product, and slices per factor (see exact_matmul): what five slices of
# 22 bits leave is below 2^-110 of a row's (column's) largest entry. Logits reach |x|·|A| ~ 1e8
# at H = 256 and their error is multiplied by readout weights of 1e7 over H·n terms: 2^-88 (four
# slices) left a radius of 2e-8 there.
_TERMS = 256
_X_SLICES, _LO_SLICES = 5, 3


def exact_matmul(X: np.ndarray, A: DW) -> DW:
    """``X·A`` (X float64 (…, T, k), A a double word (…, k, m)) as a double word; leading axes
    are batch axes, broadcast as by ``@``.

    ``X`` is cut into five slices by row and ``A.hi`` into five, ``A.lo`` into three, by column
    (:func:`_slices`). A product of two slices is a sum of at most 256 terms, each a multiple of
    ``g = 2^(e_x + e_a − 44)`` of size at most ``2^(e_x + e_a)(1 + 2^-20)``: every partial sum is
    a multiple of ``g`` below ``256·2^44·(1 + 2^-20) g < 2^53 g``, so BLAS computes it exactly, in
    any order, with or without FMA (longer products go 256 terms at a time). What the slices leave
    (``2^-110`` of each row's or column's largest entry) and ``A.rad`` are bounded by products of
    magnitudes.
    """
    T, k = X.shape[-2:]
    shape = np.broadcast_shapes(X.shape[:-2], A.hi.shape[:-2]) + (T, A.hi.shape[-1])
    hi = np.zeros(shape)
    lo = np.zeros_like(hi)
    lo_err = np.zeros_like(hi)
    rest = np.zeros_like(hi)
    sums = 0                                                  # accumulations into lo
    under = 0.0                                               # what underflow may take
    for k0 in range(0, k, _TERMS):                            # more terms: 256 at a time
        ks = slice(k0, min(k, k0 + _TERMS))
        xs, x_rest = _slices(X[..., ks], -1, _X_SLICES)
        a_hi, a_hi_rest = _slices(A.hi[..., ks, :], -2, _X_SLICES)
        a_lo, a_lo_rest = _slices(A.lo[..., ks, :], -2, _LO_SLICES)
        for xp in xs:
            for ap in a_hi + a_lo:
                P = xp @ ap                                   # exact, barring overflow and underflow
                hi, e = two_sum(hi, P)
                lo = lo + e
                lo_err += np.abs(lo)
                sums += 1
        # below the normal range a product loses up to TINY per term
        under += len(xs) * len(a_hi + a_lo) * (ks.stop - ks.start) * TINY
        absX = np.abs(X[..., ks]) + np.abs(x_rest)            # ≥ |Σ slices of X|
        a_mag = (np.abs(A.hi[..., ks, :]) + np.abs(A.lo[..., ks, :]) + A.rad[..., ks, :]) * _STD
        rest += (np.abs(x_rest) @ a_mag
                 + absX @ ((np.abs(a_hi_rest) + np.abs(a_lo_rest)) * _STD + A.rad[..., ks, :]))
    rad = (rest * (1 + 2 * (k + 2) * U) + k * TINY + under + U * lo_err * (1 + 2 * (sums + 2) * U)) * _STD
    # An overflow (of a partial sum, even where the exact product is small) proves nothing.
    rad = np.where(np.isfinite(hi) & np.isfinite(lo) & np.isfinite(rad), rad, np.inf)
    return DW(np.where(np.isfinite(hi), hi, 0.0), np.where(np.isfinite(lo), lo, 0.0), rad)


def input_matmul(X, A: DW) -> DW:
    """``X·A`` as :func:`exact_matmul`, for ``X`` float64 or itself a double word (a pre-layer's
    outputs, :func:`mean_shift`).

    For a double word, ``X.hi·A`` by exact slice products, and ``X.lo·A.hi`` (``X.lo`` is about
    ``u·|X.hi|``) one float64 product added in: its rounding (``γ_k`` of ``|X.lo|·|A.hi|``),
    ``X.lo·(A.lo ± A.rad)`` and ``X.rad·|A|`` go into the radius.
    """
    if not isinstance(X, DW):
        return exact_matmul(X, A)
    out = exact_matmul(X.hi, A)
    if not (np.any(X.lo) or np.any(X.rad)):
        return out
    k = X.hi.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        part = X.lo @ A.hi
        abs_lo = np.abs(X.lo)
        a_mag = (np.abs(A.hi) + np.abs(A.lo) + A.rad) * _STD
        # γ_k applied after the product: as a factor of |A.hi| it underflows for a subnormal A.hi
        # while |X.lo|·|A.hi|, and its rounding, stay normal. Below the normal range each of the
        # four products (part and the three bounds) loses at most TINY per term.
        err = ((abs_lo @ np.abs(A.hi)) * (2 * (k + 2) * U) + abs_lo @ ((np.abs(A.lo) + A.rad) * _STD)
               + X.rad @ a_mag)
        err = err * (1 + 2 * (k + 2) * U) + 4 * k * TINY
        err = np.where(np.isfinite(part) & np.isfinite(err), err * _STD, np.inf)
    return add(out, DW(np.where(np.isfinite(part), part, 0.0), np.zeros_like(part), err))


def mean_shift(E: np.ndarray, X: np.ndarray) -> tuple[DW, DW]:
    """Proposition 4's layer on float64 data, as double words: ``e + m`` for every context token
    and ``x + m`` for the query, ``m`` the mean of the example's context (``E`` (T, n, d), or
    one shared context (n, d); ``X`` (T, d)). The exact layer is that: its attention is uniform
    (``softmax(0) = 1/n``) and its maps the identity. Within about ``u²`` of the exact values; a
    float64 shift rounds each token by ``u·|e + m|``, which the attention layer's double words
    would otherwise take as exact.
    """
    shared = E.ndim == 2
    contexts = E[None] if shared else E
    n = contexts.shape[1]
    total = DW.exact(contexts[:, 0, :])
    for j in range(1, n):
        total = add(total, DW.exact(contexts[:, j, :]))                                # (T or 1, d)
    mean = mul(total, DW(*(np.full(1, v) for v in _fraction_dw(Fraction(1, n)))))
    E2 = add(DW.exact(contexts), mean[:, None, :])
    return (E2[0] if shared else E2), add(DW.exact(X), mean)


def matmul(A: DW, B: DW) -> DW:
    """``A·B`` for small double words (batched over leading axes), term by term."""
    k = A.hi.shape[-1]
    acc = None
    for i in range(k):
        term = mul(A[..., i:i + 1], B[..., i:i + 1, :])
        acc = term if acc is None else add(acc, term)
    return acc


def value_maps(W_V, W_O, W_D) -> DW:
    """``W_V,h W_O,h W_D`` (H, d, d_o) in double words, term by term."""
    H, _, d_v = W_V.shape
    dw = DW.exact
    P = matmul(dw(W_O.reshape(H, d_v, -1)), dw(np.broadcast_to(W_D, (H,) + W_D.shape)))   # (H, d_v, d_o)
    return matmul(dw(W_V), P)


def _columns(M: DW, hs: slice) -> DW:
    """The heads ``hs`` of ``M`` (H, a, b) side by side: (a, |hs|·b)."""
    return DW(*(np.concatenate(list(getattr(M, f)[hs]), axis=1) for f in ("hi", "lo", "rad")))


def _attend(L: DW, c: DW, probabilities: np.ndarray | None = None,
            radius: np.ndarray | None = None) -> DW:
    """``Σ_j exp(ℓ_j − m) c_j / Σ_j exp(ℓ_j − m)``: the logits ``L`` (rows, heads, n), the values
    ``c`` (heads, n, d_o) or (rows, heads, n, d_o); one division per example and head.

    ``probabilities`` (rows, heads, n), if given, receives the softmax in float64: each
    ``exp(ℓ_j − m)`` and their sum rounded to float64, then divided (relative error at most
    ``3u`` plus the double words' radii). ``radius`` (same shape, only with ``probabilities``),
    if given, receives a bound on the distance of each from the exact softmax
    (:func:`_probability_radius`)."""
    n = L.hi.shape[-1]
    m = L.hi.max(axis=-1, keepdims=True)
    s, e = two_sum(L.hi, -np.broadcast_to(m, L.hi.shape))
    g = e + L.lo
    y = exp(DW(s, g, (L.rad + U * np.abs(g)) * _STD))                                 # exp(ℓ − m)
    den = y[..., 0]
    num = mul(y[..., 0, None], c[..., 0, :])
    for j in range(1, n):
        den = add(den, y[..., j])
        num = add(num, mul(y[..., j, None], c[..., j, :]))                             # (rows, heads, d_o)
    if probabilities is not None:
        total = den.hi + den.lo
        np.divide(y.hi + y.lo, total[..., None], out=probabilities)
        if radius is not None:
            radius[...] = _probability_radius(probabilities, y.rad, total, den.rad)
    return div(num, den[..., None])


def _probability_radius(p: np.ndarray, y_rad: np.ndarray, total: np.ndarray, den_rad: np.ndarray) -> np.ndarray:
    """A bound on ``|Y_j/D − p_j|`` for every exact ``Y_j`` within ``y_rad`` of ``y_j = hi + lo``
    and ``D`` within ``den_rad`` of ``hi + lo`` of the denominator, where ``p_j = fl(fl(y_j) /
    total)`` and ``total = fl(D's hi + lo)``; ``inf`` where ``D`` is not bounded away from 0.

    Two parts. The roundings: ``p_j`` is ``y_j/D̂`` up to three relative roundings (``D̂`` the
    double word's ``hi + lo``), at most ``4u·p_j``, and an underflow's ``TINY`` in ``fl(y_j)``
    and in the quotient. The radii: ``Y/D − y/D̂ = ((Y − y) − (y/D̂)(D − D̂)) / D``, at most
    ``(y_rad + (y/D̂)·den_rad) / (D̂ − den_rad)``.
    """
    low = (total * (1 - 2 * U) - den_rad)[..., None]                 # D ≥ low, D̂ ≥ total(1 − 2u)
    p = np.abs(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = 4 * U * p + TINY * (1 + 1 / low)                       # ≥ |y/D̂ − p|
        r = ((y_rad + (p + slack) * den_rad[..., None]) / low + slack) * _STD
    return np.where(low > 0, r, np.inf)


def _sum_heads(acc: DW, f: DW) -> DW:
    for i in range(f.hi.shape[1]):
        acc = add(acc, f[:, i, :])
    return acc


def outputs(E: np.ndarray, X: np.ndarray, W_K, W_Q, W_V, W_O, W_D, skip: bool, rows=None,
            heads_per_block: int = 16, probabilities: np.ndarray | None = None,
            probability_radius: np.ndarray | None = None) -> DW:
    """The exact model's outputs (T, d_o) as double words; ``E`` is one shared context (n, d)
    (:func:`shared_outputs`) or one context per example (T, n, d). ``E`` and ``X`` are float64,
    or double words (a pre-layer's outputs, :func:`mean_shift`). ``probabilities`` and
    ``probability_radius`` (T, H, n), if given, receive every example's softmax in float64 and
    a bound on each one's distance from the exact softmax, as in :func:`shared_outputs`.

    Per example: ``N_h = W_Q,h W_K,h^T`` (d, d) by exact slice products; ``w_h(t) = x(t)^T N_h``
    by exact slice products over a block of examples (:data:`_BLOCK_ROWS`) at once, then the
    logits ``E^(t) w_h(t)`` by exact slice products per example (batched); the values
    ``E^(t) (W_V,h W_O,h W_D)`` likewise; the softmax as on a shared context. ``rows(fn, T)`` as
    in :func:`shared_outputs`.

    A readout far from unit size (beyond 2^±64) is taken at unit size: ``W_D``, and without the
    skip connection ``W_V``, scaled by powers of two (where that is exact), the outputs scaled
    back. The model is linear in them
    (the skip connection adds ``x`` before ``W_D``), so this is exact, and the products' splitting,
    which overflows from about 1e300 on, stays in range: weights that memorize at labels near
    2^996 gave non-finite double words.
    """
    scaled, k = {"W_V": W_V, "W_D": W_D}, 0
    for name in ("W_D",) if skip else ("W_V", "W_D"):
        A = np.asarray(scaled[name], dtype=np.float64)
        top = float(np.max(np.abs(A), initial=0.0))
        e = math.frexp(top)[1] if math.isfinite(top) and top > 0 else 0
        with np.errstate(under="ignore"):
            unit = np.ldexp(A, -e)
        if abs(e) > 64 and np.array_equal(np.ldexp(unit, e), A):   # (within 2^±64: as given, bit for bit)
            scaled[name], k = unit, k + e
    if k:
        with np.errstate(over="ignore"):                 # beyond float64: not finite, as before
            return outputs(E, X, W_K, W_Q, scaled["W_V"], W_O, scaled["W_D"], skip, rows, heads_per_block,
                           probabilities, probability_radius).scaled(k)
    if as_parts(E)[0].ndim == 2:
        return shared_outputs(E, X, W_K, W_Q, W_V, W_O, W_D, skip, rows, heads_per_block, probabilities,
                              probability_radius)
    T, n, d = as_parts(E)[0].shape
    H = W_V.shape[0]
    N = exact_matmul(W_Q, DW.exact(np.swapaxes(W_K, 1, 2)))                           # (H, d, d)
    C = value_maps(W_V, W_O, W_D)                                                     # (H, d, d_o)
    d_o = W_D.shape[1]
    out = DW.exact(np.zeros((T, d_o)))

    def part(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # per thread: non-finite is unproven
            for r0 in range(lo, hi, _BLOCK_ROWS):
                _rows(r0, min(hi, r0 + _BLOCK_ROWS))

    def _rows(lo: int, hi: int) -> None:
        R = hi - lo
        Er, Xr = _exact_or(E[lo:hi]), _exact_or(X[lo:hi])
        acc = DW.exact(np.zeros((R, d_o)))
        for h0 in range(0, H, heads_per_block):
            hs = slice(h0, min(H, h0 + heads_per_block))
            b = hs.stop - hs.start
            w = input_matmul(Xr, _columns(N, hs))                                      # (R, b·d)
            w = DW(*(v.reshape(R, b, d).transpose(0, 2, 1) for v in (w.hi, w.lo, w.rad)))
            L = input_matmul(Er, w)                                                    # (R, n, b)
            L = DW(*(v.transpose(0, 2, 1) for v in (L.hi, L.lo, L.rad)))               # (R, b, n)
            c = input_matmul(_reshape(Er, (R * n, d)), _columns(C, hs))                # (R·n, b·d_o)
            c = DW(*(v.reshape(R, n, b, d_o).transpose(0, 2, 1, 3) for v in (c.hi, c.lo, c.rad)))
            p = None if probabilities is None else probabilities[lo:hi, hs, :]
            r = None if probability_radius is None else probability_radius[lo:hi, hs, :]
            acc = _sum_heads(acc, _attend(L, c, p, r))
        if skip:
            acc = add(acc, matmul(_as_dw(Xr)[None], DW.exact(W_D[None]))[0])
        out.hi[lo:hi], out.lo[lo:hi], out.rad[lo:hi] = acc.hi, acc.lo, acc.rad

    (rows or (lambda fn, count: [fn(0, count)]))(part, T)
    return out


def as_parts(x) -> tuple:
    """``(hi, lo, rad)`` of a double word, ``(x,)`` of a float64 array."""
    return (x.hi, x.lo, x.rad) if isinstance(x, DW) else (x,)


def _as_dw(x) -> DW:
    return x if isinstance(x, DW) else DW.exact(x)


def _exact_or(x):
    """A float64 array as it is; a double word's float64 values where it is exact (the slices'
    fast route), else the double word."""
    if not isinstance(x, DW):
        return x
    return x if np.any(x.lo) or np.any(x.rad) else x.hi


def _reshape(x, shape):
    return DW(*(v.reshape(shape) for v in as_parts(x))) if isinstance(x, DW) else x.reshape(shape)


# Examples per block of either route: a block's arrays (256 × 16 heads × n) stay in cache, which
# made the shared route's softmax 1.6× faster than whole halves of T = 7,937 at n = 32; the
# per-example route's working memory is bounded by it too.
_BLOCK_ROWS = 256


def shared_values(E, W_V, W_O, W_D) -> DW:
    """``c_h = E (W_V,h (W_O,h W_D))`` (H, n, d_o) in double words: what each head's softmax
    weighs on the shared context ``E`` (n, d), float64 or a double word."""
    E = _as_dw(E)
    H, (n, d) = W_V.shape[0], E.hi.shape
    return matmul(DW(*(np.broadcast_to(v, (H, n, d)) for v in as_parts(E))), value_maps(W_V, W_O, W_D))


def shared_outputs(E: np.ndarray, X: np.ndarray, W_K, W_Q, W_V, W_O, W_D, skip: bool, rows=None,
                   heads_per_block: int = 16, probabilities: np.ndarray | None = None,
                   probability_radius: np.ndarray | None = None) -> DW:
    """The exact model's outputs (T, d_o) on one shared context ``E`` (n, d), as double words;
    ``E`` and ``X`` float64 or double words.

    Per head: ``A_h = W_Q,h (W_K,h^T E^T)`` (d, n) and ``c_h = E (W_V,h (W_O,h W_D))`` (n, d_o) in
    double words; the logits ``X A_h`` by exact slice products; the softmax as
    ``Σ_j exp(ℓ_j − m) c_hj / Σ_j exp(ℓ_j − m)`` (one division per example and head), summed
    over the heads. ``rows(fn, T)``: how to run ``fn(lo, hi)`` over blocks of the examples (in
    parallel, for instance); by default one block. ``probabilities`` (T, H, n), if given,
    receives the softmax of every example and head in float64, and ``probability_radius`` (T,
    H, n), if given with it, a bound on each one's distance from the exact softmax
    (:func:`_attend`).
    """
    E = _as_dw(E)                                     # one context: small; X is taken block by block
    T, d = as_parts(X)[0].shape
    H = W_V.shape[0]
    n = E.hi.shape[0]
    dw = DW.exact
    E_T = DW(*(np.broadcast_to(v.T, (H, d, n)) for v in as_parts(E)))
    B = matmul(dw(np.swapaxes(W_K, 1, 2)), E_T)                                           # (H, d_h, n)
    A = matmul(dw(W_Q), B)                                                                 # (H, d, n)
    C = shared_values(E, W_V, W_O, W_D)                                                    # (H, n, d_o)
    d_o = W_D.shape[1]
    out = DW.exact(np.zeros((T, d_o)))

    def part(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # per thread: non-finite is unproven
            for r0 in range(lo, hi, _BLOCK_ROWS):      # blocks whose arrays stay in cache
                _rows(r0, min(hi, r0 + _BLOCK_ROWS))

    def _rows(lo: int, hi: int) -> None:
        Xr = X[lo:hi, ...]
        acc = DW.exact(np.zeros((hi - lo, d_o)))
        for h0 in range(0, H, heads_per_block):
            hs = slice(h0, min(H, h0 + heads_per_block))
            L = input_matmul(_exact_or(Xr), _columns(A, hs))                               # (rows, |hs|·n)
            L = DW(*(v.reshape(hi - lo, hs.stop - hs.start, n) for v in (L.hi, L.lo, L.rad)))
            p = None if probabilities is None else probabilities[lo:hi, hs, :]
            r = None if probability_radius is None else probability_radius[lo:hi, hs, :]
            acc = _sum_heads(acc, _attend(L, C[hs], p, r))
        if skip:
            acc = add(acc, matmul(DW(*(v[None] for v in as_parts(_as_dw(Xr)))), dw(W_D[None]))[0])
        out.hi[lo:hi], out.lo[lo:hi], out.rad[lo:hi] = acc.hi, acc.lo, acc.rad

    (rows or (lambda fn, count: [fn(0, count)]))(part, T)
    return out


def row_bounds(out: DW, Y: np.ndarray) -> np.ndarray:
    """Per example, an upper bound on ``max_i |f_i − y_i|`` from the outputs' double words (NaN
    where nothing is proven)."""
    # hi + lo − y = s + e + lo exactly; g = fl(e + lo) and t = fl(s + g) each round by at most
    # u/(1 − u) ≤ 2u of their own size (an addition whose result is subnormal is exact), so
    # |hi + lo − y| ≤ |t|(1 + 2u) + 2u|g|. Summing |s| and |g| instead added up to 2|lo| (about
    # u·|f|) where the two have opposite signs. TINY covers 2u|g| rounded in the subnormal range.
    s, e = two_sum(out.hi, -Y)
    g = e + out.lo
    t = s + g
    bound = (((np.abs(t) + 2 * U * np.abs(g)) * _STD + out.rad + TINY) * _STD).max(axis=1, initial=0.0)
    return np.where(np.isfinite(bound), bound, np.nan)


def error_bound(out: DW, Y: np.ndarray) -> float:
    """An upper bound on ``max |f − y|`` from the outputs' double words (``inf`` if not finite)."""
    bound = float(np.max(row_bounds(out, Y), initial=0.0))
    return bound if math.isfinite(bound) else math.inf
