"""HTTP lookup service: auth by scoped keys, contract errors, and the one-owner embedded store
with a full reindex running beside it (no failed request, no empty answer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from kbflow.core.settings import Settings
from kbflow.flows.serve import free_port
from kbflow.flows.service import check_bind, create_app
from kbflow.ingest.reindex import reindex
from tests.conftest import REPO, wait_until_healthy, write_doc

BODY = "# Kafka consumer lag\n\n## Symptoms\n\nThe consumer group lag keeps growing on the orders topic.\n"


@pytest.fixture
def client(tmp_path):
    write_doc(
        tmp_path / "docs",
        "k.md",
        source="kafka-lag",
        scope="ops",
        breadcrumb="Message Queue > Kafka",
        body=BODY,
    )
    write_doc(
        tmp_path / "docs",
        "s.md",
        source="secret",
        scope="finance",
        breadcrumb="Finance > Ledger",
        body="# Ledger\n\n## Close\n\nThe consumer group lag report for the ledger close.\n",
    )
    settings = Settings(home=tmp_path / "home", api_keys={"k-ops": ["ops"], "k-all": ["*"]})
    assert reindex([tmp_path / "docs"], settings=settings).ok
    with TestClient(create_app(settings)) as c:
        yield c


def test_keys_scopes_and_contract_errors(client):
    q = {"query": "kafka consumer group lag keeps growing", "kb_scope": "ops"}
    assert client.post("/v1/lookup", json=q).status_code == 401
    assert client.post("/v1/lookup", json=q, headers={"X-API-Key": "wrong"}).status_code == 401
    ok = client.post("/v1/lookup", json=q, headers={"X-API-Key": "k-ops"})
    assert ok.status_code == 200 and ok.json()["evidence"][0]["docId"] == "kafka-lag"
    agent = client.post("/v1/lookup", json={**q, "agent": True}, headers={"Authorization": "Bearer k-ops"})
    assert agent.json()["evidence_status"] == "FOUND" and "retrievalTrace" not in agent.json()
    denied = client.post("/v1/lookup", json={**q, "kb_scope": "finance"}, headers={"X-API-Key": "k-ops"})
    assert denied.status_code == 403 and "secret" not in denied.text and "Ledger" not in denied.text
    assert client.post("/v1/lookup", json={"query": "lag"}, headers={"X-API-Key": "k-ops"}).status_code == 403
    every = client.post("/v1/lookup", json={"query": "consumer group lag"}, headers={"X-API-Key": "k-all"})
    assert every.status_code == 200
    bad = client.post("/v1/lookup", json={"kb_scope": "ops"}, headers={"X-API-Key": "k-ops"})
    assert bad.status_code == 422 and "query" in json.dumps(bad.json()["detail"])
    bad_mode = client.post("/v1/lookup", json={**q, "mode": "sparse"}, headers={"X-API-Key": "k-ops"})
    assert bad_mode.status_code == 422 and "mode" in json.dumps(bad_mode.json()["detail"])
    bad_scope = client.post("/v1/lookup", json={**q, "kb_scope": 'x" or 1'}, headers={"X-API-Key": "k-all"})
    assert bad_scope.status_code == 422 and "kb_scope" in json.dumps(bad_scope.json()["detail"])
    long = client.post(
        "/v1/lookup", json={**q, "query": "kafka lag " * 200, "agent": True}, headers={"X-API-Key": "k-ops"}
    )
    assert long.status_code == 200 and long.json()["truncated"] and len(long.json()["query"]) == 500
    scopes = client.get("/v1/scopes", headers={"X-API-Key": "k-ops"}).json()["scopes"]
    assert [s["kb_scope"] for s in scopes] == ["ops"]
    assert client.get("/healthz").json()["status"] == "ok"


def test_abuse_gets_4xx_never_500_nor_an_echo(client):
    q = {"query": "kafka consumer group lag keeps growing", "kb_scope": "ops"}
    huge = b'{"query": "' + b"x" * (1024 * 1024) + b'"}'
    unauth = client.post("/v1/lookup", content=huge)
    assert unauth.status_code == 401  # no key: refused before the body is read
    big = client.post("/v1/lookup", content=huge, headers={"X-API-Key": "k-ops"})
    assert big.status_code == 413 and len(big.content) < 1000  # nothing reflected
    for key in ("clé-ünïcode", "\u2603"):
        raw = {"X-API-Key": key.encode("utf-8")}  # sent as raw UTF-8 bytes
        assert client.post("/v1/lookup", json=q, headers=raw).status_code == 401
    bearer = {"Authorization": b"Bearer " + "ключ".encode()}
    assert client.post("/v1/lookup", json=q, headers=bearer).status_code == 401
    surrogate = b'{"query": "lag \\ud800 here", "kb_scope": "ops"}'
    bad = client.post("/v1/lookup", content=surrogate, headers={"X-API-Key": "k-ops"})
    assert bad.status_code == 422 and "Unicode" in bad.text
    health = client.get("/healthz").json()
    assert health == {"status": "ok", "auth": True}  # no store address, no paths


def test_open_service_binds_loopback_only():
    check_bind("127.0.0.1", {})
    check_bind("::1", {})
    with pytest.raises(ValueError, match="without API keys"):
        check_bind("0.0.0.0", {})
    check_bind("0.0.0.0", {"k": {"ops"}})


def _kbflow(*args: str, home: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("kbflow")), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _readme_curl(port: int) -> dict:
    """Run the service guide's curl example verbatim (only the port is this test's): curl -d
    sends application/x-www-form-urlencoded, and the service must still read the JSON body."""
    readme = (REPO / "docs" / "service.md").read_text(encoding="utf-8")
    start = readme.index("curl -s localhost:8080/v1/lookup")
    command = readme[start : readme.index("\n```", start)].replace("localhost:8080", f"localhost:{port}")
    assert "-d '" in command and "Content-Type" not in command
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_serve_owns_the_embedded_store_and_answers_through_a_full_reindex(tmp_path):
    home = tmp_path / "home"
    seed = _kbflow("reindex", "seed-docs", "--scope", "rag-eval", "--json", home=home)
    _, err = seed.communicate(timeout=300)
    assert seed.returncode == 0, err  # seeded by another process, which then lets go of the file
    port = free_port()
    server = _kbflow("serve", "--port", str(port), home=home)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base, server)
        assert json.loads((home / "serve.json").read_text())["milvus_uri"].startswith("unix:")
        assert _readme_curl(port)["evidence_status"] == "FOUND"  # the guide's example, as written
        form = httpx.post(f"{base}/v1/lookup", content=b"query=kafka", headers={"Content-Type": "text/plain"})
        assert form.status_code == 415 and "application/json" in form.json()["detail"]

        status = _kbflow("status", "--json", home=home)
        out, err = status.communicate(timeout=120)
        assert status.returncode == 0, err  # reaches the served store, no lock error
        assert json.loads(out)["milvus_uri"].startswith("unix:")

        query = {"query": "kafka consumer group lag growing", "kb_scope": "rag-eval"}
        before = httpx.post(f"{base}/v1/lookup", json=query, timeout=30).json()
        old_collection = json.loads(out)["scopes"][0]["alias_target"]
        rebuild = _kbflow("reindex", "seed-docs", "--scope", "rag-eval", "--full", "--json", home=home)
        answers = 0
        while rebuild.poll() is None:
            r = httpx.post(f"{base}/v1/lookup", json=query, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["found"] and r.json()["evidence"][0]["docId"] == "kafka-consumer-lag"
            answers += 1
        out, err = rebuild.communicate()
        assert rebuild.returncode == 0, err
        new_collection = json.loads(out)["scopes"]["rag-eval"]["physical_collection"]
        assert new_collection != old_collection and answers > 0
        after = httpx.post(f"{base}/v1/lookup", json=query, timeout=30).json()
        assert after["evidence"][0]["evidenceKey"] == before["evidence"][0]["evidenceKey"]
    finally:
        server.terminate()
        server.wait(30)
    assert not (home / "serve.json").exists()


def test_second_process_on_the_lite_file_is_told_who_holds_it(tmp_path):
    from kbflow.core.milvus_store import StoreUnavailable, open_client

    path = tmp_path / "milvus.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from kbflow.core.lite_engine import lite_uri; lite_uri({str(path)!r}); "
            "print('ready', flush=True); import time; time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        t = time.monotonic()
        with pytest.raises(StoreUnavailable) as err:
            open_client(str(path))
        assert time.monotonic() - t < 30  # fails fast, no hang
        assert f"held by process {holder.pid}" in str(err.value) and "kbflow serve" in str(err.value)
    finally:
        holder.kill()
        holder.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_milvus_child_dies_with_a_sigkilled_parent_and_a_stale_note_is_cleaned(tmp_path):
    """A SIGKILLed `kbflow serve` leaves no process holding the Lite file, and its serve.json is
    recognised as stale and removed by the next command."""
    import signal

    from kbflow.core.announce import ENDPOINT_FILE, announced_endpoint
    from kbflow.core.milvus_store import lock_holder

    data = tmp_path / "milvus.db"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from pathlib import Path; from kbflow.core import lite_engine; "
            f"lite_engine.lite_uri({str(data)!r}); "
            f"print(lite_engine._children[Path({str(data)!r})].proc.pid, flush=True); time.sleep(300)",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())
    assert lock_holder(str(data)) is not None and lock_holder(str(data))[0] == parent.pid
    parent.send_signal(signal.SIGKILL)
    parent.wait(30)
    deadline = time.time() + 30
    while (lock_holder(str(data)) is not None or _alive(child)) and time.time() < deadline:
        time.sleep(0.2)
    assert lock_holder(str(data)) is None  # the file is free
    assert not _alive(child)  # and the engine went with its parent
    note = tmp_path / ENDPOINT_FILE
    note.write_text(json.dumps({"pid": parent.pid, "milvus_uri": "http://127.0.0.1:1"}), encoding="utf-8")
    assert announced_endpoint(tmp_path) is None and not note.exists()
