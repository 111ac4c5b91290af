"""`kbflow gaps` (what agents asked that the knowledge base could not answer) and `kbflow audit
purge` (the audit's retention). Both read and write SQL only: a running `kbflow serve` may keep
the Milvus Lite file."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

from kbflow.flows.cli.options import RAW, add_store_flags, require_scope

GAPS_EPILOG = """\
Every lookup is audited in SQL. gaps takes the window's lookups that were answered "no usable
evidence" or with weak evidence only (eval runs left out), groups them by meaning (their query
embeddings, with the scope's model) and shows, largest group first: a label of its salient
terms, how many lookups and distinct callers (API keys by a short digest, cli, python,
prefect), three example questions, the document that came nearest and its quality, and when
it was first and last asked. Then the lookups the fallback rescued (the L0 category hint that
misled), the documents never returned in the window and the most returned ones.

examples:
  kbflow gaps                              the last 7 days, every scope
  kbflow gaps --scope ops --since 30d      one scope, a month
  kbflow gaps --json                       one JSON object (every group, with its audit ids)
  kbflow gaps --markdown gaps.md           the report as Markdown (as the knowledge-gaps flow's artifact)
  kbflow report --html report.html         scopes, lookups, rates, latency, gaps, eval history: one page
  kbflow audit purge                       what the retention rule would delete (dry run)
  kbflow audit purge --yes                 delete audit rows older than audit_retention_days
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "gaps",
        help="what agents asked that the knowledge base could not answer (from the lookup audit)",
        description="Group the window's unanswered lookups by meaning: the next documents to write.",
        epilog=GAPS_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("--scope", help="only lookups of this kb_scope (default every scope)")
    p.add_argument("--since", default="7d", help="the window: 24h, 7d, 4w … back from now (default 7d)")
    p.add_argument("--top", type=int, default=20, help="groups shown (default 20; --json has all)")
    p.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown to FILE")
    add_store_flags(p)
    p.set_defaults(func=gaps, reads_home=True)

    r = sub.add_parser(
        "report",
        help="the owner's report: one self-contained HTML page (scopes, lookups, gaps, eval history)",
        description="Writes one HTML page with no server and nothing fetched (inline CSS and SVG): "
        "each scope (documents, chunks, model, analyzer, calibration, last reindex, failures), "
        "lookups per day, the no-evidence and weak rates per day, latency p50/p95 per day, the "
        "knowledge gaps and the eval history (nDCG@10, MRR, no-evidence rates of each live eval run).",
    )
    r.add_argument("--html", metavar="FILE", required=True, help="where to write the page")
    r.add_argument("--scope", help="one kb_scope (default every scope)")
    r.add_argument("--since", default="30d", help="the window: 7d, 30d, 12w … (default 30d)")
    add_store_flags(r)
    r.set_defaults(func=report, reads_home=True)

    audit = sub.add_parser("audit", help="the lookup audit: retention").add_subparsers(
        dest="audit_command", required=True, metavar="COMMAND", help="purge"
    )
    purge = audit.add_parser(
        "purge",
        help="delete audit rows older than audit_retention_days (dry run without --yes)",
        description="Audit rows hold users' questions. This deletes those older than "
        "audit_retention_days (default 90; 0 keeps everything), in short transactions, so that "
        "lookups running meanwhile are never refused. The knowledge-gaps flow runs it weekly.",
    )
    purge.add_argument("--yes", action="store_true", help="delete (without it: count only)")
    add_store_flags(purge)
    purge.set_defaults(func=audit_purge, reads_home=True)


def _sql(settings: Any) -> Any:
    """The home's SQL store; a home with no database yet is told, not created."""
    from pathlib import Path

    from kbflow.core.errors import InputError
    from kbflow.core.sql import SqlStore

    url = settings.resolved_database_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise InputError(
            f"nothing is indexed or audited under {settings.home}: no {url.removeprefix('sqlite:///')} "
            "(--home or KBFLOW_HOME names another home)"
        )
    return SqlStore(url)


def _since(text: str) -> timedelta:
    from kbflow.core.errors import InputError
    from kbflow.insights.gaps import parse_since

    try:
        return parse_since(text)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def gaps(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.cli.gaps_view import print_gaps, progress_bar
    from kbflow.insights.gaps import knowledge_gaps, model_embedder
    from kbflow.insights.gaps_markdown import gaps_markdown

    since = _since(args.since)
    sql = _sql(settings)
    require_scope(sql, args.scope, audited=True)
    with progress_bar(enabled=not args.json) as advance:
        report = knowledge_gaps(
            sql, model_embedder(settings), scope=args.scope, since=since, progress=advance
        )
    if args.markdown:
        from pathlib import Path

        Path(args.markdown).write_text(gaps_markdown(report, args.top), encoding="utf-8")
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        print_gaps(report, args.top)
    return 0


def audit_purge(args: argparse.Namespace, settings: Any) -> int:
    from datetime import UTC, datetime

    from sqlalchemy import func, select

    from kbflow.core.sql import LookupAuditRow
    from kbflow.retrieval.audit import purge_expired

    days = settings.audit_retention_days
    sql = _sql(settings)
    if days <= 0:
        out = {"retention_days": 0, "deleted": 0, "would_delete": 0}
        message = "audit_retention_days is 0: the audit is kept forever; nothing to purge"
    elif args.yes:
        out = {"retention_days": days, "deleted": purge_expired(sql, days), "would_delete": 0}
        message = f"deleted {out['deleted']} audit rows older than {days} days"
    else:
        cutoff = datetime.now(UTC) - timedelta(days=days)
        with sql.session() as s:
            n = s.scalar(
                select(func.count()).select_from(LookupAuditRow).where(LookupAuditRow.created_at < cutoff)
            )
        out = {"retention_days": days, "deleted": 0, "would_delete": n}
        message = f"{n} audit rows are older than {days} days; --yes deletes them"
    print(json.dumps(out) if args.json else message)
    return 0


def report(args: argparse.Namespace, settings: Any) -> int:
    from pathlib import Path

    from kbflow.flows.report import write_owner_report

    since = _since(args.since)
    require_scope(_sql(settings), args.scope, audited=True)
    path = write_owner_report(settings, Path(args.html), since=since, scope=args.scope)
    print(json.dumps({"html": str(path)}) if args.json else f"wrote {path} (open it in a browser)")
    return 0
