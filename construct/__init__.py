"""mha-construct: exact memorizing weights for single-layer multi-head attention.

Follows the constructive proof of Theorem 1 of *Memorization Capacity of Multi-Head Attention in
Transformers* (Mahdavi, Liao, Thrampoulidis, ICLR 2024): ``H`` heads with context size ``n``
memorize ``H(n − 1) + 1`` examples (with ``d_h ≥ n``). ``build`` runs the construction and checks
the result with the model's own forward pass; ``verify`` re-checks weights against data, and
``construct.certify`` proves the exact model's rank and error.
"""

import importlib as _importlib

from ._version import __version__
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

# Submodules not imported with the package (optional libraries, or their own import cost), loaded
# on first use: ``construct.datasets.digits(...)`` works after a plain ``import construct``, as
# the docs write it.
_ON_USE = ("baselines", "certify", "datasets", "export", "report", "sweeps", "torch_model")


def __getattr__(name: str):
    if name in _ON_USE:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ON_USE))
