"""Prefect `reindex` flow: the same `ingest.reindex` code, one retried task per scope.

Run it with `python -m flows.reindex PATH... [--scope S] [--full]` or `kbflow reindex --prefect`.
The run ends Failed (with the summary as its result and artifact) when any document failed.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from flows.common import summary_markdown
from ingest.reindex import ReindexSummary, index_scope, reindex
from ingest.sources import ScanResult
from kbcore.settings import Settings
from kbcore.stores import Stores, is_transient, open_stores

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _retry_transient(_task: Any, _run: Any, state: State) -> bool:
    try:
        state.result()
    except Exception as exc:  # the task's own exception
        return is_transient(exc)
    return False


@task(
    name="index-scope",
    retries=3,
    retry_delay_seconds=[2, 10, 30],
    retry_condition_fn=_retry_transient,
    cache_policy=NO_CACHE,
)
def index_scope_task(
    stores: Stores, scope: str, scan_result: ScanResult, *, full: bool, progress: Any = None
):
    """Plan + apply one scope. Planning rereads the record table, so a retry converges."""
    logger = get_run_logger()
    artifact_id = create_progress_artifact(progress=0.0, key=None, description=f"reindex scope {scope}")
    last_logged: dict[str, int] = {}

    def report(stage: str, done: int, total: int) -> None:
        pct = int(100 * done / max(total, 1))
        if pct // 10 != last_logged.get(stage, -1):
            last_logged[stage] = pct // 10
            logger.info("scope %s: %s %d/%d chunks (%d%%)", scope, stage, done, total, pct)
            if stage == "embed":
                update_progress_artifact(artifact_id, progress=float(min(pct, 100)))

    result = index_scope(stores, scope, scan_result, full=full, progress=report)
    update_progress_artifact(artifact_id, progress=100.0)
    return result


@flow(name="reindex")
def reindex_flow(
    roots: list[str], scope: str | None = None, full: bool = False, home: str | None = None
) -> State:
    """Reindex Markdown roots into Milvus + SQL; Failed when any document failed."""
    logger = get_run_logger()
    settings = Settings(**({"home": home} if home else {}))
    stores = open_stores(settings)

    def run_scope(*args: Any, progress: Any = None, **kwargs: Any):
        # the task reports progress to the run's logs and a progress artifact itself
        return index_scope_task(*args, **kwargs)

    summary: ReindexSummary = reindex(
        roots, scope=scope, full=full, settings=settings, stores=stores, scope_runner=run_scope
    )
    create_markdown_artifact(
        key="reindex-summary", markdown=summary_markdown(summary), description="kbflow reindex summary"
    )
    data = summary.to_dict()
    logger.info(
        "reindex %s: %d added, %d updated, %d unchanged, %d removed, %d failed, %d chunks embedded",
        summary.mode,
        summary.added,
        summary.updated,
        summary.unchanged,
        summary.removed,
        len(summary.failed),
        summary.chunks_embedded,
    )
    if not summary.ok:
        for f in summary.failed:
            logger.error("failed: %s: %s", f["path"], f["reason"])
        return Failed(message=f"{len(summary.failed)} document(s) failed; the rest were indexed", data=data)
    return Completed(message="reindex complete", data=data)


def run_reindex_flow(roots: list[str], scope: str | None, full: bool, home: str | None) -> tuple[bool, dict]:
    """Run the flow and return (ok, summary dict) without raising on a Failed run."""
    state = reindex_flow(roots, scope=scope, full=full, home=home, return_state=True)
    data = state.result(raise_on_failure=False)
    if isinstance(data, BaseException):
        raise data
    return state.is_completed(), data


if __name__ == "__main__":
    from flows.cli import main

    sys.exit(main(["reindex", "--prefect", *sys.argv[1:]]))
