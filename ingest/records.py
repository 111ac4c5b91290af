"""The `documents` record table around a write: `writing` before the store is touched, `indexed`
after, so a rerun after a crash redoes exactly the interrupted documents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session

from kbflow.core.sql import DocumentRow, ScopeRow, utcnow
from kbflow.core.vocabulary import forget_documents
from kbflow.ingest.l0_index import delete_l0, write_l0_many
from kbflow.ingest.parsing import ParsedDocument
from kbflow.ingest.planning import Record, ScopePlan
from kbflow.ingest.writing import Written

_BATCH = 500  # records replaced per statement: few round trips, bounded memory


def record_values(doc: ParsedDocument, n_chunks: int, p_hash: str, status: str) -> dict[str, Any]:
    """A document's record as column values (one shape for the ORM and for bulk inserts)."""
    now = utcnow()
    return {
        "kb_scope": doc.kb_scope,
        "doc_id": doc.doc_id,
        "root": doc.root,
        "source_path": doc.rel_path,
        "title": doc.title,
        "breadcrumb": doc.breadcrumb_text,
        "content_hash": doc.content_hash,
        "pipeline_hash": p_hash,
        "chunk_count": n_chunks,
        "status": status,
        "doc_id_derived": doc.doc_id_derived,
        "extra_metadata": doc.extra,
        "last_error": None,
        "created_at": now,
        "updated_at": now,
        "indexed_at": now if status == "indexed" else None,
        "file_stat": doc.file_stat if status == "indexed" else None,
        "language": doc.language,
    }


def new_record(doc: ParsedDocument, n_chunks: int, p_hash: str, status: str) -> DocumentRow:
    return DocumentRow(**record_values(doc, n_chunks, p_hash, status))


def mark_writing(
    session: Session, plan: ScopePlan, docs: Sequence[ParsedDocument], n_chunks: dict[str, int], p_hash: str
) -> None:
    """Before a batch reaches the store: each of its documents is `writing`, and its chunk count
    covers both versions, so a crash leaves a record of what to clean up."""
    for doc in docs:
        row = session.get(DocumentRow, (plan.kb_scope, doc.doc_id)) if doc.doc_id in plan.existing else None
        if row is None:
            row = session.merge(new_record(doc, n_chunks[doc.doc_id], p_hash, "writing"))
        row.status, row.file_stat = "writing", None
        row.chunk_count = max(row.chunk_count, n_chunks[doc.doc_id])


def finish_records(session: Session, plan: ScopePlan, written: Written, p_hash: str) -> None:
    """After the store is written: written documents `indexed` (with their L0 entry), moved ones
    re-rooted, removed ones deleted, protected ones `error` with the reason."""
    for start in range(0, len(written.docs), _BATCH):
        part = written.docs[start : start + _BATCH]
        ids = [d.doc_id for d in part]
        rows = [record_values(d, written.n_chunks[d.doc_id], p_hash, "indexed") for d in part]
        for row in rows:
            old = plan.existing.get(row["doc_id"])
            if old is not None:
                row["created_at"] = old.created_at
        # replaced in bulk: one delete and one multi-row insert per batch, not a merge per row
        session.execute(
            delete(DocumentRow).where(DocumentRow.kb_scope == plan.kb_scope, DocumentRow.doc_id.in_(ids))
        )
        session.execute(insert(DocumentRow), rows)
        write_l0_many(session, plan.kb_scope, [written.l0[i] for i in ids])
    rewritten = set(written.n_chunks)
    for doc in plan.unchanged:
        if doc.doc_id not in rewritten:
            _settle_unchanged(session, plan.existing[doc.doc_id], doc)
    gone = [r.doc_id for r in plan.stale] + plan.abandoned
    if gone:
        session.execute(
            delete(DocumentRow).where(DocumentRow.kb_scope == plan.kb_scope, DocumentRow.doc_id.in_(gone))
        )
        delete_l0(session, plan.kb_scope, gone)
        forget_documents(session, plan.kb_scope, gone)
    for row, reason in plan.protected:
        session.execute(
            update(DocumentRow)
            .where(DocumentRow.kb_scope == row.kb_scope, DocumentRow.doc_id == row.doc_id)
            .values(status="error", last_error=reason)
        )


def _settle_unchanged(session: Session, old: Record, doc: ParsedDocument) -> None:
    """An unchanged document's record: re-rooted and `indexed` again if need be, and its file's
    stat kept up to date (so the next run need not read it). Only rows that differ are written."""
    values: dict[str, object] = {}
    if old.status != "indexed" or old.root != doc.root:
        values.update(status="indexed", last_error=None, root=doc.root)
    if old.file_stat != doc.file_stat or old.language != doc.language:
        values.update(file_stat=doc.file_stat, language=doc.language)
    if values:
        session.execute(
            update(DocumentRow)
            .where(DocumentRow.kb_scope == old.kb_scope, DocumentRow.doc_id == old.doc_id)
            .values(**values)
        )


def upsert_scope_row(
    session: Session,
    scope: str,
    alias: str,
    physical: str,
    analyzer: str,
    model_id: str,
    dim: int,
    analysis: str | None,
) -> None:
    row = session.get(ScopeRow, scope)
    if row is None:
        row = ScopeRow(kb_scope=scope)
        session.add(row)
    else:
        row.updated_at = utcnow()
    row.alias, row.physical_collection, row.analyzer = alias, physical, analyzer
    row.model_id, row.dim, row.analysis = model_id, dim, analysis
