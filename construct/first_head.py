"""Head 1 (Claim 1): the first group's attention targets, exactly."""

from __future__ import annotations

import numpy as np

from .evidence import HeadEvidence, HeadStep, HeadTrace
from .workspace import Workspace, fit_group


def first_head(ws: Workspace, S: range) -> HeadStep:
    """Fit group ``S`` (examples ``0..k−1``) with head 1: random interior targets whose feature
    rows have full row rank, realized exactly by Claim 1's ``W_S = K Q^T``."""
    ar, d = ws.ar, ws.d
    ws.reduction.stage(S.stop)
    C, F = ar.zeros((len(S), 0)), ar.zeros((len(S), d))
    fit = fit_group(ws, S, F)
    ws.W_K[0, :, :len(S)], ws.W_Q[0, :, :len(S)] = fit.K, fit.Q
    ws.features(0)
    evidence = HeadEvidence(
        head=1, examples=[S.start, S.stop - 1], scale=0.0, scale_explicit=0.0, delta_min=None,
        sigma_min_M=fit.sigma_min_M, C_norm=0.0, ell_inf_max=0.0, perturbation_bound=0.0,
        perturbation_measured=0.0, sigma_min_N=fit.sigma_min_M, rounding_estimate=ws.rounding(0, S),
        target_error=ws.target_error(0, S, fit.targets), draws=fit.draws)
    trace = HeadTrace(examples=S, targets=fit.targets, a=None, b=None, j_star=np.zeros(0, dtype=int),
                      delta=np.zeros(0), C=C, F=F, M=fit.M)
    return HeadStep(evidence, trace)
