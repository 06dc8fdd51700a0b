"""Errors that say what would build (issue #16, item 3): Remark 1 and Proposition 4."""

import json
import numpy as np
import pytest

from construct import InputError, as_dataset, build
from construct.cli import main


def _token_sequences(T=40, n=8, d=16, vocabulary=50, seed=0):
    """Contexts of distinct tokens from a shared vocabulary, the query being the last token: the
    queries repeat (A1 fails) while the context-shifted queries do not."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((vocabulary, d))
    E = V[np.array([rng.choice(vocabulary, n, replace=False) for _ in range(T)])]
    return as_dataset(E, E[:, -1, :].copy(), rng.standard_normal((T, 1)))


def test_repeated_queries_give_a_short_error_that_points_to_proposition_4():
    data = _token_sequences()
    with pytest.raises(InputError) as err:
        build(data, 8)
    text = str(err.value)
    assert len(text.splitlines()) <= 8                      # was more than a dozen lines of spans
    assert "violation(s) found" in text and "more like these" in text
    assert "problems)" not in text                          # the lines are a selection: not counted again
    assert "share their query with another" in text and "Proposition 4" in text
    # ... and what it says builds:
    mean = data.E.mean(axis=1)
    shifted = as_dataset(data.E + mean[:, None, :], data.X + mean, data.Y)
    assert build(shifted, 8).verification.passed


def test_low_kruskal_rank_queries_are_told_about_remark_1_and_it_builds():
    # Queries in a 3-dimensional subspace of R^6, in general position there: Kruskal rank 3 < n = 4.
    rng = np.random.default_rng(1)
    T, n, d, r = 9, 4, 6, 3
    X = rng.standard_normal((T, r)) @ rng.standard_normal((r, d))
    data = as_dataset(rng.standard_normal((T, n, d)), X, rng.standard_normal((T, 1)))
    with pytest.raises(InputError, match=r"--head-dim r.*H\(r − 1\) \+ 1|rank X = 3"):
        build(data, 4)
    result = build(data, 4, head_dim=r)
    assert result.verification.passed and result.capacity == 4 * (r - 1) + 1


def test_the_cli_prints_the_short_error_and_exits_2(tmp_path, capsys):
    data = _token_sequences()
    np.savez(tmp_path / "d.npz", E=data.E, X=data.X, Y=data.Y)
    assert main(["build", str(tmp_path / "d.npz"), "--heads", "8", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 9 and "Proposition 4" in err


def test_assumptions_exits_1_when_a1_fails_unless_only_reporting(tmp_path, capsys):
    data = _token_sequences()
    np.savez(tmp_path / "d.npz", E=data.E, X=data.X, Y=data.Y)
    assert main(["assumptions", str(tmp_path / "d.npz"), "--trials", "200"]) == 1
    out = capsys.readouterr().out
    assert "A1" in out and "FAILS" in out
    assert main(["assumptions", str(tmp_path / "d.npz"), "--trials", "200", "--report-only"]) == 0
    good = as_dataset(*(np.random.default_rng(2).standard_normal(s) for s in ((9, 4, 6), (9, 6), (9, 1))))
    np.savez(tmp_path / "g.npz", E=good.E, X=good.X, Y=good.Y)
    assert main(["assumptions", str(tmp_path / "g.npz"), "--trials", "200"]) == 0


def _collide_after_the_shift(data):
    """Example 9's shifted query made equal to example 2's (its raw query differs)."""
    E, X = data.E.copy(), data.X.copy()
    X[9] = X[2] + E[2].mean(axis=0) - E[9].mean(axis=0)
    return as_dataset(E, X, data.Y)


def test_with_the_pre_layer_an_a3_failure_names_the_shifted_queries_and_no_pre_layer():
    # Found by a user's trial: with --prelayer mean-shift given, the error blamed the raw queries
    # ("X: ...", their rank) and advised --prelayer mean-shift.
    data = _collide_after_the_shift(_token_sequences(T=20, n=4, d=8, vocabulary=200, seed=3))
    for option in ("mean-shift", "auto"):
        with pytest.raises(InputError) as err:
            build(data, 7, prelayer=option)
        text = str(err.value)
        assert "x + mean(E)" in text and "examples 2 and 9" in text, option
        assert "build with --prelayer" not in text, option
    with pytest.raises(InputError) as err:
        build(data, 7, prelayer="mean-shift")
    assert "shifted queries do not meet A3" in str(err.value) and "X: " not in str(err.value)
    with pytest.raises(InputError) as err:
        build(data, 7, prelayer="auto")                  # the raw queries' error, and why auto did not help
    assert "queries do not meet A1" in str(err.value) and "does not help" in str(err.value)


def test_assumptions_with_fewer_queries_than_n_says_so_and_lines_up(tmp_path, capsys):
    # A user's trial: with T < n the report gave "0.0% of sampled subsets independent" (there
    # are none), although the build works; and A2's verdict sat one column off the others.
    # A review then found it exiting 1 on data that builds (`assumptions && build` refused it):
    # with T < n the build needs the T queries independent, and that decides the exit code.
    data = _token_sequences(T=3, n=4, d=6)
    np.savez(tmp_path / "d.npz", E=data.E, X=data.X, Y=data.Y)
    assert main(["assumptions", str(tmp_path / "d.npz")]) == 0
    out = capsys.readouterr().out
    a1 = next(line for line in out.splitlines() if line.startswith("A1 "))
    assert "only 3" in a1 and "sampled" not in a1 and "independent (rank 3)" in a1
    verdicts = [line[18:25] for line in out.splitlines()[1:]]
    assert all(v in ("holds  ", "FAILS  ", "n/a    ") for v in verdicts), out
    assert build(data, 1).verification.passed
    # The JSON says what the text says: A1 n/a (not "holds": false alone) and the verdict.
    assert main(["assumptions", str(tmp_path / "d.npz"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["a1"]["verdict"] == rep["a3"]["verdict"] == "n/a" and rep["a1"]["rank"] == 3
    assert rep["general_position"]["verdict"] == "holds" and rep["passed"] is True
    X = data.X.copy()
    X[2] = X[0]                                                         # two equal queries of three
    np.savez(tmp_path / "twin.npz", E=data.E, X=X, Y=data.Y)
    assert main(["assumptions", str(tmp_path / "twin.npz")]) == 1
    a1 = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("A1 "))
    assert "not independent (rank 2)" in a1
    with pytest.raises(InputError):
        build(as_dataset(data.E, X, data.Y), 1)


def test_assumptions_fail_where_the_labels_have_more_columns_than_the_tokens(tmp_path, capsys):
    # A hostile trial: d_o = 8 > d = 6 passed every line and exited 0, and build then refused it
    # (Theorem 1 needs d_o ≤ d: the readout W_D is d × d_o).
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", E=rng.normal(size=(9, 4, 6)), X=rng.normal(size=(9, 6)), Y=rng.normal(size=(9, 8)))
    assert main(["assumptions", str(tmp_path / "d.npz"), "--trials", "200"]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("outputs"))
    assert line[18:25] == "FAILS  " and "d_o = 8" in line and "d = 6" in line
    assert main(["assumptions", str(tmp_path / "d.npz"), "--trials", "200", "--json", "--report-only"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["outputs"] is False and rep["d_o"] == 8 and rep["passed"] is False
    assert main(["build", str(tmp_path / "d.npz"), "--heads", "4", "--out", str(tmp_path / "run")]) == 2
    capsys.readouterr()
    np.savez(tmp_path / "g.npz", E=rng.normal(size=(9, 4, 6)), X=rng.normal(size=(9, 6)), Y=rng.normal(size=(9, 6)))
    assert main(["assumptions", str(tmp_path / "g.npz"), "--trials", "200"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("outputs"))
    assert line[18:25] == "holds  " and "d_o = 6 ≤ d = 6" in line
