"""Service benchmark: `kbflow serve` on 127.0.0.1 under 1 to 100 concurrent clients, for each
admission rule asked for (side by side, one run).

Builds an index of generated runbooks, starts `kbflow serve` on it (the service owns the Milvus
Lite file and announces its endpoint), then in one run:
  (1) in-process `lookup_knowledge` against the same store, interleaved query by query with the
      same lookup over HTTP from one client: service p50 / in-process p50 (target <= 1.3);
  (2) for each client count, clients post lookups back to back for a fixed time: throughput,
      p50/p95/p99 latency of answered requests, the 503 share (overload answered at once, with
      Retry-After; clients then wait as asked), errors (anything else: target 0), and the CPU
      one answered lookup cost the service's process tree and the clients. Lookups/s at 16
      clients against cores / the service's CPU per lookup at 1 client: target >= 0.7;
  (3) a burst: --burst clients post one lookup each at the same instant (3 rounds): the 503
      share and the p95 of the answered ones. The same for every admission rule:
      `count:N` = at most N waiting, no wait rule (the rule before serve_max_wait_ms);
      `wait:MS` = admitted while the expected wait is within MS (serve_max_wait_ms).

    python bench/serve.py [--docs 300] [--seconds 8] [--clients 1,4,16,64,100]
                          [--admission count:16,wait:2000] [--burst 100] [--hog 1]
"""

from __future__ import annotations

import argparse
import contextlib
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
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import VOCAB  # noqa: E402
from bench.lookup import make_corpus, pct  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402
from kbflow.core.stores import close_all  # noqa: E402
from kbflow.flows.serve import free_port  # noqa: E402
from kbflow.retrieval.lookup import get_retriever  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


class Client:
    """One keep-alive HTTP connection, as an agent's client would hold."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def lookup(self, query: str) -> tuple[int, float, float]:
        """(status, milliseconds, seconds the server asked to wait before retrying)."""
        body = json.dumps({"query": query, "kb_scope": "bench"})
        t = time.perf_counter()
        try:
            self.conn.request("POST", "/v1/lookup", body, {"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            resp.read()
            status, retry = resp.status, float(resp.getheader("Retry-After") or 0)
        except (OSError, http.client.HTTPException):
            self.conn.close()
            status, retry = 0, 0.0
        return status, (time.perf_counter() - t) * 1000, retry


def admission_env(rule: str) -> dict[str, str]:
    kind, _, value = rule.partition(":")
    if kind == "count":
        return {"KBFLOW_SERVE_QUEUE": value, "KBFLOW_SERVE_MAX_WAIT_MS": "0"}
    if kind == "wait":
        return {"KBFLOW_SERVE_MAX_WAIT_MS": value}
    raise SystemExit(f"--admission: {rule!r} is neither count:N nor wait:MS")


def start_service(
    home: Path, port: int, workers: int, rule: str, extra: dict[str, str] | None = None
) -> subprocess.Popen:
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.update({**admission_env(rule), **(extra or {})})
    if workers:
        env["KBFLOW_SERVE_WORKERS"] = str(workers)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbflow.flows.cli", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("kbflow serve did not answer /healthz within 120 s")


def side_by_side(home: Path, port: int, queries: list[str]) -> tuple[float, float]:
    retriever = get_retriever(Settings(home=home))  # finds serve.json: the same Milvus child
    client = Client(port)
    for q in queries[:10]:
        retriever.lookup(q, kb_scope="bench")
        client.lookup(q)
    local, served = [], []
    for q in queries:
        t = time.perf_counter()
        retriever.lookup(q, kb_scope="bench")
        local.append((time.perf_counter() - t) * 1000)
        status, ms, _ = client.lookup(q)
        assert status == 200, status
        served.append(ms)
    return statistics.median(local), statistics.median(served)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) so far of a process and its children: serve, its workers and
    its Milvus engine."""
    root, total = psutil.Process(pid), 0.0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def load(port: int, clients: int, seconds: float, queries: list[str], server: int) -> dict[str, float]:
    """Clients post back to back for `seconds`; beside the latencies, the CPU one answered lookup
    cost the service (its whole process tree) and these client threads (the same cores)."""
    results: list[tuple[int, float, float]] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker(seed: int) -> None:
        rng, client, mine = random.Random(seed), Client(port), []
        while time.perf_counter() < stop:
            mine.append(client.lookup(rng.choice(queries)))
            if mine[-1][2]:  # a 503: back off as asked, as a well-behaved client does
                time.sleep(min(mine[-1][2], max(stop - time.perf_counter(), 0)))
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    cpu0, mine0, started = tree_cpu_s(server), time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    cpu, mine = tree_cpu_s(server) - cpu0, time.process_time() - mine0
    ok = [ms for status, ms, _ in results if status == 200]
    busy = [ms for status, ms, _ in results if status == 503]
    errors = len(results) - len(ok) - len(busy)
    return {
        "clients": clients,
        "answered_per_s": round(len(ok) / elapsed, 1),
        "p50_ms": round(statistics.median(ok), 1) if ok else None,
        "p95_ms": round(pct(ok, 95), 1) if len(ok) > 1 else None,
        "p99_ms": round(pct(ok, 99), 1) if len(ok) > 1 else None,
        "rate_503": round(len(busy) / max(len(results), 1), 3),
        "p99_503_ms": round(pct(busy, 99), 1) if len(busy) > 1 else None,
        "errors": errors,
        "service_cpu_ms_per_lookup": round(cpu * 1000 / max(len(ok), 1), 1),
        "client_cpu_ms_per_lookup": round(mine * 1000 / max(len(ok), 1), 1),
        "cores_busy": round((cpu + mine) / elapsed, 2),
    }


