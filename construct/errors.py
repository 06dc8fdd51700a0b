"""Exceptions raised by the engine.

Every error a user can cause by their input derives from :class:`ConstructError`; the CLI turns
it into a message on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import functools
from typing import Callable, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


class ConstructError(Exception):
    """Base class of every error the engine raises on purpose."""


# An error's message names at most this many problems and counts the rest (a file of 100,000
# stray members would otherwise answer with 100,000 lines); ``problems`` keeps them all.
LISTED = 20


def listed(problems: list[str]) -> list[str]:
    """The first :data:`LISTED` of ``problems``, and a line counting the rest where there are more."""
    more = [f"… and {len(problems) - LISTED} more"] if len(problems) > LISTED else []
    return list(problems[:LISTED]) + more


class InputError(ConstructError, ValueError):
    """Bad input: every problem found is listed (the message shows the first :data:`LISTED`),
    each naming the array and the examples.

    Attributes:
        problems: one human-readable line per problem, all of them.
        what: what kind of input is at fault (the message's head: "invalid option", …).
    """

    def __init__(self, problems: list[str] | str, *, what: str = "invalid input", counted: bool = True):
        """``counted=False``: ``what`` counts the problems itself (the lines are a selection, or
        include advice), so the lines are not counted again."""
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.what = what
        if len(self.problems) == 1:                  # one problem: one line
            super().__init__(f"{what}: {self.problems[0]}")
            return
        lines = "\n".join(f"  - {p}" for p in listed(self.problems))
        head = f"{what} ({len(self.problems)} problems)" if counted else what
        super().__init__(f"{head}:\n{lines}")


class CapacityError(InputError):
    """The dataset holds more examples than H(k-1)+1 (Theorem 1)."""


class ConstructionError(ConstructError, ArithmeticError):
    """A numerical step of the construction failed (for example a rank the proof needs was lost).

    When the construction ran to the end and its verification failed, ``result`` holds the
    :class:`~construct.evidence.BuildResult` (weights and evidence) it refused; otherwise None."""

    result = None


class OutputError(ConstructError, OSError):
    """The system refused to write an output (no space, no permission, a path in the way); the
    message names the file and the folder, and nothing was changed there."""


def numpy_error_defaults(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` with underflow ignored and the caller's ``"raise"`` (or ``"call"``, ``"log"``) for
    the other floating-point errors turned into warnings, whatever the caller set with ``np.seterr``
    or ``np.errstate``: the engine relies on gradual underflow (a saturated softmax, an
    enclosure's products; every bound counts it) and judges overflow itself, so a caller's
    ``all="raise"`` must not stop it halfway. What the caller ignores stays ignored, so the engine's
    own ``np.errstate`` blocks hold in the functions they call."""
    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        import numpy as np                  # here: the command line's start imports this module
        state = {kind: ("warn" if mode in ("raise", "call", "log") else mode)
                 for kind, mode in np.geterr().items()}
        with np.errstate(**{**state, "under": "ignore"}):
            return fn(*args, **kwargs)
    return wrapper
