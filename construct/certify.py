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
- **Rank** (``rank Z = T``), proven in one of two ways:

  - ``float64``: a positive lower bound on ``σ_min(Z)``, by Rump's verified positive
    definiteness: a floating-point Cholesky factorization of ``fl(Z Z^T) − τI`` that runs to
    completion proves ``σ_min(Z)² ≥ τ − δ``, with ``δ`` the rounding of forming and factoring
    (:func:`construct.enclose.gram_eigenvalue_lower`); the radius of ``Z``'s enclosure is then
    taken off (Weyl). The cost is one Gram matrix and a few Cholesky factorizations. Where
    ``σ_min(Z)²`` is below the Gram matrix's rounding (an ill-conditioned ``Z``, as on shared
    contexts), the float64 method falls back to the residual route below. On one shared context
    ``E`` it first takes that route on the softmax instead: ``Z = Π (I_H ⊗ E)`` with ``Π`` every
    head's softmax side by side, enclosed to about ``u`` by double words, so
    ``σ_min(Z) ≥ σ_min(Π)·σ_n(E)``, the second factor by the Gram route on ``E``; failing that,
    on ``Z`` enclosed from the same softmax.
  - ``interval`` (and that fall-back): with ``X`` any approximate right inverse of ``Z``
    (computed without care), the enclosure of ``I − Z X`` has ∞-norm ``r < 1``. Then ``Z X``
    (T × T) is nonsingular, so ``rank Z = T``; and ``σ_min(Z) ≥ (1 − r₂)/‖X‖_F`` with
    ``r₂ ≤ sqrt(‖I − ZX‖_1 ‖I − ZX‖_∞)``.
- **Classification** (one-hot labels): the lower end of each true class's output exceeds the
  upper end of every other class's output, by more than the error bound.

A certificate states a claim only when it is proven; a claim that could not be proven is
recorded as not proven, with the reason.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import dword, enclose
from .accurate import layer_inputs as accurate_inputs
from .accurate import shared_context
from .arith import FLOAT64, Interval, lapack
from .arith.threads import row_blocks
from .data import Dataset, checked
from .errors import ConstructError, InputError, numpy_error_defaults
from .io import json_bytes, sha256, write_atomic
from .limits import allowed_error, callback, integer, require_memory, tolerance
from .model import (Weights, check_compatible, checked_weights, feature_matrix, head_groups, layer_inputs, not_weights,
                    output_from_features)
from .verify import DEFAULT_TOL

FORMAT = "mha-construct certificate"
VERSION = 3
# Largest number of interval operations certify takes on, T·H·d·(n + T) (forward pass and
# I − ZX): about 20 s of Python at 100-200 bits.
INTERVAL_BUDGET = 1_000_000
# Bits of the interval arithmetic beyond the weights' own precision.
EXTRA_BITS = 32
# From this many entries of Z (T·H·d; 128 MiB, certificates of tens of seconds on two cores) the
# float64 method tells ``progress`` each stage it finishes, with its seconds.
STAGE_NOTES_FROM = 1 << 24

