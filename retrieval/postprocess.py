"""Post-processing: score, keep the fused order, merge duplicates, cap, level, gate.

Quality never re-sorts anything: a higher-quality hit ranked lower stays lower. Each hit is
judged by its own scope's calibration (`gate.Calibration`): below its floor it is not evidence;
above it, its level (from the level model's confidence, or from quality where the calibration
has none) makes it REFERENCE, PRECISE or weak. With a level model the lookup's level is the
first piece of evidence's: a weak first answer with a confident third is still a weak answer. On
quality alone it is the best candidate's in the ranked (not deduplicated) list, as SPEC §3.4 has
it, and that quality level is what the fallback reads either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kbflow.retrieval.contracts import Evidence, GateTrace, Hit, L0Navigation, RelevanceLevel
from kbflow.retrieval.gate import Calibration, query_terms, signals_for
from kbflow.retrieval.quality import lexical_coverage
from kbflow.retrieval.support import SIGNALS as LEVEL_INPUTS

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
    # the fallback trigger: no candidate at REFERENCE on quality. It stays on quality: a retry is
    # about retrieval (did the filtered search find strong candidates?), the level about the answer
    low_quality: bool


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
        confidence=h.confidence,
        uncovered=list(h.uncovered),
        signals=dict(h.signals),
        original_rank=h.original_rank,
        hit_reasons=list(h.hit_reasons),
        dense_rank=h.dense_rank,
        sparse_rank=h.sparse_rank,
    )


Judge = Callable[[list[Hit]], list[Hit]]  # usable hits -> the same, confidence filled in


def _usable(
    ranked: Sequence[Hit], cfg: PostprocessConfig, calibrations: Mapping[str, Calibration]
) -> list[Hit]:
    """The usable hits in rank order: above their scope's floor, one per evidence key (a repeat
    from another leg or scope lends its hit reasons and breadcrumb), at most
    `max_chunks_per_document` per document and `return_n` in all."""
    merged: dict[tuple[str, str], Hit] = {}
    for h in ranked:
        key = (h.kb_scope, h.evidence_key)
        if key in merged:
            first = merged[key]
            merged[key] = first.model_copy(update={
                "hit_reasons": sorted({*first.hit_reasons, *h.hit_reasons}),
                "breadcrumb": first.breadcrumb or h.breadcrumb,
            })
            continue
        if (h.quality_score or 0.0) >= calibrations[h.kb_scope].floor:
            merged[key] = h
    per_doc: dict[tuple[str, str], int] = {}
    out: list[Hit] = []
    for h in merged.values():
        doc = (h.kb_scope, h.doc_id)
        if per_doc.get(doc, 0) >= cfg.max_chunks_per_document:
            continue
        per_doc[doc] = per_doc.get(doc, 0) + 1
        out.append(h)
        if len(out) >= cfg.return_n:
            break
    return out


def postprocess(
    hits: Sequence[Hit],
    cfg: PostprocessConfig,
    calibrations: Mapping[str, Calibration],
    judge: Judge | None = None,
) -> Processed:
    """The evidence and its level. `judge` gives the usable hits their confidence (the level
    model); each piece of evidence is then weak or not by its own level. The lookup's level is
    the first piece's where the level model judged it (what an agent reads first is what it
    vouches for), else the best level on quality in the ranked list."""
    ranked = sorted(hits, key=lambda h: h.original_rank)
    qualities = [h.quality_score for h in ranked if h.quality_score is not None]
    top = max(qualities) if qualities else None
    usable = _usable(ranked, cfg, calibrations)
    if judge is not None and usable:
        usable = judge(usable)
        judged = {(h.kb_scope, h.original_rank): h for h in usable}
        ranked = [judged.get((h.kb_scope, h.original_rank), h) for h in ranked]  # the candidates show it too
    levels = [calibrations[h.kb_scope].level(h.quality_score or 0.0, h.confidence) for h in usable]
    evidence = [_evidence(h, weak=lv is None) for h, lv in zip(usable, levels, strict=True)]
    # on quality: the best candidate's level, even one the per-document cap left out (SPEC §3.4)
    ranked_levels = [calibrations[h.kb_scope].level(h.quality_score or 0.0) for h in ranked]
    by_quality = max((lv for lv in ranked_levels if lv), key=LEVELS.__getitem__, default=None)
    # the level model vouches for the first piece of evidence: it was fitted on it
    level = levels[0] if usable and usable[0].confidence is not None else by_quality
    return Processed(ranked, evidence, top, level, low_quality=by_quality is None)


def gate_trace(processed: Processed, calibrations: Mapping[str, Calibration]) -> GateTrace:
    best = max(processed.ranked, key=lambda h: h.quality_score or 0.0, default=None)
    if processed.relevance_level:
        decision = processed.relevance_level
    else:
        decision = "weak evidence only" if processed.evidence else "no usable evidence"
    if best is None:
        return GateTrace(decision=decision)
    cal = calibrations[best.kb_scope]
    trace = GateTrace(
        decision=decision,
        top_evidence_key=best.evidence_key,
        top_signals=dict(best.signals),
        top_quality=round(best.quality_score or 0.0, 4),
        weights=dict(cal.weights) if cal.kind == "logistic" else {},
        floor=cal.floor,
        reference=cal.reference,
        precise=cal.precise,
    )
    first = processed.evidence[0] if processed.evidence else None
    if first is not None:
        first_cal = calibrations[first.kb_scope]
        trace.first_evidence_key = first.evidence_key
        if first_cal.judges_coverage and first.confidence is not None:
            trace.confidence = first.confidence
            trace.level_weights = dict(first_cal.levels["weights"])
            trace.level_signals = {k: first.signals[k] for k in (*LEVEL_INPUTS,) if k in first.signals}
            trace.level_signals["quality"] = first.quality_score
            trace.uncovered = list(first.uncovered)
            trace.reference, trace.precise = first_cal.levels["reference"], first_cal.levels["precise"]
    return trace
