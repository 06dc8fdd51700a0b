"""Heads 2..H: Lemma 3's separator, the row reduction, Claim 1 on the new group and Claim 2's scale.

Head ``h`` fits group ``S`` exactly while every earlier example ``t ∈ A`` saturates onto one token
``j*(t)`` as the scale ``c_h`` grows; the row reduction ``C = Z'_S (Z'_A)^+`` turns the rank step
into a statement about the reduced new rows ``N = Z''_S − C Z''_A`` (Lemma 1).
"""

from __future__ import annotations

from .errors import ConstructionError
from .evidence import HeadEvidence, HeadStep, HeadTrace
from .model import head_logits
from .saturation import choose_scale, explicit_scale, rank_perturbation_bound
from .separator import rank_one_separator
from .workspace import MAX_DRAWS, Workspace, fit_group


def later_head(ws: Workspace, h: int, S: range, rule: str, guess: float | None) -> HeadStep:
    """Head ``h`` (from 0) fits group ``S``; the examples before it, ``0..S.start−1``, saturate.

    ``rule`` chooses the scale (:func:`construct.saturation.choose_scale`); ``guess`` (the last
    head's scale) is where the scale search starts.

    Raises:
        ConstructionError: Lemma 3's logits tie on an earlier example after every draw.
    """
    ar, low, d, n = ws.ar, ws.ar.low, ws.d, ws.E.shape[1]
    fitted = S.start                                                  # fitted examples: 0..fitted−1
    E_A, X_A = ws.E[:fitted, ...], ws.X[:fitted, ...]
    found: list = []

    def separate() -> None:                                          # Lemma 3
        for draws in range(1, MAX_DRAWS + 1):
            sep = rank_one_separator(ws.X[S.start:S.stop, ...], E_A, X_A, ws.rng, ar)
            if ar.to_host(sep.delta).min() > 0:
                found.append((sep, draws))
                return
        raise ConstructionError(f"head {h + 1}: Lemma 3's logits tie on some earlier example after "
                                f"{MAX_DRAWS} draws (duplicate context tokens?)")
    # The row reduction C = Z'_S (Z'_A)^+, with Lemma 3 on the other core while it solves with
    # its factor (the separator draws from the seed's stream; the factor draws nothing).
    C = ws.reduction.advance(h * d, S.stop, alongside=separate)
    sep, draws = found[0]
    Z_bar = ar.pick_tokens(E_A, sep.j_star)                          # limit rows z̄^(t) = e_{j*(t)}
    F = C @ Z_bar
    fit = fit_group(ws, S, F)
    ell = ar.rows(lambda lo, hi: _logits(ws, lo, hi, fit.K, fit.Q), fitted)   # ℓ^(t) = E W_S x, earlier rows
    ell = ell[0] if len(ell) == 1 else ar.xp.concat(ell, axis=0)
    ell_inf = ar.to_host(ar.xp.max(ar.xp.abs(ell), axis=1))
    C_norm = low.spectral_norm(ar.lowered(C))
    rho = float(ws.token_norms[:fitted].max())
    delta = ar.to_host(sep.delta)
    c_explicit = explicit_scale(C_norm, rho, ell_inf, delta, n, fit.sigma_min_M)
    m = len(S)
    ws.W_K[h, :, :m], ws.W_Q[h, :, :m] = fit.K, fit.Q                 # Claim 2: W_S + c a b^T
    c = choose_scale(rule, low, C=ar.lowered(C), C_norm=C_norm, E_A=ws.E_low[:fitted, ...],
                     rho=low.asarray(ws.token_norms[:fitted]), ell=ar.lowered(ell), g=ar.lowered(sep.g),
                     j_star=sep.j_star, N0=ar.lowered(fit.M + F) if rule == "rank" else None,
                     c_explicit=c_explicit, sigma_M=fit.sigma_min_M, guess=guess)
    ws.W_K[h, :, m], ws.W_Q[h, :, m] = c * sep.a, sep.b
    ws.features(h)
    Z_h = ws.Z[:, h * d:(h + 1) * d]
    CZ = C @ Z_h[:fitted, ...]                                             # C Z''_A; F = C Z̄_A
    evidence = HeadEvidence(
        head=h + 1, examples=[S.start, S.stop - 1], scale=c, scale_explicit=c_explicit,
        delta_min=float(delta.min()), sigma_min_M=fit.sigma_min_M, C_norm=C_norm,
        ell_inf_max=float(ell_inf.max()),
        perturbation_bound=rank_perturbation_bound(C_norm, rho, ell_inf, delta, c, n),
        perturbation_measured=low.spectral_norm(ar.lowered(F - CZ)),
        sigma_min_N=float(ar.numerical_rank(Z_h[S.start:S.stop, ...] - CZ)[1][-1]),
        rounding_estimate=ws.rounding(h, S), target_error=ws.target_error(h, S, fit.targets),
        draws=draws + fit.draws - 1)
    trace = HeadTrace(examples=S, targets=fit.targets, a=sep.a, b=sep.b, j_star=sep.j_star, delta=sep.delta,
                      C=C, F=F, M=fit.M)
    return HeadStep(evidence, trace)


def _logits(ws: Workspace, lo: int, hi: int, K, Q):
    return head_logits(ws.E[lo:hi, ...], ws.X[lo:hi, ...], K, Q, ws.ar)
