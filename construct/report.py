"""The build report: JSON for machines, a summary for people."""

from __future__ import annotations

from dataclasses import asdict

from ._version import __version__
from .evidence import BuildResult
from .model import param_count
from .policy import rounding_ratio
from .verify import float32_error


def package_version() -> str:
    """The version of the running code (``construct.__version__``)."""
    return __version__


def evidence_dict(result: BuildResult) -> dict:
    """The evidence of a build as plain JSON-ready data (without the arrays)."""
    w, data = result.weights, result.data
    return {
        "T": data.T, "n": data.n, "d": data.d, "d_o": data.d_o,
        "H": w.H, "d_h": w.d_h, "d_v": w.d_v, "skip": w.skip, "k": result.k, "capacity": result.capacity,
        "parameters": param_count(w.H, w.d, w.d_h, w.d_v, w.d_o),
        "heads_used": len(result.heads), "scale": result.scale,
        "device": {"name": result.device, "why": result.device_reason},
        "prelayer": {"name": result.prelayer, "why": result.prelayer_reason},
        "precision": {"arithmetic": result.precision, "bits": result.weights.bits or 53,
                      "why": result.precision_reason, "rounding_ratio": rounding_ratio(result)},
        "verification": result.verification.to_dict(),
        "heads": [asdict(e) for e in result.heads],
        "seed": result.seed, "timings_s": result.timings,
    }


def build_report(result: BuildResult, *, data_source: dict, data_sha256: str, weights_sha256: str,
                 total_seconds: float) -> dict:
    """The report written as ``report.json`` beside the weights (with the float32 check)."""
    rep = {"mha_construct": package_version(), "data": {**data_source, "sha256": data_sha256},
           "weights_sha256": weights_sha256}
    rep.update(evidence_dict(result))
    rep["float32"] = float32_error(result.weights, result.data)
    rep["timings_s"] = {**rep["timings_s"], "total": total_seconds}
    return rep


def summary_text(rep: dict) -> str:
    """A few readable lines from a report dict."""
    v = rep["verification"]
    scales = [h["scale"] for h in rep["heads"][1:]]
    deltas = [h["delta_min"] for h in rep["heads"][1:]]
    lines = [
        f"dataset      T = {rep['T']} examples, n = {rep['n']}, d = {rep['d']}, d_o = {rep['d_o']}  "
        f"({rep['data'].get('source', '')})",
        f"model        H = {rep['H']} heads, d_h = {rep['d_h']}, d_v = {rep['d_v']}, skip = {rep['skip']}, "
        f"{rep['parameters']} parameters",
        f"capacity     H(k-1)+1 = {rep['capacity']} with k = {rep['k']}; {rep['heads_used']} head(s) used",
        f"precision    {rep['precision']['arithmetic']}: {rep['precision']['why']}",
        *([f"device       {rep['device']['name']}: {rep['device']['why']}"] if "device" in rep else []),
        *([f"pre-layer    {rep['prelayer']['name']}: {rep['prelayer']['why']}"]
          if rep.get("prelayer", {}).get("name") else []),
        f"rank Z       {v['rank_Z']} of T = {v['T']}   sigma_min(Z) = {v['sigma_min_Z']:.3e}, "
        f"sigma_max(Z) = {v['sigma_max_Z']:.3e}",
    ]
    if scales:
        explicit = [h["scale_explicit"] for h in rep["heads"][1:]]
        lines.append(f"saturation   largest c_h {max(scales):.3e} (explicit bound {max(explicit):.3e}, "
                     f"scale = {rep['scale']}); smallest gap delta = {min(deltas):.3e}")
    lines += [
        f"max |f - y|  {v['max_abs_error']:.3e}  (allowed {v['tol']:.1e}; outputs in {v.get('outputs', 'float64')}): "
        + ("every label reproduced" if v["passed"] else "NOT MEMORIZED"),
        *([float64_line(v["float64_error"], v["tol"])] if v.get("float64_error") is not None else []),
        f"float32      max |f - y| {rep['float32']['max_abs_error']:.3e}: "
        + ("survives" if rep["float32"]["survives"] else "does not survive")
        + f" (allowed {rep['float32']['tol']:.1e})",
        f"time         {rep['timings_s']['total']:.2f} s",
        f"sha256       data {rep['data']['sha256'][:16]}…  weights {rep['weights_sha256'][:16]}…",
    ]
    return "\n".join(lines)


def float64_line(error: float, allowed: float) -> str:
    """The summary's line for the float64 evaluation's own error, where the outputs were taken in
    double words (:attr:`construct.verify.Verification.float64_error`)."""
    verdict = "within the tolerance" if error <= allowed else "MISSES the tolerance"
    return (f"float64      max |f - y| {error:.3e} in float64 (construct.forward and float64 exports round "
            f"in their own orders, about as much): {verdict}")