@dataclass(frozen=True)
class Certificate:
    """The proven claims about ``weights`` on ``data`` (see the module docstring).

    Attributes:
        claims: JSON-ready dict (written as ``certificate.json``); see :data:`SCHEMA`.
        passed: rank Z = T proven and ``max |f − y| ≤ tol`` proven (and zero misclassified, for
            one-hot labels).
    """

    claims: dict
    passed: bool

    def lines(self) -> list[str]:
        """The certificate for people: the method, then each claim, proven or with its reason."""
        c = self.claims
        out = [f"method         {c['method']}" + (f", {c['interval_bits']} bits" if "interval_bits" in c else "")
               + f": {METHOD_DESCRIPTIONS[c['method']]}"]
        for key in CLAIMS:
            if key in c:
                claim = c[key]
                out.append(f"{key:<15}" + (f"PROVEN  {claim['claim']}" if claim["proven"] else
                                           f"not proven: {claim['reason']}"))
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Write the claims as JSON to ``path`` (atomically); ``certify --check`` reads it back."""
        write_atomic(path, json_bytes(self.claims))

    @property
    def method(self) -> str:
        """``"float64"`` or ``"interval"``: the method that proved (or failed to prove) the claims."""
        return self.claims["method"]

    @property
    def proven(self) -> tuple[str, ...]:
        """The names of the claims proven, of ``"rank"``, ``"memorization"``, ``"classification"``."""
        return tuple(k for k in CLAIMS if k in self.claims and self.claims[k]["proven"])

    @property
    def rank(self) -> dict:
        """The rank claim: ``proven``, ``claim`` or ``reason``, ``sigma_min_lower_bound``, …"""
        return self.claims["rank"]

    @property
    def memorization(self) -> dict:
        """The memorization claim: ``proven``, ``claim`` or ``reason``, ``max_abs_error_bound``."""
        return self.claims["memorization"]

    @property
    def classification(self) -> dict | None:
        """The classification claim (one-hot labels only, else None)."""
        return self.claims.get("classification")

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return f"Certificate(passed={self.passed}, method={self.claims.get('method')!r}, proven={self.proven})"


METHODS = ("auto", "float64", "interval")
# What each method is, for people (a certificate records only the method's name).
METHOD_DESCRIPTIONS = {
    "float64": "rigorous float64 enclosures of the exact model (IEEE-754 round-to-nearest, classical "
               "error bounds, exp by a bounded polynomial; double words for the examples float64 cannot settle)",
    "interval": "interval arithmetic on the exact stored weights and data (mpmath.iv, outward rounding, "
                "exp included)",
}

# What --check does with each field of a certificate: "exact" fields must equal the recomputed
# value; "upper" bounds may be no smaller than the recomputed bound, "lower" bounds no larger
# (a weaker true bound is still true); "text" is rendered again from the certificate's own
# numbers and must match. Each entry: (rule, JSON types allowed). No other field may appear.
_NUM, _INT, _NONE = (int, float), (int,), (type(None),)
SCHEMA = {
    "format": ("exact", (str,)), "version": ("exact", _INT),
    "weights_sha256": ("exact", (str,)), "data_sha256": ("exact", (str,)),
    "T": ("exact", _INT), "n": ("exact", _INT), "d": ("exact", _INT), "d_o": ("exact", _INT),
    "H": ("exact", _INT), "weights_bits": ("exact", _INT), "method": ("exact", (str,)),
    "interval_bits": ("exact", _INT), "tol": ("exact", _NUM), "allowed": ("exact", _NUM),
}
CLAIM_SCHEMA = {
    "proven": ("exact", (bool,)), "claim": ("text", (str,)), "reason": ("text", (str,)),
    "max_abs_error_bound": ("upper", _NUM + _NONE), "residual_inf_norm_bound": ("upper", _NUM + _NONE),
    "sigma_min_lower_bound": ("lower", _NUM), "classes": ("exact", _INT),
    "margin_lower_bound": ("lower", _NUM), "misclassified_upper_bound": ("upper", _INT),
}
CLAIMS = ("rank", "memorization", "classification")
# A certificate file larger than this is not read (one is about 1 KB).
MAX_CERTIFICATE_BYTES = 1 << 20


def default_bits(weights: Weights) -> int:
    """The interval precision certify uses for ``weights``: their own bits (53 for float64) plus
    :data:`EXTRA_BITS`; also the most it accepts.

    Raises:
        InputError: ``weights`` is not :class:`Weights`.
    """
    if not isinstance(weights, Weights):
        raise not_weights(weights)
    return (weights.bits or 53) + EXTRA_BITS


@numpy_error_defaults
def certify(weights: Weights, data: Dataset, *, tol: float = DEFAULT_TOL, bits: int | None = None,
            method: str = "auto", progress: Callable[[str], None] | None = None) -> Certificate:
    """Prove what ``weights`` do on ``data``, for the exact model.

    Args:
        weights, data: the model and the dataset (weights at any precision).
        tol: the memorization claim is ``max |f − y| ≤ tol · max(1, max|Y|)``.
        bits: precision of the interval arithmetic, from 53 to :func:`default_bits` (the default).
        method: ``"float64"``: rigorous float64 enclosures (:mod:`construct.enclose`), for float64
            weights of any size; ``"interval"``: mpmath interval arithmetic, for weights at any
            precision within :data:`INTERVAL_BUDGET`; ``"auto"``: float64 for float64 weights,
            then, if a claim remains unproven and the problem is within the budget, interval.
        progress: called with a sentence when ``"auto"`` turns to the slower interval method, and,
            where ``Z`` has :data:`STAGE_NOTES_FROM` entries or more, as the float64 method
            finishes each stage (the enclosure of the features and outputs, each route to the
            rank, the double-word enclosure), with its seconds.

    The certificate names the files by the sha256 of their canonical form (the validated arrays
    as :meth:`Weights.to_bytes` and :meth:`Dataset.to_bytes` write them), so it does not depend
    on how a file was saved; for files that ``build`` wrote, that is the file's own sha256.

    Raises:
        InputError: the weights do not fit the data, an unknown method, or a bad ``tol``/``bits``.
    """
    weights, data, tol = checked_weights(weights), checked(data), tolerance(tol)
    progress = callback(progress, "progress")
    check_compatible(weights, data.d, data.d_o)
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}", what="invalid option")
    top = default_bits(weights)
    bits = top if bits is None else integer(bits, "bits", 53)
    if bits > top:
        raise InputError(f"interval precision {bits} bits exceeds what certify uses for these weights "
                         f"({top} bits)", what="invalid option")
    T, n, d = data.E.shape
    # Sized as verify is, before anything large: Z and G (T ≤ H·d, so G is at most Z), each
    # head's key map, and on one shared context the softmax, its radius and the double words'
    # work beside Z (peaks in benchmarks/bench_scale.py, n = 32, d = 64: 1.7-2.0 Z on contexts of
    # their own, 2.1 Z (H = 256) to 3.5 Z (H = 64) shared); 5 Z there for the routes after the
    # softmax's (Z and its radius from it, a right inverse by pinv: about 5.5 Z measured). On
    # contexts of their own that route is rare (Z too ill-conditioned for the Gram matrix): it
    # checks its own room when it is taken (_residual_rank_claim, lapack.right_inverse).
    copies = 5 if T > 1 and shared_context(data.E) else 2
    require_memory(8 * (copies * T * weights.H * d + 2 * T ** 2 + weights.H * d ** 2),
                   f"certifying T = {T} examples on H = {weights.H} heads")
    ieee = enclose.ieee_subnormals()
    if method == "float64" and not ieee:
        raise ConstructError("float64 here flushes subnormal numbers to zero (a library built with -ffast-math, "
                             "loaded into this process, can set that), and the float64 enclosures' bounds assume "
                             "it does not: certify with the interval method, or in a process without that library")
    if method == "auto":                  # fast and rigorous first; tighter where affordable
        if weights.bits is None and (ieee or T * weights.H * d * (n + T) > INTERVAL_BUDGET):
            fast = certify(weights, data, tol=tol, method="float64", progress=progress)
            if fast.passed or T * weights.H * d * (n + T) > INTERVAL_BUDGET:
                return fast
            if progress is not None:
                left = [key for key in CLAIMS if key in fast.claims and not fast.claims[key]["proven"]]
                progress(f"float64 left {' and '.join(left)} unproven; proving every claim again with mpmath "
                         f"intervals at {bits} bits (slower)")
        elif weights.bits is None and progress is not None:
            progress(f"float64 here flushes subnormal numbers to zero; proving every claim with mpmath intervals "
                     f"at {bits} bits (slower)")
        return certify(weights, data, tol=tol, bits=bits, method="interval")
    if method == "float64" and weights.bits is not None:
        raise InputError("the float64 method certifies float64 weights; these have "
                         f"{weights.bits} bits: use the interval method", what="invalid option")
    allowed = allowed_error(tol, float(np.abs(data.Y).max()))
    claims: dict = {
        "format": FORMAT, "version": VERSION,
        "weights_sha256": sha256(weights.to_bytes()), "data_sha256": sha256(data.to_bytes()),
        "T": T, "n": n, "d": d, "d_o": data.d_o, "H": weights.H, "weights_bits": weights.bits or 53,
        "method": method, **({"interval_bits": bits} if method == "interval" else {}),
        "tol": tol, "allowed": allowed,
    }
    if method == "float64":
        large = progress is not None and T * weights.H * d >= STAGE_NOTES_FROM
        claims.update(_float64_claims(weights, data, allowed, note=progress if large else None))
    elif T * weights.H * d * (n + T) > INTERVAL_BUDGET:
        claims.update(rank={"residual_inf_norm_bound": None}, memorization={"max_abs_error_bound": None})
    else:
        claims.update(_interval_claims(weights, data, bits))
    return _finish(claims)


def _interval_claims(weights: Weights, data: Dataset, bits: int) -> dict:
    """The claims' numbers by mpmath's interval arithmetic at ``bits`` bits."""
    iv = Interval(bits)
    with iv.working():
        w = weights.map(iv.asarray)
        E, X, Y = iv.asarray(data.E), iv.asarray(data.X), iv.asarray(data.Y)
        E, X = layer_inputs(w, E, X, iv)                        # the pre-layer, if any, on intervals
        Z = feature_matrix(E, X, w, iv, layered=True)           # the model's own forward pass and
        out = output_from_features(Z, X, w, iv)                 # readout, on intervals
        error_bound = float(iv.magnitude(out - Y).max())
        # Beyond float64 (or NaN): no bound a certificate can state (JSON has no infinity).
        claims = {"memorization": {"max_abs_error_bound": error_bound if math.isfinite(error_bound) else None},
                  "rank": _rank_claim(iv, Z, data.T)}
        labels = _one_hot_classes(data.Y)
        if labels is not None:
            claims["classification"] = _margin_claim(iv.lower(out), iv.upper(out), labels)
    return claims


def _finish(claims: dict) -> Certificate:
    """Round the bounds outwards, decide what is proven, and render the sentences."""
    for key in CLAIMS:
        if key in claims:
            claims[key] = {k: enclose.round3(v, CLAIM_SCHEMA[k][0] == "upper") for k, v in claims[key].items()}
    for key, proven in _proven_by(claims).items():
        claims[key]["proven"] = proven
    if not claims["rank"]["proven"]:
        claims["rank"].pop("sigma_min_lower_bound", None)
    for key, sentence in _sentences(claims).items():
        claims[key].update(sentence)
    passed = all(claims[key]["proven"] for key in CLAIMS if key in claims)
    return Certificate(claims, passed)


def _proven_by(cert: dict) -> dict[str, bool]:
    """What a certificate's own numbers prove, claim by claim: rank Z = T when Z has at least T
    columns and the residual bound is below 1 (interval method, and float64 where Z was too
    ill-conditioned for its Gram route) or else the lower bound on σ_min(Z) is positive;
    memorization when the error bound is within ``allowed``; zero misclassified when the margin
    exceeds the error bound."""
    rank, mem = cert["rank"], cert["memorization"]
    bound = mem.get("max_abs_error_bound")
    if cert["method"] == "interval" or "residual_inf_norm_bound" in rank:
        full = _residual_proves(rank)          # an approximate right inverse's residual below 1
    else:                                      # float64's Gram route: a positive lower bound on σ_min(Z)
        s = rank.get("sigma_min_lower_bound")
        full = s is not None and s > 0
    out = {"rank": full and cert["H"] * cert["d"] >= cert["T"],
           "memorization": bound is not None and bound <= cert["allowed"]}
    if "classification" in cert:
        c = cert["classification"]
        margin = c.get("margin_lower_bound")
        out["classification"] = bool(bound is not None and margin is not None and margin > max(bound, 0.0)
                                     and c.get("misclassified_upper_bound") == 0)
    return out


def _g(x) -> str:
    """A certificate's number in its sentences (3 significant digits; ``?`` if there is none)."""
    return f"{x:.3g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "?"


