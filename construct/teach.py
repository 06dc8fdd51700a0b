"""Teach the proof step by step: the construction on a tiny dataset, narrated with its own numbers.

:func:`teach` runs :func:`construct.build` with ``trace=True`` (one code path: every number shown
is the engine's) and turns each stage into a :class:`Step` tied to its statement in the paper
(Mahdavi, Liao & Thrampoulidis, ICLR 2024, arXiv:2306.02010), to its section of the project's
``docs/math.md``, and to the ``proofs`` module that checks it. A :class:`Walkthrough` states
Theorem 1 and the proof's plan first, then renders as plain or coloured text, Markdown (figures as
SVG files beside it), or one self-contained HTML page: formulas as MathML, figures as inline SVG
drawn here (no plotting library, no external resource), and a small script that shows one step
at a time and hides or shows the numbers (the page shows everything without it). The figures: the
rank of ``Z`` after each head against ``h(k−1)+1``, each head's attention over the contexts
(which examples it fits, where the earlier ones saturate), and the singular values of ``Z``. In
Jupyter, steps and walkthroughs display themselves (``_repr_markdown_``, ``_repr_html_``). With
rational input data, small matrices are also shown exactly (sympy).

Narration lines carry their formulas between ``$`` signs in a small notation (``X_S^T``,
``s^(t)``, ``(X_S^T X_S)^-1``, ``G_{h+1}``, ``\\bar{Z}_A``): :func:`math_text` renders it as
Unicode (``X_Sᵀ``, ``s⁽ᵗ⁾``), :func:`mathml` as MathML.
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce

import numpy as np

from .assumptions import a2_violations, kruskal_check, kruskal_rank
from .build import BuildResult, build, capacity
from .data import Dataset, as_dataset, synthetic
from .errors import InputError, numpy_error_defaults
from .limits import flag, integer
from .arith import numerical_rank
from .arith.threads import blas_limit
from .model import feature_matrix, head_attention, mean_shift, param_count
from .verify import verify

_MATRIX_LIMIT = 12          # larger matrices are summarized, not printed
PAPER_URL = "https://arxiv.org/abs/2306.02010"
PAPER = "Mahdavi, Liao & Thrampoulidis, Memorization Capacity of Multi-Head Attention in Transformers, ICLR 2024"


# --- formulas: one notation, rendered as Unicode text or as MathML ---------------------------------

_SUP = dict(zip("0123456789+-−=()Ttnikh", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁻⁼⁽⁾ᵀᵗⁿⁱᵏʰ"))
_SUB = dict(zip("0123456789+-−=()", "₀₁₂₃₄₅₆₇₈₉₊₋₋₌₍₎"))


def _parse(src: str) -> list:
    """The notation as a list of nodes: ``("mi"|"mn"|"mo"|"mtext"|"space", text)``,
    ``("row", nodes)`` (``{…}``, invisible), ``("paren", nodes)`` (a script's ``(…)``),
    ``("bar", node)`` and ``("script", base, sub, sup)``."""
    pos = 0

    def fail(why: str):
        raise ValueError(f"formula {src!r}: {why} at {pos}")

    def seq(close: str | None) -> list:
        nonlocal pos
        out: list = []
        while pos < len(src):
            if close is not None and src[pos] == close:
                pos += 1
                return out
            node = atom()
            if node[0] != "space":
                if node in (("mo", ")"), ("mo", "]")) and pos < len(src) and src[pos] in "_^'":
                    node = group(out, node)                    # (X_S^T X_S)^-1: the script takes the group
                node = postfix(node)
            out.append(node)
        if close is not None:
            fail(f"missing {close!r}")
        return out

    def group(out: list, close: tuple):
        opening, depth = {")": "(", "]": "["}[close[1]], 0
        for j in range(len(out) - 1, -1, -1):
            if out[j] == close:
                depth += 1
            elif out[j] == ("mo", opening):
                if depth == 0:
                    items = out[j:] + [close]
                    del out[j:]
                    return ("row", items)
                depth -= 1
        return close

    def word(ok) -> str:
        nonlocal pos
        start = pos
        while pos < len(src) and (ok(src[pos]) or (pos > start and unicodedata.combining(src[pos]))):
            pos += 1
        return src[start:pos]

    def atom():
        nonlocal pos
        c = src[pos]
        if c.isspace():
            return ("space", word(str.isspace))
        if c == "{":
            pos += 1
            return ("row", seq("}"))
        if c == "\\":
            pos += 1
            name = word(str.isalpha)
            if pos >= len(src) or src[pos] != "{":
                fail(f"\\{name} takes {{…}}")
            pos += 1
            if name == "bar":
                return ("bar", ("row", seq("}")))
            if name == "text":
                end = src.index("}", pos)
                text, pos = src[pos:end], end + 1
                return ("mtext", text)
            fail(f"unknown command \\{name}")
        if c.isalpha():
            return ("mi", word(str.isalpha))
        if c.isdigit():
            return ("mn", word(lambda ch: ch.isdigit() or ch == "."))
        pos += 1
        return ("mo", "−" if c == "-" else c)

    def argument():
        nonlocal pos
        if pos >= len(src):
            fail("a script needs an argument")
        c = src[pos]
        if c == "{":
            pos += 1
            return ("row", seq("}"))
        if c == "(":
            pos += 1
            return ("paren", seq(")"))
        if c in "-−" and pos + 1 < len(src) and src[pos + 1].isalnum():
            pos += 1
            return ("row", [("mo", "−"), argument()])
        if c.isalpha():
            return ("mi", word(str.isalnum))
        if c.isdigit():
            return ("mn", word(str.isdigit))
        pos += 1
        return ("mo", c)

    def postfix(base):
        nonlocal pos
        sub = sup = None
        while pos < len(src) and src[pos] in "_^'":
            c = src[pos]
            pos += 1
            if c == "'":
                sup = ("mo", "′")
            elif c == "_":
                sub = argument()
            else:
                sup = argument()
        return base if sub is None and sup is None else ("script", base, sub, sup)

    return seq(None)


def _text_of(node) -> str:
    kind = node[0]
    if kind in ("mi", "mn", "mo", "mtext", "space"):
        return node[1]
    if kind == "row":
        return "".join(_text_of(n) for n in node[1])
    if kind == "paren":
        return "(" + "".join(_text_of(n) for n in node[1]) + ")"
    if kind == "bar":
        return _text_of(node[1]) + "\u0304"
    _, base, sub, sup = node
    out = _text_of(base)
    if sup is not None and sup == ("mo", "′"):
        out, sup = out + "′", None
    for script, table, mark in ((sub, _SUB, "_"), (sup, _SUP, "^")):
        if script is None:
            continue
        s = _text_of(script)
        if all(ch in table for ch in s) and (s == "T" or "T" not in s):      # x⁽ᵀ⁾ would read as a transpose
            out += "".join(table[ch] for ch in s)
        elif mark == "^" and len(s) == 1 and not s.isalnum():
            out += s                                                   # j*, b⊥
        elif s.isalnum() or script[0] == "paren":
            out += mark + s
        else:
            out += f"{mark}({s})"
    return out


def _ml(node) -> str:
    kind = node[0]
    if kind == "mo" and node[1] in "()[]|‖":                           # inline fences keep the text's size
        return f"<mo stretchy='false'>{html.escape(node[1], quote=False)}</mo>"
    if kind in ("mi", "mn", "mo", "mtext"):
        return f"<{kind}>{html.escape(node[1], quote=False)}</{kind}>"
    if kind == "space":
        return ""
    if kind == "row":
        return _ml_row(node[1])
    if kind == "paren":
        return "<mrow><mo stretchy='false'>(</mo>" + _ml_row(node[1]) + "<mo stretchy='false'>)</mo></mrow>"
    if kind == "bar":
        return f"<mover accent='true'>{_ml(node[1])}<mo>¯</mo></mover>"
    _, base, sub, sup = node
    b = _ml(base)
    if sub is not None and sup is not None:
        return f"<msubsup>{b}{_ml(sub)}{_ml(sup)}</msubsup>"
    if sub is not None:
        return f"<msub>{b}{_ml(sub)}</msub>"
    return f"<msup>{b}{_ml(sup)}</msup>"


def _wordy(node) -> bool:
    """A word (``log``, ``rank``, text) that a following or preceding operand must not touch."""
    while node[0] == "script":
        node = node[1]
    return (node[0] == "mi" and len(node[1]) > 1) or node[0] == "mtext"


def _ml_row(nodes: list) -> str:
    out = []
    for i, node in enumerate(nodes):
        if node[0] == "space" and 0 < i < len(nodes) - 1:
            left, right = nodes[i - 1], nodes[i + 1]
            if "mtext" in (left[0], right[0]) or (_wordy(left) or _wordy(right)) and "mo" not in (left[0], right[0]):
                out.append("<mspace width='0.22em'></mspace>")
            continue
        out.append(_ml(node))
    return "<mrow>" + "".join(out) + "</mrow>"


def math_text(formula: str) -> str:
    """``formula`` (the notation between ``$`` signs) as readable Unicode: ``X_S^T`` → ``X_Sᵀ``."""
    return "".join(_text_of(n) for n in _parse(formula))


def mathml(formula: str, display: bool = False) -> str:
    """``formula`` as a MathML ``<math>`` element (native in browsers: no script, no font)."""
    block = " display='block'" if display else ""
    return f"<math{block}>{_ml_row(_parse(formula))}</math>"


def _spans(line: str) -> list[tuple[bool, str]]:
    parts = line.split("$")
    if len(parts) % 2 == 0:
        raise ValueError(f"unbalanced $ in {line!r}")
    return [(i % 2 == 1, p) for i, p in enumerate(parts) if p]


def rich_text(line: str) -> str:
    """A narration line (formulas between ``$``) as Unicode text."""
    return "".join(math_text(p) if is_math else p for is_math, p in _spans(line))


def rich_html(line: str) -> str:
    """A narration line as HTML: text escaped, formulas as MathML."""
    return "".join(mathml(p) if is_math else html.escape(p) for is_math, p in _spans(line))


def _md(line: str) -> str:
    """A narration line for Markdown: Unicode formulas, ``*`` escaped (``j*`` is no emphasis)."""
    return rich_text(line).replace("*", r"\*")


def _name(key: str) -> str:
    """A matrix's display name: a bare identifier (``C``, ``Z``) is a formula."""
    return f"${key}$" if key.isidentifier() and "$" not in key else key


# --- steps -----------------------------------------------------------------------------------------

@dataclass
class Step:
    """One step of the proof, with the numbers the engine produced.

    Attributes:
        title: what happens in this step.
        statement: the paper's statement(s) it carries out (``"Claim 1"``, ``"Lemmas 3–5, Claim 2"``).
        module: the ``proofs`` module that checks it.
        lines: the narration, one sentence or fact per line; formulas between ``$`` signs.
        matrices: small arrays (or exact sympy matrices) to display, by name.
        figures: inline SVG figures (each a standalone SVG document with a ``<title>`` and a
            ``<desc>`` caption).
        docs: the sections of the project's ``docs/math.md`` it follows (``"§4.3"``).
    """

    title: str
    statement: str
    module: str
    lines: list[str]
    matrices: dict = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    docs: str = ""

    def __repr__(self) -> str:
        return f"Step({self.title!r}, {len(self.lines)} lines, {len(self.matrices)} matrices, {len(self.figures)} figures)"

    def reference(self) -> str:
        where = f" · docs/math.md {self.docs}" if self.docs else ""
        return f"paper (arXiv:2306.02010): {self.statement}{where} · checked by {self.module}"

    def text(self, color: bool = False) -> str:
        bold, dim, off = ("\033[1m", "\033[2m", "\033[0m") if color else ("", "", "")
        out = [f"{bold}{self.title}{off}", f"{dim}{self.reference()}{off}"]
        out += [f"  {rich_text(line)}" for line in self.lines]
        out += [f"  [figure: {_svg_title(fig)} — in --format html, or --format markdown --out DIR]"
                for fig in self.figures]
        for name, value in self.matrices.items():
            out.append(f"  {rich_text(_name(name))} =")
            out += ["    " + row for row in _format(value).splitlines()]
        return "\n".join(out)

    def markdown(self, figure_files: list[str] | None = None) -> str:
        """The step in Markdown; ``figure_files``: relative paths of this step's figures as SVG
        files (the caller writes them), linked as images; None leaves the figures out."""
        where = f" · `docs/math.md` {self.docs}" if self.docs else ""
        out = [f"### {self.title}",
               f"*paper: [{self.statement}]({PAPER_URL}){where} · checked by `{self.module}`*", ""]
        out += [f"- {_md(line)}" for line in self.lines]
        for fig, path in zip(self.figures, figure_files or []):
            out += ["", f"![{_svg_title(fig)}]({path})", "", f"*{_md(_svg_desc(fig))}*"]
        for name, value in self.matrices.items():
            out += ["", f"{_md(_name(name))} =", "```", _format(value), "```"]
        return "\n".join(out)

    def html(self, anchor: str | None = None) -> str:
        ident = f" id='{anchor}'" if anchor else ""
        where = f" · project docs: <span class='docs'>docs/math.md {html.escape(self.docs)}</span>" if self.docs else ""
        out = [f"<section class='step'{ident}><h2>{html.escape(self.title)}</h2>",
               f"<p class='ref'>paper: <a href='{PAPER_URL}'>{html.escape(self.statement)}</a>{where}"
               f" · checked by <code>{html.escape(self.module)}</code></p>",
               "<ul>" + "".join(f"<li>{rich_html(line)}</li>" for line in self.lines) + "</ul>"]
        if self.figures:
            out.append("<div class='figs'>" + "".join(
                f"<figure style='width:{_svg_width(fig)}px'>{fig}<figcaption>{html.escape(_svg_desc(fig))}</figcaption>"
                "</figure>"
                for fig in self.figures) + "</div>")
        if self.matrices:
            out.append("<div class='numbers'>" + "".join(
                f"<div><p>{rich_html(_name(name))} =</p><pre>{html.escape(_format(value))}</pre></div>"
                for name, value in self.matrices.items()) + "</div>")
        out.append("</section>")
        return "\n".join(out)

    _repr_markdown_ = markdown

    def _repr_html_(self) -> str:
        return f"<div class='teach'><style>{_CSS}</style>{self.html()}</div>"


# --- the theorem and the plan, stated before the steps ---------------------------------------------

_PLAN = [
    "Head 1 fits $k$ examples exactly (Claim 1): attention targets $s^(t)$ inside the simplex, logits "
    "$ℓ^(t) = log s^(t)$, and a key–query product $W_1$ with $E^(t) W_1 x^(t) = ℓ^(t)$; the rows "
    "$z^(t) = (E^(t))^T s^(t)$ of $Z$ are independent.",
    "Each later head $h$ fits $k − 1$ new examples and freezes the earlier ones: Lemma 3's rank-one "
    "separator $a b^T$, with $b ⊥$ the new queries, gives every earlier example a unique top token, and "
    "a large scale $c_h$ saturates the softmax onto it (Lemma 4, Claim 2), so the earlier rows of $Z$ "
    "move too little to undo the rank the new rows add, $k − 1$ (this run takes the smallest scale "
    "that keeps that; the proof's larger one bounds how far they move by Lemma 4, the perturbation "
    "below half of $σ_min(M)$).",
    "After $H$ heads $rank Z = H(k − 1) + 1 = T$ (Proposition 1).",
    "A linear readout solves $Z B = Y$; $B$ is factored into $W_V$, $W_O$, $W_D$.",
]


def _layer_effect(layer_a1) -> str:
    """What Proposition 4's pre-layer did to A1, for the run's summary: restored it, or (at sizes
    where the shifted queries miss it) gave the construction the condition it checks instead."""
    if layer_a1 is None or layer_a1.holds:
        return " Its queries repeat, so A1 fails; Proposition 4's pre-layer (step 1b) restores it" + (
            "." if layer_a1 is None or layer_a1.exact_rank is not None else ", by sampling.")
    return (" Its queries repeat, so A1 fails; after Proposition 4's pre-layer (step 1b) it still fails, but the "
            "shifted queries meet the condition the construction checks instead (step 2).")


def _theorem(result: BuildResult, layer_a1=None) -> dict:
    """Theorem 1 and the proof's plan, with this run's sizes (formulas between ``$``); ``layer_a1``:
    with a pre-layer, A1 checked on its outputs (:func:`construct.assumptions.kruskal_check`)."""
    W, data = result.weights, result.data
    H, d, d_h, d_v, d_o = W.H, W.d, W.d_h, W.d_v, W.W_D.shape[1]
    return {
        "title": "Theorem 1 (memorization capacity of one attention layer)",
        "statement": [
            "Let a single-layer multi-head attention model have $H$ heads with key/query dimension $d_h$ and "
            "value dimension $d_v$, and read contexts of $n$ tokens in $ℝ^d$; let $k = min(n, d_h)$.",
            "Assume A1: the queries $x^(1), …, x^(T)$ have Kruskal rank at least $n$ (every $n$ of them are "
            "linearly independent), and A2: every context $E^(t) ∈ ℝ^{n×d}$ has rank $n$; the labels lie in "
            "$ℝ^{d_o}$ with $d_o ≤ d_v$ and $d_o ≤ d$.",
            "Then the layer memorizes",
        ],
        "display": "T = H(k − 1) + 1",
        "after": "examples: there are weights, $Θ(H d (d_h + d_v))$ parameters in all, with "
                 "$f(E^(t), x^(t)) = y^(t)$ for every $t$.",
        "model": "The model (docs/math.md §1), on a context $E$ (one token per row) and a query $x$, with heads "
                 "$h = 1, …, H$:",
        "model_display": ["z_h = E^T softmax(E W_K[h] W_Q[h]^T x),",
                          "f(E, x) = W_D^T W_O^T [W_V[1]^T z_1; …; W_V[H]^T z_H]"],
        "plan": _PLAN,
        "run": f"This run: $H$ = {H}, $n$ = {data.n}, $d$ = {d}, $d_h$ = {d_h}, $d_v$ = {d_v}, so $k$ = {result.k} "
               f"and $T$ = {result.capacity} example{'s' if result.capacity != 1 else ''}; the layer has {param_count(H, d, d_h, d_v, d_o)} parameters."
               + (_layer_effect(layer_a1) if W.prelayer else ""),
        "source": f"{PAPER} (arXiv:2306.02010); the proof is written out in the project's docs/math.md "
                  "(§2 assumptions, §3 statements, §4 the construction).",
    }


@dataclass
class Walkthrough:
    """The steps of one construction, and the build they narrate."""

    steps: list[Step]
    result: BuildResult
    heading: str
    layer_a1: object = None          # with a pre-layer: A1 on its outputs (a KruskalCheck)

    @property
    def figures(self) -> list[str]:
        return [fig for s in self.steps for fig in s.figures]

    def __repr__(self) -> str:
        return f"Walkthrough({self.heading!r}, {len(self.steps)} steps, {len(self.figures)} figures)"

    def figure_names(self) -> list[str]:
        """File names for the figures as SVG files beside ``teach.md``: ``teach-figure-1.svg``, …"""
        return [f"teach-figure-{i}.svg" for i in range(1, len(self.figures) + 1)]

    def _figure_files(self, names) -> list[str]:
        """``names`` as a list of one path (a string) per figure, or an InputError."""
        count = len(self.figures)
        if isinstance(names, (str, bytes)) or not hasattr(names, "__len__"):
            raise InputError(f"figure_files: expected a list of {count} paths (strings), one per figure, "
                             f"got {type(names).__name__}", what="invalid option")
        names = list(names)
        wrong = [i for i, name in enumerate(names) if not isinstance(name, str)]
        if len(names) != count or wrong:
            problem = (f"got {len(names)} path(s)" if len(names) != count else
                       f"entry {wrong[0]} is {type(names[wrong[0]]).__name__}, not a string")
            raise InputError(f"figure_files: expected {count} paths (strings), one per figure "
                             f"({self.figure_names()[0]}, … from figure_names()); {problem}", what="invalid option")
        return names

    def text(self, color: bool = False) -> str:
        color = flag(color, "color")
        th = _theorem(self.result, self.layer_a1)
        intro = [th["title"]] + [f"  {rich_text(p)}" for p in th["statement"]]
        intro += [f"      {math_text(th['display'])}", f"  {rich_text(th['after'])}",
                  f"  {rich_text(th['model'])}"] + [f"      {math_text(f)}" for f in th["model_display"]]
        intro += ["The proof's plan:"]
        intro += [f"  {i}. {rich_text(p)}" for i, p in enumerate(th["plan"], 1)]
        intro += [f"  {rich_text(th['run'])}", f"  {th['source']}"]
        return "\n\n".join([self.heading, "\n".join(intro)] + [s.text(color) for s in self.steps]) + "\n"

    def markdown(self, figure_files: list[str] | None = None) -> str:
        """The walkthrough in Markdown. ``figure_files``: relative paths under which the caller
        writes :attr:`figures` as SVG files (:meth:`figure_names`); they are linked as images.
        Without them the page says that the figures are written only with ``--out``."""
        th = _theorem(self.result, self.layer_a1)
        out = [f"# {self.heading}", f"## {th['title']}", *(_md(p) for p in th["statement"]),
               f"> **{math_text(th['display'])}**", _md(th["after"]),
               "\n".join([_md(th["model"]), ""] + [f"    {math_text(f)}" for f in th["model_display"]]),
               "**The proof's plan**",
               "\n".join(f"{i}. {_md(p)}" for i, p in enumerate(th["plan"], 1)), _md(th["run"]),
               f"*{PAPER} ([arXiv:2306.02010]({PAPER_URL})); the proof is written out in the project's "
               "`docs/math.md` (§2 assumptions, §3 statements, §4 the construction).*"]
        if figure_files is None and self.figures:
            out.append(f"> Figures: this Markdown has none. The {len(self.figures)} figures are written only "
                       "with `--out DIR` (`mha-construct teach --format markdown --out DIR` writes them as "
                       "SVG files beside `teach.md`), or see them in `--format html`.")
        if figure_files is not None:
            figure_files = self._figure_files(figure_files)
        files = iter(figure_files or [])
        for s in self.steps:
            mine = [next(files) for _ in s.figures] if figure_files is not None else None
            out.append(s.markdown(mine))
        return "\n\n".join(out) + "\n"

    def _body(self, controls: bool = True) -> str:
        th = _theorem(self.result, self.layer_a1)
        theorem = ("<section class='theorem' id='theorem'>"
                   f"<h2>{html.escape(th['title'])}</h2><div class='box'>"
                   + "".join(f"<p>{rich_html(p)}</p>" for p in th["statement"])
                   + mathml(th["display"], display=True) + f"<p>{rich_html(th['after'])}</p></div>"
                   f"<p>{rich_html(th['model'])}</p>"
                   + "".join(f"<div class='display'>{mathml(f, display=True)}</div>" for f in th["model_display"])
                   + "<h3>The proof's plan</h3><ol>"
                   + "".join(f"<li>{rich_html(p)}</li>" for p in th["plan"]) + "</ol>"
                   f"<p>{rich_html(th['run'])}</p>"
                   f"<p class='ref'>{html.escape(PAPER)} (<a href='{PAPER_URL}'>arXiv:2306.02010</a>); the proof "
                   "is written out in the project's docs/math.md (§2 assumptions, §3 statements, §4 the "
                   "construction).</p></section>")
        toc = ("<nav class='toc' aria-label='steps'><h2>The steps</h2><ol>"
               + "".join(f"<li><a href='#step-{i}'>{html.escape(s.title)}</a></li>" for i, s in enumerate(self.steps, 1))
               + "</ol></nav>")
        steps = "\n".join(s.html(f"step-{i}") for i, s in enumerate(self.steps, 1))
        return f"{theorem}\n{toc}\n{_CONTROLS if controls else ''}\n<div class='steps'>\n{steps}\n</div>"

    def html(self) -> str:
        return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
                "<meta name='viewport' content='width=device-width, initial-scale=1'>"
                f"<title>{html.escape(self.heading)}</title><style>{_PAGE_CSS}{_CSS}</style></head>\n"
                f"<body><main class='teach'><h1>{html.escape(self.heading)}</h1>\n{self._body()}\n</main>\n"
                f"<script>{_SCRIPT}</script>\n</body></html>\n")

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def _repr_html_(self) -> str:
        return f"<div class='teach'><style>{_CSS}</style>{self._body(controls=False)}</div>"


