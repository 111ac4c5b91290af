"""L0 entry contents (SPEC §2.4), built from a parsed document and stored in SQL."""

from __future__ import annotations

from sqlalchemy import select

from kbflow.core.sql import L0EntryRow, L0TermRow, SqlStore
from kbflow.ingest.chunking import chunk_markdown
from kbflow.ingest.l0_index import build_l0_entry, extract_entities, write_l0
from kbflow.ingest.parsing import parse_document

TEXT = """---
source: mysql-connection-pool
breadcrumb: Database > MySQL > Connection Pool
kb_scope: rag-eval
keywords: [HikariCP, connection timeout]
---
# MySQL connection pool exhausted

## Symptoms

Requests fail once `max_connections` is reached; HikariPool reports timeouts.
Tune spring.datasource.hikari.maximum-pool-size and the leakDetectionThreshold setting.

```sql
SELECT NOISY_CODE_IDENTIFIER FROM t;
```

## Leak detection

Enable logging.
"""


def entry():
    doc, _ = parse_document(TEXT, content_hash="h", rel_path="p.md", root="/r", default_scope="default")
    return build_l0_entry(doc, chunk_markdown(doc.body))


def test_entry_fields():
    e = entry()
    assert (e.title, e.category, e.domains) == (
        "MySQL connection pool exhausted",
        "Database",
        ["MySQL", "Connection Pool"],
    )
    assert e.breadcrumb == "Database > MySQL > Connection Pool"
    assert e.keywords[:2] == ["HikariCP", "connection timeout"]  # frontmatter first
    assert {"Symptoms", "Leak detection"} <= set(e.keywords)  # then headings


def test_entities_are_identifiers_from_the_body():
    ents = set(entry().entities)
    assert {
        "max_connections",
        "HikariPool",
        "leakDetectionThreshold",
        "spring.datasource.hikari.maximum-pool-size",
    } <= ents
    assert "NOISY_CODE_IDENTIFIER" not in ents  # code blocks are not mined
    assert "the" not in {e.lower() for e in extract_entities("the plain words only")}


def test_terms_stored_normalized_and_replaced(tmp_path):
    sql = SqlStore(f"sqlite:///{tmp_path / 'l0.db'}")
    with sql.session() as s, s.begin():
        write_l0(s, entry())
    with sql.session() as s, s.begin():
        write_l0(s, entry())  # rewriting replaces, never duplicates
    with sql.session() as s:
        assert s.scalars(select(L0EntryRow)).one().category == "Database"
        terms = s.execute(
            select(L0TermRow.term, L0TermRow.kind).where(L0TermRow.kb_scope == "rag-eval")
        ).all()
    assert ("hikaricp", "keyword") in terms and ("max_connections", "entity") in terms
    assert ("database", "category") in terms and ("connection pool", "domain") in terms
    assert len(terms) == len(set(terms))
