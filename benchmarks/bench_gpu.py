"""The GPU path against the GPU floor, in one run (issue #14). Needs the [gpu] extra and a GPU.

For each T (n = 32, d = 64, independent contexts, H = (T − 1)/31 heads): build + verify on the
GPU against the floor measured in the same run (one forward pass of the built model plus one QR
of ``Z``, both with CuPy; the QR in place, as verify's), their ratio, the device's peak memory
(bytes in use in CuPy's pool, sampled every 10 ms), the max error, and
whether ``certify`` (on the CPU) proves ``rank Z = T``. Sizes run upwards until one is refused
for memory or ``--max-seconds`` is spent.

    python benchmarks/bench_gpu.py [--heads 64 256 512 1024 1613] [--max-seconds 3000] [--no-certify]

Without a usable GPU it says why and exits 2: it never reports CPU figures as GPU ones.
"""

from __future__ import annotations

import argparse
import sys
import time

from _timing import positive, positive_seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=positive, nargs="+", default=[64, 256, 512, 1024, 1613])
    p.add_argument("--max-seconds", type=positive_seconds, default=3000.0)
    p.add_argument("--no-certify", action="store_true", help="skip certify (on the CPU)")
    args = p.parse_args(argv)

    from construct.arith import gpu
    ok, why = gpu.probe()
    if not ok:
        print(f"bench_gpu: no GPU can be used: {why}", file=sys.stderr)
        return 2
    import cupy

    from construct import InputError, build, synthetic, verify
    from construct.certify import certify
    from construct.model import feature_matrix, output_from_features

    n, d = 32, 64
    ar = gpu.CuPyFloat64()
    pool = cupy.get_default_memory_pool()
    print(f"GPU: {why}\nn = {n}, d = {d}, independent contexts; floor = one forward pass + one QR of Z, "
          "both on the GPU; memory = peak of the bytes in use in CuPy's pool")
    print(f"{'H':>5} {'T':>7} {'Z GB':>6} {'floor s':>8} {'build s':>8} {'verify s':>9} {'ratio':>6} "
          f"{'peak GB':>8} {'max err':>9}  rank proven")
    started = time.perf_counter()
    for H in args.heads:
        if time.perf_counter() - started > args.max_seconds:
            print(f"stopped: --max-seconds {args.max_seconds:g} spent")
            break
        T = H * (n - 1) + 1
        data = synthetic("independent", T=T, n=n, d=d, seed=0)
        pool.free_all_blocks()
        peak = _PeakTracker(pool)
        try:
            t = time.perf_counter()
            with peak:
                result = build(data, H, device="gpu")
            t_build = time.perf_counter() - t
            t = time.perf_counter()
            with peak:
                v = verify(result.weights, data, device="gpu")
            t_verify = time.perf_counter() - t
        except InputError as exc:                 # refused for memory: the largest T is the last row
            print(f"{H:>5} {T:>7}  refused: {exc}")
            break
        pool.free_all_blocks()
        t = time.perf_counter()
        E, X = ar.asarray(data.E), ar.asarray(data.X)
        w = result.weights.map(ar.asarray)
        Z = feature_matrix(E, X, w, ar)
        output_from_features(Z, X, w, ar)
        ar.rows_r_factor(Z, overwrite=True)       # cuSOLVER's geqrf on Z's own memory, as verify's
        cupy.cuda.Device().synchronize()
        floor = time.perf_counter() - t
        del E, X, w, Z
        pool.free_all_blocks()
        proven = "-"
        if not args.no_certify:
            proven = "yes" if certify(result.weights, data).claims["rank"].get("proven") else "no"
        z_gb = T * H * d * 8 / 1e9
        print(f"{H:>5} {T:>7} {z_gb:>6.2f} {floor:>8.2f} {t_build:>8.2f} {t_verify:>9.2f} "
              f"{(t_build + t_verify) / floor:>5.2f}x {peak.peak / 1e9:>8.2f} {v.max_abs_error:>9.2e}  {proven}",
              flush=True)
    return 0


class _PeakTracker:
    """The pool's largest total while the block runs, sampled on a thread every 10 ms."""

    def __init__(self, pool):
        self.pool, self.peak = pool, 0          # bytes in use (the pool also caches freed blocks)

    def __enter__(self):
        import threading
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.01):
                self.peak = max(self.peak, self.pool.used_bytes())
        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.pool.used_bytes())


if __name__ == "__main__":
    sys.exit(main())
