"""The command line: the main job, verification, and every bad input (clear error, no file)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from construct.cli import main
from construct.data import synthetic
from construct.io import npz_bytes


def write(path, **arrays):
    path.write_bytes(npz_bytes(arrays))
    return path


@pytest.fixture
def good(tmp_path):
    d = synthetic("independent", T=7, n=4, d=6, d_o=2, seed=0)
    return {"E": d.E, "X": d.X, "Y": d.Y}


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_default_build_then_verify(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, _ = run(["build", "--out", out], capsys)
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["data.npz", "report.json", "weights.npz"]
    rep = json.loads((out / "report.json").read_text())
    assert (rep["T"], rep["H"], rep["n"], rep["d"]) == (57, 8, 8, 16)
    assert rep["verification"]["rank_Z"] == 57 and rep["verification"]["passed"]
    assert rep["verification"]["max_abs_error"] <= 1e-9
    assert len(rep["heads"]) == 8 and rep["heads"][1]["scale"] > 0
    assert rep["scale"] == "rank"
    assert all(0 < h["scale"] <= h["scale_explicit"] for h in rep["heads"][1:])
    assert rep["float32"]["survives"] and rep["float32"]["max_abs_error"] <= rep["float32"]["tol"]
    assert "every label reproduced" in stdout and "float32" in stdout
    code, stdout, _ = run(["verify", out / "weights.npz", out / "data.npz"], capsys)
    assert code == 0 and "PASS" in stdout


def test_explicit_scale_option(tmp_path, capsys):
    code, _, _ = run(["build", "--out", tmp_path / "e", "--scale", "explicit", "--quiet"], capsys)
    rep = json.loads((tmp_path / "e" / "report.json").read_text())
    assert code == 0 and rep["scale"] == "explicit"
    assert all(h["scale"] == h["scale_explicit"] for h in rep["heads"])
    with pytest.raises(SystemExit) as exc:                            # argparse: usage error
        run(["build", "--out", tmp_path / "x", "--scale", "tiny"], capsys)
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_report_hashes_match_the_files(tmp_path, capsys):
    import hashlib
    out = tmp_path / "run"
    assert run(["build", "--out", out, "--quiet", "--synthetic", "shared", "--heads", "3", "--context", "4",
                "--dim", "5", "--out-dim", "2", "--skip"], capsys)[0] == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["data"]["sha256"] == hashlib.sha256((out / "data.npz").read_bytes()).hexdigest()
    assert rep["weights_sha256"] == hashlib.sha256((out / "weights.npz").read_bytes()).hexdigest()
    assert rep["skip"] is True and rep["d_o"] == 2 and rep["T"] == 10


def test_verify_fails_on_a_changed_label(tmp_path, capsys):
    out = tmp_path / "run"
    run(["build", "--out", out, "--quiet"], capsys)
    with np.load(out / "data.npz") as z:
        arrays = dict(z)
    arrays["Y"] = arrays["Y"].copy()
    arrays["Y"][5, 0] += 1e-3
    write(tmp_path / "tampered.npz", **arrays)
    code, stdout, _ = run(["verify", out / "weights.npz", tmp_path / "tampered.npz"], capsys)
    assert code == 1 and "FAIL" in stdout


def test_data_file_build_picks_the_fewest_heads(tmp_path, capsys, good):
    data = write(tmp_path / "d.npz", **good)
    code, _, _ = run(["build", data, "--out", tmp_path / "o", "--quiet"], capsys)
    assert code == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["H"] == 2 and rep["d_v"] == 2                       # 7 ≤ 2·3 + 1


def bad_cases(good):
    E, X, Y = good["E"], good["X"], good["Y"]
    nan_E = E.copy(); nan_E[3, 1, 2] = np.nan
    inf_X = X.copy(); inf_X[5, 0] = np.inf
    flat = E.copy(); flat[2, 1] = flat[2, 0]                          # context 2 loses rank
    dup = X.copy(); dup[5] = dup[1]
    wide = np.random.default_rng(0).random((7, 7, 6))
    return {
        "nan": (dict(E=nan_E, X=X, Y=Y), ["E", "example(s) 3"]),
        "inf": (dict(E=E, X=inf_X, Y=Y), ["X", "example(s) 5"]),
        "ndim": (dict(E=E[0], X=X, Y=Y), ["E", "(T, n, d)"]),
        "count": (dict(E=E, X=X[:6], Y=Y), ["E has 7", "X has 6"]),
        "dim": (dict(E=E, X=X[:, :5], Y=Y), ["token dimension"]),
        "n_gt_d": (dict(E=wide, X=X, Y=Y), ["n = 7", "d = 6"]),
        "rank": (dict(E=flat, X=X, Y=Y), ["example(s) 2", "full row rank", "positional encoding"]),
        "duplicate": (dict(E=E, X=dup, Y=Y), ["example 1", "G_2"]),
        "missing": (dict(E=E, X=X), ["'Y' is missing"]),
        "strings": (dict(E=E, X=X, Y=np.array(["a"] * 7)), ["Y", "dtype"]),
    }


@pytest.mark.parametrize("case", ["nan", "inf", "ndim", "count", "dim", "n_gt_d", "rank", "duplicate",
                                  "missing", "strings"])
def test_bad_data_is_refused_clearly_and_writes_nothing(tmp_path, capsys, good, case):
    arrays, needles = bad_cases(good)[case]
    data = write(tmp_path / "bad.npz", **arrays)
    out = tmp_path / "out"
    code, stdout, stderr = run(["build", data, "--out", out], capsys)
    assert code == 2
    for needle in needles:
        assert needle in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


def test_over_capacity_and_value_dim(tmp_path, capsys, good):
    data = write(tmp_path / "d.npz", **good)
    code, _, err = run(["build", data, "--heads", "1", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "exceed the capacity" in err and "2 heads would suffice" in err
    code, _, err = run(["build", data, "--value-dim", "1", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "d_v" in err and "Y" in err
    assert not (tmp_path / "o").exists()


def test_object_array_is_refused_without_unpickling(tmp_path, capsys, good):
    path = tmp_path / "obj.npz"
    np.savez(path, E=good["E"], X=good["X"], Y=np.array([object()] * 7, dtype=object))
    code, _, err = run(["build", path, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "'Y'" in err and "pickle" in err
    assert not (tmp_path / "o").exists()


def test_missing_and_non_npz_files(tmp_path, capsys):
    code, _, err = run(["verify", tmp_path / "nope.npz", tmp_path / "nope.npz"], capsys)
    assert code == 2 and "does not exist" in err
    junk = tmp_path / "junk.npz"
    junk.write_text("not an archive")
    code, _, err = run(["assumptions", junk], capsys)
    assert code == 2 and "not a readable .npz" in err


def test_verify_refuses_mismatched_weights(tmp_path, capsys):
    run(["build", "--out", tmp_path / "a", "--quiet"], capsys)
    run(["build", "--out", tmp_path / "b", "--quiet", "--dim", "12"], capsys)
    code, _, err = run(["verify", tmp_path / "a" / "weights.npz", tmp_path / "b" / "data.npz"], capsys)
    assert code == 2 and "d = 16" in err and "d = 12" in err


def test_synthetic_flags_with_a_data_file_are_an_error(tmp_path, capsys, good):
    data = write(tmp_path / "d.npz", **good)
    code, _, err = run(["build", data, "--dim", "8", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "--dim" in err


def test_assumptions_report(tmp_path, capsys, good):
    data = write(tmp_path / "d.npz", **good)
    code, stdout, _ = run(["assumptions", data, "--json", "--trials", "200"], capsys)
    rep = json.loads(stdout)
    assert code == 0 and rep["a1"]["holds"] and rep["a2"] and rep["a1"]["exact_rank"] == 6


def test_console_entry_exit_codes_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(npz_bytes({"E": np.full((2, 2, 3), np.nan), "X": np.zeros((2, 3)), "Y": np.zeros(2)}))
    proc = subprocess.run([sys.executable, "-m", "construct", "build", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "non-finite" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


# Found by a new user's trial: each wrote, crashed or misled before it was fixed.

@pytest.fixture
def small_run(tmp_path, capsys, good):
    data = write(tmp_path / "d.npz", **good)
    run(["build", data, "--out", tmp_path / "run", "--quiet"], capsys)
    return tmp_path / "run"


@pytest.mark.parametrize("fmt", ["torch", "safetensors", "onnx"])
def test_export_refuses_data_that_does_not_fit_the_weights_before_writing(tmp_path, capsys, small_run, fmt):
    other = write(tmp_path / "other.npz", **{k: v for k, v in
                                             zip("EXY", (lambda d: (d.E, d.X, d.Y))(synthetic("independent", T=7, n=4,
                                                                                              d=9, seed=1)))})
    target = tmp_path / "model.out"
    target.write_text("existing")
    code, _, err = run(["export", small_run / "weights.npz", "--format", fmt, "--out", target, "--data", other],
                       capsys)
    assert code == 2 and "do not match" in err and "d = 6" in err and "d = 9" in err
    assert "Traceback" not in err and target.read_text() == "existing"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model")] == []


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys, small_run):
    weights, data = small_run / "weights.npz", small_run / "data.npz"
    before = {p: p.read_bytes() for p in (weights, data)}
    for argv in (["export", weights, "--format", "safetensors", "--out", weights],
                 ["export", weights, "--format", "safetensors", "--out", small_run / ".." / "run" / "data.npz"],
                 ["export", weights, "--format", "safetensors", "--out", small_run / "report.json"],
                 ["certify", weights, data, "--out", weights],
                 ["certify", weights, data, "--out", data]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "is an input" in err, argv
    assert {p: p.read_bytes() for p in before} == before


def test_build_refuses_an_empty_out_and_a_forced_folder_that_holds_its_input(tmp_path, capsys, good, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    (here / "precious.txt").write_text("keep")
    monkeypatch.chdir(here)
    with pytest.raises(SystemExit) as exc:                            # argparse: usage error
        run(["build", "--out", "", "--force", "--quiet"], capsys)
    assert exc.value.code == 2 and "--out: an empty path" in capsys.readouterr().err
    for out in (".", tmp_path):                                       # the shell's folder, or one holding it
        code, _, err = run(["build", "--out", out, "--force", "--quiet"], capsys)
        assert code == 2 and "current folder" in err
    monkeypatch.chdir(tmp_path)
    data = write(here / "mydata.npz", **good)
    code, _, err = run(["build", data, "--out", here, "--force", "--quiet"], capsys)
    assert code == 2 and "mydata.npz" in err and "would replace or remove" in err
    assert data.is_file() and (here / "precious.txt").read_text() == "keep"
    code, _, _ = run(["build", data, "--out", tmp_path / "fine", "--quiet"], capsys)
    assert code == 0
    again = tmp_path / "fine" / "data.npz"                            # rebuilding from a build's own data
    code, _, _ = run(["build", again, "--out", tmp_path / "fine", "--force", "--quiet"], capsys)
    assert code == 0 and again.is_file()


def test_assumptions_sizes_its_trials(tmp_path, capsys, good):
    data = write(tmp_path / "d.npz", **good)
    code, _, err = run(["assumptions", data, "--trials", str(10 ** 15)], capsys)
    assert code == 2 and "memory" in err


@pytest.mark.parametrize("empty", ["H", "d_h", "d_v", "d_o"])
def test_weights_with_an_empty_dimension_are_invalid(tmp_path, capsys, small_run, empty):
    from construct.model import load_weights
    w = load_weights(small_run / "weights.npz").arrays()
    H, d, d_h = w["W_K"].shape
    d_v, d_o = w["W_V"].shape[2], w["W_D"].shape[1]
    H, d_h, d_v, d_o = (0 if empty == name else v for name, v in (("H", H), ("d_h", d_h), ("d_v", d_v), ("d_o", d_o)))
    arrays = dict(W_K=np.zeros((H, d, d_h)), W_Q=np.zeros((H, d, d_h)), W_V=np.zeros((H, d, d_v)),
                  W_O=np.zeros((H * d_v, d)), W_D=np.zeros((d, d_o)), skip=np.array(False))
    bad = write(tmp_path / "w.npz", **arrays)
    for argv in (["verify", bad, small_run / "data.npz"], ["certify", bad, small_run / "data.npz"],
                 ["export", bad, "--format", "onnx", "--out", tmp_path / "m.onnx"]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "invalid weights" in err and f"{empty} = 0" in err, argv
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("reordered", [False, True])
@pytest.mark.parametrize("same_label", [False, True])
def test_examples_with_identical_inputs_are_named_with_what_would_build(tmp_path, capsys, good, same_label,
                                                                       reordered):
    # Attention does not see the order of a context's tokens: the same tokens in another order
    # are the same input (a user's trial found them refused as an A1 failure, with the pre-layer
    # as a remedy that cannot help).
    E, X, Y = good["E"].copy(), good["X"].copy(), good["Y"].copy()
    E[5], X[5] = (E[2][::-1] if reordered else E[2]), X[2]
    Y[5] = Y[2] if same_label else Y[2] + 1
    data = write(tmp_path / "d.npz", E=E, X=X, Y=Y)
    for extra in ([], ["--prelayer", "mean-shift"], ["--prelayer", "auto"]):
        code, _, err = run(["build", data, "--out", tmp_path / "o", *extra], capsys)
        assert code == 2 and "examples 2 and 5" in err and "same inputs" in err, extra
        assert "--prelayer mean-shift" not in err
        assert ("drop" in err) == same_label and ("no model" in err) == (not same_label)
        assert ("positional encoding" in err) == (reordered and not same_label)
    assert not (tmp_path / "o").exists()


def test_export_exits_1_when_the_written_file_misses_the_labels(tmp_path, capsys, small_run):
    target = tmp_path / "m.safetensors"
    code, out, _ = run(["export", small_run / "weights.npz", "--format", "safetensors", "--out", target,
                        "--tol", "1e-300"], capsys)
    assert code == 1 and "do NOT all hold" in out and target.is_file()
    code, out, _ = run(["export", small_run / "weights.npz", "--format", "safetensors", "--out", target], capsys)
    assert code == 0 and "every label holds" in out


def test_a_fractional_count_is_refused_in_plain_words(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run(["build", "--heads", "3.5", "--out", tmp_path / "o"], capsys)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "must be a positive integer, got '3.5'" in err and "_positive" not in err


def test_assumptions_decide_a1_exactly_where_the_required_subsets_fit_the_budget(tmp_path, capsys):
    # T = 20, n = 4: the 4845 subsets of 4 queries fit the budget (the full Kruskal rank, which
    # goes on to subsets of 5, does not): the verdict is exact, not sampled.
    d = synthetic("independent", T=20, n=4, d=8, seed=0)
    data = write(tmp_path / "d.npz", E=d.E, X=d.X, Y=d.Y)
    code, stdout, _ = run(["assumptions", data, "--json", "--trials", "50"], capsys)
    rep = json.loads(stdout)
    assert code == 0 and rep["a1"]["exact_rank"] is None and rep["a1"]["exact_holds"] is True
    code, stdout, _ = run(["assumptions", data, "--trials", "50"], capsys)
    assert "every 4-subset independent" in stdout
    X = d.X.copy()
    X[7] = X[1] + X[2] - X[3]                                   # four dependent queries
    bad = write(tmp_path / "bad.npz", E=d.E, X=X, Y=d.Y)
    code, stdout, _ = run(["assumptions", bad, "--json", "--trials", "50"], capsys)
    rep = json.loads(stdout)
    assert code == 1 and rep["a1"]["exact_holds"] is False and not rep["a1"]["holds"]


def test_a_rebuild_replaces_the_run_folder_with_its_certificate(tmp_path, capsys, good):
    # The documented workflow writes run/certificate.json; a user's trial found the next build
    # into run refused ("holds files this command does not write"), and --force the only way.
    data, run_dir = write(tmp_path / "d.npz", **good), tmp_path / "run"
    assert run(["build", data, "--out", run_dir, "--quiet"], capsys)[0] == 0
    assert run(["certify", run_dir / "weights.npz", run_dir / "data.npz",
                "--out", run_dir / "certificate.json"], capsys)[0] == 0
    code, out, err = run(["build", data, "--out", run_dir, "--seed", "1"], capsys)
    assert code == 0, err
    assert "removed" in out and "certificate.json" in out
    assert sorted(p.name for p in run_dir.iterdir()) == ["data.npz", "report.json", "weights.npz"]
    (run_dir / "notes.txt").write_text("mine")
    code, _, err = run(["build", data, "--out", run_dir], capsys)
    assert code == 2 and "notes.txt" in err                            # other files are still the user's


@pytest.mark.parametrize("name", ["certificate.json", "weights.npz"])
def test_a_folder_under_one_of_builds_names_is_the_users(tmp_path, capsys, good, name):
    # build's own names are files; a folder so named (with the user's files in it) is not
    # build's to remove: refused as any other foreign entry, unless --force.
    data, run_dir = write(tmp_path / "d.npz", **good), tmp_path / "run"
    assert run(["build", data, "--out", run_dir, "--quiet"], capsys)[0] == 0
    (run_dir / name).unlink(missing_ok=True)
    (run_dir / name).mkdir()
    (run_dir / name / "notes.txt").write_text("mine")
    code, _, err = run(["build", data, "--out", run_dir], capsys)
    assert code == 2 and name in err and "--force" in err
    assert (run_dir / name / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", [["build", "--out", "{run}"], ["export", "{weights}", "--format", "torch",
                                                                   "--out", "{model}", "--data", "{data}"]])
def test_a_bad_tolerance_is_named_as_the_option(tmp_path, capsys, small_run, command):
    # A review: build and export named it `tol` (the Python keyword), verify and certify `--tol`.
    names = dict(run=tmp_path / "new", weights=small_run / "weights.npz", data=small_run / "data.npz",
                 model=tmp_path / "m.pt")
    code, _, err = run([part.format(**names) for part in command] + ["--tol", "nan"], capsys)
    assert code == 2 and "--tol must be a finite positive number" in err
    assert not (tmp_path / "new").exists() and not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("name, force", [("weights.npz", False), ("report.json", True), ("mine.npz", True)])
def test_the_input_dataset_inside_out_is_never_replaced(tmp_path, capsys, good, name, force):
    # A hostile trial: a dataset saved as run/weights.npz (or report.json) and built into run was
    # replaced by the weights. Only data.npz, which build rewrites with the same dataset, may be.
    (tmp_path / "run").mkdir()
    data = write(tmp_path / "run" / name, **good)
    before = data.read_bytes()
    code, _, err = run(["build", data, "--out", tmp_path / "run"] + (["--force"] if force else []), capsys)
    assert code == 2 and name in err and "input" in err, err
    assert data.read_bytes() == before
    data = write(tmp_path / "run" / "data.npz", **good)
    assert run(["build", data, "--out", tmp_path / "run", "--force", "--quiet"], capsys)[0] == 0


def test_a_write_protected_run_folder_is_refused_and_left_as_it_is(tmp_path, capsys, good):
    # A hostile trial: after `chmod a-w run` a build replaced the folder anyway, and the old set,
    # a read-only folder, stayed behind for good (.run.mha-construct-…: rmtree cannot empty it).
    import stat
    data, run_dir = write(tmp_path / "d.npz", **good), tmp_path / "run"
    assert run(["build", data, "--out", run_dir, "--quiet"], capsys)[0] == 0
    before = (run_dir / "weights.npz").read_bytes()
    run_dir.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    try:
        code, _, err = run(["build", data, "--out", run_dir, "--seed", "7", "--force"], capsys)
        assert code == 2 and "write-protected" in err
        assert (run_dir / "weights.npz").read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "run"]
    finally:
        run_dir.chmod(stat.S_IRWXU)


def test_explicit_bits_beyond_the_mpmath_budget_say_so_before_the_build(tmp_path, capsys, monkeypatch):
    """--precision BITS is honoured at any size, but a run that auto would never make at that
    precision is announced on stderr first (it can take hours), and the report says why."""
    import construct.policy as policy
    argv = ["build", "--heads", "2", "--context", "4", "--dim", "8", "--precision", "64"]
    code, _, err = run(argv + ["--out", tmp_path / "a"], capsys)          # 7·2·8·(4+7) = 1232
    assert code == 0 and "budget" not in err
    monkeypatch.setattr(policy, "MP_BUDGET", 1000)
    code, _, err = run(argv + ["--out", tmp_path / "b"], capsys)
    assert code == 0
    assert "1.2x the largest size at which auto uses mpmath" in err and "Ctrl-C" in err
    rep = json.loads((tmp_path / "b" / "report.json").read_text())
    assert "requested; 1.2x the largest size at which auto uses mpmath" in rep["precision"]["why"]
    code, _, err = run(argv + ["--quiet", "--out", tmp_path / "c"], capsys)
    assert code == 0 and err == ""
    code, _, err = run(argv[:-1] + ["float64", "--out", tmp_path / "d"], capsys)
    assert code == 0 and "budget" not in err and "auto uses mpmath" not in err


def test_certify_says_when_it_falls_back_to_intervals(tmp_path, capsys):
    # auto tries float64 first; where it leaves a claim unproven and the problem fits, the slower
    # interval method runs: say so on stderr before it starts, not silently for a minute.
    out = tmp_path / "run"
    assert run(["build", "--heads", "3", "--context", "3", "--dim", "4", "--quiet", "--out", out], capsys)[0] == 0
    files = [out / "weights.npz", out / "data.npz"]
    code, stdout, err = run(["certify", *files, "--tol", "1e-30"], capsys)
    assert "left memorization unproven" in err and "mpmath intervals" in err and "method         interval" in stdout
    code, stdout, err = run(["certify", *files, "--tol", "1e-30", "--method", "float64"], capsys)
    assert err == "" and "method         float64" in stdout
    code, stdout, err = run(["certify", *files], capsys)
    assert code == 0 and err == ""


def test_certify_tells_its_stages_on_large_problems(tmp_path, capsys, monkeypatch):
    # A certificate of a shared context at H = 256 took 127 s without a word on stderr. From
    # STAGE_NOTES_FROM entries of Z each finished stage is a line, with its seconds; below, none.
    import construct.certify as C
    out = tmp_path / "run"
    assert run(["build", "--heads", "3", "--context", "3", "--dim", "4", "--quiet", "--out", out], capsys)[0] == 0
    files = [out / "weights.npz", out / "data.npz"]
    code, stdout, quiet = run(["certify", *files], capsys)
    assert code == 0 and quiet == ""
    monkeypatch.setattr(C, "STAGE_NOTES_FROM", 7 * 3 * 4)                  # T·H·d of this problem
    code, told, err = run(["certify", *files], capsys)
    lines = err.splitlines()
    assert code == 0 and told == stdout and len(lines) == 2, err
    assert all(re.fullmatch(r"mha-construct certify: .* \(\d+\.\d s\)", line) for line in lines), err
    assert "features and outputs of 7 examples on 3 heads enclosed in float64" in lines[0]
    assert "rank: proven by the Gram matrix of Z" in lines[1]
    code, _, err = run(["certify", *files, "--out", tmp_path / "c.json"], capsys)   # --check recomputes: the same
    code, out, checked = run(["certify", *files, "--check", tmp_path / "c.json"], capsys)
    assert code == 0 and "ACCEPTED" in out and [line.rsplit(" (", 1)[0] for line in checked.splitlines()] == \
        [line.rsplit(" (", 1)[0] for line in lines]
    monkeypatch.setattr(C, "STAGE_NOTES_FROM", 7 * 3 * 4 + 1)
    assert run(["certify", *files], capsys)[2] == ""


def test_weights_and_data_given_the_other_way_round_are_named_as_such(tmp_path, capsys):
    # A new user's trial: `verify DATA WEIGHTS` said only "unexpected member 'E.npy'".
    out = tmp_path / "run"
    assert run(["build", "--heads", "3", "--context", "3", "--dim", "4", "--quiet", "--out", out], capsys)[0] == 0
    data, weights = out / "data.npz", out / "weights.npz"
    for argv in (["verify", data, weights], ["certify", data, weights],
                 ["export", data, "--format", "safetensors", "--out", tmp_path / "w.st", "--data", weights]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "looks like a dataset (E, X, Y), not weights" in err, err
        assert "the other way round" in err and not (tmp_path / "w.st").exists()
        assert "unexpected member" not in err, err     # (each array of the other kind: noise beside it)
    code, _, err = run(["verify", weights, weights], capsys)          # weights where the data belongs
    assert code == 2 and "looks like weights, not a dataset" in err, err


@pytest.mark.parametrize("argv, option", [(["build", "--out", "{run}", "--seed", "-1"], "--seed"),
                                          (["build", "--out", "{run}", "--precision", "20"], "--precision"),
                                          (["build", "--out", "{run}", "--precision", "200.5"], "--precision"),
                                          (["capacity", "--vary", "H", "--values", "1", "--seed", "-3"], "--seed"),
                                          (["teach", "--seed", "-1"], "--seed"),
                                          (["assumptions", "{data}", "--seed", "-1"], "--seed")])
def test_a_bad_seed_or_precision_is_named_as_the_option(tmp_path, capsys, good, argv, option):
    # A new-user trial: `--seed -1` was refused as "seed must be an integer ≥ 0" and `--precision 20`
    # as "precision must be ...", the Python names, where `--tol nan` names the option.
    names = dict(run=tmp_path / "new", data=write(tmp_path / "d.npz", **good))
    with pytest.raises(SystemExit) as exc:
        main([part.format(**names) for part in argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {option}:" in err and "Traceback" not in err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("option", ["--heads", "--seed", "--precision"])
@pytest.mark.parametrize("text", ["1_00", " 100", "100\n", "١٠٠", "１００", "¹⁰⁰", "+100"])
def test_integer_options_take_ascii_digits_only(tmp_path, capsys, option, text):
    # A hostile trial: Python's int() took `--heads 1_0` as 10, and Arabic-Indic or fullwidth
    # digits and surrounding spaces too, against "options are refused, never coerced";
    # `--precision ¹⁰⁰` passed isdigit() and then failed in int() with a raw message.
    with pytest.raises(SystemExit) as exc:
        main(["build", "--out", str(tmp_path / "o"), option, text])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {option}:" in err and repr(text) in err, err
    assert not (tmp_path / "o").exists()


def _disk_full_after(monkeypatch, files: int) -> None:
    """Let ``files`` writes succeed, then fail every later one as a full disk does."""
    import errno
    import construct.io as io_module
    real, count = io_module._write_file, [0]

    def write(path, payload, mode):
        count[0] += 1
        if count[0] > files:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, payload, mode)
    monkeypatch.setattr(io_module, "_write_file", write)


def test_several_files_are_written_as_one_set_or_not_at_all(tmp_path, monkeypatch):
    # A hostile trial: on a full disk, capacity left its CSV behind when a plot failed, teach its
    # first figure, and certify --out / export --out the folders they had made.
    from construct.errors import OutputError
    from construct.io import write_atomic, write_atomic_many
    kept = tmp_path / "kept.csv"
    kept.write_text("old")
    _disk_full_after(monkeypatch, 1)
    with pytest.raises(OutputError, match="No space left"):
        write_atomic_many([(kept, b"new"), (tmp_path / "new" / "deeper" / "p.svg", b"<svg/>")])
    assert kept.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.csv"]
    _disk_full_after(monkeypatch, 0)
    with pytest.raises(OutputError):
        write_atomic(tmp_path / "made" / "for" / "c.json", b"{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.csv"]


@pytest.mark.parametrize("argv", [
    ["capacity", "--vary", "H", "--values", "1", "--context", "4", "--dim", "8", "--csv", "{o}/c.csv",
     "--json", "{o}/c.json"],
    ["teach", "--format", "markdown", "--out", "{o}/t"],
])
def test_a_command_that_cannot_write_all_its_files_writes_none(tmp_path, capsys, monkeypatch, argv):
    _disk_full_after(monkeypatch, 1)
    code = main([part.format(o=tmp_path / "out") for part in argv])
    err = capsys.readouterr().err
    assert code == 2 and "No space left" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_verify_json_says_null_for_a_rank_it_did_not_compute(tmp_path, capsys, small_run):
    # A hostile trial: with logits that overflow, the text said "not computed" and the JSON
    # "rank_Z": 0, a rank that was never measured.
    from construct import load_weights
    w = load_weights(small_run / "weights.npz")
    arrays = {k: getattr(w, k) for k in ("W_K", "W_Q", "W_V", "W_O", "W_D")}
    arrays["W_K"], arrays["W_Q"] = arrays["W_K"] * 1e200, arrays["W_Q"] * 1e200
    bad = write(tmp_path / "w.npz", **arrays, skip=np.array(w.skip))
    code, out, _ = run(["verify", bad, small_run / "data.npz", "--json"], capsys)
    report = json.loads(out)
    assert code == 1 and report["rank_Z"] is None and report["sigma_min_Z"] is None and not report["passed"]


def test_certify_out_naming_a_folder_is_refused_before_the_work(tmp_path, capsys, small_run, monkeypatch):
    # A hostile trial: `certify --out EXISTING_FOLDER` certified first and failed on writing.
    import construct.certify as certify_module
    monkeypatch.setattr(certify_module, "certify", lambda *a, **k: pytest.fail("certified before refusing --out"))
    (tmp_path / "a folder").mkdir()
    code, out, err = run(["certify", small_run / "weights.npz", small_run / "data.npz", "--out",
                          tmp_path / "a folder"], capsys)
    assert code == 2 and "--out" in err and "is a folder" in err and out == ""


@pytest.mark.parametrize("command", ["capacity", "export", "certify"])
def test_an_output_where_no_file_can_be_made_is_refused_before_the_work(tmp_path, capsys, small_run, command):
    # A hostile trial: `capacity --csv /proc/x.csv` ran the sweep, then failed to write; export
    # into a path under a file said "Not a directory [Errno 20]".
    target = {"capacity": "/proc/new/x.csv", "export": str(small_run / "weights.npz" / "m.pt"),
              "certify": "/proc/c.json"}[command]
    if target.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("no /proc file system here (Linux's, where no file can be made)")
    argv = {"capacity": ["capacity", "--vary", "H", "--values", "1", "--context", "4", "--dim", "8", "--csv", target],
            "export": ["export", small_run / "weights.npz", "--format", "torch", "--out", target],
            "certify": ["certify", small_run / "weights.npz", small_run / "data.npz", "--out", target]}[command]
    code, out, err = run(argv, capsys)
    assert code == 2 and "invalid output" in err and "Traceback" not in err, err
    assert "kind" not in out and "PROVEN" not in out and "wrote" not in out   # no sweep, certificate, export


def test_the_leftover_sweep_takes_only_dead_writers_files_of_that_name(tmp_path):
    # A review: the sweep for `out` read `.out.99999.<pid>.<hex>.tmp`, the live temporary of
    # `out.99999` written in the same call, as a dead writer's (pid 99999) and removed it.
    from construct.io import write_atomic_many
    write_atomic_many([(tmp_path / "out.99999", b"a"), (tmp_path / "out", b"b")])
    assert (tmp_path / "out.99999").read_bytes() == b"a" and (tmp_path / "out").read_bytes() == b"b"
    dead = tmp_path / ".out.4194305.0123abcd.probe"                      # beyond Linux's largest pid
    dead.write_bytes(b"")
    write_atomic_many([(tmp_path / "out", b"c")])
    assert not dead.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.99999"]


def test_a_rename_that_fails_after_another_names_what_was_replaced(tmp_path, monkeypatch):
    import errno
    import construct.io as io_module
    from construct.errors import OutputError
    real, calls = io_module.os.replace, []

    def replace(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise OSError(errno.EPERM, "Operation not permitted")
        return real(a, b)
    monkeypatch.setattr(io_module.os, "replace", replace)
    with pytest.raises(OutputError) as exc:
        io_module.write_atomic_many([(tmp_path / "a.csv", b"1"), (tmp_path / "b.svg", b"2")])
    assert "a.csv" in str(exc.value) and "already replaced" in str(exc.value)
    assert "nothing was changed" not in str(exc.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


@pytest.mark.parametrize("text", ["1_0e-9", " 1e-9", "1e-9 ", "１e-9"])
def test_tol_takes_ascii_numbers_only(tmp_path, capsys, text):
    # A review: float() took `--tol 1_0e-9`, spaces around a number and fullwidth digits, the
    # coercion the integer options no longer allow.
    with pytest.raises(SystemExit) as exc:
        main(["build", "--out", str(tmp_path / "o"), "--tol", text])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --tol:" in err and repr(text) in err, err


def test_a_seed_of_many_digits_is_refused_with_a_short_message(tmp_path, capsys):
    # A review: beyond Python's 4,300-digit limit int() raised, and argparse answered
    # "invalid _seed value: '999…'" with every digit.
    with pytest.raises(SystemExit):
        main(["build", "--out", str(tmp_path / "o"), "--seed", "9" * 5000])
    err = capsys.readouterr().err
    assert "argument --seed:" in err and "_seed" not in err and len(err) < 2000, err[:300]


@pytest.mark.parametrize("argv, needle", [
    (["--kind", "independent", "independent", "--plot", "{o}/p.svg"], "--kind independent is given twice"),
    (["--values", "1", "2", "1"], "--values 1 is given twice"),
])
def test_capacity_refuses_a_kind_or_value_given_twice(tmp_path, capsys, argv, needle):
    # A hostile trial: a repeated kind was refused as "'p-independent.svg' is given to --plot and
    # --plot", hiding the cause; without --plot, repeated kinds and values duplicated rows.
    base = ["capacity", "--vary", "H", "--context", "4", "--dim", "8"]
    if "--values" not in argv:
        base += ["--values", "1"]
    code, out, err = run([part.format(o=tmp_path) for part in base + argv], capsys)
    assert code == 2 and needle in err and "kind " not in out, err


@pytest.mark.parametrize("command", ["assumptions", "capacity", "verify", "teach"])
def test_a_reader_that_goes_away_leaves_the_command_its_work_and_its_exit_code(tmp_path, good, command):
    # A new user's trial: `mha-construct assumptions d.npz | head -1` (and `capacity … | head -1`)
    # printed "error: [Errno 32] Broken pipe" and exited 2, the code of bad input, where the verdict
    # was 0. Here the pipe's reader is gone before the first line, so every write meets it.
    data = write(tmp_path / "d.npz", **good)
    subprocess.run([sys.executable, "-m", "construct", "build", str(data), "--out", str(tmp_path / "run"), "--quiet"],
                   check=True, capture_output=True)
    argv = {"assumptions": ["assumptions", str(data), "--trials", "200"],
            "capacity": ["capacity", "--vary", "H", "--values", "1", "2", "--context", "3", "--dim", "4",
                         "--csv", str(tmp_path / "c.csv")],
            "verify": ["verify", str(tmp_path / "run" / "weights.npz"), str(tmp_path / "run" / "data.npz")],
            "teach": ["teach"]}[command]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "construct", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    if command == "capacity":
        assert (tmp_path / "c.csv").read_text().count("\n") == 3          # the header and H = 1, 2


@pytest.mark.parametrize("command", ["certify", "export", "capacity"])
def test_a_file_option_that_ends_in_a_slash_names_a_folder_and_is_refused(tmp_path, capsys, small_run, command):
    # A hostile trial: `certify … --out keep/` replaced the file `keep` (pathlib drops the slash),
    # and `--out newdir/` made a file `newdir`; the same for export --out and capacity --csv.
    keep = tmp_path / "keep"
    keep.write_text("precious")
    for target in (f"{keep}/", f"{tmp_path / 'newdir'}/", f"{tmp_path}/."):
        argv = {"certify": ["certify", small_run / "weights.npz", small_run / "data.npz", "--out", target],
                "export": ["export", small_run / "weights.npz", "--format", "torch", "--out", target],
                "capacity": ["capacity", "--vary", "H", "--values", "1", "--context", "3", "--dim", "4",
                             "--csv", target]}[command]
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "names a folder" in err, err
    assert keep.read_text() == "precious" and not (tmp_path / "newdir").exists()


def test_export_links_only_the_report_of_these_weights(tmp_path, capsys, small_run, good):
    # A hostile trial: export embedded report_sha256 of whatever report.json lay beside the
    # weights, though that report's weights_sha256 named other weights.
    import shutil
    from safetensors import safe_open
    from construct.io import sha256
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("weights.npz", "data.npz"):
        shutil.copy(small_run / name, mixed / name)
    other = tmp_path / "other"
    assert run(["build", write(tmp_path / "d2.npz", **good), "--out", other, "--quiet", "--seed", "5"], capsys)[0] == 0
    shutil.copy(other / "report.json", mixed / "report.json")
    for folder, linked in ((small_run, True), (mixed, False)):
        out = tmp_path / f"{folder.name}.safetensors"
        code, stdout, _ = run(["export", folder / "weights.npz", "--format", "safetensors", "--out", out], capsys)
        assert code == 0
        with safe_open(str(out), "np") as f:
            meta = f.metadata()
        if linked:
            assert meta["report_sha256"] == sha256((folder / "report.json").read_bytes())
        else:
            assert "report_sha256" not in meta and "describes other weights" in stdout, stdout


def test_the_check_command_certify_prints_can_be_pasted_into_a_shell(tmp_path, capsys, small_run):
    # A hostile trial: with `--out "my cert.json"` the printed command split the path in two.
    import shlex
    cert = tmp_path / "my cert.json"
    code, stdout, _ = run(["certify", small_run / "weights.npz", small_run / "data.npz", "--out", cert], capsys)
    assert code == 0
    command = stdout.split("check it with `")[1].split("`")[0]
    argv = shlex.split(command)
    assert argv[0] == "mha-construct" and argv[-1] == str(cert)
    assert run(argv[1:], capsys)[0] == 0


def test_a_data_file_name_that_is_not_utf8_is_written_to_the_report_as_valid_text(tmp_path, capsys, good):
    # A hostile trial: a file named d<0xff>.npz put a lone surrogate in report.json.
    name = os.fsdecode(b"d\xff.npz")
    data = write(tmp_path / name, **good)
    assert run(["build", data, "--out", tmp_path / "run", "--quiet"], capsys)[0] == 0
    raw = (tmp_path / "run" / "report.json").read_bytes()
    raw.decode("utf-8")                                                 # strict: no surrogates
    source = json.loads(raw)["data"]["source"]
    assert "\udcff" not in source and source.encode("utf-8") and "xff" in source, source


@pytest.mark.parametrize("argv", [["build", "--synthetic", "independent", "--heads", "2", "--context", "3", "--dim", "4"],
                                  ["teach"], ["build", "--help"]])
def test_a_terminal_that_is_not_utf8_gets_escapes_not_a_traceback(tmp_path, argv):
    # A hostile trial: with PYTHONIOENCODING=ascii (or latin-1) `build` wrote its folder, then
    # crashed printing "…" with UnicodeEncodeError and exit 1; so did teach and build --help.
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    argv = [*argv, "--out", str(tmp_path / "out")] if argv[0] == "build" and "--help" not in argv else argv
    proc = subprocess.run([sys.executable, "-m", "construct", *argv], capture_output=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr[-500:]
    assert proc.stdout.isascii() and (b"\\u" in proc.stdout or b"\\x" in proc.stdout), proc.stdout[-300:]


def test_a_closed_stdout_or_a_strict_one_does_not_turn_done_work_into_a_traceback(tmp_path, good):
    # A review: with fd 1 closed (`>&-`) Python's sys.stdout is None, and the wrapper for a reader
    # that goes away crashed on it (exit 120 after writing the folder); and on a strict UTF-8
    # stdout a data file named with a byte that is not UTF-8 crashed certify's last print, exit 1
    # (read as "not proven") after a passing certificate was written.
    data = write(tmp_path / "d.npz", **good)
    closed = subprocess.run(["sh", "-c", f'"{sys.executable}" -m construct build "{data}" --out "{tmp_path / "run"}" >&-'],
                            capture_output=True, text=True, timeout=300)
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
    assert (tmp_path / "run" / "weights.npz").is_file()
    odd = tmp_path / os.fsdecode(b"d\xff.npz")
    odd.write_bytes((tmp_path / "run" / "data.npz").read_bytes())
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    proc = subprocess.run([sys.executable, "-m", "construct", "certify", str(tmp_path / "run" / "weights.npz"), str(odd),
                           "--out", str(tmp_path / "c.json")], capture_output=True, env=env, timeout=300)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr[-500:]
    assert b"\\udcff" in proc.stdout or b"\\xff" in proc.stdout, proc.stdout[-300:]


def test_build_does_not_rewrite_its_own_input_into_another_file(tmp_path, capsys, good):
    # A hostile trial: `build lab/data.npz --out lab` rewrote the user's file of integer labels as
    # one-hot Y (and float32 as float64); a second build then lost the class ids for good.
    lab = tmp_path / "lab"
    lab.mkdir()
    labels = np.array([3, 17, 42, 3, 17, 42, 3])
    np.savez(lab / "data.npz", E=good["E"].astype(np.float32), X=good["X"].astype(np.float32), labels=labels)
    before = (lab / "data.npz").read_bytes()
    code, _, err = run(["build", lab / "data.npz", "--out", lab, "--quiet"], capsys)
    assert code == 2 and "another folder" in err, err
    assert (lab / "data.npz").read_bytes() == before and sorted(p.name for p in lab.iterdir()) == ["data.npz"]
    run(["build", write(tmp_path / "d.npz", **good), "--out", tmp_path / "run", "--quiet"], capsys)
    code, _, err = run(["build", tmp_path / "run" / "data.npz", "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 0, err                                      # build's own data.npz: rewritten as it is


@pytest.mark.parametrize("dtype, noted", [(np.int64, True), (np.uint8, True), (np.float64, False)])
def test_integer_targets_given_as_y_are_noted(tmp_path, capsys, dtype, noted):
    # From a new user's trial: class ids saved as Y (T,) of integers are memorized as numbers, one
    # output; nothing said that a classification dataset names them `labels` (one-hot targets).
    data = synthetic("independent", T=9, n=3, d=4, seed=0)
    np.savez(tmp_path / "d.npz", E=data.E, X=data.X, Y=(np.arange(9) % 3).astype(dtype))
    assert main(["build", str(tmp_path / "d.npz"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    err = capsys.readouterr().err
    note = ("mha-construct build: note: Y holds integers (T,): they are memorized as numbers, on one output; "
            "class ids go in an array named 'labels' instead (one-hot targets, one output per class)\n")
    assert err == (note if noted else ""), err


def _built_on_labels(tmp_path, capsys, good, labels, command):
    """Build on ``good``'s arrays with integer ``labels`` into ``tmp_path/run``: the data file, and
    the command's arguments for a dataset file (export writes a safetensors file beside)."""
    built = write(tmp_path / "a.npz", E=good["E"], X=good["X"], labels=labels)
    assert run(["build", built, "--out", tmp_path / "run", "--quiet"], capsys)[0] == 0
    weights = tmp_path / "run" / "weights.npz"

    def argv(data):
        return ([command, weights, "--data", data, "--format", "safetensors", "--out", tmp_path / "w.safetensors"]
                if command == "export" else [command, weights, data])
    return built, argv


