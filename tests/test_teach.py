"""mha-construct teach: every step present, the engine's own numbers, the theorem first, MathML
formulas, readable self-contained SVG figures, the step-by-step view, and Markdown with its figures."""

import re
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from construct import teach
from construct.cli import main
from construct.arith import numerical_rank
from construct.model import feature_matrix
from construct.teach import (attention_figure, math_text, mathml, rank_figure, rich_text,
                             singular_value_figure)

SVG = "{http://www.w3.org/2000/svg}"
VOID = {"meta", "input", "br", "img", "link", "hr"}
MATHML_ELEMENTS = {"math", "mrow", "mi", "mn", "mo", "mtext", "msub", "msup", "msubsup", "mover", "mspace"}
ARXIV = "https://arxiv.org/abs/2306.02010"
NOTES = "MATH" + ".md"                 # the internal notes, which no output may cite (spelled apart: see test_docs)


class _Collector(HTMLParser):
    """Checks the nesting, and records tags, attributes, and text outside math/code/script/figures."""

    SKIP = {"math", "script", "style", "pre", "code", "svg", "title"}

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.open: list[str] = []
        self.prose: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):                # <rect .../>: opens and closes at once
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()

    def handle_data(self, data):
        if not self.SKIP & set(self.open):
            self.prose.append(data)


def _parse(page: str) -> _Collector:
    parser = _Collector()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    return parser


def _fragments(page: str, tag: str) -> list[str]:
    out, i = [], 0
    while (i := page.find(f"<{tag}", i)) >= 0:
        end = page.index(f"</{tag}>", i) + len(tag) + 3
        out.append(page[i:end])
        i = end
    return out


def _text(el) -> str:
    return "".join(el.itertext())


def _page(tmp_path, *options) -> str:
    assert main(["teach", "--format", "html", "--out", str(tmp_path), *options]) == 0
    return (tmp_path / "teach.html").read_text()


# --- the steps and their numbers ---------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, {"shared": True}, {"rational": True}, {"heads": 4, "context": 4, "dim": 5}])
def test_every_step_is_present_with_the_engines_numbers(options):
    from construct import verify
    walk = teach(**options)
    result = walk.result
    H = result.weights.H
    titles = [s.title for s in walk.steps]
    assert titles[0].startswith("1. The data and the assumptions")
    assert titles[1].startswith("2. The partition")
    assert "Claim 1" in titles[2]
    assert all(f"Head {h}" in titles[h + 1] for h in range(2, H + 1))
    assert titles[-1].endswith("The readout and the final check")
    for h in range(2, H + 1):                              # each later head shows the engine's arrays
        step, tr, ev = walk.steps[h + 1], result.trace[h - 1], result.heads[h - 1]
        assert step.matrices["C"] is tr.C and step.matrices["F"] is tr.F and step.matrices["a"] is tr.a
        text = step.text()
        assert f"{ev.scale:.4g}" in text and f"{ev.scale_explicit:.4g}" in text and f"{ev.sigma_min_M:.4g}" in text
        assert str(tr.j_star.tolist()) in text
    Z = feature_matrix(result.data.E, result.data.X, result.weights)
    assert np.array_equal(walk.steps[-1].matrices["Z"], Z)
    assert f"{verify(result.weights, result.data).max_abs_error:.3g}" in walk.steps[-1].text()


@pytest.mark.parametrize("options", [{}, {"shared": True}, {"prelayer": True}])
def test_the_final_check_quotes_the_forward_pass_on_the_final_weights(options):
    # A review: the readout step said "Final check with the model's own forward pass: max |f − y| =
    # 1.11e-16" (7.77e-16 on a shared context), the build's figure from its own head-by-head Z;
    # construct.forward and verify on the same weights gave 2.22e-16 (2.0e-15), as a student
    # recomputing it from the printed Z does.
    from construct import forward, verify
    walk = teach(**options)
    result = walk.result
    v = verify(result.weights, result.data)
    f = forward(result.data.E, result.data.X, result.weights)
    text = walk.steps[-1].text()
    # With the pre-layer verify evaluates in double words (its outputs rounded to float64 are
    # what float64 cannot see: here 5.5e-14 exact against 1.3e-15 in float64); float64's own
    # figure is the forward pass's.
    float64 = v.max_abs_error if v.outputs == "float64" else v.float64_error
    assert v.outputs == ("double words" if options.get("prelayer") else "float64")
    assert float64 == float(np.abs(f - result.data.Y).max())
    assert f"max |f(E, x) − y| = {v.max_abs_error:.3g} " in text and f"one {v.outputs} evaluation" in text
    assert f"σ_min(Z) = {v.sigma_min_Z:.4g}" in text


