"""`reindex()`: scan the roots, then per scope plan and apply; one entry point, two modes.

incremental: a document whose content hash and pipeline fingerprint match its record costs
    nothing; a changed one has exactly its chunks replaced; a document gone from its root is
    removed from the chunk store, L0 and SQL (`apply`).
full: builds a new physical collection for the scope, copies in what this run does not own
    (other roots, files that failed this time), moves the alias, then drops the old one (`rebuild`).

A file that fails keeps its last good version indexed (status `error`, reason recorded). The
stages are public (`start`, `plan`, `apply_plan`, `settle`, `finish`) so the Prefect flow runs
each as a task of its own; `reindex` chains them in-process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, ReindexRunRow, ScopeRow, utcnow
from kbflow.core.stores import Stores, keep_home_backend, open_stores
from kbflow.core.timing import current_clock, no_cycle_collection, stage, stage_clock
from kbflow.core.validation import validate_scope
from kbflow.ingest.apply import apply_plan
from kbflow.ingest.locks import ScopeLocks, scope_locks
from kbflow.ingest.manage import drop_if_empty
from kbflow.ingest.planning import ScopePlan, plan_scope, read_records
from kbflow.ingest.scope_config import (
    ScopeConfigMismatch,
    choose_analyzer,
    choose_model,
    lexical_config,
    pipeline_hash,
    scope_model,
)
from kbflow.ingest.sources import Failure, KnownFile, ScanResult, resolve_roots, scan_roots
from kbflow.ingest.summary import ReindexSummary, ScopeSummary
from kbflow.ingest.writing import Progress

__all__ = [
    "ReindexRun", "ReindexSummary", "ScopeConfigMismatch", "ScopeSummary", "apply_plan", "choose_analyzer",
    "finish", "lexical_config", "locked", "pipeline_hash", "plan", "reindex", "settle", "start",
]


@dataclass
class ReindexRun:
    """One run's state between its stages: what was scanned, the scopes to visit, the summary."""

    stores: Stores
    scan: ScanResult
    scopes: list[str]
    summary: ReindexSummary
    failures: list[Failure]
    full: bool
    started: float


def start(
    roots: Sequence[str | Path],
    *,
    scope: str | None = None,
    full: bool = False,
    settings: Settings | None = None,
    stores: Stores | None = None,
    allow_mass_delete: bool = False,
) -> ReindexRun:
    """Scan the roots (nothing is written) and name the scopes this run visits."""
    started = time.time()
    if scope is not None:
        validate_scope(scope)
    with stage("open_stores"):
        stores = keep_home_backend(stores or open_stores(settings or Settings()))
    with stage("scan"), no_cycle_collection():
        scan = _scan(roots, stores, scope, trust_stat=not full and stores.settings.trust_file_stat)
    scan.allow_mass_delete = allow_mass_delete
    summary = ReindexSummary(mode="full" if full else "incremental", roots=scan.roots, kb_scope=scope)
    summary.skipped_other_scope = scan.skipped_other_scope
    scopes = _scopes_to_visit(stores, scan, scope)
    check_models(stores, scan, scopes)
    return ReindexRun(stores, scan, scopes, summary, list(scan.failures), full, started)


def _scan(roots: Sequence[str | Path], stores: Stores, scope: str | None, trust_stat: bool) -> ScanResult:
    """Scan with the records at hand: which file owns each id today and, when the stat is
    trusted, what each indexed file was (a file whose stat is unchanged is not read)."""
    d = DocumentRow
    columns = [d.kb_scope, d.doc_id, d.root, d.source_path]
    if trust_stat:
        columns += [d.doc_id_derived, d.title, d.breadcrumb, d.language, d.content_hash, d.file_stat]
        columns += [d.status, d.extra_metadata]
    known: dict[tuple[str, str], str] = {}
    files: dict[tuple[str, str], KnownFile | None] = {}
    with stores.sql.session() as session:  # Core rows, not the ORM: every record is read
        for r in session.connection().execute(select(*columns)):
            known[(r.kb_scope, r.doc_id)] = r.source_path
            if trust_stat and r.file_stat and r.language and r.status == "indexed":
                key = (r.root, r.source_path)  # two records for one file: read it
                files[key] = None if key in files else _known_file(r)
    s = stores.settings
    return scan_roots(
        resolve_roots(roots),
        default_scope=s.default_scope,
        only_scope=scope,
        max_file_bytes=s.max_file_bytes,
        known_paths=known,
        known_files={k: v for k, v in files.items() if v is not None},
        keep_bodies=False,
    )


def _known_file(r: Any) -> KnownFile:
    return KnownFile(
        r.kb_scope,
        r.doc_id,
        r.doc_id_derived,
        r.title,
        r.breadcrumb,
        r.language,
        r.content_hash,
        r.file_stat,
        r.extra_metadata or {},
    )