def _sentences(cert: dict) -> dict[str, dict[str, str]]:
    """Each claim's sentence, from the certificate's numbers alone: ``{"claim": …}`` when proven,
    ``{"reason": …}`` when not."""
    T, F = cert["T"], cert["H"] * cert["d"]
    over = (cert["method"] == "interval"
            and T * cert["H"] * cert["d"] * (cert["n"] + T) > INTERVAL_BUDGET)
    budget = (f"T·H·d·(n+T) = {T * cert['H'] * cert['d'] * (cert['n'] + T)} interval operations exceed the "
              f"budget {INTERVAL_BUDGET} of this pure-Python interval arithmetic; nothing is proven")
    rank, mem = cert["rank"], cert["memorization"]
    r, bound = rank.get("residual_inf_norm_bound"), mem.get("max_abs_error_bound")
    out = {}
    if rank.get("proven"):
        out["rank"] = {"claim": f"rank Z = {T}"}
    elif F < T:
        out["rank"] = {"reason": f"Z has H·d = {F} < T = {T} columns, so rank Z < T"}
    elif over:
        out["rank"] = {"reason": budget}
    elif cert["method"] == "float64" and "residual_inf_norm_bound" not in rank:
        out["rank"] = {"reason": "no positive lower bound on sigma_min(Z) was proven: the Cholesky "
                                 "factorization of Z Z^T - tau I did not run to completion for any shift "
                                 "tau that would prove one"}
    elif r is None:
        out["rank"] = {"reason": "no finite approximate right inverse of Z was found"}
    else:
        out["rank"] = {"reason": f"||I - ZX||_inf <= {_g(r)} is not below 1, so rank Z = T is not proven"}
    if mem.get("proven"):
        out["memorization"] = {"claim": f"max_t |f(E^(t), x^(t)) - y^(t)| <= {_g(bound)}"}
    elif bound is None:
        out["memorization"] = {"reason": budget if over else "the enclosure of the outputs is not finite (an "
                                                             "overflow), so no bound on max_t |f - y| is proven"}
    else:
        out["memorization"] = {"reason": f"the bound {_g(bound)} on max_t |f - y| exceeds the allowed "
                                         f"{_g(cert['allowed'])}"}
    if "classification" in cert:
        c = cert["classification"]
        if c.get("proven"):
            out["classification"] = {"claim": f"zero of {T} examples misclassified: each true class beats every "
                                              f"other by at least {_g(c.get('margin_lower_bound'))}"}
        else:
            out["classification"] = {"reason": f"up to {_g(c.get('misclassified_upper_bound'))} example(s) may be "
                                               f"misclassified; the margin bound {_g(c.get('margin_lower_bound'))} "
                                               "is not above the error bound"}
    return out


# Entries of a block's features (rows × heads × d) per group of heads in the float64 enclosure:
# half the forward pass's groups (about twenty such arrays are live, twice its count). With 8
# heads of d = 64, certify's peak at H = 64 was 2.15 Z against 2.02-2.09 Z with 4, which took
# 1.5-1.9 s against 1.3-1.4 s there (in process, a noisy hour): memory first, as #13 asks.
_ENCLOSURE_ENTRIES = 1 << 16


