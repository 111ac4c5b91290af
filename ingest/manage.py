"""Inspect and remove what is indexed: list documents, delete a scope, forget a vanished root.

Reindex only removes a document whose file it sees gone from a root it was given; a root that
no longer exists, or a scope nobody wants, needs an explicit removal. Each removal holds the
scope's reindex lock (it never interleaves with a run) and can be rerun to finish one that was
interrupted.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from kbflow.core.chunk_store import alias_for
from kbflow.core.errors import InputError
from kbflow.core.sql import DocumentRow, L0EntryRow, L0TermRow, ScopeRow
from kbflow.core.stores import Stores
from kbflow.core.validation import validate_scope
from kbflow.core.vocabulary import forget_documents, forget_scope
from kbflow.ingest.l0_index import delete_l0
from kbflow.ingest.locks import scope_locks
from kbflow.ingest.sources import normalize_root

BATCH = 500  # ids per bound IN list (SQLite caps the number of variables)


class RootStillExists(InputError, ValueError):
    """forget_root was given a root that is still on disk: reindexing it is the right tool."""


@dataclass
class DocInfo:
    doc_id: str  # the document's source as written
    kb_scope: str
    root: str
    path: str  # root/source_path
    chunks: int
    status: str
    last_error: str | None
    indexed_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ScopeRemoval:
    """What removing a scope takes away (dry run) or took away (done)."""

    scope: str
    alias: str | None  # the Milvus alias, when it exists
    collections: list[str] = field(default_factory=list)  # physical collections
    documents: int = 0
    l0_entries: int = 0
    scope_record: bool = False  # the scopes row exists
    done: bool = False

    @property
    def empty(self) -> bool:
        """Nothing at all is stored under this scope."""
        return not (self.alias or self.collections or self.documents or self.l0_entries or self.scope_record)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RootRemoval:
    """One scope's share of a forgotten root."""

    kb_scope: str
    root: str
    documents: int
    chunks: int  # recorded chunk count of those documents
    scope_removed: bool  # the scope had nothing else and is removed entirely
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_documents(stores: Stores, scope: str | None = None, root: str | None = None) -> list[DocInfo]:
    """Every document record, optionally of one scope and/or one root (normalised as reindex
    records it, so `docs/` and `./docs` name the same root)."""
    # the columns shown, never the frontmatter kept with the record (a record written before
    # frontmatter was bounded may hold megabytes of it)
    stmt = select(
        DocumentRow.doc_id, DocumentRow.kb_scope, DocumentRow.root, DocumentRow.source_path,
        DocumentRow.chunk_count, DocumentRow.status, DocumentRow.last_error, DocumentRow.indexed_at,
    ).order_by(DocumentRow.kb_scope, DocumentRow.root, DocumentRow.source_path)
    if scope is not None:
        stmt = stmt.where(DocumentRow.kb_scope == validate_scope(scope))
    if root is not None:
        stmt = stmt.where(DocumentRow.root == normalize_root(root))
    with stores.sql.session() as session:
        rows = session.execute(stmt).all()
    return [
        DocInfo(
            doc_id=r.doc_id,
            kb_scope=r.kb_scope,
            root=r.root,
            path=os.path.join(r.root, r.source_path),
            chunks=r.chunk_count,
            status=r.status,
            last_error=r.last_error,
            indexed_at=r.indexed_at.isoformat(timespec="seconds") if r.indexed_at else None,
        )
        for r in rows
    ]


def _alias(stores: Stores, session: Session, scope: str) -> str:
    row = session.get(ScopeRow, scope)
    return row.alias if row is not None else alias_for(stores.settings.collection_prefix, scope)


def _count(session: Session, model: Any, *where: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(model).where(*where)) or 0)


def _plan_scope(stores: Stores, scope: str) -> ScopeRemoval:
    store = stores.chunks
    with stores.sql.session() as session:
        alias = _alias(stores, session, scope)
        plan = ScopeRemoval(
            scope=scope,
            alias=None,
            documents=_count(session, DocumentRow, DocumentRow.kb_scope == scope),
            l0_entries=_count(session, L0EntryRow, L0EntryRow.kb_scope == scope),
            scope_record=session.get(ScopeRow, scope) is not None,
        )
    target = store.alias_target(alias)
    plan.alias = alias if target is not None else None
    plan.collections = sorted(
        name for name in store.collections() if name == target or name.startswith(alias + "__")
    )
    return plan


def _remove_scope(stores: Stores, plan: ScopeRemoval) -> None:
    """SQL first, so lookups stop seeing the scope, then its Milvus alias and collections.
    Calibrations are kept: they belong to (model, scope) and still fit a scope reindexed later."""
    scope = plan.scope
    with stores.sql.session() as session, session.begin():
        session.execute(delete(L0TermRow).where(L0TermRow.kb_scope == scope))
        session.execute(delete(L0EntryRow).where(L0EntryRow.kb_scope == scope))
        forget_scope(session, scope)
        session.execute(delete(DocumentRow).where(DocumentRow.kb_scope == scope))
        session.execute(delete(ScopeRow).where(ScopeRow.kb_scope == scope))
    if plan.alias is not None:
        stores.chunks.drop_alias(plan.alias)
    existing = set(stores.chunks.collections())
    for name in plan.collections:
        if name in existing:
            stores.chunks.drop_collection(name)
    plan.done = True