@pytest.mark.parametrize("command", ["verify", "certify", "export"])
def test_class_ids_other_than_the_builds_are_noted(tmp_path, capsys, good, command):
    """The weights hold no class ids: output column j is the j-th class in sorted order. Labels
    5, 6, 7 give the same one-hot targets as 0, 1, 2, so the check passes; the report beside
    the weights names the ids they were built on, and the command says where the two differ."""
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.arange(7) % 3)
    built, argv = _built_on_labels(tmp_path, capsys, good, labels, command)
    shifted = write(tmp_path / "b.npz", E=good["E"], X=good["X"], labels=labels + 5)
    code, _, err = run(argv(shifted), capsys)
    assert code == 0                                  # the columns agree: the check itself passes
    assert "class ids [5, 6, 7]" in err and "[0, 1, 2]" in err and "report.json" in err
    code, _, err = run(argv(built), capsys)
    assert code == 0 and "class ids" not in err       # the same ids: nothing to say
    (tmp_path / "run" / "report.json").write_text("{}")   # a report of other weights says nothing
    code, _, err = run(argv(shifted), capsys)
    assert code == 0 and "class ids" not in err


def test_a_synthetic_build_too_large_is_refused_before_its_data_is_drawn(tmp_path, capsys, monkeypatch):
    """A researcher's trial: `--synthetic independent --heads 3000 --context 32 --dim 64` drew its
    1.5 GB of data (3.1 GB peak, 6 s) before build's own estimate refused the request (464 GiB):
    the data's estimate fit, the build's did not. The build's estimate comes first."""
    import construct.data
    import construct.limits as limits
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * 2**20)   # the data fits, the build does not

    def drawn(*args, **kwargs):
        raise AssertionError("the synthetic data was drawn before the build was sized")
    monkeypatch.setattr(construct.data, "synthetic", drawn)
    code, _, err = run(["build", "--synthetic", "independent", "--heads", 40, "--out", tmp_path / "run"], capsys)
    assert code == 2, err
    assert "request too large" in err and "a build of T = 281 examples" in err and "H = 40 heads" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, beyond", [("1e-400", "rounds to 0"), ("-1e-400", "rounds to 0"),
                                          ("1e400", "rounds to inf"), ("0.000000001e-399", "rounds to 0")])
