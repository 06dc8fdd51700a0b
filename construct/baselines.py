"""The gradient-descent baseline: the same model trained on the same data (the ``[torch]`` extra).

The recipe follows the paper authors' training code (github.com/smahdavi4/attention-memorization):
Adam at ``lr = 1e-3``; a linear warm-up over the first 5% of the steps from 1% of ``lr``, then
cosine decay to 0; Xavier-uniform initialization of each head's ``W_Q``, ``W_K``, ``W_V`` and of
``W_O`` (and of ``W_D``, their decoder having its own init and a bias we do not have); their
logits are divided by ``sqrt(d)``, so our ``W_K`` starts at their Xavier draw divided by
``sqrt(d)``, and Adam steps it at ``lr / sqrt(d)`` (with ``eps · sqrt(d)``): exactly their steps
on their key map. Here the batch is the whole dataset, the arithmetic float64 and the loss the mean
squared error (our labels are real vectors).

:func:`gradient_descent` records, for each target error, the step and the wall time at which
``max_t |f − y|`` first fell to it: the numbers ``benchmarks/bench_vs_gd.py`` compares with the
construction's build time.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from .data import Dataset, checked
from .errors import InputError
from .limits import flag, integer, library, require_memory, tolerance
from .model import MATRICES, Weights, check_compatible, checked_weights


@dataclass
class Descent:
    """What a run of gradient descent reached.

    Attributes:
        weights: the final weights.
        best_error: the smallest ``max |f − y|`` seen (on the weights before each step, and after the last).
            ``weights`` may be non-finite when the run diverged.
        steps: steps taken; ``seconds`` their wall time.
        reached: target → ``(step, seconds)`` when ``max |f − y| ≤ target`` first held, or None.
    """

    weights: Weights
    best_error: float
    steps: int
    seconds: float
    reached: dict[float, tuple[int, float] | None] = field(default_factory=dict)


def gradient_descent(data: Dataset, heads: int, *, head_dim: int | None = None, value_dim: int | None = None,
                     skip: bool | None = None, steps: int = 5000, lr: float = 1e-3, optimizer: str = "adam",
                     seed: int = 0, init: Weights | None = None, targets: tuple[float, ...] = (1e-3,),
                     time_limit: float | None = None, prelayer: str | None = None) -> Descent:
    """Train the model on ``data`` (full batch, float64) and say when each target error was reached.

    Args:
        skip: the skip connection (default: off, or ``init``'s).
        lr: the learning rate, a finite number ≥ 0 (0 leaves the weights as they are).
        targets: the errors to reach, finite and ≥ 0, at least one.
        time_limit: stop after this many seconds (finite, positive), or None.
        init: start from these weights instead of the random initialization (e.g. the
            construction's, to check that they sit at a minimum of the loss). They must fit the
            data (``d``, ``d_o``) and the options given (``heads``, ``head_dim``, ``value_dim``,
            ``skip``): a run trains the model it starts from.
        optimizer: ``"adam"`` (the paper's recipe, with its schedule) or ``"sgd"`` (plain gradient
            descent at ``lr``, no schedule).
        prelayer: None or ``"none"`` (default: no pre-layer); ``"mean-shift"``: the model with
            Proposition 4's pre-layer, from the random start (the model that data with repeated
            queries needs). With ``init``, the model is ``init``'s, pre-layer included; a different
            ``prelayer`` is refused.

    Raises:
        InputError: an option or ``init`` as above, a model too large for the memory, or torch
            not installed.
    """
    torch = library("torch", "torch")
    from .torch_model import MemorizingAttention, to_torch

    data = checked(data)
    H, steps = integer(heads, "heads"), integer(steps, "steps")
    seed, lr = integer(seed, "seed", 0), _nonnegative(lr, "lr")
    if seed >= 2**63:
        raise InputError(f"seed must be below 2^63 (torch's generator), got {seed}", what="invalid option")
    targets = _targets(targets)
    time_limit = None if time_limit is None else tolerance(time_limit, "time_limit")
    d, d_o = data.d, data.d_o
    d_h = data.n if head_dim is None else integer(head_dim, "head_dim")
    d_v = d_o if value_dim is None else integer(value_dim, "value_dim")
    if optimizer not in ("adam", "sgd"):
        raise InputError(f"optimizer must be adam or sgd, got {optimizer!r}", what="invalid option")
    if isinstance(prelayer, str) and prelayer == "none":         # as build and as_weights take it
        prelayer = None
    if prelayer not in (None, "mean-shift"):
        raise InputError(f"prelayer must be None, 'none' or 'mean-shift', got {prelayer!r}", what="invalid option")
    if init is not None:
        if not isinstance(init, Weights):
            raise InputError(f"init must be Weights (construct.load_weights, as_weights or a build's), got "
                             f"{type(init).__name__}", what="invalid option")
        init = checked_weights(init)
        check_compatible(init, d, d_o)
        given = [("heads", H, init.H), ("head_dim", head_dim, init.d_h), ("value_dim", value_dim, init.d_v),
                 ("skip", None if skip is None else flag(skip, "skip"), init.skip),
                 ("prelayer", prelayer, init.prelayer)]
        for name, value, theirs in given:
            if value is not None and value != theirs:
                raise InputError(f"{name} = {value!r} differs from the initial weights' "
                                 f"({theirs!r}{' heads' if name == 'heads' else ''}); a run trains the model it "
                                 "starts from", what="invalid option")
        H, d_h, d_v = init.H, init.d_h, init.d_v
    skip = (init.skip if init is not None else False) if skip is None else flag(skip, "skip")
    # Parameters (with Adam's two moments and the gradient) and the activations autograd keeps.
    parameters = H * (2 * d * d_h + d * d_v + d_v * d) + d * d_o
    activations = data.T * H * (data.n * (d_h + d_v + 3) + d_h + d_v + d)
    require_memory(8 * (4 * parameters + 3 * activations), f"gradient descent on H = {H} heads, T = {data.T}")
    if init is not None:
        model = to_torch(init)
    else:
        generator = torch.Generator().manual_seed(seed)
        model = MemorizingAttention(H, d, d_h, d_v, d_o, skip, mean_shift=prelayer == "mean-shift")
        with torch.no_grad():
            for name in ("W_Q", "W_K", "W_V"):
                for h in range(H):
                    _xavier(getattr(model, name)[h], generator)
            model.W_K.div_(math.sqrt(d))
            _xavier(model.W_O, generator)
            _xavier(model.W_D, generator)
    E, X, Y = (torch.from_numpy(np.array(a)) for a in (data.E, data.X, data.Y))
    if optimizer == "adam":
        # Adam on the authors' key map W_K' = sqrt(d) W_K (their logits divide by sqrt(d)). Their
        # gradient is ours divided by sqrt(d), and Adam's step does not scale with its parameter:
        # at lr and eps on our W_K it would move the keys sqrt(d) times faster than their training
        # does. Their steps, exactly, are ours at lr / sqrt(d) with eps · sqrt(d).
        c = math.sqrt(d)
        rest = [p for name, p in model.named_parameters() if name != "W_K"]
        opt = torch.optim.Adam([{"params": rest}, {"params": [model.W_K], "lr": lr / c, "eps": 1e-8 * c}], lr=lr)
        warm = max(1, steps // 20)
        schedule = torch.optim.lr_scheduler.SequentialLR(opt, [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, end_factor=1.0, total_iters=warm),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps - warm))], milestones=[warm])
    else:
        opt, schedule = torch.optim.SGD(model.parameters(), lr=lr), None
    reached: dict[float, tuple[int, float] | None] = {t: None for t in targets}
    best = math.inf
    start = time.perf_counter()
    step = 0

    def note(err: float, at: int) -> None:
        nonlocal best
        best = min(best, err)
        for t in targets:
            if reached[t] is None and err <= t:
                reached[t] = (at, time.perf_counter() - start)

    for step in range(steps):
        out = model(E, X)
        gap = out - Y
        note(float(gap.detach().abs().max()), step)
        if all(r is not None for r in reached.values()) and init is None:
            break
        if time_limit is not None and time.perf_counter() - start > time_limit:
            break
        loss = (gap * gap).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if schedule is not None:
            schedule.step()
    else:
        step = steps
        with torch.no_grad():
            note(float((model(E, X) - Y).abs().max()), steps)
    arrays = {name: getattr(model, name).detach().numpy().copy() for name in MATRICES}
    # Not checked: a run that diverged returns its non-finite weights (and best_error says so).
    weights = Weights(**arrays, skip=bool(model.skip), prelayer="mean-shift" if bool(model.mean_shift) else None)
    return Descent(weights=weights, best_error=best, steps=step, seconds=time.perf_counter() - start, reached=reached)


def _nonnegative(value, name: str) -> float:
    """``value`` as a finite real number ``≥ 0``."""
    rate = math.nan
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            rate = float(value)
        except OverflowError:                          # an integer beyond float's range
            rate = math.inf
    if not (math.isfinite(rate) and rate >= 0):
        raise InputError(f"{name} must be a finite number ≥ 0, got {value!r}", what="invalid option")
    return rate


def _targets(value) -> tuple[float, ...]:
    """``value`` as a tuple of finite errors ``≥ 0``, at least one."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InputError(f"targets must be a sequence of errors ≥ 0, got {value!r}", what="invalid option")
    out = tuple(_nonnegative(t, "targets") for t in value)
    if not out:
        raise InputError("targets must hold at least one error to reach", what="invalid option")
    return out


def _xavier(tensor, generator) -> None:
    """Xavier-uniform in place for a 2-D tensor (fan-in rows, fan-out columns), from ``generator``."""
    fan_in, fan_out = tensor.shape
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    tensor.uniform_(-bound, bound, generator=generator)
