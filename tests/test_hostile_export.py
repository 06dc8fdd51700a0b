"""A hostile trial of the exports: files that are not what they claim, data that does not fit
them, metadata that contradicts the tensors, and dtypes the formats do not hold, each refused by
name (an InputError naming the file, the tensor or the option), never the library's own error."""

import json
import re

import numpy as np
import pytest

from construct import InputError, build, synthetic
from construct.export import FORMATS, evaluate, export_bytes, read_safetensors

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def small():
    data = synthetic("independent", T=9, n=3, d=4, seed=0)
    return build(data, 4).weights, data


def _write(folder, name, payload):
    (folder / name).write_bytes(payload)
    return folder / name


@pytest.mark.parametrize("fmt", FORMATS)
def test_evaluate_refuses_data_that_does_not_fit_the_file_by_name(small, fmt, tmp_path):
    # A hostile trial: data of another token dimension gave onnxruntime's INVALID_ARGUMENT and
    # PyTorch's einsum RuntimeError; a 1-D X or contexts and queries of different counts too.
    weights, data = small
    path = _write(tmp_path, f"m.{fmt}", export_bytes(weights, fmt))
    other = synthetic("independent", T=9, n=3, d=5, seed=0)
    cases = [((other.E, other.X), r"(?s)d = 4.*E: expected shape \(T, n, 4\).*got \(9, 3, 5\)"),
             ((other.E, data.X), r"E: expected shape \(T, n, 4\) with n ≥ 1, got \(9, 3, 5\)"),
             ((data.E, other.X), r"X: expected shape \(T, 4\), got \(9, 5\)"),
             ((data.E, data.X[0]), r"X: expected shape \(T, 4\), got \(4,\)"),
             ((data.E[0], data.X), r"E: expected shape \(T, n, 4\)"),
             ((data.E, data.X[:3]), "E holds 9 contexts but X 3 queries")]
    for (E, X), needle in cases:
        with pytest.raises(InputError, match=needle) as info:
            evaluate(path, fmt, E, X)
        assert f"inputs do not fit {path}" in str(info.value)
    with pytest.raises(InputError, match="E: dtype complex128"):
        evaluate(path, fmt, data.E.astype(complex), data.X)
    f = evaluate(path, fmt, data.E.tolist(), data.X.tolist())      # nested lists, as forward takes
    assert np.abs(f - data.Y).max() <= 1e-10


@pytest.mark.parametrize("fmt", FORMATS)
def test_evaluate_on_no_examples_gives_no_outputs_in_every_format(small, fmt, tmp_path):
    # A hostile review: T = 0 gave (0, d_o) in ONNX, as forward does, but PyTorch's RuntimeError
    # "cannot reshape tensor of 0 elements into shape [0, -1]" for a torch file and NumPy's
    # ValueError "cannot reshape array of size 0" for a safetensors one.
    weights, data = small
    path = _write(tmp_path, f"m.{fmt}", export_bytes(weights, fmt))
    f = evaluate(path, fmt, data.E[:0], data.X[:0])
    assert f.shape == (0, weights.d_o) and f.dtype == np.float64


