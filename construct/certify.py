"""Certificates: what the weights provably do on the data, by interval arithmetic.

Every number the certificate states is an enclosure computed with mpmath's interval arithmetic
(``mpmath.iv``: outward rounding at every operation, including ``exp``), so it holds for the
*exact* real-number model with the stored weights — not for one particular rounding of it:

- **Memorization**: every output ``f(E^(t), x^(t); θ)`` is enclosed; the largest distance from an
  enclosure to its label bounds ``max_t |f − y|``.
- **Rank**: with ``X`` any approximate right inverse of ``Z`` (computed without care), the
  enclosure of ``I − Z X`` has ∞-norm ``r < 1``. Then ``Z X`` (T × T) is nonsingular, so
  ``rank Z = T``; and ``σ_min(Z) ≥ (1 − r₂)/‖X‖_F`` with ``r₂ ≤ sqrt(‖I − ZX‖_1 ‖I − ZX‖_∞)``.
- **Classification** (one-hot labels): the lower end of each true class's output exceeds the
  upper end of every other class's output.

A certificate states a claim only when it is proven; a claim that could not be proven is
recorded as not proven, with the reason. Interval arithmetic runs in Python, so certification
is for problems up to :data:`INTERVAL_BUDGET` scalar operations; larger problems get a
certificate that proves nothing and says why.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import mpmath
import numpy as np

from . import precision
from .data import Dataset
from .errors import InputError
from .io import sha256
from .model import Weights, check_compatible
from .verify import DEFAULT_TOL

FORMAT = "mha-construct certificate 1"
# Largest number of interval operations certify takes on, T·H·d·(n + T) (forward pass and
# I − ZX): about 20 s of Python at 100-200 bits.
INTERVAL_BUDGET = 1_000_000
# Bits of the interval arithmetic beyond the weights' own precision.
EXTRA_BITS = 32

_iv_exp = np.frompyfunc(lambda v: mpmath.iv.exp(v), 1, 1)


@contextlib.contextmanager
def _iv_precision(bits: int):
    """mpmath's interval context at ``bits`` bits (it has no ``workprec`` of its own)."""
    saved = mpmath.iv.prec
    mpmath.iv.prec = bits
    try:
        yield
    finally:
        mpmath.iv.prec = saved


def _iv(A: np.ndarray) -> np.ndarray:
    """Point intervals holding the exact values of ``A`` (float64 or ``mpf``)."""
    return np.frompyfunc(lambda v: mpmath.iv.mpf(v), 1, 1)(np.asarray(A, dtype=object)).astype(object)


def _upper(A: np.ndarray) -> np.ndarray:
    """Upper ends of the intervals, rounded up to float64."""
    return np.frompyfunc(lambda v: float(mpmath.fadd(mpmath.mpf(v.b), 0, rounding="u", prec=53)), 1, 1)(
        A).astype(np.float64)


def _abs_upper(A: np.ndarray) -> np.ndarray:
    """Upper bounds on ``|A|`` (rounded up to float64)."""
    def f(v):
        m = max(abs(mpmath.mpf(v.a)), abs(mpmath.mpf(v.b)))
        return float(mpmath.fadd(m, 0, rounding="u", prec=53))
    return np.frompyfunc(f, 1, 1)(A).astype(np.float64)


def _features(E: np.ndarray, X: np.ndarray, weights_iv: dict) -> np.ndarray:
    """Enclosure of ``Z`` (T, H·d): every head's ``E^T softmax(E W_K W_Q^T x)``."""
    T, n, d = E.shape
    blocks = []
    for h in range(weights_iv["W_K"].shape[0]):
        w = (X @ weights_iv["W_Q"][h]) @ weights_iv["W_K"][h].T          # (T, d): W_K W_Q^T x
        logits = np.einsum("tnd,td->tn", E, w)
        # Shift by a point value (the midpoint of the first logit): exact, and keeps exp in range.
        shift = np.array([[mpmath.iv.mpf(mpmath.mpf(row[0].mid))] for row in logits], dtype=object)
        e = _iv_exp(logits - shift).astype(object)
        s = e / e.sum(axis=1, keepdims=True)
        blocks.append(np.einsum("tnd,tn->td", E, s))
    return np.concatenate(blocks, axis=1)


