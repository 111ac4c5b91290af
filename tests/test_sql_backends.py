"""The SQL side (documents, L0, embedding cache, locks, audit) on SQLite and on PostgreSQL,
and schema migrations that keep data. PostgreSQL runs when KBFLOW_TEST_POSTGRES_URL names a
server (.ci/run starts one on loopback; the `database_url` fixture is in conftest); locally
without one those cases are skipped."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, select, text

from kbflow.core import milvus_store as ms
from kbflow.core.embedder import EmbeddingCache, EmbedStats, get_embedder
from kbflow.core.schema import HEAD_REVISION, SchemaOutdated, current_revision, head_revision, upgrade
from kbflow.core.settings import Settings
from kbflow.core.sql import Base, DocumentRow, EmbeddingCacheRow, LookupAuditRow, SqlStore
from kbflow.core.stores import open_stores
from kbflow.flows.cli import main
from kbflow.ingest.reindex import reindex
from kbflow.retrieval import lookup_knowledge
from tests.conftest import write_doc


def test_migrations_build_exactly_the_models(database_url):
    sql = SqlStore(database_url)
    assert current_revision(sql.engine) == head_revision() == HEAD_REVISION  # the constant is bumped
    with sql.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diffs == []
    sql.dispose()


def test_upgrade_keeps_existing_data(database_url, tmp_path, capsys):
    engine = create_engine(database_url)
    assert upgrade(engine, "0001") == "0001"  # a database left by an older kbflow
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO documents (kb_scope, doc_id, root, source_path, title, breadcrumb, "
                "content_hash, pipeline_hash, chunk_count, status, doc_id_derived, extra_metadata, "
                "created_at, updated_at) "
                "VALUES ('ops', 'kept', '/r', 'k.md', 'Kept', '', 'h', 'p', 1, 'indexed', false, '{}', "
                "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
    engine.dispose()
    with pytest.raises(SchemaOutdated, match="kbflow db upgrade"):
        SqlStore(database_url)
    assert (
        main(["db", "upgrade", "--database-url", database_url, "--home", str(tmp_path / "h"), "--json"]) == 0
    )
    assert '"from": "0001", "to": "0008"' in capsys.readouterr().out
    sql = SqlStore(database_url)
    with sql.session() as s:
        assert s.scalars(select(DocumentRow.title)).all() == ["Kept"]
    sql.dispose()


def test_reindex_lookup_and_audit_on_the_backend(database_url, tmp_path):
    settings = Settings(home=tmp_path / "home", database_url=database_url)
    docs = tmp_path / "docs"
    write_doc(
        docs,
        "k.md",
        source="kafka-lag",
        scope="ops",
        breadcrumb="Message Queue > Kafka",
        keywords=["consumer lag", "records-lag-max"],
        body="# Kafka lag\n\n## Symptoms\n\nThe consumer group lag keeps growing; records-lag-max rises.\n",
    )
    write_doc(
        docs,
        "r.md",
        source="redis-evict",
        scope="ops",
        breadcrumb="Cache > Redis",
        body="# Redis evictions\n\n## Symptoms\n\nevicted_keys grows when maxmemory is reached.\n",
    )
    first = reindex([docs], settings=settings)
    assert first.ok and first.added == 2
    again = reindex([docs], settings=settings)
    assert again.unchanged == 2 and again.chunks_embedded == 0
    (docs / "r.md").unlink()
    assert reindex([docs], settings=settings).removed == 1
    r = lookup_knowledge("kafka consumer lag keeps growing", kb_scope="ops", settings=settings)
    assert r.found and r.evidence[0].doc_id == "kafka-lag"
    assert r.retrieval_trace.l0.category_filter == "Message Queue"  # L0 terms matched in SQL
    assert r.audit_id is not None
    stores = open_stores(settings)
    assert stores.sql.engine.dialect.name == database_url.split(":")[0].split("+")[0].replace(
        "postgresql", "postgresql"
    )
    with stores.sql.session() as s:
        row = s.get(LookupAuditRow, r.audit_id)
        assert row.evidence_keys[0].startswith("kafka-lag#") and row.result["found"] is True

    # the owner's view reads the same rows on this backend: gaps, per-day series, the purge
    from datetime import UTC, datetime, timedelta

    from kbflow.insights.daily import daily_series
    from kbflow.insights.gaps import knowledge_gaps, model_embedder
    from kbflow.retrieval.audit import purge_expired

    for q in ("vault is sealed after a restart", "how do I unseal hashicorp vault"):
        assert lookup_knowledge(q, kb_scope="ops", settings=settings).audit_id
    gaps = knowledge_gaps(stores.sql, model_embedder(settings), since=timedelta(hours=1))
    assert gaps.lookups == 3 and gaps.unanswered == 2 and gaps.groups[0].count == 2
    now = datetime.now(UTC)
    assert sum(d.lookups for d in daily_series(stores.sql, now - timedelta(days=1), now)) == 3
    assert purge_expired(stores.sql, retention_days=1, now=now + timedelta(days=2)) == 3


# --- embedding cache ------------------------------------------------------------------------

CACHE_TEXTS = [
    "The consumer group lag keeps growing; records-lag-max rises.",
    "evicted_keys grows when maxmemory is reached.",
    "HikariCP: connection is not available, request timed out after 30000ms.",
]


def test_second_embedding_of_the_same_texts_is_served_from_the_cache(database_url):
    embedder = get_embedder()
    sql = SqlStore(database_url)
    first_stats = EmbedStats()
    first = EmbeddingCache(sql, embedder).embed(CACHE_TEXTS, first_stats)
    assert (first_stats.embedded, first_stats.cache_hits) == (3, 0)
    assert first.shape == (3, embedder.dim) and first.dtype == np.float32
    assert np.allclose(first, embedder.encode(CACHE_TEXTS), atol=1e-6)  # the model's own vectors
    sql.dispose()

    sql = SqlStore(database_url)  # a later run: a new engine on the same database
    again_stats = EmbedStats()
    again = EmbeddingCache(sql, embedder).embed(CACHE_TEXTS, again_stats)
    assert (again_stats.embedded, again_stats.cache_hits) == (0, 3)
    assert np.array_equal(again, first)  # bit for bit what was stored

    mixed_stats = EmbedStats()
    mixed = EmbeddingCache(sql, embedder).embed([CACHE_TEXTS[2], "a text never seen before"], mixed_stats)
    assert (mixed_stats.embedded, mixed_stats.cache_hits) == (1, 1)
    assert np.array_equal(mixed[0], first[2])
    with sql.session() as s:
        assert len(s.scalars(select(EmbeddingCacheRow.text_hash)).all()) == 4
    sql.dispose()


def test_a_full_rebuild_reuses_the_cached_vectors(database_url, tmp_path):
    settings = Settings(home=tmp_path / "home", database_url=database_url)
    docs = tmp_path / "docs"
    for i, body in enumerate(CACHE_TEXTS):
        write_doc(docs, f"d{i}.md", source=f"doc-{i}", scope="ops", body=f"# Doc {i}\n\n## Notes\n\n{body}\n")
    first = reindex([docs], settings=settings)
    assert first.ok and first.chunks_embedded == first.chunks_written == 3 and first.cache_hits == 0
    stores = open_stores(settings)
    alias = ms.alias_for(settings.collection_prefix, "ops")

    def served_vectors() -> dict[str, list[float]]:
        stores.chunks.load(alias)
        target = stores.chunks.alias_target(alias)
        rows = stores.milvus.query(target, filter='kb_scope == "ops"', output_fields=["id", "dense"])
        return {r["id"]: list(r["dense"]) for r in rows}

    before = served_vectors()
    full = reindex([docs], full=True, settings=settings)
    assert full.ok and full.chunks_written == 3
    assert full.chunks_embedded == 0 and full.cache_hits == 3  # nothing embedded twice
    assert full.scopes["ops"].physical_collection != first.scopes["ops"].physical_collection
    assert served_vectors() == before  # the new collection serves the very same vectors


class _GatedModel:
    """Stands in for the model: every caller must be inside `encode` before any returns, so two
    runs both miss the cache and then store the same texts at the same moment."""

    model_id = "test/gated"
    dim = 4
    batch_size = 64

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties)

    def encode(self, texts: list[str], threads: int = 0) -> np.ndarray:
        self.barrier.wait(timeout=60)
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_two_runs_embedding_the_same_new_texts_at_once_both_succeed(database_url):
    """Scope locks let runs on different scopes proceed together, and two scopes may hold the
    same chunk text (the same runbook in two teams' scopes): both runs miss the cache and both
    store the same keys. Each must get its vectors, and the cache must hold each text once."""
    texts = [f"shared escalation step {i}: page the on-call engineer" for i in range(200)]
    sql = SqlStore(database_url)
    model = _GatedModel(2)
    results: list[object] = [None, None]

    def run(i: int) -> None:
        try:
            results[i] = EmbeddingCache(sql, model).embed(texts)
        except Exception as exc:  # recorded, asserted below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert all(isinstance(r, np.ndarray) and r.shape == (200, 4) for r in results), [
            r for r in results if not isinstance(r, np.ndarray)
        ]
        with sql.session() as s:
            assert len(s.scalars(select(EmbeddingCacheRow.text_hash)).all()) == 200
    finally:
        sql.dispose()
