"""Post-processing: score, keep the fused order, merge duplicates, cap, level, gate.

Two things run in parallel and must not be confused: the *level* and the fallback trigger read
the whole ranked list's best quality; the *output* is the deduplicated, capped evidence.
Quality never re-sorts anything — a higher-quality hit ranked lower stays lower. Each hit is
judged by its own scope's calibration (`gate.Calibration`): below its floor it is not evidence,
below its reference threshold it is returned as weak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kbflow.retrieval.contracts import Evidence, GateTrace, Hit, L0Navigation, RelevanceLevel
from kbflow.retrieval.gate import Calibration, query_terms, signals_for
from kbflow.retrieval.quality import lexical_coverage

LEVELS = {"PRECISE": 2, "REFERENCE": 1}


@dataclass(frozen=True)
class PostprocessConfig:
    max_chunks_per_document: int = 2
    return_n: int = 5


@dataclass
class Processed:
    ranked: list[Hit]  # every candidate in originalRank order, quality filled in
    evidence: list[Evidence]  # usable, deduplicated, capped; still in originalRank order
    top_quality: float | None
    relevance_level: RelevanceLevel | None
    low_quality: bool  # no evidence at or above its reference threshold: the fallback trigger


def score_hits(hits: Sequence[Hit], query: str, calibrations: Mapping[str, Calibration]) -> list[Hit]:
    terms = query_terms(query)
    out = []
    for h in hits:
        cal = calibrations[h.kb_scope]
        if h.quality_signal == "lexical":
            signals = {"coverage": round(lexical_coverage(query, h.content), 4)}
        else:
            signals = signals_for(terms, h.dense_distance, h.title, h.breadcrumb, h.content)
        out.append(h.model_copy(update={"signals": signals, "quality_score": cal.quality(signals)}))
    return out


def attach_l0_reasons(hits: Sequence[Hit], nav: L0Navigation) -> list[Hit]:
    """L0 explains, never scores: it only adds hit reasons."""
    out = []
    for h in hits:
        extra = nav.doc_reasons.get(f"{h.kb_scope}:{h.doc_id}", [])
        out.append(h.model_copy(update={"hit_reasons": sorted({*h.hit_reasons, *extra})}))
    return out


def _evidence(h: Hit, weak: bool) -> Evidence:
    return Evidence(
        evidence_key=h.evidence_key,
        doc_id=h.doc_id,
        kb_scope=h.kb_scope,
        source=h.source,
        source_path=h.source_path,
        title=h.title,
        breadcrumb=h.breadcrumb,
        heading_path=h.heading_path,
        excerpt=h.content,
        quality_score=round(h.quality_score or 0.0, 4),
        weak=weak,
        signals=dict(h.signals),
        original_rank=h.original_rank,
        hit_reasons=list(h.hit_reasons),
        dense_rank=h.dense_rank,
        sparse_rank=h.sparse_rank,
    )


def postprocess(
    hits: Sequence[Hit], cfg: PostprocessConfig, calibrations: Mapping[str, Calibration]
) -> Processed:
    ranked = sorted(hits, key=lambda h: h.original_rank)
    qualities = [h.quality_score for h in ranked if h.quality_score is not None]
    top = max(qualities) if qualities else None
    levels = [calibrations[h.kb_scope].level(h.quality_score or 0.0) for h in ranked]
    level = max((lv for lv in levels if lv), key=LEVELS.__getitem__, default=None)

    merged: dict[tuple[str, str], Evidence] = {}
    for h in ranked:
        key = (h.kb_scope, h.evidence_key)
        if key in merged:  # the same chunk again (another leg / scope): merge, keep first
            first = merged[key]
            first.hit_reasons = sorted({*first.hit_reasons, *h.hit_reasons})
            first.breadcrumb = first.breadcrumb or h.breadcrumb
            continue
        cal = calibrations[h.kb_scope]
        if (h.quality_score or 0.0) < cal.floor:
            continue  # not usable evidence (it still counted for the level above)
        merged[key] = _evidence(h, weak=(h.quality_score or 0.0) < cal.reference)
    per_doc: dict[tuple[str, str], int] = {}
    evidence: list[Evidence] = []
    for ev in merged.values():
        doc = (ev.kb_scope, ev.doc_id)
        if per_doc.get(doc, 0) >= cfg.max_chunks_per_document:
            continue
        per_doc[doc] = per_doc.get(doc, 0) + 1
        evidence.append(ev)
        if len(evidence) >= cfg.return_n:
            break
    return Processed(
        ranked=ranked, evidence=evidence, top_quality=top, relevance_level=level, low_quality=level is None
    )


def gate_trace(processed: Processed, calibrations: Mapping[str, Calibration]) -> GateTrace:
    best = max(processed.ranked, key=lambda h: h.quality_score or 0.0, default=None)
    if processed.relevance_level:
        decision = processed.relevance_level
    else:
        decision = "weak evidence only" if processed.evidence else "no usable evidence"
    if best is None:
        return GateTrace(decision=decision)
    cal = calibrations[best.kb_scope]
    return GateTrace(
        decision=decision,
        top_evidence_key=best.evidence_key,
        top_signals=dict(best.signals),
        top_quality=round(best.quality_score or 0.0, 4),
        weights=dict(cal.weights) if cal.kind == "logistic" else {},
        floor=cal.floor,
        reference=cal.reference,
        precise=cal.precise,
    )