@dataclass(frozen=True)
class Certificate:
    """The proven claims about ``weights`` on ``data`` (see the module docstring).

    Attributes:
        claims: JSON-ready dict (written as ``certificate.json``).
        passed: rank Z = T proven and ``max |f − y| ≤ tol`` proven.
    """

    claims: dict
    passed: bool


def certify(weights: Weights, data: Dataset, *, tol: float = DEFAULT_TOL, bits: int | None = None,
            weights_sha256: str | None = None, data_sha256: str | None = None) -> Certificate:
    """Prove, by interval arithmetic, what ``weights`` do on ``data``.

    Args:
        weights, data: the model and the dataset (weights at any precision).
        tol: the memorization claim is ``max |f − y| ≤ tol · max(1, max|Y|)``.
        bits: precision of the interval arithmetic (default: the weights' bits, or 53, plus 32).

    Raises:
        InputError: the weights do not fit the data.
    """
    check_compatible(weights, data.d, data.d_o)
    T, n, d = data.E.shape
    bits = bits or (weights.bits or 53) + EXTRA_BITS
    allowed = tol * max(1.0, float(np.abs(data.Y).max()))
    claims: dict = {
        "format": FORMAT,
        "weights_sha256": weights_sha256 or sha256(weights.to_bytes()),
        "data_sha256": data_sha256 or sha256(data.to_bytes()),
        "T": T, "H": weights.H, "weights_precision_bits": weights.bits or 53, "interval_bits": bits,
        "method": "interval arithmetic (mpmath.iv, outward rounding, exp included) on the exact "
                  "stored weights and data",
    }
    cost = T * weights.H * d * (n + T)
    if cost > INTERVAL_BUDGET:
        reason = (f"T·H·d·(n+T) = {cost} interval operations exceed the budget {INTERVAL_BUDGET} of "
                  "this pure-Python interval arithmetic; nothing is proven")
        claims.update(rank={"proven": False, "reason": reason},
                      memorization={"proven": False, "reason": reason})
        return Certificate(claims, False)
    with _iv_precision(bits), mpmath.mp.workprec(bits):
        w = {k: _iv(getattr(weights, k)) for k in ("W_K", "W_Q", "W_V", "W_O", "W_D")}
        E, X, Y = _iv(data.E), _iv(data.X), _iv(data.Y)
        Z = _features(E, X, w)
        values = np.einsum("thd,hdv->thv", Z.reshape(T, weights.H, d), w["W_V"]).reshape(T, -1)
        o = values @ w["W_O"]
        out = (o + X if weights.skip else o) @ w["W_D"]
        error_bound = float(_abs_upper(out - Y).max())
        claims["memorization"] = {
            "max_abs_error_bound": error_bound, "allowed": allowed, "proven": error_bound <= allowed,
            "claim": f"max_t |f(E^(t), x^(t)) - y^(t)| <= {error_bound:.3e}"}
        claims["rank"] = _rank_claim(Z, T)
        labels = _one_hot_classes(data.Y)
        if labels is not None:
            claims["classification"] = _classification_claim(out, labels, error_bound)
    passed = bool(claims["rank"]["proven"] and claims["memorization"]["proven"]
                  and claims.get("classification", {}).get("proven", True))
    return Certificate(claims, passed)


