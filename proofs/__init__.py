"""The statements of *Memorization Capacity of Multi-Head Attention in Transformers* as checks.

One module per statement of ``docs/math.md`` §3. Each has a ``check(...)`` that takes concrete arrays
(or a dataset and weights), decides every hypothesis, evaluates the conclusion, and returns a
:class:`Check` saying which hypothesis failed or what the conclusion's quantities are::

    >>> import proofs
    >>> from construct import synthetic
    >>> proofs.theorem1.check(synthetic("shared", T=7, n=3, d=4), heads=3).confirmed
    True

The mathematics lives once, in ``construct`` (Lemma 3 in ``construct.separator``, the saturation
bound in ``construct.saturation``, Claim 1 in ``construct.claim1``); these modules check it.
"""

from . import (appendix_c, claim1, claim2, lemma1, lemma2, lemma3, lemma4, lemma5, prop1, prop2, prop3,
               prop4, prop5, remark1, theorem1)
from .check import EXACT_TOL, Check

STATEMENTS = {
    "Lemma 1": lemma1, "Lemma 2": lemma2, "Lemma 3": lemma3, "Lemma 4": lemma4, "Lemma 5": lemma5,
    "Claim 1": claim1, "Claim 2": claim2,
    "Proposition 1": prop1, "Proposition 2": prop2, "Proposition 3": prop3, "Proposition 4": prop4,
    "Proposition 5": prop5, "Theorem 1": theorem1, "Remark 1": remark1, "Appendix C": appendix_c,
}

__all__ = ["Check", "EXACT_TOL", "STATEMENTS", "appendix_c", "claim1", "claim2", "lemma1", "lemma2", "lemma3",
           "lemma4", "lemma5", "prop1", "prop2", "prop3", "prop4", "prop5", "remark1", "theorem1"]
