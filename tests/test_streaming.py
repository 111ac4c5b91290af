"""A reindex at scale: unchanged files are not read, documents stream through in bounded batches
(memory does not grow with the corpus), and a file that changes mid-run keeps its last good
version. Real Milvus Lite (its gRPC server, so its memory stays out of this process), real SQLite,
the real model (the documents share their sections, so the cache embeds each text once)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from kbflow.core.settings import Settings
from kbflow.flows.serve import start_milvus_lite_server
from kbflow.ingest import reindex as reindex_module
from kbflow.ingest import sources
from kbflow.ingest.reindex import reindex
from kbflow.retrieval import lookup_knowledge
from tests.conftest import write_doc

TOKEN = "stream-token"
STEP = "Check the replica lag, then restart the consumer and watch the queue drain. "
BODY = "# Runbook\n\n" + "".join(f"## Step {i}\n\n{STEP * 11}\n\n" for i in range(10))  # about 9 KB


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory):
    proc, uri = start_milvus_lite_server(str(tmp_path_factory.mktemp("stream-milvus") / "data.db"))
    yield uri
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def counted_reads(monkeypatch):
    """Files read by the scan or a write batch (sources.read_text is the one reader)."""
    reads: list[str] = []
    real = sources.read_text

    def counting(path: Path, max_bytes: int):
        reads.append(Path(path).name)
        return real(path, max_bytes)

    monkeypatch.setattr(sources, "read_text", counting)
    monkeypatch.setattr(sources, "RACY_SECONDS", 0.0)  # files written just now are trusted
    return reads


def corpus(root: Path, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        write_doc(
            root, f"d{i:05d}.md", source=f"doc-{i}", scope="big", body=BODY.replace("Runbook", f"Runbook {i}")
        )


def test_unchanged_files_are_not_read(tmp_path, counted_reads):
    settings = Settings(home=tmp_path / "home")
    docs = tmp_path / "docs"
    corpus(docs, 3)
    first = reindex([docs], settings=settings)
    assert first.added == 3
    # the summary says where the time went, stage by stage
    stages = ("open_stores", "scan", "plan", "read", "chunk", "embed", "store_insert")
    stages += ("l0_build", "sql_records")
    for name in stages:
        assert first.stage_seconds[name] > 0, name
    assert sum(first.stage_seconds.values()) <= first.seconds * 1.05
    counted_reads.clear()

    again = reindex([docs], settings=settings)
    assert again.ok and again.unchanged == 3 and counted_reads == []  # a no-change run reads nothing
    assert "scan" in again.stage_seconds and not {"read", "embed", "store_insert"} & set(again.stage_seconds)

    (docs / "d00001.md").write_text((docs / "d00001.md").read_text().replace("replica", "primary"))
    edited = reindex([docs], settings=settings)
    assert edited.updated == 1 and edited.unchanged == 2
    assert sorted(set(counted_reads)) == ["d00001.md"]  # scanned, then read again by its batch

    # an edit that keeps the size and puts the mtime back (cp -p, a restored backup) moves ctime
    path = docs / "d00002.md"
    before = path.stat()
    path.write_text(path.read_text().replace("restart", "RESTART"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert reindex([docs], settings=settings).updated == 1

    counted_reads.clear()
    distrust = Settings(home=tmp_path / "home", trust_file_stat=False)
    assert reindex([docs], settings=distrust).unchanged == 3 and len(counted_reads) == 3


def test_a_file_written_just_now_is_read_again(tmp_path, monkeypatch):
    """Within RACY_SECONDS of its last change a file's stat proves nothing (an edit in the same
    tick keeps it): its record keeps no stat, so the next run reads it."""
    reads: list[str] = []
    real = sources.read_text
    monkeypatch.setattr(sources, "read_text", lambda p, m: reads.append(Path(p).name) or real(p, m))
    # "just now" however slow the machine: the writer reads the file again seconds after it was
    # written (store start-up, collection creation), and past 2 s its stat may be trusted
    monkeypatch.setattr(sources, "RACY_SECONDS", 3600.0)
    settings = Settings(home=tmp_path / "home")
    docs = tmp_path / "docs"
    corpus(docs, 1)
    reindex([docs], settings=settings)
    reads.clear()
    assert reindex([docs], settings=settings).unchanged == 1 and reads == ["d00000.md"]


def test_unchanged_files_with_an_inherited_scope_follow_the_run(tmp_path, counted_reads):
    """A file without kb_scope joins the run's scope: its record stands in only for that scope."""
    settings = Settings(home=tmp_path / "home")
    docs = tmp_path / "docs"
    write_doc(docs, "plain.md", source="plain", body=BODY)
    assert reindex([docs], scope="one", settings=settings).added == 1
    other = reindex([docs], scope="two", settings=settings)
    assert other.added == 1 and other.scopes["two"].documents == 1


