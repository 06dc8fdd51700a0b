"""The whole pipeline at scale: build, verify and certify against the floor, in one run (issue #13).

For each context kind and H (n = 32, d = 64, T = H·31 + 1 unless told): the wall time and the
peak memory of ``build``, ``verify`` and ``certify`` (float64 weights, the default method), each
in a fresh process as a user runs them, and of the floor in a fresh process of its own: one
forward pass of the built model plus one QR factorization of ``Z`` (what any construction that
checks its rank must do at least). Prints each stage's ratio to the floor, its peak resident
memory as a multiple of the size of ``Z`` (``T × H·d`` float64), what the certificate proved, and
the max error ``verify`` measured. Stages run in turn (floor, build, verify, certify) so that a
slow spell of a shared machine is visible in the floor of the same row.

    python benchmarks/bench_scale.py [--heads 64 256] [--kind independent shared] [--repeat 1]
    python benchmarks/bench_scale.py --heads 512 --kind independent      # T = 15,873 end to end

Memory is what the stage adds: the process's peak resident set size (``getrusage``) less its
resident size once Python, the library and the inputs (data, weights) are loaded.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _timing import positive


def _stage(name: str, folder: Path, kind: str, H: int, n: int, d: int) -> dict:
    """Run one stage in this process; returns its time, peak memory and findings."""
    from construct import build, load_dataset, load_weights, synthetic, verify
    from construct.arith import FLOAT64
    from construct.certify import certify
    from construct.model import feature_matrix, output_from_features

    weights_file, data_file = folder / "weights.npz", folder / "data.npz"
    out: dict = {}
    if name == "build":
        data = synthetic(kind, T=H * (n - 1) + 1, n=n, d=d, seed=0)
        data_file.write_bytes(data.to_bytes())
        before = _resident_bytes()
        t = time.perf_counter()
        result = build(data, H, seed=0)
        out["seconds"] = time.perf_counter() - t
        out["precision"] = result.precision
        weights_file.write_bytes(result.weights.to_bytes())
    else:
        data, weights = load_dataset(data_file), load_weights(weights_file)
        before = _resident_bytes()
        t = time.perf_counter()
        if name == "verify":
            v = verify(weights, data)
            out.update(max_abs_error=v.max_abs_error, rank=v.rank_Z, passed=v.passed, outputs=v.outputs)
        elif name == "certify":
            c = certify(weights, data)
            out["proven"] = [k for k in ("rank", "memorization", "classification")
                             if c.claims.get(k, {}).get("proven")]
            out["error_bound"] = c.claims["memorization"].get("max_abs_error_bound")
        else:                             # the floor: the forward pass on two threads, as verify's
            with FLOAT64.session():
                Z = feature_matrix(data.E, data.X, weights, FLOAT64)
                output_from_features(Z, data.X, weights, FLOAT64)
            np.linalg.qr(Z.T, mode="r")
        out["seconds"] = time.perf_counter() - t
    out["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return out


def _resident_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _run(name: str, folder: Path, kind: str, H: int, n: int, d: int) -> dict:
    cmd = [sys.executable, __file__, "--stage", name, "--folder", str(folder), "--kind", kind,
           "--heads", str(H), "--context", str(n), "--dim", str(d)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (H = {H}, {kind}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _best(runs: list[dict]) -> dict:
    """The fastest of repeated runs of a stage, with the largest memory any of them took."""
    best = dict(min(runs, key=lambda r: r["seconds"]))
    best["peak_bytes"] = max(r["peak_bytes"] for r in runs)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=positive, nargs="+", default=[64, 256])
    p.add_argument("--kind", nargs="+", choices=["independent", "shared"], default=["independent", "shared"])
    p.add_argument("--context", type=positive, default=32)
    p.add_argument("--dim", type=positive, default=64)
    p.add_argument("--repeat", type=positive, default=1, help="rounds of the four stages (best time of each)")
    p.add_argument("--stage", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args()
    n, d = args.context, args.dim
    if args.stage:
        print(json.dumps(_stage(args.stage, Path(args.folder), args.kind[0], args.heads[0], n, d)))
        return
    print(f"n = {n}, d = {d}; each stage a fresh process, best of {args.repeat}; floor = one forward pass + one QR of Z; "
          "memory = peak RSS added / size of Z")
    print(f"{'kind':<12}{'H':>4}{'T':>7}{'Z GB':>7}{'floor s':>9}  {'build':>20}  {'verify':>20}  {'certify':>20}"
          f"  {'max err':>9}  proven by certify  [build's arithmetic; verify's outputs]")
    for kind in args.kind:
        for H in args.heads:
            T = H * (n - 1) + 1
            z_bytes = 8 * T * H * d
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                rounds = [{s: _run(s, folder, kind, H, n, d) for s in ("build", "floor", "verify", "certify")}
                          for _ in range(args.repeat)]
                b, f, v, c = (_best([r[s] for r in rounds]) for s in ("build", "floor", "verify", "certify"))

            def cell(r: dict) -> str:
                return f"{r['seconds']:.1f}s {r['seconds'] / f['seconds']:.2f}x" + \
                       f" {r['peak_bytes'] / z_bytes:.1f}Z"

            proven = (", ".join(c["proven"]) or "nothing") + f" (error bound {c['error_bound']})"
            print(f"{kind:<12}{H:>4}{T:>7}{z_bytes / 1e9:>7.2f}{f['seconds']:>9.1f}  "
                  f"{cell(b):>20}  {cell(v):>20}  {cell(c):>20}  {v['max_abs_error']:>9.2e}  {proven}"
                  f"  [{b['precision']}; {v['outputs']}]", flush=True)


if __name__ == "__main__":
    main()
