"""The owner's report (`kbflow report --html`, and the knowledge-gaps flow's artifact): scopes,
lookups per day, no-evidence and weak rates, latency, knowledge gaps and the eval history, on
one self-contained page. Reads SQL only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kbflow.core.settings import Settings
from kbflow.core.sql import SqlStore
from kbflow.evaluation.history import eval_history
from kbflow.insights.daily import daily_series
from kbflow.insights.gaps import GapsReport, knowledge_gaps, model_embedder
from kbflow.insights.report_html import render


def scope_rows(sql: SqlStore, settings: Settings) -> list[dict[str, Any]]:
    from kbflow.ingest.status import scope_statuses_from
    from kbflow.retrieval.calibration import describe

    statuses = scope_statuses_from(sql, None, settings.multilingual_model)
    for st in statuses:
        st.calibration = describe(sql, st.model, st.kb_scope)
    return [st.to_dict() for st in statuses]


def owner_report_html(
    settings: Settings,
    *,
    since: timedelta = timedelta(days=30),
    scope: str | None = None,
    gaps: GapsReport | None = None,
    now: datetime | None = None,
) -> str:
    from kbflow.ingest.status import last_run

    until = now or datetime.now(UTC)
    sql = SqlStore(settings.resolved_database_url)
    gaps = gaps or knowledge_gaps(sql, model_embedder(settings), scope=scope, since=since, now=until)
    scopes = scope_rows(sql, settings)
    if scope:
        scopes = [s for s in scopes if s["kb_scope"] == scope]
    return render(
        generated=until.isoformat(timespec="seconds"),
        window=f"{'scope ' + scope if scope else 'every scope'}, {(until - since).date()} → {until.date()}",
        scopes=scopes,
        last_run=last_run(sql),
        days=daily_series(sql, until - since, until, scope),
        gaps=gaps,
        history=eval_history(sql, until - since),
    )


def write_owner_report(settings: Settings, path: Path, **options: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(owner_report_html(settings, **options), encoding="utf-8")
    return path
