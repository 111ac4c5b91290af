"""Dask fan-out benchmark: the same cold full reindex (real model, empty embedding cache) run
in-process, then as the `reindex-parallel` Prefect flow on a local Dask cluster of 1 and of 2
workers (one process, one thread each), side by side in one run.

It prints wall seconds, the embed stage's seconds (from the summary's `stage_seconds`) and the
2-worker / 1-worker speed-up. On a machine with two cores the ceiling is 2x, less what the flow's
own process (chunking, Milvus, SQL) takes from the same cores; on many machines each worker adds
its cores.

    python bench/dask_workers.py [--docs 150]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale import write_corpus  # noqa: E402


def run(root: Path, home: Path, *flags: str) -> dict:
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "kbflow.flows.cli",
        "reindex",
        str(root),
        "--home",
        str(home),
        "--json",
        *flags,
    ]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["chunks_embedded"] > 0, "the embedding cache was not cold"
    embed = summary["stage_seconds"].get("embed", 0.0)
    return {"wall_s": round(seconds, 1), "embed_s": round(embed, 1), "chunks": summary["chunks_embedded"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=150, help="generated documents (about 4.4 chunks each)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbflow-dask-"))
    try:
        root = write_corpus(work / "docs", args.docs)
        run(write_corpus(work / "warm", 2, seed=5), work / "warm-home")  # model files warm on disk
        rows = {
            "in_process": run(root, work / "h0"),
            "dask_1_worker": run(root, work / "h1", "--task-runner", "dask", "--dask-workers", "1"),
            "dask_2_workers": run(root, work / "h2", "--task-runner", "dask", "--dask-workers", "2"),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, r in rows.items():
        print(f"{name:15} wall {r['wall_s']:6.1f} s   embed {r['embed_s']:6.1f} s   {r['chunks']} chunks")
    one, two = rows["dask_1_worker"], rows["dask_2_workers"]
    ratios = {
        "embed_speedup_2_over_1": round(one["embed_s"] / two["embed_s"], 2),
        "wall_speedup_2_over_1": round(one["wall_s"] / two["wall_s"], 2),
    }
    out = {
        "bench": "dask_workers",
        "metrics": {**rows, "cores": os.cpu_count()},
        "ratios": ratios,
        "targets": {"embed_speedup_2_over_1": f"> 1 (ceiling {min(2, os.cpu_count() or 1)} here)"},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
