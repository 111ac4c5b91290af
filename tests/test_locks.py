"""Two reindex runs on one scope never interleave; a killed run blocks nothing and converges."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from ingest.locks import ScopeLocked, ScopeLocks
from ingest.reindex import reindex
from kbcore.sql import DocumentRow, ScopeLockRow, utcnow
from tests.conftest import REPO, write_doc


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


def test_dead_or_silent_holders_are_taken_over(stores):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    with stores.sql.session() as s, s.begin():
        s.add(ScopeLockRow(kb_scope="a", owner="gone", host=socket.gethostname(), pid=dead.pid))
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
    assert {r.kb_scope: r.owner for r in locks.holders()} == {"a": locks.owner, "b": locks.owner}
    locks.release()


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


def test_killed_run_leaves_the_index_intact_and_the_next_run_converges(tmp_path, settings):
    docs = tmp_path / "docs"
    for i in range(40):
        write_doc(
            docs,
            f"d{i}.md",
            source=f"doc-{i}",
            scope="ops",
            body=f"# Doc {i}\n\n## Part\n\n" + " ".join(f"word{j} detail{i}" for j in range(120)) + "\n",
        )
    env = {**os.environ, "KBFLOW_HOME": str(settings.home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    kbflow = str(Path(sys.executable).with_name("kbflow"))
    first = subprocess.run(
        [kbflow, "reindex", str(docs), "--scope", "ops"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr
    for i in range(40):  # change every document, then kill the rebuild mid-way
        write_doc(
            docs,
            f"d{i}.md",
            source=f"doc-{i}",
            scope="ops",
            body=f"# Doc {i} v2\n\n## Part\n\n" + " ".join(f"term{j} note{i}" for j in range(120)) + "\n",
        )
    run = subprocess.Popen(
        [kbflow, "reindex", str(docs), "--scope", "ops", "--full"],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from kbcore.settings import Settings
    from kbcore.sql import SqlStore

    sql = SqlStore(Settings(home=settings.home).resolved_database_url)
    deadline = time.time() + 120
    while time.time() < deadline:
        with sql.session() as s:
            if s.get(ScopeLockRow, "ops") is not None:
                break
        time.sleep(0.2)
    time.sleep(1.5)  # inside the run: embedding the changed chunks
    run.send_signal(signal.SIGKILL)
    run.wait()
    with sql.session() as s, s.begin():  # the lock outlives the killed process
        assert s.get(ScopeLockRow, "ops") is not None
        s.execute(update(ScopeLockRow).values(heartbeat_at=utcnow()))
    sql.dispose()

    from kbcore.stores import open_stores

    stores = open_stores(settings)
    from kbcore import milvus_store as ms
    from kbcore.validation import eq

    alias = ms.alias_for(settings.collection_prefix, "ops")
    stores.milvus.load_collection(alias)
    served = stores.milvus.query(alias, filter=eq("kb_scope", "ops"), output_fields=["doc_id"])
    assert len({r["doc_id"] for r in served}) == 40  # the old index is still served, whole
    again = reindex([docs], settings=settings, stores=stores)  # dead holder: lock taken over
    assert again.ok and again.updated == 40
    assert reindex([docs], settings=settings, stores=stores).chunks_written == 0  # converged
    texts = stores.milvus.query(alias, filter=eq("kb_scope", "ops"), output_fields=["text"])
    assert texts and all(" v2 > Part" in r["text"] and "word1 " not in r["text"] for r in texts)
