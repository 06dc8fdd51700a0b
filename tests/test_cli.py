"""The command line: the main job, verification, and every bad input (clear error, no file)."""

import json
import subprocess
import sys

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
        "rank": (dict(E=flat, X=X, Y=Y), ["example(s) 2", "full row rank"]),
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
