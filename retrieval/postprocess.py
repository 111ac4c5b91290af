"""Post-processing: score, keep the fused order, merge duplicates, cap, level, gate.

Two things run in parallel and must not be confused: the *level* and the gate read the whole
ranked list's top quality; the *output* is the deduplicated, capped evidence. Quality never
re-sorts anything — a higher-quality hit ranked lower stays lower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retrieval.contracts import Evidence, Hit, L0Navigation, RelevanceLevel
from retrieval.quality import quality_score


@dataclass(frozen=True)
class PostprocessConfig:
    max_l2: float = 2.0
    max_chunks_per_document: int = 2
    return_n: int = 5
    precise_threshold: float = 0.75
    reference_threshold: float = 0.5


@dataclass
class Processed:
    ranked: list[Hit]  # every candidate in originalRank order, quality filled in
    evidence: list[Evidence]  # usable, deduplicated, capped; still in originalRank order
    top_quality: float | None
    relevance_level: RelevanceLevel | None
    low_quality: bool


def score_hits(hits: Sequence[Hit], query: str, max_l2: float) -> list[Hit]:
    return [
        h.model_copy(
            update={
                "quality_score": quality_score(
                    h.score_label,
                    h.score,
                    h.dense_distance,
                    max_l2=max_l2,
                    signal=h.quality_signal,
                    query=query,
                    content=h.content,
                )
            }
        )
        for h in hits
    ]


def attach_l0_reasons(hits: Sequence[Hit], nav: L0Navigation) -> list[Hit]:
    """L0 explains, never scores: it only adds hit reasons."""
    out = []
    for h in hits:
        extra = nav.doc_reasons.get(f"{h.kb_scope}:{h.doc_id}", [])
        out.append(h.model_copy(update={"hit_reasons": sorted({*h.hit_reasons, *extra})}))
    return out


def relevance_for(top: float | None, cfg: PostprocessConfig) -> RelevanceLevel | None:
    if top is None:
        return None
    if top >= cfg.precise_threshold:
        return "PRECISE"
    if top >= cfg.reference_threshold:
        return "REFERENCE"
    return None


def postprocess(hits: Sequence[Hit], cfg: PostprocessConfig) -> Processed:
    ranked = sorted(hits, key=lambda h: h.original_rank)
    qualities = [h.quality_score for h in ranked if h.quality_score is not None]
    top = max(qualities) if qualities else None
    level = relevance_for(top, cfg)

    merged: dict[str, Evidence] = {}
    for h in ranked:
        if h.evidence_key in merged:  # the same chunk again (another leg / scope): merge, keep first
            first = merged[h.evidence_key]
            first.hit_reasons = sorted({*first.hit_reasons, *h.hit_reasons})
            first.breadcrumb = first.breadcrumb or h.breadcrumb
            continue
        merged[h.evidence_key] = Evidence(
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
            original_rank=h.original_rank,
            hit_reasons=list(h.hit_reasons),
        )
    per_doc: dict[tuple[str, str], int] = {}
    evidence: list[Evidence] = []
    for ev in merged.values():
        if ev.quality_score < cfg.reference_threshold:
            continue  # not usable evidence (it still counted for the level above)
        key = (ev.kb_scope, ev.doc_id)
        if per_doc.get(key, 0) >= cfg.max_chunks_per_document:
            continue
        per_doc[key] = per_doc.get(key, 0) + 1
        evidence.append(ev)
        if len(evidence) >= cfg.return_n:
            break
    low = not evidence or top is None or top < cfg.reference_threshold
    return Processed(
        ranked=ranked, evidence=evidence, top_quality=top, relevance_level=level, low_quality=low
    )
