"""The construction's weights, bit for bit, on a fixed list of builds.

Recorded before the engine was split into stages over an arithmetic seam (issue #12): a
refactoring of the engine must not change a single bit of what it builds. The hashes are of
:meth:`Weights.to_bytes` (the ``weights.npz`` that ``build`` writes).

Float64 results depend on the kernels as well as on the code, and OpenBLAS and NumPy pick their
kernels for the CPU they run on: on a CPU with AVX-512 they take other kernels than on one with
AVX2 alone, which round differently (the hashes recorded on an AVX-512 machine failed on an AVX2
one). So the builds run in a child process held to the AVX2 kernels, OpenBLAS's ``Haswell``
(``OPENBLAS_CORETYPE``) and NumPy without its AVX-512 targets (``NPY_DISABLE_CPU_FEATURES``),
which every x86-64 CPU with AVX2 and FMA runs: the same bits on every such machine, whatever
its own best kernels; the child reports both, and a test checks them. The message names the
kernels when a hash differs. Elsewhere (ARM, say) the builds run in this process and are checked
to pass, and the comparison with the hashes is skipped.

The kernels are also those of one NumPy, one SciPy and the OpenBLAS builds their wheels carry:
another release computes the same float64 operations in other orders. The hashes were recorded
with the releases in ``RECORDED_WITH``; with those, an Intel Xeon (glibc 2.39, Python 3.12) gave
the hashes recorded on an AMD EPYC (glibc 2.36, Python 3.11), while NumPy 2.5.2 with SciPy 1.18.1
changed every one of them. On other releases the comparison is skipped, naming both sets; the
builds are still checked to pass.
"""

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from construct import as_dataset, build, synthetic

from .strategies import near_degenerate_family

ROOT = Path(__file__).resolve().parents[1]

# name: (problem, build options, sha256 of the weights file)
CASES = {
    "independent": (dict(kind="independent", T=13, n=4, d=7), dict(heads=4),
                    "8b179272f28e3b91da9893598dbd3ff47c016a4dfaf881b57a95b572fc1ce977"),
    "shared": (dict(kind="shared", T=13, n=4, d=7), dict(heads=4),
               "bf80878dcbb1a3b62127b049c2937f57eaf82f8f0058e7d32cbfa95f71bb9df4"),
    "general-position": (dict(kind="general-position", T=13, n=4, d=7), dict(heads=4),
                         "f49aaeaf0e697f3426b12b19a4cc2a791ca3cda5a3de37429c6ceaec1583d386"),
    "skip": (dict(kind="independent", T=13, n=4, d=7), dict(heads=4, skip=True),
             "f807f3ffe516f4f1f867421677f03df4e466f780cfb3f0f17b7e48d10bcd66fa"),
    "head-dim-below-n": (dict(kind="independent", T=9, n=5, d=8), dict(heads=4, head_dim=3),
                         "e7a0031583ee436e8915d50c27826c6fa7550fe191a60ab97d9fb644eac19df5"),
    "multi-output": (dict(kind="independent", T=13, n=4, d=7, d_o=3), dict(heads=4, value_dim=4),
                     "42c2beb8457048a08f8b12aabe85c43f234fc86a782d8bdf2fcbc2ac9e70a997"),
    "scale-saturating": (dict(kind="independent", T=13, n=4, d=7), dict(heads=4, scale="saturating"),
                         "d6e3e45dd370015a571f7c956814ca0a1878173004101ff5871a86d29bdd7c7d"),
    "scale-explicit": (dict(kind="independent", T=10, n=4, d=7), dict(heads=3, scale="explicit"),
                       "1095dfb8bd72217487a2b0d2505d911b9007a7e98c8bb3b25a3cd1cc306f8fec"),
    "shared-saturating": (dict(kind="shared", T=13, n=4, d=7), dict(heads=4, scale="saturating"),
                          "864ec34ab6ed8dae4ef794d1a83b9b9848b27edd56779826c77f10cf2c7a0044"),
    "mpmath-128-bits": (dict(kind="independent", T=7, n=3, d=5), dict(heads=3, precision=128),
                        "62b8d49b1133e349bd9d5c77f0c614898184092ae246e98a8b57b8ebccf173cc"),
    "auto-chooses-mpmath": (dict(kind="near-degenerate"), dict(heads=3),
                            "1b776c6985cbadd6f967d0498996217f81630e491a01a6ae4b9e81d2815ca4fc"),
    "auto-mpmath-explicit": (dict(kind="near-degenerate"), dict(heads=3, scale="explicit"),
                             "8dedd298add9b49a32b059159d0ecc4ae4a390f092d227b17d71189ba56f98cc"),
    "data-at-unit-scale": (dict(kind="independent", T=13, n=4, d=7, factor=2.0 ** 80), dict(heads=4),
                           "47776e5b0bcbca959ee9dcf54a6281b807398e63be9ef3ad4603c014ddc9e4a3"),
    "positional": (dict(kind="independent", T=13, n=4, d=7, positional=True), dict(heads=4),
                   "b6aed945a4d2a649678e163e89e3ae8f159074cccb519dbb1da62c3b2488dea6"),
    # The benchmark's shape (n = 32, d = 64): BLAS takes other kernels there than at n = 4, so a
    # change of memory layout that small problems do not see changes bits here (it did once).
    "n32-independent": (dict(kind="independent", T=249, n=32, d=64), dict(heads=8),
                        "5d222f07fb0e61a75c4cea9113fd349e4f33197c7c80e261b253ad5c8d41682e"),
    "n32-shared": (dict(kind="shared", T=249, n=32, d=64), dict(heads=8),
                   "8ea959a7946ed4f65b017e4d71daf3b8345b8a9708e9404a5a1be3b66bf59833"),
    "H64-independent": (dict(kind="independent", T=449, n=8, d=16), dict(heads=64),
                        "cdd91f532c4938ee9bb81eef0a6c87de38dc9e4cd8f0c7a59eb534e76037dd77"),
    "H64-shared": (dict(kind="shared", T=449, n=8, d=16), dict(heads=64),
                   "7c4e8e626886bcd0e89f0ac015ee3acab80fb6d5981fb267fab6b198657223ff"),
}