def test_a_file_changed_between_scan_and_write_keeps_its_last_good_version(tmp_path, counted_reads):
    settings = Settings(home=tmp_path / "home")
    docs = tmp_path / "docs"
    write_doc(
        docs, "a.md", source="doc-a", scope="mid", body="# Kafka\n\n## Fix\n\nRaise the partition count.\n"
    )
    reindex([docs], settings=settings)

    write_doc(
        docs, "a.md", source="doc-a", scope="mid", body="# Kafka\n\n## Fix\n\nAdd more brokers first.\n"
    )
    run = reindex_module.start([docs], settings=settings)  # the scan sees the second version
    write_doc(
        docs, "a.md", source="doc-a", scope="mid", body="# Kafka\n\n## Fix\n\nThird version, mid-run.\n"
    )
    with reindex_module.locked(run, None):
        for sc in run.scopes:
            reindex_module.settle(
                run,
                sc,
                reindex_module.apply_plan(
                    run.stores, reindex_module.plan(run.stores, sc, run.scan), full=False
                ),
            )
    summary = reindex_module.finish(run)
    assert not summary.ok
    assert [f["path"] for f in summary.failed] == [str(docs / "a.md")]
    assert "changed during this run" in summary.failed[0]["reason"]
    hit = lookup_knowledge("kafka partition count", kb_scope="mid", settings=settings).evidence[0]
    assert "partition count" in hit.excerpt  # the last good version still answers

    assert reindex([docs], settings=settings).updated == 1  # the next run picks the file up
    hit = lookup_knowledge("kafka third version", kb_scope="mid", settings=settings).evidence[0]
    assert "Third version" in hit.excerpt


def _peak_of_reindex(settings: Settings, docs: Path, full: bool) -> int:
    reindex([docs], settings=settings)  # the first run of a size, not measured
    tracemalloc.start()
    try:
        summary = reindex([docs], full=full, settings=settings)
        assert summary.ok
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _growth(tmp_path: Path, uri: str, batch_chars: int, full: bool) -> int:
    """How much the Python heap peak of a reindex grows from 30 to 120 documents."""
    settings = Settings(
        home=tmp_path / f"home-{batch_chars}-{full}",
        milvus_uri=uri,
        milvus_token=TOKEN,
        reindex_batch_chars=batch_chars,
        collection_prefix=f"b{batch_chars}{'f' if full else 'i'}",
    )
    docs = tmp_path / f"docs-{batch_chars}-{full}"
    corpus(docs, 30)
    small = _peak_of_reindex(settings, docs, full)
    corpus(docs, 90, start=30)
    return _peak_of_reindex(settings, docs, full) - small


def test_reindex_memory_does_not_grow_with_the_corpus(tmp_path, milvus_server, counted_reads, monkeypatch):
    """The 90 documents added hold about 800 KB of text and 900 vectors. Streamed in batches of
    20,000 characters, a full rebuild's peak grows by less than the text (the documents'
    metadata); in one batch it grows by the text and its vectors. A no-change run reads no text at all."""
    from kbflow.ingest import records

    # records and L0 entries are written 500 at a time by default, more than this corpus: here 20
    monkeypatch.setattr(records, "_BATCH", 20)
    added_text = 90 * len(BODY)
    streamed = _growth(tmp_path, milvus_server, 20_000, full=True)
    one_batch = _growth(tmp_path, milvus_server, 10**9, full=True)
    # measured: 0.5 MB streamed (about 6 KB of metadata per document), 17 MB in one batch
    assert streamed < added_text and streamed < one_batch / 10, (streamed, one_batch, added_text)
    same = _growth(tmp_path, milvus_server, 20_000, full=False)
    assert same < added_text / 2, (same, added_text)  # measured 0.34 MB: records, no text