def _float64_claims(weights: Weights, data: Dataset, allowed: float, softmax_rank: bool = True,
                    note: Callable[[str], None] | None = None) -> dict:
    """The claims' numbers for float64 weights, by :mod:`construct.enclose`.

    One pass over the examples, head by head: each head's features are enclosed and pushed
    through its value and output maps at once, so only ``Z`` itself (for the rank) is kept whole,
    with the outputs' enclosure and the size of ``Z``'s radius; the rows run in two halves, each
    in blocks of :attr:`Float64.cache_rows <construct.arith.cpu.Float64.cache_rows>` examples.
    The examples whose bound exceeds ``allowed`` are enclosed again in double words
    (:func:`construct.dword.outputs`), to about ``u²``. ``softmax_rank=False``: the rank as
    version 0.2.0 proved it on shared contexts (no route through the softmax), for
    :func:`check_certificate`. ``note``: told each stage as it finishes (:func:`_stages`).
    """
    stage = _stages(note)
    T, n, d = data.E.shape
    H, d_v = weights.H, weights.d_v
    Z = np.empty((T, H * d)) if H * d >= T else None            # the rank needs H·d ≥ T columns
    inputs = _layer_inputs(weights, data)
    E_all, E_rad, X_all, X_rad = inputs
    groups = head_groups(H, d, FLOAT64, T, _ENCLOSURE_ENTRIES)
    W_O = weights.W_O.reshape(H, d_v, -1)                       # head h's rows of W_O

    def part(lo: int, hi: int):
        o, o_rad, o_abs = (np.zeros((hi - lo, d)) for _ in range(3))
        rad_sq = 0.0
        with np.errstate(over="ignore", invalid="ignore"):     # per thread: an overflow leaves a claim unproven
            for a, b in row_blocks(lo, hi, FLOAT64.cache_rows):   # a block stays in cache through every head
                rows = slice(a - lo, b - lo)
                E, X = E_all[a:b, ...], X_all[a:b, ...]
                A = np.abs(E)
                radii = {} if E_rad is None else {"E_rad": E_rad[a:b, ...], "X_rad": X_rad[a:b, ...]}
                for h0, h1 in groups:                    # heads h0..h1−1 at once
                    z, z_rad = enclose.head_features(E, X, weights.W_K[h0:h1], weights.W_Q[h0:h1], A, **radii)
                    if Z is not None:
                        Z[a:b, h0 * d:h1 * d] = z.reshape(b - a, -1)
                    rad_sq += float(np.sum(z_rad * z_rad))
                    z, z_rad = z.transpose(1, 0, 2), z_rad.transpose(1, 0, 2)      # (heads, rows, d)
                    v, v_rad = enclose.matmul(z, z_rad, weights.W_V[h0:h1])
                    p, p_rad = enclose.matmul(v, v_rad, W_O[h0:h1])
                    o[rows] += p.sum(axis=0)             # a sum of H terms: within γ_H Σ|p| of exact
                    o_rad[rows] += p_rad.sum(axis=0)
                    o_abs[rows] += np.abs(p).sum(axis=0)
        return o, o_rad, o_abs, rad_sq

    with np.errstate(over="ignore", invalid="ignore"):       # an overflow leaves a claim unproven
        with FLOAT64.session():                  # two halves of the rows on two threads, BLAS on one
            parts = FLOAT64.rows(part, T)
        o, o_rad, o_abs = (np.concatenate([q[i] for q in parts]) for i in range(3))
        o_rad = enclose.up(enclose.up(o_rad, H) + enclose.gamma(H) * enclose.up(o_abs, H), 2)
        rad_norm = _root_up(sum(q[3] for q in parts), T * H * d)
        if weights.skip:
            o, o_rad = o + X_all, o_rad + enclose.U * np.abs(o + X_all) * 2
            if X_rad is not None:
                o_rad = enclose.up(o_rad + X_rad, 1)
        out, out_rad = enclose.matmul(o, o_rad, weights.W_D)
        bounds = enclose.up(np.abs(out - data.Y) + out_rad, 2).max(axis=1)     # per example
        stage(f"the features and outputs of {T} examples on {H} head{'s' if H != 1 else ''} enclosed in float64")
        rank = _gram_rank_claim(Z, rad_norm) if Z is not None else {}
        if Z is not None:
            stage(f"rank: {_outcome(bool(rank))} by the Gram matrix of Z")
        # Double words bound the outputs again where the float64 bound exceeds what is allowed,
        # after a pre-layer on its outputs in double words. Where the Gram route failed they also
        # give the softmax, to about u: on one shared context it proves the rank without Z
        # (_softmax_rank_claim); otherwise it encloses Z again, far tighter where the float64
        # enclosure carries the logits' rounding (not after a pre-layer: those routes take the
        # layer's inputs as exact).
        refine = softmax_rank and Z is not None and not rank and E_rad is None
        shared = refine and shared_context(data.E)
        softmax = None
        if refine:
            Z, softmax = None, (np.empty((T, H, n)), np.empty((T, H, n)))
        bounds, again = _tighter(bounds, weights, data, allowed, softmax)
        if again:
            stage(f"the {'softmax and ' if refine else ''}outputs of {again} examples enclosed again in double words")
        error_bound = float(bounds.max())
        if refine:
            rank = _softmax_rank_claim(*softmax, data.E[0]) if shared else {}
            if shared:
                stage(f"rank: {_outcome(bool(rank))} through the softmax")
            if not rank:
                Z, Z_rad = _shared_features(*softmax, data.E[0]) if shared else _context_features(*softmax, data.E)
                del softmax
                if not shared:                # the Gram route again, on the tighter enclosure
                    rank = _gram_rank_claim(Z, _frobenius_up(Z_rad))
                    stage(f"rank: {_outcome(bool(rank))} by the Gram matrix of Z enclosed from the softmax")
                if not rank:
                    rank = _residual_rank_claim(Z, Z_rad, T)
                    stage(f"rank: {_outcome(_residual_proves(rank))} by the residual of a right inverse of Z")
        elif Z is not None and not rank:      # too ill-conditioned for the Gram matrix (σ_min² below its rounding)
            rank = _residual_rank_claim(Z, _feature_radius(weights, inputs), T)
            stage(f"rank: {_outcome(_residual_proves(rank))} by the residual of a right inverse of Z")
        claims = {"memorization": {"max_abs_error_bound": error_bound if math.isfinite(error_bound) else None},
                  "rank": rank}
        labels = _one_hot_classes(data.Y)
        if labels is not None:
            lo = (out - out_rad) - 4 * enclose.U * np.abs(out) - enclose.TINY
            hi = (out + out_rad) + 4 * enclose.U * np.abs(out) + enclose.TINY
            claims["classification"] = _margin_claim(lo, hi, labels)
    return claims


