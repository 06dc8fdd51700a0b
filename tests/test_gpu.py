"""The device choice (issue #14): ``--device {auto,cpu,gpu}``, and the GPU path where a GPU is.

Tests marked ``gpu`` need CuPy and a CUDA device that can allocate; elsewhere they are skipped
with the probe's reason. The others run everywhere: the choice, its report, its errors.
"""

import json

import numpy as np
import pytest

from construct import InputError, build, synthetic, verify
from construct.arith import gpu
from construct.certify import certify
from construct.cli import main

GPU_OK, GPU_WHY = gpu.probe()


def needs_gpu(test):
    """Marked ``gpu``; skipped, with the probe's reason, where no GPU can be used."""
    return pytest.mark.gpu(pytest.mark.skipif(not GPU_OK, reason=f"no GPU: {GPU_WHY}")(test))


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "probe", lambda: (False, "CuPy is not importable (test)"))


def test_cpu_is_the_default_and_says_so():
    data = synthetic("independent", T=7, n=3, d=5, seed=0)
    result = build(data, 3)
    assert result.device == "cpu" and "cpu" in result.device_reason
    assert result.verification.device == "cpu"
    assert verify(result.weights, data).device == "cpu"


def test_auto_without_a_gpu_runs_on_the_cpu_and_says_why(no_gpu):
    data = synthetic("independent", T=7, n=3, d=5, seed=0)
    result = build(data, 3, device="auto")
    assert result.device == "cpu" and result.device_reason == "auto: CuPy is not importable (test)"
    assert result.verification.passed
    v = verify(result.weights, data, device="auto")
    assert v.passed and v.device == "cpu" and v.device_reason.startswith("auto:")


def test_asking_for_a_gpu_without_one_is_an_input_error_naming_the_reason(no_gpu):
    data = synthetic("independent", T=7, n=3, d=5, seed=0)
    with pytest.raises(InputError, match=r"--device gpu: no GPU can be used: CuPy is not importable \(test\)"):
        build(data, 3, device="gpu")
    with pytest.raises(InputError, match="no GPU can be used"):
        verify(build(data, 3).weights, data, device="gpu")


@pytest.mark.parametrize("bad", ["GPU", "cuda", "", None, 1])
def test_unknown_devices_are_refused(bad):
    data = synthetic("independent", T=7, n=3, d=5, seed=0)
    with pytest.raises(InputError, match="device must be one of auto, cpu, gpu"):
        build(data, 3, device=bad)


