"""Decide what each document of a scope needs, against the `documents` record table.

A document is identified by (scope, source), never by its path: a file or a whole root that
moved keeps its record (the path is updated, nothing is embedded again). Deletions are guarded:
a document this scan could not look at is kept, a root that now holds nothing keeps its
documents, and a scan that would remove more than `max_delete_fraction` of a scope removes
nothing unless `allow_mass_delete` is set.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kbflow.core.models import ModelChoice
from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow
from kbflow.ingest.parsing import DocumentError, ParsedDocument, parse_document, read_text
from kbflow.ingest.sources import Failure, ScanResult

RECORD_COLUMNS = (
    "kb_scope", "doc_id", "root", "source_path", "content_hash", "pipeline_hash", "chunk_count",
    "status", "created_at", "indexed_at", "file_stat", "language",
)
# A record as the plan holds it: a read-only row with RECORD_COLUMNS as attributes (`read_records`;
# a DocumentRow has them too). Never written back: the writer loads what it writes.
Record = Any


@dataclass
class ScopePlan:
    kb_scope: str
    docs: list[ParsedDocument]  # every good document of this run in the scope
    existing: dict[str, Record]  # record rows of the scope, by doc_id (= source)
    to_write: list[ParsedDocument]  # new or changed (or interrupted, or moved to a new path)
    unchanged: list[ParsedDocument]  # nothing to write (their record may still move root)
    stale: list[Record]  # gone from the source: removed by this run
    protected: list[tuple[Record, str]]  # failed or unseen this run: last good kept
    keep: list[Record]  # not owned by this run (other roots), left as is
    failures: list[Failure] = field(default_factory=list)  # reported against files or roots
    abandoned: list[str] = field(default_factory=list)  # new documents the store refused
    model: ModelChoice | None = None  # the scope's embedding model for this run (None: the settings')
    notes: list[str] = field(default_factory=list)  # told in the summary's warnings

    def copy(self) -> ScopePlan:
        """A plan to apply: applying edits its lists, and a retried apply starts from the plan."""
        return replace(
            self,
            docs=list(self.docs), to_write=list(self.to_write), unchanged=list(self.unchanged),
            stale=list(self.stale), protected=list(self.protected), keep=list(self.keep),
            failures=list(self.failures), abandoned=list(self.abandoned),
        )

    def refuse(self, refused: dict[str, str]) -> None:
        """Documents the store refused fail alone: reported with their path, last good version kept."""
        for doc in [d for d in self.docs if d.doc_id in refused]:
            self.failures.append(Failure(str(doc.path), refused[doc.doc_id]))
            old = self.existing.get(doc.doc_id)
            if old is not None:
                self.protected.append((old, refused[doc.doc_id]))
            else:
                self.abandoned.append(doc.doc_id)
        self.docs = [d for d in self.docs if d.doc_id not in refused]
        self.to_write = [d for d in self.to_write if d.doc_id not in refused]




def read_records(session: Session, scope: str) -> list[Record]:
    """The scope's record rows: what `plan_scope` diffs the scan against. Plain read-only rows
    with the record's attributes, not ORM objects: a no-change run reads every record, and an
    ORM object costs ten times as much (0.65 s of a 100k-chunk no-change run)."""
    d = DocumentRow.__table__.c
    query = select(*(d[c] for c in RECORD_COLUMNS)).where(d.kb_scope == scope)
    return list(session.connection().execute(query).all())


def plan_scope(
    records: Sequence[Record],
    scope: str,
    scan: ScanResult,
    settings: Settings,
    p_hash: str,
) -> ScopePlan:
    """The diff of the scan against the scope's records; no store is read or written. Only to
    tell a move from a deletion or a conflict is the filesystem asked about recorded files and
    roots: do they still exist, and which source does a recorded file still claim.
    `plan.failures` holds what it refused (a source claimed by two files, a deletion the guards
    stopped)."""
    rows, roots = records, scan.roots
    existing = {r.doc_id: r for r in rows}
    failures: list[Failure] = []
    docs, to_write, unchanged = [], [], []
    moved: dict[tuple[str, str], int] = {}  # (recorded root, root now) -> documents
    for doc in (d for d in scan.documents if d.kb_scope == scope):
        row = existing.get(doc.doc_id)
        if row is not None and row.root != doc.root and _claimed_elsewhere(row, doc):
            failures.append(
                Failure(
                    str(doc.path),
                    f"source '{doc.doc_id}' in scope '{scope}' is also claimed by "
                    f"{Path(row.root) / row.source_path}, which is indexed; two files cannot "
                    "share a source: change the source of one of them (or, if nothing is "
                    f"indexed from {row.root} any more, `kbflow forget {row.root} --force --yes`)",
                )
            )
            continue
        if row is not None and row.root != doc.root:
            moved[(row.root, doc.root)] = moved.get((row.root, doc.root), 0) + 1
        docs.append(doc)
        same = (
            row is not None
            and (row.status == "indexed" or (row.status == "error" and row.indexed_at is not None))
            and row.content_hash == doc.content_hash
            and row.pipeline_hash == p_hash
            and row.source_path == doc.rel_path
        )
        (unchanged if same else to_write).append(doc)
    seen = {d.doc_id for d in docs}
    adopted = _renamed_roots(rows, moved, seen, roots)
    adopted |= _same_directories({r.root for r in rows} - set(roots), roots)
    stale, protected, keep = [], [], []
    for row in rows:
        if row.doc_id in seen:
            continue
        under = [row.root] if row.root in roots or row.root not in adopted else list(roots)
        if any(scan.could_not_see(r, row.source_path) for r in under):
            protected.append((row, _unseen_reason(scan, row)))
        elif row.root in roots or row.root in adopted:
            stale.append(row)
        else:
            keep.append(row)
    plan = ScopePlan(scope, docs, existing, to_write, unchanged, stale, protected, keep, failures)
    plan.notes += move_notes(moved)
    guard_deletions(plan, scan, settings)
    return plan


def move_notes(moved: dict[tuple[str, str], int]) -> list[str]:
    """A line per root that documents moved from: a renamed root, or a folder indexed again as
    a root of its own (inside or around the one it was indexed under)."""
    notes = []
    for (old, new), n in sorted(moved.items()):
        docs = f"{n} document{'' if n == 1 else 's'}"
        if not os.path.exists(old):
            notes.append(f"{docs} moved from root {old} (gone: renamed?) to root {new}")
        else:
            notes.append(
                f"{docs} moved from root {old} to root {new}: they are now recorded under {new}; "
                f"reindexing {old} moves them back"
            )
    return notes


def _renamed_roots(
    rows: Sequence[Record], moved: dict[tuple[str, str], int], seen: set[str], roots: Sequence[str]
) -> set[str]:
    """Recorded roots that no longer exist and whose documents turned up under this run's roots:
    renamed (or a link re-pointed), so what did not turn up was deleted. At least as many must
    have turned up as not, so one document moved out of a briefly missing root adopts nothing."""
    moved_from: dict[str, int] = {}  # recorded root -> documents of it found under this run's roots
    for (old, _new), n in moved.items():
        moved_from[old] = moved_from.get(old, 0) + n
    out = set()
    for old, found in moved_from.items():
        if old in roots or os.path.exists(old):
            continue
        missing = sum(1 for r in rows if r.root == old and r.doc_id not in seen)
        if found >= missing:
            out.add(old)
    return out


def _same_directories(recorded: set[str], roots: Sequence[str]) -> set[str]:
    """Recorded roots that are one of this run's roots under another spelling (a symlinked
    parent, a record from before roots were kept as given)."""
    out = set()
    for old in recorded:
        try:
            if any(os.path.samefile(old, root) for root in roots):
                out.add(old)
        except OSError:  # gone, or unreadable: not the same directory as far as we can tell
            continue
    return out


def _claimed_elsewhere(row: Record, doc: ParsedDocument) -> bool:
    """True when the recorded file still exists, is another file, and still claims this source
    (then two files claim one id). A moved file, or one whose source changed, is no conflict."""
    old = Path(row.root) / row.source_path
    try:
        if not old.is_file() or os.path.samefile(old, doc.path):
            return False
        text, digest = read_text(old, 50 * 1024 * 1024)
        other, _ = parse_document(
            text, content_hash=digest, rel_path=row.source_path, root=row.root, default_scope=row.kb_scope
        )
    except (OSError, DocumentError):
        return False
    return other.doc_id == doc.doc_id


def _unseen_reason(scan: ScanResult, row: Record) -> str:
    path = str(Path(row.root) / row.source_path)
    reason = next((f.reason for f in scan.failures if f.path == path), None)
    return reason or "a folder or link above this file could not be read this run; last good version kept"


def guard_deletions(plan: ScopePlan, scan: ScanResult, settings: Settings) -> None:
    """Move refused deletions from `stale` to `keep`, recording why in `plan.failures`."""
    if not plan.stale or settings.allow_mass_delete or scan.allow_mass_delete:
        return
    found = {d.root for d in scan.documents}
    empty = sorted({r.root for r in plan.stale if r.root in scan.roots and r.root not in found})
    for root in empty:
        gone = [r for r in plan.stale if r.root == root]
        plan.failures.append(
            Failure(
                root,
                f"no Markdown file found under this root, which had {len(gone)} indexed "
                f"document(s) in scope '{plan.kb_scope}'; nothing was removed (an unmounted or "
                "half-checked-out folder looks like this). If they are really gone, rerun with "
                "--allow-mass-delete",
            )
        )
    held = set(empty)  # roots whose stale documents are kept
    total = len(plan.existing)
    remaining = [r for r in plan.stale if r.root not in held]
    if remaining and total and len(remaining) / total > settings.max_delete_fraction:
        plan.failures.append(
            Failure(
                f"<scope {plan.kb_scope}>",
                f"this run would remove {len(remaining)} of the scope's {total} documents "
                f"(more than max_delete_fraction={settings.max_delete_fraction}); nothing was "
                "removed. Check the roots; if the removal is intended, rerun with --allow-mass-delete",
            )
        )
        held |= {r.root for r in remaining}
    if held:
        plan.keep.extend(r for r in plan.stale if r.root in held)
        plan.stale = [r for r in plan.stale if r.root not in held]
