"""Capacity sweeps (issue #16, item 4): the bound, what the construction certifies, the generic rank."""

import csv
import io
import json
import re

import numpy as np
import pytest

from construct import InputError
from construct.sweeps import FIELDS, plot, sweep, to_csv, to_json
from construct.cli import main


@pytest.fixture(scope="module")
def rows():
    return (sweep("H", [1, 3], kind="independent", n=4, d=8) + sweep("H", [1, 3], kind="shared", n=4, d=8))


def test_the_construction_certifies_the_bound_at_every_point(rows):
    for r in rows:
        assert r["bound"] == r["H"] * (min(r["n"], r["d_h"]) - 1) + 1
        assert r["certified"] == r["bound"]


def test_generic_rank_is_capped_on_shared_contexts_and_not_on_independent_ones(rows):
    # Proposition 2: rank Z <= H(n-1)+1 for every weight on shared contexts; independent
    # contexts with random weights go past the bound (the paper's open question).
    for r in rows:
        if r["kind"] == "shared":
            assert r["generic_rank"] <= r["bound"]
        else:
            assert r["generic_rank"] > r["bound"]


def test_sweeps_over_n_and_d_h_use_k_equals_min_n_d_h():
    rows = sweep("d_h", [2, 4], H=2, n=4, d=8)
    assert [r["bound"] for r in rows] == [2 * 1 + 1, 2 * 3 + 1]
    assert [r["bound"] for r in sweep("n", [2, 3], H=2, d=8)] == [3, 5]
    with pytest.raises(InputError, match="vary must be one of H, n, d_h"):
        sweep("d", [1])


def test_tables_and_figure(rows, tmp_path):
    table = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert tuple(table[0]) == FIELDS and len(table) == len(rows)
    assert json.loads(to_json(rows)) == rows
    pytest.importorskip("matplotlib")
    import xml.etree.ElementTree as ET
    plot([r for r in rows if r["kind"] == "shared"], "H", tmp_path / "f.svg")
    svg = ET.parse(tmp_path / "f.svg").getroot()
    text = ET.tostring(svg, encoding="unicode")
    assert svg.tag.endswith("svg") and "heads H" in text and "bound H(k−1)+1" in text


def test_cli_capacity_writes_what_it_says(tmp_path, capsys):
    assert main(["capacity", "--vary", "H", "--values", "1", "2", "--context", "3", "--dim", "6",
                 "--kind", "independent", "shared", "--csv", str(tmp_path / "c.csv"), "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert f"wrote        {tmp_path / 'c.csv'}" in out and len(json.loads((tmp_path / "c.json").read_text())) == 4


def test_importing_the_sweeps_leaves_the_capacity_function_alone():
    # A submodule named construct.capacity replaced the function on the package (10 tests broke).
    import construct
    import construct.sweeps  # noqa: F401
    assert callable(construct.capacity) and construct.capacity(2, 4, 4) == 7


def test_a_plot_of_another_kind_is_refused_before_the_sweep(tmp_path, capsys, monkeypatch):
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "sweep", lambda *a, **k: pytest.fail("the sweep ran"))
    code = main(["capacity", "--vary", "H", "--values", "1", "2", "--plot", str(tmp_path / "f.xyz")])
    err = capsys.readouterr().err
    assert code == 2 and "f.xyz: a plot is written as .svg or .png" in err and not (tmp_path / "f.xyz").exists()
    with pytest.raises(InputError, match="svg or .png"):
        plot([], "H", tmp_path / "f.pdf")


def test_a_png_plot_is_a_png(rows, tmp_path):
    pytest.importorskip("matplotlib")
    plot([r for r in rows if r["kind"] == "shared"], "H", tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_outputs_on_one_file_are_refused_before_the_sweep(tmp_path, capsys, monkeypatch):
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "sweep", lambda *a, **k: pytest.fail("the sweep ran"))
    code = main(["capacity", "--vary", "H", "--values", "1", "--csv", str(tmp_path / "t"), "--json",
                 str(tmp_path / ".." / tmp_path.name / "t")])
    err = capsys.readouterr().err
    assert code == 2 and "given to --csv and --json" in err and not (tmp_path / "t").exists()


def test_a_plot_per_kind_may_not_land_on_another_output(tmp_path, capsys, monkeypatch):
    # With two kinds, --plot n.svg writes n-independent.svg and n-shared.svg: a review found the
    # JSON given as n-shared.svg replaced by the plot, "wrote n-shared.svg" printed twice.
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "sweep", lambda *a, **k: pytest.fail("the sweep ran"))
    code = main(["capacity", "--vary", "H", "--values", "1", "--kind", "independent", "shared",
                 "--json", str(tmp_path / "n-shared.svg"), "--plot", str(tmp_path / "n.svg")])
    err = capsys.readouterr().err
    assert code == 2 and "n-shared.svg" in err and "--json" in err and "--plot" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--csv", "--json", "--plot"])