_PAGE_CSS = "body{margin:0;background:#fff}"
_CSS = (     # scoped to .teach: also used by the Jupyter displays
    ".teach{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1b1b1b;line-height:1.5;"
    "max-width:62rem;margin:0 auto;padding:0 1rem 3rem;overflow-wrap:break-word}"
    ".teach h1{font-size:1.5rem;line-height:1.25;margin:1.2rem 0 .8rem}"
    ".teach h2{font-size:1.2rem;margin:1rem 0 .4rem}.teach h3{font-size:1rem;margin:.8rem 0 .3rem}"
    ".teach math{font-family:'STIX Two Math','Latin Modern Math','DejaVu Math TeX Gyre','Cambria Math',math;font-size:1em}.teach math[display=block]{margin:.5rem 0;font-size:1.25em}"
    ".teach .display{overflow-x:auto;overflow-y:hidden}.teach .display math{font-size:1.1em}"
    ".teach .box{border-left:4px solid #1f77b4;background:#f2f7fc;padding:.2rem 1rem;margin:.5rem 0}"
    ".teach pre{background:#f6f6f6;padding:.5rem;overflow-x:auto;font-size:.85rem;margin:.2rem 0 .6rem}"
    ".teach .ref{color:#555;font-size:.9rem}.teach ul,.teach ol{padding-left:1.4rem}"
    ".teach .figs{display:flex;flex-wrap:wrap;gap:.5rem 1.5rem;align-items:flex-start}"
    ".teach figure{margin:.8rem 0;min-width:0;max-width:100%}"
    ".teach figure svg{display:block;width:100%;height:auto}"
    ".teach figcaption{font-size:.85rem;color:#444}"
    ".teach .numbers{display:flex;flex-wrap:wrap;gap:0 1.5rem;align-items:flex-start}"
    ".teach .numbers>div{max-width:100%;min-width:0}.teach .numbers p{margin:.4rem 0 .1rem}"
    ".teach section.step{border-top:1px solid #ddd;margin-top:1.2rem;scroll-margin-top:4.5rem}"
    ".teach .toc ol{columns:2 18rem;font-size:.95rem}"
    ".teach .controls{position:sticky;top:0;z-index:1;background:#fff;border-bottom:1px solid #ddd;"
    "padding:.5rem 0;display:flex;flex-wrap:wrap;gap:.4rem 1rem;align-items:center}"
    ".teach .controls button{font:inherit;padding:.25rem .8rem}"
    ".teach .where{font-weight:600;min-width:7rem}"
    ".teach.no-numbers .numbers{display:none}"
    ".teach [hidden]{display:none!important}"
    "@media (max-width:32rem){.teach{padding:0 .6rem 2rem}.teach .display math{font-size:.9em}.teach ul,.teach ol{padding-left:1.1rem}}"
)

