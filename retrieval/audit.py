"""Audit: every lookup is recorded in SQL before its result is returned.

Besides the full result, a row carries what the owner's view (`kbflow gaps`, the report) reads
without parsing it: who asked, the outcome, the latency, what came nearest and, for weak and
no-evidence lookups, the query's embedding. `audit_store_queries` says how much of the question
is kept: `full` (the text), `hashed` (a sha256 and the embedding, no text) or `none`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import delete, select

from kbflow.core.sql import LookupAuditRow, SqlStore
from kbflow.retrieval.contracts import LookupResult

log = logging.getLogger("kbflow.audit")


def outcome(result: LookupResult) -> str:
    """found (usable evidence at a relevance level), weak (only weak evidence) or none."""
    if not result.found:
        return "none"
    return "found" if result.relevance_level else "weak"


def query_hash(query: str) -> str:
    return hashlib.sha256(" ".join(query.split()).encode("utf-8")).hexdigest()


def _redacted(result: LookupResult) -> dict[str, Any]:
    """The result without the question: what was found, the gate's decision, the timings."""
    trace = result.retrieval_trace
    return {
        "found": result.found,
        "relevanceLevel": result.relevance_level,
        "evidence": [
            {"evidenceKey": e.evidence_key, "docId": e.doc_id, "quality": e.quality_score, "weak": e.weak}
            for e in result.evidence
        ],
        "retrievalTrace": {
            "selectedAttempt": trace.selected_attempt,
            "fallbackReason": trace.fallback_reason,
            "timingsMs": trace.timings_ms,
            "gate": _gate_without_words(result),
        },
    }


def _gate_without_words(result: LookupResult) -> dict[str, Any] | None:
    """The gate's trace less the question's words the evidence lacks (they are the question's)."""
    gate = result.retrieval_trace.gate
    return {k: v for k, v in gate.to_json().items() if k != "uncovered"} if gate else None


def audit_row(
    result: LookupResult,
    *,
    caller: str | None = None,
    vectors: Mapping[str, np.ndarray] | None = None,
    store_queries: str = "full",
) -> LookupAuditRow:
    """The row for one lookup, keeping of the question only what `store_queries` allows."""
    trace = result.retrieval_trace
    kind = outcome(result)
    keep_text = store_queries == "full"
    attempts = [a.to_json() for a in trace.attempts]
    if not keep_text:
        attempts = [{k: v for k, v in a.items() if k != "queryUsed"} for a in attempts]
    vector, model = None, None
    if vectors and kind != "found" and store_queries != "none":
        model = sorted(vectors)[0]  # a lookup over scopes of several models keeps the first
        vector = np.asarray(vectors[model], dtype=np.float16).tobytes()
    gate = trace.gate
    return LookupAuditRow(
        query=result.query if keep_text else "",
        kb_scope=result.kb_scope,
        mode=result.mode,
        attempts=attempts,
        selected_attempt=trace.selected_attempt,
        fallback_reason=trace.fallback_reason,
        evidence_keys=[e.evidence_key for e in result.evidence],
        relevance_level=result.relevance_level,
        found=result.found,
        timings_ms=trace.timings_ms,
        result=result.to_json() if keep_text else _redacted(result),
        caller=(caller or "python")[:64],
        outcome=kind,
        total_ms=trace.timings_ms.get("total"),
        top_key=gate.top_evidence_key[:600] if gate and gate.top_evidence_key else None,
        top_quality=gate.top_quality if gate else None,
        query_hash=None if store_queries == "none" else query_hash(result.query),
        query_vector=vector,
        vector_model=model,
    )


def write_audit(
    sql: SqlStore,
    result: LookupResult,
    *,
    caller: str | None = None,
    vectors: Mapping[str, np.ndarray] | None = None,
    store_queries: str = "full",
) -> LookupResult:
    """Return the result with `auditId` set, or with `auditError` set when the write failed.
    The answer is never lost to an audit failure, and the failure is never silent."""
    try:
        with sql.session() as s, s.begin():
            row = audit_row(result, caller=caller, vectors=vectors, store_queries=store_queries)
            s.add(row)
            s.flush()
            audit_id = row.id
    except Exception as exc:  # any store failure: loud, visible, answer kept
        log.error("lookup audit write failed: %s: %s", type(exc).__name__, exc)
        return result.model_copy(update={"audit_error": f"{type(exc).__name__}: {exc}"})
    return result.model_copy(update={"audit_id": audit_id})


def purge_audit(sql: SqlStore, older_than: datetime, batch: int = 1000) -> int:
    """Delete audit rows created before `older_than`, oldest first, `batch` rows per
    transaction: each batch commits whole or not at all, and a lookup writing its audit row
    meanwhile waits for one short batch, never for the whole purge. Returns the rows deleted."""
    table = LookupAuditRow.__table__
    deleted = 0
    while True:
        with sql.session() as s, s.begin():
            ids = s.scalars(
                select(LookupAuditRow.id)
                .where(LookupAuditRow.created_at < older_than)
                .order_by(LookupAuditRow.id)
                .limit(batch)
            ).all()
            if not ids:
                return deleted
            s.execute(delete(table).where(table.c.id.in_(ids)))
        deleted += len(ids)


def purge_expired(sql: SqlStore, retention_days: int, now: datetime | None = None) -> int:
    """The retention rule: rows older than `retention_days` go; 0 keeps everything."""
    if retention_days <= 0:
        return 0
    return purge_audit(sql, (now or datetime.now(UTC)) - timedelta(days=retention_days))
