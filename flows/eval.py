"""Prefect flows of the eval closure, and their deployment on cron schedules.

- `eval`: reseed the golden scopes, run the live golden cases, publish the report and the
  baseline diff as artifacts; the run ends Failed on a regression against the baseline (a case
  that failed there too is listed as a known failure).
- `eval-corpus-refresh`: reseed the `rag-eval` scopes from seed-docs/ (incremental, so cheap
  when nothing changed).
- `serve_flows()`: `kbflow serve-flows` serves both unattended on cron schedules.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed, Failed, State

from kbflow.core.settings import Settings
from kbflow.evaluation.report import diff_markdown, report_markdown
from kbflow.evaluation.runner import EVAL_ROOT, SEED_DOCS, run_eval
from kbflow.evaluation.verdict import verdict_line
from kbflow.flows.common import deployment_summary
from kbflow.ingest.reindex import reindex

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

EVAL_SCOPES = ("rag-eval", "rag-eval-zh")
BASELINE = EVAL_ROOT / "reports" / "baseline.json"


def _settings(home: str | None) -> Settings:
    return Settings(**({"home": home} if home else {}))


@flow(name="eval-corpus-refresh")
def eval_corpus_refresh_flow(home: str | None = None, seed_docs: str | None = None) -> State:
    """Reseed the eval scopes from seed-docs/; Failed if any seed document failed."""
    logger = get_run_logger()
    settings = _settings(home)
    results: dict[str, Any] = {}
    for scope in EVAL_SCOPES:
        summary = reindex([Path(seed_docs) if seed_docs else SEED_DOCS], scope=scope, settings=settings)
        results[scope] = summary.to_dict()
        logger.info(
            "scope %s: %d added, %d updated, %d unchanged, %d removed, %d failed",
            scope,
            summary.added,
            summary.updated,
            summary.unchanged,
            summary.removed,
            len(summary.failed),
        )
    failed = [f for r in results.values() for f in r["failed"]]
    if failed:
        return Failed(message=f"{len(failed)} seed document(s) failed", data=results)
    return Completed(message="eval corpus refreshed", data=results)


@flow(name="eval")
def eval_flow(home: str | None = None, modes: list[str] | None = None, baseline: str | None = None) -> State:
    """Live golden-case run with report + diff artifacts; Failed on a regression."""
    logger = get_run_logger()
    outcome = run_eval(
        source="live",
        modes=modes or ["hybrid", "dense"],
        settings=_settings(home),
        compare_to=Path(baseline) if baseline else BASELINE,
    )
    create_markdown_artifact(
        key="eval-report", markdown=report_markdown(outcome.report), description="kbflow golden-case report"
    )
    if outcome.diff is not None:
        create_markdown_artifact(
            key="eval-diff",
            markdown=diff_markdown(outcome.diff),
            description="kbflow eval diff against the baseline",
        )
    known = set((outcome.diff or {}).get("known_failures", []))
    for name in outcome.failed:
        if name not in known:
            logger.error("failed case %s", name)
    for r in (outcome.diff or {}).get("regressions", []):
        logger.error("regression: %s", r)
    logger.info(verdict_line(outcome))
    data = {"report": outcome.report, "diff": outcome.diff}
    if not outcome.ok:
        n_reg = len((outcome.diff or {}).get("regressions", []))
        return Failed(message=f"{len(outcome.failed)} failed case(s), {n_reg} regression(s)", data=data)
    return Completed(message="eval passed, no regression", data=data)


def serve_flows(
    home: str | None = None,
    eval_cron: str = "0 6 * * *",
    refresh_cron: str = "0 5 * * *",
    extra: Sequence[Any] = (),
) -> None:
    """Serve both flows unattended (blocks), with any `extra` deployments (scheduled reindexes).
    Needs a Prefect API (`prefect server start` or PREFECT_API_URL); the refresh runs an hour
    before the eval by default."""
    from prefect import serve

    params = {"home": home} if home else {}
    serve(
        eval_corpus_refresh_flow.to_deployment(
            name="kbflow-eval-corpus-refresh", cron=refresh_cron, parameters=params
        ),
        eval_flow.to_deployment(name="kbflow-eval", cron=eval_cron, parameters=params),
        *extra,
    )


def deployments_summary(
    home: str | None = None, eval_cron: str = "0 6 * * *", refresh_cron: str = "0 5 * * *"
) -> list[dict[str, Any]]:
    """What `serve_flows` would register, without serving (for --dry-run and tests)."""
    params = {"home": home} if home else {}
    out = []
    for f, name, cron in (
        (eval_corpus_refresh_flow, "kbflow-eval-corpus-refresh", refresh_cron),
        (eval_flow, "kbflow-eval", eval_cron),
    ):
        out.append(deployment_summary(f.name, f.to_deployment(name=name, cron=cron, parameters=params), cron))
    return out
