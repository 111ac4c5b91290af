"""Parallel embedding on a 2-worker local Dask cluster through Prefect: same results as the
sequential run."""

from __future__ import annotations

import numpy as np
import pytest

from kbflow.core import milvus_store as ms
from kbflow.core.settings import Settings
from kbflow.core.stores import open_stores
from kbflow.core.validation import eq
from kbflow.flows.reindex import run_reindex_flow
from kbflow.ingest.reindex import reindex
from tests.conftest import write_doc


def vectors(settings: Settings, scope: str) -> dict[str, np.ndarray]:
    stores = open_stores(settings)
    alias = ms.alias_for(settings.collection_prefix, scope)
    stores.chunks.load(alias)
    target = stores.chunks.alias_target(alias)
    rows = stores.milvus.query(target, filter=eq("kb_scope", scope), output_fields=["id", "dense", "text"])
    return {r["id"]: (np.asarray(r["dense"], dtype=np.float32), r["text"]) for r in rows}


async def _embed_task_runs() -> int:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    async with get_client() as client:
        runs = await client.read_task_runs(
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_="embed-batch"))
        )
    return len(runs)


def test_dask_embedding_matches_sequential(tmp_path, prefect_harness, monkeypatch, capfd):
    import asyncio

    monkeypatch.setenv("KBFLOW_EMBEDDING_BATCH_SIZE", "4")  # 24 chunks -> 6 batches over 2 workers
    docs = tmp_path / "docs"
    for i in range(12):
        write_doc(
            docs,
            f"d{i}.md",
            source=f"doc-{i}",
            scope="par",
            body=f"# Runbook {i}\n\n## Symptom\n\nService {i} times out talking to shard {i * 7}.\n\n"
            f"## Fix\n\nRestart worker pool {i} and raise the timeout to {i + 30} seconds.\n",
        )
    # a Chinese scope too: its batches go to the workers with its own model (multilingual-e5-small)
    for i, topic in enumerate(("数据库连接池耗尽", "磁盘空间已满", "消费者组延迟增长")):
        body = f"# {topic}\n\n## 现象\n\n线上服务出现{topic}，需要尽快排查原因并处理。\n"
        write_doc(docs, f"zh{i}.md", source=f"zh-{i}", scope="par-zh", breadcrumb="运维 > 故障", body=body,
                  extra="language: zh")
    seq = Settings(home=tmp_path / "seq", embedding_batch_size=4)
    par = Settings(home=tmp_path / "par", embedding_batch_size=4)
    sequential = reindex([docs], settings=seq)
    capfd.readouterr()
    ok, parallel = run_reindex_flow([str(docs)], None, False, str(par.home), task_runner="dask")
    assert ok and parallel["added"] == sequential.added == 15
    printed = "".join(capfd.readouterr())
    # the local cluster closes after its client: a successful run prints no traceback
    assert "Traceback" not in printed and "CommClosedError" not in printed
    assert asyncio.run(_embed_task_runs()) >= 6
    assert parallel["chunks_embedded"] == sequential.chunks_embedded == 27
    assert parallel["scopes"]["par-zh"]["chunks_embedded"] == 3
    for scope in ("par", "par-zh"):
        a, b = vectors(seq, scope), vectors(Settings(home=par.home), scope)
        assert a.keys() == b.keys()
        for key in a:
            assert a[key][1] == b[key][1]
            np.testing.assert_allclose(a[key][0], b[key][0], atol=1e-5)


def test_dask_workers_sets_the_local_cluster_size(capsys):
    from distributed import Client

    from kbflow.flows.cli import build_parser
    from kbflow.flows.reindex import dask_cluster

    args = build_parser().parse_args(["reindex", "docs", "--task-runner", "dask", "--dask-workers", "1"])
    assert args.dask_workers == 1
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reindex", "docs", "--dask-workers", "0"])
    assert "must be at least 1" in capsys.readouterr().err
    with dask_cluster(None, 1) as address, Client(address) as client:
        assert len(client.scheduler_info()["workers"]) == 1