def _locked(stores: Stores, scope: str, wait_seconds: float, held: bool) -> AbstractContextManager[Any]:
    return nullcontext() if held else scope_locks(stores.sql, [scope], wait_seconds)


def delete_scope(
    stores: Stores, scope: str, *, dry_run: bool, wait_seconds: float = 0.0, already_locked: bool = False
) -> ScopeRemoval:
    """Remove a scope entirely: its Milvus alias and physical collections (the alias target and
    any `<alias>__*` leftovers), its L0 entries and terms, its document records and its scope
    record. Calibrations are kept (they are per model and scope, and are not derived from the
    indexed content). Holds the scope's lock (unless the caller already does); `dry_run` only
    counts. Reindexing the scope later starts it afresh."""
    validate_scope(scope)
    if dry_run:
        return _plan_scope(stores, scope)
    with _locked(stores, scope, wait_seconds, already_locked):
        plan = _plan_scope(stores, scope)
        if not plan.empty:
            _remove_scope(stores, plan)
    return plan


def drop_if_empty(stores: Stores, scope: str, *, already_locked: bool = False) -> bool:
    """Remove a scope that has no document left (all its files were deleted), so it is not
    listed forever; True when it was removed. Pass `already_locked` from inside a reindex run."""
    validate_scope(scope)
    with _locked(stores, scope, 0.0, already_locked):
        with stores.sql.session() as session:
            if _count(session, DocumentRow, DocumentRow.kb_scope == scope):
                return False
        plan = _plan_scope(stores, scope)
        if plan.empty:
            return False
        _remove_scope(stores, plan)
    return True


def _root_shares(stores: Stores, root: str) -> list[RootRemoval]:
    """Per scope: the documents recorded under `root`, and whether they are all the scope has."""
    with stores.sql.session() as session:
        shares = session.execute(
            select(DocumentRow.kb_scope, func.count(), func.sum(DocumentRow.chunk_count))
            .where(DocumentRow.root == root)
            .group_by(DocumentRow.kb_scope)
            .order_by(DocumentRow.kb_scope)
        ).all()
        totals = {scope: _count(session, DocumentRow, DocumentRow.kb_scope == scope) for scope, *_ in shares}
    return [
        RootRemoval(scope, root, int(n), int(chunks or 0), scope_removed=totals[scope] == n)
        for scope, n, chunks in shares
    ]


def _forget_in_scope(stores: Stores, share: RootRemoval) -> None:
    """Milvus chunks first, then L0 and records (a failure in between is redone by a rerun)."""
    scope, root = share.kb_scope, share.root
    with stores.sql.session() as session:
        docs = session.execute(
            select(DocumentRow.doc_id, DocumentRow.chunk_count).where(
                DocumentRow.kb_scope == scope, DocumentRow.root == root
            )
        ).all()
        alias = _alias(stores, session, scope)
    doc_ids = [d for d, _ in docs]
    target = stores.chunks.alias_target(alias)
    if target is not None and doc_ids:
        stores.chunks.delete_docs(alias, scope, doc_ids)
        stores.chunks.flush(target)
    with stores.sql.session() as session, session.begin():
        for i in range(0, len(doc_ids), BATCH):
            batch = doc_ids[i : i + BATCH]
            delete_l0(session, scope, batch)
            forget_documents(session, scope, batch)
            session.execute(
                delete(DocumentRow).where(
                    DocumentRow.kb_scope == scope, DocumentRow.root == root, DocumentRow.doc_id.in_(batch)
                )
            )
    share.documents, share.chunks = len(doc_ids), sum(n or 0 for _, n in docs)
    share.scope_removed = drop_if_empty(stores, scope, already_locked=True)
    share.done = True


def forget_root(
    stores: Stores, root: str, *, dry_run: bool = False, wait_seconds: float = 0.0, force: bool = False
) -> list[RootRemoval]:
    """Remove everything indexed from a root that no longer exists, one scope at a time under
    its lock; a scope left without documents is removed entirely. A root still on disk is
    refused unless `force` (it is no longer indexed from there): reindexing it removes exactly
    the files that are gone."""
    norm = normalize_root(root)
    if os.path.exists(norm) and not force:
        raise RootStillExists(
            f"root {norm} exists; reindex it instead, or delete the files and reindex "
            "(forget is for a root that is gone; --force forgets a folder that is no longer "
            "indexed from although it still exists)"
        )
    shares = _root_shares(stores, norm)
    if dry_run:
        return shares
    for share in shares:
        with scope_locks(stores.sql, [share.kb_scope], wait_seconds):
            _forget_in_scope(stores, share)
    return shares