def _stages(note: Callable[[str], None] | None) -> Callable[[str], None]:
    """``stage(what)``: tells ``note`` that ``what`` is done, with the seconds since the previous
    stage (or since this call); does nothing without ``note``."""
    last = time.perf_counter()

    def stage(what: str) -> None:
        nonlocal last
        if note is not None:
            now = time.perf_counter()
            note(f"{what} ({now - last:.1f} s)")
            last = now
    return stage


def _outcome(proven: bool) -> str:
    return "proven" if proven else "not proven"


def _residual_proves(rank: dict) -> bool:
    """Whether the residual route's bound proves ``Z X`` nonsingular (below 1)."""
    r = rank.get("residual_inf_norm_bound")
    return r is not None and r < 1.0


def _root_up(sum_of_squares: float, count: int) -> float:
    """``sqrt`` of a sum of ``count`` squares computed in float64, rounded up past both roundings."""
    return math.sqrt(float(enclose.up(np.array(sum_of_squares), count + 2))) * (1 + 4 * enclose.U)


def _frobenius_up(A: np.ndarray) -> float:
    """An upper bound on ``‖A‖_F``."""
    return _root_up(float(np.sum(A * A)), A.size)


def _tighter(bounds: np.ndarray, weights: Weights, data: Dataset, allowed: float,
             softmax: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, int]:
    """The per-example bounds on ``max |f − y|``, with the examples whose float64 bound exceeds
    ``allowed`` enclosed again in double words (:func:`construct.dword.outputs`, to about ``u²``);
    an example keeps the smaller of its two bounds. Only those examples pay for it, unless
    ``softmax`` (two (T, H, n) arrays) asks for every example's softmax and its radius. With a
    pre-layer, on its outputs in double words (:func:`construct.accurate.layer_inputs`).
    Returns the bounds and how many examples were enclosed again."""
    again = np.arange(data.T) if softmax is not None else np.flatnonzero(~(bounds <= allowed))
    if again.size == 0:
        return bounds, 0
    args = (weights.W_K, weights.W_Q, weights.W_V, weights.W_O, weights.W_D, weights.skip)
    E = data.E[0] if shared_context(data.E) else data.E[again]
    E, X = accurate_inputs(weights.prelayer, E, data.X[again])
    with FLOAT64.session():
        if softmax is not None:
            tight = dword.outputs(E, X, *args, rows=FLOAT64.rows, probabilities=softmax[0],
                                  probability_radius=softmax[1])
        else:
            tight = dword.outputs(E, X, *args, rows=FLOAT64.rows)
    bounds = bounds.copy()
    bounds[again] = np.fmin(bounds[again], dword.row_bounds(tight, data.Y[again]))
    return bounds, int(again.size)


def _softmax_rank_claim(P: np.ndarray, P_rad: np.ndarray, E: np.ndarray) -> dict:
    """On one shared context ``E`` (n, d): ``{"sigma_min_lower_bound": …}`` for ``Z`` from the
    softmax ``P`` (T, H, n), each entry within ``P_rad`` of the exact one, when it can be proven;
    otherwise ``{}``.

    Head ``h``'s features are ``P_h E``, so ``Z = Π (I_H ⊗ E)`` with ``Π = [P_1 … P_H]``
    (T × H·n). When ``E`` has full row rank, ``σ_min(Z) ≥ σ_min(Π)·σ_n(E)``: the residual route
    bounds ``σ_min`` of every ``Π`` within ``P_rad`` (:func:`_residual_rank_claim`), the Gram
    route bounds ``σ_n(E)`` (:func:`_gram_rank_claim`). ``Π`` has half the columns of ``Z`` at
    ``n = d/2``, its entries are probabilities, and it carries no rounding of the product with
    ``E``; on a shared context its condition number can be far below ``Z``'s, which sets how
    far the residual route reaches (its right inverse leaves ``I − ΠX`` about ``u·cond²``).
    """
    T, H, n = P.shape
    if H * n < T or n > E.shape[1]:
        return {}
    context = _gram_rank_claim(E, 0.0).get("sigma_min_lower_bound")
    if not context:
        return {}
    softmax = _residual_rank_claim(P.reshape(T, H * n), P_rad.reshape(T, H * n), T).get("sigma_min_lower_bound")
    return {"sigma_min_lower_bound": softmax * context * (1 - 2 * enclose.U)} if softmax else {}