# Shown only once the script runs: without it the page shows every step and every number.
_CONTROLS = ("<div class='controls' id='controls' hidden>"
             "<button type='button' id='prev'>← Previous</button>"
             "<span class='where' id='where' aria-live='polite'></span>"
             "<button type='button' id='next'>Next →</button>"
             "<label><input type='checkbox' id='opt-all'> all steps at once</label>"
             "<label><input type='checkbox' id='opt-numbers' checked> show the numbers (matrices)</label></div>")

_SCRIPT = """
(function () {
  var root = document.querySelector('main.teach'), c = document.getElementById('controls');
  var steps = Array.prototype.slice.call(document.querySelectorAll('section.step'));
  if (!root || !c || !steps.length) return;
  var prev = document.getElementById('prev'), next = document.getElementById('next');
  var where = document.getElementById('where'), all = document.getElementById('opt-all');
  var nums = document.getElementById('opt-numbers'), i = 0;
  function show() {
    steps.forEach(function (s, j) { s.hidden = !all.checked && j !== i; });
    prev.disabled = all.checked || i === 0;
    next.disabled = all.checked || i === steps.length - 1;
    where.textContent = all.checked ? 'all ' + steps.length + ' steps' : 'step ' + (i + 1) + ' of ' + steps.length;
    root.classList.toggle('no-numbers', !nums.checked);
  }
  function go(j, scroll) {
    i = Math.max(0, Math.min(steps.length - 1, j));
    all.checked = false;
    show();
    if (history.replaceState) history.replaceState(null, '', '#' + steps[i].id);
    if (scroll && steps[i].getBoundingClientRect().top < c.offsetHeight) steps[i].scrollIntoView();
  }
  function fromHash() {
    var h = location.hash.slice(1);
    if (h === 'all-steps') { all.checked = true; show(); return; }
    for (var j = 0; j < steps.length; j++) if (steps[j].id === h) { go(j, false); steps[j].scrollIntoView(); return; }
  }
  prev.onclick = function () { go(i - 1, true); };
  next.onclick = function () { go(i + 1, true); };
  all.onchange = show;
  nums.onchange = show;
  window.addEventListener('hashchange', fromHash);
  document.addEventListener('keydown', function (e) {
    var t = e.target && e.target.tagName;
    if (all.checked || t === 'INPUT' || t === 'TEXTAREA' || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.key === 'ArrowRight') go(i + 1, true);
    if (e.key === 'ArrowLeft') go(i - 1, true);
  });
  c.hidden = false;
  show();
  if (location.hash) fromHash();
})();
"""


