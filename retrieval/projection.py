"""Agent projection: LookupResult -> RagToolResult, bounded four ways and honest about loss.

Bounds: query chars, excerpt chars, evidence count, total JSON bytes. Dedup identity falls back
evidenceKey (docId#chunkIndex) -> document_id -> position. Every lossy step sets `truncated`; if fitting the
byte budget empties the list, the status is NO_EVIDENCE and the level none (no evidence, no
relevance).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kbflow.core.settings import Settings
from kbflow.retrieval.contracts import NO_EVIDENCE_MESSAGE, LookupResult, RagEvidence, RagToolResult

ELLIPSIS = "..."


@dataclass(frozen=True)
class ProjectionLimits:
    max_query_chars: int = 500
    max_excerpt_chars: int = 1200
    max_evidence: int = 8
    max_bytes: int = 16 * 1024

    @classmethod
    def from_settings(cls, s: Settings) -> ProjectionLimits:
        return cls(s.max_query_chars, s.max_excerpt_chars, s.max_evidence, s.max_projection_bytes)


def _identity(ev: Any, i: int) -> str:
    """evidenceKey (docId#chunkIndex) -> document_id -> position: the first one present."""
    if getattr(ev, "evidence_key", ""):
        return ev.evidence_key
    if getattr(ev, "doc_id", ""):
        return f"doc:{ev.doc_id}"
    return f"legacy:{i}"


def _dedup_key(ev: Any, i: int) -> tuple[str, str]:
    """The same source in two scopes is two documents: dedup within a scope only."""
    return getattr(ev, "kb_scope", "") or "", _identity(ev, i)


def _size(result: RagToolResult) -> int:
    return len(json.dumps(result.to_json(), ensure_ascii=False).encode("utf-8"))


def project_for_agent(result: LookupResult, limits: ProjectionLimits | None = None) -> RagToolResult:
    lim = limits or ProjectionLimits()
    truncated = result.query_truncated
    query = result.query
    if len(query) > lim.max_query_chars:
        query, truncated = query[: lim.max_query_chars], True

    seen: set[tuple[str, str]] = set()
    items: list[RagEvidence] = []
    for i, ev in enumerate(result.evidence):
        key = _identity(ev, i)
        if _dedup_key(ev, i) in seen:
            truncated = True
            continue
        seen.add(_dedup_key(ev, i))
        excerpt = ev.excerpt
        if len(excerpt) > lim.max_excerpt_chars:
            excerpt, truncated = excerpt[: lim.max_excerpt_chars - len(ELLIPSIS)] + ELLIPSIS, True
        items.append(
            RagEvidence(
                evidence_key=key,
                document_id=ev.doc_id,
                kb_scope=getattr(ev, "kb_scope", "") or "",
                source=ev.source,
                breadcrumb=ev.breadcrumb,
                heading_path=ev.heading_path,
                excerpt=excerpt,
                quality_score=ev.quality_score,
                weak=ev.weak,
            )
        )
    if len(items) > lim.max_evidence:
        items, truncated = items[: lim.max_evidence], True

    def build(evidence: list[RagEvidence]) -> RagToolResult:
        found = bool(evidence)
        return RagToolResult(
            query=query,
            evidence=evidence,
            relevance_level=result.relevance_level if found else None,
            evidence_status="FOUND" if found else "NO_EVIDENCE",
            truncated=truncated,
            message=None if found else (result.message or NO_EVIDENCE_MESSAGE),
        )

    out = build(items)
    while items and _size(out) > lim.max_bytes:
        items, truncated = items[:-1], True
        out = build(items)
    return out