def _shared_features(P: np.ndarray, P_rad: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """On one shared context ``E`` (n, d), the features from the softmax ``P`` (T, H, n), each
    entry within ``P_rad`` of the exact one: ``(Z, Z_rad)`` (T, H·d), head ``h``'s columns
    ``fl(P_h E)`` and ``γ_n |P_h||E| + P_rad,h |E|`` rounded up (:func:`construct.enclose.matmul`).
    Where the float64 enclosure carries the logits' rounding (``u·|ℓ|``, large on saturated
    heads), this one is about ``u`` relative."""
    T, H, n = P.shape
    d = E.shape[1]
    Z, Z_rad = np.empty((T, H * d)), np.empty((T, H * d))
    for h in range(H):
        cols = slice(h * d, (h + 1) * d)
        Z[:, cols], Z_rad[:, cols] = enclose.matmul(P[:, h, :], P_rad[:, h, :], E)
    return Z, Z_rad


def _context_features(P: np.ndarray, P_rad: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """On one context per example ``E`` (T, n, d), the features from the softmax ``P`` (T, H, n),
    each entry within ``P_rad`` of the exact one: ``(Z, Z_rad)`` (T, H·d), head ``h``'s columns
    ``fl(E^T P_h)`` and their radius (:func:`construct.enclose.mix`). Where the float64
    enclosure carries the logits' rounding (large where the logits cancel, as on square
    contexts), this one is about ``u`` relative."""
    T, H, _ = P.shape
    d = E.shape[2]
    Z, Z_rad = np.empty((T, H * d)), np.empty((T, H * d))
    for a, b in row_blocks(0, T, FLOAT64.cache_rows):         # a group's products read each block once
        absE = np.abs(E[a:b, ...])
        for h0, h1 in head_groups(H, d, FLOAT64, T, _ENCLOSURE_ENTRIES):
            z, z_rad = enclose.mix(E[a:b, ...], P[a:b, h0:h1, :], P_rad[a:b, h0:h1, :], absE)
            Z[a:b, h0 * d:h1 * d], Z_rad[a:b, h0 * d:h1 * d] = z.reshape(b - a, -1), z_rad.reshape(b - a, -1)
    return Z, Z_rad


# Shifts the rank claim tries: a fraction of the estimated σ_min(Z)², then smaller ones.
_SHIFTS = (0.5, 0.125, 1 / 32, 1 / 128)


def _gram_rank_claim(Z: np.ndarray, rad_norm: float) -> dict:
    """A positive lower bound on ``σ_min`` of every matrix within ``rad_norm`` (2-norm) of ``Z``,
    when one can be proven: ``{"sigma_min_lower_bound": …}``; otherwise ``{}``.

    Rump's verified positive definiteness: form ``G = fl(Z Z^T)``, estimate ``σ_min(Z)`` from its
    Cholesky factor, and factor ``fl(G − τI)`` for ``τ`` a fraction of the estimate squared.
    When that runs to completion, :func:`construct.enclose.gram_eigenvalue_lower` bounds
    ``σ_min(Z)²`` from below; Weyl's inequality then takes off ``rad_norm``. One Gram matrix and
    two or three Cholesky factorizations: no inverse, no residual. Memory: ``Z`` and ``G``.
    """
    T, k = Z.shape
    if not lapack.all_finite(Z):
        return {}
    G = lapack.gram(Z)
    diagonal = np.diagonal(G).copy()
    if not lapack.shifted_cholesky(G, diagonal, 0.0):
        return {}
    _, estimate = lapack.triangular_extremes(G, 1e-3)    # the factor is G's upper triangle; a rough σ_min
    for fraction in _SHIFTS:
        shift = fraction * estimate ** 2
        if shift > 0 and lapack.shifted_cholesky(G, diagonal, shift):
            sigma = math.sqrt(enclose.gram_eigenvalue_lower(diagonal, shift, k)) * (1 - 4 * enclose.U)
            lower = (sigma - rad_norm) * (1 - 2 * enclose.U)
            return {"sigma_min_lower_bound": lower} if lower > 0 else {}
    return {}


def _residual_rank_claim(Z: np.ndarray, Z_rad: np.ndarray, T: int) -> dict:
    """Bounds behind ``rank Z = T`` for every ``Z`` within ``Z_rad`` of the float64 ``Z``: the
    residual of an approximate right inverse ``X`` and, from it, a lower bound on ``σ_min(Z)``
    (module docstring; :func:`_residual_norms`). ``X`` comes from the Cholesky factor of
    ``Z Z^T``, which leaves a residual of about ``u·cond(Z)²`` and so proves the rank up to a
    condition number near ``1/√u``; where it does not (or Cholesky breaks down), from the
    pseudo-inverse, which leaves about ``u·cond(Z)``, at the cost of an SVD. Several times the
    Gram route's cost and memory (``X`` and ``I − ZX`` beside ``Z`` and ``Z_rad``; the
    pseudo-inverse takes about 3.5 times ``Z`` more).
    """
    F = Z.shape[1]
    if F < T or not (lapack.all_finite(Z) and lapack.all_finite(Z_rad)):
        return {"residual_inf_norm_bound": None}
    # Beyond what the start counted: X and I − ZX beside Z, and the Cholesky route's two T × T
    # matrices (lapack.right_inverse checks again before a pseudo-inverse).
    require_memory(8 * (Z.size + 3 * T * T), f"the rank of T = {T} examples by a right inverse of Z")
    Xr, how = lapack.right_inverse(Z)
    out = _right_inverse_claim(Z, Z_rad, Xr)
    if how == "cholesky" and not _residual_proves(out):
        # Cholesky did not break down, but its residual (about u·cond(Z)²) leaves the rank open:
        # near cond 1e8 the pseudo-inverse's (about u·cond(Z)) proves it. An SVD, also where
        # nothing can prove it (a Z that is singular looks to Cholesky as one of cond 1e8 does).
        del Xr
        again = _right_inverse_claim(Z, Z_rad, lapack.right_inverse(Z, pseudo=True)[0])
        if _residual_proves(again):
            out = again
    return out


def _right_inverse_claim(Z: np.ndarray, Z_rad: np.ndarray, Xr: np.ndarray) -> dict:
    """:func:`_residual_rank_claim` for the approximate right inverse ``Xr`` (overwritten)."""
    if not np.all(np.isfinite(Xr)):
        return {"residual_inf_norm_bound": None}
    r_inf, r_one = _residual_norms(Z, Z_rad, Xr)
    absX = Xr                                   # overwritten with |X|
    out = {"residual_inf_norm_bound": r_inf if math.isfinite(r_inf) else None}
    r2 = math.sqrt(r_one * r_inf) * (1 + 4 * enclose.U)
    if r2 < 1.0:
        with np.errstate(over="ignore"):        # ‖X‖_F beyond float64: data near its bottom
            x_norm = float(enclose.up(np.sqrt(enclose.up(float(np.vdot(absX, absX)), absX.size)), 2))
        # σ_min ≥ 0 where ‖X‖_F is beyond float64: what earlier certificates state there, so
        # they keep passing --check
        out["sigma_min_lower_bound"] = (1.0 - r2) / x_norm * (1 - 1e-15) if math.isfinite(x_norm) else 0.0
    return out


def _residual_norms(Z: np.ndarray, Z_rad: np.ndarray, X: np.ndarray) -> tuple[float, float]:
    """Upper bounds on ``‖I − Z̃X‖_∞`` and ``‖I − Z̃X‖_1`` for every ``Z̃`` within ``Z_rad`` of ``Z``
    (entrywise), for the float64 ``X`` (F, T); ``X`` is overwritten with ``|X|``.

    The entrywise bound ``B = |I − ZX| + (γ_F |Z| + Z_rad)|X|`` is needed only through its row and
    column sums: ``B·1 = |I − ZX|·1 + A(|X|·1)`` and ``1^T B = 1^T|I − ZX| + (1^T A)|X|`` with
    ``A = γ_F |Z| + Z_rad``, products with vectors (``A`` in blocks of rows) where ``A|X|`` would
    be a third product of the size of ``ZX``. Every term is nonnegative and each sum runs along a
    path of at most ``T + F + 5`` roundings, which :func:`construct.enclose.up` at ``T + F + 4``
    covers (its factor 2 leaves room); ``A``'s entries carry one underflow step (``TINY``) each,
    for a ``γ_F |Z|`` that underflows before it meets a large ``|X|``, and ``T·F·TINY`` covers
    the products that underflow inside ``fl(ZX)``.
    """
    T, F = Z.shape
    D = Z @ X                               # |I − ZX| in place: the roundings of np.eye(T) − Z @ X
    np.negative(D, out=D)
    D[np.diag_indices(T)] += 1.0
    np.abs(D, out=D)
    absX = np.abs(X, out=X)
    gamma, x_rows = enclose.gamma(F), absX.sum(axis=1)
    a_x, a_cols = np.empty(T), np.zeros(F)
    for a, b in row_blocks(0, T, FLOAT64.cache_rows):
        A = np.abs(Z[a:b])
        A *= gamma
        A += Z_rad[a:b]
        A += enclose.TINY
        a_x[a:b] = A @ x_rows
        a_cols += A.sum(axis=0)
        del A
    k, underflow = T + F + 4, T * F * enclose.TINY
    r_inf = float(enclose.up(D.sum(axis=1) + a_x, k).max()) + underflow
    r_one = float(enclose.up(D.sum(axis=0) + a_cols @ absX, k).max()) + underflow
    return r_inf, r_one


def _layer_inputs(weights: Weights, data: Dataset):
    """What the attention layer reads, enclosed: ``(E, E_rad, X, X_rad)``, the radii None when
    the inputs are exact (no pre-layer)."""
    if weights.prelayer is None:
        return data.E, None, data.X, None
    with np.errstate(over="ignore", invalid="ignore"):
        return enclose.mean_shift(data.E, data.X)


def _feature_radius(weights: Weights, inputs) -> np.ndarray:
    """The radius of the features' enclosure, (T, H·d): the second pass the residual route needs."""
    E, E_rad, X, X_rad = inputs
    T, _, d = E.shape
    Z_rad = np.empty((T, weights.H * d))
    for a, b in row_blocks(0, T, FLOAT64.cache_rows):
        radii = {} if E_rad is None else {"E_rad": E_rad[a:b, ...], "X_rad": X_rad[a:b, ...]}
        absE = np.abs(E[a:b, ...])
        for h0, h1 in head_groups(weights.H, d, FLOAT64, T, _ENCLOSURE_ENTRIES):
            Z_rad[a:b, h0 * d:h1 * d] = enclose.head_features(E[a:b, ...], X[a:b, ...], weights.W_K[h0:h1],
                                                              weights.W_Q[h0:h1], absE, **radii)[1].reshape(b - a, -1)
    return Z_rad


def _rank_claim(iv: Interval, Z: np.ndarray, T: int) -> dict:
    """Bounds behind ``rank Z = T`` from the interval ``Z``, as :func:`_float64_rank_claim`."""
    if Z.shape[1] < T:
        return {"residual_inf_norm_bound": None}
    try:
        Xr = iv.right_inverse(Z)
    except ZeroDivisionError:
        return {"residual_inf_norm_bound": None}
    D = iv.asarray(np.eye(T)) - Z @ iv.asarray(Xr)
    A = iv.magnitude(D)
    r_inf = float(enclose.up(A.sum(axis=1), T).max())
    r_one = float(enclose.up(A.sum(axis=0), T).max())
    out = {"residual_inf_norm_bound": r_inf if math.isfinite(r_inf) else None}
    r2 = math.sqrt(r_one * r_inf)
    if r2 < 1.0:
        with np.errstate(over="ignore"):        # ‖X‖_F beyond float64: data near its bottom
            x_norm = float(enclose.up(np.sqrt(enclose.up((iv.magnitude(iv.asarray(Xr)) ** 2).sum(), Xr.size)), 2))
        # σ_min ≥ 0 where ‖X‖_F is beyond float64: what earlier certificates state there, so
        # they keep passing --check
        out["sigma_min_lower_bound"] = (1.0 - r2) / x_norm * (1 - 1e-15) if math.isfinite(x_norm) else 0.0
    return out


def _one_hot_classes(Y: np.ndarray) -> np.ndarray | None:
    """Class index per example when every label row is one-hot (exact 0s and one exact 1)."""
    if Y.shape[1] < 2 or not np.all((Y == 0) | (Y == 1)) or not np.all(Y.sum(axis=1) == 1):
        return None
    return np.argmax(Y, axis=1)


def _margin_claim(lo: np.ndarray, hi: np.ndarray, labels: np.ndarray) -> dict:
    """Bounds behind "zero misclassified": the lowest value of each true class against the
    highest of every other class."""
    T = lo.shape[0]
    true_lo = lo[np.arange(T), labels]
    others = hi.copy()
    others[np.arange(T), labels] = -np.inf
    gap = true_lo - others.max(axis=1)
    gap = np.where(np.isnan(gap), -np.inf, gap)
    margin = float(gap.min())
    return {"classes": lo.shape[1], "margin_lower_bound": margin if math.isfinite(margin) else -1.0,
            "misclassified_upper_bound": int(np.sum(gap <= 0))}


def _excerpt(value, limit: int = 60) -> str:
    """``value`` as JSON, shortened in its middle (``…``) when longer than ``limit``: both ends
    stay, so a string keeps its closing quote and a number its exponent."""
    text = json.dumps(value)
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


class _Refused(ValueError):
    """A structural problem the JSON reader's hooks found (not a syntax error)."""


# Digits an integer of a certificate may have: its counts (T, H …) and bit counts are far shorter.
_MAX_DIGITS = 100


def read_certificate(text: str | bytes) -> dict:
    """Parse a certificate's JSON and check its structure (no claim is judged here).

    Raises:
        InputError: not JSON, not an object, a field of the wrong type, a required field missing,
            or another format or version; one line naming the field.
    """
    def refuse(problem: str) -> InputError:
        return InputError(problem, what="invalid certificate")

    def no_constant(name: str):
        raise _Refused(f"{name} is not a JSON number")

    def small_int(digits: str) -> int:
        if len(digits.lstrip("-")) > _MAX_DIGITS:
            raise _Refused(f"an integer of {len(digits.lstrip('-'))} digits, more than a certificate holds")
        return int(digits)

    def no_duplicates(pairs: list) -> dict:
        obj = dict(pairs)
        if len(obj) < len(pairs):                 # readers differ on which value counts
            seen: set = set()                     # (one pass: counting each key was quadratic)
            twice = sorted({k for k, _ in pairs if k in seen or seen.add(k)})
            raise _Refused(f"field {twice[0]!r} appears twice")
        return obj

    if not isinstance(text, (str, bytes, bytearray)):
        raise InputError(f"expected a certificate's JSON text (str or bytes), got {type(text).__name__} "
                         "(for a file: read_certificate(Path(name).read_bytes()))", what="invalid arguments")
    if len(text) > MAX_CERTIFICATE_BYTES:
        raise refuse(f"{len(text)} bytes is more than a certificate holds ({MAX_CERTIFICATE_BYTES} at most)")
    try:
        cert = json.loads(text, parse_constant=no_constant, parse_int=small_int, object_pairs_hook=no_duplicates)
    except _Refused as exc:
        raise refuse(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise refuse(f"not JSON ({str(exc)[:120]})") from None
    if not isinstance(cert, dict):
        raise refuse(f"expected a JSON object, got a JSON {type(cert).__name__}")
    if cert.get("format") != FORMAT or cert.get("version") != VERSION:
        raise refuse(f"format {cert.get('format')!r} version {cert.get('version')!r} is not this engine's "
                     f"({FORMAT!r} version {VERSION}); run certify again")

    def typed(where: str, obj: dict, schema: dict, required) -> None:
        for key in required:
            if key not in obj:
                raise refuse(f"field {where}{key} is missing")
        for key, value in obj.items():
            if key in schema:
                kinds = schema[key][1]
                if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
                    names = " or ".join(k.__name__ for k in kinds).replace("NoneType", "null")
                    raise refuse(f"field {where}{key} is {_excerpt(value, 40)}, not "
                                 f"{'an' if names[0] in 'aeiou' else 'a'} {names}")
                if float in kinds and value is not None and not _finite_float(value):
                    raise refuse(f"field {where}{key} is not a finite number")

    typed("", cert, SCHEMA, [k for k in SCHEMA if k != "interval_bits"] + ["rank", "memorization"])
    if cert["method"] not in ("float64", "interval") or (cert["method"] == "interval") != ("interval_bits" in cert):
        raise refuse(f"method {cert['method']!r}: expected float64, or interval with interval_bits")
    for key in CLAIMS:
        if key in cert:
            if not isinstance(cert[key], dict):
                raise refuse(f"field {key} is not an object")
            typed(f"{key}.", cert[key], CLAIM_SCHEMA, ["proven"])
    return cert


def _finite_float(value) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:                              # an integer beyond float's range
        return False


@numpy_error_defaults
def check_certificate(cert: dict | Certificate, weights: Weights, data: Dataset, *,
                      progress: Callable[[str], None] | None = None) -> list[str]:
    """Reasons to reject ``cert`` for these files; empty when every field is proven again.

    ``cert``: a certificate's dict (:func:`read_certificate`'s, or :attr:`Certificate.claims`), or
    the :class:`Certificate` :func:`certify` returned. ``progress``: as :func:`certify`'s, for
    the recomputation.

    The certificate is recomputed from the two files with its own method, tolerance and interval
    precision (bounded: at most what :func:`certify` would use), and compared field by field as
    :data:`SCHEMA` says: identities exactly, bounds as "no stronger than the recomputed bound",
    sentences rendered again from the certificate's own numbers. A field that is not part of a
    certificate is a reason to reject it.

    Raises:
        InputError: a malformed certificate (:func:`read_certificate`) or a parameter out of
            bounds; the weights do not fit the data.
    """
    if isinstance(cert, Certificate):
        cert = cert.claims
    try:          # compact, as short as the file it came from: the size limit is for reading files
        text = json.dumps(cert, allow_nan=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        raise InputError("not a JSON-like object of numbers and strings", what="invalid certificate") from None
    cert = read_certificate(text)               # the structure, as for a file (its reason, naming the field)
    try:
        tol = tolerance(cert["tol"], "tol")
    except InputError as exc:
        raise InputError(f"field tol is {_excerpt(cert['tol'])}: {str(exc).split(': ', 1)[-1]}",
                         what="invalid certificate") from None
    bits, top = cert.get("interval_bits"), default_bits(checked_weights(weights))
    if bits is not None and not 53 <= bits <= top:
        raise InputError(f"field interval_bits is {bits}: certify works at 53 to {top} bits for these weights",
                         what="invalid certificate")
    if cert["method"] == "float64" and weights.bits is not None:      # a parameter out of bounds, as above
        raise InputError(f"field method is float64, which certifies float64 weights only; these weights have "
                         f"{weights.bits} bits (their certificates come from the interval method)",
                         what="invalid certificate")
    fresh = certify(weights, data, tol=tol, method=cert["method"], bits=bits, progress=progress).claims
    problems = _compare("", cert, fresh, SCHEMA, cert)
    if (any(p.startswith("rank.") for p in problems) and cert["method"] == "float64"
            and weights.prelayer is None):
        # Version 0.2.0 proved the rank, where the Gram route failed, by the residual route over
        # Z's float64 enclosure, not through the softmax: its numbers stand if that route proves
        # them again.
        earlier = _finish({**{k: v for k, v in fresh.items() if k not in CLAIMS},
                           **_float64_claims(weights, data, fresh["allowed"], softmax_rank=False)}).claims
        if not any(p.startswith("rank.") for p in _compare("", cert, earlier, SCHEMA, cert)):
            problems = [p for p in problems if not p.startswith("rank.")]
    # A weaker bound is still true, but "proven" must follow from the certificate's own numbers.
    for key, proven in _proven_by(cert).items():
        if key in cert and cert[key]["proven"] != proven:
            problems.append(f"{key}.proven: the certificate's own numbers {'do' if proven else 'do not'} "
                            f"prove it")
    return problems


def _compare(where: str, given: dict, fresh: dict, schema: dict, cert: dict) -> list[str]:
    """Field-by-field differences of ``given`` from ``fresh`` under ``schema``'s rules."""
    problems = []
    sentences = _sentences(cert).get(where.rstrip("."), {}) if where else {}
    for key in list(given) + [k for k in fresh if k not in given]:
        name = f"{where}{key}"
        if key not in fresh:                 # a name that is not plain text as JSON writes it, shortened
            shown = key if key.isprintable() and len(key) <= 60 else _excerpt(key)
            problems.append(f"{where}{shown}: not a field of a certificate for these files")
            continue
        if key not in given:
            problems.append(f"{name}: missing; certify states {_excerpt(fresh[key])} for these files")
            continue
        mine, now = given[key], fresh[key]
        if key in CLAIMS:
            problems += _compare(f"{key}.", mine, now, CLAIM_SCHEMA, cert)
            continue
        rule = schema[key][0]
        if rule == "text":
            if mine != sentences.get(key):
                problems.append(f"{name}: the sentence does not say what the certificate's numbers prove "
                                f"({sentences.get(key)!r})")
        elif rule == "exact" or mine is None or now is None:
            if mine != now:
                what = "the certificate is for other files" if key.endswith("sha256") else \
                    f"these files give {_excerpt(now)}"
                problems.append(f"{name}: the certificate says {_excerpt(mine)}; {what}")
        elif (rule == "upper" and mine < now) or (rule == "lower" and mine > now):
            problems.append(f"{name}: the certificate states {mine:.6g}; only {now:.6g} can be proven "
                            "for these files")
    return problems