def _scopes_to_visit(stores: Stores, scan: ScanResult, scope: str | None) -> list[str]:
    """Scopes with documents in this run, plus scopes with records under these roots (their
    documents may all be gone)."""
    if scope:
        return [scope]
    with stores.sql.session() as session:
        recorded = session.scalars(
            select(DocumentRow.kb_scope).where(DocumentRow.root.in_(scan.roots)).distinct()
        ).all()
    return sorted(scan.scopes() | set(recorded))


def plan(stores: Stores, scope: str, scan: ScanResult, full: bool = False) -> ScopePlan:
    """The scope's plan against its records, read afresh (so a retry sees what is stored), with
    the model the scope is built with in this run (`scope_model`)."""
    with stage("plan"), no_cycle_collection():
        return _plan(stores, scope, scan, full)


def _plan(stores: Stores, scope: str, scan: ScanResult, full: bool) -> ScopePlan:
    with stores.sql.session() as session:
        records = read_records(session, scope)
        row = session.get(ScopeRow, scope)
    docs = [d for d in scan.documents if d.kb_scope == scope]
    model, note = scope_model(stores.settings, scope, docs, row.model_id if row else None, full)
    p = plan_scope(records, scope, scan, stores.settings, pipeline_hash(stores.settings, model.model_id))
    p.model = model
    p.notes += [note] if note else []
    return p


def check_models(stores: Stores, scan: ScanResult, scopes: Sequence[str]) -> None:
    """Every scope's model is known and installed, before any lock is taken or anything is
    written: a bad model setting fails the run at once (exit 2), with nothing changed."""
    s = stores.settings
    for sc in scopes:
        choose_model(s, sc, [d for d in scan.documents if d.kb_scope == sc])


def settle(run: ReindexRun, scope: str, outcome: tuple[ScopeSummary, list[Failure]] | Exception) -> None:
    """Record a scope's outcome. A store error fails the scope, never the run: the other scopes
    go on and a rerun converges."""
    if isinstance(outcome, ScopeConfigMismatch):
        run.failures.append(Failure(f"<scope {scope}>", str(outcome)))
        return
    if isinstance(outcome, Exception):
        reason = f"store error (a rerun converges): {type(outcome).__name__}: {outcome}"
        run.failures.append(Failure(f"<scope {scope}>", reason))
        return
    scope_summary, failures = outcome
    run.summary.add_scope(scope_summary)
    run.failures.extend(failures)
    if scope_summary.documents == 0 and drop_if_empty(run.stores, scope, already_locked=True):
        scope_summary.collection = scope_summary.physical_collection = ""  # nothing left to serve


def finish(run: ReindexRun) -> ReindexSummary:
    """Close the summary and record the run."""
    summary = run.summary
    summary.failed = [f.to_dict() for f in run.failures]
    summary.warnings = [w.to_dict() for w in run.scan.warnings] + summary.warnings
    summary.seconds = time.time() - run.started
    clock = current_clock()
    summary.stage_seconds = clock.rounded() if clock else {}
    with run.stores.sql.session() as session, session.begin():
        session.add(
            ReindexRunRow(
                started_at=datetime.fromtimestamp(run.started, UTC),
                finished_at=utcnow(),
                mode=summary.mode,
                roots=summary.roots,
                kb_scope=summary.kb_scope,
                ok=summary.ok,
                summary=summary.to_dict(),
            )
        )
    return summary


@contextmanager
def locked(run: ReindexRun, progress: Progress | None, wait_seconds: float = 0.0) -> Iterator[Progress]:
    """Hold the run's scope locks; yields a progress callback that also keeps them alive."""
    with scope_locks(run.stores.sql, run.scopes, wait_seconds) as locks:
        yield _with_heartbeat(progress, locks)


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


def reindex(
    roots: Sequence[str | Path],
    *,
    scope: str | None = None,
    full: bool = False,
    settings: Settings | None = None,
    stores: Stores | None = None,
    progress: Progress | None = None,
    wait_seconds: float = 0.0,
    allow_mass_delete: bool = False,
) -> ReindexSummary:
    """Index Markdown under `roots`. Never raises for a bad document: see `summary.failed`;
    `summary.stage_seconds` says where the time went."""
    with stage_clock():
        run = start(
            roots, scope=scope, full=full, settings=settings, stores=stores,
            allow_mass_delete=allow_mass_delete,
        )
        _apply_all(run, progress, wait_seconds)
        return finish(run)


def _apply_all(run: ReindexRun, progress: Progress | None, wait_seconds: float) -> None:
    with locked(run, progress, wait_seconds) as report:
        for sc in run.scopes:
            try:
                outcome: tuple[ScopeSummary, list[Failure]] | Exception = apply_plan(
                    run.stores, plan(run.stores, sc, run.scan, run.full), full=run.full, progress=report
                )
            except Exception as exc:  # a store error: reported, the other scopes go on
                outcome = exc
            settle(run, sc, outcome)
