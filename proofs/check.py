"""The result every statement check returns: hypotheses, conclusion, and the quantities behind them.

A check evaluates a statement of the paper (docs/math.md §3) on concrete arrays. Each hypothesis is
decided separately, so a failed check says *which* hypothesis failed; the conclusion is evaluated
whenever it can be (it is ``None`` only when a failed hypothesis makes it meaningless, e.g. Claim 1
with dependent queries has no ``W_S``). A statement is contradicted only when every hypothesis
holds and the conclusion fails.

Numerical conventions, shared by every check:

- Ranks: :func:`construct.arith.numerical_rank`, one tolerance ``max(shape)·ε·σ_max``.
- "Exact" attention targets (Claims 1 and 2): each probability within :data:`EXACT_TOL` of its
  target *relative to the target* (:func:`target_error`), plus what :func:`logit_radius`
  allows: the forward-error bound ``η`` of evaluating the logits ``E W_K W_Q^T x`` through their
  factors in float64, entry by entry (with a scale ``c`` in ``W_K`` it holds the rank-one term's
  rounding; with ill-conditioned queries, the cancellation inside ``W_K W_Q^T``). Logits each
  within ``η`` change every probability by a factor within ``e^{±2η}`` (:func:`target_tol`).
  Relative, because an absolute tolerance cannot see a small target: ``10^-12`` fitted as
  ``10^-11`` is off by ``9·10^-12``. A fit within a tolerance above :data:`CONFIRM_TOL` is
  undecided (31% allowed a fit 1% off to be called exact); one beyond it is refuted; at a
  tolerance of 1 or more, neither.
- Fitted labels: :func:`construct.verify`'s tolerance, relative to the labels' scale.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from construct.arith import EPS, for_bits, numerical_rank, rank_tol
from construct.arith.threads import blas_limit
from construct.data import checked
from construct.enclose import gamma, up
from construct.errors import InputError
from construct.limits import integer
from construct.model import feature_matrix, layer_inputs, logit_term_sizes

EXACT_TOL = 1e-9

# The largest relative tolerance at which an attention target's fit is confirmed: beyond it the
# logits' rounding allowance (nearly dependent queries, large weights) is too coarse to call a fit
# exact, and a fit within it is undecided. A fit beyond the tolerance is still refuted.
CONFIRM_TOL = 1e-3

__all__ = ["CONFIRM_TOL", "Check", "EXACT_TOL", "factored_rank", "features_rank", "features_rounding", "logit_radius",
           "rank_at_most", "target_error", "target_tol", "traced_head"]


def traced_head(result, head: int, who: str):
    """Head ``head``'s trace and evidence (heads from 2) of a float64 build made with ``trace=True``.

    Raises:
        ValueError: no trace, high-precision weights, or no such later head (an ``InputError``
            where ``head`` is not an integer).
    """
    head = integer(head, "head")
    if not result.trace:
        raise ValueError(f"{who} needs a build made with trace=True")
    if result.weights.bits is not None:
        raise ValueError(f"{who} checks float64 builds; build with precision='float64'")
    if not 2 <= head <= len(result.trace):
        raise ValueError(f"head must be between 2 and {len(result.trace)}, got {head}")
    return result.trace[head - 1], result.heads[head - 1]


def layer_data(result) -> tuple[np.ndarray, np.ndarray]:
    """``(E, X)`` the attention layer of a build's weights reads: its data after the weights'
    pre-layer, if they have one (the build's trace refers to those)."""
    return layer_inputs(result.weights, result.data.E, result.data.X)


def a1_status(X: np.ndarray, n: int) -> tuple[str, bool | None]:
    """Whether the queries ``X`` meet A1 as the paper states it (every ``n`` of them linearly
    independent: Kruskal rank at least ``n``), decided exactly where at most
    :data:`construct.assumptions.EXACT_BUDGET` subsets are to be checked: a line for the
    quantities, and True, False or None (not decided).

    Theorem 1's and Proposition 1's checks decide the partition condition instead (what the
    construction needs, which A1 implies): where A1 fails and that condition holds, what they
    confirm is the statement with the weaker hypothesis, and their name says so."""
    from math import comb

    from construct.assumptions import EXACT_BUDGET, kruskal_check
    T = X.shape[0]
    if comb(T, n) > EXACT_BUDGET:
        return f"not decided (C({T}, {n}) subsets of queries, more than {EXACT_BUDGET:,})", None
    a1 = kruskal_check(X, n, "queries", 1, budget=EXACT_BUDGET)
    if a1.exact_holds is None:
        return "not decided", None
    return ("holds" if a1.exact_holds else f"fails (Kruskal rank of the queries {a1.exact_rank} < n = {n})",
            bool(a1.exact_holds))


def weaker_than_a1(statement: str, a1: bool | None) -> str:
    """``statement``, or where A1 is known to fail, named as the statement with the partition
    condition in its place (:func:`a1_status`)."""
    return statement if a1 is not False else f"{statement} (the partition condition in place of A1, which fails)"


def features_rank(data, weights) -> tuple[np.ndarray, int, np.ndarray]:
    """``Z`` of ``weights`` on ``data`` (after their pre-layer, if any) in the weights' own
    arithmetic (float64, or mpmath at their bits), its numerical rank there and its singular
    values (float64, descending)."""
    ar = for_bits(weights.bits)
    with ar.working():
        E, X = layer_inputs(weights, ar.asarray(data.E), ar.asarray(data.X), ar)
        Z = feature_matrix(E, X, weights, ar, layered=True)
        rank, s = ar.numerical_rank(Z)
    return Z, rank, s


def logit_radius(E: np.ndarray, X: np.ndarray, W_K: np.ndarray, W_Q: np.ndarray) -> np.ndarray:
    """How far float64 logits ``e_i^T W_K W_Q^T x`` of contexts ``E`` (T, n, d) and queries ``X``
    (T, d) may be from exact, per example (the largest over its tokens), shape (T,).

    The product of four factors, grouped in any way, is within ``γ_k |e_i|^T |W_K| |W_Q|^T |x|``
    of exact with ``k = 2d + d_h`` (the three sums it takes; :func:`construct.enclose.gamma`), away
    from underflow, entry by entry: the rounding of each logit at its own scale, where the norms'
    ``k ε ‖E‖ ‖W_K‖ ‖W_Q‖ ‖x‖`` (:func:`construct.policy.logit_rounding`) take the whole
    context's and the largest direction's. With a saturation scale ``c`` in ``W_K`` it holds the
    rank-one term's rounding; with nearly dependent queries, the cancellation inside ``W_K W_Q^T``.
    """
    if not E.size or not W_K.size:
        return np.zeros(E.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):
        size = logit_term_sizes(E, X, W_K, W_Q)
        k = 2 * E.shape[-1] + W_K.shape[1]
        radius = up(gamma(k) * size.max(axis=1, initial=0.0), k)       # past the bound's own rounding
    return np.where(np.isnan(radius), np.inf, radius)


def target_error(p: np.ndarray, s: np.ndarray) -> float:
    """The largest relative error ``|p − s| / s`` of attention ``p`` against targets ``s`` (same
    shape, ``s > 0``); a target below float64's smallest normal number counts as that number (the
    attention's rounding is absolute there). 0 with nothing to fit."""
    if not s.size:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        err = np.abs(p - s) / np.maximum(s, np.finfo(np.float64).tiny)
    return float(np.max(err)) if np.all(np.isfinite(err)) else float("inf")


def target_tol(eta: float) -> float:
    """The relative tolerance of :func:`target_error` where each logit is within ``eta`` of its
    exact value: :data:`EXACT_TOL` plus ``e^{2 eta} − 1`` (``inf`` where that overflows). From
    1 on it decides nothing: a probability could be off by a factor of 2."""
    with np.errstate(over="ignore"):
        return float(EXACT_TOL + np.expm1(2 * eta))


def features_rounding(E: np.ndarray, H: int, eps: float) -> float:
    """A bound on how far the computed ``Z`` (T, H·d) of contexts ``E`` (T, n, d) is from a matrix
    of exact convex combinations of the tokens (``E^(t)T s`` with ``s`` summing to 1), in 2-norm.

    The ceilings of Propositions 2 and 5 hold for every such matrix, whatever the logits (their
    rounding only changes which ``s``). What rounding adds: the attention sums to 1 within
    ``(n + 1)u``, and ``E^T s`` rounds by ``n u Σ_i s_i |e_ij|``; so each entry is off by at most
    ``(2n + 1) u max_i |e_ij|``, bounded here by ``(2n + 4) ε`` of it (``u = ε/2``), and the
    2-norm by the Frobenius norm. Relative to the tokens, not to ``Z``: where the tokens nearly
    cancel, ``Z`` is small and its rank tolerance far below this.
    """
    if not E.size:
        return 0.0
    n = E.shape[1]
    largest = np.abs(E).max(axis=1)                               # (T, d): max_i |e_ij|
    with np.errstate(over="ignore"):
        return float((2 * n + 4) * eps * np.sqrt(H) * np.linalg.norm(largest))


def rank_at_most(rank: int, s: np.ndarray, bound: int, shape: tuple, rounding: float,
                 eps: float = EPS) -> bool | None:
    """Whether a rank ceiling holds: True when the numerical ``rank`` is at most ``bound``; None
    when the singular values beyond ``bound`` are within ``rounding`` (plus the rank tolerance at
    the arithmetic's ``eps``, the SVD's own error), so the arithmetic cannot tell them from 0;
    False otherwise."""
    if rank <= bound:
        return True
    if float(s[bound]) <= rounding + rank_tol(float(s[0]), shape, eps):
        return None
    return False


def factored_rank(K: np.ndarray, Q: np.ndarray) -> int:
    """Numerical rank of ``K Q^T`` for ``K``, ``Q`` (d, m), from the small core ``R_K R_Q^T``.

    ``K = Q_K R_K`` and ``Q = Q_Q R_Q`` with orthonormal ``Q_K``, ``Q_Q``, so ``K Q^T`` and
    ``R_K R_Q^T`` have the same singular values; forming the d × d product instead would add
    rounding of size ``ε‖K‖‖Q‖``, which can exceed the rank tolerance when ``K Q^T`` cancels.
    """
    if K.shape[1] == 0:
        return 0
    core = np.linalg.qr(K, mode="r") @ np.linalg.qr(Q, mode="r").T
    return numerical_rank(core)[0]


def options(data, heads, head_dim=None, value_dim=None) -> tuple:
    """The checked dataset, ``H``, ``d_h`` and ``d_v`` (defaults ``n`` and ``d_o``): integers ≥ 1,
    refused otherwise (never truncated), as :func:`construct.build` refuses them.

    Raises:
        InputError: not a dataset, or an option that is not an integer ≥ 1.
    """
    data = checked(data)
    return (data, integer(heads, "heads"), data.n if head_dim is None else integer(head_dim, "head_dim"),
            data.d_o if value_dim is None else integer(value_dim, "value_dim"))


def arrays(**named) -> tuple[np.ndarray, ...]:
    """The arrays a check is given, as float64: ``name=(value, "T n d")`` names each axis, and an
    axis named twice must have one size (empty axes are allowed: no examples of a kind).

    Raises:
        InputError: a value that is not an array of finite real numbers, with the wrong number of
            axes, or whose sizes disagree with another's; every problem named by its argument.
    """
    problems, out, sizes = [], [], {}
    for name, (value, axes) in named.items():
        letters = axes.split()
        a = None
        try:
            raw = np.asarray(value)
            if raw.dtype.kind in "biufO":                   # not strings or dates, never complex
                a = np.asarray(raw, dtype=float)
        except (TypeError, ValueError, OverflowError):     # ragged, objects that are no numbers, 10**400
            raw = None
        if a is None:
            kind = "complex values" if raw is not None and raw.dtype.kind == "c" else "not an array of real numbers"
            problems.append(f"{name}: {kind}")
            out.append(None)
            continue
        out.append(a)
        if a.ndim != len(letters):
            problems.append(f"{name}: expected shape ({', '.join(letters)}), got {a.shape}")
            continue
        if not np.all(np.isfinite(a)):
            problems.append(f"{name}: non-finite values (NaN or inf)")
        for letter, size in zip(letters, a.shape):
            seen = sizes.setdefault(letter, (size, name))
            if seen[0] != size:
                problems.append(f"{name}: {letter} = {size}, but {seen[1]} has {letter} = {seen[0]}")
    if problems:
        raise InputError(list(dict.fromkeys(problems)), what="invalid arrays")   # each problem once
    return tuple(out)


def real(value, name: str) -> float:
    """``value`` as a ``float`` if it is a real number: Python's or NumPy's (a 0-d array too), a
    ``Fraction``, an mpmath number; not a bool, a string or a complex number. NaN and infinities
    pass, for the check to judge.

    Raises:
        InputError: anything else, naming ``name``.
    """
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iuf":
        value = value.item()
    if isinstance(value, (bool, np.bool_, str, bytes, complex, np.complexfloating, np.ndarray)):
        raise InputError(f"{name} must be a real number, got {value!r} ({type(value).__name__})",
                         what="invalid option")
    try:
        return float(value)
    except OverflowError:                              # an integer beyond float's range
        return float("inf") if value > 0 else float("-inf")
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a real number, got {value!r} ({type(value).__name__})",
                         what="invalid option") from None


