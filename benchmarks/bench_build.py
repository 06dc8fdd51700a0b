"""Build + verify against the floor, measured in one run (issue #2, acceptance).

For each H (n = 32, d = 64, T = H·31 + 1): the time of ``build`` and of ``verify`` on the result,
and the floor for the same problem: one forward pass of the built model plus one QR
factorization of Z (the least any construction that checks its rank must do). Prints the ratio
(build + verify) / floor, the max error, and the peak memory of build + verify (tracemalloc, in a
separate pass so that tracing does not distort the timings). The three are timed in turn,
``--repeat`` rounds of build, verify, floor, so that a slow spell of a shared machine falls on
all of them alike; the best round of each is taken.

    python benchmarks/bench_build.py [--heads 8 32 64] [--kind independent shared] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np

from _timing import interleaved, positive

from construct import build, synthetic, verify
from construct.arith import FLOAT64
from construct.model import feature_matrix, output_from_features


def peak_mib(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=positive, nargs="+", default=[8, 32, 64])
    p.add_argument("--kind", nargs="+", choices=["independent", "shared"], default=["independent", "shared"])
    p.add_argument("--context", type=positive, default=32)
    p.add_argument("--dim", type=positive, default=64)
    p.add_argument("--repeat", type=positive, default=3)
    args = p.parse_args()
    n, d = args.context, args.dim
    print(f"n = {n}, d = {d}; best of {args.repeat} rounds, timed in turn; floor = one forward pass + one QR of Z; "
          "ratio = (build + verify) / floor")
    print(f"{'kind':<12}{'H':>4}{'T':>6}{'build s':>10}{'verify s':>10}{'floor s':>10}{'ratio':>8}"
          f"{'max err':>11}{'sigma_min Z':>13}{'peak MiB':>10}")
    for kind in args.kind:
        for H in args.heads:
            T = H * (n - 1) + 1
            data = synthetic(kind, T=T, n=n, d=d, seed=0)
            result = build(data, H, seed=0)

            def floor():
                with FLOAT64.session():                    # the forward pass on two threads, as verify's
                    Z = feature_matrix(data.E, data.X, result.weights, FLOAT64)
                    output_from_features(Z, data.X, result.weights, FLOAT64)
                return np.linalg.qr(Z.T, mode="r")         # numpy's: the fastest here, beside numpy's work

            (t_build, result), (t_verify, v), (t_floor, _) = interleaved(
                [lambda: build(data, H, seed=0), lambda: verify(result.weights, data), floor], args.repeat)
            mem = peak_mib(lambda: verify(build(data, H, seed=0).weights, data))
            ratio = (t_build + t_verify) / t_floor
            print(f"{kind:<12}{H:>4}{T:>6}{t_build:>10.3f}{t_verify:>10.3f}{t_floor:>10.3f}{ratio:>8.2f}"
                  f"{v.max_abs_error:>11.2e}{v.sigma_min_Z:>13.3e}{mem:>10.1f}")
            assert v.passed and np.isfinite(ratio)


if __name__ == "__main__":
    main()
