"""The construction against gradient descent on the same model and data (issue #15).

For H ∈ {8, 16, 32}, d = 16, n = d/2 = 8, T at capacity H(n − 1) + 1, shared and independent
contexts: the construction's build time and max error, then gradient descent with the paper
authors' recipe (``construct.baselines``: Adam, warm-up then cosine decay, full batch, float64)
from their initialization. Prints GD's time to ``max |f − y| < 1e-3`` and to the construction's
own error (or "not reached in N steps"), its best error, and each time as a multiple of the build.
Then, once: plain gradient descent and Adam started *from* the constructed weights.

    python benchmarks/bench_vs_gd.py [--steps 5000] [--heads 8 16 32]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _timing import positive


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=positive, default=5000)
    p.add_argument("--heads", type=positive, nargs="+", default=[8, 16, 32])
    args = p.parse_args(argv)

    from construct.errors import InputError
    try:
        return _run(args)
    except InputError as exc:                      # a problem too large for the memory, say: one line
        p.exit(2, f"{p.prog}: error: {exc}\n")


def _run(args) -> int:
    from construct import build, synthetic, verify
    from construct.baselines import gradient_descent

    d = 16
    n = d // 2
    print(f"d = {d}, n = {n}, T = H(n-1)+1; GD: Adam lr 1e-3, warm-up 5% then cosine, full batch, float64, "
          f"{args.steps} steps")
    print(f"{'kind':<12} {'H':>3} {'T':>4} {'build s':>8} {'build err':>9}  {'GD to 1e-3':>22}  "
          f"{'GD to build err':>22}  {'GD best':>8} {'GD s':>6}")
    last = {}
    for kind in ("independent", "shared"):
        for H in args.heads:
            data = synthetic(kind, T=H * (n - 1) + 1, n=n, d=d, seed=0)
            t = time.perf_counter()
            result = build(data, H)
            t_build = time.perf_counter() - t
            err = result.max_abs_error
            gd = gradient_descent(data, H, steps=args.steps, targets=(1e-3, err))

            def when(target: float) -> str:
                hit = gd.reached[target]
                if hit is None:
                    return f"not reached in {args.steps}"
                step, seconds = hit
                return f"{seconds:.2f}s ({seconds / t_build:.0f}x) @{step}"

            print(f"{kind:<12} {H:>3} {data.T:>4} {t_build:>8.3f} {err:>9.1e}  {when(1e-3):>22}  {when(err):>22}  "
                  f"{gd.best_error:>8.1e} {gd.seconds:>6.1f}", flush=True)
            last[kind] = (data, H, result)
    for kind, (data, H, result) in last.items():
        for optimizer in ("sgd", "adam"):
            gd = gradient_descent(data, H, init=result.weights, optimizer=optimizer, lr=1e-3, steps=100)
            after = verify(gd.weights, data).max_abs_error if all(
                np.isfinite(getattr(gd.weights, m)).all() for m in ("W_K", "W_Q", "W_V", "W_O", "W_D")) else None
            print(f"from the constructed weights ({kind}, H = {H}), 100 steps of {optimizer} at lr 1e-3: max |f - y| "
                  f"{result.max_abs_error:.1e} -> " + (f"{after:.1e}" if after is not None else "diverged (non-finite)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