def _format(value) -> str:
    if type(value).__module__.startswith("sympy"):     # exact matrices (sympy is imported lazily)
        import sympy
        return sympy.pretty(value, use_unicode=True)
    a = np.asarray(value)
    if a.size > _MATRIX_LIMIT * _MATRIX_LIMIT:
        return f"array of shape {a.shape} (too large to print)"
    return np.array2string(a, precision=4, suppress_small=False, max_line_width=100)


# --- data ------------------------------------------------------------------------------------------

def tiny_dataset(heads: int = 3, context: int = 3, dim: int = 4, *, seed: int = 0, shared: bool = False,
                 rational: bool = False) -> Dataset:
    """A dataset at capacity ``H(n−1)+1`` for the walkthrough.

    ``rational``: entries are halves of small integers, so the inputs are exact rationals; draws
    are repeated (seed, seed+1, …) until A2 holds and the queries' Kruskal rank is ≥ n, exactly;
    where it has too many subsets to compute (``kruskal_rank`` is None), until the queries meet
    the condition the build checks instead (:func:`partition.violations`), as
    :func:`repeated_queries` does.
    """
    shared, rational, seed = flag(shared, "shared"), flag(rational, "rational"), integer(seed, "seed", 0)
    T = capacity(heads, context, context)
    if not rational:
        return synthetic("shared" if shared else "independent", T=T, n=context, d=dim, seed=seed)
    from .partition import violations
    for attempt in range(100):
        rng = np.random.default_rng(seed + attempt)
        E = rng.integers(-4, 5, (1 if shared else T, context, dim)) / 2
        E = np.broadcast_to(E, (T, context, dim)).copy()
        X = rng.integers(-4, 5, (T, dim)) / 2
        if a2_violations(E).size:
            continue
        r = kruskal_rank(X)
        if r >= min(context, T) if r is not None else not violations(X, context):
            return as_dataset(E, X, rng.integers(0, 9, T) / 4)
    raise InputError(["no rational dataset with full-rank contexts and independent queries found in "
                      "100 draws; change the seed or the sizes"], what="teach")


def _exact(a: np.ndarray):
    """``a`` as an exact sympy matrix of rationals (inputs are halves of small integers)."""
    import sympy
    return sympy.Matrix([[sympy.Rational(Fraction(float(v)).limit_denominator(10**6)) for v in row]
                         for row in np.atleast_2d(a)])


# --- figures (SVG drawn by hand) -------------------------------------------------------------------
#
# Every figure is a standalone SVG document (it is also written as a file beside the Markdown):
# a viewBox, a natural width and height that the page's CSS lets shrink (max-width: 100%), ticks
# with numbers on both axes, axis labels, and text laid out with a deliberately wide estimate of
# its width (CHAR_WIDTH font sizes per character) so nothing runs past the viewBox.

CHAR_WIDTH = 0.65
_FONT = "DejaVu Sans, Verdana, system-ui, sans-serif"
_INK, _GRID, _BLUE, _RED, _ORANGE = "#333", "#e3e3e3", "#1f77b4", "#d62728", "#ff7f0e"
_RAMP = [(0.0, (247, 251, 255)), (0.25, (198, 219, 239)), (0.5, (107, 174, 214)), (0.75, (33, 113, 181)),
         (1.0, (8, 48, 107))]


def text_width(s: str, size: float) -> float:
    """A generous estimate of the width of ``s`` at font size ``size`` (sans-serif)."""
    return len(s) * size * CHAR_WIDTH


def _t(x: float, y: float, s: str, size: float = 11, anchor: str = "start", **attrs) -> str:
    extra = "".join(f" {k.replace('_', '-')}='{v}'" for k, v in attrs.items())
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}'{extra}>"
            f"{html.escape(s)}</text>")


def _vlabel(x: float, y: float, s: str, size: float = 12, angle: int = -90) -> str:
    """A rotated axis label centred on (x, y)."""
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='middle' "
            f"transform='rotate({angle} {x:.1f} {y:.1f})'>{html.escape(s)}</text>")


def _line(x1, y1, x2, y2, stroke=_INK, width=1, **attrs) -> str:
    extra = "".join(f" {k.replace('_', '-')}='{v}'" for k, v in attrs.items())
    return (f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{stroke}' "
            f"stroke-width='{width}'{extra}/>")


