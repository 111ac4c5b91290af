"""Managing what is indexed, end to end on the real stores: `kbflow docs list`, `scope delete`,
`forget`, status per root, scheduled reindexes (`serve-flows --reindex`) and the one-line
message when another process holds the Milvus Lite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from kbflow.core import milvus_store as ms
from kbflow.core.sql import DocumentRow, L0EntryRow, L0TermRow
from kbflow.core.validation import eq
from kbflow.flows.cli import main
from kbflow.flows.schedules import ScheduleSpecError, parse_reindex_spec, parse_reindex_specs
from kbflow.ingest.manage import drop_if_empty
from kbflow.ingest.reindex import reindex
from tests.conftest import REPO, run_cli, write_doc

POOL = """\
# MySQL connection pool exhausted

## Symptoms

Requests wait for a HikariCP connection until the 30 s timeout; max_connections is reached.
"""
REDIS = """\
# Redis evictions

## Symptoms

Keys disappear early: evicted_keys grows when maxmemory is reached under allkeys-lru.
"""
KAFKA = """\
# Kafka consumer lag

## Symptoms

The consumer group lag grows on every partition; rebalances repeat while max.poll.interval.ms is exceeded.
"""
DISK = """\
# Disk full on the database host

## Symptoms

The data volume is at 100 percent; writes fail with No space left on device.
"""


@pytest.fixture
def two_roots(tmp_path: Path, settings, stores) -> tuple[Path, Path]:
    """Root a: s1 (mysql-pool, redis-evict). Root b: s1 (kafka-lag) and s2 (disk-full)."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_doc(a, "pool.md", source="mysql-pool", scope="s1", keywords=["HikariCP"], body=POOL)
    write_doc(a, "cache/redis.md", source="redis-evict", scope="s1", breadcrumb="Cache > Redis", body=REDIS)
    write_doc(b, "kafka.md", source="kafka-lag", scope="s1", breadcrumb="Messaging > Kafka", body=KAFKA)
    write_doc(b, "disk.md", source="disk-full", scope="s2", breadcrumb="Host > Disk", body=DISK)
    summary = reindex([a, b], settings=settings, stores=stores)
    assert summary.ok and summary.added == 4
    return a, b


def kb(capsys, settings, *args: str) -> tuple[int, str, str]:
    """Run the real CLI in this process on the test's home: (exit code, stdout, stderr)."""
    rc = main([*args, "--home", str(settings.home)])
    out, err = capsys.readouterr()
    return rc, out, err


