"""The SQL side (documents, L0, embedding cache, locks, audit) on SQLite and on PostgreSQL,
and schema migrations that keep data. PostgreSQL runs when KBFLOW_TEST_POSTGRES_URL names a
server (.ci/run starts one on loopback); locally without one those cases are skipped."""

from __future__ import annotations

import os
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, select, text

from flows.cli import main
from ingest.reindex import reindex
from kbcore.schema import SchemaOutdated, current_revision, head_revision, upgrade
from kbcore.settings import Settings
from kbcore.sql import Base, DocumentRow, LookupAuditRow, SqlStore
from kbcore.stores import open_stores
from retrieval import lookup_knowledge
from tests.conftest import write_doc

PG = os.environ.get("KBFLOW_TEST_POSTGRES_URL", "")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kb.db'}"
        return
    if not PG:
        pytest.skip("KBFLOW_TEST_POSTGRES_URL not set (CI sets it)")
    name = f"kbflow_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))  # name is generated here, not user input
    url = PG.rsplit("/", 1)[0] + "/" + name
    yield url
    from kbcore.stores import close_all

    close_all()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_migrations_build_exactly_the_models(database_url):
    sql = SqlStore(database_url)
    assert current_revision(sql.engine) == head_revision()
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
    assert '"from": "0001", "to": "0004"' in capsys.readouterr().out
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
