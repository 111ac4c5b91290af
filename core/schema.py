"""SQL schema versions through Alembic (core/migrations): upgrades keep existing data.

A new, empty database is created at the latest revision on first use. A database at an older
revision is refused with the fix (`kbflow db upgrade`), never silently altered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

from kbflow.core.errors import StoreError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# the newest migration's revision: every command checks the database against it, and importing
# Alembic to find it would cost each of them a fifth of a second (tests check it is Alembic's head)
HEAD_REVISION = "0008"


class SchemaOutdated(StoreError, RuntimeError):
    """The database predates this kbflow; `kbflow db upgrade` migrates it in place."""


def _config(connection: Any = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """Alembic's head, read from the migration scripts (`HEAD_REVISION` is what commands use)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision, as Alembic records it (its `alembic_version` table)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


INITIAL_TABLES = {
    "scopes",
    "documents",
    "l0_entries",
    "l0_terms",
    "embedding_cache",
    "reindex_runs",
    "scope_locks",
    "lookup_audit",
}


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Migrate in place. A database created before migrations existed (same tables as 0001,
    no version) is stamped 0001 first."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    with engine.begin() as conn:
        cfg = _config(conn)
        if MigrationContext.configure(conn).get_current_revision() is None:
            tables = set(inspect(conn).get_table_names())
            if tables and tables >= INITIAL_TABLES:
                command.stamp(cfg, "0001")
            elif tables:
                raise SchemaOutdated(
                    f"unversioned database lacks tables {sorted(INITIAL_TABLES - tables)}: it predates "
                    "kbflow's schema; move it away and reindex"
                )
        command.upgrade(cfg, revision)
    return current_revision(engine)


def ensure_schema(engine: Engine) -> None:
    rev = current_revision(engine)
    if rev is None and not inspect(engine).get_table_names():
        upgrade(engine)
        return
    head = HEAD_REVISION
    if rev != head:
        where = engine.url.render_as_string(hide_password=True)
        raise SchemaOutdated(
            f"database {where} is at schema revision {rev or 'none'}, this kbflow needs {head}: "
            "run `kbflow db upgrade` (it migrates in place and keeps the data)"
        )
