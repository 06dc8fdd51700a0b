"""Certificates: what the weights provably do on the data, for the exact real-number model.

Every number a certificate states is an enclosure, so it holds for the *exact* model with the
stored weights, not for one particular rounding of it. Two ways to compute the enclosures:

- ``float64`` (float64 weights, any size): :mod:`construct.enclose`, midpoint–radius bounds from
  the classical error analysis of IEEE-754 round-to-nearest arithmetic;
- ``interval`` (weights at any precision, up to :data:`INTERVAL_BUDGET` operations): mpmath's
  interval arithmetic (``mpmath.iv``: outward rounding at every operation, ``exp`` included).

The claims:

- **Memorization**: every output ``f(E^(t), x^(t); θ)`` is enclosed; the largest distance from an
  enclosure to its label bounds ``max_t |f − y|``.
- **Rank**: with ``X`` any approximate right inverse of ``Z`` (computed without care), the
  enclosure of ``I − Z X`` has ∞-norm ``r < 1``. Then ``Z X`` (T × T) is nonsingular, so
  ``rank Z = T``; and ``σ_min(Z) ≥ (1 − r₂)/‖X‖_F`` with ``r₂ ≤ sqrt(‖I − ZX‖_1 ‖I − ZX‖_∞)``.
- **Classification** (one-hot labels): the lower end of each true class's output exceeds the
  upper end of every other class's output, by more than the error bound.

A certificate states a claim only when it is proven; a claim that could not be proven is
recorded as not proven, with the reason.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import mpmath
import numpy as np

from . import enclose, precision
from .data import Dataset
from .errors import InputError
from .io import sha256
from .model import Weights, check_compatible, output_from_features
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


def _features(E: np.ndarray, X: np.ndarray, weights_iv: Weights) -> np.ndarray:
    """Enclosure of ``Z`` (T, H·d): every head's ``E^T softmax(E W_K W_Q^T x)``."""
    T, n, d = E.shape
    blocks = []
    for h in range(weights_iv.H):
        w = (X @ weights_iv.W_Q[h]) @ weights_iv.W_K[h].T                # (T, d): W_K W_Q^T x
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


METHODS = ("auto", "float64", "interval")


