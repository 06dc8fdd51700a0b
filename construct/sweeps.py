"""Capacity sweeps: the paper's Figure 2 axes, by construction (``mha-construct capacity``).

(Not named ``construct.capacity``: that name is Theorem 1's function, and a submodule of that
name would replace it on the package.)

For each point of a sweep over ``H``, ``n`` or ``d_h`` (one context kind):

- ``bound``: Theorem 1's ``H(k − 1) + 1``, ``k = min(n, d_h)``;
- ``certified``: the number of examples the construction memorizes *and certifies* (rank and
  memorization proven by :func:`construct.certify.certify`) at ``T = bound``: the bound itself
  when both are proven, else 0 (also where the build fails numerically: such a row's ``failure``,
  not written to CSV or JSON, says why, and the sweep goes on); one more example is refused
  (over capacity);
- ``generic_rank``: ``rank Z`` for random Gaussian weights (``W_K``, ``W_Q`` scaled by
  ``1/sqrt(d)``) on ``T = min(2·(H(n − 1) + 1), H·d)`` examples of the same kind (twice
  Proposition 2's ceiling, also where ``d_h < n`` makes the bound smaller): what attention with
  generic weights separates. On shared contexts it stays at or below ``H(n − 1) + 1``
  (Proposition 2); on independent contexts it can exceed the bound: the paper's open question.
  It is float64's numerical rank (:func:`construct.arith.numerical_rank`), which can lie far
  below the rank in exact arithmetic where random features nearly coincide (``d = 2`` and
  hundreds of heads, say).

Results are plain rows (:func:`sweep`), written as CSV or JSON, and drawn with matplotlib (the
``[plot]`` extra) by :func:`plot`.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterable
from types import SimpleNamespace

import numpy as np

from .arith import FLOAT64, numerical_rank
from .errors import ConstructionError, InputError, numpy_error_defaults
from .limits import callback, integer, missing_library, require_memory
from .signals import signals_held
from .model import Weights, capacity as bound_of, feature_matrix
from .validate import memory_estimate

VARIES = ("H", "n", "d_h")
# What is held fixed when not swept (the paper's Figure 2 axes: n = 32, d = 64), for the API and the CLI.
SWEPT_AT = {"H": 4, "n": 32, "d": 64}
FIELDS = ("kind", "H", "n", "d", "d_h", "bound", "certified", "generic_T", "generic_rank", "seconds")


@numpy_error_defaults
def point(kind: str, H: int, n: int, d: int, d_h: int, seed: int = 0) -> dict:
    """One point of a sweep (module docstring). ``seed`` is read as a Python integer: the probe
    draws with ``seed + 1``, which in a NumPy integer type can overflow (wrap to 0, or go negative)."""
    from .build import build
    from .certify import certify
    from .data import synthetic

    seed = integer(seed, "seed", 0)
    t0 = time.perf_counter()
    bound = bound_of(H, n, d_h)
    data = synthetic(kind, T=bound, n=n, d=d, seed=seed)
    try:
        result = build(data, H, head_dim=d_h, seed=seed)
    except ConstructionError as exc:                 # nothing certified here; the sweep goes on
        proven, failure = False, str(exc)
    else:
        cert = certify(result.weights, data)
        proven, failure = cert.claims["rank"].get("proven") and cert.claims["memorization"].get("proven"), None
    generic_T = min(2 * bound_of(H, n, n), H * d)        # twice Proposition 2's ceiling, whatever d_h
    probe = synthetic(kind, T=generic_T, n=n, d=d, seed=seed + 1)
    rng = np.random.default_rng(seed)
    w = Weights(rng.standard_normal((H, d, d_h)) / np.sqrt(d), rng.standard_normal((H, d, d_h)) / np.sqrt(d),
                np.zeros((H, d, 1)), np.zeros((H, d)), np.zeros((d, 1)))
    with FLOAT64.session():
        Z = feature_matrix(probe.E, probe.X, w, FLOAT64)
    rank, _ = numerical_rank(Z)
    return {"kind": kind, "H": H, "n": n, "d": d, "d_h": d_h, "bound": bound, "certified": bound if proven else 0,
            "generic_T": generic_T, "generic_rank": int(rank), "seconds": round(time.perf_counter() - t0, 3),
            **({"failure": failure} if failure is not None else {})}


@numpy_error_defaults
def sweep(vary: str, values, *, kind: str = "independent", H: int = SWEPT_AT["H"], n: int = SWEPT_AT["n"], d: int = SWEPT_AT["d"],
          d_h: int | None = None, seed: int = 0, progress=None) -> list[dict]:
    """Points with ``vary`` (``"H"``, ``"n"`` or ``"d_h"``) taking each of ``values``, the
    others fixed (``d_h`` defaults to ``n``)."""
    if vary not in VARIES:
        raise InputError(f"vary must be one of {', '.join(VARIES)}, got {vary!r}", what="invalid option")
    d, progress, seed = integer(d, "d"), callback(progress, "progress"), integer(seed, "seed", 0)
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or np.ndim(values) == 0:
        raise InputError(f"values: expected a sequence of integers, got {type(values).__name__}",
                         what="invalid values")
    points = []
    for v in values:                                 # every point checked before the first runs
        p = {"H": integer(H, "H"), "n": integer(n, "n"), "d_h": d_h}
        p[vary] = integer(v, f"values: {vary}")
        p["d_h"] = integer(p["n"] if p["d_h"] is None else p["d_h"], "d_h")
        points.append(p)
    twice = sorted({p[vary] for p in points if sum(q[vary] == p[vary] for q in points) > 1})
    if twice:
        raise InputError(f"values: {vary} = {', '.join(map(str, twice))} given more than once", what="invalid values")
    wide = sorted({p["n"] for p in points if p["n"] > d})
    if wide:
        raise InputError(f"n = {', '.join(map(str, wide))} exceeds the token dimension d = {d} (A2 needs n ≤ d)",
                         what="invalid sweep" if vary != "n" else "invalid values")
    for p in points:                                 # and sized: a late refusal would lose the rows before it
        T = bound_of(p["H"], p["n"], p["d_h"])
        require_memory(memory_estimate(SimpleNamespace(T=T, n=p["n"], d=d, d_o=1), p["H"], p["d_h"], 1),
                       f"the point {vary} = {p[vary]} (T = {T} examples, H = {p['H']} heads)")
    rows = []
    for p in points:
        rows.append(point(kind, p["H"], p["n"], d, p["d_h"], seed))
        if progress is not None:
            progress(rows[-1])
    return rows


def to_csv(rows: list[dict]) -> str:
    """:func:`sweep`'s rows as CSV, one column per field of :data:`FIELDS`."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_table(rows))
    return out.getvalue()


