"""What every command shares: the store flags, the settings they make, and how a bad setting
is told. Light imports only: `kbflow lookup` through a running service must start fast."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RAW = argparse.RawDescriptionHelpFormatter
CONFIG_HELP = (
    "read settings from this TOML file instead of ./kbflow.toml (env KBFLOW_CONFIG); "
    "flags and KBFLOW_* variables override it"
)
# settings field -> the flag that sets it
FLAGS = {"home": "--home", "milvus_uri": "--milvus-uri", "database_url": "--database-url"}


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    """--home, --milvus-uri, --database-url, --json and --config, on every command."""
    parser.add_argument("--home", help="state directory (default ./.kbflow, env KBFLOW_HOME)")
    parser.add_argument("--milvus-uri", help="Milvus URI or Lite file (env KBFLOW_MILVUS_URI)")
    parser.add_argument("--database-url", help="SQLAlchemy URL (env KBFLOW_DATABASE_URL)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    # also accepted after the command; SUPPRESS keeps a --config given before it
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP)


def flag_overrides(args: argparse.Namespace) -> dict[str, tuple[Any, str]]:
    """Settings given by flags: field -> (value, the flag that gave it)."""
    out: dict[str, tuple[Any, str]] = {}
    for field, flag in FLAGS.items():
        value = getattr(args, field, None)
        if value:
            out[field] = (value, flag)
    scope = getattr(args, "scope", None)
    analyzer = getattr(args, "analyzer", None)
    if analyzer:
        out["analyzer"] = (analyzer, "--analyzer")
        if scope:
            out["scope_analyzers"] = ({scope: analyzer}, "--analyzer with --scope")
    model = getattr(args, "model", None)
    if model and scope:
        out["scopes"] = ({scope: {"embedding_model": model}}, "--model with --scope")
    elif model:
        out["embedding_model"] = (model, "--model")
    return out


def settings_from_args(args: argparse.Namespace) -> Any:
    """Settings: flags > KBFLOW_* environment > the settings file > defaults. A per-scope flag
    (--model with --scope) is merged into the scopes the file or environment set."""
    from kbflow.core.home import with_found_home
    from kbflow.core.settings import Settings

    values = {field: value for field, (value, _) in flag_overrides(args).items()}
    if "scopes" in values:
        known = Settings(**{k: v for k, v in values.items() if k != "scopes"}).scopes
        merged = {name: own.model_dump(exclude_none=True) for name, own in known.items()}
        for name, own in values["scopes"].items():
            merged[name] = {**merged.get(name, {}), **own}
        values["scopes"] = merged
    return with_found_home(Settings(**values))


def check_home(args: argparse.Namespace, settings: Any) -> None:
    """A command that only reads (lookup, status, docs list, gaps, report, audit, scope delete,
    forget) never makes a home: where there is none, it says where it looked and how to point
    at one."""
    from kbflow.core.home import require_home

    if getattr(args, "reads_home", False):
        require_home(settings)


@contextmanager
def config_file(path: str | None) -> Iterator[None]:
    """`--config FILE` for one command: set as KBFLOW_CONFIG (absolute), so the settings of
    everything the command starts read it too (a Prefect flow, a Dask worker), then restored."""
    if not path:
        yield
        return
    from kbflow.core.settings import CONFIG_ENV

    before = os.environ.get(CONFIG_ENV)
    os.environ[CONFIG_ENV] = str(Path(path).expanduser().absolute())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CONFIG_ENV, None)
        else:
            os.environ[CONFIG_ENV] = before


def validation_message(exc: Any) -> str:
    """A pydantic ValidationError of the settings, in one line that says where it came from."""
    first = exc.errors()[0]
    name = ".".join(map(str, first["loc"]))
    where = _origin(str(first["loc"][0])) if first["loc"] else None
    if first["type"] == "extra_forbidden":
        return f"unknown setting {name}" + (f" in {where}" if where else "")
    return f"invalid setting {name}" + (f" (from {where})" if where else "") + f": {first['msg']}"


def _origin(field: str) -> str | None:
    """The settings file or variable a bad value came from (flags are checked by argparse)."""
    from kbflow.core.settings import config_file, setting_origins

    try:
        origins = setting_origins()
        if field not in origins:  # not a setting at all: only the file can hold it
            path = config_file()
            return str(path) if path else None
        origin = origins[field]
    except Exception:  # the error being reported is the one that matters
        return None
    return None if origin == "default" else origin


def settings_error_message(exc: Exception) -> str:
    """pydantic-settings says 'error parsing value for field "api_keys" from source …'; say which
    variable and what it takes."""
    m = re.search(r'field "([^"]+)"', str(exc))
    if not m:
        return f"invalid setting: {exc}"
    name = m.group(1)
    return (
        f"invalid setting {name} (KBFLOW_{name.upper()}): not valid JSON; it takes a JSON value, "
        'e.g. KBFLOW_API_KEYS=\'{"k1": ["ops"]}\' or KBFLOW_SCOPE_ANALYZERS=\'{"kb-zh": "jieba"}\''
    )


def say_what_loads(settings: Any) -> None:
    """Importing torch and loading the model take seconds before any output: say so (stderr,
    so --json output stays one object). Each scope's model loads when that scope needs it."""
    model = (settings.embedding_model or "all-MiniLM-L6-v2 (packaged)") + f" on {settings.embedding_backend}"
    where = settings.resolved_milvus_uri
    print(
        f"kbflow: loading the stores ({where}) and, as scopes need them, the embedding models "
        f"({model}; Chinese scopes: {settings.multilingual_model or model}) …",
        file=sys.stderr,
    )


def known_scopes(sql: Any, *, audited: bool = False) -> list[str]:
    """The scopes indexed (and, for commands that read the audit, the scopes ever looked up)."""
    from sqlalchemy import select

    from kbflow.core.sql import LookupAuditRow, ScopeRow

    with sql.session() as session:
        names = set(session.scalars(select(ScopeRow.kb_scope)))
        if audited:
            names |= {s for s in session.scalars(select(LookupAuditRow.kb_scope).distinct()) if s}
    return sorted(names)


def require_scope(sql: Any, scope: str | None, *, audited: bool = False) -> None:
    """A --scope that names no scope is an error (exit 2) naming the ones there are, not an
    empty answer that reads like "nothing there"."""
    from kbflow.core.validation import validate_scope
    from kbflow.retrieval.request import UnknownScope, unknown_scope_message

    if not scope:
        return
    validate_scope(scope)  # an invalid name is told as such, not as one that is missing
    scopes = known_scopes(sql, audited=audited)
    if scope not in scopes:
        raise UnknownScope(unknown_scope_message(scope, scopes) if scopes else f"no scope {scope!r}: "
                           "nothing is indexed here yet (`kbflow reindex PATH --scope S` makes one)")