def certify(weights: Weights, data: Dataset, *, tol: float = DEFAULT_TOL, bits: int | None = None,
            method: str = "auto", weights_sha256: str | None = None,
            data_sha256: str | None = None) -> Certificate:
    """Prove what ``weights`` do on ``data``, for the exact model.

    Args:
        weights, data: the model and the dataset (weights at any precision).
        tol: the memorization claim is ``max |f − y| ≤ tol · max(1, max|Y|)``.
        bits: precision of the interval arithmetic (default: the weights' bits, or 53, plus 32).
        method: ``"float64"``: rigorous float64 enclosures (:mod:`construct.enclose`), for float64
            weights of any size; ``"interval"``: mpmath interval arithmetic, for weights at any
            precision within :data:`INTERVAL_BUDGET`; ``"auto"``: float64 for float64 weights,
            then, if a claim remains unproven and the problem is within the budget, interval.

    Raises:
        InputError: the weights do not fit the data, or an unknown method.
    """
    check_compatible(weights, data.d, data.d_o)
    if method not in METHODS:
        raise InputError([f"method must be one of {', '.join(METHODS)}, got {method!r}"], what="invalid option")
    if method == "auto":                  # fast and rigorous first; tighter where affordable
        args = dict(tol=tol, bits=bits, weights_sha256=weights_sha256, data_sha256=data_sha256)
        if weights.bits is None:
            fast = certify(weights, data, method="float64", **args)
            T, n, d = data.E.shape
            if fast.passed or T * weights.H * d * (n + T) > INTERVAL_BUDGET:
                return fast
        return certify(weights, data, method="interval", **args)
    if method == "float64" and weights.bits is not None:
        raise InputError(["the float64 method certifies float64 weights; these have "
                          f"{weights.bits} bits: use the interval method"], what="invalid option")
    T, n, d = data.E.shape
    bits = bits or (weights.bits or 53) + EXTRA_BITS
    allowed = tol * max(1.0, float(np.abs(data.Y).max()))
    claims: dict = {
        "format": FORMAT,
        "weights_sha256": weights_sha256 or sha256(weights.to_bytes()),
        "data_sha256": data_sha256 or sha256(data.to_bytes()),
        "T": T, "H": weights.H, "weights_precision_bits": weights.bits or 53,
    }
    if method == "float64":
        claims["method"] = ("rigorous float64 enclosures (IEEE-754 round-to-nearest, classical error "
                            "bounds, exp by a bounded polynomial) of the exact model")
        claims.update(_float64_claims(weights, data, allowed))
        return Certificate(claims, _passed(claims))
    claims["interval_bits"] = bits
    claims["method"] = ("interval arithmetic (mpmath.iv, outward rounding, exp included) on the exact "
                        "stored weights and data")
    cost = T * weights.H * d * (n + T)
    if cost > INTERVAL_BUDGET:
        reason = (f"T·H·d·(n+T) = {cost} interval operations exceed the budget {INTERVAL_BUDGET} of "
                  "this pure-Python interval arithmetic; nothing is proven")
        claims.update(rank={"proven": False, "reason": reason},
                      memorization={"proven": False, "reason": reason})
        return Certificate(claims, False)
    with _iv_precision(bits), mpmath.mp.workprec(bits):
        w = weights.map(_iv)
        E, X, Y = _iv(data.E), _iv(data.X), _iv(data.Y)
        Z = _features(E, X, w)
        out = output_from_features(Z, X, w)                     # the model's own readout, on intervals
        error_bound = float(_abs_upper(out - Y).max())
        claims["memorization"] = {
            "max_abs_error_bound": error_bound, "allowed": allowed, "proven": error_bound <= allowed,
            "claim": f"max_t |f(E^(t), x^(t)) - y^(t)| <= {error_bound:.3e}"}
        claims["rank"] = _rank_claim(Z, T)
        labels = _one_hot_classes(data.Y)
        if labels is not None:
            claims["classification"] = _classification_claim(out, labels, error_bound)
    return Certificate(claims, _passed(claims))


def _passed(claims: dict) -> bool:
    return bool(claims["rank"]["proven"] and claims["memorization"]["proven"]
                and claims.get("classification", {}).get("proven", True))


def _float64_claims(weights: Weights, data: Dataset, allowed: float) -> dict:
    """The claims of a certificate for float64 weights, by :mod:`construct.enclose`."""
    T, n, d = data.E.shape
    H = weights.H
    parts = [enclose.features(data.E, data.X, weights.W_K[h], weights.W_Q[h]) for h in range(H)]
    Z = np.concatenate([p[0] for p in parts], axis=1)
    Z_rad = np.concatenate([p[1] for p in parts], axis=1)
    values = [enclose.matmul(Z[:, h * d:(h + 1) * d], Z_rad[:, h * d:(h + 1) * d], weights.W_V[h])
              for h in range(H)]
    o, o_rad = enclose.matmul(np.concatenate([v[0] for v in values], axis=1),
                              np.concatenate([v[1] for v in values], axis=1), weights.W_O)
    if weights.skip:
        o, o_rad = o + data.X, o_rad + enclose.U * np.abs(o + data.X) * 2
    out, out_rad = enclose.matmul(o, o_rad, weights.W_D)
    error_bound = float(enclose.up(np.abs(out - data.Y) + out_rad, 2).max())
    claims = {"memorization": {
        "max_abs_error_bound": error_bound, "allowed": allowed, "proven": error_bound <= allowed,
        "claim": f"max_t |f(E^(t), x^(t)) - y^(t)| <= {error_bound:.3e}"}}
    claims["rank"] = _float64_rank_claim(Z, Z_rad, T)
    labels = _one_hot_classes(data.Y)
    if labels is not None:
        lo = (out - out_rad) - 4 * enclose.U * np.abs(out) - enclose.TINY
        hi = (out + out_rad) + 4 * enclose.U * np.abs(out) + enclose.TINY
        claims["classification"] = _margin_claim(lo, hi, labels, error_bound)
    return claims


