"""`kbflow` command line.

Exit codes: 0 success, 1 some documents failed (the rest were indexed) or a removal was refused,
2 the command could not run (bad arguments, missing root, store unavailable, invalid setting).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from kbflow.flows.errors import say_error

# Prefect's telemetry tries the network and, on its temporary server, logs "database is locked"
# errors; kbflow turns it off unless the user chose (PREFECT_SERVER_ANALYTICS_ENABLED=true).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

EPILOG = """\
Settings come from KBFLOW_* environment variables (e.g. KBFLOW_HOME, KBFLOW_MILVUS_URI,
KBFLOW_DATABASE_URL, KBFLOW_EMBEDDING_MODEL, KBFLOW_CHUNK_MAX_CHARS); flags override them.

examples:
  kbflow reindex seed-docs                 incremental reindex into ./.kbflow
  kbflow reindex docs/ --scope team-a      only scope team-a (files without kb_scope join it)
  kbflow reindex docs/ --full              rebuild each scope into a new collection, swap alias
  kbflow reindex docs/ --json              one JSON summary object on stdout
  kbflow status                            per scope and root: documents, chunks, collection, model
  kbflow docs list [--scope S] [--root R]  the indexed documents: id, scope, root, path, status
  kbflow scope delete team-a [--yes]       remove a whole scope (dry run without --yes)
  kbflow forget /srv/old-docs [--yes]      remove what was indexed from a root that is gone
  kbflow lookup "kafka consumer lag" --scope rag-eval        readable table
  kbflow lookup "..." --agent --json       the agent's RagToolResult as JSON
  kbflow lookup --queries q.jsonl          batch, one JSON line per query
  kbflow eval --offline                    judge the frozen fixtures (no stores, no model)
  kbflow eval --live --compare-to eval/rag-retrieval/reports/baseline.json
  kbflow serve-flows                       eval + eval-corpus-refresh on cron schedules
  kbflow serve-flows --reindex 'docs/:team-a@0 3 * * *'   plus a nightly reindex of docs/
