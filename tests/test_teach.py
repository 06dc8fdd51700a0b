"""mha-construct teach: every step present, the engine's own numbers, the HTML parses, figures."""

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from construct import teach
from construct.cli import main
from construct.model import feature_matrix


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag != "meta":                                  # the only void element on the page
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):                # <rect .../>: opens and closes at once
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()


@pytest.mark.parametrize("options", [{}, {"shared": True}, {"rational": True}, {"heads": 4, "context": 4, "dim": 5}])
def test_every_step_is_present_with_the_engines_numbers(options):
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
    assert f"{result.verification.max_abs_error:.3g}" in walk.steps[-1].text()


def test_html_is_one_self_contained_page_with_figures(tmp_path, capsys):
    assert main(["teach", "--format", "html", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "teach.html").read_text()
    parser = _Collector()
    parser.feed(page)
    assert parser.open == [] and parser.tags.count("section") == 6
    svgs = [page[i:page.index("</svg>", i) + 6] for i in range(len(page)) if page.startswith("<svg", i)]
    assert len(svgs) >= 3
    for svg in svgs:                                       # each figure is well-formed SVG
        ET.fromstring(svg)
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")   # nothing fetched from outside
    for needle in ("Claim 1", "Lemma 3", "σ_min(M)", "explicit bound", "Rank of Z after each head",
                   "Singular values of Z", "attention"):
        assert needle in page


def test_markdown_and_text_and_jupyter_reprs(capsys):
    walk = teach()
    assert walk.markdown().startswith("# The construction") and "```" in walk.markdown()
    assert walk._repr_html_().count("<section>") == len(walk.steps)
    assert walk.steps[2]._repr_markdown_().startswith("### 3. Head 1")
    assert main(["teach"]) == 0
    out = capsys.readouterr().out
    assert "\033[" not in out and "The readout and the final check" in out


def test_rational_inputs_are_shown_exactly():
    walk = teach(rational=True)
    shown = walk.steps[0].text()
    assert "1/2" in shown                                   # halves of integers, as fractions
    assert "exactly" in walk.steps[3].text()


def test_teach_rejects_impossible_sizes(capsys):
    assert main(["teach", "--context", "5", "--dim", "3"]) == 2
    assert "n = 5 exceeds token dimension d = 3" in capsys.readouterr().err