@pytest.mark.parametrize("fmt", FORMATS)
def test_evaluate_refuses_a_file_that_is_not_its_format_by_name(small, fmt, tmp_path):
    # A hostile trial: random bytes named model.onnx gave onnxruntime's InvalidProtobuf, a
    # truncated torch file PyTorch's "failed finding central directory", a safetensors one
    # SafetensorError, a missing file FileNotFoundError, a folder IsADirectoryError.
    weights, data = small
    good = export_bytes(weights, fmt)
    others = [f for f in FORMATS if f != fmt]
    cases = {"random bytes": _write(tmp_path, f"r.{fmt}", np.random.default_rng(0).bytes(500)),
             "truncated": _write(tmp_path, f"t.{fmt}", good[:len(good) // 2]),
             "empty": _write(tmp_path, f"e.{fmt}", b""),
             "missing": tmp_path / f"nothing.{fmt}",
             "folder": tmp_path,
             **{f"a {o} file": _write(tmp_path, f"{o}-as.{fmt}", export_bytes(weights, o)) for o in others}}
    for case, path in cases.items():
        with pytest.raises(InputError, match=str(path)) as info:
            evaluate(path, fmt, data.E, data.X)
        assert type(info.value) is InputError, case


def test_evaluate_refuses_an_onnx_model_of_another_graph_by_name(small, tmp_path):
    # A valid ONNX model that is not this package's (other inputs and outputs) gave onnxruntime's
    # "invalid input name" or "invalid output name".
    from onnx import TensorProto, helper
    _, data = small
    graph = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "other",
                              [helper.make_tensor_value_info("a", TensorProto.DOUBLE, ["B", 4])],
                              [helper.make_tensor_value_info("b", TensorProto.DOUBLE, ["B", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = _write(tmp_path, "other.onnx", model.SerializeToString())
    with pytest.raises(InputError, match=r"other\.onnx: not an mha-construct ONNX model"):
        evaluate(path, "onnx", data.E, data.X)



def _onnx_with_our_inputs(tmp_path, name, nodes, outputs):
    """An ONNX file with this package's inputs, ``E`` (B, n, 4) and ``x`` (B, 4) of float64, an
    initializer ``Wd`` (4, 1), and ``nodes`` and ``outputs`` of the caller's."""
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(nodes, "hostile",
                              [helper.make_tensor_value_info("E", TensorProto.DOUBLE, ["B", "n", 4]),
                               helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["B", 4])],
                              outputs, initializer=[numpy_helper.from_array(np.ones((4, 1)), "Wd")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return _write(tmp_path, f"{name}.onnx", model.SerializeToString())


def test_evaluate_refuses_an_onnx_model_whose_output_is_not_f_by_name(small, tmp_path):
    # A hostile trial: files with this package's inputs E and x but another output were run and
    # their output returned: a second output g beside f, an f of another dtype (float32 or int64
    # cast back to float64), an f of rank 3 (E itself) or 0 gave arrays a caller compared with
    # the labels, meeting NumPy's "operands could not be broadcast together with shapes (9,3,4)
    # (9,1)" or an error of a single number; a sequence output raised AttributeError ('list' object
    # has no attribute 'astype'). An output g alone was refused without naming the outputs.
    from onnx import TensorProto, helper
    _, data = small
    D, out = TensorProto.DOUBLE, helper.make_tensor_value_info
    f = helper.make_node("MatMul", ["x", "Wd"], ["f"])                  # (B, 1): a model's output
    cases = {
        "g": ([helper.make_node("MatMul", ["x", "Wd"], ["g"])], [out("g", D, ["B", 1])],
              r"outputs g tensor\(double\) \['B', 1\]"),
        "two": ([f, helper.make_node("Identity", ["x"], ["g"])], [out("f", D, ["B", 1]), out("g", D, ["B", 4])],
                r"outputs f tensor\(double\) \['B', 1\], g tensor\(double\) \['B', 4\]"),
        "float": ([helper.make_node("MatMul", ["x", "Wd"], ["y"]), helper.make_node("Cast", ["y"], ["f"], to=TensorProto.FLOAT)],
                  [out("f", TensorProto.FLOAT, ["B", 1])], r"output f is tensor\(float\), the inputs tensor\(double\)"),
        "int": ([helper.make_node("MatMul", ["x", "Wd"], ["y"]), helper.make_node("Cast", ["y"], ["f"], to=TensorProto.INT64)],
                [out("f", TensorProto.INT64, ["B", 1])], r"output f is tensor\(int64\), the inputs tensor\(double\)"),
        "sequence": ([helper.make_node("SequenceConstruct", ["x"], ["f"])],
                     [helper.make_tensor_sequence_value_info("f", D, None)], r"output f is seq\(tensor\(double\)\)"),
        "rank 3": ([helper.make_node("Identity", ["E"], ["f"])], [out("f", D, ["B", "n", 4])],
                   r"output f has shape \['B', 'n', 4\], expected \(B, d_o\)"),
        "no outputs": ([f], [], "outputs none"),
    }
    for case, (nodes, outputs, needle) in cases.items():
        path = _onnx_with_our_inputs(tmp_path, case, nodes, outputs)
        with pytest.raises(InputError, match=rf"{re.escape(str(path))}: not an mha-construct ONNX model \(.*{needle}.*expected one "
                                             r"output f \(B, d_o\) of the inputs' dtype") as info:
            evaluate(path, "onnx", data.E, data.X)
        assert type(info.value) is InputError, case
    # Shapes onnxruntime learns only when it runs the file (an undeclared rank reads as [], a
    # declared one may be false): the output is checked before anyone compares it.
    runtime = {
        "scalar": ([helper.make_node("ReduceSum", ["x"], ["f"], keepdims=0)], [out("f", D, [])],
                   r"output f has shape \(\) on 9 examples; expected \(T, d_o\) = \(9, d_o\)"),
        # onnxruntime drops a declared shape that contradicts its own inference, to [].
        "declared (B, 1), is E": ([helper.make_node("Identity", ["E"], ["f"])], [out("f", D, ["B", 1])],
                                  r"output f has shape \(9, 3, 4\) on 9 examples; expected \(T, d_o\) = \(9, d_o\)"),
        "transposed": ([helper.make_node("Transpose", ["x"], ["f"], perm=[1, 0])], [out("f", D, [4, "B"])],
                       r"output f has shape \(4, 9\) on 9 examples; expected \(T, d_o\) = \(9, d_o\)"),
    }
    for case, (nodes, outputs, needle) in runtime.items():
        path = _onnx_with_our_inputs(tmp_path, case, nodes, outputs)
        with pytest.raises(InputError, match=rf"{re.escape(str(path))}: {needle}") as info:
            evaluate(path, "onnx", data.E, data.X)
        assert type(info.value) is InputError, case
    # The model's own output, (B, d_o) of the inputs' dtype, declared or not, is read.
    for case, shape in (("declared", ["B", 1]), ("undeclared", None)):
        path = _onnx_with_our_inputs(tmp_path, case, [f], [out("f", D, shape)])
        np.testing.assert_allclose(evaluate(path, "onnx", data.E, data.X), data.X.sum(axis=1, keepdims=True),
                                   rtol=1e-15)                          # onnxruntime's order of summation

def test_evaluate_names_the_file_of_a_state_dict_it_refuses(small, tmp_path):
    # torch.save of something else than the state dict: load_state_dict's refusal, with the file.
    weights, data = small
    torch.save([1, 2], tmp_path / "list.torch")
    state = {k: v for k, v in torch.load(_write(tmp_path, "m.torch", export_bytes(weights, "torch")),
                                         weights_only=True).items() if k != "W_O"}
    torch.save(state, tmp_path / "no-W_O.torch")
    for name, needle in (("list.torch", "expected a state dict"), ("no-W_O.torch", "W_O: missing")):
        with pytest.raises(InputError, match=rf"{name}: {needle}"):
            evaluate(tmp_path / name, "torch", data.E, data.X)


def _safetensors_parts(weights):
    """The tensors and the metadata export writes for ``weights``."""
    good = export_bytes(weights, "safetensors")
    size = int.from_bytes(good[:8], "little")
    return ({k: v for k, v in weights.arrays().items() if k.startswith("W_")},
            json.loads(good[8:8 + size])["__metadata__"])


def test_read_safetensors_refuses_metadata_that_contradicts_the_tensors_by_name(small, tmp_path):
    # A hostile trial: metadata H = 3 over tensors of 4 heads, d = 5 over d = 4, a dtype float32
    # over float64 tensors, prelayer_version without prelayer, format version 2 or bits "x" were
    # all read without a word (the reader took the tensors' word and ignored the rest).
    from safetensors.numpy import save
    weights, _ = small
    tensors, meta = _safetensors_parts(weights)
    without = {k: v for k, v in meta.items() if k != "H"}
    cases = {
        "H": ({**meta, "H": "3"}, tensors, r"metadata H = '3', but the tensors have H = 4"),
        "d": ({**meta, "d": "5"}, tensors, r"metadata d = '5', but the tensors have d = 4"),
        "d_h": ({**meta, "d_h": "7"}, tensors, r"metadata d_h = '7', but the tensors have d_h = 3"),
        "d_v": ({**meta, "d_v": "2"}, tensors, r"metadata d_v = '2', but the tensors have d_v = 1"),
        "d_o": ({**meta, "d_o": "x"}, tensors, r"metadata d_o = 'x', expected an integer"),
        "no H": (without, tensors, "metadata H: missing"),
        "dtype": ({**meta, "dtype": "float32"}, tensors,
                  r"metadata dtype = 'float32', but W_K is float64"),
        "mixed": (meta, {**tensors, "W_D": tensors["W_D"].astype(np.float32)},
                  r"metadata dtype = 'float64', but W_D is float32"),
        "version": ({**meta, "version": "2"}, tensors, r"metadata version = '2'.* reads version 1"),
        "bits": ({**meta, "bits": "x"}, tensors, r"metadata bits = 'x', expected an integer from 53"),
        "bits low": ({**meta, "bits": "24"}, tensors, r"metadata bits = '24', expected an integer from 53"),
        "prelayer_version alone": ({**meta, "prelayer_version": "1"}, tensors,
                                   "metadata prelayer: missing .*prelayer_version"),
        "prelayer alone": ({**meta, "prelayer": "mean-shift"}, tensors,
                           "metadata prelayer_version: missing"),
        "report_sha256": ({**meta, "report_sha256": "xyz"}, tensors,
                          r"metadata report_sha256 = 'xyz', expected 64 lowercase hex digits"),
    }
    for case, (m, t, needle) in cases.items():
        path = _write(tmp_path, f"{case}.safetensors", save(t, metadata=m))
        with pytest.raises(InputError, match=needle) as info:
            read_safetensors(path)
        assert str(path) in str(info.value), case
    assert read_safetensors(_write(tmp_path, "ok.safetensors", save(tensors, metadata=meta))).H == 4


def test_read_safetensors_names_the_file_of_tensors_the_weights_refuse(small, tmp_path):
    # NaN weights, a 1-D W_D or an unknown prelayer were refused without the file's name.
    from safetensors.numpy import save
    weights, _ = small
    tensors, meta = _safetensors_parts(weights)
    cases = {"nan": ({**tensors, "W_D": tensors["W_D"] * np.nan}, meta, "W_D: non-finite"),
             "flat": ({**tensors, "W_D": tensors["W_D"][:, 0]}, meta, r"W_D: expected shape \(d, d_o\)"),
             "layer": (tensors, {**meta, "prelayer": "bogus", "prelayer_version": "1"}, "unknown layer 'bogus'")}
    for case, (t, m, needle) in cases.items():
        path = _write(tmp_path, f"{case}.safetensors", save(t, metadata=m))
        with pytest.raises(InputError, match=needle) as info:
            read_safetensors(path)
        assert str(path) in str(info.value), case
    with pytest.raises(InputError, match="path: expected a path"):
        read_safetensors(None)


def test_onnx_model_refuses_a_dtype_export_does_not_write(small):
    # A hostile trial: onnx_model(w, "float16") built float16 initializers behind float inputs, a
    # model onnxruntime refuses to load ("Type parameter (T) of Optype (MatMul) bound to different
    # types"); "int8" gave an INVALID_GRAPH model and "banana" NumPy's TypeError.
    from construct.export import onnx_model
    weights, _ = small
    for dtype in ("float16", "int8", "banana", None):
        with pytest.raises(InputError, match=r"dtype must be one of float64, float32, got"):
            onnx_model(weights, dtype)


def test_onnx_model_refuses_weights_beyond_float32_by_name(small):
    # Called directly, onnx_model(w, "float32") wrote infinite initializers (NumPy's overflow
    # warning) for weights export_bytes refuses by name.
    import dataclasses
    import warnings
    from construct.export import onnx_model
    weights, _ = small
    huge = dataclasses.replace(weights, W_O=weights.W_O * 1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="W_O: values up to .* exceed float32's range"):
            onnx_model(huge, "float32")
    assert onnx_model(huge, "float64").graph.name == "mha_construct"


def test_float16_weights_are_read_alike_by_both_readers(small, tmp_path):
    # A hostile trial: load_state_dict took float16 weights (to_torch makes them) while
    # read_safetensors refused float16 tensors. Both now read them: float16 widens to float64
    # exactly, and both give the same weights; evaluate runs either file at float16.
    from safetensors.numpy import save
    from construct.torch_model import from_torch, load_state_dict, to_torch
    weights, data = small
    half = {k: v.astype(np.float16) for k, v in _safetensors_parts(weights)[0].items()}
    meta = {**_safetensors_parts(weights)[1], "dtype": "float16"}
    st = _write(tmp_path, "half.safetensors", save(half, metadata=meta))
    pt = tmp_path / "half.torch"
    torch.save(to_torch(weights, dtype=torch.float16).state_dict(), pt)
    module = load_state_dict(torch.load(pt, weights_only=True))
    assert module.W_K.dtype == torch.float16
    for back in (read_safetensors(st), from_torch(module)):
        assert all(np.array_equal(getattr(back, k), half[k].astype(np.float64)) for k in half)
    for path, fmt in ((st, "safetensors"), (pt, "torch")):
        f = evaluate(path, fmt, data.E, data.X)
        assert f.dtype == np.float64 and np.abs(f - data.Y).max() < 0.1      # float16's rounding


def test_both_readers_refuse_matrices_of_mixed_or_unusable_dtypes_by_name(small, tmp_path):
    # A state dict with W_K float16 and W_D float64 loaded W_D rounded to float16 without a word
    # (the module takes W_K's dtype); float8 matrices raised PyTorch's NotImplementedError
    # ("isfinite" not implemented), and to_torch(w, torch.float8_e4m3fn) made a module that
    # cannot run, range-checked as float32; a bfloat16 safetensors file gave NumPy's TypeError.
    from safetensors.torch import save
    from construct.torch_model import load_state_dict, to_torch
    weights, _ = small
    state = to_torch(weights).state_dict()
    cases = [({**state, "W_K": state["W_K"].half()},
              r"several dtypes \(W_K torch.float16; W_Q, W_V, W_O, W_D torch.float64\)"),
             ({k: (v.to(torch.float8_e4m3fn) if k.startswith("W_") else v) for k, v in state.items()},
              r"W_K: torch.float8_e4m3fn, expected torch.float16, torch.bfloat16, torch.float32 or torch.float64")]
    for bad, needle in cases:
        with pytest.raises(InputError, match=needle):
            load_state_dict(bad)
    with pytest.raises(InputError, match="dtype: expected torch.float16, torch.bfloat16, torch.float32 or "
                                         "torch.float64, got torch.float8_e4m3fn"):
        to_torch(weights, dtype=torch.float8_e4m3fn)
    with pytest.raises(InputError, match="dtype: expected"):
        to_torch(weights, dtype=np.zeros(2))              # not a dtype: no ambiguous comparison
    assert load_state_dict(to_torch(weights, dtype=torch.bfloat16).state_dict()).W_K.dtype == torch.bfloat16
    meta = {**_safetensors_parts(weights)[1], "dtype": "bfloat16"}
    bf16 = {k: v.to(torch.bfloat16) for k, v in state.items() if k.startswith("W_")}
    path = _write(tmp_path, "bf16.safetensors", save(bf16, metadata=meta))
    # NumPy holds bfloat16 once ml_dtypes is imported (onnx imports it): refused by its dtype
    # then, by NumPy's TypeError before.
    with pytest.raises(InputError, match=r"bf16\.safetensors: W_K: .*bfloat16.*expected float16, float32 or float64"):
        read_safetensors(path)


def test_read_safetensors_refuses_float8_tensors_and_endless_digits_by_name(small, tmp_path):
    # A review: a float8 tensor raised NumPy's AttributeError (no float8 dtype), and a size or
    # bits of 5001 digits Python's ValueError (its limit on converting long digit strings).
    from safetensors.torch import save
    weights, _ = small
    tensors, meta = _safetensors_parts(weights)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    f8 = _write(tmp_path, "f8.safetensors", save({**state, "W_D": state["W_D"].to(torch.float8_e4m3fn)},
                                                    metadata=meta))
    with pytest.raises(InputError, match=r"f8\.safetensors: W_D: "):
        read_safetensors(f8)
    for key in ("d", "bits"):
        path = _write(tmp_path, f"long-{key}.safetensors", save(state, metadata={**meta, key: "1" + "0" * 5000}))
        with pytest.raises(InputError, match=f"long-{key}.safetensors: metadata {key} = '10000"):
            read_safetensors(path)


@pytest.mark.parametrize("fmt", [np.array(["onnx", "x"]), np.array(["onnx"]), ["onnx"]])
def test_a_format_that_is_not_a_string_is_refused_by_name(small, tmp_path, fmt):
    # A review: an array as the format raised NumPy's "truth value ... is ambiguous", and a
    # one-element array was taken as the string.
    weights, data = small
    with pytest.raises(InputError, match="format must be one of"):
        evaluate(tmp_path / "m.onnx", fmt, data.E, data.X)
    with pytest.raises(InputError, match="format must be one of"):
        export_bytes(weights, fmt)


def test_metadata_values_are_shown_cut_short(small, tmp_path):
    # A review: a version of 100,000 characters was echoed whole, and a long dtype once per tensor.
    from safetensors.numpy import save
    weights, _ = small
    tensors, meta = _safetensors_parts(weights)
    for key in ("version", "dtype", "format"):
        path = _write(tmp_path, f"{key}.safetensors", save(tensors, metadata={**meta, key: "x" * 100_000}))
        with pytest.raises(InputError, match=f"{key} = 'x{{80}}…'") as info:
            read_safetensors(path)
        assert len(str(info.value)) < 2000, key


@pytest.mark.filterwarnings("ignore:.*(beta state|prototype stage|are deprecated):UserWarning")
def test_load_state_dict_refuses_tensors_without_plain_values_by_name(small):
    # A hostile trial: sparse matrices (COO, CSR), mkldnn and nested tensors raised PyTorch's
    # NotImplementedError or RuntimeError ("Could not run 'aten::ne.Scalar' with arguments from
    # the 'SparseCPU' backend", "unsupported tensor layout: SparseCsr"), meta tensors "Tensor.item()
    # cannot be called on meta tensors", a sparse skip "Error(s) in loading state_dict", and two
    # unexpected keys of different types (3 and (1, 2)) Python's TypeError from sorting them.
    from construct.torch_model import from_torch, load_state_dict, to_torch
    weights, _ = small
    state = to_torch(weights).state_dict()
    rows = state["W_D"].unbind(0)
    cases = [({**state, "W_K": state["W_K"].to_sparse()},
              r"W_K: a torch.sparse_coo tensor; expected a dense \(strided\) one"),
             ({**state, "W_D": state["W_D"].to_sparse_csr()}, r"W_D: a torch.sparse_csr tensor; expected a dense"),
             ({**state, "W_D": state["W_D"].float().to_mkldnn()}, r"W_D: a torch._mkldnn tensor; expected a dense"),
             ({**state, "W_D": torch.nested.as_nested_tensor(list(rows))}, "W_D: a nested tensor; expected a dense"),
             ({**state, "W_Q": state["W_Q"].to("meta")}, "W_Q: a tensor on the meta device, which holds no values"),
             ({k: v.to("meta") for k, v in state.items()}, "(?s)W_K: a tensor on the meta device.*skip: a tensor on "
                                                            "the meta device.*mean_shift: a tensor on the meta device"),
             ({**state, "skip": state["skip"].to_sparse()}, "skip: a torch.sparse_coo tensor; expected a dense"),
             ({**state, 3: state["W_D"], (1, 2): 0}, r"(?s)\(1, 2\): unexpected entry.*3: unexpected entry"),
             # Already refused by name: complex and quantized tensors, values that are not tensors.
             ({**state, "W_K": state["W_K"].to(torch.complex128)}, "W_K: torch.complex128, expected a floating-point"),
             ({**state, "W_D": torch.quantize_per_tensor(state["W_D"].float(), 0.1, 0, torch.qint8)},
              "W_D: torch.qint8, expected a floating-point"),
             ({**state, "W_K": {"W_K": state["W_K"]}}, "W_K: dict, expected a floating-point tensor"),
             ({**state, "W_K": state["W_K"].tolist()}, "W_K: list, expected a floating-point tensor")]
    for bad, needle in cases:
        with pytest.raises(InputError, match=needle) as info:
            load_state_dict(bad)
        assert type(info.value) is InputError and "invalid state dict" in str(info.value)
    # Tensors that require grad, and strided views that are not contiguous, hold plain values: read as they are.
    plain = {**state, "W_K": state["W_K"].clone().requires_grad_(True),
             "W_Q": state["W_Q"].transpose(1, 2).contiguous().transpose(1, 2)}
    back = from_torch(load_state_dict(plain))
    assert all(np.array_equal(getattr(back, k), getattr(weights, k)) for k in ("W_K", "W_Q", "W_V", "W_O", "W_D"))


@pytest.mark.filterwarnings("ignore:.*(beta state|prototype stage|are deprecated):UserWarning")
def test_tensors_with_the_negative_bit_load_as_their_values_and_subclasses_are_refused_by_name(small, tmp_path):
    # Found by a review: a tensor holding its values negated with PyTorch's negative bit (which
    # torch.save keeps and torch.load(weights_only=True) gives back) raised RuntimeError "Can't
    # call numpy() on Tensor that has negative bit set" from load_state_dict, and so from
    # evaluate on such a file; a MaskedTensor raised ".numpy() is not supported for tensor subclasses".
    from construct.torch_model import from_torch, load_state_dict, to_torch
    weights, data = small
    state = to_torch(weights).state_dict()
    negated = {**state, "W_K": torch._neg_view(-state["W_K"]), "W_D": torch._neg_view(-state["W_D"])}
    assert negated["W_K"].is_neg() and torch.equal(negated["W_K"], state["W_K"])
    back = from_torch(load_state_dict(negated))
    assert all(np.array_equal(getattr(back, k), getattr(weights, k)) for k in ("W_K", "W_Q", "W_V", "W_O", "W_D"))
    torch.save(negated, tmp_path / "negated.torch")
    np.testing.assert_array_equal(evaluate(tmp_path / "negated.torch", "torch", data.E, data.X),
                                  evaluate(_write(tmp_path, "m.torch", export_bytes(weights, "torch")), "torch",
                                           data.E, data.X))
    masked = torch.masked.masked_tensor(state["W_Q"], torch.ones_like(state["W_Q"], dtype=torch.bool))
    with pytest.raises(InputError, match="W_Q: a tensor subclass, MaskedTensor; expected a plain torch.Tensor") as info:
        load_state_dict({**state, "W_Q": masked})
    assert type(info.value) is InputError


def test_export_refuses_a_tolerance_with_no_data_to_apply_it_to(small, tmp_path):
    # The command line refuses --tol with no dataset ("an option with nothing to apply to is
    # refused, not ignored"); export(..., tol=1e-3) with data=None wrote the file and ignored tol.
    from construct.export import export
    weights, _ = small
    with pytest.raises(InputError, match="tol.*data"):
        export(weights, "safetensors", tmp_path / "w.safetensors", tol=1e-3)
    assert not (tmp_path / "w.safetensors").exists()
    assert export(weights, "safetensors", tmp_path / "w.safetensors")["path"].endswith("w.safetensors")


def test_a_safetensors_file_declaring_a_tensor_beyond_memory_is_refused_by_name(small, tmp_path):
    # A hostile trial: a sparse file (4 KiB on disk) whose header declares a 200 GiB W_K made
    # safetensors raise MemoryError and then panic (pyo3's PanicException, a BaseException that
    # `except Exception` does not catch), with a Rust backtrace.
    weights, data = small
    raw = export_bytes(weights, "safetensors")
    size = int.from_bytes(raw[:8], "little")
    header, payload = json.loads(raw[8:8 + size]), raw[8 + size:]
    count = 200 * 2**30 // 8 // 4
    new, body, offset = {"__metadata__": header["__metadata__"]}, b"", 0
    for name in sorted(k for k in header if k not in ("__metadata__", "W_K")):
        start, stop = header[name]["data_offsets"]
        new[name] = dict(header[name], data_offsets=[offset, offset + stop - start])
        body += payload[start:stop]
        offset += stop - start
    new["W_K"] = {"dtype": "F64", "shape": [1, 4, count], "data_offsets": [offset, offset + 8 * 4 * count]}
    text = json.dumps(new).encode()
    text += b" " * (-len(text) % 8)
    path = tmp_path / "sparse.safetensors"
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + body)
        f.truncate(8 + len(text) + offset + 8 * 4 * count)
    for call in (lambda: read_safetensors(path), lambda: evaluate(path, "safetensors", data.E, data.X)):
        with pytest.raises(InputError, match=r"W_K.*\(1, 4, 6710886400\)"):
            call()


def test_a_state_dict_with_an_expanded_tensor_beyond_memory_is_refused_by_name(small, tmp_path):
    # A hostile trial: torch.save keeps a stride-0 expand() as one value, so a 3.9 KB file held a
    # W_K of shape (2^16, 6, 2^30); the finiteness test allocated 3.4e15 bytes and raised
    # PyTorch's RuntimeError (can't allocate memory).
    from construct.torch_model import load_state_dict, to_torch
    weights, data = small
    state = {**to_torch(weights).state_dict(), "W_K": torch.zeros(1, dtype=torch.float64).expand(2**16, 4, 2**30)}
    torch.save(state, tmp_path / "expanded.pt")
    with pytest.raises(InputError, match=r"W_K.*\(65536, 4, 1073741824\)"):
        load_state_dict(state)
    with pytest.raises(InputError, match=r"W_K.*\(65536, 4, 1073741824\)"):
        evaluate(tmp_path / "expanded.pt", "torch", data.E, data.X)


def test_an_export_whose_trial_copy_cannot_be_written_names_where(small, tmp_path, monkeypatch):
    # A hostile trial: with TMPDIR on a full disk, export --data said only "error: [Errno 28] No
    # space left on device". It names the folder and what it was writing now; nothing is written.
    import errno
    import tempfile
    from pathlib import Path

    from construct.errors import OutputError
    from construct.export import export
    weights, data = small
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no such folder"))
    with pytest.raises(OutputError, match=r"no such folder: no folder for the model's trial copy .* set TMPDIR"):
        export(weights, "safetensors", tmp_path / "m.safetensors", data=data)
    monkeypatch.setattr(tempfile, "tempdir", None)
    real = Path.write_bytes

    def full(self, payload):
        if self.name.startswith("model."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, payload)
    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OutputError, match=r"model\.safetensors: the model's trial copy .*\(No space left .* set TMPDIR"):
        export(weights, "safetensors", tmp_path / "m.safetensors", data=data)
    assert not (tmp_path / "m.safetensors").exists()


def test_a_state_dict_whose_matrices_together_exceed_memory_is_refused_before_reading(small, monkeypatch):
    # A review: the memory test ran per tensor, so five expanded tensors each under the limit
    # were made whole together (800 MiB more where 256 MiB were free).
    import construct.limits as limits
    from construct.torch_model import load_state_dict, to_torch
    weights, _ = small
    monkeypatch.setattr(limits, "available_memory", lambda: 256 * 2**20)
    each = 256 * 2**20 // (3 * 8) * 9 // 10                # 90% of what one tensor may hold alone
    state = to_torch(weights).state_dict()
    state = {**state, **{k: torch.zeros(1, dtype=torch.float64).expand(1, 1, each) if k in ("W_K", "W_Q", "W_V")
                         else state[k] for k in ("W_K", "W_Q", "W_V")}}
    with pytest.raises(InputError, match=r"W_K \(1, 1, \d+\), W_Q .* needs about"):
        load_state_dict(state)
