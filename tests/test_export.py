"""Exports (issue #15): PyTorch module, safetensors, ONNX; each loaded by its own library."""

import math
import subprocess
import sys
import textwrap

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from construct import InputError, build, synthetic
from construct.cli import main
from construct.export import FORMATS, export, export_bytes, onnx_model, read_safetensors
from construct.model import Weights, forward

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("onnxruntime")

from construct.torch_model import from_torch, load_state_dict, to_authors, to_torch  # noqa: E402

PROBLEMS = {"independent": dict(kind="independent", H=4, n=6, d=10, d_o=1, skip=False),
            "shared+skip, d_o = 2": dict(kind="shared", H=4, n=6, d=10, d_o=2, skip=True)}


@pytest.fixture(scope="module", params=list(PROBLEMS))
def built(request):
    p = PROBLEMS[request.param]
    data = synthetic(p["kind"], T=p["H"] * (p["n"] - 1) + 1, n=p["n"], d=p["d"], d_o=p["d_o"], seed=3)
    return build(data, p["H"], skip=p["skip"], value_dim=p["d_o"] + 1).weights, data


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reproduces_the_labels_in_its_own_library(built, fmt, tmp_path):
    weights, data = built
    info = export(weights, fmt, tmp_path / f"w.{fmt}", data=data)
    assert info["dtype"] == "float64" and info["max_abs_error"] <= 1e-10 and info["labels_hold"]