def test_a_tolerance_beyond_float64_is_named_as_typed(tmp_path, capsys, text, beyond):
    # A new user's trial: --tol 1e-400 was refused as "got 0.0", what float() made of it.
    with pytest.raises(SystemExit) as exc:
        main(["build", "--out", str(tmp_path / "o"), f"--tol={text}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --tol:" in err and repr(text) in err and beyond in err, err
    assert not (tmp_path / "o").exists()


def test_too_many_digits_names_the_examples_option(tmp_path, capsys):
    # A new user's trial: --dataset digits --examples 5000 was refused as "count must be at most
    # 1797", the Python keyword's name.
    pytest.importorskip("sklearn")
    code, _, err = run(["build", "--dataset", "digits", "--examples", "5000", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "--examples 5000" in err and "1797" in err and "count" not in err, err
    assert not (tmp_path / "o").exists()


def test_a_mistyped_option_is_named_with_its_command_s_usage_and_a_suggestion(tmp_path, capsys):
    # A new user's trial: `build --hedas 7` printed the top-level usage and no hint.
    with pytest.raises(SystemExit) as exc:
        main(["build", "--out", str(tmp_path / "o"), "--hedas", "7"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "usage: mha-construct build" in err, err
    assert "unrecognized arguments: --hedas" in err and "did you mean --heads?" in err, err   # (7: the data)
    with pytest.raises(SystemExit) as exc:
        main(["verify", "w.npz", "d.npz", "--jsno"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "usage: mha-construct verify" in err and "did you mean --json?" in err, err
    with pytest.raises(SystemExit):
        main(["verify", "w.npz", "d.npz", "extra.npz"])
    err = capsys.readouterr().err
    assert "usage: mha-construct verify" in err and "unrecognized arguments: extra.npz" in err, err
    assert "did you mean" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["verify", "certify", "export"])
def test_labels_of_some_of_the_builds_classes_take_the_builds_columns(tmp_path, capsys, good, command):
    """From a hostile trial: weights built on labels 5, 9, 100 could not be checked on the
    examples of classes 5 and 9 alone ("weights produce d_o = 3 outputs, the labels Y have 2
    columns"), though the report beside them names the build's classes. Labels whose ids are all
    among the build's now take the build's columns (one-hot over its classes), and the command
    says so; an id the build did not have keeps the column comparison."""
    labels = np.array([5, 9, 5, 9, 100, 5, 9])
    _, argv = _built_on_labels(tmp_path, capsys, good, labels, command)
    part = write(tmp_path / "part.npz", E=good["E"][:4], X=good["X"][:4], labels=labels[:4])
    code, out, err = run(argv(part), capsys)
    assert code == 0, err
    assert "classes [5, 9]" in err and "[5, 9, 100]" in err and "the build's columns" in err
    other = write(tmp_path / "other.npz", E=good["E"][:4], X=good["X"][:4], labels=np.array([5, 7, 5, 7]))
    code, _, err = run(argv(other), capsys)
    assert code == 2 and "the build's columns" not in err


def test_a_certificate_of_part_of_the_builds_classes_passes_its_own_check(tmp_path, capsys, good):
    """From review: certify put labels of some of the build's classes in the build's columns and
    certified that dataset, but `certify ... --check`, the command it prints, read the labels
    without the build's columns and refused them ("weights produce d_o = 3 outputs, the labels Y
    have 2 columns")."""
    labels = np.array([5, 9, 5, 9, 100, 5, 9])
    built = write(tmp_path / "a.npz", E=good["E"], X=good["X"], labels=labels)
    part = write(tmp_path / "part.npz", E=good["E"][:4], X=good["X"][:4], labels=labels[:4])
    assert run(["build", built, "--out", tmp_path / "run", "--quiet"], capsys)[0] == 0
    weights, cert = tmp_path / "run" / "weights.npz", tmp_path / "cert.json"
    assert run(["certify", weights, part, "--out", cert], capsys)[0] == 0
    code, out, err = run(["certify", weights, part, "--check", cert], capsys)
    assert code == 0 and "certificate ACCEPTED" in out, out + err


def test_a_huge_file_named_report_json_beside_the_weights_is_not_read_whole(tmp_path, capsys, small_run):
    # A hostile trial: a sparse 200 GiB report.json beside valid weights made export (and, with
    # class labels, verify and certify) fail "out of memory; nothing written", naming no file:
    # the report was read whole to hash it. Such a file is no build's report: not linked.
    report = small_run / "report.json"
    report.unlink()
    with open(report, "wb") as f:
        f.truncate(200 * 2**30)
    code, out, err = run(["export", small_run / "weights.npz", "--format", "safetensors",
                          "--out", tmp_path / "m.safetensors"], capsys)
    assert code == 0 and (tmp_path / "m.safetensors").is_file(), err
    assert "describes other weights (or cannot be read): not linked" in out
