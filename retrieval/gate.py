"""The quality gate: how good is each candidate, and is any of it usable evidence?

Quality is an absolute signal per candidate, never derived from rank. Two signals feed it:

- `cosine`: the dense similarity of the chunk's *stored* vector to the query
  (`1 - L2/2` for normalized vectors, clamped to [0, 1]);
- `coverage`: the share of the query's analysed content terms that the chunk's lexical text
  (title, breadcrumb, text; stemmed, identifiers split) contains.

A `Calibration` turns them into one quality in [0, 1]. The `logistic` kind is a two-feature
logistic model fitted by `kbflow eval calibrate` on labelled answerable and unanswerable queries:
quality reads as the probability that the chunk is relevant. The `cosine` kind is the plain
clamped cosine, for models nobody calibrated. Cosine alone cannot separate near-domain
questions from answerable ones (their ranges overlap), which is why coverage takes part.

Below `floor` a candidate is not evidence (an answer with none is "no usable evidence"). Above
it, the level asks more than the decision to answer: a calibration with a `levels` model gives
each piece of evidence a *confidence*, the probability that it answers the question, from its
quality and from how much of the question it covers (`support.py`); `levels["reference"]` and
`levels["precise"]` on that confidence give REFERENCE and PRECISE, and below them the evidence is
*weak*. A calibration without one (uncalibrated, lexical, or stored before levels existed and
with no packaged model to borrow from) puts `reference` and `precise` on quality itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kbflow.core.analysis import analyze, chunk_terms

# Measured, not assumed: BM25 strength per query term and the lift of a chunk's cosine over the
# dense leg's top-10 mean were tried as extra features and changed no rate on the golden corpus
# and CACM (README, "Calibration"), so the model keeps the two that carry the signal.
FEATURES = ("cosine", "coverage")
LEXICAL_CAP = 0.74  # lexical evidence alone may reach REFERENCE, never PRECISE
LEVELS_SPAN = 10  # a level model judges scopes up to this many times the largest it was fitted on


@dataclass(frozen=True)
class Calibration:
    kind: str = "cosine"  # cosine | logistic | lexical
    weights: dict[str, float] = field(default_factory=dict)  # bias + one weight per feature
    floor: float = 0.5
    reference: float = 0.5
    precise: float = 0.75
    model_id: str = ""
    kb_scope: str = "*"
    source: str = "uncalibrated: quality is the clamped cosine"
    origin: str = ""  # what it was fitted on: labelled | self | self + labelled ("" = packaged/none)
    # the level model: {"weights": {bias, quality, specific, support, unknown}, "reference",
    # "precise", "source"}; empty: the level reads quality (support.level_score)
    levels: dict[str, Any] = field(default_factory=dict)

    def quality(self, signals: Mapping[str, float]) -> float:
        if self.kind == "lexical":  # a model that cannot embed the scope's language
            return LEXICAL_CAP * signals.get("coverage", 0.0)
        if self.kind != "logistic":
            return max(0.0, min(1.0, signals.get("cosine", 0.0)))
        z = sum(w * (1.0 if f == "bias" else signals.get(f, 0.0)) for f, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def with_overrides(
        self, floor: float | None, reference: float | None, precise: float | None
    ) -> Calibration:
        """Thresholds set in Settings win over the calibration's."""
        changes = {
            k: v
            for k, v in (("floor", floor), ("reference", reference), ("precise", precise))
            if v is not None
        }
        if not changes:
            return self
        data = {**self.to_dict(), **changes}
        data["source"] = f"{self.source}; thresholds {sorted(changes)} from settings"
        if self.levels:  # the level thresholds act on the level model's confidence
            data["levels"] = {**self.levels, **{k: v for k, v in changes.items() if k != "floor"}}
            data["reference"], data["precise"] = self.reference, self.precise
        return Calibration.from_dict(data)

    @property
    def judges_coverage(self) -> bool:
        """Levels come from the level model (quality and the question's coverage)."""
        return bool(self.levels.get("weights")) and self.kind == "logistic"

    def levels_apply(self, documents: int) -> bool:
        """The level model judges a scope of this many documents: one it counted the vocabulary
        of, no more than LEVELS_SPAN times larger than the largest scope it was fitted on (on a
        3,000-document corpus the packaged ones answered 20-55 % of near-domain questions with
        confidence, against 5 % for levels on quality: `python bench/trust.py --fit`)."""
        if not self.judges_coverage or documents <= 0:
            return False
        span = self.levels.get("scope_documents")
        return not span or documents <= span[1] * LEVELS_SPAN

    def with_levels(self, levels: Mapping[str, Any]) -> Calibration:
        """This calibration with `levels` as its level model, unless it has one of its own."""
        if self.levels or not levels:
            return self
        return Calibration.from_dict({**self.to_dict(), "levels": dict(levels)})

    def level(self, quality: float, confidence: float | None = None) -> str | None:
        """REFERENCE, PRECISE or None (weak) for a piece of evidence: on its confidence when the
        calibration has a level model and the confidence was measured, else on its quality."""
        score, reference, precise = quality, self.reference, self.precise
        if self.judges_coverage and confidence is not None:
            score, reference, precise = confidence, self.levels["reference"], self.levels["precise"]
        if score >= precise:
            return "PRECISE"
        return "REFERENCE" if score >= reference else None

    @property
    def label(self) -> str:
        levels = f"; level model {self.levels.get('source', '')}" if self.judges_coverage else ""
        return f"{self.kind} for {self.model_id or 'any model'} @ {self.kb_scope}: {self.source}{levels}"


def query_terms(query: str) -> set[str]:
    return set(analyze(query).split())


def coverage(q_terms: set[str], title: str, breadcrumb: str, text: str) -> float:
    """Share of the query's analysed terms present in the chunk's analysed lexical text."""
    if not q_terms:
        return 0.0
    return len(q_terms & chunk_terms(title, breadcrumb, text)) / len(q_terms)


def cosine_from_l2(l2: float | None) -> float:
    if l2 is None:
        return 0.0
    return max(0.0, min(1.0, 1.0 - l2 / 2.0))


def signals_for(
    q_terms: set[str], dense_distance: float | None, title: str, breadcrumb: str, text: str
) -> dict[str, float]:
    return {
        "cosine": round(cosine_from_l2(dense_distance), 4),
        "coverage": round(coverage(q_terms, title, breadcrumb, text), 4),
    }
