"""What /metrics costs a lookup: `kbflow serve` with metrics on (`metrics_access = open`, scraped
every second, as a busy Prometheus would) and off, one client posting lookups back to back,
the two services alternated over several rounds on the same index (ON OFF ON OFF …) so drift
on a shared machine falls on both.

    python bench/serve_metrics.py [--docs 300] [--lookups 150] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import VOCAB  # noqa: E402
from bench.lookup import make_corpus  # noqa: E402
from bench.serve import REPO, Client, start_service  # noqa: E402
from kbflow.flows.serve import free_port  # noqa: E402


def p50_of_round(home: Path, access: str, queries: list[str]) -> float:
    port = free_port()
    proc = start_service(home, port, 0, "wait:2000", {"KBFLOW_METRICS_ACCESS": access})
    stop = threading.Event()

    def scrape() -> None:  # Prometheus at a 1 s interval: far more often than the usual 15 s
        while not stop.wait(1.0):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics")
            conn.getresponse().read()

    scraper = threading.Thread(target=scrape, daemon=True)
    try:
        client = Client(port)
        for q in queries[:10]:  # warm
            client.lookup(q)
        if access != "off":
            scraper.start()
        times = []
        for q in queries:
            status, ms, _ = client.lookup(q)
            assert status == 200, status
            times.append(ms)
        return statistics.median(times)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--lookups", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(7)
    work = Path(tempfile.mkdtemp(prefix="kbflow-metrics-bench-"))
    root, home = work / "corpus", work / "home"
    root.mkdir()
    make_corpus(root, args.docs, rng)
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    cli = [sys.executable, "-m", "kbflow.flows.cli", "reindex", str(root)]
    built = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    queries = [" ".join(rng.sample(VOCAB, rng.randint(3, 7))) for _ in range(args.lookups)]
    on, off = [], []
    try:
        for r in range(args.rounds):
            on.append(p50_of_round(home, "open", queries))
            off.append(p50_of_round(home, "off", queries))
            print(f"round {r + 1}: p50 with metrics {on[-1]:.1f} ms, without {off[-1]:.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = statistics.median(on) / statistics.median(off)
    out = {
        "bench": "serve_metrics",
        "metrics": {"p50_ms_on": [round(x, 1) for x in on], "p50_ms_off": [round(x, 1) for x in off],
                    "lookups_per_round": args.lookups, "scrape_interval_s": 1.0, "cpus": os.cpu_count()},
        "ratios": {"p50_on_over_off": round(ratio, 3)},
        "targets": {"p50_on_over_off": "<= 1.02"},
    }
    print(json.dumps(out))
    return 0 if ratio <= 1.02 else 1


if __name__ == "__main__":
    sys.exit(main())