def _float64_rank_claim(Z: np.ndarray, Z_rad: np.ndarray, T: int) -> dict:
    """``rank Z = T`` for every ``Z`` within ``Z_rad`` of the float64 ``Z``, through a right inverse."""
    method = ("rigorous float64 bound on |I - Z X| for an approximate right inverse X (Cholesky of "
              "Z Z^T); ||I - ZX||_inf < 1 proves Z X nonsingular, hence rank Z = T")
    F = Z.shape[1]
    if F < T:
        return {"proven": False, "method": method, "reason": f"Z has {F} < T = {T} columns"}
    try:
        import scipy.linalg as sla
        Xr = Z.T @ sla.cho_solve(sla.cho_factor(Z @ Z.T, check_finite=False), np.eye(T), check_finite=False)
    except (np.linalg.LinAlgError, ValueError):
        Xr = np.linalg.pinv(Z)
    if not np.all(np.isfinite(Xr)):
        return {"proven": False, "method": method, "reason": "no finite approximate inverse"}
    absX = np.abs(Xr)
    D = np.eye(T) - Z @ Xr
    bound = enclose.up(np.abs(D) + (enclose.gamma(F) * np.abs(Z) + Z_rad) @ absX, F + 2)
    r_inf = float(enclose.up(bound.sum(axis=1), T).max())
    r_one = float(enclose.up(bound.sum(axis=0), T).max())
    out = {"proven": r_inf < 1.0, "method": method, "residual_inf_norm_bound": r_inf}
    if r_inf < 1.0:
        out["claim"] = f"rank Z = {T}"
        r2 = math.sqrt(r_one * r_inf) * (1 + 4 * enclose.U)
        x_norm = float(enclose.up(np.sqrt(enclose.up((absX ** 2).sum(), absX.size)), 2))
        if r2 < 1.0:
            out["sigma_min_lower_bound"] = (1.0 - r2) / x_norm * (1 - 1e-15)
    else:
        out["reason"] = f"||I - ZX||_inf <= {r_inf:.3g} is not below 1"
    return out


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
    r_inf = float(enclose.up(A.sum(axis=1), T).max())
    r_one = float(enclose.up(A.sum(axis=0), T).max())
    proven = r_inf < 1.0
    out = {"proven": proven, "method": method, "residual_inf_norm_bound": r_inf}
    if proven:
        r2 = math.sqrt(r_one * r_inf)
        x_norm = float(enclose.up(np.sqrt(enclose.up((_abs_upper(_iv(Xr)) ** 2).sum(), Xr.size)), 2))
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
    """Zero misclassified, from interval outputs: ends rounded outwards to float64."""
    lo = np.frompyfunc(lambda v: float(mpmath.fadd(mpmath.mpf(v.a), 0, rounding="d", prec=53)), 1, 1)(
        out).astype(np.float64)
    return _margin_claim(lo, _upper(out), labels, error_bound)


def _margin_claim(lo: np.ndarray, hi: np.ndarray, labels: np.ndarray, error_bound: float) -> dict:
    """Zero misclassified: the true class's lowest value beats every other class's highest."""
    T = lo.shape[0]
    true_lo = lo[np.arange(T), labels]
    others = hi.copy()
    others[np.arange(T), labels] = -np.inf
    gap = true_lo - others.max(axis=1)
    margin = float(gap.min())
    proven = margin > 0 and margin > error_bound
    return {"classes": lo.shape[1], "margin_lower_bound": margin,
            "misclassified_upper_bound": int(np.sum(gap <= 0)), "proven": proven,
            "claim": "zero misclassified examples, by a margin above the error bound" if proven else None}


def check_certificate(cert: dict, weights: Weights, data: Dataset, *, tol: float = DEFAULT_TOL) -> list[str]:
    """Reasons to reject ``cert`` for these files (empty: every claim it makes is proven again).

    A claim is accepted when the certificate recomputed now implies it: same files (sha256), a
    proven rank when it claims one, an error bound no smaller than the one proven now.
    """
    problems = []
    if cert.get("format") != FORMAT:
        problems.append(f"format: expected {FORMAT!r}, got {cert.get('format')!r}")
    fresh = certify(weights, data, tol=tol, bits=cert.get("interval_bits"),
                    method="interval" if "interval_bits" in cert else "auto")
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
