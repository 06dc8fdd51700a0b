"""The construction of Theorem 1, read top to bottom like the proof.

validate → partition → head 1 (Claim 1) → heads 2..H (Lemma 3, the row reduction, Claim 2 with
the saturation scale) → readout → verification by the model's own forward pass. Each step is
one call into its own module; the arithmetic it runs in (:mod:`construct.arith`) is chosen by the
precision policy (:mod:`construct.policy`) and handed to the steps once.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import numpy as np

from . import policy
from . import precision as precision_mod
from .accurate import VISIBLE, changed_outputs, gaps, rounding_visible, shared_context
from .accurate import layer_inputs as accurate_inputs
from .accurate import outputs as accurate_outputs
from .arith import Arithmetic, for_bits, gpu
from .data import Dataset, checked
from .errors import ConstructionError, InputError, numpy_error_defaults
from .evidence import BuildResult, HeadEvidence, HeadStep, HeadTrace
from .first_head import first_head
from .later_head import later_head
from .limits import allowed_error, callback, flag, integer, require_memory, tolerance
from .model import (PRELAYERS, Weights, capacity, feature_matrix, heads_needed, mean_shift, output_from_features,
                    sealed)
from .partition import partition, refuse_identical_inputs, refusal, remedies, violations
from .precision import Precision
from .readout import min_norm_solve, readout_target, readout_weights
from .saturation import SCALES
from .unit_scale import build_scaled, scaling_exponents
from .validate import a2_problem, memory_estimate, validate
from .verify import DEFAULT_TOL, check, evaluation_bits, verify
from .workspace import Workspace

Progress = Callable[[int, int], None]

__all__ = ["BuildResult", "HeadEvidence", "HeadTrace", "SCALES", "build", "capacity", "heads_needed"]


@numpy_error_defaults
def build(data: Dataset, heads: int | None = None, *, head_dim: int | None = None, value_dim: int | None = None,
          skip: bool = False, seed: int = 0, tol: float = DEFAULT_TOL, scale: str = "rank",
          precision: str | int | Precision = "auto", progress: Progress | None = None,
          trace: bool = False, device: str = "cpu", prelayer: str = "none") -> BuildResult:
    """Construct weights that memorize ``data`` exactly (Theorem 1; docs/math.md §4).

    Args:
        data: the dataset (T, n, d) / (T, d) / (T, d_o).
        heads: number of heads H; None (default): the fewest with ``H(k − 1) + 1 ≥ T``
            (:func:`heads_needed`), as the command line takes without ``--heads``.
        head_dim: key/query dimension d_h (default n, the smallest reaching full capacity).
        value_dim: value dimension d_v (default d_o, the smallest allowed).
        skip: build the skip-connection variant (App. C).
        seed: seed of every random draw; the same seed gives identical weights.
        tol: verification tolerance (relative to ``max(1, max|Y|)``).
        scale: ``"rank"`` (default): each head's scale is the smallest found (bisection on
            ``log c``, to 10%, the result verified) at which the reduced new rows keep
            ``σ_min(N) ≥ (1 − MARGIN) σ_min(M)``: only what the rank step needs, often almost no
            saturation; ``"saturating"``: the smallest whose measured perturbation
            ``‖C(Z''_A − Z̄_A)‖`` stays below ``MARGIN · σ_min(M)`` (the proof's Weyl argument,
            measured: the head still saturates the earlier examples); ``"explicit"``: the bound
            of docs/math.md §4.4.5. The evidence has the explicit bound beside the scale used.
        progress: called as ``progress(head, heads_used)`` after each head.
        precision: ``"auto"`` (float64 while docs/math.md §5's predicted rounding stays below what
            keeps the rank and the labels, otherwise mpmath at the bits that prediction asks
            for), ``"float64"``, a number of bits, or a :class:`Precision`. A number of bits runs
            at any size; beyond the budget at which auto uses mpmath (``policy.MP_BUDGET``) it can
            take hours, and ``precision_reason`` says how far beyond.
        trace: keep every head's arrays (:class:`HeadTrace`) in the result, for checking the
            steps against the paper's statements (``proofs``) and for teaching; O(T²) memory.
        device: ``"cpu"`` (default: weights reproducible bit for bit on a given machine),
            ``"gpu"`` (float64 on a CUDA GPU through CuPy; an error if none can be used) or
            ``"auto"`` (the GPU when one can be used, else the CPU). Precisions above float64
            run on the CPU. The result says which ran and why (``device``, ``device_reason``).
        prelayer: ``"none"`` (default); ``"mean-shift"``: Proposition 4's first layer (uniform
            attention with skip connection: every token plus its context's mean) runs before the
            attention layer, which is built on its outputs: for queries that fail A1 while
            ``x + mean(E)`` meets it (A3), repeated queries for instance; ``"auto"``: that layer
            only where the queries fail what the construction needs and the shifted ones meet
            it. The weights and the result name the layer (``prelayer``, ``prelayer_reason``).

    Returns:
        :class:`BuildResult` with the weights and the evidence.

    Raises:
        InputError, CapacityError: the request fails a hypothesis (every problem listed).
        ConstructionError: a numerical step failed, or the final verification did not pass.
    """
    data = checked(data)
    d_h = data.n if head_dim is None else integer(head_dim, "head_dim")
    # No number suffices at k = 1: one head, so that validation says so (and what to raise).
    H = (heads_needed(data.T, min(data.n, d_h)) or 1) if heads is None else integer(heads, "heads")
    d_v = data.d_o if value_dim is None else integer(value_dim, "value_dim")
    seed = integer(seed, "seed", 0)
    tol = tolerance(tol)
    skip, trace = flag(skip, "skip"), flag(trace, "trace")
    progress = callback(progress, "progress")
    if scale not in SCALES:
        raise InputError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}", what="invalid option")
    try:
        chosen = precision_mod.parse(precision)
    except ValueError as exc:
        raise InputError(str(exc), what="invalid option") from None
    where = gpu.resolve(device)
    if prelayer not in PRELAYER_OPTIONS:
        raise InputError(f"prelayer must be one of {', '.join(PRELAYER_OPTIONS)}, got {prelayer!r}",
                         what="invalid option")
    what = f"a build of T = {data.T} examples (n = {data.n}, d = {data.d}) with H = {H} heads"
    if where.name == "cpu":                                     # first: the checks below cost memory too
        require_memory(memory_estimate(data, H, d_h, d_v), what)
    try:
        refuse_identical_inputs(data.E, data.X, data.Y)        # before any layer: none separates them
    except InputError as same:                                  # with A2's failures, if any: one error
        a2 = a2_problem(data)
        if a2 is None:
            raise
        raise InputError([*same.problems, a2], what=f"{same.what}; and A2 fails", counted=False) from None
    layer, layer_why = _prelayer(data, prelayer, min(data.n, d_h))
    original = data
    exact_inputs = layer_dw = None
    if layer is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            E_shifted, X_shifted = mean_shift(data.E, data.X)
        if not (np.all(np.isfinite(E_shifted)) and np.all(np.isfinite(X_shifted))):
            raise InputError("the pre-layer's outputs (each token plus its context's mean) overflow float64 "
                             f"(max |E| ≈ {np.abs(data.E).max():.3g}, max |X| ≈ {np.abs(data.X).max():.3g}); "
                             "rescale E and X towards 1", what="data out of range")
        data = Dataset(E_shifted, X_shifted, data.Y)

        def shifted(ar: Arithmetic):               # at a higher precision: the layer's outputs in it
            return mean_shift(ar.asarray(original.E), ar.asarray(original.X), ar)

        def in_double_words():
            # In float64: them in double words, for the refinement. One context where the raw
            # contexts are one: raw contexts that differ may shift to one float64 context.
            shared = shared_context(original.E)
            return accurate_inputs(layer, original.E[0] if shared else original.E, original.X)
        exact_inputs, layer_dw = shifted, in_double_words
    options = dict(heads=H, head_dim=d_h, value_dim=d_v, seed=seed, tol=tol, scale=scale,
                   progress=progress, trace=trace, shifted=layer is not None)

    def at(problem: Dataset, prec: Precision, why: str, with_skip: bool, inputs=None, accurate=None) -> BuildResult:
        ar = gpu.arithmetic(where, prec.bits)
        if isinstance(ar, gpu.CuPyFloat64):
            gpu.require_device_memory(ar, gpu.device_memory_estimate(problem, H), what)
        elif where.name == "gpu":                                   # mpmath: on the CPU after all
            require_memory(memory_estimate(problem, H, d_h, d_v), what)
        result = build_in(ar, problem, why, skip=with_skip, inputs=inputs if ar.weights_bits is not None else None,
                          layer_words=accurate if ar.weights_bits is None else None, **options)
        ran = "gpu" if isinstance(ar, gpu.CuPyFloat64) else "cpu"
        why = where.why if ran == where.name else f"{prec.bits}-bit mpmath runs on the CPU"
        return replace(result, device=ran, device_reason=why,
                       verification=replace(result.verification, device=ran, device_reason=why))

    def at_each_precision(problem: Dataset, with_skip: bool, inputs=None, accurate=None) -> BuildResult:
        return policy.choose(problem, H, chosen, lambda prec, why: at(problem, prec, why, with_skip, inputs, accurate),
                             d_h, tol=tol, layer_words=accurate)

    exponents = scaling_exponents(data, bool(skip))
    if exponents is not None:
        def unit_inputs(ar: Arithmetic):           # the layer's outputs at unit scale: powers of two, exact
            E_s, X_s = exact_inputs(ar)
            return ar.ldexp(E_s, -exponents[0]), ar.ldexp(X_s, -exponents[1])
        def unit_double_words():
            E_s, X_s = layer_dw()
            return E_s.scaled(-exponents[0]), X_s.scaled(-exponents[1])
        inputs = unit_inputs if exact_inputs is not None else None
        accurate = unit_double_words if layer_dw is not None else None
        result = build_scaled(data, exponents, bool(skip), tol,
                              lambda unit: at_each_precision(unit, False, inputs, accurate),
                              layer=layer, before_layer=original)
    else:
        result = at_each_precision(data, bool(skip), exact_inputs, layer_dw)
    if layer is not None:
        result = _with_prelayer(result, original, layer, layer_why, tol)
    return result._seal()


# The pre-layer options of build (construct.model.PRELAYERS are the layers themselves).
PRELAYER_OPTIONS = ("none", *PRELAYERS, "auto")


def _prelayer(data: Dataset, option: str, k: int) -> tuple[str | None, str]:
    """The pre-layer to build with, and why: the option itself, or under ``auto`` the mean shift
    exactly when the queries fail the partition's test (A1 as the construction needs it) and the
    shifted queries pass it; when both fail, the queries' error, saying that the pre-layer does
    not help."""
    if option == "none":
        return None, ""
    if option != "auto":
        return option, "asked for (prelayer = mean-shift)"
    raw = violations(data.X, k)
    if not raw:
        return None, ""
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = mean_shift(data.E, data.X)[1]
    if not np.all(np.isfinite(shifted)):         # the build refuses the layer's overflow, by name
        return "mean-shift", "chosen by auto: the queries fail A1"
    also = violations(shifted, k, shifted=True)
    if also:                           # the raw queries' error, with why the pre-layer does not help
        raise refusal(data.X, k, raw, advice=[
            f"--prelayer auto tried Proposition 4's pre-layer, which does not help: the shifted queries x + mean(E) "
            f"fail as well ({len(also)} violation(s), e.g. {also[0].split(': ', 1)[1]})", *remedies(shifted, k, True)])
    return "mean-shift", ("chosen by auto: the queries fail A1, the queries shifted by their contexts' means "
                          "meet it (A3), so Proposition 4's layer runs first")


def _with_prelayer(result: BuildResult, data: Dataset, layer: str, why: str, tol: float) -> BuildResult:
    """The result of a build on the pre-layer's outputs, as the two-layer model on ``data``.

    In float64 the build's check already ran on exactly what :func:`construct.verify` feeds the
    second layer (the same function on the same numbers; the double words, where it took them,
    on the layer's outputs in double words too; at unit scale, the two layers on the data as
    given); at higher precision the pre-layer's outputs are recomputed at the weights' bits, so
    the model is verified again as a whole.
    """
    w = result.weights
    weights = sealed(w.W_K, w.W_Q, w.W_V, w.W_O, w.W_D, skip=w.skip, bits=w.bits, prelayer=layer)
    verification = result.verification
    if weights.bits is not None:
        verification = replace(verify(weights, data, tol), device=result.device, device_reason=result.device_reason)
        if not verification.passed:
            raise ConstructionError(
                f"the two-layer model (pre-layer {layer} at {weights.bits} bits) does not memorize: max |f − y| = "
                f"{verification.max_abs_error:.3g} (allowed {verification.tol:.3g}), rank Z = "
                f"{verification.rank_Z} of T = {data.T}")
    return replace(result, weights=weights, data=data, verification=verification, prelayer=layer,
                   prelayer_reason=why)


def build_in(ar: Arithmetic, data: Dataset, why: str, *, heads: int, head_dim: int, value_dim: int,
             skip: bool, seed: int, tol: float, scale: str, progress: Progress | None = None,
             trace: bool = False, inputs=None, shifted: bool = False, layer_words=None) -> BuildResult:
    """The proof's steps in order, in the arithmetic ``ar``, on a checked dataset and options.

    ``inputs(ar)``, if given, computes the layer's ``(E, X)`` in ``ar`` (a pre-layer's outputs
    at the build's precision); ``data`` holds them in float64 for the checks and the grouping.
    ``layer_words()``, if given (float64 weights), gives them as double words
    (:func:`construct.accurate.layer_inputs`; ``E`` one context (n, d) where the raw contexts are
    one) for the refinement's outputs in double words.
    ``shifted``: ``data`` are a pre-layer's outputs (errors name the shifted queries).
    """
    timings: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(stage: str) -> None:
        now = time.perf_counter()
        timings[stage], clock[0] = now - clock[0], now

    with ar.session():
        k = validate(data, heads, head_dim, value_dim)
        lap("validate")
        groups = partition(data.X, k, shifted)
        lap("partition")
        ws = Workspace.start(ar, data, heads, head_dim, seed, inputs)
        steps = [first_head(ws, groups[0])]
        _report(progress, steps, groups)
        for h, S in enumerate(groups[1:], start=1):
            if not trace:                  # a head's arrays are for the trace alone (C is m × a)
                steps[-1] = HeadStep(steps[-1].evidence, None)
            steps.append(later_head(ws, h, S, scale, steps[-1].evidence.scale or None))
            _report(progress, steps, groups)
        for h in range(len(groups), heads):                          # unused heads: W = 0, uniform
            ws.features(h)
        lap("heads")
        Y = ar.asarray(data.Y)
        ws.reduction.add_features(heads * data.d)                   # the factor now covers all of Z
        ws.reduction.commit()
        B = min_norm_solve(ws.Z, ws.reduction, readout_target(Y, ws.X, skip), ar)

        def readout(B) -> Weights:
            # The weights are numbers of exactly the arithmetic's bits: what the file stores and
            # what verify and certify evaluate.
            W_V, W_O, W_D = readout_weights(B, heads, data.d, value_dim, ar)
            return sealed(*(ar.to_numpy(ar.rounded(A)) for A in (ws.W_K, ws.W_Q, W_V, W_O, W_D)), skip=skip,
                          bits=ar.weights_bits)

        weights = readout(B)
        outputs = None
        if ar.weights_bits is None:
            weights, outputs = _refined(ar, ws, data, tol, B, weights, readout, layer_words)
        lap("readout")
    if not ar.rounds_weights:
        # Z was computed head by head with the model's per-head function on these very W_K, W_Q:
        # the forward pass's Z to the last bits (it takes the heads in groups, with other products).
        with ar.working(), ar.heavy():
            verification = check(ar, Z=ws.Z, weights=weights.map(ar.asarray, bits=weights.bits),
                                  data=Dataset(ws.E, ws.X, Y), tol=tol, reduction=ws.reduction, outputs=outputs,
                                  detect=False)
    else:
        # Rounding the weights to their bits moved them: Z and the outputs are recomputed from the
        # stored weights, as verify does (at evaluation_bits: the exact model's error).
        hi = for_bits(evaluation_bits(weights, data))
        with hi.working(), hi.heavy():
            E, X = inputs(hi) if inputs is not None else (hi.asarray(data.E), hi.asarray(data.X))
            in_hi = weights.map(hi.asarray, bits=weights.bits)     # the same numbers, in that arithmetic
            verification = check(hi, feature_matrix(E, X, in_hi, hi, layered=True), in_hi,
                                 Dataset(E, X, hi.asarray(data.Y)), tol, detect=False)
    lap("verify")
    evidence = [step.evidence for step in steps]
    result = BuildResult(weights=weights, data=data, k=k, capacity=capacity(heads, data.n, head_dim),
                         heads=evidence, verification=verification, seed=seed, timings=timings,
                         trace=[step.trace for step in steps] if trace else [], scale=scale, precision=ar.name,
                         precision_reason=why)
    if not verification.passed:
        v = verification
        failed = ConstructionError(
            f"verification failed at {ar.name}: rank Z = {v.rank_Z} of T = {data.T}, max |f − y| = "
            f"{v.max_abs_error:.3g} (allowed {v.tol:.3g}); σ_min(Z) = {v.sigma_min_Z:.3g}; largest scale "
            f"used: {max(e.scale for e in evidence):.3g}. "
            + ("Float64 cannot hold this construction (docs/math.md §5): use precision auto or more bits"
               if ar.weights_bits is None else "raise the precision")
            + ("" if scale == "rank" else "; or the default scale rule, rank, whose scales are the smallest "
               "that keep the rank"))
        failed.result = result._seal()        # the evidence, for the precision policy
        raise failed
    return result


# At most this many corrections of the readout against the outputs in double words.
REFINEMENTS = 2


def _refined(ar: Arithmetic, ws: Workspace, data: Dataset, tol: float, B, weights: Weights, readout,
             layer_words=None):
    """Float64 weights refined until the exact model reproduces the labels.

    The readout ``B`` solves ``Z B = Y`` for the float64 ``Z``; where a second float64 evaluation
    shows that rounding reaches the tolerance (:func:`construct.accurate.rounding_visible`: shared
    contexts, square ones), the outputs are evaluated in double words and ``B`` corrected by the
    min-norm solution of ``Z δ = y − f`` with the factor the construction already has: iterative
    refinement with the residual in double words. A correction changes the values alone, so the
    corrected outputs are the first pass's plus the change through its probabilities
    (:func:`construct.accurate.changed_outputs`), not a second pass. ``layer_words()``: a
    pre-layer's outputs in double words, which the double words then read instead of ``data``'s
    float64 ones. Returns the weights and their outputs (None when float64's rounding stayed small).
    """
    allowed = allowed_error(tol, float(np.abs(data.Y).max()))
    shared = shared_context(data.E)
    out = output_from_features(ws.Z, ws.X, weights.map(ar.asarray), ar)
    if shared:
        visible = rounding_visible(weights, data.E[0], data.X, ar.to_host(out), allowed)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            visible = rounding_visible(weights.map(ar.asarray), ws.E, ws.X, out, allowed, ar)
    # A pre-layer's outputs are rounded once to float64 and both evaluations read them: the
    # detector cannot see that, so they are evaluated in double words from the raw data always
    # (as verify does), except where those overflow (data near float64's top) and the detector
    # itself saw nothing: there float64's outputs stand, as before.
    if not visible and layer_words is None:
        return weights, None
    probabilities = np.empty((data.T, weights.H, data.n))
    with np.errstate(over="ignore", invalid="ignore"):
        E, X = layer_words() if layer_words is not None else (data.E[0] if shared else data.E, data.X)
        outputs = accurate_outputs(weights, E, X, probabilities)
    if not visible and not np.all(np.isfinite(outputs.rad)):
        return weights, None
    for _ in range(REFINEMENTS):
        residual = -gaps(outputs, data.Y)
        if not (np.all(np.isfinite(residual)) and np.abs(residual).max() > VISIBLE * allowed):
            break
        B = B + min_norm_solve(ws.Z, ws.reduction, ar.asarray(residual), ar)
        corrected = readout(B)
        outputs = changed_outputs(outputs, probabilities, weights, corrected, E)
        weights = corrected
    return weights, outputs


def _report(progress: Progress | None, steps: list, groups: list) -> None:
    if progress is not None:
        progress(len(steps), len(groups))
