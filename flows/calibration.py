"""The gate's calibrations kept as fresh as the collections they describe.

- `refresh_calibrations_task`: after a reindex, refits each scope calibration fitted before
  its scope's collection was last built (calibration/recalibrate.py); the reindex flow and
  `kbflow reindex` run it, so a full rebuild leaves no calibration older than itself.
- `calibration-refresh`: the same for every scope, on a schedule (`kbflow serve-flows`,
  05:30 daily by default), for calibrations a rebuild elsewhere left behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from kbflow.calibration.recalibrate import Refit, refresh
from kbflow.core.settings import Settings
from kbflow.flows.common import deployment_summary


@task(name="refresh-calibrations", cache_policy=NO_CACHE)
def refresh_calibrations_task(settings: Settings, scopes: Sequence[str] | None) -> list[Refit]:
    refits = refresh(settings, scopes)
    logger = get_run_logger()
    for r in refits:
        (logger.info if r.outcome == "refitted" else logger.warning)(r.line())
    return refits


def refits_markdown(refits: Sequence[Refit]) -> str:
    if not refits:
        return "Every scope calibration is at least as new as its collection."
    lines = ["| scope | model | outcome | detail |", "|---|---|---|---|"]
    lines += [f"| {r.kb_scope} | {r.model_id} | {r.outcome} | {r.detail} |" for r in refits]
    return "\n".join(lines)


@flow(name="calibration-refresh")
def calibration_refresh_flow(home: str | None = None, scope: str | None = None) -> State:
    """Refit the scope calibrations fitted before their collection was built (every scope, or
    one); Failed when one could not be refitted (it is kept, and status flags it)."""
    settings = Settings(**({"home": home} if home else {}))
    refits = refresh_calibrations_task(settings, [scope] if scope else None)
    create_markdown_artifact(
        key="calibration-refresh", markdown=refits_markdown(refits), description="kbflow calibration refresh"
    )
    data = [r.__dict__ for r in refits]
    bad = [r for r in refits if r.outcome != "refitted"]
    if bad:
        return Failed(message=f"{len(bad)} calibration(s) not refitted", data=data)
    return Completed(message=f"{len(refits)} calibration(s) refitted", data=data)


def calibration_deployments(home: str | None, cron: str) -> list[Any]:
    params = {"home": home} if home else {}
    name = "kbflow-calibration-refresh"
    return [calibration_refresh_flow.to_deployment(name=name, cron=cron, parameters=params)]


def calibration_deployments_summary(home: str | None, cron: str) -> list[dict[str, Any]]:
    return [
        deployment_summary(calibration_refresh_flow.name, d, cron)
        for d in calibration_deployments(home, cron)
    ]
