"""What the audit says about the documents: which the fallback had to rescue a lookup to reach
(the L0 hint that misled), which were never returned, which are returned most."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import or_, select

from kbflow.core.evidence_keys import source_of
from kbflow.core.sql import DocumentRow, L0EntryRow, LookupAuditRow, SqlStore

RETRY = "UNFILTERED_VECTOR_RETRY"  # the fallback's attempt: the L0-filtered one came back weak


def rescued_lookups(sql: SqlStore, scope: str | None, since: datetime, limit: int = 500) -> list[dict]:
    """Lookups the fallback really rescued: the L0-filtered attempt came back weak, and the retry
    found evidence at REFERENCE or better in a document outside the hinted category. (A retry that
    found only weak evidence rescued nothing; on a scope of one category the hint cannot mislead.)
    Newest first."""
    stmt = (
        select(
            LookupAuditRow.query,
            LookupAuditRow.kb_scope,
            LookupAuditRow.attempts,
            LookupAuditRow.evidence_keys,
            LookupAuditRow.created_at,
            LookupAuditRow.caller,
        )
        .where(
            LookupAuditRow.created_at >= since,
            LookupAuditRow.selected_attempt == RETRY,
            LookupAuditRow.found.is_(True),
            LookupAuditRow.relevance_level.is_not(None),
            or_(LookupAuditRow.caller.is_(None), LookupAuditRow.caller != "eval"),
        )
        .order_by(LookupAuditRow.id.desc())
    )
    if scope:
        stmt = stmt.where(LookupAuditRow.kb_scope == scope)
    out = []
    with sql.session() as s:
        for row in s.execute(stmt):
            hinted = (row.attempts[0] if row.attempts else {}).get("categoryFilter")
            found = source_of(row.evidence_keys[0]) if row.evidence_keys else None
            if found is None or _category(s, row.kb_scope, found) == hinted:
                continue
            at = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
            out.append(
                {
                    "query": row.query,
                    "misleading_category": hinted,
                    "found": found,
                    "at": at.isoformat(timespec="seconds"),
                    "caller": row.caller or "python",
                }
            )
            if len(out) >= limit:
                break
    return out


def _category(session: Any, scope: str | None, doc_id: str) -> str | None:
    """The L0 category of a document (of any scope when the lookup spanned several)."""
    stmt = select(L0EntryRow.category).where(L0EntryRow.doc_id == doc_id)
    if scope:
        stmt = stmt.where(L0EntryRow.kb_scope == scope)
    return session.scalars(stmt.limit(1)).first()


def document_usage(
    sql: SqlStore, scope: str | None, returned: Counter, top: int = 10
) -> tuple[list[str], list[tuple[str, int]]]:
    """(documents of the scope never returned in the window, the most returned with counts).
    `returned` counts (lookup scope or None, doc id); a lookup over every scope counts for a
    document of that id in any scope."""
    stmt = select(DocumentRow.kb_scope, DocumentRow.doc_id).where(DocumentRow.status == "indexed")
    if scope:
        stmt = stmt.where(DocumentRow.kb_scope == scope)
    any_scope = Counter()
    for (lookup_scope, doc), n in returned.items():
        if lookup_scope is None:
            any_scope[doc] += n
    with sql.session() as s:
        docs = [
            (r.kb_scope, r.doc_id) for r in s.execute(stmt.order_by(DocumentRow.kb_scope, DocumentRow.doc_id))
        ]
    uses = {(sc, d): returned.get((sc, d), 0) + any_scope.get(d, 0) for sc, d in docs}
    never = [f"{sc}:{d}" for (sc, d), n in uses.items() if n == 0]
    most = sorted(((f"{sc}:{d}", n) for (sc, d), n in uses.items() if n), key=lambda x: (-x[1], x[0]))
    return never, most[:top]
