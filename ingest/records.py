"""The `documents` record table around a write: `writing` before the store is touched, `indexed`
after, so a rerun after a crash redoes exactly the interrupted documents."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete
from sqlalchemy.orm import Session

from kbflow.core.sql import DocumentRow, ScopeRow, utcnow
from kbflow.ingest.chunking import Chunk
from kbflow.ingest.l0_index import build_l0_entry, delete_l0, write_l0
from kbflow.ingest.parsing import ParsedDocument
from kbflow.ingest.planning import ScopePlan


def new_record(doc: ParsedDocument, n_chunks: int, p_hash: str, status: str) -> DocumentRow:
    return DocumentRow(
        kb_scope=doc.kb_scope,
        doc_id=doc.doc_id,
        root=doc.root,
        source_path=doc.rel_path,
        title=doc.title,
        breadcrumb=doc.breadcrumb_text,
        content_hash=doc.content_hash,
        pipeline_hash=p_hash,
        chunk_count=n_chunks,
        status=status,
        doc_id_derived=doc.doc_id_derived,
        extra_metadata=doc.extra,
        last_error=None,
        indexed_at=utcnow() if status == "indexed" else None,
    )


def mark_writing(session: Session, plan: ScopePlan, chunks: dict[str, list[Chunk]], p_hash: str) -> None:
    """Before the store is written: every document about to change is `writing`, and its chunk
    count covers both versions, so a crash leaves a record of what to clean up."""
    for doc in plan.to_write:
        old = plan.existing.get(doc.doc_id)
        row = (
            session.merge(old)
            if old is not None
            else session.merge(new_record(doc, len(chunks[doc.doc_id]), p_hash, "writing"))
        )
        row.status = "writing"
        row.chunk_count = max(row.chunk_count, len(chunks[doc.doc_id]))


def finish_records(
    session: Session,
    plan: ScopePlan,
    written: Sequence[ParsedDocument],
    chunks: dict[str, list[Chunk]],
    p_hash: str,
) -> None:
    """After the store is written: written documents `indexed` (with their L0 entry), moved ones
    re-rooted, removed ones deleted, protected ones `error` with the reason."""
    for doc in written:
        row = new_record(doc, len(chunks[doc.doc_id]), p_hash, "indexed")
        old = plan.existing.get(doc.doc_id)
        if old is not None:
            row.created_at = old.created_at
        session.merge(row)
        write_l0(session, build_l0_entry(doc, chunks[doc.doc_id]))
    rewritten = {d.doc_id for d in written}
    for doc in plan.unchanged:
        old = plan.existing[doc.doc_id]
        if doc.doc_id not in rewritten and (old.status != "indexed" or old.root != doc.root):
            moved = session.merge(old)
            moved.status, moved.last_error, moved.root = "indexed", None, doc.root
    gone = [r.doc_id for r in plan.stale] + plan.abandoned
    if gone:
        session.execute(
            delete(DocumentRow).where(DocumentRow.kb_scope == plan.kb_scope, DocumentRow.doc_id.in_(gone))
        )
        delete_l0(session, plan.kb_scope, gone)
    for row, reason in plan.protected:
        merged = session.merge(row)
        merged.status, merged.last_error = "error", reason


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
