"""Full mode: build a scope's collection anew and move its alias, so lookups never see a
half-built index.

A new physical collection gets this run's documents, plus a copy of what this run does not own
(other roots, files that failed this time, re-analysed under this build's analysis); then the
alias moves and the old collection is dropped. If anything fails before the alias moves, the new
collection is dropped and the served one is untouched. When the scope changes model, what is
copied is embedded again with the new one (through the cache): a collection never mixes models.
"""

from __future__ import annotations

from kbflow.core.analysis import LexicalConfig
from kbflow.core.chunk_store import ChunkRow, alias_for, new_physical_name
from kbflow.core.embedder import EmbedStats
from kbflow.core.models import ModelChoice
from kbflow.core.sql import ScopeRow
from kbflow.core.stores import Stores
from kbflow.core.timing import stage
from kbflow.ingest.planning import ScopePlan
from kbflow.ingest.records import finish_records, upsert_scope_row
from kbflow.ingest.scope_config import choose_analyzer, lexical_config, pipeline_hash
from kbflow.ingest.summary import ScopeSummary, count_plan
from kbflow.ingest.vocabulary import backfill
from kbflow.ingest.writing import Encoder, Progress, embed_texts, relex, stream_write


def rebuild(
    stores: Stores, plan: ScopePlan, progress: Progress | None = None, encoder: Encoder | None = None
) -> ScopeSummary:
    s, store, scope = stores.settings, stores.chunks, plan.kb_scope
    alias = alias_for(s.collection_prefix, scope)
    with stores.sql.session() as session:
        scope_row = session.get(ScopeRow, scope)
    analyzer = choose_analyzer(s, scope, plan.docs, scope_row.analyzer if scope_row else None)
    lexical = lexical_config(s, analyzer)
    summary = ScopeSummary(kb_scope=scope, collection=alias, analyzer=analyzer)
    old_target = store.alias_target(alias)
    store.drop_unaliased(alias, old_target)  # leftovers of an interrupted rebuild
    model = plan.model or ModelChoice(s.embedding_model, s.embedding_backend)
    embedder = stores.embedder_for(model)
    physical = new_physical_name(alias)
    with stage("store_create"):
        store.create_collection(physical, embedder.dim, lexical.tokenizer(analyzer))
    _report(progress, 1, old_target)  # new collection created, nothing served from it yet
    try:
        stats = EmbedStats()
        written = stream_write(
            stores,
            physical,
            plan.docs,
            lexical,
            stats,
            summary.warnings,
            model=model,
            progress=progress,
            encoder=encoder,
        )
        plan.refuse(written.refused)
        summary.chunks_written = written.chunks
        if old_target is not None:
            new_model = scope_row is not None and scope_row.model_id != model.model_id
            with stage("store_copy_kept"):
                summary.chunks_copied = _copy_kept(stores, plan, old_target, physical, lexical, new_model,
                                                   (model, stats, encoder))
        summary.chunks_embedded, summary.cache_hits = stats.embedded, stats.cache_hits
        with stage("store_flush_load"):
            store.flush(physical)
            store.load(physical)
    except BaseException:
        store.drop_collection(physical)  # the alias never pointed here: nothing served is lost
        raise
    with stage("alias_swap"):
        store.point_alias(alias, physical)
    _report(progress, 2, old_target)  # the alias serves the new collection
    with stage("sql_records"), stores.sql.session() as session, session.begin():
        finish_records(session, plan, written, pipeline_hash(s, model.model_id))
        upsert_scope_row(
            session, scope, alias, physical, analyzer, embedder.model_id, embedder.dim, lexical.version
        )
    with stage("alias_swap"):
        store.drop_unaliased(alias, physical)
    _report(progress, 3, old_target)  # the old collection is dropped
    backfill(stores, scope, physical)  # documents copied from a collection built before vocabularies
    summary.physical_collection = physical
    count_plan(summary, plan, full=True)
    return summary


def _copy_kept(
    stores: Stores,
    plan: ScopePlan,
    old: str,
    physical: str,
    lexical: LexicalConfig,
    new_model: bool,
    embedding: tuple[ModelChoice, EmbedStats, Encoder | None],
) -> int:
    """Copy what this run does not own (other roots, files that failed this time) from the old
    collection, re-analysed, and embedded again when the scope changes model. Returns the count."""
    carried = [r.doc_id for r in plan.keep] + [r.doc_id for r, _ in plan.protected]
    if not carried:
        return 0
    store = stores.chunks
    store.load(old)  # a collection not searched since a restart is released
    copied = relex(store.read_docs(old, plan.kb_scope, carried), lexical)
    if new_model:
        _reembed(stores, copied, *embedding)
    store.upsert(physical, copied)
    return len(copied)


def _reembed(
    stores: Stores, rows: list[ChunkRow], model: ModelChoice, stats: EmbedStats, encoder: Encoder | None
) -> None:
    """Rows kept from the old collection, embedded with the scope's new model from their text."""
    vectors = embed_texts(stores, [r.text for r in rows], stats, None, encoder, model) if rows else []
    for row, vector in zip(rows, vectors, strict=True):
        row.dense = [float(x) for x in vector]


def _report(progress: Progress | None, step: int, old_target: str | None) -> None:
    """Three steps: the collection made, served, the old one dropped. A scope's first index
    builds; only one that had a collection rebuilds."""
    if progress:
        progress("rebuild" if old_target else "build", step, 3)
