"""The installed package holds every module of the source tree (a wheel, not the checkout)."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_module(tmp_path):
    # The tests import the checkout, so a subpackage missing from the install (construct.arith
    # was) would pass them all while `pip install . && mha-construct build` fails.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, cwd=tmp_path)
    wheel, = tmp_path.glob("mha_construct-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(ROOT).as_posix() for pkg in ("construct", "proofs") for p in (ROOT / pkg).rglob("*.py")}
    assert sources and sources <= names, sorted(sources - names)
    assert "construct/py.typed" in names                       # type checkers read the annotations
    import construct
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert f"Version: {construct.__version__}" in text          # one version, written in one place
    assert "License :: OSI Approved :: MIT License" in text and "arxiv.org/abs/2306.02010" in text


def test_version_license_citation_changelog(capsys):
    import construct
    from construct.cli import main
    try:
        main(["--version"])
    except SystemExit as stop:
        assert stop.code == 0
    assert capsys.readouterr().out.strip() == f"mha-construct {construct.__version__}"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    citation = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in citation and f"version: {construct.__version__}" in citation
    assert "Memorization Capacity of Multi-Head Attention in Transformers" in citation
    assert f"## {construct.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_short_reprs_and_save_load(tmp_path):
    import construct
    from construct.certify import certify
    data = construct.synthetic("independent", T=9, n=3, d=5, seed=1)
    result = construct.build(data, 4)
    walk = construct.teach()
    for obj in (data, result, result.weights, certify(result.weights, data, tol=1e-30), walk, walk.steps[0]):
        assert len(repr(obj)) < 200 and "array" not in repr(obj), repr(obj)
    assert repr(result.weights) == "Weights(H=4, d=5, d_h=3, d_v=1, d_o=1, skip=False, float64)"
    assert repr(data) == "Dataset(T=9, n=3, d=5, d_o=1)"
    # The result's summary names no field it does not have: it reads as a description.
    assert repr(result).startswith("<BuildResult: T = 9 examples, H = 4 heads (4 used), float64, scale rank;")
    assert "verification passed: rank Z = 9, max |f - y| = " in repr(result) and repr(result).endswith(">")
    cert = certify(result.weights, data, tol=1e-30)
    text = str(cert)
    assert "memorization   not proven: the bound" in text and "{" not in text
    result.weights.save(tmp_path / "w.npz")
    data.save(tmp_path / "d.npz")
    assert construct.Weights.load(tmp_path / "w.npz").to_bytes() == result.weights.to_bytes()
    assert construct.Dataset.load(tmp_path / "d.npz").to_bytes() == data.to_bytes()
    cert.save(tmp_path / "c.json")
    from construct.certify import check_certificate, read_certificate
    assert check_certificate(read_certificate((tmp_path / "c.json").read_bytes()), result.weights, data) == []
    result.save(tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["data.npz", "report.json", "weights.npz"]


def test_a_build_saved_from_python_keeps_the_class_ids_as_the_cli_does(tmp_path):
    # A researcher's trial: own-data.md says the class ids are in report.json's data.classes;
    # `mha-construct build` wrote them, `result.save` did not.
    import construct
    from construct.cli import main
    rng = np.random.default_rng(0)
    E, X = rng.standard_normal((12, 3, 6)), rng.standard_normal((12, 6))
    labels = np.array([-3, 7, 100] * 4)
    construct.build(construct.as_dataset(E, X, labels=labels), 6).save(tmp_path / "py")
    from construct.io import npz_bytes
    (tmp_path / "d.npz").write_bytes(npz_bytes({"E": E, "X": X, "labels": labels}))
    assert main(["build", str(tmp_path / "d.npz"), "--heads", "6", "--out", str(tmp_path / "cli"), "--quiet"]) == 0
    py, cli = (json.loads((tmp_path / f / "report.json").read_text())["data"] for f in ("py", "cli"))
    assert py["classes"] == cli["classes"] == [-3, 7, 100]
    assert py["source"] == "python" and py["sha256"] == cli["sha256"]
    unlabelled = construct.synthetic("independent", T=7, n=3, d=5, seed=0)
    construct.build(unlabelled, 3).save(tmp_path / "plain")
    assert "classes" not in json.loads((tmp_path / "plain" / "report.json").read_text())["data"]


def test_a_certificates_repr_names_attributes_it_has():
    # A new user's trial: repr said `Certificate(passed=True, method='float64', rank=proven, …)`,
    # but `cert.rank` and `cert.method` raised AttributeError; the claims were only in
    # `cert.claims`, the whole JSON document.
    import construct
    from construct.certify import certify
    data = construct.synthetic("independent", T=9, n=3, d=5, seed=1)
    weights = construct.build(data, 4).weights
    cert, strict = certify(weights, data), certify(weights, data, tol=1e-30, method="float64")
    assert repr(cert) == "Certificate(passed=True, method='float64', proven=('rank', 'memorization'))"
    assert repr(strict) == "Certificate(passed=False, method='float64', proven=('rank',))"
    assert cert.method == "float64" and cert.proven == ("rank", "memorization")
    assert cert.memorization is cert.claims["memorization"] and cert.memorization["max_abs_error_bound"] < 1e-8
    assert cert.rank["sigma_min_lower_bound"] > 0 and cert.classification is None


def test_type_checkers_see_the_signatures_of_the_decorated_functions(tmp_path):
    # py.typed promises annotations; numpy_error_defaults, untyped, turned build, verify, certify,
    # export, … into Any for a type checker: a user's mypy saw build(...) as Any and accepted
    # build(data, heads="2").
    script = tmp_path / "user.py"
    script.write_text("import construct\nfrom construct.certify import certify\n"
                      "d = construct.synthetic('independent', T=5, n=3, d=4)\n"
                      "r = construct.build(d)\nreveal_type(r)\n"
                      "reveal_type(construct.verify(r.weights, d))\nreveal_type(certify(r.weights, d))\n"
                      "construct.build(d, heads='2')\nconstruct.build(d, precision=80)\n")
    # From the root, mypy reads the checkout; its cache goes to tmp_path, not into the checkout.
    run = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
                          "--cache-dir", str(tmp_path / "mypy-cache"), str(script)],
                         capture_output=True, text=True, cwd=ROOT)
    out = run.stdout + run.stderr          # "No module named mypy" (the [test] extras hold it) is on stderr
    assert 'Revealed type is "construct.evidence.BuildResult"' in out, out
    assert 'Revealed type is "construct.verify.Verification"' in out, out
    assert 'Revealed type is "construct.certify.Certificate"' in out, out
    assert 'user.py:8: error: Argument "heads" to "build"' in out, out
    assert "user.py:9:" not in out, out                       # a number of bits, as documented


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter from the checkout's root: an import of the package
    that nothing before it has made."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])


def test_the_package_loads_its_names_on_first_use_and_keeps_the_functions():
    # `import construct` (and the command line's start) no longer imports NumPy and SciPy; each
    # name loads its module on first use. build, verify and teach name both a function and its
    # module: importing the module first must not take the name from the function.
    code = ("import sys, types\n"
            "import construct\n"
            "assert 'numpy' not in sys.modules and 'scipy' not in sys.modules\n"
            "import construct.build, construct.teach\n"
            "from construct.verify import Verification\n"
            "for name in ('build', 'verify', 'teach'):\n"
            "    f = getattr(construct, name)\n"
            "    assert isinstance(f, types.FunctionType) and f.__module__ == 'construct.' + name, f\n"
            "from construct import *\n"
            "assert Verification is construct.Verification and callable(synthetic)\n"
            "assert set(construct.__all__) <= set(dir(construct))\n"
            "print(construct.build(construct.synthetic('independent', T=7, n=3, d=4), 3).verification.passed)\n"
            "import importlib\n"                      # a reload of both finds the new function
            "old = construct.build\n"
            "importlib.reload(sys.modules['construct.build']); importlib.reload(construct)\n"
            "assert construct.build is not old and construct.build is sys.modules['construct.build'].build\n")
    out = _fresh_python(code)
    assert out.returncode == 0 and out.stdout == "True\n", out.stderr


def test_every_submodule_is_an_attribute_after_a_plain_import():
    # From review: the eager imports had made every submodule an attribute of the package as a side
    # effect (construct.errors.InputError, construct.arith.rank_tol, as docs/numerics.md writes
    # them); with names loaded on first use they were AttributeErrors until something imported them.
    code = ("import construct, sys\n"
            "assert 'numpy' not in sys.modules\n"
            "assert construct.errors.InputError is construct.InputError\n"
            "assert callable(construct.arith.rank_tol) and callable(construct.arith.threads.together)\n"
            "assert construct.model.Weights is construct.Weights and callable(construct.dword.outputs)\n"
            "assert {'arith', 'dword', 'errors', 'model', 'certify'} <= set(dir(construct))\n"
            "for name in ('no_such_module', 'arith.threads', '__wrapped__'):\n"
            "    assert not hasattr(construct, name), name\n")
    out = _fresh_python(code)
    assert out.returncode == 0, out.stderr


def test_the_documented_dotted_names_work_after_a_plain_import():
    # A new user's trial: the docs write construct.datasets.digits(...), construct.export.evaluate
    # and construct.torch_model.to_torch, and after `import construct` each was an AttributeError.
    code = ("import construct, sys\n"
            "assert 'construct.datasets' not in sys.modules\n"
            "assert callable(construct.datasets.digits) and callable(construct.export.evaluate)\n"
            "assert callable(construct.certify.certify) and callable(construct.baselines.gradient_descent)\n"
            "assert callable(construct.sweeps.sweep)\n"
            "assert 'datasets' in dir(construct)\n"
            "try:\n    construct.no_such_module\nexcept AttributeError as e:\n    print(e)\n")
    out = _fresh_python(code)
    assert out.returncode == 0, out.stderr
    assert "has no attribute 'no_such_module'" in out.stdout