def one_blas_thread(check):
    """``check`` with BLAS on one thread while it runs, as the engine runs its own small
    operations (:func:`construct.arith.threads.blas_limit`): the checks' many SVDs of a few hundred
    rows ran 5-15 times slower on two OpenBLAS threads of a busy 2-core machine."""
    @functools.wraps(check)
    def limited(*args, **kwargs):
        with blas_limit(1):
            return check(*args, **kwargs)
    return limited


def machine_limit(exc: Exception) -> bool:
    """Whether a build's error is this machine's limit (a request beyond its memory): a check
    passes it on rather than reporting the statement as contradicted."""
    return isinstance(exc, InputError) and exc.what.startswith("request too large")


@dataclass(frozen=True)
class Check:
    """The outcome of checking one statement on concrete arrays.

    Attributes:
        statement: which statement, as docs/math.md names it (``"Lemma 4"``).
        hypotheses: each hypothesis, by name, and whether it holds on these arrays.
        conclusion: whether the conclusion holds; None when it could not be evaluated.
        quantities: the numbers the conclusion was decided on (ranks, bounds, errors).
    """

    statement: str
    hypotheses: dict[str, bool]
    conclusion: bool | None
    quantities: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Names of the hypotheses that do not hold."""
        return [name for name, ok in self.hypotheses.items() if not ok]

    @property
    def applies(self) -> bool:
        """Every hypothesis holds, so the statement makes a claim about these arrays."""
        return not self.failed

    @property
    def confirmed(self) -> bool:
        """The statement applies and its conclusion holds."""
        return self.applies and self.conclusion is True

    @property
    def contradicted(self) -> bool:
        """The statement applies and its conclusion fails: a counterexample (or a bug)."""
        return self.applies and self.conclusion is False

    def __str__(self) -> str:
        verdict = ("confirmed" if self.confirmed else "CONTRADICTED" if self.contradicted
                   else "undecided (no conclusion from these numbers)" if self.applies
                   else f"does not apply: hypothes{'is' if len(self.failed) == 1 else 'es'} "
                        + ", ".join(f"“{h}”" for h in self.failed) + (" fails" if len(self.failed) == 1 else " fail"))
        lines = [f"{self.statement}: {verdict}"]
        for name, value in self.quantities.items():             # the scalars; arrays stay in .quantities
            if isinstance(value, (float, np.floating)):
                lines.append(f"  {name} = {value:.6g}")
            elif isinstance(value, (bool, int, str, np.integer, np.bool_)):
                lines.append(f"  {name} = {value}")
        return "\n".join(lines)