def to_json(rows: list[dict]) -> str:
    """:func:`sweep`'s rows as a JSON list of objects with the fields of :data:`FIELDS`."""
    return json.dumps(_table(rows), indent=2)


def _table(rows) -> list[dict]:
    """``rows`` as :func:`sweep` makes them: the fields of :data:`FIELDS` only, NumPy numbers as
    Python's (json cannot write them, and csv refuses a key it has no column for).

    Raises:
        InputError: ``rows`` is not a sequence of dicts each holding every field.
    """
    if isinstance(rows, (str, bytes, dict)) or not isinstance(rows, Iterable):
        raise InputError(f"rows: expected a list of sweep rows, got {type(rows).__name__}", what="invalid rows")
    rows = list(rows)
    if not all(isinstance(r, dict) and set(FIELDS) <= set(r) for r in rows):
        raise InputError(f"rows: each row must be a dict with {', '.join(FIELDS)} (construct.sweeps.sweep)",
                         what="invalid rows")
    return [{k: r[k].item() if isinstance(r[k], np.generic) else r[k] for k in FIELDS} for r in rows]


# The files plot writes, by suffix.
PLOT_SUFFIXES = (".svg", ".png")


def plot(rows: list[dict], vary: str, path) -> None:
    """Draw certified examples, the bound and the generic rank against ``vary`` into ``path``
    (SVG or PNG by the file's suffix, written whole or not at all); needs matplotlib (the
    ``[plot]`` extra).

    Raises:
        InputError: another suffix, matplotlib is missing, or ``rows`` are not one sweep of one
            context kind over ``vary`` (no rows, another parameter varying too).
    """
    from .io import as_path, write_atomic
    path = as_path(path, "path")
    write_atomic(path, plot_bytes(rows, vary, path.suffix))


