"""The paper's data assumptions (docs/math.md §2) as checks on a dataset.

- Kruskal rank of a set of vectors: the largest ``k`` such that every ``k`` of them are linearly
  independent. Exact computation enumerates subsets (NP-hard in general), so it runs only while
  the number of subsets stays under a budget; otherwise the paper's sampled test is used.
- A1: queries have Kruskal rank ≥ n. Sampled test (paper §5.1): draw ``n`` queries at random,
  check rank ``n``; 5000 trials; "holds" if at least 99% pass.
- A2: every context has full row rank ``n``.
- A3: the vectors ``x^(t) + mean_i e_i^(t)`` have Kruskal rank ≥ n (sampled like A1).
- General position of the queries: Kruskal rank ``= min(T, d)`` (sampled with subsets of that size).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import combinations
from math import comb

import numpy as np

from .data import Dataset, checked
from .errors import InputError, numpy_error_defaults
from .limits import as_float64, integer, real_array, require_memory
from .enclose import gamma
from .arith import EPS, FLOAT64, numerical_rank

SAMPLED_TRIALS = 5000
SAMPLED_THRESHOLD = 0.99
EXACT_BUDGET = 20_000


@numpy_error_defaults
def kruskal_rank(V: np.ndarray, budget: int = EXACT_BUDGET) -> int | None:
    """Exact Kruskal rank of the rows of ``V`` (m, d); None if it would check more than ``budget`` subsets.

    Every subset's rank is decided with :func:`construct.arith.rank_tol`.
    """
    V = _vectors(V)
    budget = integer(budget, "budget", 0)
    m = V.shape[0]
    top = min(m, V.shape[1])
    checked = 0
    for k in range(1, top + 1):
        checked += comb(m, k)
        if checked > budget:
            return None
        for subset in combinations(range(m), k):
            if numerical_rank(V[list(subset)])[0] < k:
                return k - 1
    return top


def _vectors(V) -> np.ndarray:
    """``V`` as a finite float64 matrix whose rows are the vectors, each scaled by a power of two
    to unit size: exactly, but for entries 2^-1022 and more below their row's largest, which
    underflow and lie far below its rank tolerance anyway. Which rows are independent does not
    depend on their sizes, and each subset's rank is then decided at its rows' own scale, not the
    largest row's ([[1e20, 0], [0, 1]] read as rank 1; rows near 1.7e308 overflowed the rank's
    arithmetic). An :class:`InputError` names a ``V`` that is not such a matrix (a list, a
    vector, an inf would otherwise fail inside NumPy or LAPACK)."""
    problems: list[str] = []
    V = real_array("V", V, problems)
    if V is not None and V.ndim != 2:
        problems.append(f"V: expected the vectors as rows of a matrix (m, d), got shape {V.shape}")
    elif V is not None:
        V = as_float64("V", V, problems)
        if V is not None and not np.isfinite(V).all():
            problems.append("V: non-finite values (NaN or inf)")
    if problems:
        raise InputError(problems, what="invalid arrays")
    top = np.max(np.abs(V), axis=1, initial=0.0)
    with np.errstate(under="ignore"):    # entries 2^-1022 below their row's largest: below its rounding anyway
        return np.ldexp(V, -np.frexp(top)[1][:, None])         # a zero row stays zero


def sampled_independence(V: np.ndarray, size: int, trials: int = SAMPLED_TRIALS,
                         seed: int = 0) -> float:
    """Fraction of ``trials`` random ``size``-subsets of the rows of ``V`` that are linearly independent."""
    V, size = _vectors(V), integer(size, "size", 0)
    trials, seed = integer(trials, "trials"), integer(seed, "seed", 0)
    m = V.shape[0]
    if size > min(m, V.shape[1]):
        return 0.0
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.choice(m, size=size, replace=False) for _ in range(trials)])
    return float(np.mean(_independent(V, idx)))


def _independent(V: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """For each row of ``idx`` (subsets, size), whether those rows of ``V`` are linearly
    independent under the one rank tolerance (batched singular values)."""
    s = FLOAT64.svdvals(V[idx])                                  # (subsets, size)
    return (s > max(idx.shape[1], V.shape[1]) * EPS * s[:, :1]).all(axis=1)


def a2_violations(E: np.ndarray) -> np.ndarray:
    """Indices of the examples whose context ``E^(t)`` (n, d) is not of full row rank ``n``.

    The rank is decided by :func:`construct.arith.rank_tol` on the singular values of each
    context. Contexts that :func:`_clearly_full_rank` certifies skip the singular values (a
    batched Cholesky is about a sixth of a batched SVD); the others get them.
    """
    n, d = E.shape[1:]
    if n > d:
        return np.arange(E.shape[0])
    unknown = np.flatnonzero(~_clearly_full_rank(E))
    if unknown.size == 0:
        return unknown
    s = FLOAT64.svdvals(E[unknown])
    tol = max(n, d) * EPS * s[:, :1]
    return unknown[(s <= tol).any(axis=1)]


def _clearly_full_rank(E: np.ndarray) -> np.ndarray:
    """Per context, True when ``σ_min(E^(t)) > 2·max(n, d)·ε·‖E^(t)‖_F``, proven with rounding.

    Cholesky of ``G − τ I``, ``G = fl(E E^T)``, succeeds only if ``G − τ I + ΔA`` is positive
    definite with ``‖ΔA‖ ≤ γ_{n+1} trace`` (Higham, Thm 10.3), and ``‖fl(E E^T) − E E^T‖ ≤ γ_d
    ‖E‖_F²``; so success with ``τ`` = the squared threshold plus both terms proves ``σ_min² >``
    the threshold. The factor 2 keeps certified contexts clear of the singular-value rule's own
    rounding. All False when any Cholesky fails (then every context gets its singular values).
    """
    T, n, d = E.shape
    if T == 0:
        return np.zeros(0, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):     # beyond float64: not certified here
        G = E @ E.transpose(0, 2, 1)
        fro2 = np.trace(G, axis1=1, axis2=2) * (1 + gamma(d))       # ≥ ‖E^(t)‖_F²
        tau = (2 * max(n, d) * EPS) ** 2 * fro2 + 2 * (gamma(d) + gamma(n + 1)) * fro2
        shifted = G - tau[:, None, None] * np.eye(n)
    if not (np.all(np.isfinite(shifted)) and FLOAT64.positive_definite(shifted)):
        return np.zeros(T, dtype=bool)
    return fro2 > 0


@dataclass(frozen=True)
class KruskalCheck:
    """One Kruskal-rank assumption: the required rank, the sampled test and, if small, the exact
    rank; ``exact_holds``: whether every ``required``-subset is independent, where all of them
    were checked (else None; it is known without the exact rank when fewer subsets suffice);
    ``rank``: with fewer vectors than ``required`` (the assumption cannot hold), their rank, for
    what the build needs of them then: all of them independent (else None)."""

    vectors: str
    required: int
    sampled_fraction: float
    sampled_holds: bool
    exact_rank: int | None
    holds: bool
    exact_holds: bool | None = None
    rank: int | None = None

    @property
    def verdict(self) -> str:
        """``"holds"``, ``"fails"``, or ``"n/a"`` with fewer vectors than ``required``."""
        return "n/a" if self.rank is not None else "holds" if self.holds else "fails"


def kruskal_check(V: np.ndarray, required: int, vectors: str, trials: int = SAMPLED_TRIALS, seed: int = 0,
                  budget: int = EXACT_BUDGET) -> KruskalCheck:
    """Whether the rows of ``V`` have Kruskal rank ≥ ``required``: exact when the budget allows, else sampled."""
    V, required = _vectors(V), integer(required, "required", 0)
    frac = sampled_independence(V, required, trials, seed)
    exact = kruskal_rank(V, budget)
    sampled_holds = frac >= SAMPLED_THRESHOLD
    exact_holds = exact >= required if exact is not None else _every_subset_independent(V, required, budget)
    holds = exact_holds if exact_holds is not None else sampled_holds
    few = int(numerical_rank(V)[0]) if V.shape[0] < required else None
    return KruskalCheck(vectors=vectors, required=required, sampled_fraction=frac,
                        sampled_holds=sampled_holds, exact_rank=exact, holds=holds, exact_holds=exact_holds,
                        rank=few)


def _every_subset_independent(V: np.ndarray, size: int, budget: int) -> bool | None:
    """Whether every ``size``-subset of the rows of ``V`` is linearly independent (Kruskal rank
    ≥ ``size``: a subset of an independent set is independent); None beyond ``budget`` subsets."""
    m = V.shape[0]
    if size > min(m, V.shape[1]):
        return False
    if comb(m, size) > budget:
        return None
    return bool(np.all(_independent(V, np.array(list(combinations(range(m), size))))))


@dataclass(frozen=True)
class AssumptionReport:
    """A1, A2, A3 and general position for one dataset, and whether its labels fit the tokens
    (``outputs``: ``d_o ≤ d``, which Theorem 1 needs: the readout ``W_D`` is ``d × d_o``)."""

    T: int
    n: int
    d: int
    a1: KruskalCheck
    a2_violations: list[int]
    a2: bool
    a3: KruskalCheck
    general_position: KruskalCheck
    d_o: int = 1
    outputs: bool = True

    def to_dict(self) -> dict:
        """The report as JSON-ready values, with each Kruskal check's ``verdict`` and the whole
        report's ``passed`` (what the exit code of ``assumptions`` says)."""
        out = asdict(self)
        for key in ("a1", "a3", "general_position"):
            out[key]["verdict"] = getattr(self, key).verdict
        out["passed"] = self.passed
        return out

    @property
    def passed(self) -> bool:
        """A2, ``d_o ≤ d``, and A1; with fewer than ``n`` examples, where A1 cannot hold, what the
        build needs of the queries in its place: all ``T`` of them independent."""
        a1 = self.a1.holds if self.a1.rank is None else self.a1.rank == self.T
        return bool(a1 and self.a2 and self.outputs)