# Loading sides that import only the target library and NumPy: no construct.
LOADERS = {
    "onnx": """
        import onnxruntime as ort
        s = ort.InferenceSession(PATH, providers=["CPUExecutionProvider"])
        f = s.run(["f"], {"E": E, "x": X})[0]
    """,
    "safetensors": """
        from safetensors.numpy import load_file
        from safetensors import safe_open
        w = load_file(PATH)
        with safe_open(PATH, framework="numpy") as fh:
            skip = fh.metadata()["skip"] == "true"
        logits = np.einsum("tnd,hdk,thk->thn", E, w["W_K"], np.einsum("td,hdk->thk", X, w["W_Q"]))
        s = np.exp(logits - logits.max(axis=2, keepdims=True)); s /= s.sum(axis=2, keepdims=True)
        z = np.einsum("thn,tnd->thd", s, E)
        v = np.einsum("thd,hdv->thv", z, w["W_V"]).reshape(len(X), -1)
        o = v @ w["W_O"] + (X if skip else 0)
        f = o @ w["W_D"]
    """,
    "torch": """
        import torch
        st = torch.load(PATH, weights_only=True)
        Et, Xt = torch.from_numpy(E), torch.from_numpy(X)
        q = torch.einsum("bd,hdk->bhk", Xt, st["W_Q"])[:, :, None]
        k = torch.einsum("bnd,hdk->bhnk", Et, st["W_K"])
        v = torch.einsum("bnd,hdv->bhnv", Et, st["W_V"])
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)[:, :, 0].reshape(len(X), -1)
        o = z @ st["W_O"] + (Xt if bool(st["skip"]) else 0)
        f = (o @ st["W_D"]).numpy()
    """,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_loading_side_needs_no_construct(built, fmt, tmp_path):
    weights, data = built
    path = tmp_path / f"w.{fmt}"
    path.write_bytes(export_bytes(weights, fmt))
    np.savez(tmp_path / "d.npz", E=data.E, X=data.X, Y=data.Y)
    script = "import sys, numpy as np\n" + textwrap.dedent(f"""
        PATH = {str(path)!r}
        d = np.load({str(tmp_path / 'd.npz')!r}); E, X, Y = d["E"], d["X"], d["Y"]
    """) + textwrap.dedent(LOADERS[fmt]) + textwrap.dedent("""
        assert not any(m == "construct" or m.startswith("construct.") for m in sys.modules)
        print(float(np.abs(f - Y).max()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) <= 1e-10


def test_to_torch_and_back_is_exact_and_a_saved_state_dict_loads(built, tmp_path):
    weights, data = built
    module = to_torch(weights)
    back = from_torch(module)
    for name in ("W_K", "W_Q", "W_V", "W_O", "W_D"):
        assert np.array_equal(getattr(back, name), getattr(weights, name))
    assert back.skip == weights.skip
    torch.save(module.state_dict(), tmp_path / "sd.pt")
    again = load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    with torch.no_grad():
        f = again(torch.from_numpy(data.E.copy()), torch.from_numpy(data.X.copy())).numpy()
        single = again(torch.from_numpy(data.E[0].copy()), torch.from_numpy(data.X[0].copy())).numpy()
    assert np.abs(f - data.Y).max() <= 1e-10 and np.abs(single - data.Y[0]).max() <= 1e-10


def test_safetensors_metadata_and_round_trip(built, tmp_path):
    from safetensors import safe_open
    weights, _ = built
    path = tmp_path / "w.safetensors"
    path.write_bytes(export_bytes(weights, "safetensors", report_sha256="ab" * 32))
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert meta == {"format": "mha-construct weights", "version": "1", "H": str(weights.H), "d": str(weights.d),
                    "d_h": str(weights.d_h), "d_v": str(weights.d_v), "d_o": str(weights.d_o),
                    "skip": "true" if weights.skip else "false", "bits": "53", "dtype": "float64",
                    "report_sha256": "ab" * 32}
    back = read_safetensors(path)
    assert all(np.array_equal(getattr(back, m), getattr(weights, m)) for m in ("W_K", "W_Q", "W_V", "W_O", "W_D"))


def test_exported_files_are_the_same_bytes_every_time(built, tmp_path):
    # A user's trial: safetensors files differed from run to run (the library writes its
    # metadata in a hash map's order, seeded afresh in every process).
    weights, _ = built
    (tmp_path / "w.npz").write_bytes(weights.to_bytes())
    script = textwrap.dedent(f"""
        import hashlib
        from construct import load_weights
        from construct.export import FORMATS, export_bytes
        w = load_weights({str(tmp_path / "w.npz")!r})
        for fmt in FORMATS:
            digests = {{hashlib.sha256(export_bytes(w, fmt, report_sha256="ab" * 32)).hexdigest() for _ in range(4)}}
            print(fmt, *sorted(digests))
    """)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert all(len(line.split()) == 2 for line in runs[0].splitlines()), runs[0]      # one digest per format
    assert runs[0] == runs[1], runs


@pytest.mark.parametrize("fmt", FORMATS)
def test_float32_exports_state_their_error(built, fmt, tmp_path):
    weights, data = built
    info = export(weights, fmt, tmp_path / f"w32.{fmt}", dtype="float32", data=data)
    assert info["dtype"] == "float32" and info["allowed"] == 1e-4 * max(1.0, float(np.abs(data.Y).max()))
    assert 1e-9 < info["max_abs_error"] < 1e-2           # float32's rounding, not float64's
    assert info["labels_hold"] == (info["max_abs_error"] <= info["allowed"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_weights_beyond_float32_are_refused_before_a_float32_file_is_written(built, fmt, tmp_path):
    # A user's trial: NumPy's overflow warnings, then a file of infinities (exit 1).
    import dataclasses
    import warnings
    weights, data = built
    huge = dataclasses.replace(weights, W_O=weights.W_O * 1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=r"(?s)float32.*W_O: values up to .* exceed float32's range"):
            export(huge, fmt, tmp_path / "w", dtype="float32", data=data)
    assert not (tmp_path / "w").exists()
    assert export(huge, fmt, tmp_path / "w", dtype="float64")["dtype"] == "float64"     # float64 holds them


def test_the_authors_parametrization_computes_the_same_model(built):
    # Their CustomAttention: sequence [x; E], Q = seq Wq, K = seq Wk, V = seq Wv, softmax(QK^T/sqrt(d))
    # with token 0 masked out of the keys, output at token 0, then Wo and the decoder.
    weights, data = built
    if weights.skip:
        with pytest.raises(InputError, match="no skip connection"):
            to_authors(weights)
        return
    a = to_authors(weights)
    seq = np.concatenate([data.X[:, None, :], data.E], axis=1)                          # (T, n+1, d)
    Q = np.einsum("tnd,hdk->thnk", seq, a["Wq"])
    K = np.einsum("tnd,hdk->thnk", seq, a["Wk"])
    V = np.einsum("tnd,hdv->thnv", seq, a["Wv"])
    logits = np.einsum("thk,thmk->thm", Q[:, :, 0], K) / math.sqrt(data.d)
    logits[:, :, 0] = -np.inf
    s = np.exp(logits - logits.max(axis=2, keepdims=True))
    s /= s.sum(axis=2, keepdims=True)
    heads = np.einsum("thm,thmv->thv", s, V).reshape(data.T, -1)
    f = heads @ a["Wo"] @ a["decoder.weight"].T + a["decoder.bias"]
    assert np.abs(f - data.Y).max() <= 1e-10


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(1, 5), st.integers(1, 6), st.booleans(),
       st.integers(1, 3))
def test_the_module_is_the_model_for_any_weights(seed, H, n, d, skip, d_o):
    rng = np.random.default_rng(seed)
    d_h, d_v = rng.integers(1, 5), max(d_o, int(rng.integers(1, 5)))
    w = Weights(rng.standard_normal((H, d, d_h)), rng.standard_normal((H, d, d_h)), rng.standard_normal((H, d, d_v)),
                rng.standard_normal((H * d_v, d)), rng.standard_normal((d, d_o)), skip=skip and d_o <= d)
    E, X = rng.standard_normal((7, n, d)), rng.standard_normal((7, d))
    with torch.no_grad():
        f = to_torch(w)(torch.from_numpy(E), torch.from_numpy(X)).numpy()
    assert np.allclose(f, forward(E, X, w), rtol=1e-12, atol=1e-12)
    import onnxruntime as ort
    session = ort.InferenceSession(onnx_model(w).SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.allclose(session.run(["f"], {"E": E, "x": X})[0], forward(E, X, w), rtol=1e-12, atol=1e-12)


def test_cli_export_states_dtype_and_error(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["build", "--synthetic", "independent", "--heads", "2", "--context", "3", "--dim", "5",
                 "--out", str(run), "--quiet"]) == 0
    assert main(["export", str(run / "weights.npz"), "--format", "onnx", "--out", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "(onnx, float64)" in out and "every label holds" in out
    report_sha = __import__("hashlib").sha256((run / "report.json").read_bytes()).hexdigest()
    assert main(["export", str(run / "weights.npz"), "--format", "safetensors", "--out",
                 str(tmp_path / "m.safetensors")]) == 0
    from safetensors import safe_open
    with safe_open(str(tmp_path / "m.safetensors"), framework="numpy") as f:
        assert f.metadata()["report_sha256"] == report_sha


def test_cli_export_without_the_library_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    import construct.export as ex
    run = tmp_path / "run"
    assert main(["build", "--synthetic", "independent", "--heads", "2", "--context", "3", "--dim", "5",
                 "--out", str(run), "--quiet"]) == 0
    monkeypatch.setattr(ex, "_importable", lambda name: name != "onnx")
    code = main(["export", str(run / "weights.npz"), "--format", "onnx", "--out", str(tmp_path / "m.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and "in the [onnx] extra: pip install '.[onnx]' in the project's folder" in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "m.onnx").exists()


def test_an_unknown_format_is_refused():
    from construct import InputError
    w = Weights(np.ones((1, 2, 2)), np.ones((1, 2, 2)), np.ones((1, 2, 1)), np.ones((1, 2)), np.ones((2, 1)))
    with pytest.raises(InputError, match="format must be one of torch, safetensors, onnx"):
        export_bytes(w, "keras")
    with pytest.raises(InputError, match="dtype must be one of float64, float32"):
        export_bytes(w, "onnx", "float16")


def test_a_hostile_safetensors_file_is_refused_by_name(built, tmp_path):
    # A hostile trial: garbage, a truncated file or a missing tensor raised SafetensorError or
    # FileNotFoundError; bool tensors were cast to float; skip "TRUE" or "yes" became False.
    import json
    from safetensors.numpy import save
    weights, _ = built
    good = export_bytes(weights, "safetensors")
    size = int.from_bytes(good[:8], "little")
    header = json.loads(good[8:8 + size])
    tensors = {k: v for k, v in weights.arrays().items() if k.startswith("W_")}
    meta = header["__metadata__"]

    def write(name, payload):
        (tmp_path / name).write_bytes(payload)
        return tmp_path / name
    cases = {
        "garbage": (write("g.safetensors", b"not a safetensors file at all"), "not a readable safetensors file"),
        "truncated": (write("t.safetensors", good[:len(good) // 2]), "not a readable safetensors file"),
        "missing": (tmp_path / "nothing.safetensors", "not a readable safetensors file"),
        "folder": (tmp_path, "not a readable safetensors file"),
        "no W_D": (write("m.safetensors", save({k: v for k, v in tensors.items() if k != "W_D"}, metadata=meta)),
                   "W_D: missing"),
        "extra": (write("e.safetensors", save({**tensors, "W_X": np.zeros(2)}, metadata=meta)), "W_X: unexpected"),
        "bool": (write("b.safetensors", save({**tensors, "W_D": tensors["W_D"] > 0}, metadata=meta)),
                 "W_D: bool"),
        "skip": (write("s.safetensors", save(tensors, metadata={**meta, "skip": "TRUE"})), "skip"),
    }
    for case, (path, needle) in cases.items():
        with pytest.raises(InputError, match=needle):
            read_safetensors(path)
    assert read_safetensors(write("ok.safetensors", good)).H == weights.H


def test_a_hostile_state_dict_is_refused_by_name(built):
    # A hostile trial: a missing key gave KeyError, an extra one or int tensors RuntimeError, and
    # NaN weights loaded without a word.
    weights, _ = built
    state = to_torch(weights).state_dict()
    cases = [({k: v for k, v in state.items() if k != "W_O"}, "W_O: missing"),
             ({**state, "W_X": torch.zeros(2)}, "W_X: unexpected"),
             ({**state, "W_D": state["W_D"].to(torch.int64)}, "W_D: torch.int64"),
             ({**state, "W_D": state["W_D"] * float("nan")}, "W_D: non-finite"),
             ({**state, "skip": torch.tensor([True, False])}, "skip")]
    for bad, needle in cases:
        with pytest.raises(InputError, match=needle):
            load_state_dict(bad)
    assert load_state_dict(state).W_K.shape[0] == weights.H


@pytest.mark.parametrize("fmt", ["onnx", "safetensors", "torch"])
def test_float32_exports_of_data_beyond_float32_say_so_without_a_runtime_warning(fmt, tmp_path):
    # A hostile trial: data near 1e300 cast to float32 for the evaluation printed "RuntimeWarning:
    # overflow encountered in cast" (an error under -W error). Such weights (W_K near 1e-300) are
    # now refused before anything is written: float32 would hold them as zeros.
    import warnings
    pytest.importorskip({"onnx": "onnxruntime", "safetensors": "safetensors", "torch": "torch"}[fmt])
    from construct import as_dataset
    base = synthetic("independent", T=7, n=4, d=8, seed=0)
    data = as_dataset(base.E * 1e300, base.X * 1e300, base.Y * 1e300)
    weights = build(data, 2).weights
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="would become 0"):
            export(weights, fmt, tmp_path / f"m.{fmt}", dtype="float32", data=data)
    assert not (tmp_path / f"m.{fmt}").exists()


def test_the_torch_module_says_what_it_is_in_its_repr():
    # A new user's trial: repr(MemorizingAttention(...)) was "MemorizingAttention()".
    pytest.importorskip("torch")
    from construct.torch_model import MemorizingAttention
    assert repr(MemorizingAttention(4, 6, 3, 1, 2)) == ("MemorizingAttention(H=4, d=6, d_h=3, d_v=1, d_o=2, skip=False, "
                                                        "mean_shift=False, dtype=torch.float64)")


def test_a_float32_module_refuses_float64_inputs_as_the_docs_say():
    # Found in review: exports.md quoted PyTorch's "expected scalar type Float but found Double"
    # for float64 inputs to a float32 module; PyTorch 2.13 words it the other way round. The page
    # no longer quotes a message PyTorch may reword: it names the error and the two dtypes.
    import re
    from pathlib import Path
    text = " ".join((Path(__file__).resolve().parent.parent / "docs" / "exports.md").read_text().split())
    assert re.search(r"float64 ones raise PyTorch's RuntimeError for mismatched dtypes, whose message "
                     r"names `Double` and `Float`", text), "exports.md no longer says what float64 inputs raise"
    data = synthetic("independent", T=7, n=3, d=4, seed=0)
    for skip, prelayer in ((False, "none"), (True, "mean-shift")):
        module = to_torch(build(data, 3, skip=skip, prelayer=prelayer).weights, dtype=torch.float32)
        with pytest.raises(RuntimeError) as raised:
            module(torch.tensor(np.asarray(data.E)), torch.tensor(np.asarray(data.X)))
        assert "Double" in str(raised.value) and "Float" in str(raised.value), str(raised.value)


def test_the_torch_bridge_refuses_what_it_cannot_take_by_name():
    # A hostile trial: from_torch(nn.Linear(2, 2)) and from_torch(None) raised AttributeError,
    # load_state_dict(None) TypeError and load_state_dict([1, 2]) AttributeError, and
    # to_torch(w, dtype=torch.int64) PyTorch's "Only Tensors of floating point …".
    from construct.torch_model import from_torch, load_state_dict, to_torch
    w = build(synthetic("independent", T=7, n=3, d=4, seed=0), 3).weights
    for bad in (torch.nn.Linear(2, 2), None):
        with pytest.raises(InputError, match="MemorizingAttention"):
            from_torch(bad)
    for bad in (None, [1, 2]):
        with pytest.raises(InputError, match="state dict"):
            load_state_dict(bad)
    with pytest.raises(InputError, match="dtype"):
        to_torch(w, dtype=torch.int64)
    assert from_torch(to_torch(w, dtype=torch.float32)).H == 3


def test_a_float32_export_refuses_weights_that_would_become_zero():
    # A hostile trial: weights built on data near 1e100 (W_K about 8e-99) were written at float32
    # as zeros, exit 0 ("not evaluated" without a dataset); values above float32's range were
    # already refused by name.
    base = synthetic("independent", T=7, n=3, d=4, seed=0)
    w = build(base.__class__(base.E * 1e100, base.X * 1e100, base.Y), 3).weights
    for fmt in FORMATS:
        with pytest.raises(InputError, match=r"W_K: .* below float32's range"):
            export_bytes(w, fmt, dtype="float32")


def _near_a_midpoint(tmp_path, midpoint: float, above: bool) -> Weights:
    """High-precision (100-bit) weights whose ``W_D[0, 0]`` lies 1e-28 above (or below)
    ``midpoint``, a value halfway between two neighbours of a narrower float type: its nearest
    float64 is the midpoint itself."""
    from decimal import Decimal, localcontext

    from construct import load_weights
    from construct.io import npz_bytes
    arrays = build(synthetic("independent", T=7, n=3, d=5, seed=0), 3, precision=100).weights.arrays()
    arrays["W_D_decimal"] = arrays["W_D_decimal"].copy()
    arrays["W_D"] = arrays["W_D"].copy()
    with localcontext(prec=60):
        arrays["W_D_decimal"][0, 0] = str(Decimal(midpoint) + (1 if above else -1) * Decimal("1e-28"))
    arrays["W_D"][0, 0] = midpoint
    (tmp_path / "w.npz").write_bytes(npz_bytes(arrays))
    return load_weights(tmp_path / "w.npz")


@pytest.mark.parametrize("above", [True, False])
def test_float32_exports_of_high_precision_weights_round_once(tmp_path, above):
    # Found in review: the exports rounded high-precision weights to float64, then to float32. A
    # value 1e-28 above the float32 midpoint 1 + 2^-24 has that midpoint as its float64, which
    # float32 rounds to even: 1, where the value itself rounds to 1 + 2^-23.
    from safetensors.numpy import load
    w = _near_a_midpoint(tmp_path, 1 + 2.0 ** -24, above)
    want = np.float32(1 + 2.0 ** -23) if above else np.float32(1.0)
    assert load(export_bytes(w, "safetensors", dtype="float32"))["W_D"][0, 0] == want
    onnx = pytest.importorskip("onnx")
    held = {t.name: onnx.numpy_helper.to_array(t) for t in onnx_model(w, "float32").graph.initializer}
    assert held["Wd"][0, 0] == want
    assert to_torch(w, dtype=torch.float32).W_D[0, 0].item() == float(want)
    # float16, a module's dtype: its midpoint 1 + 2^-11, between 1 and 1 + 2^-10
    w = _near_a_midpoint(tmp_path, 1 + 2.0 ** -11, above)
    assert to_torch(w, dtype=torch.float16).W_D[0, 0].item() == (1 + 2.0 ** -10 if above else 1.0)
    # where the value is the midpoint itself, ties go to even, as NumPy's own rounding
    assert (load(export_bytes(build(synthetic("independent", T=7, n=3, d=5, seed=0), 3, precision=100).weights,
                              "safetensors", dtype="float32"))["W_D"] == np.eye(5, 1, dtype=np.float32)).all()


def test_float16_modules_of_float64_weights_round_once():
    # From review: PyTorch's copy from float64 to float16 goes through float32, where
    # 1 + 2^-11 + 2^-40 becomes the float16 midpoint 1 + 2^-11 and then 1 (to even); the value
    # itself rounds to 1 + 2^-10.
    from construct import as_weights
    W_D = np.array([[1 + 2.0 ** -11 + 2.0 ** -40], [0.0]])
    w = as_weights(np.ones((1, 2, 1)), np.ones((1, 2, 1)), np.ones((1, 2, 1)), np.ones((1, 2)), W_D)
    assert to_torch(w, dtype=torch.float16).W_D[0, 0].item() == 1 + 2.0 ** -10


def _overflow_threshold(dtype):
    """The rational from which ``dtype`` rounds to infinity: its largest value plus half a unit
    in its last place."""
    from fractions import Fraction
    top = np.finfo(dtype).max
    return Fraction(float(top)) + (Fraction(float(top)) - Fraction(float(np.nextafter(top, dtype(0))))) / 2


def _nearest_in(dtype, x) -> float:
    """The ``dtype`` value nearest the rational ``x`` (ties to even; from the overflow threshold
    on, infinity), by exact comparison among the candidates around ``x``'s float64."""
    from fractions import Fraction
    if abs(x) >= _overflow_threshold(dtype):
        return dtype(np.inf) if x > 0 else dtype(-np.inf)
    with np.errstate(over="ignore"):
        a = np.array(float(x)).astype(dtype)
    candidates = [a, np.nextafter(a, dtype(np.inf)), np.nextafter(a, dtype(-np.inf))]
    finite = [c for c in candidates if np.isfinite(c)]
    return min(finite, key=lambda c: (abs(Fraction(float(c)) - x),
                                      int(np.array(c).view(np.uint32 if dtype == np.float32 else np.uint16)) & 1))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([np.float32, np.float16]), st.integers(0, 2**23 - 1), st.sampled_from([1, -1]),
       st.integers(-165, 16), st.sampled_from([-1, 0, 1]), st.integers(56, 200), st.booleans())
def test_rounding_once_is_the_nearest_value_of_the_narrower_type(dtype, k, sign, exponent, side, depth, midpoint):
    # Against exact rationals: high-precision values at, just above and just below midpoints of
    # float32 and float16, and off them, rounded by export._rounded_once, are the nearest values
    # of the narrower type (below its normal range too).
    from fractions import Fraction
    bits = np.finfo(dtype).nmant + 1                         # a value in [1, 2) with bits + 1 bits
    significand = 2 * (2 ** (bits - 1) + k % 2 ** (bits - 1)) + (1 if midpoint else 0)
    base = sign * Fraction(significand, 2 ** bits) * Fraction(2) ** exponent
    x = base + side * Fraction(1, 2 ** depth) * abs(base)
    assume(abs(x) < 2 * _overflow_threshold(dtype))
    _rounds_once_to_the_nearest(dtype, x)


def _rounds_once_to_the_nearest(dtype, x) -> None:
    from construct.export import _rounded_once
    with mpmath.workprec(400):
        exact = np.array([mpmath.mpf(x.numerator) / x.denominator], dtype=object)
        assert exact[0] * x.denominator == x.numerator                     # held exactly at 400 bits
    with np.errstate(over="ignore", under="ignore"):
        got = _rounded_once(exact, np.array([float(x)]), np.dtype(dtype))[0]
        want = _nearest_in(dtype, x)
    assert got == want and np.signbit(got) == np.signbit(want), (x, got, want)


@pytest.mark.parametrize("dtype, smallest", [(np.float32, 2 ** -149), (np.float16, 2 ** -24)])
def test_rounding_once_below_the_normal_range_and_at_the_overflow_threshold(dtype, smallest):
    # The midpoint between 0 and the smallest subnormal, and one between two subnormals, each
    # approached from both sides, of both signs; and the threshold of overflow, whose float64 is
    # itself: a value just below it is the largest finite value (from review: it became inf, and
    # the export was refused as beyond the range).
    from fractions import Fraction
    for side in (-1, 0, 1):
        for sign in (1, -1):
            for halves in (1, 3, 5):
                x = Fraction(smallest) * (Fraction(halves, 2) + side * Fraction(1, 2 ** 70))
                _rounds_once_to_the_nearest(dtype, sign * x)
            x = _overflow_threshold(dtype) * (1 + side * Fraction(1, 2 ** 70))
            _rounds_once_to_the_nearest(dtype, sign * x)


def test_an_export_interrupted_while_it_is_checked_leaves_the_old_file(tmp_path, monkeypatch, capsys):
    # A hostile trial: Ctrl-C while the written file was being evaluated printed "interrupted;
    # nothing written" over a file already replaced. The check now runs before the file is written.
    import construct.export as export_module
    folder = tmp_path / "run"
    assert main(["build", "--synthetic", "independent", "--heads", "4", "--examples", "9", "--context", "3",
                 "--dim", "4", "--out", str(folder), "--quiet"]) == 0
    target = tmp_path / "model.onnx"
    target.write_bytes(b"OLD")

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(export_module, "evaluate", ctrl_c)
    capsys.readouterr()
    assert main(["export", str(folder / "weights.npz"), "--format", "onnx", "--out", str(target)]) == 130
    assert target.read_bytes() == b"OLD"
    assert "interrupted; nothing written" in capsys.readouterr().err


def test_an_interruption_after_a_file_is_written_says_so(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "run"
    assert main(["build", "--heads", "4", "--examples", "9", "--context", "3", "--dim", "4", "--out", str(folder),
                 "--quiet"]) == 0
    target = tmp_path / "model.onnx"
    real_print = print

    def ctrl_c_on_report(*args, **kwargs):
        if args and str(args[0]).startswith("wrote"):
            raise KeyboardInterrupt
        real_print(*args, **kwargs)
    monkeypatch.setattr("builtins.print", ctrl_c_on_report)
    assert main(["export", str(folder / "weights.npz"), "--format", "onnx", "--out", str(target)]) == 130
    monkeypatch.undo()
    assert target.is_file()
    err = capsys.readouterr().err
    assert "nothing written" not in err and f"interrupted after writing {target}" in err


def test_to_torch_refuses_a_dtype_the_weights_do_not_fit():
    # A hostile trial: to_torch(w, torch.float32) on weights beyond float32's range gave a module
    # with infinite parameters (NaN outputs), where export --dtype float32 refuses them by name.
    small = synthetic("independent", T=9, n=3, d=4, seed=0)
    from construct import as_dataset
    w = build(as_dataset(small.E, small.X, small.Y * 1e39), 4).weights
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        with pytest.raises(InputError, match=r"(?s)exceed (float32|float16|bfloat16)'s range.*torch.float64"):
            to_torch(w, dtype=dtype)
    assert torch.isfinite(to_torch(w).W_V).all()
    fine = to_torch(build(small, 4).weights, dtype=torch.float32)
    assert fine.W_V.dtype == torch.float32


@pytest.mark.parametrize("module, call", [
    ("onnx", lambda w, path: export_bytes(w, "onnx")),
    ("torch", lambda w, path: export_bytes(w, "torch")),
    ("safetensors", lambda w, path: export_bytes(w, "safetensors")),
    ("safetensors", lambda w, path: read_safetensors(path)),
    ("onnxruntime", lambda w, path: __import__("construct.export").export.evaluate(path, "onnx", None, None)),
])
def test_a_missing_library_is_named_with_its_extra(module, call, tmp_path, monkeypatch):
    # A hostile trial: in Python these raised ModuleNotFoundError, where datasets.digits() and
    # sweeps.plot() name the extra to install.
    w = build(synthetic("independent", T=9, n=3, d=4, seed=0), 4).weights
    path = tmp_path / "m"
    path.write_bytes(b"")
    for name in [module, *(m for m in list(sys.modules) if m.startswith(module + "."))]:
        monkeypatch.setitem(sys.modules, name, None)        # import fails, as when not installed
    with pytest.raises(InputError, match=rf"missing library: this needs {module}, in the \[\w+\] extra: "
                                         r"pip install '\.\[\w+\]' in the project's folder"):
        call(w, path)


@pytest.mark.parametrize("fmt", ["torch", "onnx"])
def test_the_check_runs_the_target_library_in_blocks_of_examples(built, fmt, tmp_path, monkeypatch):
    """A researcher's trial: exporting the weights of H = 128 (shared, n = 32, d = 64, T = 3,969)
    with the check took 13.1 GB of memory in PyTorch and 8.9 GB in onnxruntime (the keys of every
    example and head at once, 4.2 GB a copy; Z is 0.26 GB, and verify took 0.8 GB): at H = 256 the
    check alone would not fit 24 GB. The library now runs blocks of examples of bounded size."""
    import construct.export as ex
    weights, data = built
    whole = export(weights, fmt, tmp_path / f"whole.{fmt}", data=data)["max_abs_error"]
    seen = []
    if fmt == "torch":
        from construct.torch_model import MemorizingAttention
        real = MemorizingAttention.forward
        monkeypatch.setattr(MemorizingAttention, "forward",
                            lambda self, E, x: seen.append(x.shape[0]) or real(self, E, x))
    else:
        import onnxruntime
        real = onnxruntime.InferenceSession.run
        monkeypatch.setattr(onnxruntime.InferenceSession, "run",
                            lambda self, names, feed, *a: seen.append(feed["x"].shape[0]) or real(self, names, feed, *a))
    monkeypatch.setattr(ex, "EVAL_BLOCK_BYTES", 4 * 2**10)        # a few examples a block
    f = ex.evaluate(tmp_path / f"whole.{fmt}", fmt, data.E, data.X)
    assert sum(seen) == data.T and max(seen) < data.T, seen
    assert f.shape == data.Y.shape and abs(float(np.abs(f - data.Y).max()) - whole) <= 1e-12


@pytest.mark.parametrize("prelayer", [None, "mean-shift"])
def test_the_torch_module_traces_with_torch_export(built, prelayer):
    # Found by a new user: torch.export (and torch.compile(fullgraph=True)) stopped at the
    # module's Python branches on its skip and mean_shift buffers (a data-dependent guard).
    weights, data = built
    if prelayer is not None:
        weights = build(data, weights.H, skip=weights.skip, value_dim=weights.d_v, prelayer=prelayer).weights
    module = to_torch(weights)
    E, X = torch.from_numpy(data.E.copy()), torch.from_numpy(data.X.copy())
    program = torch.export.export(module, (E, X))
    compiled = torch.compile(module, fullgraph=True, backend="eager")      # graph capture, no compiler
    with torch.no_grad():
        eager = module(E, X)
        assert torch.equal(program.module()(E, X), eager) and torch.equal(compiled(E, X), eager)
    assert np.abs(eager.numpy() - data.Y).max() <= 1e-10


_BF16_MAX = (2 - 2.0 ** -7) * 2.0 ** 127


def _nearest_bfloat16(x) -> float:
    """The bfloat16 value nearest the rational ``x`` (8 significant bits, float32's exponents,
    subnormals down to 2^-133; ties to even; from its largest value plus half a unit on,
    infinity), as a float64, by exact arithmetic."""
    from fractions import Fraction
    if x == 0:
        return 0.0
    if abs(x) >= Fraction(_BF16_MAX) + Fraction(2) ** 119:
        return math.copysign(math.inf, x)
    e = x.numerator.bit_length() - x.denominator.bit_length()      # 2^(e-1) ≤ |x| < 2^(e+1)
    e = e + 1 if abs(x) >= Fraction(2) ** e else e                  # 2^(e-1) ≤ |x| < 2^e
    s = max(e - 8, -133)
    return math.copysign(float(round(x / Fraction(2) ** s) * Fraction(2) ** s), x)   # ties to even; -0.0


@settings(max_examples=300, deadline=None)
@given(k=st.integers(0, 2 ** 7 - 1), sign=st.sampled_from([1, -1]), exponent=st.integers(-140, 127),
       side=st.sampled_from([-1, 0, 1]), depth=st.integers(30, 200), midpoint=st.booleans(), high=st.booleans())
def test_bfloat16_values_are_the_nearest_rounded_once(k, sign, exponent, side, depth, midpoint, high):
    """Values at, just above and just below bfloat16's midpoints and off them, as float64 or as
    high-precision numbers whose float64 lands on a midpoint, round to the nearest bfloat16:
    PyTorch fills a bfloat16 tensor from float64 through float32, twice rounded (1 + 2^-8 + 2^-30
    became 1, not 1 + 2^-7)."""
    from fractions import Fraction
    from construct.export import bfloat16_values
    significand = 2 * (2 ** 7 + k) + (1 if midpoint else 0)            # 9 bits: a midpoint when odd
    base = sign * Fraction(significand, 2 ** 8) * Fraction(2) ** exponent
    x = base + side * Fraction(1, 2 ** depth) * abs(base)
    nearest = np.array([float(x)])
    if high:
        with mpmath.workprec(400):
            exact = np.array([mpmath.mpf(x.numerator) / x.denominator], dtype=object)
        want = _nearest_bfloat16(x)
    else:
        exact, want = None, _nearest_bfloat16(Fraction(float(x)))
    with np.errstate(over="ignore"):
        got = float(bfloat16_values(nearest, exact)[0])
    assert got == want and math.copysign(1, got) == math.copysign(1, want), (x, got, want)


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_bfloat16_values_agree_with_pytorch_on_float32_values(x):
    """From float32 values PyTorch rounds to bfloat16 once, to nearest: the same values."""
    from construct.export import bfloat16_values
    want = torch.tensor([x], dtype=torch.float32).to(torch.bfloat16).to(torch.float64).item()
    got = float(bfloat16_values(np.array([x]))[0])
    assert got == want and math.copysign(1, got) == math.copysign(1, want)


def test_to_torch_rounds_to_bfloat16_once_and_refuses_what_it_loses():
    """From review: 1 + 2^-8 + 2^-30 became 1 in a bfloat16 module (through float32's
    1 + 2^-8, a midpoint, to even); it is 1 + 2^-7. A value past bfloat16's largest (below
    float32's) is refused, as one that would become 0 beside its matrix's scale is."""
    from construct import as_weights
    W_D = np.array([[1 + 2.0 ** -8 + 2.0 ** -30], [0.0]])
    w = as_weights(np.ones((1, 2, 1)), np.ones((1, 2, 1)), np.ones((1, 2, 1)), np.ones((1, 2)), W_D)
    assert to_torch(w, dtype=torch.bfloat16).W_D[0, 0].item() == 1 + 2.0 ** -7
    for value, words in ((3.3999e38, r"exceed bfloat16's range \(3\.39e\+38\)"),
                         (2.0 ** -135, r"below bfloat16's range \(9\.18e-41\) and would become 0")):
        W_K = np.array([[[value], [2.0 ** -134]]]) if value < 1 else np.array([[[value], [1.0]]])
        w = as_weights(W_K, np.ones((1, 2, 1)), np.ones((1, 2, 1)), np.ones((1, 2)), W_D)
        with pytest.raises(InputError, match=rf"(?s)W_K: values up to .*{words}.*torch.float64"):
            to_torch(w, dtype=torch.bfloat16)



def _one_tiny_key_head(dtype: str) -> tuple[Weights, np.ndarray, np.ndarray]:
    """Two heads (d = 4, d_h = 2) and data near 1e5: head 1's keys far below ``dtype``'s range,
    its queries large, so that its logits are of order 1 as head 0's are."""
    rng = np.random.default_rng(0)
    tiny, large = {"float32": (1e-46, 1e36), "float16": (1e-9, 1e4)}[dtype]
    W_K, W_Q = rng.standard_normal((2, 4, 2)), rng.standard_normal((2, 4, 2))
    W_K[1] *= tiny
    W_Q[1] *= large
    W_K[0] *= 1e-5                                      # head 0 at the data's scale: logits of order 1
    W_Q[0] *= 1e-5
    w = Weights(W_K, W_Q, rng.standard_normal((2, 4, 1)), rng.standard_normal((2, 4)), rng.standard_normal((4, 1)))
    E, X = 1e5 * rng.standard_normal((3, 3, 4)), 1e5 * rng.standard_normal((3, 4))
    return w, E, X


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_export_refuses_a_heads_keys_that_would_become_zero_beside_other_heads(dtype):
    # A hostile trial: a head's keys far below the other heads' (3.6e-48 beside 2e-31, from a
    # high-precision build on data at 1e16) became zeros at float32: the test per matrix took
    # them as negligible, but a head's keys meet only its own queries (here large). Exit 0, or
    # max |f - y| = 0.36 where data were given.
    torch = pytest.importorskip("torch")
    w, E, X = _one_tiny_key_head(dtype)
    flushed = Weights(w.W_K * np.array([1.0, 0.0])[:, None, None], w.W_Q, w.W_V, w.W_O, w.W_D)
    assert np.abs(forward(E, X, w) - forward(E, X, flushed)).max() > 1e-3 * np.abs(forward(E, X, w)).max()
    with pytest.raises(InputError, match=r"W_K: .* would become 0"):
        to_torch(w, dtype=getattr(torch, dtype))
    if dtype == "float32":
        for fmt in FORMATS:
            with pytest.raises(InputError, match=r"W_K: .* would become 0"):
                export_bytes(w, fmt, dtype="float32")


def test_an_export_keeps_keys_negligible_beside_their_own_heads_terms():
    # The other side: a key column far below the rest of its head, whose queries are no larger,
    # adds nothing float32 could hold to the head's logits: flushing it is no loss.
    torch = pytest.importorskip("torch")
    w, _, _ = _one_tiny_key_head("float32")
    W_K, W_Q = w.W_K.copy(), w.W_Q.copy()
    W_K[1], W_Q[1] = np.abs(W_K[1]) / 1e-46 + 1, np.abs(W_Q[1]) / 1e36 + 1       # head 1 at unit scale
    W_K[1, :, 1] = 1e-50                                                          # one key column tiny
    to_torch(Weights(W_K, W_Q, w.W_V, w.W_O, w.W_D), dtype=torch.float32)


def test_an_export_weighs_a_value_along_its_whole_path_to_the_outputs():
    # A review: a head's W_V below float32's range (1e-46) whose rows of W_O (1e30) and W_D
    # (1e17) make it the outputs' largest part passed: W_V was weighed by W_O alone, and the
    # float32 module gave 0.0016 where the model gives 16.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    H, d = 2, 4
    W_V = np.zeros((H, d, 1))
    W_V[0], W_V[1] = 1.0, 1e-46
    W_O, W_D = np.zeros((H, d)), np.zeros((d, 1))
    W_O[0, 0], W_O[1, 1] = 1.0, 1e30
    W_D[0, 0], W_D[1, 0] = 1e-3, 1e17
    w = Weights(0.1 * rng.standard_normal((H, d, 2)), 0.1 * rng.standard_normal((H, d, 2)), W_V, W_O, W_D)
    for fmt in FORMATS:
        with pytest.raises(InputError, match=r"W_V: .* would become 0"):
            export_bytes(w, fmt, dtype="float32")
    with pytest.raises(InputError, match=r"W_V: .* would become 0"):
        to_torch(w, dtype=torch.float32)
