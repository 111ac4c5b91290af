"""Property test: no source id, however hostile, reaches a Milvus filter or SQL as code.

Every filter path that takes documents (delete, delete the tail of a document, read for a
rebuild copy, a search that leaves documents out) runs with generated ids — quotes,
backslashes, `or`/`and`, unicode, 512-character values — against a real Milvus Lite file and
Milvus Lite's gRPC server, and must touch exactly the documents it names. SQL records are
written and read back through the same ids.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, example, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from sqlalchemy import delete, select

from kbflow.core import milvus_store as ms
from kbflow.core.milvus_store import open_client
from kbflow.core.sql import DocumentRow, SqlStore
from kbflow.core.validation import SOURCE_MAX_CHARS, doc_key
from kbflow.flows.serve import start_milvus_lite_server

HOSTILE = [
    '" or kb_scope != "',
    "' or 1 == 1 or '",
    '\\" or doc_id like "%',
    'a" || doc_id != "b',
    "x) or (true",
    "and",
    "or not",
    'doc_id in ["a", "b"]',
    "\\",
    '"',
    "%_*",
    "ünïcødé/路径/файл#frag?q=1&r=2",
    "https://wiki.example.com/ops/db#pool",
    "docs/runbooks/etcd.md",
    "x" * SOURCE_MAX_CHARS,
    "🙂" * SOURCE_MAX_CHARS,
    " leading and trailing ",
]
sources = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(
        st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=SOURCE_MAX_CHARS
    ),
)
SCOPE = "prop"
DIM = 4
_counter = itertools.count()


@pytest.fixture(scope="module")
def grpc_uri(tmp_path_factory):
    proc, uri = start_milvus_lite_server(str(tmp_path_factory.mktemp("prop-server") / "data.db"))
    yield uri
    proc.terminate()
    proc.wait(30)


@pytest.fixture(params=["lite", "grpc"])
def client(request, tmp_path_factory):
    if request.param == "lite":
        c = open_client(str(tmp_path_factory.mktemp("prop-lite") / "milvus.db"))
    else:
        c = open_client(request.getfixturevalue("grpc_uri"), "prop-token")
    yield c
    c.close()


def _rows(source: str, chunks: int) -> list[dict]:
    key = doc_key(source)
    return [
        {
            "id": f"{key}#{i}",
            "doc_id": key,
            "source": source,
            "_source": "x.md",
            "kb_scope": SCOPE,
            "category": "",
            "breadcrumb": "",
            "title": "t",
            "heading_path": "",
            "chunk_index": i,
            "text": "text",
            "lexical": "text",
            "dense": [0.5] * DIM,
        }
        for i in range(chunks)
    ]


def _stored(client, name: str) -> dict[str, set[int]]:
    client.flush(name)
    out: dict[str, set[int]] = {}
    for r in client.query(name, filter=f'kb_scope == "{SCOPE}"', output_fields=["source", "chunk_index"]):
        out.setdefault(r["source"], set()).add(int(r["chunk_index"]))
    return out


@hyp_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=sources, other=sources)
@example(target="x" * SOURCE_MAX_CHARS, other="x" * SOURCE_MAX_CHARS)  # once made a 514-char id
def test_filters_touch_exactly_the_named_documents(client, target, other):
    assume(doc_key(target) != doc_key(other))  # two documents, not one named twice
    bystander = "bystander"
    name = f"prop_{next(_counter)}"
    ms.create_collection(client, name, DIM, "standard")
    try:
        ms.upsert_rows(client, name, _rows(target, 3) + _rows(other, 3) + _rows(bystander, 2))
        assert _stored(client, name) == {target: {0, 1, 2}, other: {0, 1, 2}, bystander: {0, 1}}

        copied = ms.read_doc_rows(client, name, SCOPE, [other])
        assert {r["source"] for r in copied} == {other} and len(copied) == 3

        # a leave-out search: both legs, everything but the named document
        store = ms.MilvusChunkStore(client)
        for leg in (store.search(name, [0.5] * DIM, scope=SCOPE, limit=20, exclude=[target]),
                    store.text_search(name, "text", scope=SCOPE, limit=20, exclude=[target])):
            assert {row.source for row, _ in leg} == {other, bystander}

        ms.delete_chunks_from(client, name, SCOPE, other, 1)
        ms.delete_docs(client, name, SCOPE, [target])
        assert _stored(client, name) == {other: {0}, bystander: {0, 1}}
    finally:
        client.drop_collection(name)


@hyp_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=sources)
def test_sql_records_bind_every_source(tmp_path_factory, source):
    sql = SqlStore(f"sqlite:///{tmp_path_factory.mktemp('prop-sql') / 'k.db'}")
    row = dict(root="/r", source_path="x.md", content_hash="h", pipeline_hash="p", status="indexed")
    with sql.session() as s, s.begin():
        s.add(DocumentRow(kb_scope=SCOPE, doc_id=source, **row))
        s.add(DocumentRow(kb_scope=SCOPE, doc_id="bystander", **row))
    with sql.session() as s, s.begin():
        assert s.scalars(select(DocumentRow.doc_id).where(DocumentRow.doc_id == source)).all() == [source]
        s.execute(delete(DocumentRow).where(DocumentRow.doc_id.in_([source])))
    with sql.session() as s:
        assert s.scalars(select(DocumentRow.doc_id)).all() == ["bystander"]
    sql.dispose()