@numpy_error_defaults
def check_assumptions(data: Dataset, trials: int = SAMPLED_TRIALS, seed: int = 0,
                      budget: int = EXACT_BUDGET) -> AssumptionReport:
    """Check A1, A2, A3 and the queries' general position (docs/math.md §2).

    When ``T < n`` no ``n`` queries exist, so A1 and A3 cannot hold; they are reported as failed.

    Raises:
        InputError: ``trials`` not an integer ≥ 1, ``seed`` or ``budget`` not an integer ≥ 0, or
            the sampled subsets would not fit in memory (with the estimate).
    """
    data = checked(data)
    trials, seed = integer(trials, "trials"), integer(seed, "seed", 0)
    budget = integer(budget, "budget", 0)
    T, n, d = data.T, data.n, data.d
    size = max(n, min(T, d))                    # the largest subsets sampled: their indices, rows and
    require_memory(trials * (8 * size * (d + 2) + 200),        # singular values, and one small array each
                   f"sampling {trials} subsets of {size} queries")
    E, X = _unit_scale(data.E), _unit_scale(data.X)
    bad = a2_violations(E)
    a3_vectors = _shifted_queries(data.E, data.X)
    return AssumptionReport(
        T=T, n=n, d=d,
        a1=kruskal_check(X, n, "queries x", trials, seed, budget),
        a2_violations=[int(i) for i in bad], a2=bad.size == 0,
        a3=kruskal_check(a3_vectors, n, "x + mean_i e_i", trials, seed, budget),
        general_position=kruskal_check(X, min(T, d), "queries x", trials, seed, budget),
        d_o=data.d_o, outputs=data.d_o <= d,
    )


