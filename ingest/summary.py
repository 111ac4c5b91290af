"""What a reindex did, per scope and for the run: one `Counts` type carries the counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbflow.ingest.planning import ScopePlan


@dataclass(kw_only=True)
class Counts:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    cache_hits: int = 0
    chunks_copied: int = 0

    def add(self, other: Counts) -> None:
        for f in fields(Counts):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(kw_only=True)
class ScopeSummary(Counts):
    kb_scope: str
    collection: str = ""
    physical_collection: str = ""
    analyzer: str = ""
    documents: int = 0
    removed_docs: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)


@dataclass(kw_only=True)
class ReindexSummary(Counts):
    mode: str
    roots: list[str]
    kb_scope: str | None
    failed: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    removed_docs: list[dict[str, str]] = field(default_factory=list)
    skipped_other_scope: int = 0
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)  # where the time went
    scopes: dict[str, ScopeSummary] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def add_scope(self, s: ScopeSummary) -> None:
        self.scopes[s.kb_scope] = s
        self.add(s)
        self.removed_docs.extend(s.removed_docs)
        self.warnings.extend(s.warnings)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        d["seconds"] = round(self.seconds, 3)
        return d


def count_plan(summary: ScopeSummary, plan: ScopePlan, full: bool = False) -> None:
    """Fill the scope's counts from the plan as applied."""
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
