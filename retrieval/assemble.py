"""Assemble the delivered `LookupResult` from the selected attempt, the reranked evidence and
the trace of every stage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kbflow.retrieval.contracts import (
    NO_EVIDENCE_MESSAGE,
    ContextPack,
    L0Navigation,
    LookupResult,
    RerankTrace,
    RetrievalTrace,
)
from kbflow.retrieval.fallback import Selected
from kbflow.retrieval.gate import Calibration
from kbflow.retrieval.postprocess import gate_trace


@dataclass
class Request:
    """The lookup as it was run: the normalized query and what it asked for."""

    query: str
    kb_scope: str | None
    mode: str
    truncated: bool


PRECISE = "PRECISE"


def completeness_hint(evidence: list, level: str | None, cals: Mapping[str, Calibration]) -> str:
    """Whether the delivered evidence is enough to act on, counted piece by piece: "several
    precise sources" only when at least two pieces are themselves PRECISE."""
    if not evidence:
        return "none: no usable evidence"
    n = len(evidence)
    precise = sum(
        not e.weak and e.kb_scope in cals and cals[e.kb_scope].level(e.quality_score, e.confidence) == PRECISE
        for e in evidence
    )
    if level is None:
        return "partial: weak evidence only; corroborate with logs and metrics"
    if precise >= 2:
        return f"sufficient: {precise} of {n} sources precise"
    return f"partial: {precise} of {n} sources precise; corroborate with logs and metrics"


def assemble(
    request: Request,
    selected: Selected,
    evidence: list,
    context: ContextPack,
    nav: L0Navigation,
    cals: dict[str, Calibration],
    timings: dict[str, float],
    rerank_trace: RerankTrace,
) -> LookupResult:
    found = bool(evidence)
    level = selected.processed.relevance_level
    return LookupResult(
        query=request.query,
        kb_scope=request.kb_scope,
        mode=request.mode,
        found=found,
        evidence=evidence,
        candidate_count=len(selected.processed.ranked),
        returned_count=len(evidence),
        relevance_level=level if found else None,
        completeness_hint=completeness_hint(evidence, level if found else None, cals),
        message=None if found else NO_EVIDENCE_MESSAGE,
        query_truncated=request.truncated,
        context=context,
        retrieval_trace=RetrievalTrace(
            l0=nav,
            attempts=selected.attempts,
            selected_attempt=selected.name,
            fallback_reason=selected.fallback_reason,
            timings_ms=timings,
            calibrations={sc: c.label for sc, c in cals.items()},
            gate=gate_trace(selected.processed, cals),
        ),
        rerank_trace=rerank_trace,
    )
