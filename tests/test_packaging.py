"""The installed package holds every module of the source tree (a wheel, not the checkout)."""

import subprocess
import sys
import zipfile
from pathlib import Path

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
