"""`kbflow db upgrade|current`: the SQL schema's Alembic migrations."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kbflow.flows.cli.options import add_store_flags


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "db",
        help="SQL schema migrations (Alembic)",
        description="`kbflow db upgrade` migrates the SQL database (SQLite or PostgreSQL, from "
        "KBFLOW_DATABASE_URL) to this version's schema in place, keeping its data; `kbflow db current` "
        "prints the revision it is at.",
    )
    p.add_argument(
        "action",
        choices=["upgrade", "current"],
        help="upgrade: migrate to --revision; current: print the revision the database is at",
    )
    p.add_argument("--revision", default="head", help="target revision for upgrade (default head)")
    add_store_flags(p)
    p.set_defaults(func=run)


def revisions(action: str, revision: str, settings: Any) -> dict[str, Any]:
    """Upgrade (from, to) or report (current, head), for the database the settings name."""
    from kbflow.core.schema import current_revision, head_revision, upgrade
    from kbflow.core.sql import SqlStore

    settings.ensure_home()
    sql = SqlStore(settings.resolved_database_url, migrate=False)
    try:
        database = sql.engine.url.render_as_string(hide_password=True)
        before = current_revision(sql.engine)
        if action == "upgrade":
            return {"database": database, "from": before, "to": upgrade(sql.engine, revision)}
        return {"database": database, "current": before, "head": head_revision()}
    finally:
        sql.dispose()


def run(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.cli.views import fields_line

    out = revisions(args.action, args.revision, settings)
    print(json.dumps(out) if args.json else fields_line(out))
    return 0
