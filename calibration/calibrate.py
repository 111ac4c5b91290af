"""`kbflow eval calibrate`: fit the quality gate on labelled answerable and unanswerable queries.

Objective (stated, not tuned per dataset): at most 2 % of answerable queries may be answered
"no usable evidence" (`MAX_FALSE_NO_EVIDENCE`); subject to that, the highest share of
unanswerable queries answered with none. The gate's quality is a two-feature logistic model
(dense cosine, query-term coverage) fitted on the top candidates of every query, so it reads as
the probability that a chunk is relevant. The usable floor is the highest quality that keeps
the objective on the data; `reference` and `precise` are probability levels (0.5: more likely
relevant than not; 0.8), reported with the precision they had on the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from kbflow.core.errors import InputError
from kbflow.retrieval.gate import FEATURES, Calibration

MAX_FALSE_NO_EVIDENCE = 0.02
TOP_HITS = 5  # candidates per query that the model is fitted on
REFERENCE_LEVEL, PRECISE_LEVEL = 0.5, 0.8
RIDGE = 1e-2


class CalibrationDataError(InputError, ValueError):
    """The labelled queries cannot teach a calibration; the message says what is missing."""


@dataclass
class LabelledQuery:
    """One query's candidates, best first: (signals, relevant?) per candidate."""

    qid: str
    dataset: str
    kind: str  # answerable | near | off
    hits: list[tuple[dict[str, float], bool]] = field(default_factory=list)
    model_id: str = ""  # the model its query and candidates were embedded with

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


def fit_logistic(
    x: np.ndarray, y: np.ndarray, ridge: float = RIDGE, iterations: int = 50, prior: np.ndarray | None = None
) -> np.ndarray:
    """Weights (bias first) by Newton's method (IRLS) with a small ridge for stability when the
    classes separate; the ridge pulls towards `prior` (zero when None), never the bias."""
    xb = np.hstack([np.ones((len(x), 1)), x])
    centre = np.zeros(xb.shape[1]) if prior is None else prior.astype(float)
    w = centre.copy()
    penalty = ridge * np.eye(xb.shape[1])
    penalty[0, 0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -60, 60)))
        grad = xb.T @ (p - y) + penalty @ (w - centre)
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def training_set(
    queries: Sequence[LabelledQuery], features: Sequence[str] = FEATURES
) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    for q in queries:
        for signals, relevant in q.hits[:TOP_HITS]:
            rows.append([signals.get(f, 0.0) for f in features])
            labels.append(1.0 if relevant else 0.0)
    return np.asarray(rows, dtype=float), np.asarray(labels, dtype=float)


def query_score(cal: Calibration, q: LabelledQuery, pool: int) -> float:
    """The best quality among the candidates the pipeline would gate (its retrieve_k)."""
    return max((cal.quality(s) for s, _ in q.hits[:pool]), default=0.0)


def choose_floor(answerable_scores: Sequence[float], max_rate: float = MAX_FALSE_NO_EVIDENCE) -> float:
    """The highest floor that answers at most `max_rate` of answerable queries with nothing."""
    if not answerable_scores:
        return 0.0
    ordered = sorted(answerable_scores)
    allowed = math.floor(max_rate * len(ordered))
    # rounded down, so storing it (4 decimals) never raises it past the query it must keep
    return max(0.0, math.floor((ordered[allowed] - 1e-9) * 1e4) / 1e4)


def _rate(values: Sequence[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _top1_precision(cal: Calibration, queries: Sequence[LabelledQuery], threshold: float) -> float | None:
    picked = [q.hits[0][1] for q in queries if q.hits and cal.quality(q.hits[0][0]) >= threshold]
    return _rate(picked)


@dataclass
class CalibrationResult:
    calibration: Calibration
    rates: dict[str, Any]
    distributions: dict[str, dict[str, dict[str, float]]]
    samples: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "calibration": self.calibration.to_dict(),
            **{k: v for k, v in asdict(self).items() if k != "calibration"},
        }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values)
    return {
        "n": len(values),
        "min": round(float(arr.min()), 3),
        "p10": round(float(np.quantile(arr, 0.1)), 3),
        "median": round(float(np.median(arr)), 3),
        "p90": round(float(np.quantile(arr, 0.9)), 3),
        "max": round(float(arr.max()), 3),
    }