def _svg(width: float, height: float, body: list[str], title: str, desc: str) -> str:
    w, h = math.ceil(width), math.ceil(height)
    esc = html.escape
    return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {w} {h}' width='{w}' height='{h}' "
            f"font-family='{_FONT}' fill='{_INK}' role='img' aria-label='{esc(title)}'>"
            f"<title>{esc(title)}</title><desc>{esc(desc)}</desc>"
            f"<rect width='{w}' height='{h}' fill='#fff'/>"
            + _t(w / 2, 20, title, 14, "middle", font_weight="bold") + "".join(body) + "</svg>")


def _svg_title(svg: str) -> str:
    m = re.search(r"<title>(.*?)</title>", svg, re.S)
    return html.unescape(m.group(1)) if m else "figure"


def _svg_width(svg: str) -> int:
    m = re.search(r"viewBox='0 0 (\d+) ", svg)
    return int(m.group(1)) if m else 480


def _svg_desc(svg: str) -> str:
    m = re.search(r"<desc>(.*?)</desc>", svg, re.S)
    return html.unescape(m.group(1)) if m else ""


def _colour(v: float) -> str:
    v = min(max(float(v), 0.0), 1.0)
    for (a, ca), (b, cb) in zip(_RAMP, _RAMP[1:]):
        if v <= b:
            f = (v - a) / (b - a)
            return "rgb(" + ",".join(str(round(p + f * (q - p))) for p, q in zip(ca, cb)) + ")"
    return "rgb(8,48,107)"


def _step(top: float, most: int = 8) -> int:
    """A 1-2-5 tick step giving at most ``most`` intervals up to ``top``."""
    for base in (1, 10, 100, 1000, 10**4, 10**5):
        for m in (1, 2, 5):
            if top / (m * base) <= most:
                return m * base
    return 10**6


def _pow10(e: int) -> str:
    return "10" + "".join(_SUP[ch] for ch in str(e))


def rank_figure(ranks: list[int], k: int) -> str:
    """Rank of ``Z`` on the fitted rows after each head (thick blue), against ``h(k − 1) + 1``
    (red, dashed, drawn on top so both stay visible where they coincide)."""
    H = len(ranks)
    ref = [h * (k - 1) + 1 for h in range(1, H + 1)]
    W, Ht, L, R, top, B = 460, 330, 64, 16, 40, 58
    pw, ph = W - L - R, Ht - top - B
    hi = max(max(ranks), max(ref))
    step = _step(hi + 1)
    ymax = step * math.ceil((hi + 1) / step)
    x = (lambda i: L + pw / 2) if H == 1 else (lambda i: L + 28 + (pw - 56) * i / (H - 1))
    y = lambda r: top + ph - ph * r / ymax
    body = []
    for v in range(0, ymax + 1, step):                                   # y grid, ticks, numbers
        body.append(_line(L, y(v), L + pw, y(v), _GRID))
        body.append(_line(L - 5, y(v), L, y(v)))
        body.append(_t(L - 8, y(v) + 4, str(v), 12, "end"))
    xstep = max(1, math.ceil(H / 12))
    for i in range(0, H, xstep):                                         # x ticks, numbers
        body.append(_line(x(i), top + ph, x(i), top + ph + 5))
        body.append(_t(x(i), top + ph + 19, str(i + 1), 12, "middle"))
    body += [_line(L, top, L, top + ph), _line(L, top + ph, L + pw, top + ph)]
    got = " ".join(f"{x(i):.1f},{y(r):.1f}" for i, r in enumerate(ranks))
    bound = " ".join(f"{x(i):.1f},{y(r):.1f}" for i, r in enumerate(ref))
    body.append(f"<polyline points='{got}' fill='none' stroke='{_BLUE}' stroke-opacity='0.45' stroke-width='8' "
                "stroke-linecap='round' stroke-linejoin='round'/>")
    body += [f"<circle cx='{x(i):.1f}' cy='{y(r):.1f}' r='6' fill='{_BLUE}'/>" for i, r in enumerate(ranks)]
    body.append(f"<polyline points='{bound}' fill='none' stroke='{_RED}' stroke-width='2.2' "
                "stroke-dasharray='7 5'/>")
    body += [f"<rect x='{x(i) - 3:.1f}' y='{y(r) - 3:.1f}' width='6' height='6' fill='#fff' stroke='{_RED}' "
             "stroke-width='1.6'/>" for i, r in enumerate(ref)]
    body += [_t(x(i), y(r) - 11, str(r), 12, "middle", fill=_BLUE, font_weight="bold")
             for i, r in enumerate(ranks)]
    lx, ly = L + 12, top + 10                                            # legend, top left
    legend_w = text_width("h(k−1)+1 (the proof's count)", 12) + 52
    body.append(f"<rect x='{lx - 6}' y='{ly - 4}' width='{legend_w:.0f}' height='44' fill='#fff' fill-opacity='0.9' "
                f"stroke='{_GRID}'/>")
    body.append(_line(lx, ly + 9, lx + 30, ly + 9, _BLUE, 8, stroke_opacity="0.45", stroke_linecap="round"))
    body.append(f"<circle cx='{lx + 15}' cy='{ly + 9}' r='5' fill='{_BLUE}'/>")
    body.append(_t(lx + 40, ly + 13, "rank of Z (measured)", 12))
    body.append(_line(lx, ly + 29, lx + 30, ly + 29, _RED, 2.2, stroke_dasharray="7 5"))
    body.append(_t(lx + 40, ly + 33, "h(k−1)+1 (the proof's count)", 12))
    body.append(_t(L + pw / 2, Ht - 14, "head h (heads built so far)", 13, "middle"))
    body.append(_vlabel(18, top + ph / 2, "rank of Z on the fitted rows", 13))
    return _svg(W, Ht, body, "Rank of Z after each head",
                f"Thick blue with dots: the measured rank of Z on the examples fitted so far, after heads 1..h. "
                f"Red dashed with squares, drawn on top: h(k−1)+1 with k = {k}, the count of the proof; they "
                "coincide when every later head adds k−1 to the rank.")


