"""Two reindex runs on one scope never interleave; a killed run blocks nothing and converges.

Every test here runs on SQLite and on PostgreSQL (the `database_url` fixture in conftest; the
PostgreSQL cases need KBFLOW_TEST_POSTGRES_URL, which .ci/run sets)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from kbflow.core import milvus_store as ms
from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, ScopeLockRow, SqlStore, utcnow
from kbflow.core.stores import open_stores
from kbflow.ingest.locks import ScopeLocked, ScopeLocks
from kbflow.ingest.reindex import reindex
from kbflow.retrieval import lookup_knowledge
from tests.conftest import OPS_TOPICS, REPO, write_doc, write_ops_corpus


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Overrides conftest's: the SQL side on each backend (the `stores` fixture follows)."""
    return Settings(home=tmp_path / "home", database_url=database_url)


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_second_holder_is_refused_with_the_holder_named(stores):
    first = ScopeLocks(stores.sql)
    first.acquire(["ops"])
    second = ScopeLocks(stores.sql)
    t = time.monotonic()
    with pytest.raises(ScopeLocked, match=rf"scope 'ops' is being reindexed by pid {os.getpid()}"):
        second.acquire(["ops"], wait_seconds=1.0)
    assert time.monotonic() - t >= 1.0  # it waited before refusing
    first.release()
    second.acquire(["ops"])
    assert [r.owner for r in second.holders()] == [second.owner]
    second.release()
    assert second.holders() == []


def test_dead_or_silent_holders_are_taken_over(stores):
    with stores.sql.session() as s, s.begin():
        # this host, a pid that has exited, a fresh heartbeat: the pid decides
        s.add(ScopeLockRow(kb_scope="a", owner="gone", host=socket.gethostname(), pid=_dead_pid()))
        # another host (its pid cannot be checked), silent for an hour: the heartbeat decides
        s.add(
            ScopeLockRow(
                kb_scope="b",
                owner="far",
                host="other-host",
                pid=1,
                heartbeat_at=utcnow() - timedelta(hours=1),
            )
        )
    locks = ScopeLocks(stores.sql)
    locks.acquire(["a", "b"])
    assert {r.kb_scope: (r.owner, r.pid) for r in locks.holders()} == {
        "a": (locks.owner, os.getpid()),
        "b": (locks.owner, os.getpid()),
    }
    locks.release()
    assert locks.holders() == []


def test_a_live_holder_on_another_host_is_not_taken_over(stores):
    with stores.sql.session() as s, s.begin():
        s.add(ScopeLockRow(kb_scope="ops", owner="far", host="other-host", pid=4242))
    locks = ScopeLocks(stores.sql)
    with pytest.raises(ScopeLocked, match="scope 'ops' is being reindexed by pid 4242 on other-host"):
        locks.acquire(["ops"])
    assert [(r.owner, r.host) for r in locks.holders()] == [("far", "other-host")]


