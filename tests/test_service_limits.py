"""`kbflow serve` under overload and abuse, over real HTTP: bounded admission with fast 503s,
413/401/422 for bad requests, a health check that reveals nothing, a Milvus child only its owner
can reach, and `kbflow lookup` sent to the running service instead of loading a model."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from kbflow.flows.serve import free_port
from kbflow.flows.service import Admission, Overloaded
from tests.conftest import REPO, run_cli, wait_until_healthy, write_doc

KAFKA = "# Kafka consumer lag\n\n## Symptoms\n\nThe consumer group lag keeps growing on the orders topic.\n"
QUERY = {"query": "kafka consumer group lag keeps growing", "kb_scope": "ops"}


def test_the_count_ceiling_runs_workers_queues_a_few_and_refuses_the_rest_at_once():
    gate = threading.Event()

    async def scenario() -> tuple[list, float]:
        admission = Admission(workers=1, queue=1)  # no wait rule: the count alone
        running = asyncio.ensure_future(admission.run(gate.wait, 10))
        waiting = asyncio.ensure_future(admission.run(lambda: "queued"))
        await asyncio.sleep(0.05)
        t = time.perf_counter()
        with pytest.raises(Overloaded):
            await admission.run(lambda: "refused")
        refused_in = time.perf_counter() - t
        gate.set()
        done = await asyncio.gather(running, waiting)
        assert await admission.run(lambda: "after") == "after"  # slots are given back
        admission.close()
        return done, refused_in

    done, refused_in = asyncio.run(scenario())
    assert done == [True, "queued"] and refused_in < 0.05


def _burst(admission: Admission, n: int, seconds: float) -> list[object]:
    """n lookups of `seconds` each arriving at once: their results, Overloaded for the refused."""

    async def one() -> object:
        try:
            return await admission.run(time.sleep, seconds)
        except Overloaded as exc:
            return exc

    async def all_at_once() -> list[object]:
        return await asyncio.gather(*(one() for _ in range(n)))

    return asyncio.run(all_at_once())


def test_admission_follows_the_expected_wait_not_a_count():
    """A wait budget lets few slow lookups wait and many fast ones: the line a caller joins is
    as long as the measured service time allows."""
    slow = Admission(workers=1, queue=1000, max_wait_ms=300, prior_ms=100)
    refused = [r for r in _burst(slow, 20, 0.1) if isinstance(r, Overloaded)]
    assert len(refused) == 20 - 4  # one running, then waits of 100, 200, 300 ms; 400 ms is refused
    assert "serve_max_wait_ms" in refused[0].reason and refused[0].retry_after_s == 1

    fast = Admission(workers=1, queue=1000, max_wait_ms=600, prior_ms=100)
    for _ in range(30):  # the estimate learns that a lookup takes about 10 ms here
        _burst(fast, 1, 0.01)
    assert fast.service_ms < 40
    admitted = [r for r in _burst(fast, 20, 0.01) if not isinstance(r, Overloaded)]
    assert len(admitted) == 20  # 19 lookups of about 10 ms ahead fit in 600 ms

    ceiling = Admission(workers=1, queue=5, max_wait_ms=300, prior_ms=1)
    assert sum(not isinstance(r, Overloaded) for r in _burst(ceiling, 20, 0.01)) == 6
    for a in (slow, fast, ceiling):
        a.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits")
    write_doc(
        tmp / "docs", "k.md", source="kafka-lag", scope="ops", breadcrumb="Message Queue > Kafka", body=KAFKA
    )
    home = tmp / "home"
    port = free_port()
    env = {
        **os.environ,
        "KBFLOW_HOME": str(home),
        "KBFLOW_API_KEYS": '{"k-ops": ["ops"]}',
        "KBFLOW_SERVE_WORKERS": "1",
        "KBFLOW_SERVE_MAX_WAIT_MS": "100",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    # seeded by another process, which then lets go of the file (this one keeps Milvus Lite open)
    seed = run_cli("reindex", str(tmp / "docs"), home=home)
    assert seed.returncode == 0, seed.stderr
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("kbflow")), "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    wait_until_healthy(base, proc)
    yield base, home
    proc.terminate()
    proc.wait(30)
    assert not (home / "serve.json").exists()


def test_overload_is_answered_at_once_with_503_and_retry_after(service):
    """One worker and a 100 ms wait allowed: a burst of 24 is served as far as it fits, and the
    rest is told at once, with Retry-After, never left to wait in line."""
    base, _ = service
    barrier = threading.Barrier(24)
    results: list[tuple[int, float, str | None, str]] = []

    def client() -> None:
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            t = time.perf_counter()
            r = c.post(f"{base}/v1/lookup", json=QUERY, headers={"X-API-Key": "k-ops"})
            results.append((r.status_code, time.perf_counter() - t, r.headers.get("retry-after"), r.text))

    threads = [threading.Thread(target=client) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = [code for code, *_ in results]
    assert set(codes) <= {200, 503} and codes.count(200) >= 2, codes  # never a 500, never a hang
    busy = [(secs, retry, text) for code, secs, retry, text in results if code == 503]
    assert busy, "24 simultaneous lookups on 1 worker with 100 ms of wait allowed must overflow"
    assert all(retry and int(retry) >= 1 for _, retry, _ in busy)
    assert "serve_max_wait_ms" in busy[0][2]  # the body says which setting refused it
    assert max(secs for secs, _, _ in busy) < 2.0  # refused at once, not after a wait in line


def test_the_audit_names_the_key_that_asked_by_a_digest_never_the_key(service):
    import hashlib

    from sqlalchemy import select

    from kbflow.core.settings import Settings
    from kbflow.core.sql import LookupAuditRow, SqlStore

    base, home = service
    asked = {**QUERY, "query": "which key asked about kafka consumer group lag"}
    assert (
        httpx.post(f"{base}/v1/lookup", json=asked, headers={"X-API-Key": "k-ops"}, timeout=60).status_code
        == 200
    )
    with SqlStore(Settings(home=home).resolved_database_url).session() as s:
        callers = s.scalars(select(LookupAuditRow.caller).where(LookupAuditRow.query == asked["query"])).all()
    assert callers == ["http:" + hashlib.sha256(b"k-ops").hexdigest()[:8]]


def test_abuse_over_real_http_gets_4xx_never_500_nor_an_echo(service):
    base, _ = service
    key = {"X-API-Key": "k-ops"}
    huge = b'{"query": "' + b"x" * (200 * 1024) + b'"}'
    big = httpx.post(f"{base}/v1/lookup", content=huge, headers=key, timeout=30)
    assert big.status_code == 413 and len(big.content) < 1000
    assert httpx.post(f"{base}/v1/lookup", content=huge, timeout=30).status_code == 401
    for raw in ("clé-ünïcode".encode(), "\u2603".encode()):
        r = httpx.post(f"{base}/v1/lookup", json=QUERY, headers={"X-API-Key": raw}, timeout=30)
        assert r.status_code == 401
    surrogate = b'{"query": "lag \\ud800 here", "kb_scope": "ops"}'
    assert httpx.post(f"{base}/v1/lookup", content=surrogate, headers=key, timeout=30).status_code == 422
    wrong = httpx.post(f"{base}/v1/lookup", json={"query": 5}, headers=key, timeout=30)
    assert wrong.status_code == 422
    assert httpx.post(f"{base}/v1/lookup", content=b"\xff\xfe", headers=key, timeout=30).status_code == 415
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok", "auth": True}


def test_the_milvus_child_is_reachable_by_its_owner_only(service):
    """The engine listens on a unix socket in a directory only the owner can enter, announced
    in a note only the owner can read; no TCP port is open to other users of the machine."""
    from pymilvus import MilvusClient

    _, home = service
    note_path = home / "serve.json"
    assert stat.S_IMODE(note_path.stat().st_mode) == 0o600
    note = json.loads(note_path.read_text())
    assert note["milvus_uri"].startswith("unix:")
    sock = Path(note["milvus_uri"].removeprefix("unix:"))
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and sock.parent.stat().st_uid == os.getuid()
    assert MilvusClient(uri=note["milvus_uri"]).list_collections()


def test_kbflow_lookup_goes_through_the_running_service(service):
    _, home = service
    out = run_cli("lookup", "kafka consumer group lag", "--scope", "ops", "--json", home=home)
    assert out.returncode == 0, out.stderr
    assert "through kbflow serve" in out.stderr and "loading the embedding model" not in out.stderr
    data = json.loads(out.stdout)
    assert data["found"] and data["evidence"][0]["docId"] == "kafka-lag"
    assert "model_load" not in data["retrievalTrace"]["timingsMs"]
    bad = run_cli("lookup", "kafka", "--scope", "no such scope!", home=home)
    assert bad.returncode == 2 and "kb_scope" in bad.stderr and "Traceback" not in bad.stderr


def test_an_over_long_query_is_answered_truncated_on_every_path(service):
    """One rule: HTTP, the CLI through `serve`, and the Python API answer a query of
    any length from its first max_query_chars characters, flagged — never 413 or 422. The
    Python API's half is in tests/test_hostile_input.py."""
    base, home = service
    long = "kafka consumer group lag keeps growing " * 2600  # 101,400 characters
    body = {**QUERY, "query": long[:30_000]}
    over_http = httpx.post(f"{base}/v1/lookup", json=body, headers={"X-API-Key": "k-ops"}, timeout=60)
    assert over_http.status_code == 200 and over_http.json()["queryTruncated"] is True
    assert len(over_http.json()["query"]) == 500
    cli = run_cli("lookup", long, "--scope", "ops", "--json", home=home)
    assert cli.returncode == 0 and "through kbflow serve" in cli.stderr, cli.stderr
    assert json.loads(cli.stdout)["queryTruncated"] is True
    assert json.loads(cli.stdout)["query"] == over_http.json()["query"]
    unknown = run_cli("lookup", "kafka lag", "--scope", "OPS", home=home)
    assert unknown.returncode == 2 and "no scope 'OPS'" in unknown.stderr and "'ops'" in unknown.stderr
