"""Prefect `reindex` flow: the library's stages as tasks, so a run shows them one by one.

`scan` reads the roots; then per scope `plan` diffs the scan against the records and `apply`
writes the plan (each retried on transient errors only: a lost connection, a busy database).
A retried apply starts from the same plan; the scope lock keeps the records as planned.
Run it with `kbflow reindex PATH... --prefect [--scope S] [--full]`, or as a deployment
(`kbflow serve-flows --reindex ROOT@CRON`).
The run ends Failed (with the summary as its result and artifact) when any document failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from kbflow.core.models import ModelChoice
from kbflow.core.settings import Settings
from kbflow.core.stores import Stores, is_transient, keep_home_backend, open_stores
from kbflow.core.timing import stage_clock
from kbflow.flows.calibration import refits_markdown, refresh_calibrations_task
from kbflow.flows.common import summary_markdown
from kbflow.ingest.planning import ScopePlan
from kbflow.ingest.reindex import (
    ReindexRun,
    ReindexSummary,
    ScopeSummary,
    apply_plan,
    finish,
    locked,
    plan,
    settle,
    start,
)
from kbflow.ingest.sources import Failure, ScanResult

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _retry_transient(_task: Any, _run: Any, state: State) -> bool:
    try:
        state.result()
    except Exception as exc:  # the task's own exception
        return is_transient(exc)
    return False


TRANSIENT = {
    "retries": 3,
    "retry_delay_seconds": [2, 10, 30],
    "retry_condition_fn": _retry_transient,
    "cache_policy": NO_CACHE,
}


@task(name="scan", **TRANSIENT)
def scan_task(
    roots: list[str], scope: str | None, full: bool, stores: Stores, allow_mass_delete: bool
) -> ReindexRun:
    """Read the roots and name the scopes to visit; nothing is written."""
    return start(roots, scope=scope, full=full, stores=stores, allow_mass_delete=allow_mass_delete)


@task(name="plan", task_run_name="plan-{scope}", **TRANSIENT)
def plan_task(stores: Stores, scope: str, scan: ScanResult, full: bool = False) -> ScopePlan:
    """What each document of the scope needs, from the records read afresh, and its model."""
    return plan(stores, scope, scan, full)


@task(name="apply", task_run_name="apply-{scope_plan.kb_scope}", **TRANSIENT)
def apply_task(
    stores: Stores, scope_plan: ScopePlan, *, full: bool, progress: Any = None
) -> tuple[ScopeSummary, list[Failure]]:
    """Write the plan. Progress goes to the run's logs and a progress artifact, and on to the
    run's callback (which keeps the scope locks alive on long runs)."""
    scope = scope_plan.kb_scope
    logger = get_run_logger()
    artifact_id = create_progress_artifact(progress=0.0, key=None, description=f"reindex scope {scope}")
    last_logged: dict[str, int] = {}

    def report(stage: str, done: int, total: int) -> None:
        pct = int(100 * done / max(total, 1))
        if pct // 10 != last_logged.get(stage, -1):
            last_logged[stage] = pct // 10
            logger.info("scope %s: %s %d/%d documents (%d%%)", scope, stage, done, total, pct)
            if stage == "embed":
                update_progress_artifact(artifact_id, progress=float(min(pct, 100)))
        if progress is not None:
            progress(stage, done, total)

    result = apply_plan(stores, scope_plan, full=full, progress=report)
    update_progress_artifact(artifact_id, progress=100.0)
    return result


@task(name="embed-batch", retries=2, retry_delay_seconds=[1, 5], cache_policy=NO_CACHE)
def embed_batch_task(
    texts: list[str], model: str, device: str, batch_size: int, backend: str = "torch", models_dir: str = ""
) -> np.ndarray:
    """Runs wherever the task runner puts it (a Dask worker): the model loads once per worker,
    on the flow's backend; an ONNX export is read from the home the flow already exported to."""
    from kbflow.core.embedder import get_embedder

    root = Path(models_dir) if models_dir else None
    return get_embedder(model, device, batch_size, backend, root).encode(texts, 1)


def fan_out_encoder(
    settings: Settings, model: ModelChoice | None = None
) -> Callable[[list[str]], np.ndarray]:
    """An encoder that splits texts into batches and submits each to the flow's task runner;
    `model` is the scope's (default: the settings'). A worker loads a model on its first batch
    for it, so a home that is English-only never loads the multilingual one."""
    size = settings.embedding_batch_size
    model = model or ModelChoice(settings.embedding_model, settings.embedding_backend)

    def encode(texts: list[str]) -> np.ndarray:
        futures = [
            embed_batch_task.submit(
                texts[i : i + size],
                model.name,
                settings.embedding_device,
                size,
                model.backend,
                str(settings.resolved_models_dir.resolve()),
            )
            for i in range(0, len(texts), size)
        ]
        return np.concatenate([f.result() for f in futures])  # the cache only asks for missing texts

    return encode