def test_every_step_cites_the_paper_and_the_docs_never_math_md():
    for walk in (teach(), teach(prelayer=True), teach(rational=True)):
        for step in walk.steps:
            assert re.fullmatch(r"§\d(\.\d)*(, §\d(\.\d)*)*( \(§[\d.–§]+\))?", step.docs), step.docs
            assert step.statement and "MATH" not in step.statement
            assert f"docs/math.md {step.docs}" in step.text() and "arXiv:2306.02010" in step.text()
        outputs = [walk.text(), walk.text(color=True), walk.markdown(), walk.markdown(walk.figure_names()),
                   walk.html(), walk._repr_html_(), walk.steps[2]._repr_html_()]
        assert all(NOTES not in out for out in outputs)
    cited = {s.title.split(".")[0]: s.docs for s in teach(prelayer=True).steps}
    assert cited["1"].startswith("§2") and cited["1b"] == "§6" and cited["2"] == "§4.2"
    assert "§4.3" in cited["3"] and "§4.4" in cited["4"] and "§4.5" in cited["6"]


def test_cli_outputs_never_mention_math_md(tmp_path, capsys):
    for fmt in ("text", "markdown", "html"):
        assert main(["teach", "--format", fmt]) == 0
        assert main(["teach", "--format", fmt, "--prelayer", "--out", str(tmp_path / fmt)]) == 0
    assert NOTES not in capsys.readouterr().out
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert NOTES not in path.read_text()