def kb_json(capsys, settings, *args: str) -> dict:
    rc, out, err = kb(capsys, settings, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def milvus_doc_ids(stores, scope: str) -> set[str]:
    alias = ms.alias_for(stores.settings.collection_prefix, scope)
    stores.chunks.load(alias)
    target = stores.chunks.alias_target(alias)
    rows = stores.milvus.query(target, filter=eq("kb_scope", scope), output_fields=["doc_id"])
    return {r["doc_id"] for r in rows}


def evidence_docs(capsys, settings, query: str, scope: str) -> list[str]:
    data = kb_json(capsys, settings, "lookup", query, "--scope", scope)
    return [e["docId"] for e in data["evidence"]]


# --- docs list ---------------------------------------------------------------------------------


def test_docs_list_table_json_and_filters(capsys, settings, two_roots):
    a, b = two_roots
    data = kb_json(capsys, settings, "docs", "list")
    assert data["count"] == 4
    by_id = {d["doc_id"]: d for d in data["documents"]}
    assert set(by_id) == {"mysql-pool", "redis-evict", "kafka-lag", "disk-full"}
    redis = by_id["redis-evict"]
    assert (redis["kb_scope"], redis["root"], redis["path"]) == ("s1", str(a), str(a / "cache/redis.md"))
    assert redis["status"] == "indexed" and redis["chunks"] == 1 and redis["last_error"] is None
    assert redis["indexed_at"]

    only_s2 = kb_json(capsys, settings, "docs", "list", "--scope", "s2")
    assert [d["doc_id"] for d in only_s2["documents"]] == ["disk-full"]
    # any spelling of a root names it: trailing slash, `..`
    spelled = f"{b}/../{b.name}/"
    only_b = kb_json(capsys, settings, "docs", "list", "--root", spelled)
    assert {d["doc_id"] for d in only_b["documents"]} == {"kafka-lag", "disk-full"}
    both = kb_json(capsys, settings, "docs", "list", "--root", str(b), "--scope", "s1")
    assert [d["doc_id"] for d in both["documents"]] == ["kafka-lag"]

    rc, out, _ = kb(capsys, settings, "docs", "list")
    assert rc == 0
    for col in ("id", "scope", "root", "path", "chunks", "status", "last error"):
        assert col in out
    row = next(line for line in out.splitlines() if "redis-evict" in line)  # one line per document
    assert "s1" in row and str(a / "cache/redis.md") in row and "indexed" in row

    rc, out, err = kb(capsys, settings, "docs", "list", "--scope", "nope")
    assert rc == 2 and "no scope 'nope'" in err and "the scopes are s1, s2" in err
    rc, _, err = kb(capsys, settings, "docs", "list", "--scope", 'x" or kb_scope != "')
    assert rc == 2 and "invalid kb_scope" in err


# --- scope delete ------------------------------------------------------------------------------


def test_scope_delete_dry_run_then_yes(capsys, settings, stores, two_roots):
    alias = ms.alias_for(settings.collection_prefix, "s1")
    leftover = f"{alias}__19990101000000_dead"  # an interrupted rebuild's collection
    ms.create_collection(stores.milvus, leftover, 384, "standard")
    query = "HikariCP connection pool exhausted, max_connections reached"
    assert "mysql-pool" in evidence_docs(capsys, settings, query, "s1")

    rc, out, _ = kb(capsys, settings, "scope", "delete", "s1")
    assert rc == 0
    assert "would remove scope s1" in out and "3 document(s)" in out and leftover in out
    assert "nothing removed (dry run)" in out
    assert stores.chunks.alias_target(alias) is not None
    assert kb_json(capsys, settings, "docs", "list", "--scope", "s1")["count"] == 3

    removed = kb_json(capsys, settings, "scope", "delete", "s1", "--yes")
    assert removed["done"] and not removed["dry_run"]
    assert (removed["documents"], removed["l0_entries"], removed["alias"]) == (3, 3, alias)
    assert leftover in removed["collections"] and len(removed["collections"]) == 2

    rc, _, err = kb(capsys, settings, "lookup", query, "--scope", "s1")  # a deleted scope is unknown
    assert rc == 2 and "no scope 's1'" in err and "the scopes are s2" in err
    status = kb_json(capsys, settings, "status")
    assert [s["kb_scope"] for s in status["scopes"]] == ["s2"]
    rc, out, _ = kb(capsys, settings, "status")
    assert "scope s2:" in out and "scope s1:" not in out
    assert stores.chunks.alias_target(alias) is None
    assert not [c for c in stores.milvus.list_collections() if c.startswith(alias)]
    assert kb(capsys, settings, "docs", "list", "--scope", "s1")[0] == 2  # no such scope now
    with stores.sql.session() as s:
        assert not s.scalars(select(L0TermRow).where(L0TermRow.kb_scope == "s1")).first()
    assert milvus_doc_ids(stores, "s2") == {"disk-full"}  # the other scope is untouched

    rc, _, err = kb(capsys, settings, "scope", "delete", "s1", "--yes")
    assert rc == 1 and "nothing is indexed under scope 's1'" in err
    rc, _, err = kb(capsys, settings, "scope", "delete", "bad scope")
    assert rc == 2 and "invalid kb_scope" in err


# --- forget ------------------------------------------------------------------------------------


def test_forget_a_moved_away_root(capsys, settings, stores, two_roots):
    a, b = two_roots
    kafka_query = "kafka consumer group lag grows, rebalances repeat"
    assert "kafka-lag" in evidence_docs(capsys, settings, kafka_query, "s1")
    b.rename(b.with_name("b-moved"))

    rc, _, err = kb(capsys, settings, "forget", str(a), "--yes")
    assert rc == 1 and "exists; reindex it instead, or delete the files and reindex" in err
    assert kb_json(capsys, settings, "docs", "list")["count"] == 4

    dry = kb_json(capsys, settings, "forget", str(b))
    assert dry["dry_run"] and dry["root"] == str(b) and dry["documents"] == 2
    assert {s["kb_scope"]: (s["documents"], s["scope_removed"]) for s in dry["scopes"]} == {
        "s1": (1, False),
        "s2": (1, True),
    }
    rc, out, _ = kb(capsys, settings, "forget", str(b))
    assert rc == 0 and "nothing removed (dry run)" in out and "would be removed" in out
    assert kb_json(capsys, settings, "docs", "list")["count"] == 4

    rc, out, _ = kb(capsys, settings, "forget", str(b), "--yes")
    assert rc == 0 and f"removed from {b}" in out
    docs = kb_json(capsys, settings, "docs", "list")["documents"]
    assert {(d["kb_scope"], d["doc_id"]) for d in docs} == {("s1", "mysql-pool"), ("s1", "redis-evict")}
    assert milvus_doc_ids(stores, "s1") == {"mysql-pool", "redis-evict"}
    with stores.sql.session() as s:
        assert set(s.scalars(select(L0EntryRow.doc_id))) == {"mysql-pool", "redis-evict"}
        assert set(s.scalars(select(L0TermRow.doc_id))) == {"mysql-pool", "redis-evict"}
    assert "kafka-lag" not in evidence_docs(capsys, settings, kafka_query, "s1")
    # s2 had nothing else: it is gone, not listed with zero documents
    status = kb_json(capsys, settings, "status")
    assert [s["kb_scope"] for s in status["scopes"]] == ["s1"]
    assert [r["root"] for r in status["roots"]] == [str(a)]
    s2_alias = ms.alias_for(settings.collection_prefix, "s2")
    assert stores.chunks.alias_target(s2_alias) is None
    assert not [c for c in stores.milvus.list_collections() if c.startswith(s2_alias)]

    rc, _, err = kb(capsys, settings, "forget", str(b), "--yes")
    assert rc == 1 and "nothing is indexed from" in err


# --- status ------------------------------------------------------------------------------------


def test_status_counts_documents_per_root_and_hides_empty_scopes(capsys, settings, stores, two_roots):
    a, b = two_roots
    status = kb_json(capsys, settings, "status")
    scopes = {s["kb_scope"]: s for s in status["scopes"]}
    assert scopes["s1"]["roots"] == {str(a): 2, str(b): 1} and scopes["s1"]["documents"] == 3
    assert scopes["s2"]["roots"] == {str(b): 1}
    assert status["roots"] == [
        {"root": str(a), "documents": 2, "scopes": {"s1": 2}},
        {"root": str(b), "documents": 2, "scopes": {"s1": 1, "s2": 1}},
    ]
    rc, out, _ = kb(capsys, settings, "status")
    assert rc == 0
    assert f"root {a}: 2 documents" in out and f"root {b}: 1 document\n" in out
    assert f"{b}: 2 documents (s1 1, s2 1)" in out

    # a scope whose every document is gone is not listed, and drop_if_empty removes it
    with stores.sql.session() as s, s.begin():
        s.execute(delete(DocumentRow).where(DocumentRow.kb_scope == "s2"))
    assert [s["kb_scope"] for s in kb_json(capsys, settings, "status")["scopes"]] == ["s1"]
    assert drop_if_empty(stores, "s1") is False
    assert drop_if_empty(stores, "s2") is True
    assert stores.chunks.alias_target(ms.alias_for(settings.collection_prefix, "s2")) is None
    assert drop_if_empty(stores, "s2") is False
    assert kb_json(capsys, settings, "docs", "list")["count"] == 3


# --- serve-flows --reindex ---------------------------------------------------------------------


def test_reindex_spec_parser(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    odd = tmp_path / "user@host:x"
    odd.mkdir()
    monkeypatch.chdir(tmp_path)
    s = parse_reindex_spec("docs/:team-a@0 3 * * *")
    assert (s.root, s.scope, s.cron) == (str(docs), "team-a", "0 3 * * *")
    assert s.name.startswith("kbflow-reindex-docs-team-a-")
    assert parse_reindex_spec("./docs/sub/../@@daily").root == str(docs)
    assert parse_reindex_spec("docs@@daily").cron == "@daily"
    assert parse_reindex_spec(f"{odd}/@*/15 * * * *").root == str(odd)  # '@' and ':' in a path
    assert parse_reindex_spec("docs@0 3 * * *").name != parse_reindex_spec("docs:x@0 3 * * *").name

    bad = {
        "docs": "expected ROOT[:SCOPE]@CRON",
        "@daily": "expected ROOT[:SCOPE]@CRON",
        "docs@61 * * * *": "invalid cron '61 * * * *'",
        "docs@": "invalid cron ''",
        "docs:@0 3 * * *": "empty SCOPE",
        'docs:x" or kb_scope != "@0 3 * * *': "invalid kb_scope",
        "missing@0 3 * * *": "is not a directory",
    }
    for spec, message in bad.items():
        with pytest.raises(ScheduleSpecError, match=message.replace("[", r"\[").replace("*", r"\*")):
            parse_reindex_spec(spec)
    with pytest.raises(ScheduleSpecError, match="same root and scope"):
        parse_reindex_specs(["docs@0 3 * * *", "./docs/@@hourly"])


def test_serve_flows_dry_run_lists_reindex_deployments(tmp_path, capsys, settings):
    docs = tmp_path / "docs"
    docs.mkdir()
    rc, out, err = kb(
        capsys,
        settings,
        "serve-flows",
        "--dry-run",
        "--reindex",
        f"{docs}:team-a@0 3 * * *",
        "--reindex",
        f"{docs}/sub/..@@hourly",
    )
    assert rc == 0, err
    deployments = json.loads(out)
    assert [d["deployment"] for d in deployments[:2]] == ["kbflow-eval-corpus-refresh", "kbflow-eval"]
    reindexes = [d for d in deployments if d["flow"] == "reindex"]
    assert len(reindexes) == 2
    home = str(settings.home.resolve())
    first, second = reindexes
    assert first["parameters"] == {"roots": [str(docs)], "scope": "team-a", "full": False, "home": home}
    assert first["schedules"][0]["schedule"]["cron"] == "0 3 * * *"
    assert second["parameters"]["roots"] == [str(docs)] and second["parameters"]["scope"] is None
    assert second["schedules"][0]["schedule"]["cron"] == "@hourly"

    rc, out, err = kb(capsys, settings, "serve-flows", "--dry-run", "--reindex", f"{docs}@61 * * * *")
    assert rc == 2 and out == "" and "invalid cron" in err


# --- another process holds the Milvus Lite file -------------------------------------------------


def test_held_lite_file_gives_one_line_naming_the_holder(tmp_path):
    home = tmp_path / "home"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from kbflow.core.settings import Settings; from kbflow.core.stores import open_stores; "
            f"open_stores(Settings(home={str(home)!r})); print('ready', flush=True); "
            "import time; time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        status = run_cli("status", home=home)  # status still shows what SQL records
        assert status.returncode == 0 and f"process {holder.pid} " in status.stdout
        assert "holds the Milvus Lite file" in status.stdout
        for args in (["docs", "list"], ["forget", str(tmp_path / "gone"), "--yes"]):
            t = time.monotonic()
            res = run_cli(*args, home=home)
            assert time.monotonic() - t < 60  # fails fast, no hang
            # a StoreError (exit 3): the same command can succeed later
            assert res.returncode == 3 and res.stdout == ""
            assert "Traceback" not in res.stderr, res.stderr
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1, res.stderr
            assert f"in use by process {holder.pid}" in lines[0] and "kbflow serve" in lines[0]
    finally:
        holder.kill()
        holder.wait()


def test_commands_reach_a_served_file_through_the_announced_endpoint(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    hold = (
        "import sys, time; from kbflow.core.lite_engine import lite_uri; "
        "print(lite_uri(sys.argv[1]), flush=True); time.sleep(120)"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", hold, str(home / "milvus.db")], stdout=subprocess.PIPE, text=True
    )
    uri = server.stdout.readline().strip()
    try:
        res = run_cli("docs", "list", home=home)  # not announced yet: the server holds the file
        assert res.returncode == 3 and f"in use by process {server.pid}" in res.stderr
        assert "Traceback" not in res.stderr
        # what `kbflow serve` announces (its own pid, alive: here the test's)
        note = {"pid": os.getpid(), "milvus_uri": uri, "milvus_token": "tok"}
        (home / "serve.json").write_text(json.dumps(note))
        res = run_cli("docs", "list", "--json", home=home)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == {"count": 0, "documents": []}
        res = run_cli("scope", "delete", "s1", home=home)
        assert res.returncode == 1 and "nothing is indexed under scope 's1'" in res.stderr
    finally:
        server.terminate()
        server.wait(30)