def plot_bytes(rows: list[dict], vary: str, suffix: str) -> bytes:
    """The drawing of :func:`plot` as the bytes of a ``.svg`` or ``.png`` file (``suffix``)."""
    if suffix.lower() not in PLOT_SUFFIXES:
        raise InputError(f"a plot is written as .svg or .png, not {suffix or 'a file without a suffix'}",
                         what="invalid option")
    _one_sweep(rows, vary)
    try:
        with signals_held():            # an extension interrupted as it loads fails as an ImportError
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
    except ImportError:
        raise missing_library("plots need matplotlib", "plot") from None
    # SVG text stays text (searchable, accessible); a fixed salt for the SVG's ids and no date:
    # the same rows give the same file.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "mha-construct"}):
        return _draw(plt, rows, vary, suffix.lower()[1:])


def _one_sweep(rows, vary: str) -> None:
    """Refuse what :func:`plot` cannot draw as one curve per measure: no rows, rows that are not
    :func:`sweep`'s, several context kinds, or a parameter besides ``vary`` that varies."""
    if vary not in VARIES:
        raise InputError(f"vary must be one of {', '.join(VARIES)}, got {vary!r}", what="invalid option")
    rows = _table(rows)
    if not rows:
        raise InputError("rows: no rows to draw", what="invalid rows")
    kinds = sorted({str(r["kind"]) for r in rows})
    if len(kinds) > 1:
        raise InputError(f"rows: {' and '.join(kinds)} kinds in one figure; draw each kind's rows apart",
                         what="invalid rows")
    tied = vary == "n" and all(r["d_h"] == r["n"] for r in rows)
    for key in ("H", "n", "d", "d_h"):
        if key != vary and not (tied and key == "d_h") and len({r[key] for r in rows}) > 1:
            raise InputError(f"rows: {key} varies as well as {vary}; a figure draws a sweep over one of them",
                             what="invalid rows")


def _draw(plt, rows: list[dict], vary: str, kind: str) -> bytes:
    # Each curve runs through its points in the order of the swept value, whatever order the values
    # were given in (16, 2, 8 would draw a segment from 16 back to 2, across the point at 8).
    rows = sorted(rows, key=lambda r: r[vary])
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    x = [r[vary] for r in rows]
    # The bound as a wide light band under the measured curves, so that it shows where they meet it.
    ax.plot(x, [r["bound"] for r in rows], "-", color="0.75", lw=8, solid_capstyle="round",
            label="bound H(k−1)+1", zorder=1)
    ax.plot(x, [r["certified"] for r in rows], "o-", color="tab:blue", ms=5, label="certified by construction",
            zorder=2)
    ax.plot(x, [r["generic_rank"] for r in rows], "s:", color="tab:orange", ms=5, label="rank Z, random weights",
            zorder=3)
    r0 = rows[0]
    tied = vary == "n" and all(r["d_h"] == r["n"] for r in rows)         # d_h follows n (its default)
    fixed = {k: r0[k] for k in ("H", "n", "d", "d_h") if k != vary and not (tied and k == "d_h")}
    ax.set_xlabel({"H": "heads H", "n": "context size n (d_h = n)" if tied else "context size n",
                   "d_h": "head dimension d_h"}[vary])
    ax.set_ylabel("examples memorized / rank of Z")
    ax.set_title(f"{r0['kind']} contexts, " + ", ".join(f"{k} = {v}" for k, v in fixed.items()))
    ax.grid(alpha=0.3)
    ax.legend()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=kind, metadata={"Date": None} if kind == "svg" else None)
    plt.close(fig)
    return buffer.getvalue()