def test_the_probe_reports_a_missing_cupy_as_a_reason_not_an_exception(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def refuse_cupy(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse_cupy)
    ok, why = gpu.probe()
    assert not ok and why.startswith("CuPy is not importable (ImportError")


def test_cli_device_gpu_without_one_exits_2_and_writes_nothing(no_gpu, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["build", "--synthetic", "independent", "--heads", "2", "--context", "3", "--dim", "5",
                 "--device", "gpu", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "no GPU can be used" in err and "Traceback" not in err
    assert not (out / "weights.npz").exists()


def test_cli_reports_the_device(no_gpu, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["build", "--synthetic", "independent", "--heads", "2", "--context", "3", "--dim", "5",
                 "--device", "auto", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "device       cpu: auto: CuPy is not importable (test)" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["device"] == {"name": "cpu", "why": "auto: CuPy is not importable (test)"}
    assert main(["verify", str(out / "weights.npz"), str(out / "data.npz"), "--device", "auto", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"


# -- on a GPU ---------------------------------------------------------------------------------

@needs_gpu
@pytest.mark.parametrize("kind,H,n,d", [("independent", 8, 8, 16), ("shared", 8, 8, 16), ("general-position", 4, 4, 7)])
def test_a_gpu_build_is_ordinary_weights_that_the_cpu_verifies_and_certifies(kind, H, n, d):
    data = synthetic(kind, T=H * (n - 1) + 1, n=n, d=d, seed=2)
    result = build(data, H, device="gpu")
    assert result.device == "gpu" and result.verification.passed and result.precision == "float64 (cupy)"
    assert all(type(getattr(result.weights, m)) is np.ndarray for m in ("W_K", "W_Q", "W_V", "W_O", "W_D"))
    on_cpu = verify(result.weights, data)
    assert on_cpu.passed and on_cpu.device == "cpu"
    on_gpu = verify(result.weights, data, device="gpu")
    assert on_gpu.passed and on_gpu.device == "gpu"
    assert abs(on_gpu.sigma_min_Z - on_cpu.sigma_min_Z) <= 1e-8 * on_cpu.sigma_max_Z
    assert certify(result.weights, data).claims["rank"]["proven"]


@needs_gpu
def test_cpu_weights_verify_on_the_gpu():
    data = synthetic("independent", T=8 * 7 + 1, n=8, d=16, seed=4)
    weights = build(data, 8).weights
    v = verify(weights, data, device="gpu")
    assert v.passed and v.device == "gpu"


@needs_gpu
def test_gpu_kernels_agree_with_the_host():
    """The CuPy kernels behind the blocked factor and the rank: Householder panels, triangular
    solves, the in-place QR of Z^T, and the extremes of R by Lanczos."""
    import cupy
    from scipy.linalg import lapack

    from construct.arith.blocked import tp_update

    ar = gpu.CuPyFloat64()
    rng = np.random.default_rng(0)
    k, p, m = 37, 9, 3
    R = np.triu(rng.standard_normal((k, k))) + 3 * np.eye(k)
    B, X, Y = rng.standard_normal((p, k)), rng.standard_normal((k, m)), rng.standard_normal((p, m))
    B[:, 5] = 0.0                                               # an identity reflector
    R_ref, V, Tq, _ = lapack.dtpqrt(0, 1, np.asfortranarray(R), np.asfortranarray(B))
    X_ref, Y_ref, _ = lapack.dtpmqrt(0, V, Tq, np.asfortranarray(X), np.asfortranarray(Y), trans="T")
    R_gpu = cupy.asarray(R)
    X_out, Y_out = tp_update(ar, R_gpu, cupy.asarray(B), (cupy.asarray(X), cupy.asarray(Y)), panel=8)
    assert np.allclose(cupy.asnumpy(R_gpu), np.triu(R_ref), atol=1e-12)
    assert np.allclose(cupy.asnumpy(X_out), X_ref, atol=1e-12) and np.allclose(cupy.asnumpy(Y_out), Y_ref, atol=1e-12)
    b = rng.standard_normal((k, 2))
    assert np.allclose(cupy.asnumpy(ar.tri_solve(cupy.asarray(R), cupy.asarray(b), trans=True)),
                       np.linalg.solve(R.T, b), atol=1e-12)
    Z = rng.standard_normal((300, 700)) @ np.diag(np.logspace(0, -4, 700))
    Z_gpu = cupy.asarray(Z)
    for a, f in [(0, 5), (1, 1), (120, 333), (300, 700)]:               # products with Z[:a, :f], no copy
        Bf, Ca = rng.standard_normal((f, 4)), rng.standard_normal((3, a))
        assert np.allclose(cupy.asnumpy(ar.prefix_times(Z_gpu, a, f, cupy.asarray(Bf))), Z[:a, :f] @ Bf, atol=1e-12)
        assert np.allclose(cupy.asnumpy(ar.times_prefix(cupy.asarray(Ca), Z_gpu, a, f)), Ca @ Z[:a, :f], atol=1e-12)
    R_Z = ar.rows_r_factor(Z_gpu, overwrite=True)
    G = Z @ Z.T
    assert np.allclose(cupy.asnumpy(R_Z.T @ R_Z), G, atol=1e-12 * np.abs(G).max())
    s = np.linalg.svd(Z, compute_uv=False)
    s_max, s_min = ar.triangular_extremes(R_Z)
    assert abs(s_max - s[0]) <= 1e-10 * s[0] and abs(s_min - s[-1]) <= 1e-8 * s[-1]


@needs_gpu
@pytest.mark.parametrize("ill", [False, True])
def test_the_blocked_factor_on_the_gpu_matches_the_cpu_factor(ill):
    import cupy

    from construct.arith.blocked import BlockedRowFactor
    from construct.arith.factor import RowSpaceFactor

    rng = np.random.default_rng(1)
    sizes = [7] + [6] * 9
    T, F = sum(sizes), 12 * len(sizes)
    Z = rng.standard_normal((T, F))
    if ill:
        Z = Z @ np.diag(np.logspace(0, -7, F))
    gpu_factor = BlockedRowFactor(cupy.asarray(Z), gpu.CuPyFloat64())
    gpu_factor.panel = 16
    cpu_factor = RowSpaceFactor(Z.copy())
    stop = sizes[0]
    gpu_factor.stage(stop)
    cpu_factor.stage(stop)
    for i, m in enumerate(sizes[1:], start=1):
        C_gpu, C_cpu = gpu_factor.advance(12 * i, stop + m), cpu_factor.advance(12 * i, stop + m)
        assert np.allclose(cupy.asnumpy(C_gpu), C_cpu, atol=1e-9 * max(1, np.abs(C_cpu).max()))
        stop += m
    for f in (gpu_factor, cpu_factor):
        f.add_features(F)
        f.commit()
    R = cupy.asnumpy(gpu_factor.R)
    assert np.allclose(np.abs(R), np.abs(cpu_factor.R), atol=1e-9 * np.abs(cpu_factor.R).max())
