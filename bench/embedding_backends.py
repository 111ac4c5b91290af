"""Embedding backends side by side: torch fp32, onnx fp32 and onnx-int8, in one run.

Speed: each backend encodes exactly the chunk texts `bench/ingest.py` reindexes (generated
runbooks, ~1,000 chunks) with the threads a reindex uses, and 100 single queries with the one
thread a lookup uses. Quality: each backend indexes and evaluates the golden corpus
(`kbflow eval --live`) and CACM (`kbflow eval --beir ... --depth 100`) in its own home, so
vectors of two backends never meet. Reindex: `kbflow reindex` of 200 generated runbooks in a
fresh home per backend, whole process, as a user runs it: first with an empty export cache (the
export counted), then in another fresh home that finds the export the first one left in the user's
cache. Targets: onnx-int8 encodes >= 2x faster than torch fp32, reindexes a new home >= 2x faster,
and loses <= 1 point nDCG@10 on either set.

    python bench/embedding_backends.py [--docs 260] [--only speed|reindex|quality] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import make_corpus, parsed_corpus  # noqa: E402
from bench.quality_ablation import cacm_row, golden_row  # noqa: E402
from kbflow.core.embedder import Embedder  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402

BACKENDS = ("torch", "onnx", "onnx-int8")
QUERIES = [
    "kafka consumer lag keeps growing",
    "how do I rotate the TLS certificate on the gateway",
    "pod crash looping after deploy",
    "replica lag on the read database",
    "redis eviction storm memory",
]


def speed(work: Path, docs: int) -> dict[str, dict[str, float]]:
    root = work / "corpus"
    root.mkdir(parents=True, exist_ok=True)
    make_corpus(root, docs, 4, 110)
    settings = Settings(home=work / "speed-home")
    texts, _ = parsed_corpus(root, settings)
    cores = os.cpu_count() or 1
    print(f"speed: {len(texts)} chunks, {sum(map(len, texts)) / len(texts):.0f} chars avg, {cores} threads")
    out: dict[str, dict[str, float]] = {}
    for backend in BACKENDS:
        t = time.perf_counter()
        emb = Embedder(backend=backend, cache_root=settings.resolved_models_dir)
        emb.encode(texts[:16], cores)
        load = time.perf_counter() - t
        t = time.perf_counter()
        emb.encode(texts, cores)
        elapsed = time.perf_counter() - t
        lat = []
        for q in QUERIES * 20:
            s = time.perf_counter()
            emb.encode([q], 1)
            lat.append((time.perf_counter() - s) * 1000)
        out[backend] = {
            "chunks_per_s": round(len(texts) / elapsed, 1),
            "query_p50_ms": round(statistics.median(lat), 2),
            "first_load_s": round(load, 2),
        }
        print(f"  {backend:10s} {out[backend]}")
    return out


def reindex_runs(work: Path, docs: int = 200) -> dict[str, dict[str, float]]:
    """Whole-process seconds of `kbflow reindex` in fresh homes: the first on an empty export
    cache, the next with the export the first one left (every home after a user's first)."""
    root = work / "reindex-corpus"
    root.mkdir(parents=True, exist_ok=True)
    make_corpus(root, docs, 4, 110)
    out: dict[str, dict[str, float]] = {}
    for backend in BACKENDS:
        env = {k: v for k, v in os.environ.items() if k != "KBFLOW_MODELS_DIR"}
        env.update(XDG_CACHE_HOME=str(work / f"cache-{backend}"), KBFLOW_EMBEDDING_BACKEND=backend,
                   HF_HUB_OFFLINE="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
        seconds = []
        for home in ("first", "next"):
            env["KBFLOW_HOME"] = str(work / f"home-{backend}-{home}")
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "kbflow.flows.cli", "reindex", str(root)],
                                  env=env, capture_output=True, text=True)
            seconds.append(time.perf_counter() - t)
            assert done.returncode == 0, done.stderr[-2000:]
        first, new = (round(x, 1) for x in seconds)
        out[backend] = {"reindex_first_home_s": first, "reindex_new_home_s": new}
        print(f"  {backend:10s} {out[backend]}")
    return out


def quality(home: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for backend in BACKENDS:
        env = {"KBFLOW_EMBEDDING_BACKEND": backend}
        g, g_cmd = golden_row(home / backend, env, "hybrid")
        c, c_cmd = cacm_row(home / backend, env, "hybrid")
        out[backend] = {
            "golden_ndcg@10": g["nDCG@10"],
            "golden_false_no_ev": g["false no-ev"],
            "cacm_ndcg@10": c["nDCG@10"],
            "cacm_recall@100": c["R@100"],
        }
        print(f"  {backend:10s} {out[backend]}\n    KBFLOW_EMBEDDING_BACKEND={backend} {g_cmd}\n    {c_cmd}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=260)
    ap.add_argument("--only", choices=["speed", "reindex", "quality"])
    ap.add_argument("--home", type=Path, help="keep homes (and embedding caches) here between runs")
    args = ap.parse_args()
    work = args.home or Path(tempfile.mkdtemp(prefix="kbflow-backends-"))
    metrics: dict[str, dict[str, float]] = {b: {} for b in BACKENDS}
    if args.only in (None, "speed"):
        for b, m in speed(work, args.docs).items():
            metrics[b].update(m)
    if args.only in (None, "reindex"):
        for b, m in reindex_runs(work / "reindex").items():
            metrics[b].update(m)
    if args.only in (None, "quality"):
        for b, m in quality(work / "quality").items():
            metrics[b].update(m)
    ratios: dict[str, float] = {}
    base = metrics["torch"]
    for b in BACKENDS[1:]:
        m = metrics[b]
        if "chunks_per_s" in m:
            ratios[f"{b}_encode_speedup"] = round(m["chunks_per_s"] / base["chunks_per_s"], 2)
            ratios[f"{b}_query_speedup"] = round(base["query_p50_ms"] / m["query_p50_ms"], 2)
        for key in ("reindex_new_home_s", "reindex_first_home_s"):
            if key in m:
                ratios[f"{b}_{key[:-2]}_speedup"] = round(base[key] / m[key], 2)
        for key in ("golden_ndcg@10", "cacm_ndcg@10"):
            if key in m:
                ratios[f"{b}_{key}_points_lost"] = round((base[key] - m[key]) * 100, 2)
    targets = {
        "onnx-int8_encode_speedup": ">= 2",
        "onnx-int8_reindex_new_home_speedup": ">= 2 (2.19 at commit 2509310, 1.26 reported since)",
        "onnx-int8_*_points_lost": "<= 1",
    }
    print(
        json.dumps({"bench": "embedding_backends", "metrics": metrics, "ratios": ratios, "targets": targets})
    )
    speed_ok = all(ratios.get(f"onnx-int8_{k}_speedup", 2) >= 2 for k in ("encode", "reindex_new_home"))
    quality_ok = all(v <= 1 for k, v in ratios.items() if k.startswith("onnx-int8") and "points_lost" in k)
    return 0 if speed_ok and quality_ok else 1


if __name__ == "__main__":
    sys.exit(main())