# The releases the hashes were recorded with: NumPy, SciPy and their BLAS libraries.
RECORDED_WITH = {"numpy": "2.4.6", "scipy": "1.17.1", "blas": ["openblas 0.3.30", "openblas 0.3.31.188.0"]}


def releases() -> dict:
    """The releases whose kernels the builds ran on, as ``RECORDED_WITH`` names them (after a
    build, so that every BLAS library the engine loads is counted)."""
    import scipy
    return {"numpy": np.__version__, "scipy": scipy.__version__,
            "blas": sorted(f"{p['internal_api']} {p['version']}" for p in threadpool_info() if p["user_api"] == "blas")}


def problem(kind, T=None, n=None, d=None, d_o=1, positional=False, factor=None):
    if kind == "near-degenerate":
        return near_degenerate_family(1e-13)
    data = synthetic(kind, T=T, n=n, d=d, d_o=d_o, seed=7, positional=positional)
    return as_dataset(data.E * factor, data.X, data.Y * factor) if factor else data


def blas() -> str:
    np.ones(1) @ np.ones(1)                          # make sure the BLAS is loaded
    return ", ".join(f"{p['internal_api']} {p['version']} ({p.get('architecture')})"
                     for p in threadpool_info() if p["user_api"] == "blas")


# NumPy's AVX-512 targets under the names its versions dispatch (X86_V4 since NumPy 2.4, the
# AVX512_* names before). Only those the running NumPy dispatches are named to it: it warns about
# others, which PYTHONWARNINGS=error would turn into a failed child.
AVX512_TARGETS = ("X86_V4", "AVX512F", "AVX512CD", "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX",
                  "AVX512_CNL", "AVX512_ICL", "AVX512_SPR")


def simd() -> tuple[dict, list]:
    """NumPy's CPU features (after any disabling) and the targets it dispatches."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:                                                 # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return dict(__cpu_features__), list(__cpu_dispatch__)


def kernels() -> dict:
    """The environment of the child: the AVX2 kernels on any x86-64 CPU (module docstring)."""
    _, dispatched = simd()
    env = {k: v for k, v in os.environ.items() if k != "NPY_ENABLE_CPU_FEATURES"}   # the two cannot be set together
    env.update(OPENBLAS_CORETYPE="Haswell",
               NPY_DISABLE_CPU_FEATURES=" ".join(t for t in AVX512_TARGETS if t in dispatched),
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return env


def built() -> dict:
    out = {}
    for name, (spec, options, _) in CASES.items():
        result = build(problem(**spec), seed=11, **options)
        out[name] = [hashlib.sha256(result.weights.to_bytes()).hexdigest(), bool(result.verification.passed),
                     result.precision]
    return out


CHILD = """
import json
from tests.test_same_weights import AVX512_TARGETS, blas, built, releases, simd
features, dispatched = simd()
builds = built()
print(json.dumps({"blas": blas(), "avx512": [t for t in AVX512_TARGETS if t in dispatched and features.get(t)],
                  "releases": releases(), "builds": builds}))
"""


@pytest.fixture(scope="module")
def pinned_builds():
    features, _ = simd()
    avx2 = features.get("X86_V3") or (features.get("AVX2") and features.get("FMA3"))
    if platform.machine().lower() not in ("x86_64", "amd64") or not avx2:
        # The hashes are of x86-64's AVX2 kernels; here the builds are still checked to pass.
        return {"blas": blas(), "avx512": [], "builds": built(), "pinned": False}
    run = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=kernels())
    assert run.returncode == 0, run.stderr[-3000:]
    return {**json.loads(run.stdout.splitlines()[-1]), "pinned": True}


def test_the_child_runs_the_avx2_kernels(pinned_builds):
    if not pinned_builds["pinned"]:
        pytest.skip(f"no AVX2 kernels on {platform.machine()}: the builds run here, unpinned")
    assert "Haswell" in pinned_builds["blas"] and all(
        arch == "Haswell" for arch in re.findall(r"\((\w+)\)", pinned_builds["blas"])), pinned_builds["blas"]
    assert pinned_builds["avx512"] == [], f"NumPy still dispatches {pinned_builds['avx512']}"


@pytest.mark.parametrize("name", CASES)
def test_the_weights_are_the_recorded_ones(name, pinned_builds):
    got, passed, precision = pinned_builds["builds"][name]
    assert passed
    if not pinned_builds["pinned"]:
        pytest.skip(f"the hashes are of x86-64's AVX2 kernels; this is {platform.machine()} without them")
    if pinned_builds["releases"] != RECORDED_WITH:
        pytest.skip(f"the hashes were recorded with {_named(RECORDED_WITH)}; this is {_named(pinned_builds['releases'])}, "
                    "whose kernels round otherwise")
    assert got == CASES[name][2], f"{name}: the weights changed ({precision}; kernels: {pinned_builds['blas']})"


def _named(releases: dict) -> str:
    return f"NumPy {releases['numpy']}, SciPy {releases['scipy']} ({', '.join(releases['blas'])})"
