"""Audit: every lookup is recorded in SQL before its result is returned."""

from __future__ import annotations

import logging

from kbflow.core.sql import LookupAuditRow, SqlStore
from kbflow.retrieval.contracts import LookupResult

log = logging.getLogger("kbflow.audit")


def write_audit(sql: SqlStore, result: LookupResult) -> LookupResult:
    """Return the result with `auditId` set, or with `auditError` set when the write failed.
    The answer is never lost to an audit failure, and the failure is never silent."""
    trace = result.retrieval_trace
    try:
        with sql.session() as s, s.begin():
            row = LookupAuditRow(
                query=result.query,
                kb_scope=result.kb_scope,
                mode=result.mode,
                attempts=[a.to_json() for a in trace.attempts],
                selected_attempt=trace.selected_attempt,
                fallback_reason=trace.fallback_reason,
                evidence_keys=[e.evidence_key for e in result.evidence],
                relevance_level=result.relevance_level,
                found=result.found,
                timings_ms=trace.timings_ms,
                result=result.to_json(),
            )
            s.add(row)
            s.flush()
            audit_id = row.id
    except Exception as exc:  # any store failure: loud, visible, answer kept
        log.error("lookup audit write failed: %s: %s", type(exc).__name__, exc)
        return result.model_copy(update={"audit_error": f"{type(exc).__name__}: {exc}"})
    return result.model_copy(update={"audit_id": audit_id})
