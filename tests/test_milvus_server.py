"""The same code against a network Milvus: Milvus Lite's gRPC server on a free loopback port
stands in for a Milvus server (KBFLOW_MILVUS_URI=http://127.0.0.1:PORT)."""

from __future__ import annotations

import json

import pytest

from kbflow.core import milvus_store as ms
from kbflow.core.settings import Settings
from kbflow.evaluation.runner import EVAL_ROOT, run_eval
from kbflow.flows.serve import start_milvus_lite_server
from kbflow.ingest.reindex import reindex
from kbflow.retrieval import lookup_knowledge
from tests.conftest import write_doc

TOKEN = "test-token"


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory):  # Milvus Lite's engine on a loopback port: a stand-in server
    proc, uri = start_milvus_lite_server(str(tmp_path_factory.mktemp("milvus-server") / "data.db"))
    yield uri
    proc.terminate()
    proc.wait(30)


def test_reindex_lookup_and_eval_through_a_network_milvus(milvus_server, tmp_path):
    settings = Settings(home=tmp_path / "home", milvus_uri=milvus_server, milvus_token=TOKEN)
    assert settings.resolved_milvus_uri == milvus_server and not settings.uses_milvus_lite

    docs = tmp_path / "docs"
    write_doc(
        docs,
        "a.md",
        source="doc-a",
        scope="net",
        breadcrumb="Message Queue > Kafka",
        body="# Kafka lag\n\n## Symptoms\n\nThe consumer group lag keeps growing.\n",
    )
    first = reindex([docs], settings=settings)
    assert first.ok and first.added == 1
    assert reindex([docs], settings=settings).chunks_embedded == 0  # incremental, through the network
    old = first.scopes["net"].physical_collection
    full = reindex([docs], full=True, settings=settings)
    store = ms.MilvusChunkStore(ms.open_client(milvus_server, TOKEN))
    assert store.alias_target(full.scopes["net"].collection) == full.scopes["net"].physical_collection
    assert old not in store.collections()

    for mode in ("hybrid", "dense"):
        r = lookup_knowledge(
            "kafka consumer group lag keeps growing", kb_scope="net", mode=mode, settings=settings
        )
        assert r.found and r.evidence[0].doc_id == "doc-a"

    outcome = run_eval(source="live", modes=["hybrid"], settings=settings, scope="rag-eval")
    # through the network endpoint, exactly the cases that pass in the committed baseline pass
    baseline = json.loads((EVAL_ROOT / "reports" / "baseline.json").read_text())
    expected = {c["case_id"] for c in baseline["modes"]["hybrid"]["cases"] if c["passed"]}
    passed = {c["case_id"] for c in outcome.report["modes"]["hybrid"]["cases"] if c["passed"]}
    assert passed == expected & {c["case_id"] for c in outcome.report["modes"]["hybrid"]["cases"]}


def test_real_ids_moves_and_full_rebuilds_across_roots_through_a_network_milvus(milvus_server, tmp_path):
    """The write side's guarantees hold on the endpoint too: free-text ids as written, a moved
    root that embeds nothing, a --full that copies another root's documents, a guarded delete."""
    settings = Settings(home=tmp_path / "home", milvus_uri=milvus_server, milvus_token=TOKEN)
    a, b = tmp_path / "a", tmp_path / "b"
    write_doc(
        a,
        "pool.md",
        source='"https://wiki.example.com/ops/db#pool"',
        scope="net2",
        body="# Pool\n\n## Fix\n\nThe database connection pool is exhausted.\n",
    )
    write_doc(
        b,
        "etcd.md",
        source='"docs/runbooks/etcd.md"',
        scope="net2",
        body="# Etcd\n\n## Fix\n\nEtcd lost quorum after two members failed.\n",
    )
    assert reindex([a], settings=settings).ok and reindex([b], settings=settings).ok
    moved = tmp_path / "a-moved"
    a.rename(moved)
    again = reindex([moved], settings=settings)
    assert again.ok and again.chunks_embedded == 0 and again.removed == 0
    full = reindex([moved], full=True, settings=settings)
    assert full.ok and full.chunks_copied == 1
    for query, source in (
        ("database connection pool exhausted", "https://wiki.example.com/ops/db#pool"),
        ("etcd lost quorum", "docs/runbooks/etcd.md"),
    ):
        assert lookup_knowledge(query, kb_scope="net2", settings=settings).evidence[0].doc_id == source
    (moved / "pool.md").unlink()
    refused = reindex([moved], settings=settings)
    assert not refused.ok and refused.removed == 0  # an emptied root removes nothing


def test_two_installations_share_one_server_in_databases_of_their_own(milvus_server, tmp_path):
    """KBFLOW_MILVUS_DATABASE: each installation's collections live in its own database (created
    when absent), so the same scope name on one server never mixes their documents. Milvus
    Lite 2.5, the stand-in server here, has no databases: then the test cannot run."""
    try:
        ms.open_client(milvus_server, TOKEN).list_databases()
    except Exception as exc:  # noqa: BLE001 - UNIMPLEMENTED, wrapped by pymilvus
        pytest.skip(f"the stand-in Milvus has no databases ({type(exc).__name__}); a Milvus server has")
    docs = {}
    bodies = {"team_a": "The Kafka consumer lag grows.", "team_b": "The Redis cache evicts keys."}
    for team, body in bodies.items():
        docs[team] = tmp_path / team
        text = f"# Runbook\n\n## Symptom\n\n{body}\n"
        write_doc(docs[team], "a.md", source=f"doc-{team}", scope="ops", body=text)
    for team in docs:
        settings = Settings(
            home=tmp_path / f"home-{team}", milvus_uri=milvus_server, milvus_token=TOKEN, milvus_database=team
        )
        assert reindex([docs[team]], settings=settings).added == 1

    client = ms.open_client(milvus_server, TOKEN)
    assert {"team_a", "team_b"} <= set(client.list_databases())
    for team, other in (("team_a", "team_b"), ("team_b", "team_a")):
        settings = Settings(
            home=tmp_path / f"home-{team}", milvus_uri=milvus_server, milvus_token=TOKEN, milvus_database=team
        )
        r = lookup_knowledge("runbook symptom", kb_scope="ops", mode="bm25", settings=settings)
        ids = {e.doc_id for e in r.evidence}
        assert f"doc-{team}" in ids and f"doc-{other}" not in ids
        assert ms.open_client(milvus_server, TOKEN, team).list_collections()  # its collection is there

    with pytest.raises(ValueError, match="milvus_database"):
        Settings(milvus_database="bad name; drop")
