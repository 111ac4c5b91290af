"""`kbflow serve` (the HTTP lookup service, owner of the embedded Milvus Lite file) and
`kbflow serve-flows` (the eval and reindex flows on cron schedules)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kbflow.flows.cli.options import RAW, add_store_flags, say_what_loads

SERVE_DESCRIPTION = (
    "POST /v1/lookup {query, kb_scope, mode, agent}; GET /v1/scopes; GET /healthz. API keys from "
    'KBFLOW_API_KEYS (\'{"key": ["scope"]}\') or KBFLOW_API_KEYS_FILE; without keys the service is open and '
    "binds loopback only. With the embedded store it serves the Milvus Lite file to other kbflow commands "
    "through a token-guarded endpoint announced in <home>/serve.json (mode 0600); `kbflow lookup` on the "
    "same home is sent here and loads no model. KBFLOW_SERVE_WORKERS lookups run at once (default one per "
    "core); more wait while their expected wait, estimated from recent lookups, is within "
    "KBFLOW_SERVE_MAX_WAIT_MS (2000), and past that get 503 with Retry-After at once (KBFLOW_SERVE_QUEUE, "
    "1000, caps the line whatever the estimate). Bodies over 64 KB get 413."
)


def add_parsers(sub: Any) -> None:
    _serve_parser(sub)
    _serve_flows_parser(sub)


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="HTTP lookup service for the agent (owns the embedded Milvus Lite file)",
        description=SERVE_DESCRIPTION,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    add_store_flags(p)
    p.set_defaults(func=serve)


def _serve_flows_parser(sub: Any) -> None:
    from kbflow.flows.schedules import SERVE_FLOWS_EPILOG

    p = sub.add_parser(
        "serve-flows",
        help="serve the eval, eval-corpus-refresh, knowledge-gaps and calibration-refresh flows (and "
        "scheduled reindexes) on cron",
        description="Registers the eval, eval-corpus-refresh, knowledge-gaps and calibration-refresh "
        "deployments, plus one "
        "`reindex` deployment per --reindex, with the Prefect API (PREFECT_API_URL, e.g. a `prefect server "
        "start`) and runs them on schedule until stopped. --dry-run needs no Prefect API.",
        epilog=SERVE_FLOWS_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("--eval-cron", default="0 6 * * *", help="cron for the eval flow (default 06:00 daily)")
    p.add_argument("--refresh-cron", default="0 5 * * *", help="cron for eval-corpus-refresh (05:00 daily)")
    p.add_argument(
        "--gaps-cron",
        default="0 7 * * 1",
        help="cron for knowledge-gaps: the audit's retention, then last week's gaps (Mondays 07:00)",
    )
    p.add_argument(
        "--calibration-cron",
        default="30 5 * * *",
        help="cron for calibration-refresh: refit each scope calibration fitted before its scope's last "
        "full rebuild (05:30 daily)",
    )
    p.add_argument(
        "--reindex",
        action="append",
        default=[],
        metavar="ROOT[:SCOPE]@CRON",
        help="also reindex ROOT (only SCOPE, if given) incrementally on CRON; repeatable",
    )
    p.add_argument("--dry-run", action="store_true", help="print the deployments as JSON and exit")
    add_store_flags(p)
    p.set_defaults(func=serve_flows)


def serve(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.serve import serve as run_service

    say_what_loads(settings)
    return run_service(settings, args.host, args.port)


def serve_flows(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.calibration import calibration_deployments, calibration_deployments_summary
    from kbflow.flows.eval import deployments_summary, serve_flows
    from kbflow.flows.gaps import gaps_deployments, gaps_deployments_summary
    from kbflow.flows.schedules import parse_reindex_specs, reindex_deployments, reindex_deployments_summary

    home = str(settings.home.resolve())
    schedules = parse_reindex_specs(args.reindex)  # a bad spec is refused before anything registers
    if args.dry_run:
        out = deployments_summary(home, args.eval_cron, args.refresh_cron)
        out += gaps_deployments_summary(home, args.gaps_cron)
        out += calibration_deployments_summary(home, args.calibration_cron)
        print(json.dumps(out + reindex_deployments_summary(schedules, home), indent=1))
        return 0
    extra = gaps_deployments(home, args.gaps_cron) + calibration_deployments(home, args.calibration_cron)
    extra += reindex_deployments(schedules, home)
    serve_flows(home, args.eval_cron, args.refresh_cron, extra=extra)
    return 0
