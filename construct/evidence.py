"""What a build returns: the weights, and per head the evidence and (on request) the arrays."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields

import numpy as np

from .data import Dataset
from .limits import same_values
from .model import Weights
from .verify import Verification


@dataclass(frozen=True)
class HeadEvidence:
    """What the construction proved for one head.

    Attributes:
        head: head number, from 1.
        examples: the group it fits exactly, as ``[first, last]`` example indices.
        scale: the saturation scale ``c_h`` used (0 for head 1, which has no earlier examples).
        scale_explicit: the explicit scale of docs/math.md §4.4.5 (Lemma 4 + Weyl), what the
            existence argument asks for; ``scale`` is smaller when the build searched for the
            smallest scale that keeps the rank (``rank``) or the proof's saturation argument
            (``saturating``).
        delta_min: smallest Lemma 3 gap ``δ_t`` over the earlier examples (None for head 1).
        sigma_min_M: ``σ_min`` of the reduced new rows ``M`` (Z's rows for head 1).
        C_norm: ``‖C‖_2`` of the row reduction.
        ell_inf_max: largest ``‖ℓ^(t)‖_∞`` over the earlier examples.
        perturbation_bound: Lemma 4 + Weyl bound on ``‖C(Z''_A − Z̄_A)‖_2`` at ``c_h``; below
            ``σ_min(M)`` proves the rank grows by the group size.
        perturbation_measured: ``‖C(Z''_A − Z̄_A)‖_2`` measured on the head's features at
            ``c_h``; below ``σ_min(M)`` shows the same by Weyl (Lemma 5) on the actual matrices.
        sigma_min_N: ``σ_min`` of the reduced new rows ``N = Z''_S − C Z''_A`` at ``c_h``, measured:
            positive is the rank step itself (Lemma 1 after the row operation).
        rounding_estimate: docs/math.md §5's size of the rounding of the group's logits at the build's
            precision (:func:`construct.policy.logit_rounding`: the rank-one term's
            ``c_h ε ‖a‖ ‖b‖ ‖x‖ ‖E‖`` and any cancellation inside ``W_K W_Q^T``).
        target_error: measured ``max |z^(t) − E^(t)T s^(t)|`` on the group (exact up to rounding).
        draws: random draws used (targets and separator).
    """

    head: int
    examples: list[int]
    scale: float
    scale_explicit: float
    delta_min: float | None
    sigma_min_M: float
    C_norm: float
    ell_inf_max: float
    perturbation_bound: float
    perturbation_measured: float
    sigma_min_N: float
    rounding_estimate: float
    target_error: float
    draws: int


@dataclass(frozen=True, eq=False)
class HeadTrace:
    """The arrays one head's step produced (kept only with ``build(..., trace=True)``).

    Attributes:
        examples: the group ``S`` it fits.
        targets: the attention targets ``s^(t)`` on ``S``, shape (|S|, n).
        a, b: Lemma 3's separator ``W' = a b^T`` (None for head 1), shape (d,) each.
        j_star: the token each earlier example saturates to, ``j*(t)`` for ``t ∈ A``, shape (|A|,).
        delta: Lemma 3's gaps ``δ_t``, shape (|A|,).
        C: the row reduction's ``Z'_S (Z'_A)^+``, shape (|S|, |A|).
        F: ``C Z̄_A``, shape (|S|, d).
        M: the reduced new rows ``E^(t)T s^(t) − f^(t)``, shape (|S|, d).
    """

    examples: range
    targets: np.ndarray
    a: np.ndarray | None
    b: np.ndarray | None
    j_star: np.ndarray
    delta: np.ndarray
    C: np.ndarray
    F: np.ndarray
    M: np.ndarray

    def __eq__(self, other: object) -> bool:        # by value: the arrays' shapes and values
        if not isinstance(other, HeadTrace):
            return NotImplemented
        return all(same_values(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class HeadStep:
    """One head's step of the construction: its evidence and its arrays."""

    evidence: HeadEvidence
    trace: HeadTrace


@dataclass
class BuildResult:
    """Weights and the evidence that they memorize the dataset.

    Attributes:
        weights: the constructed weights.
        data: the dataset they memorize.
        k: ``min(n, d_h)``; capacity is ``H(k − 1) + 1``.
        capacity: the number of examples Theorem 1 guarantees.
        heads: evidence per head used.
        verification: the final check by the forward pass (rank Z, max error).
        seed: the random seed; the same seed gives identical weights.
        timings: seconds per stage.
        scale: how the saturation scales were chosen (``"rank"``, ``"saturating"`` or ``"explicit"``).
        precision: the arithmetic the construction ran in, and ``precision_reason`` why.
        device: ``"cpu"`` or ``"gpu"``, where it ran, and ``device_reason`` why.
        prelayer: None, or the layer that runs before the attention layer (``"mean-shift"``,
            Proposition 4), and ``prelayer_reason`` why.
        trace: per head, the arrays of its step (empty unless built with ``trace=True``).
    """

    weights: Weights
    data: Dataset
    k: int
    capacity: int
    heads: list[HeadEvidence]
    verification: Verification
    seed: int
    timings: dict[str, float] = field(default_factory=dict)
    trace: list[HeadTrace] = field(default_factory=list)
    scale: str = "rank"
    precision: str = "float64"
    precision_reason: str = ""
    device: str = "cpu"
    device_reason: str = ""
    prelayer: str | None = None
    prelayer_reason: str = ""
    # The weights and data as built and verified (a digest; set by construct.build), so that a
    # report is never written for weights or data changed since.
    _built: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def max_abs_error(self) -> float:
        return self.verification.max_abs_error

    def _digest(self) -> str:
        h = hashlib.sha256(self.weights.to_bytes())
        for a in (self.data.E, self.data.X, self.data.Y):
            h.update(np.ascontiguousarray(a, dtype=np.float64).data)
        h.update(repr(self.data.classes).encode())
        return h.hexdigest()

    def _seal(self) -> BuildResult:
        """Record the weights and data the evidence is about (:meth:`_check_unchanged`)."""
        self._built = self._digest()
        return self

    def _check_unchanged(self) -> None:
        """Refuse to describe weights or data other than those built and verified.

        Raises:
            InputError: ``weights`` or ``data`` were replaced or edited since the build, or the
                result was not made by :func:`construct.build` (``dataclasses.replace`` makes one).
        """
        if self._built is None or self._digest() != self._built:
            from .errors import InputError
            raise InputError("the result's weights or data are not those the build verified (replaced or edited "
                             "since, or a result not made by construct.build): its report would describe other "
                             "weights; save the weights themselves (Weights.save) and check them with "
                             "construct.verify", what="invalid result")

    def save(self, folder, *, force: bool = False) -> None:
        """Write ``weights.npz``, ``data.npz`` and ``report.json`` into ``folder`` as one set, as
        ``mha-construct build --out`` does: a ``certificate.json`` there goes with the old set (it
        certified the old weights); ``force``: replace a folder holding other files too.

        Raises:
            InputError: the weights or data are not those the build verified (replaced or edited
                since): the report would describe other weights.
        """
        from .io import OutputFolder, json_bytes, sha256
        from .limits import flag
        from .report import build_report
        force = flag(force, "force")
        self._check_unchanged()
        weights, data = self.weights.to_bytes(), self.data.to_bytes()
        source = {"source": "python"}
        if self.data.classes is not None:           # integer labels: the id of each column of Y
            source["classes"] = list(self.data.classes)
        report = build_report(self, data_source=source, data_sha256=sha256(data),
                              weights_sha256=sha256(weights), total_seconds=sum(self.timings.values()))
        with OutputFolder(folder, ("weights.npz", "data.npz", "report.json", "certificate.json"), force=force) as out:
            out.publish({"weights.npz": weights, "data.npz": data, "report.json": json_bytes(report)})

    def __repr__(self) -> str:
        v = self.verification            # a description: its words are not attribute names
        return (f"<BuildResult: T = {self.data.T} examples, H = {self.weights.H} heads ({len(self.heads)} used), "
                f"{self.precision}, scale {self.scale}"
                + ("" if self.prelayer is None else f", pre-layer {self.prelayer}")
                + f"; verification {'passed' if v.passed else 'FAILED'}: rank Z = {v.rank_Z}, "
                f"max |f - y| = {v.max_abs_error:.3g}>")
