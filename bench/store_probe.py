"""The embedded store alone, at the size of an existing home: how long a fresh engine takes to
load the scope's collection (what a reindex without `kbflow serve` pays before its first write),
the engine's memory once loaded, and dense / BM25 / both-legs latency through kbflow's store.

It reads the newest physical collection of the home, aliased or not, so a `bench/scale.py`
home whose rebuild was stopped part way can still be measured (that is how the 655k figures in
docs/sizing.md were taken). Query vectors are random unit vectors, query texts words of the
scale bench's vocabulary: latency figures, not quality ones.

    python bench/store_probe.py HOME [--scope scale] [--queries 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale import vocabulary  # noqa: E402
from bench.scale_probes import pct, queries  # noqa: E402
from kbflow.core.milvus_store import MilvusChunkStore, open_client  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402


def latency(run: Callable[[int], object], n: int) -> tuple[float, float]:
    """(p50, p95) in ms of run(0..n-1), after one call not counted."""
    run(0)
    times = []
    for i in range(n):
        started = time.perf_counter()
        run(i)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1), round(pct(times, 95), 1)


def engine_rss_mb() -> float:
    procs = [p for p in psutil.Process().children(recursive=True) if "milvus_lite" in " ".join(p.cmdline())]
    return sum(p.memory_info().rss for p in procs) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("home", type=Path)
    ap.add_argument("--scope", default="scale")
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args()
    store = MilvusChunkStore(open_client(str(args.home / "milvus.db")))
    name = sorted(n for n in store.collections() if "__" in n)[-1]
    rows = int(store.client.get_collection_stats(name)["row_count"])
    started = time.perf_counter()
    store.load(name)
    load_s = time.perf_counter() - started
    k, n = Settings(home=args.home).retrieve_k, args.queries
    texts = queries(vocabulary(), n)
    vectors = [(v / np.linalg.norm(v)).tolist() for v in np.random.default_rng(1).standard_normal((n, 384))]
    legs = ThreadPoolExecutor(2)

    def both(i: int) -> None:  # as a lookup sends them: together
        sparse = legs.submit(store.text_search, name, texts[i], scope=args.scope, limit=k)
        store.search(name, vectors[i], scope=args.scope, limit=k)
        sparse.result()

    metrics = {
        "rows": rows,
        "load_s": round(load_s, 1),
        "engine_rss_mb_loaded": round(engine_rss_mb()),
        "dense_p50_p95_ms": latency(lambda i: store.search(name, vectors[i], scope=args.scope, limit=k), n),
        "bm25_p50_p95_ms": latency(lambda i: store.text_search(name, texts[i], scope=args.scope, limit=k), n),
        "both_legs_p50_p95_ms": latency(both, n),
        "retrieve_k": k,
    }
    store.close()
    print("  ".join(f"{key} {value}" for key, value in metrics.items()))
    per_million = {"load_s_per_million_rows": round(load_s / rows * 1e6, 1) if rows else None}
    targets = {"both_legs_p95_ms": "<= 285 at 1M rows (300 ms a lookup, less kbflow's ~15 ms)"}
    print(json.dumps({"bench": "store_probe", "metrics": metrics, "ratios": per_million, "targets": targets}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