def burst(port: int, clients: int, queries: list[str], rounds: int = 3) -> dict[str, float]:
    """`clients` lookups posted at the same instant, no retries: what a sudden spike gets."""
    results: list[tuple[int, float, float]] = []
    lock = threading.Lock()

    def one(seed: int, barrier: threading.Barrier) -> None:
        client, q = Client(port), random.Random(seed).choice(queries)
        client.conn.connect()  # connected before the barrier: the burst is the requests
        barrier.wait()
        got = client.lookup(q)
        with lock:
            results.append(got)

    for r in range(rounds):
        barrier = threading.Barrier(clients)
        threads = [threading.Thread(target=one, args=(r * clients + i, barrier)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(1.0)  # the line drains between rounds
    ok = [ms for status, ms, _ in results if status == 200]
    busy = [ms for status, ms, _ in results if status == 503]
    return {
        "burst": clients,
        "rate_503": round(len(busy) / len(results), 3),
        "p50_ms": round(statistics.median(ok), 1) if ok else None,
        "p95_ms": round(pct(ok, 95), 1) if len(ok) > 1 else None,
        "p50_503_ms": round(statistics.median(busy), 1) if busy else None,
        "max_503_ms": round(max(busy), 1) if busy else None,
        "errors": len(results) - len(ok) - len(busy),
    }


def measure_rule(home: Path, rule: str, args: argparse.Namespace, queries: list[str]) -> dict[str, Any]:
    """One service with one admission rule: the 1-client ratio, the burst, the load rows."""
    port = free_port()
    proc = start_service(home, port, args.workers, rule)
    try:
        local50, served50 = side_by_side(home, port, queries)
        print(f"[{rule}] 1 client: in-process p50 {local50:.1f} ms, service p50 {served50:.1f} ms")
        spike = burst(port, args.burst, queries)
        print(f"[{rule}] " + "  ".join(f"{k} {v}" for k, v in spike.items()))
        rows = []
        for n in [int(c) for c in args.clients.split(",")]:
            rows.append(load(port, n, args.seconds, queries, proc.pid))
            print(f"[{rule}]   " + "  ".join(f"{k} {v}" for k, v in rows[-1].items()))
    finally:
        close_all()
        proc.terminate()
        proc.wait(30)
    return {
        "rule": rule,
        "inprocess_p50_ms": round(local50, 1),
        "service_p50_ms": round(served50, 1),
        "burst": spike,
        "load": rows,
    }


def capacity(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Lookups/s at 16 clients against the ceiling: cores / the CPU time of one lookup (the
    service's, measured at one client, when nothing else runs); and against the ceiling left once
    the clients' own CPU, which shares these cores, is counted in one lookup's cost."""
    by = {r["clients"]: r for r in rows}
    if 1 not in by or 16 not in by:
        return {}
    cores, one = len(os.sched_getaffinity(0)), by[1]
    limit = cores * 1000 / one["service_cpu_ms_per_lookup"]
    shared = cores * 1000 / (one["service_cpu_ms_per_lookup"] + one["client_cpu_ms_per_lookup"])
    return {
        "limit_per_s": round(limit, 1),
        "throughput_16_over_limit": round(by[16]["answered_per_s"] / limit, 2),
        "limit_with_clients_per_s": round(shared, 1),
        "throughput_16_over_limit_with_clients": round(by[16]["answered_per_s"] / shared, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--clients", default="1,4,16,64,100")
    ap.add_argument("--burst", type=int, default=100, help="clients in the simultaneous burst")
    ap.add_argument(
        "--admission",
        default="count:16,wait:2000",
        help="admission rules measured side by side: count:N (N may wait, the rule before) or "
        "wait:MS (serve_max_wait_ms); the last one is the one the targets are checked on",
    )
    ap.add_argument(
        "--workers", type=int, default=0, help="KBFLOW_SERVE_WORKERS for the service (0 = default)"
    )
    ap.add_argument(
        "--hog", type=int, default=0, help="processes that each keep one core busy the whole run "
        "(the other jobs of a shared machine); 1 on a 2-core machine takes half of it"
    )
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    try:
        return run(args)
    finally:
        for h in hogs:
            h.kill()


def run(args: argparse.Namespace) -> int:
    rng = random.Random(5)
    work = Path(tempfile.mkdtemp(prefix="kbflow-serve-bench-"))
    root, home = work / "corpus", work / "home"
    root.mkdir()
    make_corpus(root, args.docs, rng)
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    # another process builds the index and lets go of the file: the service must own it
    built = subprocess.run(
        [sys.executable, "-m", "kbflow.flows.cli", "reindex", str(root), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    summary = json.loads(built.stdout)
    print(f"index: {summary['added']} documents, {summary['chunks_written']} chunks")
    queries = [" ".join(rng.sample(VOCAB, rng.randint(3, 7))) for _ in range(args.queries)]
    try:
        measured = [measure_rule(home, rule, args, queries) for rule in args.admission.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    last = measured[-1]
    ratio = last["service_p50_ms"] / last["inprocess_p50_ms"]
    ceiling = capacity(last["load"])
    print("capacity: " + "  ".join(f"{k} {v}" for k, v in ceiling.items()))
    errors = sum(r["errors"] for m in measured for r in [*m["load"], m["burst"]])
    worst_503 = max([(r["p99_503_ms"] or 0) for r in last["load"]] + [last["burst"]["max_503_ms"] or 0])
    out = {
        "bench": "serve",
        "metrics": {"cpus": os.cpu_count(), "hog_processes": args.hog, **{m["rule"]: m for m in measured}},
        "ratios": {
            "service_over_inprocess_p50": round(ratio, 2),
            **ceiling,
            **{f"burst_503_{m['rule']}": m["burst"]["rate_503"] for m in measured},
            **{f"burst_p95_ms_{m['rule']}": m["burst"]["p95_ms"] for m in measured},
            **{f"burst_max_503_ms_{m['rule']}": m["burst"]["max_503_ms"] for m in measured},
        },
        "targets": {
            "service_over_inprocess_p50": "<= 1.3",
            "throughput_16_over_limit": ">= 0.7 (limit: cores / CPU of one lookup)",
            "errors": 0,
            "p99_503_ms": "fast (< 100)",
            "burst_max_503_ms": "fast (< 100): refused before any work",
            "burst_p95_ms": "answered within serve_max_wait_ms plus a lookup",
        },
    }
    print(json.dumps(out))
    return 0 if ratio <= 1.3 and errors == 0 and worst_503 < 100 else 1


if __name__ == "__main__":
    sys.exit(main())
