"""The `knowledge-gaps` flow: the audit's retention, then the owner's view of the week as a
Markdown artifact. `kbflow serve-flows` runs it weekly (`--gaps-cron`)."""

from __future__ import annotations

import os
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from kbflow.core.settings import Settings
from kbflow.core.sql import SqlStore
from kbflow.flows.common import deployment_summary
from kbflow.insights.gaps import knowledge_gaps, model_embedder, parse_since
from kbflow.insights.gaps_markdown import gaps_markdown
from kbflow.retrieval.audit import purge_expired

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

GAPS_CRON = "0 7 * * 1"  # Mondays 07:00: last week's gaps at the start of this one


def _settings(home: str | None) -> Settings:
    return Settings(**({"home": home} if home else {}))


@task(name="purge-audit")
def purge_audit_task(home: str | None = None) -> int:
    """Delete audit rows past audit_retention_days (0 keeps them)."""
    settings = _settings(home)
    return purge_expired(SqlStore(settings.resolved_database_url), settings.audit_retention_days)


@task(name="knowledge-gaps-report")
def gaps_task(home: str | None = None, scope: str | None = None, since: str = "7d") -> dict[str, Any]:
    settings = _settings(home)
    sql = SqlStore(settings.resolved_database_url)
    report = knowledge_gaps(sql, model_embedder(settings), scope=scope, since=parse_since(since))
    create_markdown_artifact(
        key="knowledge-gaps",
        markdown=gaps_markdown(report),
        description="kbflow: what agents asked that the knowledge base could not answer",
    )
    return report.to_json()


@task(name="owner-report")
def owner_report_task(home: str | None = None, scope: str | None = None) -> str:
    """The HTML report of the last 30 days under <home>/reports/, attached as a link artifact."""
    from datetime import timedelta

    from kbflow.flows.report import write_owner_report

    settings = _settings(home)
    path = settings.home.resolve() / "reports" / "kbflow-report.html"
    write_owner_report(settings, path, since=timedelta(days=30), scope=scope)
    create_link_artifact(
        key="kbflow-report", link=path.as_uri(), link_text="kbflow report", description="the owner's report"
    )
    return str(path)


@flow(name="knowledge-gaps")
def knowledge_gaps_flow(
    home: str | None = None, scope: str | None = None, since: str = "7d"
) -> dict[str, Any]:
    """Purge the audit past its retention, group the window's unanswered lookups, and write the
    owner's HTML report."""
    logger = get_run_logger()
    purged = purge_audit_task(home)
    if purged:
        logger.info("purged %d audit rows past audit_retention_days", purged)
    report = gaps_task(home, scope, since)
    logger.info("owner's report: %s", owner_report_task(home, scope))
    logger.info(
        "%d lookups, %d unanswered, %d groups", report["lookups"], report["unanswered"], len(report["groups"])
    )
    return report


def gaps_deployments(home: str | None, cron: str) -> list[Any]:
    params = {"home": home} if home else {}
    return [knowledge_gaps_flow.to_deployment(name="kbflow-knowledge-gaps", cron=cron, parameters=params)]


def gaps_deployments_summary(home: str | None, cron: str) -> list[dict[str, Any]]:
    return [deployment_summary(knowledge_gaps_flow.name, d, cron) for d in gaps_deployments(home, cron)]
