"""Apply a scope's plan to the stores, document by document (incremental mode).

Writes are bracketed by record status: `writing` before the store is touched, `indexed` after,
so a rerun after a crash redoes exactly the interrupted documents and converges. A changed
document has exactly its chunks replaced; a removed one loses its chunks, L0 entry and record.
A scope with no collection yet, or built under another analysis, is rebuilt instead (`rebuild`).
"""

from __future__ import annotations

from kbflow.core.analysis import LexicalConfig
from kbflow.core.chunk_store import SOURCE_MAX_BYTES, alias_for
from kbflow.core.embedder import EmbedStats
from kbflow.core.models import ModelChoice
from kbflow.core.sql import ScopeRow, utcnow
from kbflow.core.stores import Stores
from kbflow.core.timing import stage
from kbflow.ingest.parsing import ParsedDocument
from kbflow.ingest.planning import ScopePlan
from kbflow.ingest.rebuild import rebuild
from kbflow.ingest.records import finish_records, mark_writing, upsert_scope_row
from kbflow.ingest.scope_config import check_scope_config, lexical_config, pipeline_hash
from kbflow.ingest.sources import Failure
from kbflow.ingest.summary import ScopeSummary, count_plan
from kbflow.ingest.vocabulary import backfill
from kbflow.ingest.writing import Encoder, Progress, Written, stream_write


def apply_plan(
    stores: Stores,
    plan: ScopePlan,
    *,
    full: bool,
    progress: Progress | None = None,
    encoder: Encoder | None = None,
) -> tuple[ScopeSummary, list[Failure]]:
    """Apply a copy of the plan, so a retried apply starts from the same plan (the scope lock
    keeps the records as planned). Returns the scope's summary and what failed."""
    plan = plan.copy()
    apply = rebuild if full else apply_incremental
    summary = apply(stores, plan, progress, encoder)
    summary.warnings += [{"path": f"<scope {plan.kb_scope}>", "reason": n} for n in plan.notes]
    return summary, plan.failures


def apply_incremental(
    stores: Stores, plan: ScopePlan, progress: Progress | None = None, encoder: Encoder | None = None
) -> ScopeSummary:
    s, store, scope = stores.settings, stores.chunks, plan.kb_scope
    alias = alias_for(s.collection_prefix, scope)
    target = store.alias_target(alias)
    model = plan.model or ModelChoice(s.embedding_model, s.embedding_backend)
    model_id = model.model_id
    with stores.sql.session() as session:
        scope_row = session.get(ScopeRow, scope)
    if target is None or scope_row is None:
        if not plan.docs and not plan.existing:
            return ScopeSummary(kb_scope=scope, collection=alias)
        return rebuild(stores, plan, progress, encoder)  # no collection yet (or it was lost)
    # the model loads (for its dimension) only when something is to be embedded
    dim = stores.embedder_for(model).dim if plan.to_write else scope_row.dim
    check_scope_config(s, scope, scope_row, model_id, dim)
    # a no-change run asks Milvus nothing about the collection: Milvus Lite loads a collection
    # (O(corpus)) on the first call that names it. A killed rebuild's half-built collection
    # (never served) and a narrow old `source` field are dealt with by the next change.
    changing = bool(plan.to_write or plan.stale)
    if changing:
        store.drop_unaliased(alias, target)
    lexical = lexical_config(s, scope_row.analyzer)
    narrow = changing and store.source_capacity(target) < SOURCE_MAX_BYTES
    if scope_row.analysis != lexical.version or narrow:
        # built under another analysis, or before free-text sources: a rebuild is the only way
        # to change that; the embedding cache means nothing is embedded again
        return rebuild(stores, plan, progress, encoder)
    summary = ScopeSummary(
        kb_scope=scope, collection=alias, analyzer=scope_row.analyzer, physical_collection=target
    )
    p_hash, stats = pipeline_hash(s, model_id), EmbedStats()
    if changing:
        with stage("store_load"):
            store.load(alias)
    written = _write(stores, plan, alias, lexical, stats, summary.warnings, p_hash, progress, encoder, model)
    plan.refuse(written.refused)
    summary.chunks_embedded, summary.cache_hits = stats.embedded, stats.cache_hits
    summary.chunks_written = written.chunks
    with stage("store_delete_flush"):
        _delete_leftovers(stores, plan, alias, written.n_chunks)
        if written.docs or plan.stale:
            store.flush(target)
    with stage("sql_records"), stores.sql.session() as session, session.begin():
        finish_records(session, plan, written, p_hash)
        if scope_row.physical_collection != target:
            upsert_scope_row(
                session, scope, alias, target, scope_row.analyzer, model_id, scope_row.dim, lexical.version
            )
        elif changing:
            session.get(ScopeRow, scope).updated_at = utcnow()  # `status` shows when it last changed
    backfill(stores, scope, target)  # a scope indexed before kbflow counted its vocabulary
    count_plan(summary, plan)
    return summary


def _write(
    stores: Stores,
    plan: ScopePlan,
    alias: str,
    lexical: LexicalConfig,
    stats: EmbedStats,
    warnings: list[dict[str, str]],
    p_hash: str,
    progress: Progress | None,
    encoder: Encoder | None,
    model: ModelChoice,
) -> Written:
    """The changed documents streamed into the served collection; each batch's records are
    `writing` before the store sees it."""
    if not plan.to_write:
        return Written()

    def before_write(docs: list[ParsedDocument], n_chunks: dict[str, int]) -> None:
        with stores.sql.session() as session, session.begin():
            mark_writing(session, plan, docs, n_chunks, p_hash)

    return stream_write(
        stores,
        alias,
        plan.to_write,
        lexical,
        stats,
        warnings,
        model=model,
        progress=progress,
        encoder=encoder,
        before_write=before_write,
    )


def _delete_leftovers(stores: Stores, plan: ScopePlan, alias: str, n_chunks: dict[str, int]) -> None:
    """Chunks of a longer (or interrupted) earlier version, and every chunk of removed documents."""
    store, scope = stores.chunks, plan.kb_scope
    for doc in plan.to_write:
        old, n = plan.existing.get(doc.doc_id), n_chunks.get(doc.doc_id)
        if n is not None and old is not None and (old.status == "writing" or old.chunk_count > n):
            store.delete_chunks_from(alias, scope, doc.doc_id, n)
    if plan.stale:
        store.delete_docs(alias, scope, [r.doc_id for r in plan.stale])
