"""certify against one SVD of Z, measured in one run (issue #4).

For each problem (independent contexts, float64 weights from ``build``): the time of ``certify``
(its default for float64 weights: rigorous float64 enclosures, proving rank Z = T and bounding
max |f - y|) and of one SVD of the float64 Z (singular values only), and their ratio. A claim
that could not be proven is printed as such.

    python benchmarks/bench_certify.py [--problems 2,8,16 4,8,16 64,32,64] [--repeat 3]
"""

from __future__ import annotations

import argparse

import numpy as np

from _timing import interleaved, positive, triple

from construct import build, capacity, synthetic
from construct.certify import certify
from construct.model import feature_matrix


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", nargs="+", type=triple, default=[(2, 8, 16), (4, 8, 16), (8, 8, 16), (64, 32, 64)],
                   help="H,n,d triples")
    p.add_argument("--repeat", type=positive, default=3)
    args = p.parse_args()
    print(f"certify vs one SVD of Z (values only); best of {args.repeat} rounds, timed in turn")
    print(f"{'H':>4}{'n':>4}{'d':>4}{'T':>6}{'certify s':>11}{'svd s':>10}{'ratio':>9}  result")
    for H, n, d in args.problems:
        T = capacity(H, n, n)
        data = synthetic("independent", T=T, n=n, d=d, seed=0)
        weights = build(data, H, precision="float64").weights
        Z = feature_matrix(data.E, data.X, weights)
        (t_svd, _), (t_cert, cert) = interleaved(
            [lambda: np.linalg.svd(Z, compute_uv=False), lambda: certify(weights, data)], args.repeat)
        rank, mem = cert.claims["rank"], cert.claims["memorization"]
        result = (f"rank Z = {T} proven" if rank["proven"] else "rank NOT proven: " + rank.get("reason", ""))
        result += f"; max |f - y| <= {mem['max_abs_error_bound']:.2e} " + ("proven" if mem["proven"] else
                                                                           "(above the tolerance)")
        ratio = f"{t_cert / t_svd:9.1f}"
        print(f"{H:>4}{n:>4}{d:>4}{T:>6}{t_cert:>11.3f}{t_svd:>10.4f}{ratio}  {result}")


if __name__ == "__main__":
    main()
