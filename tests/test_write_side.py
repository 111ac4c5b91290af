"""Planning and apply on the in-memory chunk store: the write side's logic in milliseconds.

The same scenarios run against Milvus Lite and the real model in test_reindex.py and
test_real_ingest.py; these check the logic alone (a SQLite file holds the records, a hashing
encoder stands in for the model).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from kbflow.core.chunk_store import alias_for
from kbflow.core.embedder import model_id_for
from kbflow.core.memory_store import MemoryChunkStore
from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, SqlStore
from kbflow.core.stores import Stores
from kbflow.ingest.apply import apply_plan
from kbflow.ingest.planning import plan_scope
from kbflow.ingest.reindex import pipeline_hash, plan, reindex, start
from kbflow.ingest.sources import resolve_roots, scan_roots
from tests.conftest import write_doc

DIM = 8


class HashingEncoder:
    """Deterministic unit vectors from text hashes: same text, same vector; no model."""

    batch_size = 32

    def __init__(self, settings: Settings) -> None:
        self.model_id = model_id_for(settings.embedding_model, settings.embedding_backend)
        self.dim = DIM
        self.calls = 0

    def prepare(self, threads: int = 0) -> None:
        pass

    def encode(self, texts, threads: int = 0) -> np.ndarray:
        self.calls += len(texts)
        out = np.array(
            [np.frombuffer(hashlib.sha256(t.encode()).digest()[:DIM], dtype=np.uint8) for t in texts],
            dtype=np.float32,
        ).reshape(len(texts), DIM) + 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture
def mem(tmp_path: Path) -> Stores:
    settings = Settings(home=tmp_path / "home")
    settings.ensure_home()
    stores = Stores(settings, SqlStore(settings.resolved_database_url), MemoryChunkStore())
    stores._embedder = HashingEncoder(settings)
    yield stores
    stores.sql.dispose()


def chunks(stores: Stores, scope: str = "s1") -> dict[str, list[int]]:
    """Stored chunk indexes per source, read through the alias."""
    store: MemoryChunkStore = stores.chunks
    target = store.alias_target(alias_for(stores.settings.collection_prefix, scope))
    out: dict[str, list[int]] = {}
    for row in store.tables.get(target, {}).values():
        out.setdefault(row.source, []).append(row.chunk_index)
    return {k: sorted(v) for k, v in sorted(out.items())}


def records(stores: Stores, scope: str = "s1") -> dict[str, DocumentRow]:
    with stores.sql.session() as session:
        return {r.doc_id: r for r in session.query(DocumentRow).filter_by(kb_scope=scope)}


def two_docs(root: Path) -> None:
    write_doc(root, "pool.md", source="pool", scope="s1", body="# Pool\n\n## Size\n\nSet the pool size.\n")
    write_doc(root, "evict.md", source="evict", scope="s1", body="# Evict\n\n## Policy\n\nLRU eviction.\n")


def long_body(sections: int) -> str:
    return "# Long\n\n" + "".join(f"## Part {i}\n\n{'word ' * 200}{i}\n\n" for i in range(sections))


def test_plan_is_a_diff_of_the_scan_against_the_records(tmp_path, mem):
    docs = tmp_path / "docs"
    two_docs(docs)
    assert reindex([docs], stores=mem).added == 2
    write_doc(docs, "pool.md", source="pool", scope="s1", body="# Pool\n\n## Size\n\nA new size.\n")
    write_doc(docs, "new.md", source="new", scope="s1")
    (docs / "evict.md").unlink()
    scan = scan_roots(resolve_roots([docs]), default_scope="default", only_scope=None, max_file_bytes=10**6)
    with mem.sql.session() as session:
        recorded = list(session.query(DocumentRow).filter_by(kb_scope="s1"))
    p = plan_scope(recorded, "s1", scan, mem.settings, pipeline_hash(mem.settings))
    assert sorted(d.doc_id for d in p.to_write) == ["new", "pool"]
    assert [r.doc_id for r in p.stale] == ["evict"] and p.unchanged == [] and p.failures == []
    assert chunks(mem) == {"evict": [0], "pool": [0]}  # planning wrote nothing


def test_the_delete_guard_keeps_a_root_that_now_looks_empty(tmp_path, mem):
    docs = tmp_path / "docs"
    two_docs(docs)
    reindex([docs], stores=mem)
    for f in docs.glob("*.md"):
        f.unlink()
    summary = reindex([docs], stores=mem)
    assert not summary.ok and "no Markdown file found" in summary.failed[0]["reason"]
    assert summary.removed == 0 and chunks(mem) == {"evict": [0], "pool": [0]}


def test_incremental_apply_replaces_exactly_the_changed_chunks(tmp_path, mem):
    docs = tmp_path / "docs"
    two_docs(docs)
    write_doc(docs, "long.md", source="long", scope="s1", body=long_body(4))
    reindex([docs], stores=mem)
    before = len(chunks(mem)["long"])
    embedded = mem.embedder.calls
    write_doc(docs, "long.md", source="long", scope="s1", body=long_body(1))  # shorter version
    (docs / "evict.md").unlink()
    summary = reindex([docs], stores=mem)
    assert (summary.updated, summary.removed, summary.unchanged) == (1, 1, 1)
    now = records(mem)["long"].chunk_count
    assert now < before and records(mem)["long"].status == "indexed"
    # the old tail and the removed document are gone
    assert chunks(mem) == {"long": list(range(now)), "pool": [0]}
    assert mem.embedder.calls - embedded <= now  # only the changed document was embedded


def test_a_refused_document_fails_alone_and_keeps_its_last_good_version(tmp_path, mem):
    docs = tmp_path / "docs"
    two_docs(docs)
    reindex([docs], stores=mem)
    mem.chunks.refuse = lambda row: "schema says no" if "REFUSE" in row.text else None
    write_doc(docs, "pool.md", source="pool", scope="s1", body="# Pool\n\n## Size\n\nREFUSE this one.\n")
    write_doc(docs, "evict.md", source="evict", scope="s1", body="# Evict\n\n## Policy\n\nLFU now.\n")
    summary = reindex([docs], stores=mem)
    assert [Path(f["path"]).name for f in summary.failed] == ["pool.md"]
    assert "schema says no" in summary.failed[0]["reason"] and summary.updated == 1
    target = mem.chunks.alias_target(alias_for(mem.settings.collection_prefix, "s1"))
    stored = {r.source: r.text for r in mem.chunks.tables[target].values()}
    assert "Set the pool size." in stored["pool"] and "LFU now." in stored["evict"]
    assert records(mem)["pool"].status == "error" and records(mem)["evict"].status == "indexed"


def test_a_retried_apply_starts_from_the_same_plan_and_converges(tmp_path, mem):
    docs = tmp_path / "docs"
    two_docs(docs)
    reindex([docs], stores=mem)
    write_doc(docs, "pool.md", source="pool", scope="s1", body="# Pool\n\n## Size\n\nChanged.\n")
    run = start([docs], stores=mem)
    scope_plan = plan(mem, "s1", run.scan)
    real_upsert = MemoryChunkStore.upsert
    mem.chunks.upsert = lambda *a: (_ for _ in ()).throw(ConnectionError("store went away"))
    with pytest.raises(ConnectionError):
        apply_plan(mem, scope_plan, full=False)
    assert records(mem)["pool"].status == "writing"  # the record says what to redo
    mem.chunks.upsert = real_upsert.__get__(mem.chunks)
    summary, failures = apply_plan(mem, scope_plan, full=False)  # the retry, same plan
    assert failures == [] and summary.updated == 1 and records(mem)["pool"].status == "indexed"
    assert [d.doc_id for d in scope_plan.to_write] == ["pool"]  # applying left the plan as it was
    assert reindex([docs], stores=mem).unchanged == 2


def test_full_rebuild_moves_the_alias_and_carries_other_roots(tmp_path, mem):
    a, b = tmp_path / "a", tmp_path / "b"
    write_doc(a, "pool.md", source="pool", scope="s1")
    write_doc(b, "evict.md", source="evict", scope="s1")
    reindex([a, b], stores=mem)
    alias = alias_for(mem.settings.collection_prefix, "s1")
    before = mem.chunks.alias_target(alias)
    summary = reindex([a], full=True, stores=mem)
    after = mem.chunks.alias_target(alias)
    assert after != before and before not in mem.chunks.collections()  # old collection dropped
    assert summary.chunks_copied == 1 and chunks(mem) == {"evict": [0], "pool": [0]}
    assert mem.chunks.collections() == [after]
