"""Prefect `reindex` flow: the same `ingest.reindex` code, one retried task per scope.

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

from kbflow.core.settings import Settings
from kbflow.core.stores import Stores, is_transient, keep_home_backend, open_stores
from kbflow.flows.common import summary_markdown
from kbflow.ingest.reindex import ReindexSummary, index_scope, reindex
from kbflow.ingest.sources import ScanResult

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
    """Plan + apply one scope. Planning rereads the record table, so a retry converges.
    `progress` is the run's own callback (it keeps the scope locks' heartbeat going)."""
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
        if progress is not None:
            progress(stage, done, total)

    result = index_scope(stores, scope, scan_result, full=full, progress=report)
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


def fan_out_encoder(settings: Settings) -> Callable[[list[str]], np.ndarray]:
    """An encoder that splits texts into batches and submits each to the flow's task runner."""
    size = settings.embedding_batch_size

    def encode(texts: list[str]) -> np.ndarray:
        futures = [
            embed_batch_task.submit(
                texts[i : i + size],
                settings.embedding_model,
                settings.embedding_device,
                size,
                settings.embedding_backend,
                str(settings.resolved_models_dir.resolve()),
            )
            for i in range(0, len(texts), size)
        ]
        return np.concatenate([f.result() for f in futures])  # the cache only asks for missing texts

    return encode


def _reindex(
    roots: list[str],
    scope: str | None,
    full: bool,
    home: str | None,
    parallel: bool,
    allow_mass_delete: bool = False,
) -> State:
    logger = get_run_logger()
    stores = keep_home_backend(open_stores(Settings(**({"home": home} if home else {}))))
    settings = stores.settings

    if parallel:
        _ = stores.embedder  # an ONNX backend is exported here once, before workers read it
        encoder = fan_out_encoder(settings)

        def run_scope(*args: Any, **kwargs: Any):
            # in the flow's process (the stores stay here); only embedding batches travel
            return index_scope(*args, **kwargs, encoder=encoder)
    else:

        def run_scope(*args: Any, **kwargs: Any):
            # the task reports progress to the run's logs and a progress artifact, and passes
            # it on to the run's callback, which heartbeats the scope locks on long runs
            return index_scope_task(*args, **kwargs)

    summary: ReindexSummary = reindex(
        roots,
        scope=scope,
        full=full,
        settings=settings,
        stores=stores,
        scope_runner=run_scope,
        allow_mass_delete=allow_mass_delete,
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


@flow(name="reindex")
def reindex_flow(
    roots: list[str],
    scope: str | None = None,
    full: bool = False,
    home: str | None = None,
    allow_mass_delete: bool = False,
) -> State:
    """Reindex Markdown roots into Milvus + SQL; Failed when any document failed or a removal
    was refused by the delete guards (allow_mass_delete confirms it)."""
    return _reindex(roots, scope, full, home, parallel=False, allow_mass_delete=allow_mass_delete)


@flow(name="reindex-parallel")
def reindex_parallel_flow(
    roots: list[str],
    scope: str | None = None,
    full: bool = False,
    home: str | None = None,
    allow_mass_delete: bool = False,
) -> State:
    """The reindex flow with embedding batches fanned out to the task runner (e.g. Dask)."""
    return _reindex(roots, scope, full, home, parallel=True, allow_mass_delete=allow_mass_delete)


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
) -> tuple[bool, dict]:
    """Run the flow and return (ok, summary dict) without raising on a Failed run."""
    kwargs = {"scope": scope, "full": full, "home": home, "allow_mass_delete": allow_mass_delete}
    if task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        with dask_cluster(dask_address) as address:
            chosen = reindex_parallel_flow.with_options(task_runner=DaskTaskRunner(address=address))
            state = chosen(roots, **kwargs, return_state=True)
    else:
        state = reindex_flow(roots, **kwargs, return_state=True)
    data = state.result(raise_on_failure=False)
    if isinstance(data, BaseException):
        raise data
    return state.is_completed(), data