@pytest.mark.parametrize("no_color, styled", [(None, True), ("1", False), ("", True)])
def test_text_on_a_terminal_is_styled_unless_no_color_is_set(capsys, monkeypatch, no_color, styled):
    # NO_COLOR (no-color.org): present and not empty turns styling off, whatever its value.
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    assert main(["teach", "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert ("\033[" in out) == styled
    assert re.sub(r"\033\[[0-9]+m", "", out) == teach().text()


def test_the_walkthrough_runs_its_linear_algebra_on_one_blas_thread(monkeypatch):
    # A review measured teach at H = 64 (n = 8, d = 16) taking 38-58 s on a busy 2-core machine
    # and 2.3 s with BLAS on one thread: its hundreds of SVDs ran outside the engine's sessions,
    # on every BLAS thread, which spin against each other there.
    from construct.arith.threads import blas_threads
    walkthrough = sys.modules["construct.teach"]              # the module; construct.teach is the function
    seen = []

    def rank(A):
        seen.append(blas_threads())
        return numerical_rank(A)
    monkeypatch.setattr(walkthrough, "numerical_rank", rank)
    teach(4, 3, 4)
    assert seen and set(seen) == {1}


# --- the theorem first ---------------------------------------------------------------------------

def test_the_theorem_and_the_plan_come_first_in_every_format(tmp_path):
    walk = teach()
    for out in (walk.text(), walk.markdown()):
        theorem = out.index("Theorem 1 (memorization capacity")
        assert theorem < out.index("T = H(k − 1) + 1") < out.index("1. The data and the assumptions")
        assert "Θ(H d (d_h + d_v))" in out and "A1" in out[:out.index("1. The data")]
        plan = out[theorem:out.index("1. The data")]
        assert all(word in plan for word in ("Claim 1", "Lemma 3", "rank-one separator", "saturates",
                                             "rank Z = H(k − 1) + 1 = T", "linear readout"))
    page = _page(tmp_path)
    body = page[page.index("<body"):]
    assert body.index("id='theorem'") < body.index("class='step'")
    parser = _parse(page)
    headings = [attrs.get("id") or tag for tag, attrs in parser.tags if tag in ("h1", "h2", "section")]
    assert headings[:3] == ["h1", "theorem", "h2"]
    theorem = page[page.index("id='theorem'"):page.index("</section>", page.index("id='theorem'"))]
    display = [ET.fromstring(m) for m in _fragments(theorem, "math") if "display='block'" in m]
    assert "".join(_text(display[0]).split()) == "T=H(k−1)+1"
    assert any("".join(_text(ET.fromstring(m)).split()) == "Θ(Hd(dh+dv))" for m in _fragments(theorem, "math"))
    assert f"href='{ARXIV}'" in theorem


# --- formulas ----------------------------------------------------------------------------------

def test_the_formula_notation_renders_as_unicode_and_as_mathml():
    assert math_text("W_1 = U (X_S^T X_S)^-1 X_S^T") == "W₁ = U (X_Sᵀ X_S)⁻¹ X_Sᵀ"
    assert math_text("ℓ^(t) = log s^(t)") == "ℓ⁽ᵗ⁾ = log s⁽ᵗ⁾"
    assert math_text("G_{h+1}") == "G_(h+1)" and math_text("σ_min(M)") == "σ_min(M)"
    assert math_text("C = Z'_S (Z'_A)^+") == "C = Z′_S (Z′_A)⁺" and math_text("\\bar{Z}_A") == "Z̄_A"
    assert math_text("x^(T)") == "x^(T)"                    # not x⁽ᵀ⁾, which reads as a transpose
    assert rich_text("so $j^*(t)$ = 2") == "so j*(t) = 2"
    m = ET.fromstring(mathml("W_1 = U (X_S^T X_S)^-1 X_S^T"))
    assert m.tag == "math" and [e.tag for e in m.iter("msubsup")] == ["msubsup", "msubsup"]
    inverse = [e for e in m.iter("msup") if "".join(_text(e[1]).split()) == "−1"]
    assert len(inverse) == 1 and _text(inverse[0][0]).startswith("(")
    assert ET.fromstring(mathml("\\bar{Z}_A")).find(".//msub/mover") is not None
    spaced = ET.fromstring(mathml("rank Z"))                  # a word and its argument do not touch
    assert [e.tag for e in spaced[0]] == ["mi", "mspace", "mi"]
    with pytest.raises(ValueError):
        mathml("G_{h+1")
    with pytest.raises(ValueError):
        rich_text("an $unbalanced formula")


def test_html_formulas_are_well_formed_mathml_and_no_raw_ascii_remains(tmp_path):
    page = _page(tmp_path, "--rational")
    maths = _fragments(page, "math")
    assert len(maths) > 60
    for fragment in maths:
        el = ET.fromstring(fragment)
        assert el.tag == "math" and {e.tag for e in el.iter()} <= MATHML_ELEMENTS, fragment
    texts = {"".join(_text(ET.fromstring(m)).split()) for m in maths}
    assert {"W1=U(XSTXS)−1XST", "σmin(M)", "C=ZS′(ZA′)+", "F=CZ¯A"} <= texts
    prose = " ".join(_parse(page).prose)
    for raw in ("^T", "^{", "_{", "(X_S", "σ_min", "W_1", "s^(t)", "E^(t)"):
        assert raw not in prose, raw
    assert "http" not in "".join(maths)


# --- the page: one self-contained file, usable with and without the script ---------------------

def test_html_is_one_self_contained_page_with_figures(tmp_path):
    page = _page(tmp_path)
    parser = _parse(page)
    sections = [attrs for tag, attrs in parser.tags if tag == "section"]
    assert len(sections) == 7 and [s.get("class") for s in sections].count("step") == 6
    assert len(_fragments(page, "svg")) == 5
    for tag, attrs in parser.tags:                          # nothing is fetched from outside
        assert tag not in ("link", "img", "iframe", "object", "embed")
        assert "src" not in attrs, (tag, attrs)
        for name in ("href", "xlink:href"):
            if name in attrs:
                assert attrs[name].startswith("#") or attrs[name] == ARXIV, attrs[name]
    assert "@import" not in page and not re.search(r"url\((?!#)", page)
    outside = re.sub(r"xmlns='http://www\.w3\.org/2000/svg'", "", page).replace(ARXIV, "")
    assert "http" not in outside and "//" not in re.sub(r"<script>.*?</script>", "", outside, flags=re.S)
    for needle in ("Claim 1", "Lemma 3", "explicit bound", "Rank of Z after each head", "Singular values of Z",
                   "attention weights"):
        assert needle in page
    steps = [a for t, a in parser.tags if t == "section" and a.get("class") == "step"]
    refs = [a for t, a in parser.tags if t == "a" and a.get("href") == ARXIV]
    assert len(refs) >= len(steps) + 1                      # every step, and the theorem, link the paper


def test_the_step_view_is_progressive_enhancement(tmp_path):
    page = _page(tmp_path)
    parser = _parse(page)
    by_id = {a["id"]: (t, a) for t, a in parser.tags if "id" in a}
    assert "hidden" in by_id["controls"][1]                  # without the script: no dead buttons ...
    steps = [a for t, a in parser.tags if t == "section" and a.get("class") == "step"]
    assert [a["id"] for a in steps] == [f"step-{i}" for i in range(1, 7)]
    assert all("hidden" not in a for a in steps)             # ... and every step, every number shown
    assert {"prev", "next", "opt-all", "opt-numbers"} <= set(by_id)
    assert by_id["opt-numbers"][0] == "input" and "checked" in by_id["opt-numbers"][1]
    numbers = [a for t, a in parser.tags if a.get("class") == "numbers"]
    assert len(numbers) == 5                                 # each step with matrices (not the partition)
    script = page[page.index("<script>"):page.index("</script>")]
    for hook in ("'controls'", "'prev'", "'next'", "'opt-all'", "'opt-numbers'", "section.step", "no-numbers",
                 "c.hidden = false"):
        assert hook in script
    assert ".teach.no-numbers .numbers{display:none}" in page
    toc = [a["href"] for t, a in parser.tags if t == "a" and a.get("href", "").startswith("#")]
    assert toc == [f"#step-{i}" for i in range(1, 7)]


# --- figures -----------------------------------------------------------------------------------

def _size(svg: ET.Element) -> tuple[float, float]:
    x0, y0, w, h = map(float, svg.get("viewBox").split())
    assert (x0, y0) == (0, 0) and float(svg.get("width")) == w and float(svg.get("height")) == h
    return w, h


def _extent(t: ET.Element) -> tuple[float, float, float, float]:
    """(left, right, top, bottom) of a text element, at 0.6 font sizes per character."""
    x, y, size = float(t.get("x")), float(t.get("y")), float(t.get("font-size"))
    width = len(_text(t)) * 0.6 * size
    left = {"start": x, "middle": x - width / 2, "end": x - width}[t.get("text-anchor", "start")]
    if t.get("transform"):                                   # rotate(±90 x y): runs vertically
        angle, cx, cy = map(float, re.fullmatch(r"rotate\((\S+) (\S+) (\S+)\)", t.get("transform")).groups())
        assert abs(angle) == 90 and (cx, cy) == (x, y) and t.get("text-anchor") == "middle"
        return x - size, x + size, y - width / 2, y + width / 2
    return left, left + width, y - size, y + 0.3 * size


def _check_svg(fragment: str) -> ET.Element:
    """Well-formed, a viewBox, every text inside it, and a title that is drawn."""
    svg = ET.fromstring(fragment)
    w, h = _size(svg)
    texts = list(svg.iter(f"{SVG}text"))
    for t in texts:
        left, right, top, bottom = _extent(t)
        assert 0 <= left and right <= w and 0 <= top and bottom <= h, (_text(t), (left, right, top, bottom), (w, h))
    title = svg.find(f"{SVG}title").text
    assert _text(texts[0]) == title and float(texts[0].get("font-size")) >= 13
    assert svg.find(f"{SVG}desc").text
    return svg


def _numbers(texts, **attrs) -> list[float]:
    out = []
    for t in texts:
        if all(t.get(k) == v for k, v in attrs.items()) and not t.get("transform"):
            s = _text(t).translate(str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-"))
            if re.fullmatch(r"-?\d+(\.\d+)?", s):
                out.append(float(s))
    return out


@pytest.mark.parametrize("options", [[], ["--shared"], ["--prelayer"], ["--heads", "4", "--context", "4",
                                                                          "--dim", "5"]])
def test_figures_are_complete_readable_svg(tmp_path, options):
    page = _page(tmp_path, *options)
    walk_H = int(options[1]) if options[:1] == ["--heads"] else 3
    figures = [_check_svg(f) for f in _fragments(page, "svg")]
    assert len(figures) == walk_H + 2
    for svg in figures:
        title = svg.find(f"{SVG}title").text
        texts = list(svg.iter(f"{SVG}text"))
        rotated = [_text(t) for t in texts if t.get("transform")]
        assert rotated, f"{title}: no y-axis label"
        if title.startswith("Head"):
            _check_heat_map(svg, texts)
        else:
            y_ticks = _numbers(texts, **{"text-anchor": "end"})
            x_ticks = _numbers(texts, **{"text-anchor": "middle", "font-size": "12"})
            assert len(y_ticks) >= 3 and len(x_ticks) >= 3, title
            axis_labels = [_text(t) for t in texts if float(t.get("font-size")) == 13 and not t.get("transform")]
            assert len(axis_labels) == 1, title                  # an x-axis label
    rank, sv = figures[-2], figures[-1]
    _check_rank(rank, walk_H)
    texts = list(sv.iter(f"{SVG}text"))
    assert any("log scale" in _text(t) for t in texts if t.get("transform"))      # the y axis is the log one
    assert not any("log scale" in _text(t) for t in texts if not t.get("transform"))
    ticks = sorted(_numbers(texts, **{"text-anchor": "end"}))
    assert all(b / a > 1.5 for a, b in zip(ticks, ticks[1:]))  # log-spaced tick values


def _check_heat_map(svg, texts):
    w, _ = _size(svg)
    cells = [r for r in svg.iter(f"{SVG}rect") if r.get("fill", "").startswith("rgb(")]
    left = min(float(r.get("x")) for r in cells)
    right = max(float(r.get("x")) + float(r.get("width")) for r in cells)
    assert right - left >= 240                               # the grid itself, not just the page, is wide
    ids = {g.get("id") for g in svg.iter(f"{SVG}linearGradient")}
    scale = [r for r in svg.iter(f"{SVG}rect") if r.get("fill", "").startswith("url(#")]
    assert len(scale) == 1 and scale[0].get("fill")[5:-1] in ids      # a colour scale ...
    assert {0, 0.5, 1} <= set(_numbers(texts, **{"font-size": "12", "text-anchor": "middle"}))  # ... with values
    labels = [_text(t) for t in texts]
    assert "token j of the context" in labels and "example t" in labels
    assert any("attention weight" in s for s in labels) and "fit" in labels


def _check_rank(svg, H):
    lines = list(svg.iter(f"{SVG}polyline"))
    assert len(lines) == 2
    measured, reference = lines                              # the dashed reference is drawn last: on top
    assert reference.get("stroke-dasharray") and not measured.get("stroke-dasharray")
    assert float(measured.get("stroke-width")) >= 2.5 * float(reference.get("stroke-width"))
    assert len(measured.get("points").split()) == len(reference.get("points").split()) == H
    legend = [_text(t) for t in svg.iter(f"{SVG}text")]
    assert "rank of Z (measured)" in legend and any(s.startswith("h(k−1)+1") for s in legend)


def test_figure_functions_fit_their_text_for_many_sizes():
    rng = np.random.default_rng(0)
    for T, n in ((3, 2), (7, 3), (13, 4), (25, 5), (41, 9)):
        S = rng.dirichlet(np.ones(n), T)
        _check_svg(attention_figure(S, 12, range(T // 2, T), np.arange(T) < T // 2, rng.integers(0, n, T)))
    for ranks, k in (([2], 2), ([3, 5, 7], 3), ([9, 17, 25, 33, 41, 49, 57, 65, 73, 81, 89, 97, 105], 9)):
        _check_svg(rank_figure(ranks, k))
    for s in (np.array([1.0]), np.logspace(2, -9, 30), np.array([0.51, 0.5])):
        _check_svg(singular_value_figure(s))


# --- Markdown and text -------------------------------------------------------------------------

def test_markdown_with_out_writes_the_figures_it_links(tmp_path, capsys):
    assert main(["teach", "--format", "markdown", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    md = (tmp_path / "teach.md").read_text()
    links = re.findall(r"!\[([^\]]+)\]\(([^)]+)\)", md)
    assert [path for _, path in links] == [f"teach-figure-{i}.svg" for i in range(1, 6)]
    for title, path in links:
        svg = _check_svg((tmp_path / path).read_text())      # relative to teach.md, and a real figure
        assert svg.find(f"{SVG}title").text == title
        assert f"wrote {tmp_path / path}" in printed
    assert f"wrote {tmp_path / 'teach.md'} (6 steps, 5 figures linked)" in printed
    assert "written only with" not in md
    assert sorted(p.name for p in tmp_path.iterdir()) == ["teach-figure-1.svg", "teach-figure-2.svg",
                                                         "teach-figure-3.svg", "teach-figure-4.svg",
                                                         "teach-figure-5.svg", "teach.md"]


def test_markdown_without_out_says_where_the_figures_are(capsys):
    assert main(["teach", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "![" not in md and ".svg" not in md.replace("SVG files", "")
    assert "figures are written only with `--out DIR`" in md
    assert md.index("written only with") < md.index("### 1. The data")


def test_markdown_and_text_and_jupyter_reprs(tmp_path, capsys):
    walk = teach()
    assert walk.markdown().startswith("# The construction") and "```" in walk.markdown()
    assert "j\\*(t)" in walk.markdown() and "(X_Sᵀ X_S)⁻¹" in walk.markdown()
    assert walk._repr_html_().count("class='step'") == len(walk.steps)
    assert walk.steps[2]._repr_markdown_().startswith("### 3. Head 1")
    assert "<figure" in walk.steps[2]._repr_html_() and "<math" in walk.steps[2]._repr_html_()
    assert main(["teach"]) == 0
    out = capsys.readouterr().out
    assert "\033[" not in out and "The readout and the final check" in out
    assert "W₁ = U (X_Sᵀ X_S)⁻¹ X_Sᵀ" in out and "[figure: Head 2: attention weights" in out
    assert main(["teach", "--out", str(tmp_path)]) == 0
    assert "(6 steps, no figures: see --format html" in capsys.readouterr().out


def test_rational_inputs_are_shown_exactly():
    walk = teach(rational=True)
    shown = walk.steps[0].text()
    assert "1/2" in shown                                   # halves of integers, as fractions
    assert "exactly" in walk.steps[3].text()


def test_teach_rejects_impossible_sizes(capsys):
    assert main(["teach", "--context", "5", "--dim", "3"]) == 2
    assert "n = 5 exceeds token dimension d = 3" in capsys.readouterr().err


def test_a1_is_sampled_where_its_exact_rank_is_too_costly_and_the_theorem_names_d_o():
    # A student's trial: past 20,000 subsets the exact Kruskal rank is None, and teach said
    # "exact Kruskal rank is None ... — fails" although A1 holds (and the build succeeds).
    text = teach(heads=6, context=6, dim=8).text()
    a1 = next(line for line in text.splitlines() if line.strip().startswith("A1:"))
    assert "None" not in a1 and "holds, by sampling" in a1, a1
    assert "d_o ≤ d_v and d_o ≤ d" in text                 # Theorem 1's hypotheses on the outputs


@pytest.mark.parametrize("sizes", [dict(heads=3, context=4, dim=5), dict(heads=8, context=3, dim=4),
                                   dict(heads=6, context=6, dim=8), dict(heads=8, context=8, dim=8)])
def test_the_pre_layer_walkthrough_runs_beyond_the_default_sizes(sizes):
    # A student's trial: these sizes found no dataset ("change the seed or the sizes"): the
    # vocabulary had context + 1 tokens, and A3 needed an exact Kruskal rank.
    w = teach(prelayer=True, **sizes)
    assert w.result.verification.passed and w.result.weights.prelayer == "mean-shift"


@pytest.mark.parametrize("sizes", [dict(heads=2, context=4, dim=4), dict(heads=30, context=4, dim=8),
                                   dict(heads=3, context=3, dim=4)])
def test_the_pre_layer_step_says_whether_a1_holds_after_the_layer(sizes):
    # A review: at n = d = 4 the shifted queries have Kruskal rank 3 < n, and step 1b said
    # "Kruskal rank 3 (A3, so A1 now holds)"; at T = 91 it said "Kruskal rank None (A3, ...)".
    from construct.assumptions import kruskal_rank
    walk = teach(prelayer=True, **sizes)
    step = next(s for s in walk.steps if s.title.startswith("1b."))
    text, intro = step.text(), walk.text()[:walk.text().index("1. The data")]
    assert "None" not in text
    r = kruskal_rank(step.matrices["$x + mean(E)$ (the second layer's queries)"])
    n = walk.result.data.n
    if r is not None and r < n:
        assert f"Kruskal rank {r}" in text and "A1 now holds" not in text and "restores it" not in intro
        assert "A1 still fails" in text
    elif r is not None:
        assert f"Kruskal rank {r}" in text and "A1 now holds" in text and "restores it" in intro
    else:
        assert "by sampling" in text


def test_a_walkthrough_too_large_to_read_is_refused_at_once(capsys):
    # A student's trial: --heads 2000 ran past five minutes, silent (a rank per head on a growing Z).
    import time
    start = time.perf_counter()
    assert main(["teach", "--heads", "2000", "--context", "2", "--dim", "2"]) == 2
    assert "at most 64 heads" in capsys.readouterr().err and time.perf_counter() - start < 5
    assert main(["teach", "--heads", "64", "--context", "2", "--dim", "2", "--format", "text"]) == 0
    # A review: H = 64, n = 32, d = 64 (T = 1,985) was inside the limits and took 229 s, silent.
    assert main(["teach", "--heads", "64", "--context", "32", "--dim", "64"]) == 2
    assert "1000 examples" in capsys.readouterr().err


def test_the_pre_layer_walkthrough_needs_two_examples_and_says_so(capsys):
    # A review: with n = 1 there is one example (T = H(n − 1) + 1), whose query cannot repeat; the
    # error advised "a larger dimension d, or a smaller context".
    assert main(["teach", "--prelayer", "--heads", "2", "--context", "1", "--dim", "4"]) == 2
    err = capsys.readouterr().err
    assert "at least 2 examples" in err and "--context" in err and "smaller context" not in err


@pytest.mark.parametrize("blocked", ["teach-figure-3.svg", "teach.md"])
def test_markdown_with_a_folder_in_the_way_writes_nothing(tmp_path, capsys, blocked):
    # A hostile trial: with teach-figure-3.svg a folder, figures 1-2 were written before the
    # error; with teach.md a folder, all five figures and no teach.md.
    (tmp_path / blocked).mkdir()
    assert main(["teach", "--format", "markdown", "--out", str(tmp_path)]) == 2
    assert blocked in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == [blocked]


def test_an_attention_figure_of_many_examples_shows_a_readable_few(tmp_path):
    # A hostile trial: at the size limit each figure drew every example (T × n cells with their
    # values): 11 MB per figure, a 724 MB page. A figure now shows the head's group, the
    # examples around it and the first few, and says how many it leaves out.
    rng = np.random.default_rng(0)
    T, n = 993, 32
    S = rng.dirichlet(np.ones(n), T)
    group = range(900, 931)
    svg = attention_figure(S, 30, group, np.arange(T) < 900, rng.integers(0, n, T))
    _check_svg(svg)
    assert len(svg) < 600_000
    labels = set(re.findall(r">(\d+)</text>", svg))
    assert {str(t) for t in group} <= labels and {"0", "899", "931"} <= labels and "500" not in labels
    assert "examples not shown" in svg
    small = attention_figure(S[:20], 3, range(10, 15), np.arange(20) < 10, rng.integers(0, n, 20))
    assert "not shown" not in small and {str(t) for t in range(20)} <= set(re.findall(r">(\d+)</text>", small))


def test_a_shorter_markdown_page_leaves_no_figures_of_the_longer_one(tmp_path, capsys):
    # A hostile trial: `teach --format markdown --out L`, then the same with --heads 2, left the
    # first page's later teach-figure-N.svg beside a teach.md that no longer links them.
    assert main(["teach", "--format", "markdown", "--out", str(tmp_path)]) == 0
    before = sorted(p.name for p in tmp_path.glob("teach-figure-*.svg"))
    (tmp_path / "notes.svg").write_text("mine")
    assert main(["teach", "--format", "markdown", "--heads", "2", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    after = sorted(p.name for p in tmp_path.glob("teach-figure-*.svg"))
    linked = set(re.findall(r"teach-figure-\d+\.svg", (tmp_path / "teach.md").read_text()))
    assert len(after) < len(before) and set(after) == linked and (tmp_path / "notes.svg").exists()


@pytest.mark.parametrize("files", [["a.svg"], "teach-figure-1.svg", [1, 2, 3, 4, 5]])
def test_markdown_names_figure_files_that_do_not_fit_the_figures(files):
    # Too few names (a StopIteration from deep inside), a string (its characters taken as
    # names), names that are not strings: refused with what the walkthrough needs.
    from construct import InputError
    walk = teach()
    with pytest.raises(InputError, match=f"figure_files: expected (a list of )?{len(walk.figures)} paths"):
        walk.markdown(files)
    assert walk.markdown(walk.figure_names()).count("](teach-figure-") == len(walk.figures)


def test_a_numpy_seed_at_its_types_largest_value_is_the_seed_given(recwarn):
    # A hostile review: the pre-layer walkthrough redraws with seed + attempt, which overflowed
    # in an int64 seed: it was refused as "seed must be an integer ≥ 0, got -9223372036854775808",
    # a seed the caller never gave, after a RuntimeWarning.
    seed = np.int64(2**63 - 1)
    walk = teach(prelayer=True, seed=seed)
    assert walk.text() == teach(prelayer=True, seed=int(seed)).text()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_rational_inputs_build_where_the_exact_kruskal_rank_is_too_costly():
    # A hostile review: past 20,000 subsets kruskal_rank is None, which the rational draw read as
    # rank 0: every one of its 100 draws was refused (27 s) and teach said "no rational dataset with
    # full-rank contexts and independent queries found", at sizes inside teach's limits.
    walk = teach(rational=True, heads=6, context=6, dim=8)
    assert walk.result.verification.passed and walk.result.data.T == 31


def test_a_context_wider_than_the_tokens_names_the_options(tmp_path, capsys):
    # A hostile review: `teach --context 5 --dim 4` was refused as "the dataset does not meet
    # Theorem 1's hypotheses: E: context size n = 5 exceeds ...", naming an array the user never
    # gave and neither option (capacity names them: test_sweeps).
    assert main(["teach", "--context", "5", "--dim", "4", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "--context 5" in err and "--dim 4" in err and "E:" not in err
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("options", [{}, {"shared": True}, {"prelayer": True}])
def test_each_heads_target_error_is_the_printed_features(options):
    # A review: "Head 1 reproduces the targets to 6.1e-15" and "The targets on G_2 are met to …"
    # quoted the build's own head-by-head Z; from the forward pass's Z, the one the steps print,
    # a student found 7.4e-15. Each head's figure is max |z^(t) − (E^(t))^T s^(t)| on that Z.
    from construct import Dataset, feature_matrix
    from proofs.check import layer_data
    walk = teach(**options)
    result = walk.result
    data = Dataset(*layer_data(result), result.data.Y)            # what the layer reads
    Z = feature_matrix(data.E, data.X, result.weights, layered=True)
    heads = [s for s in walk.steps if re.match(r"\d+\. Head \d", s.title)]
    assert len(heads) == len(result.trace)
    for h, (step, tr) in enumerate(zip(heads, result.trace)):
        S, d = tr.examples, data.d
        want = np.einsum("tnd,tn->td", data.E[S.start:S.stop], tr.targets)
        err = float(np.abs(Z[S.start:S.stop, h * d:(h + 1) * d] - want).max())
        assert f"equal $(E^(t))^T s^(t)$ to {err:.2g}" in " ".join(step.lines), (h, err, step.lines)


def test_heads_that_fit_no_examples_are_named_and_explained():
    # A review: at n = 1 (k = 1) every later head fits k − 1 = 0 examples; the walkthrough of
    # H = 2 had no step for head 2 and "Ranks after each head: [1]" listed one head of two.
    walk = teach(heads=3, context=1, dim=4)
    text = walk.text()
    assert len(walk.result.trace) == 1 and walk.result.weights.H == 3
    assert "Heads 2–3 fit no examples" in text and "k − 1 = 0" in text
    assert "uniform" in text                          # what such a head does instead
    assert "Ranks after the heads that fit examples (head 1)" in text
    full = teach(heads=2, context=3, dim=4).text()    # every head fits: nothing of the kind said
    assert "fit no examples" not in full and "Ranks after each head" in full


def test_the_pre_layer_refusal_names_the_options(capsys):
    # A review: `teach --prelayer --shared` said "it takes neither shared nor rational", naming
    # no option the user typed.
    for other in ("--shared", "--rational"):
        assert main(["teach", "--prelayer", other]) == 2
        err = capsys.readouterr().err
        assert "--prelayer" in err and "--shared" in err and "--rational" in err


def test_the_separator_check_and_the_group_s_use_the_claims_notation():
    # A review: the steps wrote W₁ = U (X_Sᵀ X_S)⁻¹ X_Sᵀ (X_S is d × m, its columns the queries of
    # the group, as in docs/math.md's Claim 1) and then "max |X_S b|", a product that does not
    # exist for that X_S; and S itself was never said to be the group the head fits.
    walk = teach()
    head1, head2 = walk.steps[2].text(), walk.steps[3].text()
    assert "S = G₁" in head1
    assert "New group S = G₂ = [3, 4]" in head2
    assert "max |X_Sᵀ b| = " in head2 and "|X_S b|" not in head2


def test_the_walkthrough_says_its_indices_count_from_zero():
    # A review: the theorem names x⁽¹⁾, …, x^(T) (docs/math.md counts from 1), while every step
    # lists examples and the tokens j* from 0 ("G₁ = examples [0, 1, 2]", "j* = [0, 1, 0]").
    walk = teach()
    partition = walk.steps[1].text()
    assert "G₁ = examples [0, 1, 2]" in partition
    assert "numbered from 0" in partition and "docs/math.md numbers them from 1" in partition
