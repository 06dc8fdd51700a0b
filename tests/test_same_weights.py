"""The construction's weights, bit for bit, on a fixed list of builds.

Recorded before the engine was split into stages over an arithmetic seam (issue #12): a
refactoring of the engine must not change a single bit of what it builds. The hashes are of
:meth:`Weights.to_bytes` (the ``weights.npz`` that ``build`` writes). Float64 results depend on
the BLAS kernels as well as on the code, so they are pinned for the build of numpy/scipy this
project tests with (the wheels' OpenBLAS); the message names that library when a hash differs.
"""

import hashlib

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from construct import as_dataset, build, synthetic

from .strategies import near_degenerate_family

# name: (problem, build options, sha256 of the weights file)
CASES = {
    "independent": (dict(kind="independent", T=13, n=4, d=7), dict(heads=4),
                    "b04b53043740229b9c7efdb2a8c06d26efb596f032df0c60682945a4cc68fb5b"),
    "shared": (dict(kind="shared", T=13, n=4, d=7), dict(heads=4),
               "07d8cfba518930c25dfb862d3bdbe0a80130da8d309b962b4b1bd6947703f8e3"),
    "general-position": (dict(kind="general-position", T=13, n=4, d=7), dict(heads=4),
                         "5c55ae93ac9c990e29555b719b29d3dca53aecdbbaeba9982c3b391c2bb9f358"),
    "skip": (dict(kind="independent", T=13, n=4, d=7), dict(heads=4, skip=True),
             "830cb60bdbb0777d8e489d1322b19fdc57fb5048ee269939ad435c9a0edfa8ab"),
    "head-dim-below-n": (dict(kind="independent", T=9, n=5, d=8), dict(heads=4, head_dim=3),
                         "c7d33518d6cb63e551c827dda33e57858b46e1aa765020920e31caa4d3aa319a"),
    "multi-output": (dict(kind="independent", T=13, n=4, d=7, d_o=3), dict(heads=4, value_dim=4),
                     "8c7b5de40bfde1dc89858446cfd5d0c520b1731bc28f0e18659b25d9cd327a9f"),
    "scale-saturating": (dict(kind="independent", T=13, n=4, d=7), dict(heads=4, scale="saturating"),
                         "dcb6d637abd6d879e598ff59ab7293da8940326a113d81bb1f4152266856682f"),
    "scale-explicit": (dict(kind="independent", T=10, n=4, d=7), dict(heads=3, scale="explicit"),
                       "db7e66cdb9e47a33d39071afcbe0ff4a0f8d8f60018bb3497405e70d7f3b8d26"),
    "shared-saturating": (dict(kind="shared", T=13, n=4, d=7), dict(heads=4, scale="saturating"),
                          "3b166a6e132c52f00ab963b1ade619d6a8af3e9edc901ef8e26db272c0ec0305"),
    "mpmath-128-bits": (dict(kind="independent", T=7, n=3, d=5), dict(heads=3, precision=128),
                        "8c3fba35fb510d74fcf482ed8a96f698c8192c8492728e682296676fad300117"),
    "auto-chooses-mpmath": (dict(kind="near-degenerate"), dict(heads=3),
                            "3ea2865675600e57d7c03a7539ac0a041ae88d62562622c84f4b5c3723b3efb1"),
    "auto-mpmath-explicit": (dict(kind="near-degenerate"), dict(heads=3, scale="explicit"),
                             "142ff177a990a07c6fafbdad8e9a52a309291aa2cb6fa9ec18c11666617db3a5"),
    "data-at-unit-scale": (dict(kind="independent", T=13, n=4, d=7, factor=2.0 ** 80), dict(heads=4),
                           "0a4d1e56939d8a7cd1ac79ed320c87766c742450bf08ce775421990e65c1ab9f"),
    "positional": (dict(kind="independent", T=13, n=4, d=7, positional=True), dict(heads=4),
                   "46105ba1d701413fe917d0b3895ca2ab162647c7127e6ef1bfd9ecda32503d9d"),
    # The benchmark's shape (n = 32, d = 64): BLAS takes other kernels there than at n = 4, so a
    # change of memory layout that small problems do not see changes bits here (it did once).
    "n32-independent": (dict(kind="independent", T=249, n=32, d=64), dict(heads=8),
                        "f4570924ba2c9297dee1e2d9114edc29cd0c1fd4eea4f671079a2f211dca002b"),
    "n32-shared": (dict(kind="shared", T=249, n=32, d=64), dict(heads=8),
                   "1104ac01dd7f1bdc5af93853c03f5f829ea798200aa13da60ba73e674f91c6c8"),
    "H64-independent": (dict(kind="independent", T=449, n=8, d=16), dict(heads=64),
                        "57bff4dff81ff11023285e4a34778303711c98681bfc687285ef85fe11cc3b8c"),
    "H64-shared": (dict(kind="shared", T=449, n=8, d=16), dict(heads=64),
                   "3e0cbda4328b2d860303156bd899ddcfeaafae07816476b6bed1c0b3845c3171"),
}


def problem(kind, T=None, n=None, d=None, d_o=1, positional=False, factor=None):
    if kind == "near-degenerate":
        return near_degenerate_family(1e-13)
    data = synthetic(kind, T=T, n=n, d=d, d_o=d_o, seed=7, positional=positional)
    return as_dataset(data.E * factor, data.X, data.Y * factor) if factor else data


def blas() -> str:
    np.ones(1) @ np.ones(1)                          # make sure the BLAS is loaded
    return ", ".join(f"{p['internal_api']} {p['version']} ({p.get('architecture')})"
                     for p in threadpool_info() if p["user_api"] == "blas")


@pytest.mark.parametrize("name", CASES)
def test_the_weights_are_the_recorded_ones(name):
    spec, options, expected = CASES[name]
    data = problem(**spec)
    result = build(data, seed=11, **options)
    assert result.verification.passed
    got = hashlib.sha256(result.weights.to_bytes()).hexdigest()
    assert got == expected, f"{name}: the weights changed ({result.precision}; BLAS: {blas()})"
