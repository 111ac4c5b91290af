"""Parsing and validation contract of one Markdown file (SPEC §2.1-2.2)."""

from __future__ import annotations

import pytest

from kbflow.core.validation import InvalidValue, eq, validate_category, validate_scope
from kbflow.ingest.parsing import DocumentError, derive_doc_id, parse_document, read_text

GOOD = """---
source: mysql-connection-pool
breadcrumb: Database > MySQL > Connection Pool
kb_scope: rag-eval
keywords: [HikariCP, max_connections]
owner: dba-team
---
# MySQL connection pool exhausted

Body text.
"""


def parse(text: str, rel: str = "a/b.md"):
    return parse_document(text, content_hash="h", rel_path=rel, root="/r", default_scope="default")


def test_frontmatter_fields_and_body_stripped():
    doc, warnings = parse(GOOD)
    assert warnings == []
    assert doc.doc_id == "mysql-connection-pool" and not doc.doc_id_derived
    assert doc.kb_scope == "rag-eval"
    assert doc.breadcrumb == ["Database", "MySQL", "Connection Pool"]
    assert doc.category == "Database" and doc.domains == ["MySQL", "Connection Pool"]
    assert doc.keywords == ["HikariCP", "max_connections"]
    assert doc.title == "MySQL connection pool exhausted"  # from the first H1
    assert doc.extra == {"owner": "dba-team"}  # unknown keys kept as metadata
    assert "breadcrumb" not in doc.body and "source:" not in doc.body
    assert doc.body.lstrip().startswith("# MySQL connection pool exhausted")


def test_absent_scope_uses_default_and_title_key_wins():
    doc, _ = parse("---\nsource: x1\ntitle: Given title\n---\n# Heading\n\ntext\n")
    assert doc.kb_scope == "default"
    assert doc.title == "Given title"


def test_missing_source_derives_stable_id_with_warning():
    text = "---\nbreadcrumb: Cache > Redis\n---\n# Redis\n\ntext\n"
    doc, warnings = parse(text, "runbooks/Redis Evictions.md")
    again, _ = parse(text, "runbooks/Redis Evictions.md")
    assert doc.doc_id_derived and doc.doc_id == again.doc_id == derive_doc_id("runbooks/Redis Evictions.md")
    assert doc.doc_id.startswith("runbooks-redis-evictions-")
    assert any("derived stable id" in w for w in warnings)
    assert derive_doc_id("a b.md") != derive_doc_id("a-b.md")  # no collisions between look-alikes


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\nsource: [unclosed\n---\nbody\n", "invalid YAML frontmatter at line"),
        ("---\nsource: ok\n---\n   \n\n", "empty body"),
        ('---\nsource: "a\\tb"\n---\nbody\n', "control character U+0009"),
        ("---\nsource: " + "x" * 513 + "\n---\nbody\n", "513 characters, at most 512"),
        ("---\nsource: [a, b]\n---\nbody\n", "'source' must be a single value"),
        ('---\nsource: ok\nkb_scope: x" or kb_scope != "\n---\nbody\n', "invalid kb_scope"),
        ('---\nsource: ok\nbreadcrumb: Data"base > x\n---\nbody\n', "breadcrumb: invalid category"),
        ("---\nsource: ok\nkeywords: {a: 1}\n---\nbody\n", "'keywords' must be a list"),
    ],
)
def test_rejections_name_the_reason(text: str, reason: str):
    with pytest.raises(DocumentError) as err:
        parse(text)
    assert reason in err.value.reason


def test_read_text_rejects_binary_non_utf8_and_oversize(tmp_path):
    binary = tmp_path / "b.md"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    latin = tmp_path / "l.md"
    latin.write_bytes("---\nsource: x\n---\ncaf\xe9\n".encode("latin-1"))
    big = tmp_path / "big.md"
    big.write_text("x" * 5000)
    with pytest.raises(DocumentError, match="binary"):
        read_text(binary, 10_000)
    with pytest.raises(DocumentError, match="not valid UTF-8: byte 0xe9"):
        read_text(latin, 10_000)
    with pytest.raises(DocumentError, match="over the 2048-byte limit"):
        read_text(big, 2048)
    text, digest = read_text(big, 10_000)
    assert len(digest) == 64 and text == "x" * 5000


def test_filter_values_are_validated_not_escaped():
    assert eq("kb_scope", validate_scope("rag-eval")) == 'kb_scope == "rag-eval"'
    for bad in ['x" or kb_scope != "', "a b", "", "x" * 65, "scope\\"]:
        with pytest.raises(InvalidValue):
            validate_scope(bad)
    assert validate_category("数据库") == "数据库"  # human categories may be Chinese
    with pytest.raises(InvalidValue):
        validate_category('a" or "1')