def attention_figure(S: np.ndarray, head: int, group: range, saturated: np.ndarray,
                     j_star: np.ndarray | None = None) -> str:
    """Head ``head``'s attention (T × n heat map, one row per example, one column per token, with
    a colour scale; beyond :data:`_FIGURE_ROWS` examples, the rows :func:`_shown_rows` picks): its
    group outlined in red, the earlier examples it saturates labelled and,
    given ``j_star``, the token each earlier example saturates to outlined in orange."""
    S = np.asarray(S, dtype=float)
    T, n = S.shape
    rows = _shown_rows(T, group)
    at = {t: i for i, t in enumerate(rows) if isinstance(t, int)}      # example → its row in the figure
    cw = int(min(96, max(40, math.ceil(288 / n))))
    ch = 28 if len(rows) <= 14 else 20
    status = ["fit" if t in group else ("saturated" if saturated[t] else ("earlier" if t < group.start else ""))
              for t in range(T)]
    title = f"Head {head}: attention weights"
    subtitle = "row t: softmax over the n tokens of example t"
    L, top = 60, 58
    gw, gh = n * cw, len(rows) * ch
    sx = L + gw + 8                                                      # status labels
    W = max(sx + text_width("saturated", 12) + 8, text_width(title, 15) + 20, text_width(subtitle, 12) + 20)
    by = top + gh + 56                                                   # colour scale, under the grid
    bw = max(gw, 200)
    height = by + 14 + 44
    grad = f"teach-scale-{head}"
    body = [f"<defs><linearGradient id='{grad}' x1='0' y1='0' x2='1' y2='0'>"
            + "".join(f"<stop offset='{v:g}' stop-color='{_colour(v)}'/>" for v, _ in _RAMP)
            + "</linearGradient></defs>",
            _t(W / 2, 40, subtitle, 12, "middle", fill="#555")]
    for i, t in enumerate(rows):
        if not isinstance(t, int):                                       # a gap: examples left out
            body.append(_t(L + gw / 2, top + i * ch + ch / 2 + 4.5, f"⋮ {t[1] - t[0]} examples not shown "
                           f"({t[0]}–{t[1] - 1})", 12, "middle", fill="#555"))
            continue
        for j in range(n):
            v = float(S[t, j])
            cx, cy = L + j * cw, top + i * ch
            body.append(f"<rect x='{cx}' y='{cy}' width='{cw}' height='{ch}' fill='{_colour(v)}' stroke='#fff'/>")
            if ch >= 20:
                body.append(_t(cx + cw / 2, cy + ch / 2 + 4.5, f"{v:.2f}", 12, "middle",
                               fill="#fff" if v > 0.55 else _INK))
        body.append(_t(L - 8, top + i * ch + ch / 2 + 4.5, str(t), 13, "end"))
        if status[t]:
            body.append(_t(sx, top + i * ch + ch / 2 + 4.5, status[t], 12,
                           fill=_RED if status[t] == "fit" else "#555",
                           **({"font_weight": "bold"} if status[t] == "fit" else {})))
    if j_star is not None:                                               # where earlier examples saturate
        for t, j in enumerate(np.asarray(j_star)[:group.start]):
            if t in at:
                body.append(f"<rect x='{L + int(j) * cw + 2}' y='{top + at[t] * ch + 2}' width='{cw - 4}' "
                            f"height='{ch - 4}' fill='none' stroke='{_ORANGE}' stroke-width='3'/>")
    first, last = at[group.start], at[group.stop - 1]
    body.append(f"<rect x='{L}' y='{top + first * ch}' width='{gw}' height='{(last - first + 1) * ch}' "
                f"fill='none' stroke='{_RED}' stroke-width='3'/>")
    for j in range(n):                                                   # token axis
        body.append(_line(L + j * cw + cw / 2, top + gh, L + j * cw + cw / 2, top + gh + 4))
        body.append(_t(L + j * cw + cw / 2, top + gh + 18, str(j), 13, "middle"))
    body.append(_t(L + gw / 2, top + gh + 38, "token j of the context", 13, "middle"))
    body.append(_vlabel(18, top + gh / 2, "example t", 13))
    body.append(f"<rect x='{L}' y='{by}' width='{bw}' height='14' fill='url(#{grad})' stroke='{_INK}'/>")
    for v in (0, 0.25, 0.5, 0.75, 1):
        xx = L + v * bw
        body.append(_line(xx, by + 14, xx, by + 18))
        body.append(_t(xx, by + 30, f"{v:g}", 12, "middle"))
    body.append(_t(L + bw / 2, by + 50, "colour scale: attention weight", 12, "middle"))
    desc = (f"Each row is one example t, each column one token j of its context; the colour (scale below) "
            f"is the weight head {head} puts on that token, and each row sums to 1. Red box: the "
            f"examples head {head} fits exactly.")
    if j_star is not None and group.start:
        desc += (" Orange outline: the token j*(t) onto which each earlier example saturates; 'saturated' "
                 "marks the earlier examples whose weight there is above 0.5.")
    if len(at) < T:
        desc += (f" {len(at)} of the {T} examples are shown: the first few, those just before and after the "
                 "group, and the group's own (or its first and last ones).")
    return _svg(W, height, body, title, desc)


# An attention figure draws every example up to this many rows; beyond, the rows that tell the
# story (a figure of a thousand rows drew 11 MB of SVG and was unreadable).
_FIGURE_ROWS = 48


def _shown_rows(T: int, group: range) -> list:
    """The rows of an attention figure, in order: example indices, and ``(a, b)`` for the examples
    ``a..b−1`` left out. All of them up to :data:`_FIGURE_ROWS`; otherwise the first four, the six
    before the group, the group (its first and last sixteen when longer than 32), the four after it
    and the last."""
    if T <= _FIGURE_ROWS:
        return list(range(T))
    members = list(group) if len(group) <= 32 else list(group[:16]) + list(group[-16:])
    keep = (set(range(min(4, T))) | set(range(max(0, group.start - 6), group.start)) | set(members)
            | set(range(group.stop, min(T, group.stop + 4))) | {T - 1})
    rows: list = []
    prev = -1
    for t in sorted(keep):
        if t > prev + 1:
            rows.append((prev + 1, t))
        rows.append(t)
        prev = t
    return rows


def _tick_label(v: float) -> str:
    return f"{v:g}" if 1e-3 <= v < 1e4 else _pow10(round(math.log10(v)))


def singular_value_figure(s: np.ndarray) -> str:
    """The singular values of ``Z``, largest first, as bars on a logarithmic y axis."""
    s = np.sort(np.maximum(np.asarray(s, dtype=float), 1e-300))[::-1]
    N = len(s)
    W, Ht, L, R, top, B = 460, 330, 70, 16, 56, 58
    pw, ph = W - L - R, Ht - top - B
    lo, hi = math.floor(math.log10(s.min())), math.ceil(math.log10(s.max()))
    if hi <= lo:
        hi = lo + 1
    y = lambda v: top + ph * (hi - math.log10(v)) / (hi - lo)
    body = [_t(W / 2, 38, f"largest {s.max():.3g}, smallest {s.min():.3g} ({N} values)", 12, "middle", fill="#555")]
    every = max(1, math.ceil((hi - lo) / 7))
    for e in range(lo, hi + 1):                                          # decades, and 2 and 5 between
        minor = [2, 5] if hi - lo <= 3 and e < hi else []
        for m in [1] + minor:
            if m == 1 and (e - lo) % every:
                continue
            v = m * 10.0 ** e
            body.append(_line(L, y(v), L + pw, y(v), _GRID if m == 1 else "#f0f0f0"))
            body.append(_line(L - (5 if m == 1 else 3), y(v), L, y(v)))
            body.append(_t(L - 8, y(v) + 4, _tick_label(v), 12 if m == 1 else 11, "end",
                           **({} if m == 1 else {"fill": "#666"})))
    bw = pw / N
    xstep = max(1, math.ceil(N / 16))
    for i, v in enumerate(s):
        yy = min(y(v), top + ph - 1)
        body.append(f"<rect x='{L + i * bw + bw * 0.15:.1f}' y='{yy:.1f}' width='{bw * 0.7:.1f}' "
                    f"height='{top + ph - yy:.1f}' fill='#2ca02c'/>")
        if i % xstep == 0:
            cx = L + (i + 0.5) * bw
            body.append(_line(cx, top + ph, cx, top + ph + 5))
            body.append(_t(cx, top + ph + 18, str(i + 1), 12, "middle"))
    body += [_line(L, top, L, top + ph), _line(L, top + ph, L + pw, top + ph)]
    body.append(_t(L + pw / 2, Ht - 14, "i (singular values, largest first)", 13, "middle"))
    body.append(_vlabel(18, top + ph / 2, "σᵢ (log scale)", 13))
    return _svg(W, Ht, body, "Singular values of Z",
                f"The {N} singular values of the final feature matrix Z (one row per example), on a "
                "logarithmic y axis: none is zero, so rank Z = T and the readout Z B = Y has a solution.")


# --- the walkthrough -------------------------------------------------------------------------------

def repeated_queries(heads: int = 3, context: int = 3, dim: int = 4, *, seed: int = 0) -> Dataset:
    """A dataset at capacity whose queries repeat (the query is the context's last token, drawn
    from a small vocabulary: ``context + 1`` tokens, one more every ten draws), so A1 fails, while
    the queries shifted by their contexts' means are independent (A3): the case of Proposition 4.
    Draws are repeated (seed, seed+1, …) until the queries repeat and the shifted queries meet
    the condition the build tests (A3 as the construction uses it: :func:`partition.violations`).

    Raises:
        InputError: fewer than two examples (``n = 1``: no query can repeat), or no such draw.
    """
    from .datasets import tokens
    from .partition import violations
    seed = integer(seed, "seed", 0)           # a Python integer: seed + attempt never overflows
    T = capacity(heads, context, context)
    if T < 2:
        raise InputError([f"repeated queries need at least 2 examples, and H(n − 1) + 1 = {T} with n = {context}: "
                          "take --context 2 or more"], what="teach")
    for attempt in range(100):
        data = tokens(T, n=context, d=dim, vocabulary=context + 1 + attempt // 10, classes=min(2, dim),
                      seed=seed + attempt)
        shifted = mean_shift(data.E, data.X)[1]                # the queries the second layer reads
        repeats = np.unique(data.X, axis=0).shape[0] < T
        if repeats and not violations(shifted, context, shifted=True):
            return data
    raise InputError([f"no token dataset with repeated queries meeting A3 found in 100 draws (T = {T}, n = "
                      f"{context}, d = {dim}); a larger dimension d, or a smaller context, leaves the shifted "
                      "queries more room"], what="teach")


# teach narrates every head and measures the rank after each: a walkthrough, not a build.
MAX_HEADS = 64
MAX_EXAMPLES = 1000