def test_an_output_that_is_a_folder_is_refused_before_the_sweep(tmp_path, capsys, monkeypatch, flag):
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "sweep", lambda *a, **k: pytest.fail("the sweep ran"))
    (tmp_path / "out.svg").mkdir()
    code = main(["capacity", "--vary", "H", "--values", "1", flag, str(tmp_path / "out.svg")])
    err = capsys.readouterr().err
    assert code == 2 and "out.svg" in err and flag in err and "folder" in err


def test_a_value_out_of_range_is_refused_before_the_first_point(tmp_path, capsys, monkeypatch):
    # A user's trial: n = 4 was computed, then n = 100 failed naming E and the data.
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "point", lambda *a, **k: pytest.fail("a point ran"))
    code = main(["capacity", "--vary", "n", "--values", "4", "100", "--dim", "64", "--csv", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "n = 100 exceeds the token dimension d = 64" in err and "values" in err
    assert not (tmp_path / "p.csv").exists()
    with pytest.raises(InputError, match="values: H"):
        sweeps.sweep("H", [2, 0])
    # A hostile trial: a 0-d array raised NumPy's TypeError; duplicates, refused by the command
    # line, were run twice.
    import numpy as np
    for values, message in ((np.array(2), "sequence of integers"), ([2, 3, 2], "H = 2 given more than once")):
        with pytest.raises(InputError, match=message):
            sweeps.sweep("H", values)



def test_a_context_wider_than_the_tokens_names_the_options(capsys, monkeypatch):
    # A hostile trial: `--context 65` (d = 64 by default) was refused as "invalid sweep: n = 65
    # exceeds the token dimension d = 64", naming neither option.
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "point", lambda *a, **k: pytest.fail("a point ran"))
    assert main(["capacity", "--vary", "H", "--values", "1", "2", "--context", "65"]) == 2
    err = capsys.readouterr().err
    assert "--context 65" in err and "--dim 64" in err and "Traceback" not in err
    assert main(["capacity", "--vary", "d_h", "--values", "2", "--context", "9", "--dim", "8"]) == 2
    assert "--context 9" in capsys.readouterr().err

def test_a_plot_is_the_same_bytes_every_time(rows, tmp_path):
    # The committed figures changed on every run (a date and random clip-path ids in the SVG).
    pytest.importorskip("matplotlib")
    shared = [r for r in rows if r["kind"] == "shared"]
    for suffix in (".svg", ".png"):
        plot(shared, "H", tmp_path / f"a{suffix}")
        plot(shared, "H", tmp_path / f"b{suffix}")
        assert (tmp_path / f"a{suffix}").read_bytes() == (tmp_path / f"b{suffix}").read_bytes(), suffix


def test_a_zero_head_dimension_is_refused_not_read_as_the_default():
    with pytest.raises(InputError, match="d_h"):
        sweep("H", [1], n=3, d=6, d_h=0)


def test_an_output_under_a_file_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    # A hostile trial: --csv c.csv --plot file/p.svg wrote c.csv, then failed on the plot.
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "sweep", lambda *a, **k: pytest.fail("the sweep ran"))
    (tmp_path / "file").write_text("x")
    code = main(["capacity", "--vary", "H", "--values", "1", "--csv", str(tmp_path / "c.csv"),
                 "--plot", str(tmp_path / "file" / "p.svg")])
    err = capsys.readouterr().err
    assert code == 2 and "file" in err and "not a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_point_too_large_for_the_memory_is_refused_before_the_first_point(tmp_path, capsys, monkeypatch):
    # A hostile trial: H = 1, 2 ran, then H = 1000000 was refused for its memory, and the two rows
    # computed were lost.
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "point", lambda *a, **k: pytest.fail("a point ran"))
    code = main(["capacity", "--vary", "H", "--values", "1", "2", "1000000", "--context", "4", "--dim", "6",
                 "--csv", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "memory" in err and "H = 1000000" in err
    assert not (tmp_path / "s.csv").exists()


def _row(**change):
    row = dict(kind="independent", H=2, n=3, d=6, d_h=3, bound=5, certified=5, generic_T=10, generic_rank=9,
               seconds=0.1)
    row.update(change)
    return row


def test_plot_refuses_rows_it_cannot_draw_by_name(tmp_path):
    # A hostile trial: these raised IndexError, KeyError or TypeError, or drew a wrong figure
    # (rows varying H drawn against n; two kinds as one zig-zag line).
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.svg"
    cases = [([], "H", out, "no rows"), ([_row()], "X", out, "vary"), ([_row()], "H", None, "path"),
             ([_row(n=3, H=2), _row(n=4, H=3)], "n", out, "H varies"),
             ([_row(H=2), _row(H=3, kind="shared")], "H", out, "kinds")]
    for rows, vary, path, message in cases:
        with pytest.raises(InputError, match=message):
            plot(rows, vary, path)
    assert not out.exists()


def test_a_sweep_over_n_at_a_fixed_head_dimension_says_so_in_its_figure(tmp_path):
    # A hostile trial: --vary n --head-dim 2 was drawn as "context size n (d_h = n)".
    pytest.importorskip("matplotlib")
    rows = [_row(n=3, d_h=2, bound=3), _row(n=4, d_h=2, bound=3)]
    plot(rows, "n", tmp_path / "p.svg")
    svg = (tmp_path / "p.svg").read_text()
    assert "d_h = n" not in svg and "d_h = 2" in svg
    tied = [_row(n=3, d_h=3), _row(n=4, d_h=4, bound=7)]
    plot(tied, "n", tmp_path / "q.svg")
    assert "d_h = n" in (tmp_path / "q.svg").read_text()


@pytest.mark.parametrize("seed", [np.int64(2**63 - 1), np.uint64(2**64 - 1)])
def test_a_numpy_seed_at_its_types_largest_value_is_the_seed_given(seed, recwarn):
    # A hostile review: the probe draws with seed + 1, which overflowed in the seed's NumPy type:
    # int64's largest was refused as "seed must be ≥ 0, got -9223372036854775808", a seed the
    # caller never gave, and uint64's wrapped to 0 with a RuntimeWarning.
    rows = sweep("H", [1], n=3, d=4, seed=seed)
    assert rows == [{**sweep("H", [1], n=3, d=4, seed=int(seed))[0], "seconds": rows[0]["seconds"]}]
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("vary, flag", [("H", "--heads"), ("n", "--context"), ("d_h", "--head-dim")])
def test_the_option_of_the_swept_quantity_is_refused_not_ignored(vary, flag, capsys, monkeypatch):
    # A hostile review: `--vary H --values 1 2 --heads 8` ran H = 1 and 2 without a word about
    # --heads 8 (it sets H only when H is not varied); options are refused, never ignored.
    import construct.sweeps as sweeps
    monkeypatch.setattr(sweeps, "point", lambda *a, **k: pytest.fail("a point ran"))
    assert main(["capacity", "--vary", vary, "--values", "2", "3", flag, "3", "--dim", "8"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} 3" in err and f"--vary {vary}" in err and "Traceback" not in err


@pytest.mark.parametrize("bad, says", [("H", "expected a list of sweep rows, got str"),
                                       (None, "expected a list of sweep rows, got NoneType"),
                                       ([1, 2], "each row must be a dict with kind, H"),
                                       ([{"kind": "shared"}], "each row must be a dict with kind, H")])
def test_tables_refuse_what_is_not_sweep_rows_by_name(bad, says):
    # A hostile review: to_csv("H") raised AttributeError, to_csv([1, 2]) AttributeError,
    # to_csv(None) TypeError, while to_json wrote "H", [1, 2] and null as if they were tables.
    for table in (to_csv, to_json):
        with pytest.raises(InputError, match=says):
            table(bad)


def test_tables_write_the_fields_of_rows_with_numpy_numbers(rows):
    # A hostile review: a row with a NumPy integer (rows read back or computed by hand) gave
    # json's TypeError "Object of type int64 is not JSON serializable"; an extra key csv's ValueError.
    mixed = [{**r, "H": np.int64(r["H"]), "seconds": np.float64(r["seconds"]), "note": "x"} for r in rows]
    assert json.loads(to_json(mixed)) == rows and to_csv(mixed) == to_csv(rows)


def test_the_commands_defaults_are_the_sweeps(capsys, monkeypatch):
    """``capacity`` without --heads or --context runs the sweep where the API's sweep runs by
    default, and its help states those values."""
    import inspect

    import construct.sweeps
    defaults = {k: p.default for k, p in inspect.signature(sweep).parameters.items()}
    seen = {}
    monkeypatch.setattr(construct.sweeps, "sweep", lambda vary, values, **options: seen.update(options) or [])
    assert main(["capacity", "--vary", "d_h", "--values", "2"]) == 0
    assert (seen["H"], seen["n"], seen["d"]) == (defaults["H"], defaults["n"], defaults["d"])
    with pytest.raises(SystemExit):
        main(["capacity", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, name in (("--heads", "H"), ("--context", "n"), ("--dim", "d")):
        assert re.search(rf"{option} \S+ .*?\(default {defaults[name]}\)", text), option


def test_a_plot_draws_the_points_in_the_order_of_the_swept_value(tmp_path):
    # A review trial: --vary n --values 16 2 8 drew the curves through the points in the order
    # given, 16 → 2 → 8, so the random-weights curve was a triangle (a segment from n = 16 straight
    # to n = 2 across the point at n = 8). The figure of unsorted values is that of sorted ones.
    pytest.importorskip("matplotlib")
    points = {2: _row(n=2, d_h=2, bound=5, certified=5, generic_T=10, generic_rank=10),
              8: _row(n=8, d=16, d_h=8, bound=29, certified=29, generic_T=58, generic_rank=58),
              16: _row(n=16, d=16, d_h=16, bound=61, certified=61, generic_T=64, generic_rank=64)}
    for r in points.values():
        r["d"] = 16
    plot([points[16], points[2], points[8]], "n", tmp_path / "given.svg")
    plot([points[2], points[8], points[16]], "n", tmp_path / "sorted.svg")
    assert (tmp_path / "given.svg").read_bytes() == (tmp_path / "sorted.svg").read_bytes()


def test_the_generic_probe_can_reach_proposition_2s_ceiling_below_d_h_equal_n():
    # A review: the probe took min(2·bound, H·d) rows with the construction's bound H(d_h − 1) + 1,
    # so at d_h < n it showed "10 of 10" and could never show where random weights stop (on
    # shared contexts, at most H(n − 1) + 1 whatever d_h: Proposition 2).
    H, n, d = 2, 4, 8
    ceiling = H * (n - 1) + 1
    for r in sweep("d_h", [2], H=H, n=n, d=d, kind="shared") + sweep("d_h", [2], H=H, n=n, d=d):
        assert r["bound"] == 3 and r["generic_T"] == min(2 * ceiling, H * d)
        assert r["bound"] < r["generic_rank"]
        if r["kind"] == "shared":
            assert r["generic_rank"] <= ceiling


def test_a_point_whose_construction_fails_is_a_row_and_the_sweep_goes_on(monkeypatch, tmp_path, capsys):
    # A review: a build that failed numerically at one point ended the whole sweep (exit 1) and
    # every finished row was lost. It is a row: nothing certified there, and the reason.
    import sys
    from construct.errors import ConstructionError
    build_module = sys.modules["construct.build"]             # (construct.build is the function)
    real = build_module.build

    def failing(data, heads, **options):
        if heads == 2:
            raise ConstructionError("head 2: the rank the proof needs was lost")
        return real(data, heads, **options)
    monkeypatch.setattr(build_module, "build", failing)
    rows = sweep("H", [1, 2, 3], n=3, d=6)
    assert [r["certified"] for r in rows] == [r["bound"] if r["H"] != 2 else 0 for r in rows]
    assert "rank the proof needs was lost" in rows[1]["failure"]
    assert "failure" not in rows[0] and "failure" not in rows[2]
    assert rows[1]["generic_rank"] > 0                      # the probe still ran
    out = tmp_path / "c.csv"
    assert main(["capacity", "--vary", "H", "--values", "1", "2", "--context", "3", "--dim", "6",
                 "--csv", str(out)]) == 0
    err = capsys.readouterr().err
    assert "H = 2" in err and "rank the proof needs was lost" in err and "certified 0" in err
    assert [r["certified"] for r in csv.DictReader(io.StringIO(out.read_text()))] == ["3", "0"]
