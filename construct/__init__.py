"""mha-construct: exact memorizing weights for single-layer multi-head attention.

Follows the constructive proof of Theorem 1 of *Memorization Capacity of Multi-Head Attention in
Transformers* (Mahdavi, Liao, Thrampoulidis, ICLR 2024): ``H`` heads with context size ``n``
memorize ``H(n − 1) + 1`` examples (with ``d_h ≥ n``). ``build`` runs the construction and checks
the result with the model's own forward pass; ``verify`` re-checks weights against data, and
``construct.certify`` proves the exact model's rank and error.
"""

import importlib as _importlib
import importlib.util as _importlib_util
import pkgutil as _pkgutil
import sys as _sys
import types as _types
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._version import __version__

# The package's names, loaded on first use: ``import construct`` (and the command line's start,
# where Ctrl-C must find the command's own handler, not an import) stays free of NumPy and SciPy.
_FROM = {
    "check_assumptions": "assumptions", "kruskal_rank": "assumptions",
    "BuildResult": "build", "HeadEvidence": "build", "build": "build", "capacity": "build",
    "heads_needed": "build",
    "Dataset": "data", "as_dataset": "data", "load_dataset": "data", "synthetic": "data",
    "CapacityError": "errors", "ConstructError": "errors", "ConstructionError": "errors",
    "InputError": "errors",
    "Weights": "model", "as_weights": "model", "feature_matrix": "model", "forward": "model",
    "load_weights": "model", "param_count": "model",
    "teach": "teach",
    "Verification": "verify", "verify": "verify",
}

if _TYPE_CHECKING:                               # what a type checker sees: the names themselves
    from .assumptions import check_assumptions, kruskal_rank
    from .build import BuildResult, HeadEvidence, build, capacity, heads_needed
    from .data import Dataset, as_dataset, load_dataset, synthetic
    from .errors import CapacityError, ConstructError, ConstructionError, InputError
    from .model import Weights, as_weights, feature_matrix, forward, load_weights, param_count
    from .teach import teach
    from .verify import Verification, verify

__all__ = [
    "__version__", "BuildResult", "CapacityError", "ConstructError", "ConstructionError", "Dataset", "HeadEvidence",
    "InputError", "Verification", "Weights", "as_dataset", "as_weights", "build", "capacity",
    "check_assumptions", "feature_matrix", "forward", "heads_needed", "kruskal_rank", "load_dataset",
    "load_weights", "param_count", "synthetic", "teach", "verify",
]

for _name in _FROM:                              # importlib.reload: the names load again
    globals().pop(_name, None)


def __getattr__(name: str):
    """The names above, and every submodule (``construct.datasets.digits(...)``,
    ``construct.arith.rank_tol``, as the docs write them), on first use."""
    if name in _FROM:
        value = getattr(_importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
        globals()[name] = value                  # found directly from now on
        return value
    if "." not in name and not name.startswith("__") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM) | {m.name for m in _pkgutil.iter_modules(__path__)})


class _Package(_types.ModuleType):
    """The package's module: ``build``, ``verify`` and ``teach`` name both a function and the
    submodule that defines it. Importing such a submodule sets the package's attribute to the
    module; the function keeps the name, as it did when the package imported it at once."""

    def __setattr__(self, name: str, value) -> None:
        if _FROM.get(name) == name and getattr(value, "__name__", None) == f"{__name__}.{name}":
            return                               # the import system's, for the submodule
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
