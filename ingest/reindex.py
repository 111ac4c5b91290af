"""`reindex()`: one entry point with two modes, backed by the `documents` record table.

incremental: a document whose content hash and pipeline fingerprint match its record costs
    nothing; a changed one has exactly its chunks replaced; a document gone from its root is
    removed from Milvus, L0 and SQL. Writes are bracketed by the record's status
    (`writing` before Milvus, `indexed` after), so a rerun after a crash redoes exactly the
    interrupted documents and converges.
full: builds a new physical collection for the scope, copies in what this run does not own
    (other roots, files that failed this time), moves the alias, then drops the old one.

A file that fails keeps its last good version indexed (status `error`, reason recorded).
Planning (what each document needs, the delete guards) is in `ingest.planning`; building rows
that fit the store and writing them document by document is in `ingest.writing`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kbflow.core import milvus_store as ms
from kbflow.core.analysis import LexicalConfig
from kbflow.core.embedder import EmbedStats, model_id_for
from kbflow.core.errors import InputError
from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, ReindexRunRow, ScopeRow, utcnow
from kbflow.core.stores import Stores, keep_home_backend, open_stores
from kbflow.core.validation import validate_scope
from kbflow.ingest.chunking import CHUNKER_VERSION, Chunk, chunk_markdown
from kbflow.ingest.l0_index import build_l0_entry, delete_l0, write_l0
from kbflow.ingest.locks import ScopeLocks, scope_locks
from kbflow.ingest.manage import drop_if_empty
from kbflow.ingest.parsing import ParsedDocument
from kbflow.ingest.planning import ScopePlan, plan_scope
from kbflow.ingest.sources import Failure, ScanResult, resolve_roots, scan_roots
from kbflow.ingest.writing import chunk_rows, relex, write_documents

Progress = Callable[[str, int, int], None]  # (stage, done, total)
ScopeRunner = Callable[..., "tuple[ScopeSummary, list[Failure]]"]
Encoder = Callable[[list[str]], Any]  # texts -> normalized vectors (an alternative to the local model)


class ScopeConfigMismatch(InputError, RuntimeError):
    """The scope was built with another model or analyzer; only --full may change that."""


@dataclass
class ScopeSummary:
    kb_scope: str
    collection: str = ""
    physical_collection: str = ""
    analyzer: str = ""
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    cache_hits: int = 0
    chunks_copied: int = 0
    documents: int = 0
    removed_docs: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)


@dataclass
class ReindexSummary:
    mode: str
    roots: list[str]
    kb_scope: str | None
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    removed_docs: list[dict[str, str]] = field(default_factory=list)
    skipped_other_scope: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    cache_hits: int = 0
    chunks_copied: int = 0
    seconds: float = 0.0
    scopes: dict[str, ScopeSummary] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def add_scope(self, s: ScopeSummary) -> None:
        self.scopes[s.kb_scope] = s
        for name in (
            "added",
            "updated",
            "unchanged",
            "removed",
            "chunks_written",
            "chunks_embedded",
            "cache_hits",
            "chunks_copied",
        ):
            setattr(self, name, getattr(self, name) + getattr(s, name))
        self.removed_docs.extend(s.removed_docs)
        self.warnings.extend(s.warnings)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        d["seconds"] = round(self.seconds, 3)
        return d


def pipeline_hash(settings: Settings) -> str:
    """Fingerprint of everything besides the file that shapes stored chunks."""
    key = f"{CHUNKER_VERSION}|{settings.chunk_max_chars}|{settings.chunk_overlap_chars}|" + model_id_for(
        settings.embedding_model, settings.embedding_backend
    )
    key += "|" + LexicalConfig(settings.lexical_analysis, settings.lexical_fields).version
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def choose_analyzer(
    settings: Settings, scope: str, docs: Sequence[ParsedDocument], current: str | None = None
) -> str:
    """Per-scope setting first; else jieba when the scope's documents are Chinese; else the
    analyzer the scope already has (a rebuild from one of its roots keeps it) unless one was
    set (--analyzer, KBFLOW_ANALYZER); else the default."""
    if scope in settings.scope_analyzers:
        return settings.scope_analyzers[scope]
    if docs and any(d.language.startswith("zh") for d in docs):
        return "jieba"
    if "analyzer" in settings.model_fields_set:
        return settings.analyzer
    return current or settings.analyzer


def lexical_config(settings: Settings, analyzer: str) -> LexicalConfig:
    """kbflow analyses English text itself; jieba scopes leave tokenizing to Milvus."""
    mode = settings.lexical_analysis if analyzer == "standard" else "lowercase"
    return LexicalConfig(mode, settings.lexical_fields)


# ---------------------------------------------------------------------------------------------
# writing


def _record(doc: ParsedDocument, n_chunks: int, p_hash: str, status: str) -> DocumentRow:
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


def _embed_docs(
    stores: Stores,
    docs: Sequence[ParsedDocument],
    summary: ScopeSummary,
    progress: Progress | None,
    encoder: Encoder | None = None,
) -> tuple[dict[str, list[Chunk]], dict[str, Any]]:
    s = stores.settings
    chunks = {d.doc_id: chunk_markdown(d.body, s.chunk_max_chars, s.chunk_overlap_chars) for d in docs}
    texts = [c.text for d in docs for c in chunks[d.doc_id]]
    stats = EmbedStats()
    total, done = len(texts), 0

    def on_batch(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress("embed", done, total)

    vectors = stores.embedding_cache.embed(texts, stats, on_batch, encoder) if texts else []
    summary.chunks_embedded += stats.embedded
    summary.cache_hits += stats.cache_hits
    by_doc, i = {}, 0
    for d in docs:
        n = len(chunks[d.doc_id])
        by_doc[d.doc_id] = vectors[i : i + n]
        i += n
    return chunks, by_doc


def _build_rows(
    plan: ScopePlan,
    docs: Sequence[ParsedDocument],
    chunks: dict[str, list[Chunk]],
    vectors: dict[str, Any],
    lexical: LexicalConfig,
    summary: ScopeSummary,
) -> dict[str, list[dict[str, Any]]]:
    by_doc = {}
    for d in docs:
        by_doc[d.doc_id], cuts = chunk_rows(d, chunks[d.doc_id], vectors[d.doc_id], lexical)
        summary.warnings.extend({"path": str(d.path), "reason": w} for w in cuts)
    return by_doc


def _drop_refused(plan: ScopePlan, refused: dict[str, str]) -> None:
    """Documents the store refused fail alone: reported with their path, last good version kept."""
    if not refused:
        return
    for doc in [d for d in plan.docs if d.doc_id in refused]:
        plan.failures.append(Failure(str(doc.path), refused[doc.doc_id]))
        old = plan.existing.get(doc.doc_id)
        if old is not None:
            plan.protected.append((old, refused[doc.doc_id]))
        else:
            plan.abandoned.append(doc.doc_id)
    plan.docs = [d for d in plan.docs if d.doc_id not in refused]
    plan.to_write = [d for d in plan.to_write if d.doc_id not in refused]


def _upsert_scope_row(
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
        session.add(
            ScopeRow(
                kb_scope=scope,
                alias=alias,
                physical_collection=physical,
                analyzer=analyzer,
                model_id=model_id,
                dim=dim,
                analysis=analysis,
            )
        )
    else:
        row.alias, row.physical_collection, row.analyzer = alias, physical, analyzer
        row.model_id, row.dim, row.updated_at = model_id, dim, utcnow()
        row.analysis = analysis


def _finish_records(
    session: Session,
    plan: ScopePlan,
    written: Sequence[ParsedDocument],
    chunks: dict[str, list[Chunk]],
    p_hash: str,
) -> None:
    for doc in written:
        row = _record(doc, len(chunks[doc.doc_id]), p_hash, "indexed")
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


def _check_scope_config(s: Settings, scope: str, scope_row: ScopeRow, model_id: str) -> None:
    if scope_row.model_id != model_id:
        raise ScopeConfigMismatch(
            f"scope '{scope}' was indexed with model '{scope_row.model_id}' but this run uses "
            f"'{model_id}'; rerun with --full to rebuild the scope"
        )
    wanted = s.scope_analyzers.get(scope)
    if wanted and wanted != scope_row.analyzer:
        raise ScopeConfigMismatch(
            f"scope '{scope}' uses analyzer '{scope_row.analyzer}' but '{wanted}' is configured; "
            "rerun with --full to rebuild the scope"
        )


def apply_incremental(
    stores: Stores, plan: ScopePlan, progress: Progress | None = None, encoder: Encoder | None = None
) -> ScopeSummary:
    s, client, scope = stores.settings, stores.milvus, plan.kb_scope
    alias = ms.alias_for(s.collection_prefix, scope)
    summary = ScopeSummary(kb_scope=scope, collection=alias)
    target = ms.alias_target(client, alias)
    model_id = model_id_for(s.embedding_model, s.embedding_backend)
    with stores.sql.session() as session:
        scope_row = session.get(ScopeRow, scope)
    if target is None or scope_row is None:
        if not plan.docs and not plan.existing:
            return summary
        # No collection yet (or it was lost): build the scope from scratch.
        return apply_full(stores, plan, progress, encoder)
    _check_scope_config(s, scope, scope_row, model_id)
    ms.drop_unaliased(client, alias, target)  # a killed rebuild's half-built collection: never served
    lexical = lexical_config(s, scope_row.analyzer)
    if scope_row.analysis != lexical.version or ms.source_capacity(client, target) < ms.SOURCE_MAX_BYTES:
        # built under another analysis, or before free-text sources: a rebuild is the only way
        # to change that; the embedding cache means nothing is embedded again
        return apply_full(stores, plan, progress, encoder)
    summary.analyzer, summary.physical_collection = scope_row.analyzer, target
    client.load_collection(alias)
    p_hash = pipeline_hash(s)

    chunks, vectors = _embed_docs(stores, plan.to_write, summary, progress, encoder)
    if plan.to_write:
        with stores.sql.session() as session, session.begin():
            for doc in plan.to_write:
                old = plan.existing.get(doc.doc_id)
                row = (
                    session.merge(old)
                    if old is not None
                    else session.merge(_record(doc, len(chunks[doc.doc_id]), p_hash, "writing"))
                )
                row.status = "writing"
                row.chunk_count = max(row.chunk_count, len(chunks[doc.doc_id]))
    rows = _build_rows(plan, plan.to_write, chunks, vectors, lexical, summary)
    _drop_refused(plan, write_documents(client, alias, rows, progress))
    summary.chunks_written = sum(len(rows[d.doc_id]) for d in plan.to_write)
    for doc in plan.to_write:
        old = plan.existing.get(doc.doc_id)
        n = len(chunks[doc.doc_id])
        if old is not None and (old.status == "writing" or old.chunk_count > n):
            ms.delete_chunks_from(client, alias, scope, doc.doc_id, n)
    if plan.stale:
        ms.delete_docs(client, alias, scope, [r.doc_id for r in plan.stale])
    if rows or plan.stale:
        client.flush(target)
    with stores.sql.session() as session, session.begin():
        _finish_records(session, plan, plan.to_write, chunks, p_hash)
        if scope_row.physical_collection != target:
            _upsert_scope_row(
                session, scope, alias, target, scope_row.analyzer, model_id, scope_row.dim, lexical.version
            )
        elif plan.to_write or plan.stale:
            session.get(ScopeRow, scope).updated_at = utcnow()  # `status` shows when it last changed
    _count(summary, plan)
    return summary


def apply_full(
    stores: Stores, plan: ScopePlan, progress: Progress | None = None, encoder: Encoder | None = None
) -> ScopeSummary:
    s, client, scope = stores.settings, stores.milvus, plan.kb_scope
    alias = ms.alias_for(s.collection_prefix, scope)
    with stores.sql.session() as session:
        scope_row = session.get(ScopeRow, scope)
    analyzer = choose_analyzer(s, scope, plan.docs, scope_row.analyzer if scope_row else None)
    lexical = lexical_config(s, analyzer)
    summary = ScopeSummary(kb_scope=scope, collection=alias, analyzer=analyzer)
    old_target = ms.alias_target(client, alias)
    ms.drop_unaliased(client, alias, old_target)  # leftovers of an interrupted rebuild
    embedder = stores.embedder
    physical = ms.new_physical_name(alias)
    ms.create_collection(client, physical, embedder.dim, analyzer)
    if progress:
        progress("rebuild", 1, 3)  # new collection created, nothing served from it yet
    try:
        chunks, vectors = _embed_docs(stores, plan.docs, summary, progress, encoder)
        rows = _build_rows(plan, plan.docs, chunks, vectors, lexical, summary)
        _drop_refused(plan, write_documents(client, physical, rows, progress))
        summary.chunks_written = sum(len(rows[d.doc_id]) for d in plan.docs)
        carried = [r.doc_id for r in plan.keep] + [r.doc_id for r, _ in plan.protected]
        if carried and old_target is not None:
            client.load_collection(old_target)  # a collection not searched since a restart is released
            copied = relex(ms.read_doc_rows(client, old_target, scope, carried), lexical)
            ms.upsert_rows(client, physical, copied)
            summary.chunks_copied = len(copied)
        client.flush(physical)
        client.load_collection(physical)
    except BaseException:
        client.drop_collection(physical)  # the alias never pointed here: nothing served is lost
        raise
    ms.point_alias(client, alias, physical)
    if progress:
        progress("rebuild", 2, 3)  # the alias serves the new collection
    p_hash = pipeline_hash(s)
    with stores.sql.session() as session, session.begin():
        _finish_records(session, plan, plan.docs, chunks, p_hash)
        _upsert_scope_row(
            session, scope, alias, physical, analyzer, embedder.model_id, embedder.dim, lexical.version
        )
    ms.drop_unaliased(client, alias, physical)
    if progress:
        progress("rebuild", 3, 3)  # the old collection is dropped
    summary.physical_collection = physical
    _count(summary, plan, full=True)
    return summary


def _count(summary: ScopeSummary, plan: ScopePlan, full: bool = False) -> None:
    written = plan.docs if full else plan.to_write
    changed = {d.doc_id for d in plan.to_write}  # by id: comparing whole documents is O(n²)
    # a record left by a run that never got the document indexed (interrupted, then unreadable)
    # is still a new document
    served = {k for k, r in plan.existing.items() if r.indexed_at is not None}
    summary.added = sum(1 for d in written if d.doc_id not in served)
    summary.updated = sum(1 for d in written if d.doc_id in served and d.doc_id in changed)
    summary.unchanged = len(plan.unchanged)
    summary.removed = len(plan.stale)
    summary.removed_docs = [
        {"kb_scope": plan.kb_scope, "doc_id": r.doc_id, "path": str(Path(r.root) / r.source_path)}
        for r in plan.stale
    ]
    summary.documents = len(plan.docs) + len(plan.keep) + len(plan.protected)


# ---------------------------------------------------------------------------------------------
# entry point


def scan(roots: Sequence[str | Path], settings: Settings, stores: Stores, scope: str | None) -> ScanResult:
    resolved = resolve_roots(roots)
    with stores.sql.session() as session:
        rows = session.execute(select(DocumentRow.kb_scope, DocumentRow.doc_id, DocumentRow.source_path))
        known = {(r.kb_scope, r.doc_id): r.source_path for r in rows}
    return scan_roots(
        resolved,
        default_scope=settings.default_scope,
        only_scope=scope,
        max_file_bytes=settings.max_file_bytes,
        known_paths=known,
    )


def scopes_to_visit(stores: Stores, scan_result: ScanResult, scope: str | None) -> list[str]:
    """Scopes with documents in this run, plus scopes with records under these roots (their
    documents may all be gone)."""
    if scope:
        return [scope]
    with stores.sql.session() as session:
        recorded = session.scalars(
            select(DocumentRow.kb_scope).where(DocumentRow.root.in_(scan_result.roots)).distinct()
        ).all()
    return sorted(scan_result.scopes() | set(recorded))


def index_scope(
    stores: Stores,
    scope: str,
    scan_result: ScanResult,
    *,
    full: bool,
    progress: Progress | None = None,
    encoder: Encoder | None = None,
) -> tuple[ScopeSummary, list[Failure]]:
    """Plan and apply one scope; safe to retry (planning reads the record table afresh)."""
    with stores.sql.session() as session:
        plan = plan_scope(
            session, scope, scan_result, stores.settings, scan_result.roots, pipeline_hash(stores.settings)
        )
    apply = apply_full if full else apply_incremental
    return apply(stores, plan, progress, encoder), plan.failures


def record_run(stores: Stores, summary: ReindexSummary, started: float) -> None:
    with stores.sql.session() as session, session.begin():
        session.add(
            ReindexRunRow(
                started_at=datetime.fromtimestamp(started, UTC),
                finished_at=utcnow(),
                mode=summary.mode,
                roots=summary.roots,
                kb_scope=summary.kb_scope,
                ok=summary.ok,
                summary=summary.to_dict(),
            )
        )


def reindex(
    roots: Sequence[str | Path],
    *,
    scope: str | None = None,
    full: bool = False,
    settings: Settings | None = None,
    stores: Stores | None = None,
    progress: Progress | None = None,
    scope_runner: ScopeRunner | None = None,
    wait_seconds: float = 0.0,
    allow_mass_delete: bool = False,
) -> ReindexSummary:
    """Index Markdown under `roots`. Never raises for a bad document: see `summary.failed`.

    `scope_runner` replaces the direct call of `index_scope` (the Prefect flow passes a task
    with retries); it must have the same signature."""
    started = time.time()
    if scope is not None:
        validate_scope(scope)
    stores = keep_home_backend(stores or open_stores(settings or Settings()))
    settings = stores.settings
    scan_result = scan(roots, settings, stores, scope)
    scan_result.allow_mass_delete = allow_mass_delete
    summary = ReindexSummary(mode="full" if full else "incremental", roots=scan_result.roots, kb_scope=scope)
    summary.skipped_other_scope = scan_result.skipped_other_scope
    failures = list(scan_result.failures)
    scopes = scopes_to_visit(stores, scan_result, scope)
    with scope_locks(stores.sql, scopes, wait_seconds) as locks:
        _index_scopes(
            stores,
            scopes,
            scan_result,
            full,
            _with_heartbeat(progress, locks),
            scope_runner,
            summary,
            failures,
        )
    summary.failed = [f.to_dict() for f in failures]
    summary.warnings = [w.to_dict() for w in scan_result.warnings] + summary.warnings
    summary.seconds = time.time() - started
    record_run(stores, summary, started)
    return summary


def _with_heartbeat(progress: Progress | None, locks: ScopeLocks, every: float = 30.0) -> Progress:
    last = time.monotonic()

    def report(stage: str, done: int, total: int) -> None:
        nonlocal last
        if time.monotonic() - last > every:
            locks.heartbeat()
            last = time.monotonic()
        if progress:
            progress(stage, done, total)

    return report


def _index_scopes(
    stores: Stores,
    scopes: Sequence[str],
    scan_result: ScanResult,
    full: bool,
    progress: Progress,
    scope_runner: ScopeRunner | None,
    summary: ReindexSummary,
    failures: list[Failure],
) -> None:
    for sc in scopes:
        try:
            scope_summary, scope_failures = (scope_runner or index_scope)(
                stores, sc, scan_result, full=full, progress=progress
            )
        except ScopeConfigMismatch as exc:
            failures.append(Failure(f"<scope {sc}>", str(exc)))
            continue
        except Exception as exc:  # a store error: report it, keep the other scopes going
            failures.append(
                Failure(f"<scope {sc}>", f"store error (a rerun converges): {type(exc).__name__}: {exc}")
            )
            continue
        summary.add_scope(scope_summary)
        failures.extend(scope_failures)
        if scope_summary.documents == 0 and drop_if_empty(stores, sc, already_locked=True):
            scope_summary.collection = scope_summary.physical_collection = ""  # nothing left to serve