def _run_scopes(run: ReindexRun, parallel: bool) -> None:
    """Plan and apply every scope under the run's locks. With `parallel`, apply runs in the
    flow itself and only its embedding batches are tasks (a task cannot fan out to the flow's
    task runner)."""
    with locked(run, None) as heartbeat:
        for scope in run.scopes:
            try:
                scope_plan = plan_task(run.stores, scope, run.scan, run.full)
                if parallel:
                    model = scope_plan.model
                    if scope_plan.docs:  # an ONNX backend is exported here once, before workers read it
                        _ = run.stores.embedder_for(model) if model else run.stores.embedder
                    encoder = fan_out_encoder(run.stores.settings, model)
                    outcome = apply_plan(run.stores, scope_plan, full=run.full, progress=heartbeat,
                                         encoder=encoder)
                else:
                    outcome = apply_task(run.stores, scope_plan, full=run.full, progress=heartbeat)
            except Exception as exc:  # reported against the scope; the other scopes go on
                outcome = exc
            settle(run, scope, outcome)


def _reindex(
    roots: list[str],
    scope: str | None,
    full: bool,
    home: str | None,
    parallel: bool,
    allow_mass_delete: bool = False,
    settings: dict | None = None,
) -> State:
    values = {**(settings or {}), **({"home": home} if home else {})}
    with stage_clock():
        stores = keep_home_backend(open_stores(Settings(**values)))
        run = scan_task(roots, scope, full, stores, allow_mass_delete)
        _run_scopes(run, parallel)
        summary = finish(run)
    # a rebuilt scope's calibration describes chunks that are gone: fitted again on its recipe
    refits = refresh_calibrations_task(stores.settings, list(summary.scopes))
    markdown = summary_markdown(summary)
    if refits:
        markdown += "\n\n## Gate calibrations\n\n" + refits_markdown(refits)
    create_markdown_artifact(key="reindex-summary", markdown=markdown, description="kbflow reindex summary")
    _log_summary(summary)
    data = {**summary.to_dict(), "calibrations": [r.__dict__ for r in refits]}
    if not summary.ok:
        return Failed(message=f"{len(summary.failed)} document(s) failed; the rest were indexed", data=data)
    return Completed(message="reindex complete", data=data)


def _log_summary(summary: ReindexSummary) -> None:
    logger = get_run_logger()
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
    for f in summary.failed:
        logger.error("failed: %s: %s", f["path"], f["reason"])


@flow(name="reindex")
def reindex_flow(
    roots: list[str],
    scope: str | None = None,
    full: bool = False,
    home: str | None = None,
    allow_mass_delete: bool = False,
    settings: dict | None = None,
) -> State:
    """Reindex Markdown roots into Milvus + SQL; Failed when any document failed or a removal
    was refused by the delete guards (allow_mass_delete confirms it). `settings` overrides the
    environment's and the settings file's (the CLI passes its flags: --analyzer, --model)."""
    return _reindex(roots, scope, full, home, False, allow_mass_delete, settings)


@flow(name="reindex-parallel")
def reindex_parallel_flow(
    roots: list[str],
    scope: str | None = None,
    full: bool = False,
    home: str | None = None,
    allow_mass_delete: bool = False,
    settings: dict | None = None,
) -> State:
    """The reindex flow with embedding batches fanned out to the task runner (e.g. Dask)."""
    return _reindex(roots, scope, full, home, True, allow_mass_delete, settings)


@contextmanager
def dask_cluster(address: str | None, workers: int = 2) -> Iterator[str]:
    """The scheduler address to run on: the given one, or a local cluster this process starts
    and closes itself once the flow (and with it the runner's client) is done. Left to the task
    runner, the cluster could close while its client was still connected, which printed a
    CommClosedError traceback after a successful run."""
    if address:
        yield address
        return
    import logging

    from distributed import LocalCluster

    logging.getLogger("distributed").setLevel(logging.WARNING)  # a line per worker event is noise
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close(timeout=30)


def run_reindex_flow(
    roots: list[str],
    scope: str | None,
    full: bool,
    home: str | None,
    task_runner: str = "default",
    dask_address: str | None = None,
    allow_mass_delete: bool = False,
    settings: dict | None = None,
    dask_workers: int = 2,
) -> tuple[bool, dict]:
    """Run the flow and return (ok, summary dict) without raising on a Failed run."""
    kwargs = {"scope": scope, "full": full, "home": home, "allow_mass_delete": allow_mass_delete}
    kwargs["settings"] = settings
    if task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        with dask_cluster(dask_address, dask_workers) as address:
            chosen = reindex_parallel_flow.with_options(task_runner=DaskTaskRunner(address=address))
            state = chosen(roots, **kwargs, return_state=True)
    else:
        state = reindex_flow(roots, **kwargs, return_state=True)
    data = state.result(raise_on_failure=False)
    if isinstance(data, BaseException):
        raise data
    return state.is_completed(), data