@numpy_error_defaults
def teach(heads: int = 3, context: int = 3, dim: int = 4, *, seed: int = 0, shared: bool = False,
          rational: bool = False, prelayer: bool = False) -> Walkthrough:
    """Run the construction on a tiny dataset and narrate every step with the engine's numbers.

    Args:
        heads, context, dim: ``H``, ``n``, ``d`` (the dataset is at capacity ``H(n−1)+1``).
        seed: seed of the data and of the construction.
        shared: one context for every example (Prop. 2's tight case).
        rational: exact rational inputs, shown exactly.
        prelayer: queries that repeat (A1 fails, A3 holds: :func:`repeated_queries`), built
            through Proposition 4's pre-layer, which the walkthrough shows first.

    Raises:
        InputError: sizes the construction cannot take (``n > d``, …), or more than
            :data:`MAX_HEADS` heads or :data:`MAX_EXAMPLES` examples.
    """
    heads, context, dim = integer(heads, "heads"), integer(context, "context"), integer(dim, "dim")
    shared, rational, prelayer = flag(shared, "shared"), flag(rational, "rational"), flag(prelayer, "prelayer")
    if heads > MAX_HEADS or capacity(heads, context, context) > MAX_EXAMPLES:
        raise InputError(f"teach walks through every head of a small problem: at most {MAX_HEADS} heads and "
                         f"{MAX_EXAMPLES} examples (here H = {heads}, T = {capacity(heads, context, context)}); "
                         "`mha-construct build` takes any size", what="invalid option")
    if prelayer and (shared or rational):
        raise InputError("--prelayer (prelayer=True): the pre-layer walkthrough draws its own token sequences, "
                         "so it takes neither --shared nor --rational", what="invalid option")
    # Hundreds of SVDs of a few hundred rows: on two BLAS threads that spin against each other, a
    # busy 2-core machine ran them 15-25 times slower (the engine's sessions limit BLAS likewise).
    with blas_limit(1):
        return _walkthrough(heads, context, dim, seed, shared, rational, prelayer)


def _walkthrough(heads: int, context: int, dim: int, seed: int, shared: bool, rational: bool,
                 prelayer: bool) -> Walkthrough:
    data = (repeated_queries(heads, context, dim, seed=seed) if prelayer else
            tiny_dataset(heads, context, dim, seed=seed, shared=shared, rational=rational))
    # The saturating scale rule: the proof's Weyl argument with the perturbation measured, so each
    # head's scale is where saturation keeps the rank step (the default rule tests the rank itself,
    # and often needs no saturation at all).
    result = build(data, heads, seed=seed, trace=True, precision="float64", scale="saturating",
                   prelayer="mean-shift" if prelayer else "none")
    T, d, k = data.T, data.d, result.k
    W = result.weights
    raw = data
    if prelayer:                                  # the attention layer reads the pre-layer's outputs
        data = Dataset(*mean_shift(data.E, data.X), data.Y)
    Z = feature_matrix(data.E, data.X, W, layered=True)
    exact = (lambda a: _exact(a)) if rational else None
    steps = [_assumptions_step(raw, result, exact)]
    layer_a1 = kruskal_check(data.X, data.n, "x + mean(E)") if prelayer else None
    if prelayer:
        steps.append(_prelayer_step(raw, data, layer_a1))
    steps.append(_partition_step(result))
    ranks = []
    for h, (tr, ev) in enumerate(zip(result.trace, result.heads)):
        S = tr.examples
        ranks.append(numerical_rank(Z[:S.stop, :(h + 1) * d])[0])
        attention = head_attention(data.E, data.X, W.W_K[h], W.W_Q[h])
        saturated = np.zeros(T, dtype=bool)
        if h:
            dist = 1 - attention[np.arange(S.start), tr.j_star]
            saturated[:S.start] = dist < 0.5
        figure = attention_figure(attention, h + 1, S, saturated, tr.j_star if h else None)
        if h == 0:
            steps.append(_head1_step(data, result, Z, figure, exact))
        else:
            steps.append(_later_head_step(h, data, result, Z, ranks, figure, exact))
    steps.append(_readout_step(raw, result, Z, ranks, k))
    shape = f"H = {heads}, n = {context}, d = {dim}, T = {T}" + (", shared context" if shared else "") + \
        (", rational inputs" if rational else "") + (", repeated queries through Proposition 4's pre-layer"
                                                     if prelayer else "")
    return Walkthrough(steps, result, f"The construction of Theorem 1, step by step ({shape})", layer_a1)


def _assumptions_step(data: Dataset, result: BuildResult, exact) -> Step:
    r = kruskal_rank(data.X)
    bad = a2_violations(data.E)
    if r is not None:
        a1 = (f"A1: the queries' exact Kruskal rank is {r} (needed: ≥ $n$ = {data.n}) — "
              + ("holds." if r >= data.n else "fails."))
    else:                                       # too many subsets to try them all: sampled
        c = kruskal_check(data.X, data.n, "queries x")
        a1 = (f"A1: the queries' Kruskal rank is too costly to compute exactly here; of the sampled sets of "
              f"$n$ = {data.n} queries, {c.sampled_fraction:.1%} are independent — "
              + ("holds, by sampling." if c.holds else "fails."))
    lines = [f"$T$ = {data.T} example{'s' if data.T != 1 else ''}, context size $n$ = {data.n}, token dimension $d$ = {data.d}, "
             f"$H$ = {result.weights.H} head{'s' if result.weights.H != 1 else ''}, $k = min(n, d_h)$ = {result.k}: "
             f"capacity $H(k − 1) + 1$ = "
             f"{result.capacity}.",
             a1,
             "A2: every context $E^(t)$ has full row rank $n$." if bad.size == 0 else
             f"A2 fails for examples {bad.tolist()}."]
    matrices = {"$X$ (queries, one per row)": exact(data.X) if exact else data.X}
    if exact:
        matrices["$E^(0)$ (context of example 0)"] = exact(data.E[0])
    return Step("1. The data and the assumptions", "Assumptions 1 and 2 (A1, A2)", "proofs.theorem1",
                lines, matrices, docs="§2, §4.1")


def _prelayer_step(raw: Dataset, shifted: Dataset, after) -> Step:
    r_raw, r_shift = kruskal_rank(raw.X), after.exact_rank
    _, first, counts = np.unique(raw.X, axis=0, return_index=True, return_counts=True)
    lines = [f"The queries repeat: {int(np.sum(counts[counts > 1]))} of the {raw.T} examples share their query "
             f"with another; their Kruskal rank is {r_raw}, below $n$ = {raw.n}, so no single attention layer "
             "can tell those examples apart by their queries.",
             "Proposition 4: a first layer with one head, zero key and query maps (uniform attention), identity "
             "value and output maps and a skip connection sends every token $v$ to $v + mean_i e_i$.",
             "After it the queries $x + mean(E)$ " + _a1_after(after, r_shift, raw.n) + ". Every "
             "context keeps full row rank (Lemma 2 with $α = 1$): "
             + ("A2 holds." if a2_violations(shifted.E).size == 0 else "A2 FAILS."),
             "The construction below builds the second layer on these shifted tokens; the weights file records "
             "the pre-layer, and verify, certify and export run both layers."]
    return Step("1b. Proposition 4's pre-layer makes the queries distinct", "Proposition 4, Lemma 2",
                "proofs.prop4", lines, {"$x + mean(E)$ (the second layer's queries)": shifted.X}, docs="§6")


def _a1_after(after, r: int | None, n: int) -> str:
    """A1 on the pre-layer's outputs, as the check found it: exact where it could be computed."""
    if r is None:
        return (f"have, of the sampled sets of $n$ = {n}, {after.sampled_fraction:.1%} independent (their exact "
                "Kruskal rank is too costly to compute here) — " + ("A3 holds, so A1 now holds, by sampling"
                                                                    if after.holds else "A1 still fails"))
    if r >= n:
        return f"have Kruskal rank {r} ≥ $n$ = {n} (A3, so A1 now holds)"
    return (f"have Kruskal rank {r}, below $n$ = {n}: A3 fails at these sizes, so A1 still fails after the layer; "
            "the construction needs less, the condition checked in step 2, which these queries meet")


