"""Count, once, the documents a scope held before kbflow kept its vocabulary.

A home built by an earlier kbflow has documents whose terms were never counted (`kbflow db
upgrade` adds empty tables). The first reindex after that reads those documents' chunks back
from the store and counts them; every later write keeps the counts in step by itself.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import func, select

from kbflow.core.sql import DocumentRow
from kbflow.core.stores import Stores
from kbflow.core.timing import stage
from kbflow.core.vocabulary import count_documents, counted_documents, document_terms, scope_documents_counted

BATCH = 200  # documents read back from the store at a time


def uncounted(stores: Stores, scope: str) -> list[str]:
    """The scope's indexed documents whose terms were never counted (none, normally: one SQL
    count settles it)."""
    with stores.sql.session() as session:
        indexed = session.scalar(
            select(func.count()).where(DocumentRow.kb_scope == scope, DocumentRow.status == "indexed")
        )
        if scope_documents_counted(session, scope) >= (indexed or 0):
            return []
        counted = counted_documents(session, scope)
        docs = session.scalars(
            select(DocumentRow.doc_id).where(DocumentRow.kb_scope == scope, DocumentRow.status == "indexed")
        )
        return sorted(d for d in docs if d not in counted)


def backfill(stores: Stores, scope: str, collection: str) -> int:
    """Count the scope's uncounted documents from their stored chunks; returns how many."""
    missing = uncounted(stores, scope)
    if not missing:
        return 0
    with stage("vocabulary"):
        stores.chunks.load(collection)
        for start in range(0, len(missing), BATCH):
            chunks: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
            for row in stores.chunks.read_docs(collection, scope, missing[start : start + BATCH]):
                chunks[row.source].append((row.title, row.breadcrumb, row.text))
            with stores.sql.session() as session, session.begin():
                count_documents(session, scope, {d: document_terms(c) for d, c in chunks.items()})
    return len(missing)