def distributions(
    cal: Calibration, queries: Sequence[LabelledQuery], pool: int
) -> dict[str, dict[str, dict]]:
    """Per signal, per kind (answerable / near / off): quantiles of the query's top candidate."""
    out: dict[str, dict[str, dict]] = {}
    for signal in (*FEATURES, "quality"):
        out[signal] = {}
        for kind in ("answerable", "near", "off"):
            group = [q for q in queries if q.kind == kind and q.hits]
            if signal == "quality":
                vals = [query_score(cal, q, pool) for q in group]
            else:
                vals = [max(s.get(signal, 0.0) for s, _ in q.hits[:pool]) for q in group]
            out[signal][kind] = _quantiles(vals)
    return out


def calibrate(
    queries: Sequence[LabelledQuery],
    *,
    model_id: str,
    kb_scope: str,
    pool: int,
    source: str,
    features: Sequence[str] = FEATURES,
    origin: str = "labelled",
) -> CalibrationResult:
    """Fit the model, choose the floor by the objective, report what it achieves."""
    x, y = training_set(queries, features)
    if len(set(y.tolist())) < 2:
        answered = sum(1 for q in queries if q.answerable and any(r for _, r in q.hits[:TOP_HITS]))
        which = "only relevant" if y.size and y.min() == 1 else "no relevant"
        raise CalibrationDataError(
            f"calibration needs relevant and irrelevant candidates, and these {len(queries)} queries give "
            f"{which} ones ({answered} answerable with their document among the first candidates): "
            "give answerable queries whose documents are retrieved, and unanswerable ones"
        )
    w = fit_logistic(x, y)
    weights = {
        "bias": round(float(w[0]), 4),
        **{f: round(float(v), 4) for f, v in zip(features, w[1:], strict=True)},
    }
    fitted = Calibration(kind="logistic", weights=weights, model_id=model_id, kb_scope=kb_scope)
    answerable = [q for q in queries if q.answerable]
    floor = choose_floor([query_score(fitted, q, pool) for q in answerable])
    reference = max(floor, REFERENCE_LEVEL)
    precise = max(reference, PRECISE_LEVEL)
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    cal = Calibration(
        kind="logistic",
        weights=weights,
        floor=round(floor, 4),
        reference=round(reference, 4),
        precise=round(precise, 4),
        model_id=model_id,
        kb_scope=kb_scope,
        source=f"calibrated {when} on {source}",
        origin=origin,
    )
    return CalibrationResult(
        cal, achieved(cal, queries, pool), distributions(cal, queries, pool), _samples(queries, pool)
    )


def achieved(cal: Calibration, queries: Sequence[LabelledQuery], pool: int) -> dict[str, Any]:
    """What this calibration does on these queries: the two no-evidence rates and precision."""
    found = {q.qid: query_score(cal, q, pool) >= cal.floor for q in queries}
    answerable = [q for q in queries if q.answerable]
    rates: dict[str, Any] = {
        "objective": f"false no-evidence <= {MAX_FALSE_NO_EVIDENCE:.0%} on answerable queries; "
        "then the highest true no-evidence rate on unanswerable ones",
        "answerable": len(answerable),
        "false_no_evidence_rate": _rate([not found[q.qid] for q in answerable]),
        "top1_precision_at_reference": _top1_precision(cal, answerable, cal.reference),
        "top1_precision_at_precise": _top1_precision(cal, answerable, cal.precise),
    }
    for kind in ("near", "off"):
        group = [q for q in queries if q.kind == kind]
        rates[kind] = len(group)
        rates[f"true_no_evidence_rate_{kind}"] = _rate([not found[q.qid] for q in group])
    fne = rates["false_no_evidence_rate"]
    rates["objective_met"] = fne is not None and fne <= MAX_FALSE_NO_EVIDENCE
    return rates


def _samples(queries: Sequence[LabelledQuery], pool: int) -> list[dict[str, Any]]:
    """The data a calibration came from, kept beside it: each query's top candidates' signals."""
    return [
        {
            "qid": q.qid,
            "dataset": q.dataset,
            "kind": q.kind,
            "hits": [[s.get(f, 0.0) for f in FEATURES] + [int(r)] for s, r in q.hits[: max(TOP_HITS, pool)]],
        }
        for q in queries
    ]


def queries_from_samples(samples: Sequence[dict[str, Any]]) -> list[LabelledQuery]:
    return [
        LabelledQuery(
            s["qid"],
            s["dataset"],
            s["kind"],
            [({f: h[i] for i, f in enumerate(FEATURES)}, bool(h[-1])) for h in s["hits"]],
        )
        for s in samples
    ]
