"""Assemble the delivered `LookupResult` from the selected attempt, the reranked evidence and
the trace of every stage."""

from __future__ import annotations

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


def completeness_hint(evidence: list, level: str | None) -> str:
    if not evidence:
        return "none: no usable evidence"
    if len(evidence) < 2 or level != "PRECISE":
        return "partial: weak or single-source evidence; corroborate with logs and metrics"
    return "sufficient: several precise sources"


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
        completeness_hint=completeness_hint(evidence, level),
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
