"""Fitting the level model: when may a piece of evidence be called REFERENCE or PRECISE?

The gate's floor decides whether a lookup answers at all; the level says how far its first piece
of evidence can be trusted to answer the question. The level model is a logistic regression over
that piece's quality and its coverage signals (`retrieval/support.py`: specific, support,
unknown), fitted on labelled questions: a question is a positive example when it is answerable
and its first piece of evidence is from a document that answers it; near-domain and off-domain
questions, and answerable ones led by the wrong document, are negatives. The confidence it gives
reads as the probability that the first piece of evidence answers the question; REFERENCE is
confidence 0.5 and PRECISE 0.8, as for quality.

Few labelled questions (a user's ten) do not pin down five weights: `fit_levels` pulls the
weights towards a prior (the packaged model's) instead of towards zero, so a small sample adjusts
the packaged model rather than replacing it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kbflow.calibration.calibrate import LabelledQuery, fit_logistic
from kbflow.retrieval.gate import Calibration
from kbflow.retrieval.support import SIGNALS

INPUTS = ("quality", *SIGNALS)
REFERENCE, PRECISE = 0.5, 0.8
RIDGE_ZERO = 1e-2  # without a prior: only keeps separable data finite
RIDGE_PRIOR = 4.0  # with a prior: about four questions' worth of pull towards it


@dataclass(frozen=True)
class LevelSample:
    """One question's first piece of evidence, as the level model sees it."""

    qid: str
    group: str  # the scope (or data set) it was asked of: leave-one-group-out runs by it
    kind: str  # answerable | near | off
    inputs: dict[str, float]  # empty: the question got no usable evidence (refused)
    right: bool  # answerable, and the first piece of evidence answers it

    @property
    def answered(self) -> bool:
        return bool(self.inputs)

    def x(self) -> list[float]:
        return [self.inputs.get(k, 0.0) for k in INPUTS]


def level_samples(queries: Sequence[LabelledQuery], cal: Calibration) -> list[LevelSample]:
    """Each question's first usable candidate (quality at or above the floor) that was judged
    (it carries the coverage signals); a question with none was refused (no inputs)."""
    out = []
    for q in queries:
        sample = LevelSample(q.qid, q.dataset, q.kind, {}, False)
        for signals, relevant in q.hits:
            quality = cal.quality(signals)
            if quality >= cal.floor and all(k in signals for k in SIGNALS):
                inputs = {"quality": quality, **{k: signals[k] for k in SIGNALS}}
                sample = LevelSample(q.qid, q.dataset, q.kind, inputs, q.answerable and relevant)
                break
        out.append(sample)
    return out


def fit_levels(
    samples: Sequence[LevelSample], source: str, prior: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """The level model fitted on `samples` (towards `prior`, the weights of a level model that
    exists already, when given)."""
    samples = [s for s in samples if s.answered]
    if not samples or len({s.right for s in samples}) < 2:
        raise ValueError(
            "fitting levels needs questions answered right by their first piece of evidence and "
            "questions that are not (near-domain or off-domain ones, or answerable ones led by the "
            "wrong document)"
        )
    x = np.array([s.x() for s in samples], dtype=float)
    y = np.array([1.0 if s.right else 0.0 for s in samples])
    centre = None
    if prior is not None:
        centre = np.array([prior.get("bias", 0.0), *(prior.get(k, 0.0) for k in INPUTS)])
    w = fit_logistic(x, y, RIDGE_ZERO if prior is None else RIDGE_PRIOR, iterations=60, prior=centre)
    weights = {"bias": round(float(w[0]), 4)}
    weights.update({k: round(float(v), 4) for k, v in zip(INPUTS, w[1:], strict=True)})
    return {"weights": weights, "reference": REFERENCE, "precise": PRECISE, "source": source}


def confidence(levels: Mapping[str, Any], sample: LevelSample) -> float:
    from kbflow.retrieval.support import level_score

    return level_score(levels["weights"], sample.inputs["quality"], sample.inputs)


def _share(values: Sequence[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def is_confident(levels: Mapping[str, Any] | None, s: LevelSample) -> bool:
    """REFERENCE or better (`levels` None: the level reads quality at 0.5, as before level
    models)."""
    if not s.answered:
        return False
    if levels is None:
        return s.inputs["quality"] >= REFERENCE
    return confidence(levels, s) >= levels["reference"]


def _rates(samples: Sequence[LevelSample], confident: Sequence[bool]) -> dict[str, Any]:
    ans = [(s, c) for s, c in zip(samples, confident, strict=True) if s.kind == "answerable"]
    out: dict[str, Any] = {
        "answerable": len(ans),
        "refused": _share([not s.answered for s, _ in ans]),
        "right_at_reference": _share([c and s.right for s, c in ans]),
        "weak_only": _share([s.answered and not c for s, c in ans]),
    }
    for kind in ("near", "off"):
        group = [c for s, c in zip(samples, confident, strict=True) if s.kind == kind]
        out[kind] = len(group)
        out[f"{kind}_confident"] = _share(group)
    return out


def level_rates(levels: Mapping[str, Any] | None, samples: Sequence[LevelSample]) -> dict[str, Any]:
    """What a level model does on these questions: answerable ones refused, right at REFERENCE
    or better, and weak only; near- and off-domain ones answered with confidence."""
    return _rates(samples, [is_confident(levels, s) for s in samples])


def leave_one_group_out(
    samples: Sequence[LevelSample], fixed: Sequence[LevelSample] = ()
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """How the level model does on a scope it has never seen: each group judged by a model
    fitted without it (on the other groups and `fixed`). Returns the rates over every group
    together and per group."""
    ordered, confident, per_group = [], [], {}
    for g in sorted({s.group for s in samples}):
        test = [s for s in samples if s.group == g]
        model = fit_levels([s for s in samples if s.group != g] + list(fixed), "leave-one-out")
        flags = [is_confident(model, s) for s in test]
        per_group[g] = _rates(test, flags)
        ordered += test
        confident += flags
    return _rates(ordered, confident), per_group


def fit_for(
    queries: Sequence[LabelledQuery], cal: Calibration, source: str, prior: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The level model `kbflow eval calibrate` stores beside a fitted quality: fitted on the same
    labelled lookups, pulled towards `prior` (the packaged level model) so that ten questions
    adjust it rather than replace it. None when the lookups cannot teach one: no coverage
    signals, or no question answered right and none answered wrongly."""
    samples = level_samples(queries, cal)
    answered = [s for s in samples if s.answered]
    if len({s.right for s in answered}) < 2:
        return None
    weights = prior.get("weights") if prior else None
    levels = fit_levels(samples, source, prior=weights)
    levels["rates"] = level_rates(levels, samples)
    return levels