def _unit_scale(a: np.ndarray) -> np.ndarray:
    """``a`` divided by the power of two that brings its largest entry into [1/2, 1): ranks ignore
    a common factor, and near float64's largest numbers the singular values themselves overflow
    (every context's rank then read as deficient), as the build, which runs such data at unit
    scale, does not. The division is exact."""
    top = float(np.abs(a).max())
    return np.ldexp(a, -int(np.frexp(top)[1])) if top > 0 else a


def _shifted_queries(E: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The vectors of A3, ``x^(t) + mean_i e_i^(t)``, at unit scale (:func:`_unit_scale`), where
    ``E`` and ``X`` share one power of two: near float64's largest numbers the sum or the mean
    would overflow to inf."""
    top = max(float(np.abs(E).max()), float(np.abs(X).max()))
    e = int(np.frexp(top)[1]) if top > 0 else 0
    return np.ldexp(X, -e) + np.ldexp(E, -e).mean(axis=1)


def assumptions_text(rep: AssumptionReport) -> str:
    """A readable summary of an :class:`AssumptionReport`."""
    def kline(name: str, k: KruskalCheck) -> str:
        exact = (f"exact Kruskal rank {k.exact_rank}" if k.exact_rank is not None else
                 f"exact: every {k.required}-subset {'independent' if k.exact_holds else 'checked, not all independent'}"
                 if k.exact_holds is not None else "exact rank: too many subsets")
        verdict = k.verdict.replace("fails", "FAILS")
        if k.rank is not None:                  # no subset of that size to sample
            they = "they are independent" if k.rank == rep.T else "they are not independent"
            return (f"{name:<17} {'n/a':<6} Kruskal rank of {k.vectors} ≥ {k.required}: there are only "
                    f"{rep.T} (T < {k.required}); the build needs them all independent then (docs/math.md "
                    f"§4.2): {they} (rank {k.rank})")
        return (f"{name:<17} {verdict:<6} Kruskal rank of {k.vectors} ≥ {k.required}: "
                f"{k.sampled_fraction:.1%} of sampled subsets independent; {exact}")
    a2 = ("holds  " if rep.a2 else "FAILS  ") + (
        "every context has full row rank" if rep.a2 else
        f"contexts without full row rank: examples {rep.a2_violations[:20]}"
        + (f" … ({len(rep.a2_violations)} in all)" if len(rep.a2_violations) > 20 else ""))
    return "\n".join([
        f"dataset: T = {rep.T}, n = {rep.n}, d = {rep.d}",
        kline("A1", rep.a1),
        f"{'A2':<17} {a2}",
        kline("A3", rep.a3),
        kline("general position", rep.general_position),
        f"{'outputs':<17} " + (f"holds   d_o = {rep.d_o} ≤ d = {rep.d}: the labels' columns fit the tokens"
                               if rep.outputs else
                               f"FAILS   d_o = {rep.d_o} output columns exceed the token dimension d = {rep.d} "
                               "(Theorem 1 needs d_o ≤ d: the readout W_D is d × d_o)"),
    ])
