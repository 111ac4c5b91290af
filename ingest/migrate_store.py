"""Moving a home from Milvus Lite 3.x (a data directory) to the engine kbflow runs now.

The old engine's files cannot be read by the new one, and the old engine is no longer
installed, so the chunks are rebuilt: every scope is reindexed in full from the roots its
documents were indexed from (recorded in SQL), and every chunk's vector comes from the
embedding cache, so nothing is embedded again. The old directory is kept beside, renamed, until
the user removes it: nothing is lost if a root has gone missing since.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, SqlStore
from kbflow.ingest.reindex import Progress, ReindexSummary, reindex


@dataclass
class Migration:
    """What `migrate_store` did: where the old data went, and the rebuild's summary."""

    needed: bool
    kept: Path | None = None
    roots: list[str] = field(default_factory=list)
    missing_roots: list[str] = field(default_factory=list)
    summary: ReindexSummary | None = None

    @property
    def ok(self) -> bool:
        return not self.needed or (self.summary is not None and self.summary.ok and not self.missing_roots)


def recorded_roots(database_url: str) -> list[str]:
    """Every root a document of this home was indexed from, as recorded."""
    sql = SqlStore(database_url)
    try:
        with sql.session() as session:
            return sorted(set(session.scalars(select(DocumentRow.root).distinct())))
    finally:
        sql.dispose()


def old_store(settings: Settings) -> Path | None:
    """The Milvus Lite 3.x data directory of this home, if it has one."""
    path = Path(settings.resolved_milvus_uri)
    return path if settings.uses_milvus_lite and not settings.milvus_uri and path.is_dir() else None


def migrate_store(settings: Settings, progress: Progress | None = None) -> Migration:
    """Rebuild the home's chunks on the current engine; the old directory is renamed, kept."""
    old = old_store(settings)
    if old is None:
        return Migration(needed=False)
    roots = recorded_roots(settings.resolved_database_url)
    kept = old.with_name(old.name + ".lite3")
    n = 1
    while kept.exists():
        n += 1
        kept = old.with_name(f"{old.name}.lite3.{n}")
    old.rename(kept)
    present = [r for r in roots if Path(r).is_dir()]
    missing = [r for r in roots if r not in present]
    summary = reindex(present, full=True, settings=settings, progress=progress) if present else None
    return Migration(True, kept, roots, missing, summary)