"""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", help="state directory (default ./.kbflow, env KBFLOW_HOME)")
    parser.add_argument("--milvus-uri", help="Milvus URI or Lite file (env KBFLOW_MILVUS_URI)")
    parser.add_argument("--database-url", help="SQLAlchemy URL (env KBFLOW_DATABASE_URL)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbflow",
        description="Index Markdown knowledge into Milvus (dense + BM25) and SQL, and inspect it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _reindex_parser,
        _status_parser,
        _manage_parsers,
        _lookup_parser,
        _eval_parser,
        _serve_parser,
        _db_parser,
        _serve_flows_parser,
    ):
        add(sub)
    return parser


def _reindex_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reindex",
        help="index Markdown roots (incremental by default)",
        description="Index every *.md under PATH... Unchanged files cost nothing; changed files "
        "replace their chunks; files gone from a root are removed (and listed). A document is "
        "its (kb_scope, source): a moved file or root keeps it, nothing is embedded again. A bad "
        "file is reported with its reason and the rest are still indexed (exit code 1). Nothing "
        "is removed when the scan looks partial: a missing or unreadable root or folder, a "
        "dangling symlink, a root that now holds no Markdown, or a run that would remove more "
        "than max_delete_fraction of a scope (exit code 1; --allow-mass-delete confirms).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="root directory of Markdown files")
    p.add_argument("--scope", help="index only this kb_scope; files without kb_scope join it")
    p.add_argument("--full", action="store_true", help="rebuild into a new collection, switch the alias")
    p.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="confirm removals the guards refuse: a root that now holds no Markdown, or a run that "
        "would remove more than max_delete_fraction (default 0.5) of a scope's documents",
    )
    p.add_argument(
        "--analyzer",
        choices=["standard", "jieba"],
        help="BM25 analyzer for scopes created or rebuilt by this run",
    )
    p.add_argument("--prefect", action="store_true", help="run as the Prefect 'reindex' flow")
    p.add_argument(
        "--task-runner",
        choices=["default", "dask"],
        default="default",
        help="dask: embed batches on a Dask cluster through Prefect (implies --prefect)",
    )
    p.add_argument(
        "--dask-address", metavar="ADDR", help="scheduler address; default a local 2-worker cluster"
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another run on the same scope to finish (default: refuse)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    _common(p)


def _status_parser(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="show what is indexed, per scope and per root",
        description="Per scope: documents (per root), chunks in Milvus next to the recorded count, "
        "collection and alias target, analyzer, model; then documents per root. Scopes without "
        "documents are not listed.",
    )
    _common(p)


def _manage_parsers(sub: Any) -> None:
    from kbflow.flows.manage_cli import add_parsers

    add_parsers(sub, _common)


def _lookup_parser(sub: Any) -> None:
    p = sub.add_parser(
        "lookup",
        help="look up evidence for a query",
        description="Run lookup_knowledge: L0 navigation, hybrid (or dense) search, quality gate, one "
        "fallback, context pack, audit. Prints a table, or JSON with --json (the LookupResult; the "
        'agent\'s RagToolResult with --agent). With --queries FILE.jsonl (lines {"id":…, "query":…, '
        '"kb_scope":…}) prints one JSON line {"id", "result"} per query. When a `kbflow serve` runs on '
        "the home, the lookup is sent to it (its settings; no model load, well under a second).",
    )
    p.add_argument("query", nargs="?", help="the symptom, error message or question")
    p.add_argument("--scope", help="kb_scope to search (default: all scopes)")
    p.add_argument("--mode", choices=["hybrid", "dense"], help="search mode (default hybrid)")
    p.add_argument("--agent", action="store_true", help="project to the agent contract (RagToolResult)")
    p.add_argument("--queries", metavar="FILE.jsonl", help="batch: one JSON object per line")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="load the model here even when a kbflow serve runs on this home (by default the lookup "
        "is sent to it, with its settings, and no model is loaded)",
    )
    _common(p)


def _eval_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run the golden retrieval cases and gate on the baseline",
        description="Evaluate eval/rag-retrieval/cases/golden-cases.json. --offline judges the frozen "
        "fixtures (no Milvus, SQL or model); --live (default) reseeds the cases' scopes from seed-docs/ and "
        "runs the real lookup; --snapshot does the same and rewrites the fixtures. With --compare-to, exit "
        "code 1 on a regression (cases that fail in the baseline too are listed as known failures); without "
        "it, 1 on any failed case; 2 on a malformed cases file, fixture or baseline. "
        "`kbflow eval --beir DIR` evaluates a BEIR dataset at depth; `kbflow eval calibrate` fits the gate.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--offline", dest="source", action="store_const", const="offline")
    src.add_argument("--live", dest="source", action="store_const", const="live")
    src.add_argument(
        "--snapshot",
        dest="source",
        action="store_const",
        const="snapshot",
        help="rewrite fixtures/<caseId>.json from live results",
    )
    p.add_argument("--mode", choices=["hybrid", "dense", "both"], default="both")
    p.add_argument("--scope", help="only the cases of this scope; with --beir, the scope to ingest into")
    p.add_argument("--cases", help="cases file (default eval/rag-retrieval/cases/golden-cases.json)")
    p.add_argument("--fixtures", help="fixtures directory (default eval/rag-retrieval/fixtures)")
    p.add_argument("--json-report", metavar="F")
    p.add_argument("--markdown-report", metavar="F", help="also writes a chart F.png beside it")
    p.add_argument("--compare-to", metavar="BASELINE.json")
    p.add_argument("--diff-json-report", metavar="F")
    p.add_argument("--diff-markdown-report", metavar="F")
    p.add_argument(
        "action",
        nargs="?",
        choices=["run", "calibrate"],
        default="run",
        help="run (default): evaluate the golden cases, or a BEIR dataset with --beir. calibrate: read "
        "labelled answerable and unanswerable queries (the golden cases with --golden, a BEIR dataset with "
        "--beir plus --negatives/--negatives-from, or both), show the gate signals' distributions for each "
        "group, choose the gate thresholds (usable floor, reference and precise) from them, and store the "
        "calibration per (embedding model, scope) so later lookups in that scope use it",
    )
    _beir_args(p)
    _calibrate_args(p)
    _common(p)


def _beir_args(p: argparse.ArgumentParser) -> None:
    beir = p.add_argument_group(
        "BEIR datasets",
        "Ingest a BEIR dataset into --scope, run every judged query with --depth candidates and report "
        "nDCG@10, MRR@10, recall@10/@100 and P@5 on the candidate lists (original document ids), the "
        "delivered-evidence metrics at k = return_n, no-evidence honesty, fallback and L0 figures.",
    )
    beir.add_argument(
        "--beir", metavar="DIR", help="evaluate a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/test.tsv)"
    )
    beir.add_argument(
        "--depth", type=int, default=100, metavar="N", help="candidate chunks fetched per query (default 100)"
    )
    beir.add_argument(
        "--negatives",
        metavar="QUERIES.jsonl",
        help='unanswerable queries, one {"_id", "text", "kind": "near"|"off"} per line (kind default off)',
    )
    beir.add_argument(
        "--negatives-from",
        metavar="DIR",
        help="another BEIR dataset whose queries.jsonl serve as off-domain negatives (ids prefixed neg-)",
    )
    beir.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where the TREC run files <scope>.<mode>.trec are written (default <home>/runs)",
    )
    beir.add_argument(
        "--compare",
        action="store_true",
        help="compare the modes' candidate runs (and any --compare-runs) with a paired t-test",
    )
    beir.add_argument(
        "--compare-runs",
        nargs="+",
        default=[],
        metavar="F",
        help="TREC run files from earlier configurations to compare against (implies --compare)",
    )


def _calibrate_args(p: argparse.ArgumentParser) -> None:
    cal = p.add_argument_group(
        "calibrate",
        "kbflow eval calibrate [--golden] [--beir DIR --scope S --negatives F | --negatives-from DIR] "
        "[--no-store] [--chart F.png]",
    )
    cal.add_argument("--golden", action="store_true", help="use the golden cases")
    cal.add_argument(
        "--store",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="store the chosen calibration per (model, scope) (default); --no-store only shows it",
    )
    cal.add_argument("--chart", metavar="F.png", help="write the gate signals' distributions chart to F.png")
    cal.add_argument(
        "--export",
        metavar="F.json",
        help="also write the calibration and the data it came from to F.json (how the packaged default "
        "retrieval/default_calibration.json is made)",
    )


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="HTTP lookup service for the agent (owns the embedded Milvus Lite file)",
        description="POST /v1/lookup {query, kb_scope, mode, agent}; GET /v1/scopes; GET /healthz. API keys "
        'from KBFLOW_API_KEYS (\'{"key": ["scope"]}\') or KBFLOW_API_KEYS_FILE; without keys the service is '
        "open and binds loopback only. With the embedded store it serves the Milvus Lite file to other "
        "kbflow commands through a token-guarded endpoint announced in <home>/serve.json (mode 0600); "
        "`kbflow lookup` on the same home is sent here and loads no model. KBFLOW_SERVE_WORKERS lookups "
        "run at once (default one per core) and KBFLOW_SERVE_QUEUE (16) wait; more get 503 with "
        "Retry-After at once. Bodies over 64 KB get 413.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    _common(p)


def _db_parser(sub: Any) -> None:
    p = sub.add_parser(
        "db",
        help="SQL schema migrations (Alembic)",
        description="`kbflow db upgrade` migrates the SQL database (SQLite or PostgreSQL, from "
        "KBFLOW_DATABASE_URL) to this version's schema in place, keeping its data; `kbflow db current` "
        "prints the revision it is at.",
    )
    p.add_argument("action", choices=["upgrade", "current"])
    p.add_argument("--revision", default="head", help="target revision for upgrade (default head)")
    _common(p)


def _serve_flows_parser(sub: Any) -> None:
    from kbflow.flows.schedules import SERVE_FLOWS_EPILOG

    p = sub.add_parser(
        "serve-flows",
        help="serve the eval and eval-corpus-refresh flows (and scheduled reindexes) on cron schedules",
        description="Registers the eval and eval-corpus-refresh deployments, plus one `reindex` "
        "deployment per --reindex, with the Prefect API (PREFECT_API_URL, e.g. a `prefect server "
        "start`) and runs them on schedule until stopped. --dry-run needs no Prefect API.",
        epilog=SERVE_FLOWS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--eval-cron", default="0 6 * * *", help="cron for the eval flow (default 06:00 daily)")
    p.add_argument("--refresh-cron", default="0 5 * * *", help="cron for eval-corpus-refresh (05:00 daily)")
    p.add_argument(
        "--reindex",
        action="append",
        default=[],
        metavar="ROOT[:SCOPE]@CRON",
        help="also reindex ROOT (only SCOPE, if given) incrementally on CRON; repeatable",
    )
    p.add_argument("--dry-run", action="store_true", help="print the deployments as JSON and exit")
    _common(p)


def _settings(args: argparse.Namespace) -> Any:
    from kbflow.core.settings import Settings

    overrides: dict[str, Any] = {}
    for flag, key in (("home", "home"), ("milvus_uri", "milvus_uri"), ("database_url", "database_url")):
        value = getattr(args, flag, None)
        if value:
            overrides[key] = value
    analyzer = getattr(args, "analyzer", None)
    if analyzer:
        overrides["analyzer"] = analyzer
        scope = getattr(args, "scope", None)
        if scope:
            overrides["scope_analyzers"] = {scope: analyzer}
    return Settings(**overrides)


def settings_error_message(exc: Exception) -> str:
    """pydantic-settings says 'error parsing value for field "api_keys" from source …'; say which
    variable and what it takes."""
    import re

    m = re.search(r'field "([^"]+)"', str(exc))
    if not m:
        return f"invalid setting: {exc}"
    name = m.group(1)
    return (
        f"invalid setting {name} (KBFLOW_{name.upper()}): not valid JSON; it takes a JSON value, "
        'e.g. KBFLOW_API_KEYS=\'{"k1": ["ops"]}\' or KBFLOW_SCOPE_ANALYZERS=\'{"kb-zh": "jieba"}\''
    )


def _say_what_loads(settings: Any) -> None:
    """Importing torch and loading the model take seconds before any output: say so (stderr,
    so --json output stays one object)."""
    model = (settings.embedding_model or "all-MiniLM-L6-v2 (packaged)") + f" on {settings.embedding_backend}"
    where = settings.resolved_milvus_uri
    print(f"kbflow: loading the embedding model {model} and the stores ({where}) …", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "lookup":
        from kbflow.flows.lookup_cli import lookup_through_service

        routed = lookup_through_service(args, _settings)
        if routed is not None:
            return routed
    from pydantic_settings import SettingsError

    from kbflow.flows.errors import quiet_lock_traceback, store_unavailable_message

    quiet_lock_traceback()
    from kbflow.core.milvus_store import StoreUnavailable
    from kbflow.core.onnx_backend import BackendUnavailable
    from kbflow.core.schema import SchemaOutdated
    from kbflow.core.validation import InvalidValue
    from kbflow.evaluation.cases import CaseFileError
    from kbflow.evaluation.report import BaselineError
    from kbflow.ingest.locks import ScopeLocked
    from kbflow.ingest.sources import RootError
    from kbflow.retrieval.pipeline import IndexMissing, LookupRejected

    try:
        settings = _settings(args)
        loads_model = args.command in ("reindex", "lookup", "serve") or (
            args.command == "eval" and args.source != "offline"
        )
        if loads_model:
            _say_what_loads(settings)
        if args.command == "reindex":
            return _reindex(args, settings)
        if args.command == "lookup":
            from kbflow.flows.lookup_cli import lookup

            return lookup(args, settings)
        if args.command == "eval":
            return _eval(args, settings)
        if args.command == "db":
            return _db(args, settings)
        if args.command == "serve-flows":
            return _serve_flows(args, settings)
        if args.command in ("docs", "scope", "forget"):
            from kbflow.flows.manage_cli import run

            return run(args, settings)
        if args.command == "serve":
            from kbflow.flows.serve import serve

            return serve(settings, args.host, args.port)
        from kbflow.flows.manage_cli import status

        return status(args, settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        return say_error(f"invalid setting {'.'.join(map(str, first['loc']))}: {first['msg']}")
    except SettingsError as exc:
        return say_error(settings_error_message(exc))
    except StoreUnavailable as exc:
        return say_error(store_unavailable_message(exc, settings.resolved_milvus_uri))
    except (
        RootError,
        InvalidValue,
        LookupRejected,
        IndexMissing,
        CaseFileError,
        BaselineError,
        ScopeLocked,
        SchemaOutdated,
        BackendUnavailable,
    ) as exc:
        return say_error(str(exc))


def _reindex(args: argparse.Namespace, settings: Any) -> int:
    from rich.console import Console

    from kbflow.ingest.reindex import ReindexSummary, ScopeSummary, reindex

    if args.scope:
        from kbflow.core.validation import validate_scope

        validate_scope(args.scope)
    err = Console(stderr=True)
    if args.prefect or args.task_runner == "dask":
        from kbflow.flows.reindex import run_reindex_flow

        ok, data = run_reindex_flow(
            args.paths,
            args.scope,
            args.full,
            str(settings.home),
            args.task_runner,
            args.dask_address,
            allow_mass_delete=args.allow_mass_delete,
        )
        scopes = {k: ScopeSummary(**v) for k, v in data.pop("scopes").items()}
        data.pop("ok")
        summary = ReindexSummary(**data, scopes=scopes)
    else:
        show = err.is_terminal and not args.no_progress
        summary = (
            _run_with_progress(reindex, args, settings, err)
            if show
            else reindex(
                args.paths,
                scope=args.scope,
                full=args.full,
                settings=settings,
                wait_seconds=args.wait,
                allow_mass_delete=args.allow_mass_delete,
            )
        )
    if args.json:
        print(json.dumps(summary.to_dict(), ensure_ascii=False))
    else:
        _print_summary(summary, Console(soft_wrap=True))
    return 0 if summary.ok else 1


def _run_with_progress(reindex: Any, args: argparse.Namespace, settings: Any, console: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage if stage == "rebuild" else f"{stage} chunks", total=total)
            bar.update(tasks[stage], completed=done, total=total)

        return reindex(
            args.paths,
            scope=args.scope,
            full=args.full,
            settings=settings,
            progress=progress,
            wait_seconds=args.wait,
            allow_mass_delete=args.allow_mass_delete,
        )


def _print_summary(summary: Any, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from kbflow.flows.common import summary_rows

    table = Table(title=f"kbflow reindex ({summary.mode})", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, value in summary_rows(summary):
        table.add_row(label, value)
    console.print(table)
    for sc in summary.scopes.values():
        console.print(
            f"scope [bold]{sc.kb_scope}[/bold]: {sc.documents} documents, analyzer {sc.analyzer}, "
            f"collection {sc.collection} -> {sc.physical_collection}",
            highlight=False,
        )
    for d in summary.removed_docs:
        console.print(f"removed {d['kb_scope']}/{d['doc_id']} ({d['path']})", highlight=False, markup=False)
    for w in summary.warnings:
        console.print(f"[yellow]warning[/yellow] {escape(w['path'])}: {escape(w['reason'])}", highlight=False)
    if summary.skipped_other_scope:
        console.print(f"{summary.skipped_other_scope} file(s) declare another kb_scope and were skipped")
    for f in summary.failed:
        console.print(f"[red]FAILED[/red] {escape(f['path'])}: {escape(f['reason'])}", highlight=False)


def _eval(args: argparse.Namespace, settings: Any) -> int:
    from pathlib import Path

    from kbflow.evaluation.report import diff_markdown, report_markdown, write_chart
    from kbflow.evaluation.runner import EVAL_ROOT, run_eval

    if args.action == "calibrate":
        from kbflow.evaluation.calibration_data import calibrate_command

        return calibrate_command(args, settings)
    modes = ["hybrid", "dense"] if args.mode == "both" else [args.mode]
    if args.beir:
        from kbflow.evaluation.beir import beir_command

        return beir_command(args, settings)
    outcome = run_eval(
        source=args.source or "live",
        modes=modes,
        settings=settings,
        cases_path=Path(args.cases) if args.cases else EVAL_ROOT / "cases" / "golden-cases.json",
        fixtures_dir=Path(args.fixtures) if args.fixtures else EVAL_ROOT / "fixtures",
        compare_to=Path(args.compare_to) if args.compare_to else None,
        scope=args.scope,
    )
    report = outcome.report
    if args.json_report:
        Path(args.json_report).write_text(
            json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
    chart = None
    if args.markdown_report:
        md = Path(args.markdown_report)
        chart = md.with_suffix(".png")
        write_chart(report, chart)
        md.write_text(report_markdown(report, chart.name), encoding="utf-8")
    if outcome.diff is not None:
        if args.diff_json_report:
            Path(args.diff_json_report).write_text(
                json.dumps(outcome.diff, indent=1) + "\n", encoding="utf-8"
            )
        if args.diff_markdown_report:
            Path(args.diff_markdown_report).write_text(diff_markdown(outcome.diff), encoding="utf-8")
    if args.json:
        print(json.dumps({"report": report, "diff": outcome.diff}, ensure_ascii=False))
    else:
        from kbflow.evaluation.report import summary_lines

        for line in summary_lines(report):
            print(line)
        known = set(outcome.diff["known_failures"]) if outcome.diff is not None else set()
        for name in outcome.failed:
            print(f"{'known failure (failed in the baseline too)' if name in known else 'FAILED'} {name}")
        if outcome.diff is not None:
            for r in outcome.diff["regressions"]:
                print(f"REGRESSION {r}")
            for r in outcome.diff["improvements"]:
                print(f"improved {r}")
        for path in outcome.fixtures[:1]:
            print(f"wrote {len(outcome.fixtures)} fixtures to {path.parent}")
    return 0 if outcome.ok else 1


def _db(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.core.schema import current_revision, head_revision, upgrade
    from kbflow.core.sql import SqlStore

    settings.ensure_home()
    sql = SqlStore(settings.resolved_database_url, migrate=False)
    before = current_revision(sql.engine)
    if args.action == "upgrade":
        after = upgrade(sql.engine, args.revision)
        out = {"database": sql.engine.url.render_as_string(hide_password=True), "from": before, "to": after}
    else:
        out = {
            "database": sql.engine.url.render_as_string(hide_password=True),
            "current": before,
            "head": head_revision(),
        }
    sql.dispose()
    print(json.dumps(out) if args.json else "  ".join(f"{k}: {v}" for k, v in out.items()))
    return 0


def _serve_flows(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.eval import deployments_summary, serve_flows
    from kbflow.flows.schedules import ScheduleSpecError, parse_reindex_specs, reindex_deployments

    home = str(settings.home.resolve())
    try:
        schedules = parse_reindex_specs(args.reindex)
    except ScheduleSpecError as exc:
        return say_error(str(exc))
    if args.dry_run:
        from kbflow.flows.schedules import reindex_deployments_summary

        out = deployments_summary(home, args.eval_cron, args.refresh_cron)
        print(json.dumps(out + reindex_deployments_summary(schedules, home), indent=1))
        return 0
    serve_flows(home, args.eval_cron, args.refresh_cron, extra=reindex_deployments(schedules, home))
    return 0


if __name__ == "__main__":
    sys.exit(main())
