"""The documentation: links resolve, the project never cites its internal notes, the CLI page
covers every option, and the tutorial notebook runs (issue #17)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to '-'."""
    out = set()
    for heading in re.findall(r"(?m)^#+ (.*)$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    text = page.read_text()
    broken = []
    for link in _links(text):
        if re.match(r"[a-z]+:", link):                  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(link)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path.read_text()):
            broken.append(link)
    assert not broken, f"{page.name}: {broken}"


def test_the_link_checker_catches_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n[a](missing.md) [b](#title) [c](#nowhere)\n")
    links = [lk for lk in _links(page.read_text())]
    assert links == ["missing.md", "#title", "#nowhere"]
    assert "title" in _anchors(page.read_text()) and "nowhere" not in _anchors(page.read_text())


def test_no_file_of_the_project_cites_the_internal_notes():
    offenders = []
    for path in ROOT.rglob("*"):
        if any(part.startswith(".") or part in {"build", "node_modules"} or part.endswith(".egg-info")
               for part in path.relative_to(ROOT).parts):
            continue
        if path.is_file() and path.suffix in {".py", ".md", ".toml", ".cff", ".ipynb", ".txt", ".cfg", ""}:
            if "MATH" + ".md" in path.read_text(errors="replace"):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders


def test_the_cli_page_documents_every_command_and_option():
    import argparse
    from construct.cli import _parser
    text = (ROOT / "docs" / "cli.md").read_text()
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        section = text.split(f"\n## {name}\n", 1)
        assert len(section) == 2, f"docs/cli.md has no section for {name}"
        body = section[1].split("\n## ", 1)[0]
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in body, f"docs/cli.md#{name} does not document {flag}"
        assert parser.epilog and "examples:" in parser.epilog and parser.description


def test_the_tutorial_notebook_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "docs" / "tutorial.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "docs")}}).execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            texts.append(str(out.get("text") or out.get("data", {}).get("text/plain", "")))
    joined = "\n".join(texts)
    assert "rank           PROVEN  rank Z = 57" in joined and "memorization   PROVEN" in joined
    assert "('mean-shift', True)" in joined and "(True, 7)" in joined


def test_exports_md_gives_the_safetensors_format_the_reader_expects():
    # A new user's trial: exports.md gave the metadata `format` as `mha-construct`; the files
    # hold (and read_safetensors requires) FORMAT_NAME, so files written from the docs were refused.
    from construct.export import FORMAT_NAME
    text = (ROOT / "docs" / "exports.md").read_text()
    assert f"`format`\n  (`{FORMAT_NAME}`)" in text or f"`format` (`{FORMAT_NAME}`)" in text


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def _run_blocks(page: Path, where: Path, namespace: dict, capsys, monkeypatch) -> str:
    monkeypatch.chdir(where)
    blocks = _python_blocks(page)
    assert blocks, f"{page.name} shows no Python"
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)          # noqa: S102 - the page's own code
    return capsys.readouterr().out


def test_the_readme_quick_start_runs_as_written(tmp_path, capsys, monkeypatch):
    # A new user's trial: the quick start, pasted as it stands, prints what its comments say.
    namespace: dict = {}
    out = _run_blocks(ROOT / "README.md", tmp_path, namespace, capsys, monkeypatch)
    assert "verification passed: rank Z = 57" in out and "\nTrue\n" in out
    assert "rank           PROVEN  rank Z = 57" in out and "memorization   PROVEN" in out
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"weights.npz", "data.npz", "report.json"}
    import numpy as np
    data, weights = namespace["data"], namespace["result"].weights
    assert np.abs(namespace["construct"].forward(data.E, data.X, weights) - data.Y).max() <= 1e-8


def test_the_own_data_page_runs_as_written(tmp_path, capsys, monkeypatch):
    # The page's snippets need the user's arrays: a classification problem with sparse class ids.
    import numpy as np
    rng = np.random.default_rng(1)
    namespace = {"E": rng.standard_normal((30, 5, 9)), "X": rng.standard_normal((30, 9)),
                 "labels": rng.choice([-5, 0, 10 ** 12], 30)}
    out = _run_blocks(ROOT / "docs" / "own-data.md", tmp_path, namespace, capsys, monkeypatch)
    assert "classification PROVEN  zero of 30 examples misclassified" in out
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"weights.npz", "data.npz", "report.json"}


def test_the_paper_to_code_example_runs_as_written(tmp_path, capsys, monkeypatch):
    namespace: dict = {}
    out = _run_blocks(ROOT / "docs" / "paper-to-code.md", tmp_path, namespace, capsys, monkeypatch)
    assert "Theorem 1: confirmed" in out
    proofs, result, data = namespace["proofs"], namespace["result"], namespace["data"]
    assert proofs.claim2.check_head(result, 2).confirmed
    assert proofs.prop2.check(data, result.weights).quantities["rank_Z"] == 7


def test_formats_md_lists_the_reports_verification_fields(tmp_path):
    # Found in review: report.json's verification began with a field T that the page did not list.
    import json

    import construct
    construct.build(construct.synthetic("independent", T=7, n=3, d=4, seed=0), 3).save(tmp_path / "run")
    fields = list(json.loads((tmp_path / "run" / "report.json").read_text())["verification"])
    text = " ".join((ROOT / "docs" / "formats.md").read_text().split())
    listed = re.search(r"plus `verification` \(([^)]*)\)", text)
    assert listed and re.findall(r"`(\w+)`", listed.group(1)) == fields


def test_formats_md_quotes_the_largest_scales_the_default_shape_measures():
    # From a new user's trial: the page quoted shared contexts' largest rank scale as 14 (it is
    # 14.5) and general position's saturating one as 7.0e2 (709.8), and one explicit bound for
    # both rules on shared contexts (4.2e4 and 4.3e4). Each figure is the build's, to two digits.
    import construct
    text = " ".join((ROOT / "docs" / "formats.md").read_text().split())
    quoted = re.search(r"Largest `c_h` at the default shape \(H = 8, n = 8, d = 16, T = 57\), measured: "
                       r"independent contexts (\S+) \(rank\) and (\S+) \(saturating\) against (\S+) and (\S+) "
                       r"\(explicit; [^)]*\); shared (\S+) and (\S+) against (\S+) and (\S+); general position "
                       r"(\S+) \(no saturation needed\) and (\S+) against (\S+)\.", text)
    assert quoted, "the paragraph on the largest scales changed its wording"
    figures = iter(quoted.groups())
    for kind in ("independent", "shared", "general-position"):
        data = construct.synthetic(kind, T=57, n=8, d=16, seed=0)
        results = {rule: construct.build(data, 8, scale=rule).heads for rule in ("rank", "saturating")}
        measured = [max(h.scale for h in results["rank"]), max(h.scale for h in results["saturating"])]
        explicit = [max(h.scale_explicit for h in results[rule]) for rule in ("rank", "saturating")]
        if kind == "general-position":                  # one explicit bound quoted: both rules give it
            assert float(f"{explicit[0]:.2g}") == float(f"{explicit[1]:.2g}")
            explicit = explicit[:1]
        for value in measured + explicit:
            text_figure = next(figures)
            assert float(text_figure) == float(f"{value:.2g}"), (kind, text_figure, value)
