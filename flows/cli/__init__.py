"""`kbflow` command line: one module per command group, each with a parser builder per command
that sets `func`, its handler; `main` parses, builds the settings once and calls
`args.func(args, settings)`. Handlers compute, `*_view` modules render.

Exit codes: 0 success; 1 some documents failed (the rest were indexed) or a removal was
refused; 2 the input or the configuration is wrong (`InputError`: bad arguments, missing root,
invalid setting or settings file); 3 the stores are not ready (`StoreError`: held by another
process, locked by another run, schema behind, index missing, service unreachable) and the
same command can succeed later.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

# Prefect's telemetry tries the network and, on its temporary server, logs "database is locked"
# errors; kbflow turns it off unless the user chose (PREFECT_SERVER_ANALYTICS_ENABLED=true).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from kbflow.flows.cli import config, db, gaps, lookup, manage, reindex, serve, store  # noqa: E402
from kbflow.flows.cli import eval as eval_command  # noqa: E402
from kbflow.flows.cli.options import (  # noqa: E402
    CONFIG_HELP,
    check_home,
    config_file,
    settings_error_message,
    settings_from_args,
    validation_message,
)

__all__ = ["build_parser", "main"]

EPILOG = """\
Settings come from, lowest to highest: defaults, a kbflow.toml in the working directory (or
--config FILE / KBFLOW_CONFIG), KBFLOW_* environment variables (e.g. KBFLOW_HOME,
KBFLOW_MILVUS_URI, KBFLOW_DATABASE_URL, KBFLOW_EMBEDDING_MODEL, KBFLOW_CHUNK_MAX_CHARS), flags.
`kbflow config show` prints each setting in effect and where it came from.

exit codes: 0 done, 1 some documents failed or a removal was refused, 2 bad input or
configuration, 3 the stores are not ready (held, locked, behind): the same command can succeed later.

examples:
  kbflow reindex seed-docs                 incremental reindex into ./.kbflow
  kbflow reindex docs/ --scope team-a      only scope team-a (files without kb_scope join it)
  kbflow reindex docs/ --full              rebuild each scope into a new collection, swap alias
  kbflow reindex docs/ --json              one JSON summary object on stdout
  kbflow status                            per scope and root: documents, chunks, collection, model
  kbflow docs list [--scope S] [--root R]  the indexed documents: id, scope, root, path, status
  kbflow scope delete team-a [--yes]       remove a whole scope (dry run without --yes)
  kbflow forget /srv/old-docs [--yes]      remove what was indexed from a root that is gone
  kbflow lookup "kafka consumer lag" --scope rag-eval        the evidence, readable
  kbflow lookup "..." --agent --json       the agent's RagToolResult as JSON
  kbflow lookup --queries q.jsonl          batch, one JSON line per query
  kbflow eval --offline                    judge the frozen fixtures (no stores, no model)
  kbflow eval --live --compare-to eval/rag-retrieval/reports/baseline.json
  kbflow gaps --since 30d                  what agents asked that the knowledge base could not answer
  kbflow serve-flows                       eval, eval-corpus-refresh, knowledge-gaps on cron schedules
  kbflow serve-flows --reindex 'docs/:team-a@0 3 * * *'   plus a nightly reindex of docs/
  kbflow --config ops.toml config show     the settings in effect, and where each came from
"""

# each group adds its commands' parsers, in the order `kbflow --help` lists them
GROUPS = (reindex, manage, lookup, eval_command, gaps, serve, db, store, config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbflow",
        description="Index Markdown knowledge into Milvus (dense + BM25) and SQL, and inspect it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do (kbflow COMMAND --help for more)"
    )
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from kbflow.flows.errors import reader_gone

    try:
        args = build_parser().parse_args(argv)  # --help prints here
        with config_file(args.config):
            return _run(args)
    except BrokenPipeError:  # `kbflow … | head`: the reader has read enough
        return reader_gone()


def _run(args: argparse.Namespace) -> int:
    """The command, with every expected error told in one line and its class's exit code."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from kbflow.core.errors import KbflowError
    from kbflow.flows.errors import (
        database_message,
        error_message,
        is_database_error,
        say_error,
        use_log_format,
    )

    settings: Any = None
    try:
        settings = settings_from_args(args)
        use_log_format(settings.log_format)
        check_home(args, settings)
        return args.func(args, settings)
    except ValidationError as exc:
        return say_error(validation_message(exc))
    except SettingsError as exc:
        return say_error(settings_error_message(exc))
    except KbflowError as exc:
        uri = settings.resolved_milvus_uri if settings is not None else None
        return say_error(error_message(exc, uri), exc.exit_code)
    except Exception as exc:
        if not is_database_error(exc):
            raise
        return say_error(database_message(exc, settings), 3)
