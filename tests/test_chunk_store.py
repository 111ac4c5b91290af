"""One contract, two stores: the same scenario on Milvus Lite and on the in-memory store, so the
fast write-side tests (test_write_side.py) test what really runs."""

from __future__ import annotations

import pytest

from kbflow.core.chunk_store import ChunkRow, ChunkStore, alias_for, new_physical_name
from kbflow.core.memory_store import MemoryChunkStore
from kbflow.core.milvus_store import MilvusChunkStore, open_client
from kbflow.core.validation import doc_key

DIM = 4


def _row(source: str, index: int, text: str, dense: list[float], category: str = "db") -> ChunkRow:
    key = doc_key(source)
    return ChunkRow(
        id=f"{key}#{index}", doc_id=key, source=source, source_path=f"{source}.md", kb_scope="s1",
        category=category, breadcrumb="Database > MySQL", title=source.title(), heading_path="Fix",
        chunk_index=index, text=text, dense=dense, lexical=text.lower(),
    )


@pytest.fixture(params=["memory", "milvus-lite"])
def store(request, tmp_path) -> ChunkStore:
    if request.param == "memory":
        yield MemoryChunkStore()
        return
    s = MilvusChunkStore(open_client(str(tmp_path / "milvus.db")))
    yield s
    s.close()


def test_both_stores_keep_the_contract(store):
    alias = alias_for("t", "s1")
    physical = new_physical_name(alias)
    store.create_collection(physical, DIM, "standard")
    assert store.alias_target(alias) is None
    store.point_alias(alias, physical)
    assert store.alias_target(alias) == physical and physical in store.collections()
    rows = [
        _row("pool", 0, "raise the pool size", [1.0, 0.0, 0.0, 0.0]),
        _row("pool", 1, "check idle connections", [0.9, 0.1, 0.0, 0.0]),
        _row("pool", 2, "restart the service", [0.8, 0.2, 0.0, 0.0]),
        _row("evict", 0, "eviction policy lru", [0.0, 1.0, 0.0, 0.0], category="cache"),
    ]
    assert store.upsert(alias, rows) == 4
    store.flush(physical)
    store.load(alias)
    assert store.count(alias, "s1") == 4

    dense = store.search(alias, [1.0, 0.0, 0.0, 0.0], scope="s1", limit=2)
    assert [r.id for r, _ in dense] == ["pool#0", "pool#1"] and dense[0][1] == pytest.approx(0.0, abs=1e-5)
    assert dense[0][0].source_path == "pool.md" and dense[0][0].title == "Pool"
    assert [r.source for r, _ in store.search(alias, [1.0, 0.0, 0.0, 0.0], scope="s1", limit=5,
                                              category="cache")] == ["evict"]
    keyword = store.text_search(alias, "eviction", scope="s1", limit=5)
    assert [r.id for r, _ in keyword] == ["evict#0"]
    assert store.search(alias, [1.0, 0.0, 0.0, 0.0], scope="other", limit=5) == []
    fused = store.hybrid_search(alias, [0.0, 1.0, 0.0, 0.0], "eviction", scope="s1", limit=2)
    assert fused[0][0].id == "evict#0"

    copied = store.read_docs(alias, "s1", ["pool"])
    assert sorted(r.chunk_index for r in copied) == [0, 1, 2]
    assert list(copied[0].dense) == pytest.approx(next(r.dense for r in rows if r.id == copied[0].id))

    store.delete_chunks_from(alias, "s1", "pool", 1)  # a shorter version of the document
    store.delete_docs(alias, "s1", ["evict"])
    store.flush(physical)
    assert [r.id for r in store.read_docs(alias, "s1", ["pool", "evict"])] == ["pool#0"]

    rebuilt = new_physical_name(alias) + "x"
    store.create_collection(rebuilt, DIM, "standard")
    store.point_alias(alias, rebuilt)
    assert store.drop_unaliased(alias) == [physical] and store.collections() == [rebuilt]
    store.drop_alias(alias)
    store.drop_collection(rebuilt)
    assert store.alias_target(alias) is None and store.collections() == []


def test_scopes_and_categories_are_checked_before_any_filter(store):
    alias = alias_for("t", "s1")
    physical = new_physical_name(alias)
    store.create_collection(physical, DIM, "standard")
    store.point_alias(alias, physical)
    store.load(alias)
    for bad in ['s1" or kb_scope != "', "s1 or 1==1"]:
        with pytest.raises(ValueError):
            store.search(alias, [1.0, 0.0, 0.0, 0.0], scope=bad, limit=3)
    with pytest.raises(ValueError):
        store.text_search(alias, "x", scope="s1", limit=3, category='db" or category != "')


def test_a_search_follows_an_alias_another_process_moved(tmp_path, monkeypatch):
    """A lookup reuses the collection an alias named a moment ago; when a rebuild elsewhere moves
    the alias and drops the old collection, the next search answers from the new one."""
    monkeypatch.setattr("kbflow.core.milvus_store.ALIAS_TTL_S", 3600.0)  # the reuse is certain
    db = str(tmp_path / "milvus.db")
    reader, writer = MilvusChunkStore(open_client(db)), MilvusChunkStore(open_client(db))
    try:
        alias = alias_for("t", "s1")
        old, new = new_physical_name(alias), new_physical_name(alias) + "x"
        for physical, row in ((old, _row("pool", 0, "raise the pool size", [1.0, 0.0, 0.0, 0.0])),
                              (new, _row("evict", 0, "eviction policy lru", [1.0, 0.0, 0.0, 0.0]))):
            writer.create_collection(physical, DIM, "standard")
            writer.upsert(physical, [row])
            writer.flush(physical)
            writer.load(physical)
        def found() -> list[str]:
            return [r.id for r, _ in reader.search(alias, [1.0, 0.0, 0.0, 0.0], scope="s1", limit=3)]

        writer.point_alias(alias, old)
        assert found() == ["pool#0"]
        writer.point_alias(alias, new)
        assert writer.drop_unaliased(alias) == [old]
        assert found() == ["evict#0"]
        assert [r.id for r, _ in reader.text_search(alias, "eviction", scope="s1", limit=3)] == ["evict#0"]
    finally:
        reader.close()
        writer.close()