def _rank_claim(Z: np.ndarray, T: int) -> dict:
    """``rank Z = T`` through an approximate right inverse (see the module docstring)."""
    method = ("interval enclosure of I - Z X for an approximate right inverse X; ||I - ZX||_inf < 1 "
              "proves Z X nonsingular, hence rank Z = T")
    if Z.shape[1] < T:
        return {"proven": False, "method": method, "reason": f"Z has {Z.shape[1]} < T = {T} columns"}
    Zm = np.frompyfunc(lambda v: mpmath.mpf(v.mid), 1, 1)(Z).astype(object)
    try:
        Xr = Zm.T @ precision.gram_solve_rows(Zm, np.eye(T, dtype=object) * mpmath.mpf(1))
    except ZeroDivisionError:
        return {"proven": False, "method": method, "reason": "the midpoint of Z is singular"}
    D = _iv(np.eye(T)) - Z @ _iv(Xr)
    A = _abs_upper(D)
    r_inf, r_one = float(A.sum(axis=1).max()), float(A.sum(axis=0).max())
    proven = r_inf < 1.0
    out = {"proven": proven, "method": method, "residual_inf_norm_bound": r_inf}
    if proven:
        r2 = math.sqrt(r_one * r_inf)
        x_norm = float(np.sqrt((_abs_upper(_iv(Xr)) ** 2).sum()))
        out["claim"] = f"rank Z = {T}"
        if r2 < 1.0:
            out["sigma_min_lower_bound"] = (1.0 - r2) / x_norm * (1 - 1e-15)
    else:
        out["reason"] = f"||I - ZX||_inf <= {r_inf:.3g} is not below 1"
    return out


def _one_hot_classes(Y: np.ndarray) -> np.ndarray | None:
    """Class index per example when every label row is one-hot (exact 0s and one exact 1)."""
    if Y.shape[1] < 2 or not np.all((Y == 0) | (Y == 1)) or not np.all(Y.sum(axis=1) == 1):
        return None
    return np.argmax(Y, axis=1)


def _classification_claim(out: np.ndarray, labels: np.ndarray, error_bound: float) -> dict:
    """Zero misclassified: the true class's lowest value beats every other class's highest."""
    T, k = out.shape
    lo = np.frompyfunc(lambda v: float(mpmath.fadd(mpmath.mpf(v.a), 0, rounding="d", prec=53)), 1, 1)(
        out[np.arange(T), labels]).astype(np.float64)
    others = _upper(out).copy()
    others[np.arange(T), labels] = -np.inf
    margin = float((lo - others.max(axis=1)).min())
    # Rounding lo down and the others up to float64 keeps the comparison on the safe side.
    proven = margin > 0 and margin > error_bound
    return {"classes": k, "margin_lower_bound": margin,
            "misclassified_upper_bound": int(np.sum(lo <= others.max(axis=1))), "proven": proven,
            "claim": "zero misclassified examples, by a margin above the error bound" if proven else None}


def check_certificate(cert: dict, weights: Weights, data: Dataset, *, tol: float = DEFAULT_TOL) -> list[str]:
    """Reasons to reject ``cert`` for these files (empty: every claim it makes is proven again).

    A claim is accepted when the certificate recomputed now implies it: same files (sha256), a
    proven rank when it claims one, an error bound no smaller than the one proven now.
    """
    problems = []
    if cert.get("format") != FORMAT:
        problems.append(f"format: expected {FORMAT!r}, got {cert.get('format')!r}")
    fresh = certify(weights, data, tol=tol, bits=cert.get("interval_bits"))
    for key in ("weights_sha256", "data_sha256"):
        if cert.get(key) != fresh.claims[key]:
            problems.append(f"{key}: the certificate is for other files")
    if cert.get("rank", {}).get("proven") and not fresh.claims["rank"]["proven"]:
        problems.append("rank: claimed proven, cannot be proven for these files")
    mem, now = cert.get("memorization", {}), fresh.claims["memorization"]
    if mem.get("proven"):
        if not now.get("proven"):
            problems.append("memorization: claimed proven, cannot be proven for these files")
        elif float(mem.get("max_abs_error_bound", -1.0)) < now["max_abs_error_bound"]:
            problems.append(f"memorization: claims max error <= {mem.get('max_abs_error_bound')}, "
                            f"only {now['max_abs_error_bound']:.3e} can be proven")
    if cert.get("classification", {}).get("proven") and not fresh.claims.get("classification", {}).get("proven"):
        problems.append("classification: claimed proven, cannot be proven for these files")
    return problems