def _partition_step(result: BuildResult) -> Step:
    groups = [tr.examples for tr in result.trace]
    lines = [f"$G_{h + 1}$ = examples {list(g)}" + (" ($k$ examples, fitted by head 1)" if h == 0 else
                                                    f" ($k − 1$ examples, fitted by head {h + 1})")
             for h, g in enumerate(groups)]
    lines.append("Each group's queries are independent, and no earlier query lies in the span of a later "
                 "group's queries: the checkable condition the construction needs instead of A1.")
    lines.append("Examples, and the tokens $j^*$ of the later steps, are numbered from 0 here, as in the arrays; "
                 "docs/math.md numbers them from 1.")
    H, k = result.weights.H, len(groups[0])
    if len(groups) < H:                     # teach draws T at capacity: only k = 1 leaves heads without a group
        first = len(groups) + 1
        heads = f"Head {H} fits" if first == H else f"Heads {first}–{H} fit"
        lines.append(f"{heads} no examples: each later head fits $k − 1$ = {k - 1} new ones here. Their key–query "
                     "product is 0, so they attend uniformly; their features are columns of $Z$ too, but "
                     f"$rank Z$ = $T$ = {result.data.T} without them.")
    return Step("2. The partition into groups", "Proposition 1 (its proof's groups)", "proofs.prop1", lines,
                docs="§4.2")


def _feature_error(Z: np.ndarray, data: Dataset, h: int, S: range, targets: np.ndarray) -> float:
    """``max |z^(t) − (E^(t))^T s^(t)|`` over ``t ∈ S`` on head ``h``'s block of the forward pass's
    ``Z`` (the one the steps print), for the targets ``s`` the construction set there."""
    d = data.d
    want = np.einsum("tnd,tn->td", data.E[S.start:S.stop], targets)
    return float(np.abs(Z[S.start:S.stop, h * d:(h + 1) * d] - want).max())


def _head1_step(data: Dataset, result: BuildResult, Z: np.ndarray, figure: str, exact) -> Step:
    tr, W = result.trace[0], result.weights
    S, d = tr.examples, data.d
    m = len(S)
    rows = Z[S.start:S.stop, :d]
    lines = [f"Targets $s^(t)$ for $t ∈ S = G_1$ = {list(S)}: interior points of the simplex, drawn so that the "
             f"rows $(E^(t))^T s^(t)$ are independent: their $σ_min$ = {result.heads[0].sigma_min_M:.4g}.",
             "Logits $ℓ^(t) = log s^(t)$; $u^(t) = (E^(t))^+ ℓ^(t)$; $W_1 = U (X_S^T X_S)^-1 X_S^T$ with "
             "$U = [u^(t)]_{t ∈ G_1}$, so that $E^(t) W_1 x^(t) = ℓ^(t)$ and the softmax gives back $s^(t)$.",
             f"Head 1's features (its block of $Z$, below) equal $(E^(t))^T s^(t)$ to "
             f"{_feature_error(Z, data, 0, S, tr.targets):.2g}: the softmax gives back the targets; its rows of $Z$ have rank "
             + (f"{m}, the size of $G_1$." if numerical_rank(rows)[0] == m else
                f"{numerical_rank(rows)[0]}, below the size of $G_1$, {m}.")]
    matrices = {"$s$ (targets, one row per example)": tr.targets, "$ℓ = log s$": np.log(tr.targets),
                "$W_1 = W_K[1] W_Q[1]^T$": W.W_K[0][:, :m] @ W.W_Q[0][:, :m].T,
                "rows of $Z$ for $G_1$ (head 1 block)": rows}
    if exact:
        X_S = exact(data.X[S.start:S.stop]).T
        matrices["$(X_S^T X_S)^-1$, exactly"] = (X_S.T * X_S).inv()
    return Step("3. Head 1 fits k examples exactly (Claim 1)", "Claim 1", "proofs.claim1",
                lines, matrices, [figure], docs="§3, §4.3")


def _later_head_step(h: int, data: Dataset, result: BuildResult, Z: np.ndarray, ranks: list[int], figure: str,
                     exact) -> Step:
    tr, ev = result.trace[h], result.heads[h]
    S = tr.examples
    X_S = data.X[S.start:S.stop]
    lines = [f"New group $S = G_{h + 1}$ = {list(S)}; earlier examples $A$ = 0..{S.start - 1}.",
             f"Lemma 3: a rank-one separator $a b^T$ with $b ⊥ span(X_S)$ (max $|X_S^T b|$ = "
             f"{np.abs(X_S @ tr.b).max():.2g}) and $a$ random; on every earlier example $t ∈ A$ the separator "
             f"logits $E^(t) a b^T x^(t)$ have a unique largest entry, at token $j^*(t)$, with gap $δ_t$ ≥ "
             f"{ev.delta_min:.3g}.",
             f"Saturation: head {h + 1} adds $c a b^T$ to its key–query product; since $b ⊥ X_S$ this leaves the "
             f"new group's logits alone, and as $c → ∞$ example $t ∈ A$ attends only to token $j^*(t)$: "
             f"$j^*$ = {tr.j_star.tolist()}.",
             f"Row reduction (docs/math.md §4.4.3): $C = Z'_S (Z'_A)^+$ ({tr.C.shape[0]}×{tr.C.shape[1]}, "
             f"$‖C‖$ = {ev.C_norm:.3g}), $F = C \\bar{{Z}}_A$.",
             f"New targets $s^(t)$ on $G_{h + 1}$ with $M = E^T s − F$ of full rank: $σ_min(M)$ = "
             f"{ev.sigma_min_M:.4g}.",
             f"Scale (docs/math.md §4.4.5): the explicit bound (Lemma 4 + Weyl) asks for $c ≥$ "
             f"{ev.scale_explicit:.4g}; the engine used $c_{h + 1}$ = {ev.scale:.4g}, where the measured "
             f"perturbation {ev.perturbation_measured:.3g} is below $σ_min(M)/2$ = {ev.sigma_min_M / 2:.3g}.",
             f"Rank of $Z$ on the fitted rows: {ranks[h - 1]} → {ranks[h]} (+{ranks[h] - ranks[h - 1]}).",
             f"On $G_{h + 1}$ its features equal $(E^(t))^T s^(t)$ to "
             f"{_feature_error(Z, data, h, S, tr.targets):.2g}: the new targets are met."]
    matrices = {"a": tr.a, "b": tr.b, "C": tr.C, "F": tr.F, "$s$ (new targets)": tr.targets, "M": tr.M}
    if exact:
        matrices["basis of $span(X_S)^⊥$, exactly"] = reduce(lambda A, B: A.row_join(B), exact(X_S).nullspace())
    return Step(f"{h + 3}. Head {h + 1}: fit {len(S)} new example{'s' if len(S) != 1 else ''}, freeze the earlier ones "
                "(Lemma 3, Claim 2, Lemma 4)", "Lemmas 3–5, Claim 2", "proofs.claim2 (check_head), "
                "proofs.prop1 (check_step)", lines, matrices, [figure], docs="§3, §4.4 (§4.4.1–§4.4.5)")


def _readout_step(data: Dataset, result: BuildResult, Z: np.ndarray, ranks: list[int], k: int) -> Step:
    # The final weights through the model's forward pass, as construct.verify (and the CLI's verify)
    # evaluates them: the build's own check ran on the Z it grew head by head, whose last bits can
    # differ from the forward pass's (and from the Z printed here). ``data``: the data as given.
    v = verify(result.weights, data)               # the build's tolerance: teach builds with the default
    _, s = numerical_rank(Z)
    lines = [f"$rank Z$ = {v.rank_Z} = $T$: the readout $Z B = Y$ has a solution (minimum norm).",
             "$B$ is factored into $W_V$, $W_O$, $W_D$: $W_D = [I; 0]$, $W_O$ picks the first $d_o$ value "
             "coordinates.",
             f"Final check with the model's own forward pass: max $|f(E, x) − y|$ = {v.max_abs_error:.3g} "
             f"(allowed {v.tol:.1g}), $σ_min(Z)$ = {v.sigma_min_Z:.4g}. That is one {v.outputs} evaluation, "
             "with its own rounding" + ("" if v.outputs == "float64" else
                                        f" (float64 alone gives {v.float64_error:.3g}, blind to the rounding of "
                                        "what the pre-layer hands on)" if result.weights.prelayer is not None else
                                        f" (float64 alone gives {v.float64_error:.3g})")
             + "; mha-construct certify bounds the exact model's error.",
             ("Ranks after each head" if len(ranks) == result.weights.H else
              f"Ranks after the heads that fit examples (head{'s' if len(ranks) > 1 else ''} 1"
              + (f"–{len(ranks)}" if len(ranks) > 1 else "") + ")")
             + f": {ranks} against $h(k − 1) + 1$ = "
             f"{[h * (k - 1) + 1 for h in range(1, len(ranks) + 1)]}."]
    return Step(f"{len(result.trace) + 3}. The readout and the final check", "Theorem 1", "proofs.theorem1",
                lines, {"Z": Z}, [rank_figure(ranks, k), singular_value_figure(s)], docs="§4.5, §4.6")
