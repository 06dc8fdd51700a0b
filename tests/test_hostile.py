"""Issue #11, part 3: every bad input and bad option is refused clearly (exit 2, the array or
option named, no traceback, nothing written); valid but extreme input is handled correctly."""

import importlib.util
import io
import json
import os
import subprocess
import sys
import tracemalloc
import warnings
import zipfile

import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from construct import (Dataset, InputError, as_dataset, as_weights, build, feature_matrix, forward, load_dataset,
                       load_weights, synthetic, verify)
from construct.certify import certify
from construct.cli import main
from construct.io import npz_bytes
from construct.limits import INFLATION_FLOOR, MAX_INFLATION, real_array
from construct.precision import MAX_BITS

SMALL = dict(T=7, n=3, d=4)


@pytest.fixture(scope="module")
def small():
    return synthetic("independent", **SMALL, d_o=2, seed=0)


def run(argv, capsys):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:                                          # argparse's usage errors
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


def cli(*argv, cwd=None):
    """The console entry in a fresh interpreter that turns every warning into an error."""
    return subprocess.run([sys.executable, "-W", "error", "-m", "construct", *map(str, argv)],
                          capture_output=True, text=True, cwd=cwd)


# --- T = 0 and extreme scales ------------------------------------------------------------------

def test_no_examples_is_refused_at_every_door(tmp_path, capsys):
    empty = dict(E=np.zeros((0, 3, 4)), X=np.zeros((0, 4)), Y=np.zeros((0, 1)))
    with pytest.raises(InputError, match="no examples"):
        as_dataset(**empty)
    with pytest.raises(InputError, match="no examples"):                # a Dataset made by hand
        build(Dataset(**empty), 1)
    path = tmp_path / "empty.npz"
    path.write_bytes(npz_bytes(empty))
    code, _, err = run(["build", path, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "no examples" in err and not (tmp_path / "o").exists()


@settings(max_examples=40, deadline=None)
@given(st.integers(-1070, 1020), st.integers(-1070, 1020), st.integers(-1070, 1020), st.booleans())
@example(510, 0, 0, False)            # Z Z^T near the top of float64: its trace overflowed in verify
@example(512, 0, 0, False)            # verify's σ hint squared past float64 (a Python OverflowError)
def test_extreme_scales_are_built_exactly_or_refused_with_the_reason(e_E, e_X, e_Y, skip):
    base = synthetic("independent", **SMALL, seed=0)
    E, X, Y = (np.ldexp(a, e) for a, e in ((base.E, e_E), (base.X, e_X), (base.Y, e_Y)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # no RuntimeWarning leaks
        try:
            data = as_dataset(E, X, Y)
            result = build(data, 3, skip=skip)
        except InputError as exc:                                       # refused: says why
            assert "range" in str(exc) or "rescale" in str(exc) or "full row rank" in str(exc), str(exc)
            return
        check = verify(result.weights, data)
    assert check.passed and check.rank_Z == data.T
    assert check.max_abs_error <= 1e-8 * max(1.0, float(np.abs(data.Y).max()))


def test_scales_that_broke_float64_now_build(small):
    # Each of these raised LinAlgError, OverflowError or a RuntimeWarning before.
    for factor in (1e-150, 1e-100, 1e150, 1e200, 1e300):
        data = as_dataset(small.E * factor, small.X * factor, small.Y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = build(data, 3)
        assert verify(result.weights, data).passed
        assert "unit scale" in result.precision_reason


@pytest.mark.parametrize("prelayer", ["none", "mean-shift"])
@pytest.mark.parametrize("top", [6e307, 1e308, 1.7e308])
def test_data_at_float64s_limit_builds_or_is_refused_as_out_of_range(small, top, prelayer):
    # A hostile trial: data scaled to max |E| = max |X| = 1e308 (or 6e307 with the pre-layer, whose
    # shift doubles it) ended in a traceback ("A has a NaN entry", "SVD did not converge", or
    # LAPACK's DLASCL messages): the rank's factorization of Z at that scale overflowed inside.
    k = top / max(np.abs(small.E).max(), np.abs(small.X).max())
    data = as_dataset(small.E * k, small.X * k, small.Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            result = build(data, 3, prelayer=prelayer)
        except InputError as refused:
            assert "data out of range" in str(refused)
        else:
            assert result.verification.passed and verify(result.weights, data).passed


@pytest.mark.parametrize("factor", [1e22, 1e30])
def test_skip_with_queries_far_above_the_labels_is_refused_for_cancellation_not_overflow(small, factor):
    # A new-user trial: the skip connection adds x's first d_o coordinates (here ~factor) to the
    # heads' outputs, so labels near 1 are their difference and float64 loses them; the message
    # blamed overflow or underflow, of which there is none.
    data = as_dataset(small.E * factor, small.X * factor, small.Y)
    with pytest.raises(InputError) as exc:
        build(data, 3, skip=True)
    message = str(exc.value)
    assert "cancel" in message and "--skip" in message and "overflow" not in message, message
    build(data, 3)                                                      # without skip it builds
    # An independent check: at 256 bits the message blamed float64 all the same, and the docs
    # said data of any magnitude was accepted. Beyond 2^±64 the targets are float64 differences
    # whatever the precision; the message says so and where the precision does carry them.
    with pytest.raises(InputError) as exc:
        build(data, 3, skip=True, precision="256")
    assert "whatever the precision" in str(exc.value) and "2^±64" in str(exc.value), str(exc.value)


def test_labels_at_the_edge_of_float64_are_refused_with_the_reason(small):
    data = as_dataset(small.E, small.X, small.Y * 1.7e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="rescale"):
            build(data, 3)


# --- class labels --------------------------------------------------------------------------------

def test_sparse_huge_and_negative_class_ids_become_the_classes_present(tmp_path, capsys):
    base = synthetic("independent", T=9, n=3, d=6, seed=0)
    labels = np.array([2**62, -5, 10**12, -5, 2**62, 10**12, -5, 2**62, 10**12], dtype=np.int64)
    data = as_dataset(base.E, base.X, labels=labels)
    assert data.classes == (-5, 10**12, 2**62) and data.Y.shape == (9, 3)
    assert np.array_equal(np.argmax(data.Y, axis=1), [2, 0, 1, 0, 2, 1, 0, 2, 1])
    path = tmp_path / "cls.npz"
    path.write_bytes(npz_bytes(dict(E=base.E, X=base.X, labels=labels)))
    code, _, _ = run(["build", path, "--out", tmp_path / "o", "--quiet"], capsys)
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert code == 0 and rep["d_o"] == 3 and rep["data"]["classes"] == [-5, 10**12, 2**62]
    code, out, _ = run(["certify", tmp_path / "o" / "weights.npz", tmp_path / "o" / "data.npz"], capsys)
    assert code == 0 and "classification PROVEN" in out


def test_more_classes_than_the_model_can_output_is_refused(tmp_path, capsys):
    base = synthetic("independent", T=9, n=3, d=4, seed=0)
    with pytest.raises(InputError, match="9 classes need d_o = 9.*at most d = 4"):
        as_dataset(base.E, base.X, labels=np.arange(9) * 1000)
    path = tmp_path / "cls.npz"
    path.write_bytes(npz_bytes(dict(E=base.E, X=base.X, labels=np.arange(9))))
    code, _, err = run(["build", path, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "labels: 9 classes" in err and not (tmp_path / "o").exists()


def test_labels_of_the_wrong_length_are_named_as_labels(small):
    # A user's trial: the error named Y, an array the user never gave.
    with pytest.raises(InputError, match=r"X has 7, labels has 9") as err:
        as_dataset(small.E[:7], small.X[:7], labels=np.arange(9) % 2)
    assert "Y has" not in str(err.value)


def test_labels_that_are_not_integers_are_refused(small):
    with pytest.raises(InputError, match="integer"):
        as_dataset(small.E, small.X, labels=np.linspace(0, 1, small.T))
    with pytest.raises(InputError, match="exactly one"):
        as_dataset(small.E, small.X, small.Y, labels=np.zeros(small.T, dtype=int))


# --- memory ----------------------------------------------------------------------------------------

def test_a_request_beyond_memory_is_refused_before_allocating(small, tmp_path, capsys):
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"needs about .* GiB of memory; .* is available"):
            build(small, 10**9)
        with pytest.raises(InputError, match="needs about"):
            synthetic("independent", T=10**11, n=8, d=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20                                            # nothing large was allocated
    code, _, err = run(["build", "--heads", "1000000000", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "GiB" in err and not (tmp_path / "o").exists()


# --- options ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, needle", [
    (dict(heads=3.7), "heads must be an integer"),
    (dict(heads=3.0), "heads must be an integer"),
    (dict(heads=True), "heads must be an integer"),
    (dict(heads=3, head_dim=2.5), "head_dim must be an integer"),
    (dict(heads=3, value_dim=0), "value_dim must be an integer ≥ 1"),
    (dict(heads=3, seed=-1), "seed must be an integer ≥ 0"),
    (dict(heads=3, tol=float("nan")), "tol must be a finite positive number"),
    (dict(heads=3, tol=float("inf")), "tol must be a finite positive number"),
    (dict(heads=3, tol=-1e-8), "tol must be a finite positive number"),
    (dict(heads=3, tol=0.0), "tol must be a finite positive number"),
    (dict(heads=3, precision=52), "from 53 bits"),
    (dict(heads=3, precision=MAX_BITS + 1), f"to {MAX_BITS} bits"),
    (dict(heads=3, precision=200.5), "precision must be"),
    (dict(heads=3, precision="many"), "precision must be"),
    (dict(heads=3, skip="no"), "skip must be True or False"),           # a hostile trial: built with skip on
    (dict(heads=3, skip=2), "skip must be True or False"),
    (dict(heads=3, trace="yes"), "trace must be True or False"),
])
def test_bad_api_options_are_refused_never_truncated(small, kwargs, needle):
    with pytest.raises(InputError, match=needle):
        build(small, **kwargs)


def test_precision_as_an_int_and_numpy_integers_are_accepted(small):
    result = build(small, np.int64(3), precision=200, seed=np.uint8(1))
    assert result.weights.bits == 200 and result.verification.passed


@pytest.mark.parametrize("argv, needle", [
    (["build", "--seed", "-1"], "argument --seed: must be an integer ≥ 0"),
    (["build", "--tol", "nan"], "tol must be a finite positive number"),
    (["build", "--tol", "-1"], "tol must be a finite positive number"),
    (["build", "--precision", "20"], "argument --precision: must be from 53 bits"),
    (["build", "--precision", str(MAX_BITS + 1)], f"to {MAX_BITS} bits"),
])
def test_bad_cli_options_exit_2_and_write_nothing(tmp_path, capsys, argv, needle):
    code, _, err = run([*argv, "--out", tmp_path / "o"], capsys)
    assert code == 2 and needle in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, option", [
    (["build", "--heads", "3", "--heads", "2", "--quiet"], "--heads"),
    (["build", "--tol", "1e-8", "--tol", "1e-20", "--quiet"], "--tol"),
    (["build", "--synthetic", "independent", "--synthetic", "shared", "--quiet"], "--synthetic"),
    (["build", "--out", "{tmp}/elsewhere", "--quiet"], "--out"),
    (["export", "{tmp}/w.npz", "--format", "torch", "--format", "onnx"], "--format"),
    (["certify", "{tmp}/w.npz", "{tmp}/d.npz", "--tol", "1e-8", "--tol", "1e-20"], "--tol"),
    (["capacity", "--vary", "H", "--values", "1", "2", "--values", "3"], "--values"),
])
def test_an_option_given_twice_is_refused_not_overridden(tmp_path, capsys, argv, option):
    # A hostile trial: `build --heads 3 --heads 2` built H = 2, `--out a --out b` wrote only b,
    # `export --format torch --format onnx` wrote ONNX, `certify --tol 1e-8 --tol 1e-20` used
    # 1e-20: the last one silently won.
    argv = [a.format(tmp=tmp_path) for a in argv] + (["--out", tmp_path / "o"] if argv[0] in ("build", "export") else [])
    code, out, err = run(argv, capsys)
    assert code == 2 and f"{option} is given twice" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_bad_tolerance_in_verify_and_certify(tmp_path, capsys, small):
    assert run(["build", "--out", tmp_path / "o", "--quiet"], capsys)[0] == 0
    w, d = tmp_path / "o" / "weights.npz", tmp_path / "o" / "data.npz"
    for cmd in ("verify", "certify"):
        for tol in ("nan", "inf", "-1e-8", "0"):
            code, _, err = run([cmd, w, d, f"--tol={tol}"], capsys)
            assert code == 2 and "tol" in err, (cmd, tol, err)
    weights = load_weights(w)
    data = load_dataset(d)
    with pytest.raises(InputError):
        verify(weights, data, tol=float("nan"))
    with pytest.raises(InputError):
        certify(weights, data, tol=-1.0)


@pytest.mark.parametrize("command", ["build", "verify", "certify"])
def test_a_subnormal_tolerance_is_refused_before_the_work(tmp_path, capsys, small, command):
    # A hostile trial: --tol 1e-320 was accepted and build failed 20 s later. An error that small
    # is held in float64 with fewer significant bits than a normal number: compared against it, a
    # bound of 1.5e-320 keeps 11 bits.
    assert run(["build", "--out", tmp_path / "o", "--quiet"], capsys)[0] == 0
    w, d = tmp_path / "o" / "weights.npz", tmp_path / "o" / "data.npz"
    argv = ["build", "--out", tmp_path / "new"] if command == "build" else [command, w, d]
    code, _, err = run([*argv, "--tol=1e-320"], capsys)
    assert code == 2 and "--tol must be at least 2.2250738585072014e-308" in err, err
    assert not (tmp_path / "new").exists()
    for call in (lambda: build(small, 3, tol=1e-310), lambda: verify(load_weights(w), small, tol=5e-324)):
        with pytest.raises(InputError, match="smallest normal"):
            call()


def test_a_tolerance_whose_allowed_error_overflows_is_refused(tmp_path, capsys, small):
    # A hostile trial: tol · max(1, max |Y|) overflowed to inf, and weights whose outputs were
    # infinite passed verify, export and certify ("max |f − y| inf (allowed inf): PASS").
    result = build(small, 3)
    bad = as_weights(result.weights.W_K, result.weights.W_Q, result.weights.W_V, result.weights.W_O * 1e300,
                     result.weights.W_D * 1e300)
    four = as_dataset(small.E, small.X, small.Y * 4 / np.abs(small.Y).max())     # max |Y| = 4
    for call in (lambda: verify(bad, four, tol=1e308), lambda: certify(bad, four, tol=1e308)):
        with pytest.raises(InputError, match="overflows"):
            call()
    big = as_dataset(small.E, small.X, small.Y * (1e308 / np.abs(small.Y).max()))   # max |Y| = 1e308
    with pytest.raises(InputError, match="overflows"):
        verify(bad, big, tol=5.0)
    bad.save(tmp_path / "w.npz")
    big_path = tmp_path / "d.npz"
    big_path.write_bytes(big.to_bytes())
    for argv in (["verify", tmp_path / "w.npz", big_path, "--tol", "5"],
                 ["certify", tmp_path / "w.npz", big_path, "--tol", "5"],
                 ["export", tmp_path / "w.npz", "--format", "safetensors", "--out", tmp_path / "m.safetensors",
                  "--data", big_path, "--tol", "5"]):
        code, out, err = run(argv, capsys)
        assert code == 2 and "overflows" in err and "PASS" not in out and "PROVEN" not in out, (argv, out, err)
    assert not (tmp_path / "m.safetensors").exists()
    assert verify(result.weights, small, tol=1e300).passed              # large but finite: still a check


def test_features_that_overflow_fail_verify_instead_of_crashing_it(tmp_path, capsys, small):
    # A hostile trial: data scaled by 1e160 (finite, accepted) made the logits overflow, Z held
    # NaN, and verify raised SciPy's "A has a NaN entry" (a traceback from the CLI); verify
    # --json printed Infinity, which is not JSON.
    result = build(small, 3)
    big = as_dataset(small.E * 1e160, small.X * 1e160, small.Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                 # the failure is the verdict, not a warning
        v = verify(result.weights, big)
    assert not v.passed and v.rank_Z == 0 and not np.isfinite(v.max_abs_error)
    result.weights.save(tmp_path / "w.npz")
    (tmp_path / "d.npz").write_bytes(big.to_bytes())
    code, out, err = run(["verify", tmp_path / "w.npz", tmp_path / "d.npz"], capsys)
    assert code == 1 and "FAIL" in out and "not finite" in out and "Traceback" not in err, (out, err)
    code, out, _ = run(["verify", tmp_path / "w.npz", tmp_path / "d.npz", "--json"], capsys)
    report = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert code == 1 and report["passed"] is False and report["max_abs_error"] is None


def test_a_weights_file_whose_skip_is_not_a_boolean_is_refused(tmp_path, small):
    # A hostile trial: skip = 2 in weights.npz was read as True.
    w = build(small, 3).weights
    arrays = {k: v for k, v in w.arrays().items()}
    for bad in (2, -1):
        arrays["skip"] = np.asarray(bad)
        (tmp_path / "w.npz").write_bytes(npz_bytes(arrays))
        with pytest.raises(InputError, match="skip"):
            load_weights(tmp_path / "w.npz")
    arrays["skip"] = np.asarray(1)                                     # 0 and 1 are booleans
    (tmp_path / "w.npz").write_bytes(npz_bytes(arrays))
    assert load_weights(tmp_path / "w.npz").skip is True


# --- high precision --------------------------------------------------------------------------------

def test_weights_at_the_largest_precision_load_back(tmp_path):
    data = synthetic("independent", T=3, n=2, d=3, seed=0)
    result = build(data, 2, precision=MAX_BITS)
    path = tmp_path / "w.npz"
    path.write_bytes(result.weights.to_bytes())
    back = load_weights(path)
    assert back.bits == MAX_BITS and verify(back, data).passed


@pytest.mark.parametrize("bits", [MAX_BITS + 1, 10**9, 52])
def test_weights_files_beyond_the_precision_limits_are_refused(tmp_path, bits):
    data = synthetic("independent", T=3, n=2, d=3, seed=0)
    arrays = build(data, 2, precision=128).weights.arrays()
    arrays["bits"] = np.asarray(bits)
    path = tmp_path / "w.npz"
    path.write_bytes(npz_bytes(arrays))
    with pytest.raises(InputError, match=f"to {MAX_BITS}"):
        load_weights(path)


# --- archives --------------------------------------------------------------------------------------

def _npy_header(shape, dtype="<f8") -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _bomb(path, name: str, nbytes: int, others: dict) -> None:
    """A compressed member holding ``nbytes`` of zeros declared as a float64 array, written in
    chunks (the bomb never exists in memory), beside ordinary members."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
            fh.write(_npy_header((nbytes // 8,)))
            chunk = bytes(1 << 22)
            for _ in range(nbytes // len(chunk)):
                fh.write(chunk)
        for key, value in others.items():
            import io
            buf = io.BytesIO()
            np.lib.format.write_array(buf, value)
            zf.writestr(f"{key}.npy", buf.getvalue())


def test_a_decompression_bomb_is_refused_before_inflating(tmp_path, capsys, small):
    nbytes = 4 * INFLATION_FLOOR                         # 256 MiB of zeros in a few hundred KiB
    path = tmp_path / "bomb.npz"
    _bomb(path, "Y", nbytes, {"E": small.E, "X": small.X})
    assert path.stat().st_size * MAX_INFLATION < nbytes
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="decompression bomb"):
            load_dataset(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20
    code, _, err = run(["verify", path, path], capsys)
    assert code == 2 and "no array was loaded" in err


def test_unexpected_members_are_refused_before_any_is_read(tmp_path, small):
    path = tmp_path / "extra.npz"
    _bomb(path, "payload", 4 * INFLATION_FLOOR, {"E": small.E, "X": small.X, "Y": small.Y})
    with pytest.raises(InputError, match="unexpected member 'payload.npy'"):
        load_dataset(path)


def test_a_file_of_many_stray_members_gets_a_message_of_a_few_lines(tmp_path, small, capsys):
    # A hostile review: every unexpected member was named, so a zip of 100,000 stray members
    # answered with 100,000 lines. The message names the first ones and counts the rest; the
    # exception keeps every problem for a caller that wants them.
    path = tmp_path / "crowd.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(1000):
            zf.writestr(f"stray{i}.npy", b"")
    with pytest.raises(InputError) as info:
        load_dataset(path)
    assert len(info.value.problems) == 1000
    message = str(info.value)
    assert "(1000 problems)" in message and "'stray0.npy'" in message and "and 980 more" in message
    assert message.count("\n") <= 25 and "'stray999.npy'" not in message
    code, _, err = run(["verify", path, path], capsys)
    assert code == 2 and err.count("\n") <= 30 and "and 980 more" in err


def test_a_header_that_lies_about_its_size_is_refused(tmp_path, small):
    path = tmp_path / "liar.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("E.npy", _npy_header((10**6, 10**6)) + bytes(64))
        zf.writestr("X.npy", _npy_header((7, 4)) + small.X.tobytes())
        zf.writestr("Y.npy", _npy_header((7, 2)) + small.Y.tobytes())
    with pytest.raises(InputError, match="'E'.*header declares"):
        load_dataset(path)


def test_a_member_a_few_bytes_off_its_header_says_how_many(tmp_path, small):
    # A hostile trial: two bytes after E's data read "its header declares 1.88 KiB of data but
    # the member holds 1.88 KiB"; sizes that round alike are given in bytes.
    path = tmp_path / "trail.npz"
    E = np.ones((10, 4, 6))                                             # 1,920 bytes: 1.88 KiB
    buf = io.BytesIO()
    np.lib.format.write_array(buf, E)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("E.npy", buf.getvalue() + b"xx")
        zf.writestr("X.npy", _npy_header((10, 6)) + np.ones((10, 6)).tobytes())
        zf.writestr("Y.npy", _npy_header((10, 1)) + np.ones((10, 1)).tobytes())
    with pytest.raises(InputError, match=r"'E'.*declares 1,920 bytes of data but the member holds 1,922 bytes"):
        load_dataset(path)


def test_a_header_with_a_negative_size_is_refused_as_such(tmp_path, small):
    path = tmp_path / "negative.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("E.npy", _npy_header((-1, 3, 5)) + bytes(64))
        zf.writestr("X.npy", _npy_header((7, 4)) + small.X.tobytes())
        zf.writestr("Y.npy", _npy_header((7, 2)) + small.Y.tobytes())
    with pytest.raises(InputError, match=r"'E'.*shape \(-1, 3, 5\), with a negative size") as exc:
        load_dataset(path)
    assert "bytes" not in str(exc.value)


def test_weights_with_an_extra_array_are_refused(tmp_path, small):
    arrays = build(small, 3).weights.arrays()
    arrays["notes"] = np.zeros(3)
    path = tmp_path / "w.npz"
    path.write_bytes(npz_bytes(arrays))
    with pytest.raises(InputError, match="unexpected member 'notes.npy'"):
        load_weights(path)


# --- the caller's arrays ---------------------------------------------------------------------------

def test_later_changes_to_the_callers_arrays_cannot_slip_past_validation(small):
    E, X, Y = small.E.copy(), small.X.copy(), small.Y.copy()
    data = as_dataset(E, X, Y)
    E[0, 0, 0], X[1, 0], Y[2, 0] = np.nan, np.inf, np.nan
    assert np.isfinite(data.E).all() and np.isfinite(data.X).all() and np.isfinite(data.Y).all()
    with pytest.raises(ValueError):
        data.E[0, 0, 0] = 1.0                                            # read-only
    weights = build(data, 3).weights
    with pytest.raises(ValueError):
        weights.W_V[0, 0, 0] = 1.0
    W = [np.array(getattr(weights, k)) for k in ("W_K", "W_Q", "W_V", "W_O", "W_D")]
    copy = as_weights(*W, skip=weights.skip)
    W[2][0, 0, 0] = np.nan
    assert verify(copy, data).passed


def test_a_dataset_made_by_hand_is_validated_at_the_door(small):
    E = small.E.copy()
    E[3, 1, 2] = np.nan
    with pytest.raises(InputError, match="E: non-finite values.*example\\(s\\) 3"):
        build(Dataset(E, small.X, small.Y), 3)
    with pytest.raises(InputError, match="non-finite"):
        verify(build(small, 3).weights, Dataset(E, small.X, small.Y))


# --- warnings --------------------------------------------------------------------------------------

@pytest.mark.parametrize("factors", [(1e39, 1e39, 1e300), (1e-40, 1.0, 1e-300), (1e300, 1.0, 1.0)])
def test_no_runtime_warning_reaches_stderr_and_the_report_is_strict_json(tmp_path, small, factors):
    fE, fX, fY = factors
    path = tmp_path / "d.npz"
    path.write_bytes(npz_bytes(dict(E=small.E * fE, X=small.X * fX, Y=small.Y * fY)))
    proc = cli("build", path, "--out", tmp_path / "o", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr

    def strict(name):
        raise ValueError(f"{name} in report.json")
    rep = json.loads((tmp_path / "o" / "report.json").read_text(), parse_constant=strict)
    assert rep["float32"]["survives"] is False                            # beyond float32's range
    for cmd in ("verify", "certify"):
        proc = cli(cmd, tmp_path / "o" / "weights.npz", tmp_path / "o" / "data.npz")
        assert proc.returncode == 0 and "Warning" not in proc.stderr, (cmd, proc.stderr)


def test_outputs_beyond_float64_print_no_warning_when_certified_by_intervals(tmp_path, small):
    # A hostile trial: weights whose outputs pass float64's range (W_O and W_D times 1e308) were
    # judged right ("the enclosure of the outputs is not finite"), but stderr also got NumPy's
    # "RuntimeWarning: overflow encountered in <lambda>" from rounding the interval ends to float64.
    w = build(small, 3).weights.arrays()
    w["W_O"], w["W_D"] = w["W_O"] * 1e308, w["W_D"] * 1e308
    (tmp_path / "w.npz").write_bytes(npz_bytes(w))
    (tmp_path / "d.npz").write_bytes(small.to_bytes())
    for method in ("interval", "auto"):
        done = cli("certify", tmp_path / "w.npz", tmp_path / "d.npz", "--method", method)
        assert done.returncode == 1 and "not finite" in done.stdout, (done.stdout, done.stderr)
        assert "Warning" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_read_only_file_system_is_a_clear_write_error(tmp_path, monkeypatch):
    # On a read-only file system even removing a temporary file that was never made fails
    # (EROFS, not ENOENT): the error is still the one that names the file and the folder.
    import errno
    import os
    from pathlib import Path

    from construct.errors import OutputError
    from construct.io import write_atomic

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(os, "open", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(OutputError, match=r"cannot write m\.pt into .*Read-only file system.*nothing was changed"):
        write_atomic(tmp_path / "m.pt", b"payload")


def test_the_python_entry_points_name_a_wrong_argument(small):
    # A hostile trial: feature_matrix(E of 7 examples, X of 3) returned 3 rows; forward(E, X, None),
    # check_assumptions(an array) and kruskal_rank(a vector) raised AttributeError or IndexError;
    # load_weights of a 5,000-character name raised OSError.
    from construct import feature_matrix
    from construct.assumptions import check_assumptions, kruskal_rank
    w = build(small, 3).weights
    cases = [(lambda: feature_matrix(small.E, small.X[:3], w), "E holds 7 contexts but X 3 queries"),
             (lambda: feature_matrix(small.E[:, :, :3], small.X, w), "E: expected shape"),
             (lambda: forward(small.E, small.X, None), "weights"),
             (lambda: check_assumptions(small.E), "dataset"),
             (lambda: kruskal_rank(np.ones(3)), "V: expected"),
             (lambda: load_weights("x" * 5000), "weights file: the path is 5000 bytes"),
             (lambda: load_weights("x" * 200), "does not exist or is not a file")]
    for call, needle in cases:
        with pytest.raises(InputError, match=needle):
            call()


def test_the_kruskal_checks_name_a_wrong_argument(capfd):
    # A hostile review: kruskal_check and sampled_independence, public beside kruskal_rank, raised
    # AttributeError on a list, TypeError on required=1.5, ValueError ("need at least one array to
    # stack") on trials=0, and on an inf printed LAPACK's "DLASCL ... illegal value" lines first.
    from construct.assumptions import kruskal_check, sampled_independence
    cases = [(lambda: kruskal_check([[1.0, 2.0], [3.0, 4.0]], 2, "x").exact_rank == 2, None),
             (lambda: sampled_independence([[1.0, 2.0], [3.0, 4.0]], 2, trials=10), None),
             (lambda: kruskal_check(np.eye(3), 1.5, "x"), "required must be an integer"),
             (lambda: kruskal_check(np.eye(3), 2, "x", trials=0), "trials must be an integer ≥ 1"),
             (lambda: sampled_independence(np.eye(3), 2, seed=-1), "seed must be an integer ≥ 0"),
             (lambda: kruskal_check(np.array([[np.inf, 1.0], [1.0, 2.0]]), 1, "x"), "V: non-finite")]
    for call, needle in cases:
        if needle is None:
            assert call()
            continue
        with pytest.raises(InputError, match=needle):
            call()
    assert "DLASCL" not in capfd.readouterr().err


def test_a_small_integer_file_is_sized_as_the_float64_arrays_it_becomes(tmp_path, monkeypatch):
    # A hostile trial: an int8 .npz of 3.9 GB passed the size check and needed 31 GB once
    # converted to float64: "out of memory" at the end instead of a refusal with the estimate.
    import construct.io as cio
    rng = np.random.default_rng(0)
    T, n, d = 2000, 8, 64                                              # 1 MB of int8 contexts
    E = rng.integers(-5, 6, (T, n, d), dtype=np.int8)
    np.savez(tmp_path / "d.npz", E=E, X=E[:, 0, :], Y=np.zeros((T, 1), dtype=np.int8))
    monkeypatch.setattr(cio, "available_memory", lambda: 4 * 2**20)   # room for the int8, not the float64
    with pytest.raises(InputError, match="memory"):
        load_dataset(tmp_path / "d.npz")


def test_assumptions_on_data_near_float64s_limit_prints_no_warning(tmp_path, small):
    # A hostile trial: data near 1e300 printed NumPy's overflow warnings (the Gram matrices of the
    # quick A2 test overflow; the singular values then decide, as they should).
    big = as_dataset(small.E * 1e300, small.X * 1e300, small.Y)
    (tmp_path / "d.npz").write_bytes(big.to_bytes())
    done = cli("assumptions", tmp_path / "d.npz", "--report-only")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "A2                holds" in done.stdout


def test_assumptions_near_float64s_largest_numbers_report_what_they_do_at_unit_scale(tmp_path, small):
    # A hostile review: with E and X near 1.7e308 (data build takes, at unit scale) the singular
    # values of a context or of a few queries passed float64's range, so A1 and A2 failed for every
    # example, and the vectors x + mean(E) of A3 overflowed to inf: the SVD printed thousands of
    # LAPACK lines and the command stopped with exit 2 on "V: non-finite values", an array the
    # user never gave. Ranks ignore a power of two, so the report is the unit-scale data's.
    from construct.assumptions import check_assumptions
    big = as_dataset(small.E * 2.0**1023, small.X * 2.0**1023, small.Y)
    (tmp_path / "d.npz").write_bytes(big.to_bytes())
    done = cli("assumptions", tmp_path / "d.npz", "--json")
    assert done.stderr == "" and done.returncode == 0, done.stderr[-500:]
    assert json.loads(done.stdout) == check_assumptions(small).to_dict()


def test_a_zero_dimensional_boolean_array_is_a_boolean(small):
    # A review: np.load(...)["skip"] is a 0-d array; build refused it where as_weights took it.
    assert build(small, 3, skip=np.array(False)).weights.skip is False
    assert build(small, 3, skip=np.array(True)).weights.skip is True
    with pytest.raises(InputError, match="skip must be True or False"):
        build(small, 3, skip=np.array([True]))


def test_every_true_or_false_option_of_the_python_api_refuses_a_string(small, tmp_path):
    # A hostile trial: synthetic(positional="no") added the encoding (a non-empty string is
    # truthy), where build(skip="yes") is refused: options are refused, never coerced.
    from construct.datasets import digits
    from construct.teach import teach, tiny_dataset
    result = build(small, 3)
    calls = [("positional", lambda v: synthetic("independent", T=7, n=3, d=4, positional=v)),
             ("shared", lambda v: tiny_dataset(shared=v)),
             ("rational", lambda v: tiny_dataset(rational=v)),
             ("color", lambda v: teach().text(color=v)),
             ("force", lambda v: result.save(tmp_path / "run", force=v))]
    if importlib.util.find_spec("sklearn") is not None:
        calls.append(("positional", lambda v: digits(30, positional=v)))
    if importlib.util.find_spec("torch") is not None:
        from construct.baselines import gradient_descent
        calls.append(("skip", lambda v: gradient_descent(small, 3, skip=v, steps=1)))
    for name, call in calls:
        with pytest.raises(InputError, match=f"{name} must be True or False, got 'no'"):
            call("no")
    assert not (tmp_path / "run").exists()


def test_wrong_types_at_the_python_doors_are_named_not_a_type_error(small, tmp_path):
    # A hostile trial: load_dataset(None), Weights.save(None), read_certificate(5),
    # sweep("H", None) raised TypeError from deep inside; build(progress=5) failed only after
    # its first head; a NUL in a path was a bare "embedded null byte".
    import io as _io

    from construct.certify import read_certificate
    from construct.export import export
    from construct.sweeps import sweep
    result = build(small, 3)
    cases = [(lambda: load_dataset(None), "dataset file: expected a path .*got NoneType"),
             (lambda: load_weights(3), "weights file: expected a path .*got int"),
             (lambda: load_weights(_io.BytesIO(b"x")), "weights file: expected a path .*got BytesIO"),
             (lambda: result.weights.save(None), "output: expected a path"),
             (lambda: result.weights.save(str(tmp_path / "a\0b")), "holds a NUL character"),
             (lambda: small.save(None), "output: expected a path"),
             (lambda: result.save(None), "output folder: expected a path"),
             (lambda: result.save(str(tmp_path / "a\0b")), "holds a NUL character"),
             (lambda: export(result.weights, "safetensors", None), "out: expected a path"),
             (lambda: read_certificate(5), "expected a certificate's JSON text .*got int"),
             (lambda: sweep("H", None), "values: expected a sequence of integers, got NoneType"),
             (lambda: sweep("H", 2), "values: expected a sequence of integers, got int"),
             (lambda: build(small, 3, progress=5), "progress must be a function or None, got int"),
             (lambda: certify(result.weights, small, progress="yes"), "progress must be a function")]
    for call, needle in cases:
        with pytest.raises(InputError, match=needle):
            call()
    assert sorted(p.name for p in tmp_path.iterdir()) == []              # nothing written
    small.save(tmp_path / "d.npz")
    assert load_dataset(os.fsencode(tmp_path / "d.npz")).T == small.T      # a bytes path is a path


def test_a_dataset_or_weights_made_by_hand_has_a_repr_and_its_errors_name_every_array(small):
    # A hostile trial: repr(Dataset(None, None, None)) and repr(Weights(lists…)) raised
    # AttributeError; verify on such a dataset said only "give exactly one of Y and labels".
    from construct import Weights
    assert repr(Dataset(None, None, None)) == "Dataset(E: NoneType, X: NoneType, Y: NoneType)"
    assert repr(Weights([[1.0]], [[1.0]], [[1.0]], [[1.0]], [[1.0]])).startswith("Weights(W_K: (1, 1), W_Q: (1, 1)")
    with pytest.raises(InputError) as exc:
        verify(build(small, 3).weights, Dataset(None, None, None))
    message = str(exc.value)
    assert "E: missing (None)" in message and "X: missing (None)" in message and "exactly one of Y" in message


def test_a_build_result_whose_weights_changed_is_not_saved_with_its_report(small, tmp_path):
    # A hostile trial: result.weights replaced (or W_D edited in place after setting it writeable)
    # and then result.save(...) wrote a report.json saying "passed": true, max error 2.2e-16, with
    # the sha256 of the new weights, which do not memorize.
    from dataclasses import replace

    from construct import as_weights
    result = build(small, 3)
    result.save(tmp_path / "as_built")                                  # unchanged: saved
    assert json.loads((tmp_path / "as_built" / "report.json").read_text())["verification"]["passed"]
    w = result.weights
    zeroed = as_weights(w.W_K, w.W_Q, w.W_V, w.W_O, np.zeros_like(w.W_D))

    def replaced(r):
        r.weights = zeroed

    with pytest.raises(ValueError):         # editing in place: no longer possible (limits.locked)
        result.weights.W_D.flags.writeable = True
    for change in (replaced,):
        result = build(small, 3)
        change(result)
        with pytest.raises(InputError, match="not those the build verified"):
            result.save(tmp_path / change.__name__)
        assert not (tmp_path / change.__name__).exists()
    with pytest.raises(InputError, match="not those the build verified"):
        replace(build(small, 3), weights=zeroed).save(tmp_path / "replace")


def _patched_members(raw: bytes, local_offset: int, central_offset: int, value: int) -> bytes:
    """``raw`` with a 2-byte field of every local and central zip header set to ``value``."""
    import struct
    out = bytearray(raw)
    for signature, offset in ((b"PK\x03\x04", local_offset), (b"PK\x01\x02", central_offset)):
        i = 0
        while (j := out.find(signature, i)) >= 0:
            out[j + offset:j + offset + 2] = struct.pack("<H", value)
            i = j + 4
    return bytes(out)


@pytest.mark.parametrize("damage", ["unbalanced header", "unknown compression", "encrypted flag"])
def test_a_damaged_archive_is_refused_clearly_everywhere(tmp_path, capsys, small, damage):
    # A hostile trial: these three crashed every reader with a traceback and exit 1
    # (tokenize.TokenError, NotImplementedError, RuntimeError), which `certify --check` reads as
    # a rejected certificate.
    import io as bytes_io
    arrays = {"E": small.E, "X": small.X, "Y": small.Y}
    plain = npz_bytes(arrays)
    if damage == "unbalanced header":
        buf = bytes_io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for name, a in arrays.items():
                member = bytes_io.BytesIO()
                np.save(member, a)
                raw = member.getvalue()
                if name == "Y":
                    shape = repr(a.shape).encode()
                    raw = raw.replace(shape, shape[:-1] + b" ")
                zf.writestr(f"{name}.npy", raw)
        payload = buf.getvalue()
    elif damage == "unknown compression":
        payload = _patched_members(plain, 8, 10, 9)                     # method 9, deflate64
    else:
        payload = _patched_members(plain, 6, 8, 1)                      # flag bit 0, encrypted
    bad = tmp_path / "bad.npz"
    bad.write_bytes(payload)
    with pytest.raises(InputError, match="bad.npz"):
        load_dataset(bad)
    for argv in (["assumptions", bad], ["build", bad, "--out", tmp_path / "o"]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "bad.npz" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("bad, needle", [
    (lambda E: E.astype(np.complex128), "complex"),
    (lambda E: E.astype(str), "not a real number type"),
    (lambda E: E.astype(object), "object"),
    (lambda E: np.where(np.arange(E.shape[0])[:, None, None] == 2, np.nan, E), "example(s) 2"),
    (lambda E: [[[1.0, 2.0], [3.0]]], "not an array of numbers"),
])
def test_forward_refuses_inputs_that_are_not_real_numbers(small, bad, needle):
    # A hostile trial: forward checked only the shapes: complex inputs lost their imaginary parts
    # with a ComplexWarning, NaN came back as NaN outputs, strings and object arrays raised
    # numpy's TypeError, a ragged list its ValueError, and a list was reported as shape ().
    w = build(small, 3).weights
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="E") as exc:
            forward(bad(small.E), small.X, w)
    assert needle in str(exc.value), str(exc.value)


def test_forward_takes_lists_and_integers_and_an_empty_batch(small):
    w = build(small, 3).weights
    out = forward(small.E.tolist(), small.X.tolist(), w)
    assert np.array_equal(out, forward(small.E, small.X, w))
    assert forward(small.E[:0], small.X[:0], w).shape == (0, small.d_o)
    assert forward((np.ones((2, 3, 4)) + np.eye(3, 4)).astype(np.int64), np.ones((2, 4), dtype=np.int8), w).shape == (2, 2)


def test_a_ragged_list_is_refused_by_as_dataset_and_as_weights():
    with pytest.raises(InputError, match="E: not an array of numbers"):
        as_dataset([[[1.0], [1.0, 2.0]]], [[1.0]], [1.0])
    with pytest.raises(InputError, match="W_K"):
        as_weights(W_K=[[[1.0], [1.0, 2.0]]], W_Q=np.ones((1, 2, 1)), W_V=np.ones((1, 2, 1)),
                   W_O=np.ones((1, 2)), W_D=np.ones((2, 1)))


def test_contexts_of_full_rank_only_beyond_float64_are_named_as_such(small):
    # A hostile trial: columns scaled by 1e-200 and 1e200 keep every context of rank n in exact
    # arithmetic, and the refusal said plainly "not of full row rank", which is untrue; the
    # rank is lost to float64's precision, and the columns' scales are the cause.
    scale = np.array([1e-200, 1.0, 1e200, 1.0])
    data = as_dataset(small.E * scale, small.X * scale, small.Y)
    with pytest.raises(InputError) as exc:
        build(data, 3)
    message = str(exc.value)
    assert "float64's precision" in message and "columns differ in size by a factor" in message, message
    with pytest.raises(InputError) as exc:                              # a plain repeated token: no such hint
        build(as_dataset(np.concatenate([small.E[:, :1], small.E[:, :2]], axis=1), small.X, small.Y), 3)
    assert "not of full row rank" in str(exc.value) and "columns differ" not in str(exc.value)


def test_tokens_of_sizes_beyond_float64_are_named_as_such(small):
    # From a hostile numerical review: tokens of 1e150 and 1e-150 in one context are independent
    # in exact arithmetic, and the refusal advised removing "the repeated (or dependent) tokens",
    # though nothing repeats; it names the tokens' sizes as the cause.
    E = small.E.copy()
    E[1, 0] *= 1e150
    E[1, 1] *= 1e-150
    with pytest.raises(InputError) as exc:
        build(as_dataset(E, small.X, small.Y), 3)
    message = str(exc.value)
    assert "example(s) 1 " in message and "tokens of example 1 differ in size by a factor of at least 2^" in message
    assert "columns differ" not in message, message
    with pytest.raises(InputError) as exc:                              # a plain repeated token: no such hint
        build(as_dataset(np.concatenate([small.E[:, :1], small.E[:, :2]], axis=1), small.X, small.Y), 3)
    assert "differ in size" not in str(exc.value)


def test_queries_of_sizes_beyond_float64_are_named_as_such():
    # From a hostile numerical review: queries of 1e200 and 1e-200 among ones of size 1. The
    # refusal said that example 0 (size 1) "lies in the span of" group G_2 at "distance 0": at
    # the unit scale of the test its distance's square underflowed. It names the sizes instead.
    rng = np.random.default_rng(0)
    E, X, Y = rng.standard_normal((5, 3, 6)), rng.standard_normal((5, 6)), rng.standard_normal((5, 1))
    X[1] *= 1e200
    X[2] *= 1e-200
    with pytest.raises(InputError) as exc:
        build(as_dataset(E, X, Y), 2)
    message = str(exc.value)
    assert "example 0 lies in the span" not in message, message
    assert "queries differ in size by a factor of at least 2^" in message, message
    assert "the ranks in these lines are float64's" in message      # "rank X = 1" is float64's, not exact
    with pytest.raises(InputError) as exc:                 # queries of one size: no such line
        build(as_dataset(E, np.repeat(X[:1] * 0 + 1.0, 5, axis=0), Y), 2, prelayer="none")
    assert "differ in size" not in str(exc.value)


def test_long_double_values_beyond_float64_are_named_as_such(small):
    # A hostile trial: a long double 1e400 gave "RuntimeWarning: overflow encountered in cast",
    # then "non-finite values (NaN or inf)", though the value is finite where it was written.
    E = small.E.astype(np.longdouble)
    E[4, 0, 0] = np.longdouble("1e400")
    if not np.isfinite(E[4, 0, 0]):
        pytest.skip("this platform's long double is float64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=r"E: values beyond float64's range .*example\(s\) 4"):
            as_dataset(E, small.X, small.Y)
        with pytest.raises(InputError, match="W_K: values beyond float64's range"):
            as_weights(W_K=E[3:6].transpose(0, 2, 1), W_Q=np.ones((3, 4, 3)), W_V=np.ones((3, 4, 1)),
                       W_O=np.ones((3, 4)), W_D=np.ones((4, 1)))


def test_the_k_equals_1_advice_names_what_is_short(small):
    # A hostile trial: with --head-dim 1 the advice was "raise the head dim and context size",
    # though the context (n = 3) was already enough.
    with pytest.raises(InputError) as exc:
        build(small, 3, head_dim=1)
    message = str(exc.value)
    assert "head dim" in message and "context size" not in message, message
    one_token = as_dataset(small.E[:, :1], small.X, small.Y)
    with pytest.raises(InputError) as exc:
        build(one_token, 3)
    assert "context" in str(exc.value) and "head dim" not in str(exc.value).split("k = 1")[-1], str(exc.value)


def test_forward_on_long_doubles_and_empty_batches_of_any_kind(small):
    # A review: long doubles beyond float64 passed forward's checks and overflowed inside it; an
    # empty batch came back float32 for float32 inputs (float64 otherwise), and an empty batch of
    # mpmath numbers for high-precision weights still raised numpy's reshape error.
    w = build(small, 3).weights
    E = small.E.astype(np.longdouble)
    E[1, 0, 0] = np.longdouble("1e400")
    if np.isfinite(E[1, 0, 0]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(InputError, match=r"E: values beyond float64's range .*example\(s\) 1"):
                forward(E, small.X, w)
        with pytest.raises(InputError, match="no examples"):          # (it raised numpy's reshape error)
            as_dataset(np.zeros((0, 3, 4), np.longdouble), np.zeros((0, 4)), np.zeros((0, 1)))
    assert forward(small.E[:0].astype(np.float32), small.X[:0].astype(np.float32), w).dtype == np.float64
    high = build(small, 3, precision=100).weights
    empty = forward(small.E[:0].astype(object), small.X[:0].astype(object), high)
    assert empty.shape == (0, small.d_o)


def test_sizes_of_hundreds_of_digits_are_refused_as_too_large(tmp_path, capsys, small):
    # A hostile trial: sizes past about 320 digits crashed in the memory estimate's message with
    # "OverflowError: integer division result too large for a float", exit 1.
    huge = "9" * 400
    for argv in (["build", "--out", tmp_path / "o", "--dim", huge], ["teach", "--dim", huge]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "Traceback" not in err and len(err) < 1000, err[:300]
    with pytest.raises(InputError):
        build(small, 10 ** 400)


def test_an_output_that_is_a_device_fifo_is_refused_not_replaced(tmp_path, capsys, small):
    # A hostile trial: `capacity --csv /dev/null` (as root) replaced the device with a regular file.
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    code, _, err = run(["capacity", "--vary", "H", "--values", "1", "--context", "4", "--dim", "8", "--csv", fifo],
                       capsys)
    assert code == 2 and "not a regular file" in err and fifo.is_fifo()
    from construct.io import write_atomic
    with pytest.raises(InputError, match="not a regular file"):
        write_atomic(fifo, b"x")
    assert fifo.is_fifo()


def test_forward_checks_mpmath_inputs_for_high_precision_weights(small):
    # A hostile trial: with object arrays the checks were skipped: an mpf NaN gave a NaN output,
    # an mpc or a string numpy's or mpmath's TypeError; an object E beside a float X was refused.
    import mpmath
    high = build(small, 3, precision=100).weights
    to_mp = np.frompyfunc(mpmath.mpf, 1, 1)
    E, X = to_mp(small.E), to_mp(small.X)
    good = forward(E, X, high)
    assert good.shape == (small.T, small.d_o)
    assert np.array_equal(forward(E, small.X, high), good)                 # mixed: taken
    for bad in (mpmath.mpf("nan"), mpmath.mpc(1, 1), "1.0", True):
        E_bad = E.copy()
        E_bad[5, 0, 0] = bad
        with pytest.raises(InputError, match=r"E: not a finite real number .*example\(s\) 5"):
            forward(E_bad, X, high)


def test_long_double_values_below_float64_are_refused_not_flushed_to_zero(small):
    # Left from a hostile trial: a long double 1e-400 became 0 in float64 without a word, so the
    # data built on were not the data given.
    E = small.E.astype(np.longdouble)
    E[2, 1, 0] = np.longdouble("1e-400")
    if E[2, 1, 0] == 0:
        pytest.skip("this platform's long double is float64")
    with pytest.raises(InputError, match=r"E: nonzero values below float64's range .*example\(s\) 2"):
        as_dataset(E, small.X, small.Y)
    w = build(small, 3).weights
    with pytest.raises(InputError, match=r"X: nonzero values below float64's range .*example\(s\) 0"):
        X = small.X.astype(np.longdouble)
        X[0, 0] = np.longdouble("-1e-4000")
        forward(small.E, X, w)
    tiny = small.E.astype(np.longdouble)
    tiny[2, 1, 0] = np.longdouble(np.float64("1e-310"))              # float64 holds it (subnormal)
    assert as_dataset(tiny, small.X, small.Y).E[2, 1, 0] == np.float64("1e-310")


def test_forward_refuses_to_return_nan_where_float64_overflows(small):
    # Left from a hostile trial: inputs near 1e155 (weights built for unit-scale data) overflowed
    # the logits, and forward returned NaN for every example without a word.
    w = build(small, 3).weights
    scale = np.ones(small.T)
    scale[[1, 4]] = 1e160
    with np.errstate(all="raise"):                        # no floating-point warning either
        with pytest.raises(InputError, match=r"float64 overflows .*example\(s\) 1, 4"):
            forward(small.E * scale[:, None, None], small.X * scale[:, None], w)
        good = forward(small.E * 1e100, small.X * 1e100, w)          # large, within range: computed
    assert np.isfinite(good).all()
    high = build(small, 3, precision=100).weights                    # mpmath's range is enough
    out = forward((small.E * 1e160).astype(object), (small.X * 1e160).astype(object), high)
    assert all(mpmath.isfinite(v) for v in out.ravel())


@pytest.mark.parametrize("kind", ["independent", "shared"])
def test_a_raising_numpy_error_state_does_not_break_the_engine(kind):
    # Found while fixing forward's overflow: under np.seterr(all="raise"), a setting users debug
    # with, build and certify stopped at the first benign underflow (a saturated softmax's exp,
    # an enclosure's product) with FloatingPointError.
    data = synthetic(kind, **SMALL, seed=0)
    with np.errstate(all="ignore"):
        expected = build(data, 3, seed=0)
    with np.errstate(all="raise"):
        result = build(data, 3, seed=0)
        assert verify(result.weights, data).passed
        assert certify(result.weights, data).claims["memorization"]["proven"]
        assert np.abs(forward(data.E, data.X, result.weights) - data.Y).max() < 1e-8
    for name in ("W_K", "W_Q", "W_V", "W_O", "W_D"):                 # the same weights, bit for bit
        assert np.array_equal(getattr(result.weights, name), getattr(expected.weights, name)), name


def test_the_engine_judges_overflow_itself_under_any_numpy_error_state(small):
    # verify judges an overflowed Z as a failure under its own np.errstate; a caller's "raise" must
    # neither turn that into FloatingPointError nor (the first version of the fix) into warnings.
    w = build(small, 3).weights
    far = as_dataset(small.E * 1e160, small.X * 1e160, small.Y)
    for mode in ("raise", "warn", "ignore"):
        with warnings.catch_warnings(), np.errstate(all=mode):
            warnings.simplefilter("error")
            v = verify(w, far)
            assert not v.passed and v.rank_Z == 0 and np.isnan(v.sigma_min_Z), v
            assert np.geterr()["under"] == mode                        # the caller's state is back


def test_forward_with_its_arguments_in_another_order_says_so(small):
    # Found trying forward by hand: forward(weights, E, X) said "E: object array; give a numeric
    # (float or int) array", which does not point at the order of the arguments.
    w = build(small, 3).weights
    with pytest.raises(InputError, match=r"forward\(E, X, weights\)"):
        forward(w, small.E, small.X)
    with pytest.raises(InputError, match=r"forward\(E, X, weights\)"):
        forward(small.E, w, small.X)


def test_values_float64_cannot_hold_exactly_are_refused_not_rounded(small):
    # A hostile trial: int64 labels 2**53 + 1 (and long doubles with more than 53 significant bits)
    # were rounded to float64 without a word, so a certificate's "max |f - y| <= 1.2e-41" was
    # accepted by --check while the exact model missed the file's own labels by 1.0; and examples
    # that differ only beyond float64 were called identical ("no model memorizes them").
    Y = np.array([[5], [7], [2 ** 53 + 1], [3], [2 ** 60 + 1], [1], [2]], dtype=np.int64)
    with pytest.raises(InputError, match=r"Y: values float64 cannot hold exactly .*example\(s\) 2, 4"):
        as_dataset(small.E, small.X, Y)
    with pytest.raises(InputError, match=r"Y: values float64 cannot hold exactly .*example\(s\) 6"):
        as_dataset(small.E, small.X, np.array([[0], [1], [2], [3], [4], [5], [2 ** 64 - 1]], dtype=np.uint64))
    held = as_dataset(small.E, small.X, np.array([[2 ** 53], [-2 ** 62], [0], [1], [2], [3], [4]], dtype=np.int64))
    assert held.Y[0, 0] == 2.0 ** 53 and held.Y[1, 0] == -2.0 ** 62           # powers of two: exact
    w = build(small, 3).weights
    with pytest.raises(InputError, match=r"X: values float64 cannot hold exactly .*example\(s\) 1"):
        X = small.X.astype(np.int64) * 0
        X[1, 0] = 2 ** 53 + 1
        forward(small.E, X, w)
    E = small.E.astype(np.longdouble)
    if np.finfo(np.longdouble).nmant > 52:                              # an x86 long double, say
        E[3, 0, 1] *= 1 + np.longdouble(2) ** -60
        with pytest.raises(InputError, match=r"E: values float64 cannot hold exactly .*example\(s\) 3"):
            as_dataset(E, small.X, small.Y)
    exact = as_dataset(small.E.astype(np.longdouble), small.X, small.Y)         # float64 values: taken
    assert np.array_equal(exact.E, small.E)



def test_lists_mixing_floats_with_integers_float64_cannot_hold_are_refused_not_rounded(small):
    # A hostile trial: a list of integers beyond 2^53 was refused, but the same integer beside a
    # float ([[0.5, 2**60 + 1]]) was rounded to 2**60 without a word: NumPy makes such a list
    # float64 as it converts it, before any check sees an integer. as_dataset, forward,
    # as_weights, datasets.tokens and kruskal_rank all took it.
    from construct import datasets
    from construct.assumptions import kruskal_rank
    big = 2**60 + 1
    refused = r"{}: values float64 cannot hold exactly \(integers beyond 2\^53.* {}\(s\) {};"
    Y = small.Y.tolist()
    Y[3][1] = big
    with pytest.raises(InputError, match=refused.format("Y", "example", 3)):
        as_dataset(small.E, small.X, Y)
    with pytest.raises(InputError, match=refused.format("Y", "example", 3)):    # integers alone: as before
        as_dataset(small.E, small.X, [[0, 1]] * 3 + [[0, big]] + [[1, 0]] * 3)
    X = small.X.tolist()
    X[5][1] = np.uint64(2**64 - 1)                                       # NumPy's integers too
    E = [c for c in small.E]                                             # a list of arrays, one of them integers
    E[4] = np.zeros((3, 4), dtype=np.int64)
    E[4][2, 0] = -big
    E[6] = tuple(map(tuple, small.E[6].tolist()[:2] + [[0.5, 0.25, big, 1.0]]))
    with pytest.raises(InputError, match=f"(?s){refused.format('E', 'example', '4, 6')}.*"
                                         f"{refused.format('X', 'example', 5)}"):
        as_dataset(E, X, small.Y)
    w = build(small, 3).weights
    with pytest.raises(InputError, match=refused.format("X", "example", 5)):
        forward(small.E, X, w)
    W_K = w.W_K.tolist()
    W_K[1][0][0] = big
    with pytest.raises(InputError, match=refused.format("W_K", "example", 1)):
        as_weights(W_K, w.W_Q, w.W_V, w.W_O, w.W_D)
    V = [[0.5 * (i + j) for j in range(5)] for i in range(12)]
    V[4][2] = big
    with pytest.raises(InputError, match=refused.format("embeddings", "row", 4)):
        datasets.tokens(6, n=3, classes=2, embeddings=V)
    with pytest.raises(InputError, match=refused.format("V", "example", 4)):
        kruskal_rank(V)
    # Integers float64 holds, beyond 2^53 too (2^60, 2^53 + 2), and booleans, are taken exactly.
    Y = small.Y.tolist()
    Y[0][0], Y[1][0], Y[2][1], Y[3][1] = 2**60, -(2**53 + 2), True, 7
    held = as_dataset(small.E, small.X, Y)
    assert held.Y[0, 0] == 2.0**60 and held.Y[1, 0] == -(2.0**53 + 2) and held.Y[2, 1] == 1 and held.Y[3, 1] == 7

def test_float_arrays_inside_lists_or_behind_array_interfaces_are_not_read_again_element_by_element():
    # The refusal of integers rounded beside floats (the test above) read every entry of 2^53 or
    # more again through an object array, for anything that is not an ndarray: a list of float64
    # arrays, a tensor or another array-like, a memoryview. Float64 data of magnitude 2^53 or
    # more (here 2^600) went through Python one entry at a time, 0.6 s and five times the data's
    # memory for 5 million entries, though such values cannot be integers NumPy rounded.
    class ArrayLike:
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a

    E = np.ldexp(np.random.default_rng(0).standard_normal((4000, 4, 8)), 600)
    for value in (list(E), [list(c) for c in E], ArrayLike(E), memoryview(E)):
        tracemalloc.start()
        try:
            problems = []
            got = real_array("E", value, problems)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert problems == [] and np.array_equal(got, E), type(value).__name__
        assert peak < 2 * E.nbytes, type(value).__name__       # NumPy converting a list: 1.1 to 1.6 times


def test_masked_arrays_are_refused_where_values_are_masked(small):
    # A hostile trial: as_dataset and forward used the values hidden under a mask.
    E = np.ma.masked_array(small.E, mask=np.zeros(small.E.shape, bool))
    assert np.array_equal(as_dataset(E, small.X, small.Y).E, small.E)            # nothing masked
    E[5, 1, 2] = np.ma.masked
    with pytest.raises(InputError, match=r"E: masked values in example\(s\) 5"):
        as_dataset(E, small.X, small.Y)
    with pytest.raises(InputError, match=r"E: masked values in example\(s\) 5"):
        forward(E, small.X, build(small, 3).weights)


def test_the_memory_estimates_count_each_heads_key_map(monkeypatch):
    # A hostile trial: the rounding detector forms every head's d × d key map, which the estimates
    # of build and verify left out: at d = 30,000 build died with NumPy's "Unable to allocate
    # 6.71 GiB" instead of a refusal with the estimate (the CLI said only "out of memory").
    import construct.limits as limits
    data = synthetic("independent", T=3, n=2, d=6000, seed=0)            # 2 heads: 576 MB of key maps
    monkeypatch.setattr(limits, "available_memory", lambda: 256 * 2**20)
    with pytest.raises(InputError, match="needs about"):
        build(data, 2)
    monkeypatch.undo()
    small = synthetic("independent", T=3, n=2, d=600, seed=0)
    w = build(small, 2).weights
    monkeypatch.setattr(limits, "available_memory", lambda: 4 * 2**20)  # the key maps alone: 5.8 MB
    with pytest.raises(InputError, match="needs about"):
        verify(w, small)


def test_a_replaced_field_is_validated_like_a_new_one(small):
    # A hostile trial: dataclasses.replace kept the `validated` mark, so a replaced field skipped
    # every check: prelayer="bogus" was verified and saved (load_weights then refused the file),
    # a 3-D W_D went through forward, a read-only NaN Y gave "max |f - y| = inf", and classes
    # were never checked at all.
    import dataclasses
    w = build(small, 3).weights
    for bad, words in ((dataclasses.replace(w, prelayer="bogus"), "prelayer"),
                       (dataclasses.replace(w, W_D=w.W_K), "W_D"),
                       (dataclasses.replace(w, skip="yes"), "skip")):
        with pytest.raises(InputError, match=words):
            verify(bad, small)
    nan_Y = small.Y.copy()
    nan_Y[2, 0] = np.nan
    nan_Y.flags.writeable = False
    with pytest.raises(InputError, match=r"Y: non-finite values .*example\(s\) 2"):
        verify(w, dataclasses.replace(small, Y=nan_Y))
    with pytest.raises(InputError, match="classes"):
        verify(w, dataclasses.replace(small, classes="abc"))
    assert verify(dataclasses.replace(w), dataclasses.replace(small)).passed           # unchanged: fine


def test_the_a1_advice_does_not_offer_a_head_dim_that_cannot_build(small):
    # A hostile trial: with X[1] = 2 X[0] (rank X = 1) the advice was "--head-dim r" with r = 1,
    # and --head-dim 1 then failed ("no number of heads suffices with k = 1").
    X = small.X[:2].copy()
    X[1] = 2 * X[0]
    data = as_dataset(small.E[:2], X, small.Y[:2])
    with pytest.raises(InputError) as exc:
        build(data, 3)
    message = str(exc.value)
    assert "--head-dim" not in message and "--prelayer mean-shift" in message, message
    X3 = small.X.copy()
    X3[:, 2:] = 0                                                        # rank X = 2: d_h = 2 builds H + 1
    with pytest.raises(InputError, match=r"--head-dim r\)"):
        build(as_dataset(small.E, X3, small.Y), 3)


def test_public_functions_refuse_what_they_cannot_take_by_name(small, tmp_path):
    # A hostile trial: feature_matrix truncated complex inputs (ComplexWarning), passed NaN through
    # and failed deep inside on objects; ar="float64" gave AttributeError there and in forward;
    # param_count(-1, …) returned -18; teach(shared="no") was taken as True; kruskal_rank of a list
    # raised AttributeError and of inf returned 0; export.evaluate with an unknown format fell
    # through to torch.load; export_bytes(report_sha256=123) failed inside safetensors.
    from construct import kruskal_rank, param_count, teach
    from construct.export import evaluate, export_bytes
    w = build(small, 3).weights
    with pytest.raises(InputError, match="E: dtype complex128"):
        feature_matrix(small.E.astype(complex), small.X, w)
    nan_X = small.X.copy()
    nan_X[4, 0] = np.nan
    with pytest.raises(InputError, match=r"X: non-finite values .*example\(s\) 4"):
        feature_matrix(small.E, nan_X, w)
    with pytest.raises(InputError, match="E: object array"):
        feature_matrix(small.E.astype(object), small.X, w)
    for call in (lambda: feature_matrix(small.E, small.X, w, "float64"), lambda: forward(small.E, small.X, w, "float64")):
        with pytest.raises(InputError, match="ar: expected an arithmetic"):
            call()
    for args in ((-1, 2, 3, 4, 5), (1.5, 2, 3, 4, 5), (1, 2, 3, 4, True)):
        with pytest.raises(InputError):
            param_count(*args)
    assert param_count(1, 2, 3, 4, 5) == 1 * 2 * (2 * 3 + 4) + 1 * 4 * 2 + 2 * 5
    for option in ("shared", "rational", "prelayer"):
        with pytest.raises(InputError, match=f"{option} must be True or False"):
            teach(**{option: "no"})
    with pytest.raises(InputError, match="V: non-finite"):
        kruskal_rank(np.array([[1.0, np.inf], [0.0, 1.0]]))
    with np.errstate(all="raise"):                                       # underflow inside: not an error
        assert kruskal_rank(np.eye(3) * 1e-310) == 3
    assert kruskal_rank([[1.0, 0.0], [0.0, 1.0]]) == 2
    with pytest.raises(InputError, match="budget"):
        kruskal_rank(np.eye(2), budget=None)
    with pytest.raises(InputError, match="format"):
        evaluate(tmp_path / "w.bin", "bogus", small.E, small.X)
    with pytest.raises(InputError, match="report_sha256"):
        export_bytes(w, "safetensors", report_sha256=123)


def test_identical_examples_and_rank_deficient_contexts_are_reported_in_one_error():
    # A new user's trial: a file with a repeated example and two contexts with a repeated token
    # reported only the repetition; A2 came after it was fixed (docs: "all problems in one error").
    data = synthetic("independent", T=10, n=3, d=5, seed=0)
    E, X, Y = data.E.copy(), data.X.copy(), data.Y.copy()
    E[5], X[5], Y[5] = E[2], X[2], Y[2] + 1                              # the same inputs, another label
    E[3, 1] = E[3, 0]
    E[7, 2] = E[7, 0]
    with pytest.raises(InputError) as exc:
        build(as_dataset(E, X, Y), 5)
    message = str(exc.value)
    assert "examples 2 and 5" in message and "example(s) 3, 7" in message and "A2" in message, message


def test_a_request_too_large_is_refused_before_the_checks_that_cost_memory(monkeypatch):
    # A hostile trial: `build --heads 1 --context 1 --dim 10000000` ran the identical-inputs check
    # (np.unique over rows of 10^7 entries: 97 s, 5 GB) before it said "needs 7.45e+05 GiB".
    import construct.limits as limits
    data = synthetic("independent", T=3, n=2, d=2000, seed=0)
    monkeypatch.setattr(sys.modules["construct.build"], "refuse_identical_inputs",
                        lambda *a: pytest.fail("the identical-inputs check ran before the memory estimate"))
    monkeypatch.setattr(limits, "available_memory", lambda: 2**20)
    with pytest.raises(InputError, match="needs about"):
        build(data, 2)


@pytest.mark.parametrize("scale", [0, 700])
@pytest.mark.parametrize("skip", [False, True])
def test_more_outputs_than_token_dimensions_are_refused_with_or_without_the_skip(tmp_path, capsys, skip, scale):
    # A hostile case: with --skip, d_o > d ended in a NumPy broadcasting traceback while the data
    # were brought to unit scale, before the check that names the failed hypothesis; far from
    # unit scale (2^700) too, where the labels' target at unit scale subtracts x's first d_o
    # coordinates (a review found it after the first fix).
    data = synthetic("independent", T=5, n=3, d=4, d_o=5, seed=0)
    data = as_dataset(*(np.ldexp(a, scale) for a in (data.E, data.X, data.Y)))
    with pytest.raises(InputError, match="d_o = 5 output columns exceed the token dimension d = 4"):
        build(data, 2, skip=skip)
    path = tmp_path / "wide.npz"
    path.write_bytes(data.to_bytes())
    code, _, err = run(["build", path, "--out", tmp_path / "o"] + (["--skip"] if skip else []), capsys)
    assert code == 2 and "d_o = 5" in err and "Traceback" not in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("factor", [1e160, 1e300])
def test_prelayer_auto_on_huge_data_meeting_a1_builds_as_without_it(small, factor):
    # A hostile trial: queries meeting A1, scaled beyond 1e154, build with prelayer "none" (at
    # unit scale), but "auto" tested them at their own scale, where the span distances' norms
    # overflowed: every earlier query "lies in the span ... distance inf", numpy's overflow
    # warnings on stderr, and the build refused.
    data = as_dataset(small.E * factor, small.X * factor, small.Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = build(data, 3, prelayer="auto")
    assert result.prelayer is None and verify(result.weights, data).passed


def test_prelayer_auto_on_huge_repeated_queries_takes_the_layer(small):
    # The same at 1e200 with repeated queries (what auto is for): it refused them, saying that
    # the shifted queries fail as well (distance inf); at unit scale it takes the pre-layer.
    X = np.tile(small.X[:1], (small.T, 1))
    for factor in (1.0, 1e200):
        data = as_dataset(small.E * factor, X * factor, small.Y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = build(data, 3, prelayer="auto")
        assert result.prelayer == "mean-shift" and verify(result.weights, data).passed, factor


@pytest.mark.parametrize("top", [1e308, 1.7e308])
def test_prelayer_auto_at_float64s_limit_is_refused_without_warnings(small, top):
    # Repeated queries near float64's top: auto's trial of the pre-layer overflowed and numpy's
    # "overflow encountered in add" reached stderr twice before the right refusal.
    k = top / max(np.abs(small.E).max(), np.abs(small.X).max())
    data = as_dataset(small.E * k, np.tile(small.X[:1], (small.T, 1)) * k, small.Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="data out of range"):
            build(data, 3, prelayer="auto")


@pytest.mark.parametrize("change, says", [
    (dict(skip="no"), r"skip"),
    (dict(prelayer="bogus"), r"prelayer"),
    (dict(bits=7), r"high-precision weights come from build or load_weights"),
    (dict(W_V=np.full((3, 4, 1), np.nan)), r"W_V"),
    (dict(W_O=np.ones((5, 4))), r"W_O"),
    (dict(W_K=[[[1.0]]]), r"W_K")])
@pytest.mark.parametrize("call", ["forward", "feature_matrix"])
def test_forward_and_feature_matrix_check_weights_made_by_hand(change, says, call):
    """From a hostile trial: forward and feature_matrix took construct.Weights(...) made by hand
    as they were: skip="no" acted as True, prelayer="bogus" as the mean shift, bits=7 evaluated
    in 7-bit mpmath, a wrong W_O shape raised matmul's ValueError, and NaN weights were blamed on
    the inputs ("the inputs there are far larger than..."). verify and certify refused them by
    name; these now do too."""
    from construct import feature_matrix, forward
    from construct.model import Weights
    data = synthetic("independent", T=7, n=3, d=4, seed=1)
    w = build(data, 3).weights
    arrays = {k: np.array(getattr(w, k)) for k in ("W_K", "W_Q", "W_V", "W_O", "W_D")}
    given = {**arrays, "skip": w.skip, "prelayer": None, "bits": None, **change}
    hand = Weights(**given)
    with pytest.raises(InputError, match=says):
        if call == "forward":
            forward(data.E, data.X, hand)
        else:
            feature_matrix(data.E, data.X, hand)
    assert np.array_equal(forward(data.E, data.X, Weights(**arrays, skip=w.skip)), forward(data.E, data.X, w))


@pytest.mark.parametrize("V, rank", [([[1e20, 0.0], [0.0, 1.0]], 2),
                                     ([[1.7e308, 1.7e308], [1.7e308, -1.7e308]], 2),
                                     ([[1e-320, 0.0], [0.0, 1.0]], 2),
                                     ([[0.0, 0.0], [0.0, 1.0]], 0),
                                     ([[1e20, 0.0], [3e-300, 0.0], [0.0, 1.0]], 1)])
def test_kruskal_rank_does_not_depend_on_the_vectors_sizes(V, rank):
    """From a hostile trial: kruskal_rank, documented as exact, gave 1 for [[1e20, 0], [0, 1]],
    0 for rows near 1.7e308 (the rank's own arithmetic overflowed) and 1 with a subnormal row:
    each subset's rank was decided at the largest row's scale. Independence does not depend on
    the rows' sizes; each row is now brought to unit size (by a power of two, exactly) first."""
    from construct.assumptions import kruskal_check, kruskal_rank
    assert kruskal_rank(np.array(V)) == rank
    assert kruskal_check(np.array(V), 2, "queries").exact_holds == (rank >= 2)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), m=st.integers(1, 6), d=st.integers(1, 4),
       shifts=st.lists(st.integers(-900, 900), min_size=6, max_size=6), dependent=st.booleans())
def test_kruskal_rank_is_the_same_after_scaling_rows_by_powers_of_two(seed, m, d, shifts, dependent):
    from construct.assumptions import kruskal_rank
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((m, d))
    if dependent and m > 1:
        V[-1] = V[0] * 3.0                       # a repeated direction: rank 1
    scaled = np.ldexp(V, np.array(shifts[:m])[:, None])
    assert kruskal_rank(scaled) == kruskal_rank(V)


def test_class_ids_beyond_64_bits_are_refused_for_that_reason_and_prelayer_none_is_none():
    """From a hostile trial: labels [2**200, -2**200, 0, 0, 1] were refused as "expected a 1-D
    integer array, got object", where the docs said ids may be "huge": they may be any 64-bit
    integers, and the refusal says that. gradient_descent refused prelayer="none", which build
    and as_weights take."""
    from construct.baselines import gradient_descent
    data = synthetic("independent", T=5, n=3, d=4, seed=0)
    with pytest.raises(InputError, match=r"labels: class ids must fit in 64-bit integers"):
        as_dataset(data.E, data.X, labels=[2 ** 200, -2 ** 200, 0, 0, 1])
    big = as_dataset(data.E, data.X, labels=[2 ** 63 - 1, -2 ** 63, 0, 0, 1])
    assert big.classes == (-2 ** 63, 0, 1, 2 ** 63 - 1)
    run = gradient_descent(data, 2, steps=1, prelayer="none", seed=0)
    assert run.weights.prelayer is None


def test_a_datasets_and_a_builds_arrays_cannot_be_made_writeable_again():
    """From a hostile trial: `data.Y.flags.writeable = True` worked (the arrays owned their
    memory), and an edit locked again was trusted as validated (a NaN reached build as a raw
    LinAlgError). The arrays now lie over immutable bytes, whose flag NumPy does not let back to
    True, their base's neither (a review: the first fix, views of read-only arrays, left the
    base's flag free)."""
    data = synthetic("independent", T=7, n=3, d=4, seed=1)
    made = as_dataset(np.array(data.E), np.array(data.X), np.array(data.Y))
    w = build(data, 3).weights
    for a in (data.E, data.X, data.Y, made.E, made.Y, w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D):
        while isinstance(a, np.ndarray):
            with pytest.raises(ValueError):
                a.flags.writeable = True
            a = a.base
    assert verify(w, data).passed


def test_inputs_too_large_for_memory_are_a_request_too_large_not_a_memory_error(monkeypatch):
    """From a hostile trial: as_dataset, forward and feature_matrix on a broadcast view of 10^9
    examples raised a raw MemoryError (the finiteness test's temporary, then the copy), where
    synthetic, build and check_assumptions answer such requests with an InputError naming the
    memory needed. Here the machine is made small instead of the request large."""
    import construct.limits as limits
    from construct import feature_matrix
    data = synthetic("independent", T=7, n=3, d=4, seed=1)
    w = build(data, 3).weights
    E, X = np.broadcast_to(data.E[:1], (4000, 3, 4)), np.broadcast_to(data.X[:1], (4000, 4))
    monkeypatch.setattr(limits, "available_memory", lambda: 100_000)      # 0.1 MB
    for call in (lambda: as_dataset(E, X, np.zeros(4000)), lambda: forward(E, X, w), lambda: feature_matrix(E, X, w)):
        with pytest.raises(InputError, match=r"request too large.*needs about .* of memory"):
            call()
    assert forward(data.E, data.X, w).shape == (7, 1)


def test_weights_that_load_weights_would_refuse_are_not_written(tmp_path):
    """From a hostile trial: gradient descent that diverged (sgd at lr = 1e10) gave NaN weights,
    as its docs allow; `.save()` wrote them without a word, and load_weights then refused the
    file. Writing them is refused, naming the matrices, and nothing is written."""
    from construct.baselines import gradient_descent
    data = synthetic("independent", T=7, n=3, d=4, seed=1)
    w = gradient_descent(data, 3, lr=1e10, optimizer="sgd", steps=50, seed=0).weights
    assert not np.isfinite(w.W_K).all()
    with pytest.raises(InputError, match=r"non-finite values.*load_weights would refuse"):
        w.save(tmp_path / "w.npz")
    assert not (tmp_path / "w.npz").exists()


def test_class_ids_as_python_integers_take_int64_or_uint64():
    """From review: an object array of small Python integers was refused as "must fit in 64-bit
    integers … these reach 2", and an empty one raised a bare ValueError. Python integers that
    fit int64 (or, none negative, uint64) are those; an empty array is the plain refusal."""
    data = synthetic("independent", T=3, n=3, d=4, seed=0)
    assert as_dataset(data.E, data.X, labels=np.array([1, 2, 1], dtype=object)).classes == (1, 2)
    assert as_dataset(data.E, data.X, labels=np.array([2 ** 64 - 1, 0, 0], dtype=object)).classes == (0, 2 ** 64 - 1)
    with pytest.raises(InputError, match=r"int64, or uint64 when none is negative"):
        as_dataset(data.E, data.X, labels=np.array([2 ** 63, -1, 0], dtype=object))
    with pytest.raises(InputError, match=r"expected a 1-D integer array"):
        as_dataset(data.E, data.X, labels=np.array([], dtype=object))


def test_the_finiteness_test_by_blocks_names_every_example_it_finds():
    """The test goes by blocks of about a million entries (no temporary of the input's size):
    examples in the first, a middle and the last block, and a last block cut short, are named."""
    from construct.limits import finite_examples
    A = np.zeros((2_500_001, 1))
    for i in (3, 1_048_577, 2_500_000):
        A[i, 0] = np.nan
    problems: list[str] = []
    finite_examples("E", A, problems)
    assert problems == ["E: non-finite values (NaN or inf) in example(s) 3, 1048577, 2500000"]
    problems = []
    finite_examples("E", np.zeros((0, 3)), problems)
    assert problems == []