@pytest.mark.parametrize("left_by", ["nobody", "a dead run"])
def test_runs_racing_for_a_scope_get_it_exactly_once(stores, left_by):
    if left_by == "a dead run":
        with stores.sql.session() as s, s.begin():
            s.add(ScopeLockRow(kb_scope="ops", owner="gone", host=socket.gethostname(), pid=_dead_pid()))
    racers = [ScopeLocks(stores.sql) for _ in range(4)]
    start = threading.Barrier(len(racers))
    outcome: dict[str, object] = {}

    def race(locks: ScopeLocks) -> None:
        start.wait(timeout=60)
        try:
            locks.acquire(["ops"])
            outcome[locks.owner] = "held"
        except Exception as exc:  # ScopeLocked is the expected loss; anything else fails below
            outcome[locks.owner] = exc

    threads = [threading.Thread(target=race, args=(r,)) for r in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    winners = [owner for owner, o in outcome.items() if o == "held"]
    losers = [o for o in outcome.values() if o != "held"]
    assert len(winners) == 1, outcome
    assert len(losers) == 3 and all(isinstance(o, ScopeLocked) for o in losers), losers
    assert [r.owner for r in racers[0].holders()] == winners


def test_reindex_refuses_a_locked_scope_and_leaves_it_alone(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    write_doc(docs, "a.md", source="doc-a", scope="ops", body="# A\n\n## S\n\nAlpha.\n")
    other = ScopeLocks(stores.sql)
    other.acquire(["ops"])
    with pytest.raises(ScopeLocked):
        reindex([docs], settings=settings, stores=stores)
    with stores.sql.session() as s:
        assert s.scalars(select(DocumentRow)).all() == []  # nothing was written
    other.release()
    assert reindex([docs], settings=settings, stores=stores).added == 1


# --- a run killed in the middle of a --full rebuild ------------------------------------------


def served_revision(settings: Settings) -> set[str]:
    """Which runbook revision a lookup answers with (and that it answers with evidence)."""
    r = lookup_knowledge("redis evicted_keys keeps growing maxmemory", kb_scope="ops", settings=settings)
    assert r.found and r.evidence and r.evidence[0].doc_id == "redis-evictions", r.message
    return {rev for rev in ("revision one", "revision two") for e in r.evidence if rev in e.excerpt}


# The killed run: the real `reindex --full` through the public API, paused (not finished) once
# rows are written into its new collection — after "rebuild 1/3", before the alias moves — so
# the SIGKILL lands there every time instead of after a guessed sleep.
KILLED_RUN = """
import sys, time
from pathlib import Path
from kbflow.ingest.reindex import reindex
from kbflow.core.settings import Settings
seen = []
def progress(stage, done, total):
    seen.append(f"{stage} {done}/{total}")
    if stage == "write":
        part = Path(sys.argv[2] + ".part")
        part.write_text("\\n".join(seen))
        part.rename(sys.argv[2])  # whole, or not there yet
        time.sleep(600)
reindex([sys.argv[1]], scope="ops", full=True, settings=Settings(), progress=progress)
"""


def kill_a_full_rebuild_midway(tmp_path: Path, settings: Settings) -> str:
    """Index revision one (another process), change every document to revision two, SIGKILL a
    `--full` run in the middle; returns the physical collection the alias served before."""
    docs = tmp_path / "docs"
    write_ops_corpus(docs, 1)
    env = {
        **os.environ,
        "KBFLOW_HOME": str(settings.home),
        "KBFLOW_DATABASE_URL": settings.resolved_database_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    kbflow = str(Path(sys.executable).with_name("kbflow"))
    first = subprocess.run(
        [kbflow, "reindex", str(docs), "--scope", "ops", "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr
    served = json.loads(first.stdout)["scopes"]["ops"]["physical_collection"]
    write_ops_corpus(docs, 2)
    paused = tmp_path / "paused"
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(docs), str(paused)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not paused.exists():
        assert run.poll() is None, f"the run ended before it was killed: {run.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "the run never reached its write step"
        time.sleep(0.1)
    seen = paused.read_text().splitlines()
    assert "rebuild 1/3" in seen and "rebuild 2/3" not in seen  # built into a new collection, unserved
    run.send_signal(signal.SIGKILL)
    run.wait(60)
    run.stderr.close()
    assert run.returncode == -signal.SIGKILL  # really killed, not finished

    sql = SqlStore(settings.resolved_database_url)
    with sql.session() as s, s.begin():  # the lock outlives the killed process...
        lock = s.get(ScopeLockRow, "ops")
        assert lock is not None and lock.pid == run.pid
        # ...with a fresh heartbeat, so only the dead pid can free it
        s.execute(update(ScopeLockRow).values(heartbeat_at=utcnow()))
    sql.dispose()
    return served


def collections_of(stores, alias: str) -> list[str]:
    return sorted(c for c in stores.milvus.list_collections() if c.startswith(alias + "__"))


def test_killed_run_leaves_the_index_intact_and_the_next_run_converges(tmp_path, settings):
    served = kill_a_full_rebuild_midway(tmp_path, settings)
    stores = open_stores(settings)
    alias = ms.alias_for(settings.collection_prefix, "ops")

    assert stores.chunks.alias_target(alias) == served  # the alias never moved
    leftover = [c for c in collections_of(stores, alias) if c != served]
    assert len(leftover) == 1  # the killed run's half-built collection
    assert served_revision(settings) == {"revision one"}  # the old text is still served
    stores.milvus.load_collection(served)
    rows = stores.milvus.query(served, filter='kb_scope == "ops"', output_fields=["doc_id", "text"])
    assert {r["doc_id"] for r in rows} == set(OPS_TOPICS)  # whole: every document
    assert all("revision one" in r["text"] for r in rows)

    again = reindex([tmp_path / "docs"], scope="ops", full=True, settings=settings, stores=stores)
    assert again.ok and again.updated == len(OPS_TOPICS)  # the dead run's lock was taken over
    rebuilt = again.scopes["ops"].physical_collection
    assert rebuilt not in (served, *leftover)
    assert collections_of(stores, alias) == [rebuilt]  # the leftover is gone, and the old one
    assert stores.chunks.alias_target(alias) == rebuilt
    assert served_revision(settings) == {"revision two"}
    assert ScopeLocks(stores.sql).holders() == []

    steady = reindex([tmp_path / "docs"], settings=settings, stores=stores)
    assert steady.ok and steady.unchanged == len(OPS_TOPICS)  # converged
    assert steady.chunks_written == 0 and steady.chunks_embedded == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_incremental_run_after_a_killed_rebuild_drops_its_leftover(tmp_path, settings):
    served = kill_a_full_rebuild_midway(tmp_path, settings)
    stores = open_stores(settings)
    alias = ms.alias_for(settings.collection_prefix, "ops")
    again = reindex([tmp_path / "docs"], settings=settings, stores=stores)
    assert again.ok and again.updated == len(OPS_TOPICS)
    assert served_revision(settings) == {"revision two"}
    assert collections_of(stores, alias) == [served]
