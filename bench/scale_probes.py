"""The measuring half of bench/scale.py: each measurement runs in a child process (`scale.py
--child KIND …`, fake embeddings there too) whose process tree's resident memory is watched."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

SCALE = Path(__file__).with_name("scale.py")
DIM = 384
MEM_LIMIT_MB = psutil.virtual_memory().total / 2**20 * 0.8  # scale.py --mem-limit-mb sets it


class OutOfMemory(RuntimeError):
    """A measured process passed --mem-limit-mb: it was stopped there, cleanly."""


def _tree_rss_mb(proc: psutil.Process) -> float:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def child(kind: str, *args: str, env: dict[str, str] | None = None, server: int | None = None) -> dict:
    """Run `kind` in a child process (fake embeddings there too), watching the resident memory
    of its process tree, and of the Milvus server process `server` apart: past the limit
    (together) both are killed and OutOfMemory names the figure."""
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, str(SCALE), "--child", kind, *args], stdout=out, stderr=err, env=env
        )
        watched, peak = psutil.Process(proc.pid), 0.0
        milvus, milvus_peak = (psutil.Process(server) if server else None), 0.0
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                peak = max(peak, _tree_rss_mb(watched))
                milvus_peak = max(milvus_peak, _tree_rss_mb(milvus)) if milvus else 0.0
            if peak + milvus_peak > MEM_LIMIT_MB:
                for p in [*watched.children(recursive=True), watched, *([milvus] if milvus else [])]:
                    with contextlib.suppress(psutil.Error):
                        p.kill()
                proc.wait()
                raise OutOfMemory(f"{kind}: resident memory passed {MEM_LIMIT_MB:,.0f} MB; stopped")
            time.sleep(0.2)
        out.seek(0), err.seek(0)
        text = out.read().decode()
        assert proc.returncode == 0, err.read().decode()[-3000:]
    result = json.loads(text.strip().splitlines()[-1])
    result["tree_peak_rss_mb"] = round(peak)
    if milvus:
        result["milvus_peak_rss_mb"] = round(milvus_peak)
    return result


@contextlib.contextmanager
def lite_server(home: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """The home's Milvus Lite file served by its own process (as `kbflow serve` does), so a
    reindex's memory and Milvus's are measured apart: (its pid, the settings to reach it)."""
    from kbflow.flows.serve import start_milvus_lite_server

    proc, uri = start_milvus_lite_server(str(home / "milvus.db"))
    try:
        yield proc.pid, {"KBFLOW_MILVUS_URI": uri}
    finally:
        proc.terminate()
        proc.wait(120)


def child_reindex(root: str, home: str, full: str = "") -> None:
    """Reindex with fake embeddings; print seconds, chunks and seconds per stage (the parent
    watches the memory)."""
    from kbflow.core.settings import Settings
    from kbflow.ingest.reindex import reindex

    started = time.perf_counter()
    summary = reindex([root], settings=Settings(home=home), full=bool(full))
    seconds = time.perf_counter() - started
    out = {"seconds": seconds, "ok": summary.ok, "written": summary.chunks_written}
    print(json.dumps({**out, "stages": summary.stage_seconds}))


def reindex_run(root: Path, home: Path, full: bool = False) -> dict:
    """A reindex in a child process against the home's Milvus Lite file, served apart:
    `tree_peak_rss_mb` is kbflow's own memory, `milvus_peak_rss_mb` Milvus Lite's."""
    home.mkdir(parents=True, exist_ok=True)
    with lite_server(home) as (pid, env):
        return child("reindex", str(root), str(home), "full" if full else "", env=env, server=pid)


def cli_seconds(*args: str, home: Path) -> float | str:
    """Seconds a CLI command takes, or why it failed (the row keeps the other figures)."""
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kbflow.flows.cli", *args], capture_output=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode == 0:
        return round(seconds, 2)
    why = "killed (for memory?)" if done.returncode < 0 else done.stderr.decode()[-300:].strip()
    return f"failed after {seconds:.0f} s, exit {done.returncode}: {why}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def queries(words: list[str], n: int = 60) -> list[str]:
    rng = random.Random(3)
    return [" ".join(rng.sample(words[:2000], 5)) for _ in range(n)]


def lookups(home: Path, words: list[str]) -> dict[str, float]:
    """p50/p95 per mode through the Python API (fake query embeddings too), after a warm-up."""
    from kbflow.core.settings import Settings
    from kbflow.retrieval.lookup import get_retriever

    retriever = get_retriever(Settings(home=home))
    qs, out = queries(words), {}
    for mode in ("dense", "bm25", "hybrid"):
        retriever.lookup(qs[0], kb_scope="scale", mode=mode)
        times = []
        for q in qs:
            started = time.perf_counter()
            retriever.lookup(q, kb_scope="scale", mode=mode)
            times.append((time.perf_counter() - started) * 1000)
        out[f"{mode}_p50_ms"], out[f"{mode}_p95_ms"] = round(pct(times, 50), 1), round(pct(times, 95), 1)
    out.update(dense_recall(retriever, words))
    return out


def dense_recall(retriever, words: list[str], k: int = 10) -> dict:
    """The dense leg's recall@k against exact search over the same stored vectors (numpy): an
    approximate index that loses recall is no win (Milvus Lite's IVF_FLAT did, past one segment)."""
    import logging

    import numpy as np

    from kbflow.core import milvus_store as ms

    logging.getLogger("pymilvus").setLevel(logging.ERROR)  # the iterator warns of a client-side ts
    stores = retriever.stores
    target = stores.chunks.alias_target(ms.alias_for(stores.settings.collection_prefix, "scale"))
    ids, vecs = [], []
    it = stores.milvus.query_iterator(target, batch_size=5000, filter='kb_scope == "scale"',
                                      output_fields=["id", "dense"])
    while batch := it.next():
        ids.extend(r["id"] for r in batch)
        vecs.append(np.asarray([r["dense"] for r in batch], dtype=np.float32))
    it.close()
    data, keys = np.concatenate(vecs), np.asarray(ids)
    qv = stores.embedder.encode_queries(queries(words))
    times, hits = [], 0
    for q in qv:
        truth = set(keys[np.argsort(((data - q) ** 2).sum(axis=1))[:k]])
        started = time.perf_counter()
        got = stores.chunks.search(target, q.tolist(), scope="scale", limit=k)
        times.append((time.perf_counter() - started) * 1000)
        hits += len({row.id for row, _ in got} & truth)
    index = stores.milvus.describe_index(target, "dense")["index_type"]
    return {"dense_recall_at_10": round(hits / (k * len(qv)), 3), "dense_index": index,
            "store_dense_p50_ms": round(pct(times, 50), 1)}


def serve_run(home: Path, words: list[str], root: Path | None = None) -> dict[str, float]:
    """`kbflow serve` (fake query embeddings): seconds until /healthz answers, hybrid p50/p95
    over HTTP from one keep-alive client, and the peak RSS of the service with its Milvus child;
    with `root`, a no-change and a one-document-changed reindex while it runs (served_changes)."""
    from kbflow.flows.serve import free_port

    port = free_port()
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(SCALE), "--child", "serve", str(home), str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watched, peak = psutil.Process(proc.pid), 0.0
    try:
        ready = _wait_healthy(port, proc, started)
        conn, times = http.client.HTTPConnection("127.0.0.1", port, timeout=120), []
        for i, q in enumerate(queries(words)):
            body = json.dumps({"query": q, "kb_scope": "scale", "mode": "hybrid"})
            t = time.perf_counter()
            conn.request("POST", "/v1/lookup", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
            if i:  # the first is the warm-up
                times.append((time.perf_counter() - t) * 1000)
            peak = max(peak, _tree_rss_mb(watched))
        changes = served_changes(root, home) if root is not None else {}
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        **changes,
        "serve_ready_s": round(ready, 1),
        "serve_hybrid_p50_ms": round(pct(times, 50), 1),
        "serve_hybrid_p95_ms": round(pct(times, 95), 1),
        "serve_rss_mb": round(peak),
    }


def served_changes(root: Path, home: Path) -> dict:
    """A no-change and a one-document-changed reindex while `kbflow serve` holds the home: both
    write through its engine, whose collection is already loaded (a fresh engine loads it first)."""
    same = child("reindex", str(root), str(home))
    one = sorted((root / "cat01").glob("*.md"))[0]
    one.write_text(one.read_text(encoding="utf-8") + "\n## Changed while served\n\nOne more section.\n",
                   encoding="utf-8")
    changed = child("reindex", str(root), str(home))
    return {
        "served_nochange_s": round(same["seconds"], 2),
        "served_onechange_s": round(changed["seconds"], 2),
        "served_onechange_minus_nochange_s": round(changed["seconds"] - same["seconds"], 2),
        "served_onechange_stage_s": {k: round(v, 2) for k, v in changed["stages"].items() if v >= 0.05},
    }


def _wait_healthy(port: int, proc: subprocess.Popen, started: float) -> float:
    while time.perf_counter() - started < 600:
        assert proc.poll() is None, "kbflow serve exited before it was ready"
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return time.perf_counter() - started
        time.sleep(0.2)
    raise RuntimeError("kbflow serve did not answer /healthz within 600 s")


def raw_milvus(path: Path, n: int) -> dict[str, float]:
    """The floor beside kbflow's figures: a client alone on a fresh Milvus Lite file, the same
    number of 384-d vectors under the same index, inserted in 1,000s, then 60 searches."""
    import numpy as np

    from kbflow.core import milvus_store as ms
    from kbflow.core.alias_book import has_native_aliases
    from kbflow.core.milvus_store import create_vector_only_collection, open_client

    client = open_client(str(path))
    create_vector_only_collection(client, "raw", DIM)
    rng = np.random.default_rng(5)
    started = time.perf_counter()
    for lo in range(0, n, 1000):
        v = rng.standard_normal((min(1000, n - lo), DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        client.insert("raw", [{"id": lo + i, "dense": row.tolist()} for i, row in enumerate(v)])
    client.flush("raw")
    insert = time.perf_counter() - started
    client.load_collection("raw")
    params = ms.dense_params(not has_native_aliases(client), 10)
    times = []
    for q in rng.standard_normal((61, DIM)).astype(np.float32):
        t = time.perf_counter()
        client.search("raw", [q.tolist()], limit=10, search_params=params)
        times.append((time.perf_counter() - t) * 1000)
    times = times[1:]
    client.close()
    return {
        "raw_insert_s": round(insert, 1),
        "raw_dense_p50_ms": round(pct(times, 50), 1),
        "raw_dense_p95_ms": round(pct(times, 95), 1),
    }
