"""lookup_knowledge end to end on seed-docs/ through real Milvus Lite, SQLite and the model."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from kbflow.core.settings import Settings
from kbflow.core.sql import LookupAuditRow
from kbflow.core.stores import open_stores
from kbflow.ingest.reindex import reindex
from kbflow.retrieval import lookup_knowledge, project_for_agent
from kbflow.retrieval.pipeline import IndexMissing
from kbflow.retrieval.request import LookupRejected
from tests.conftest import REPO, write_doc

FALLBACK_QUERY = "chat messages arrive late and consumer lag keeps growing"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Settings:
    """seed-docs plus a second scope whose document would match the test queries."""
    base = tmp_path_factory.mktemp("lookup")
    settings = Settings(home=base / "home")
    other = base / "other"
    write_doc(
        other,
        "kafka.md",
        source="other-kafka",
        scope="other-team",
        breadcrumb="Message Queue > Kafka",
        body="# Kafka consumer lag\n\n## Chat\n\nChat messages arrive late when consumer lag grows.\n",
    )
    summary = reindex([REPO / "seed-docs", other], settings=settings)
    assert summary.ok, summary.failed
    return settings


def docs(result) -> list[str]:
    return [e.doc_id for e in result.evidence]


def test_precise_hit(seeded):
    r = lookup_knowledge("kafka consumer group lag growing", kb_scope="rag-eval", settings=seeded)
    assert r.found and r.relevance_level == "PRECISE"
    assert docs(r)[0] == "kafka-consumer-lag"
    assert r.retrieval_trace.selected_attempt == "FILTERED_VECTOR"  # L0 narrowed to Message Queue
    assert r.retrieval_trace.l0.category_filter == "Message Queue"
    assert all(e.quality_score >= 0.5 for e in r.evidence)
    assert "kafka-consumer-lag" in r.context.included_sources
    assert len([d for d in docs(r) if d == "kafka-consumer-lag"]) <= 2  # max_chunks_per_document
    ranks = [e.original_rank for e in r.evidence]
    assert ranks == sorted(ranks)


def test_decoy_drives_the_single_fallback(seeded):
    r = lookup_knowledge(FALLBACK_QUERY, kb_scope="rag-eval", settings=seeded)
    trace = r.retrieval_trace
    assert trace.l0.category_filter == "Gateway"  # the decoy's frontmatter keywords won L0
    assert [a.attempt for a in trace.attempts] == ["FILTERED_VECTOR", "UNFILTERED_VECTOR_RETRY"]
    assert trace.attempts[0].low_quality and trace.attempts[0].category_filter == "Gateway"
    assert trace.attempts[1].category_filter is None and trace.attempts[1].query_used == FALLBACK_QUERY
    assert trace.attempts[1].scopes == ["rag-eval"]  # the retry keeps the scope
    assert trace.selected_attempt == "UNFILTERED_VECTOR_RETRY"
    assert trace.fallback_reason == "filtered_vector_low_quality"
    assert docs(r)[0] == "kafka-consumer-lag" and "chat-gateway-release-notes" not in docs(r)
    assert all(a.elapsed_ms > 0 for a in trace.attempts)


def test_leave_out_searches_as_if_the_document_were_not_indexed(seeded):
    """The leave-out run behind self-calibration: the answer's document is absent from L0 and
    both legs, so the same question becomes a near-domain one."""
    query = "kafka consumer group lag growing"
    left_out = ["kafka-consumer-lag"]
    r = lookup_knowledge(query, kb_scope="rag-eval", settings=seeded, depth=50, exclude=left_out)
    seen = {h.doc_id for hits in r.candidates.values() for h in hits}
    assert seen and "kafka-consumer-lag" not in seen
    assert "rag-eval:kafka-consumer-lag" not in r.retrieval_trace.l0.doc_reasons
    both = lookup_knowledge(query, kb_scope="rag-eval", settings=seeded, depth=50)
    assert docs(both)[0] == "kafka-consumer-lag"  # nothing else changed: the next lookup finds it


def test_tried_gate_signals_read_the_candidate_list(seeded):
    """The signals tried beside cosine and coverage, which benchmarks add to calibration data
    (bench/signals.py)."""
    from bench.signals import candidate_signals

    query = "kafka consumer group lag growing on the pulsar cluster"
    r = lookup_knowledge(query, kb_scope="rag-eval", settings=seeded)
    hits = r.candidates[r.retrieval_trace.selected_attempt]
    signals = candidate_signals(query, hits)
    top = signals[0]
    assert top["cosine"] == hits[0].signals["cosine"]  # the lookup's own signals are kept
    lead = max(range(len(hits)), key=lambda i: signals[i]["cosine"])  # the nearest document leads
    assert signals[lead]["margin"] > 0
    assert all(s["margin"] <= 0 for h, s in zip(hits, signals, strict=True) if h.doc_id != hits[lead].doc_id)
    assert top["unmatched"] > 0  # "pulsar" is in no runbook
    assert top["novel"] > 0.4  # and it is a rare word in general text
    assert top["agreement"] > 0  # both legs found the top runbook
    assert all(-1.0 <= s["spread"] <= 1.0 for s in signals)


def test_vocabulary_signals_read_the_scope(seeded):
    """The tried signals that need the scope's document frequencies, on the real seeded scope,
    and the vocabulary of a leave-out lookup (its documents gone)."""
    from bench.signals import TriedSignals, candidate_signals

    vocab = TriedSignals(seeded).vocabulary("rag-eval")
    assert vocab.docs >= 10 and vocab.df["kafka"] >= 2
    assert vocab.idf("pulsar") > vocab.idf("lag") > vocab.idf("kafka") - 1e-9  # rarer weighs more
    left = vocab.without(["kafka-consumer-lag"])
    assert left.docs == vocab.docs - 1 and left.df["lag"] == vocab.df["lag"] - 1

    query = "kafka consumer group lag growing on the pulsar cluster"
    r = lookup_knowledge(query, kb_scope="rag-eval", settings=seeded)
    hits = r.candidates[r.retrieval_trace.selected_attempt]
    signals = candidate_signals(query, hits, vocab)
    by_doc = {h.doc_id: s for h, s in zip(hits, signals, strict=True)}
    lag = by_doc["kafka-consumer-lag"]
    # the runbook that has the query's rare terms covers more of its idf mass than the others
    assert lag["salient"] == max(s["salient"] for s in signals) and 0 < lag["salient"] < 1
    assert 0 < lag["absent"] < 1  # "pulsar" is nowhere in the scope; the other words are
    assert 0 < lag["specificity"] < 1 and 0 <= lag["bm25"] <= 1
    assert candidate_signals("kafka consumer lag", hits, vocab)[0]["absent"] == 0


def test_chinese_query(seeded):
    r = lookup_knowledge("数据库连接池满了怎么办", kb_scope="rag-eval-zh", settings=seeded)
    assert r.found and docs(r)[0] == "mysql-pool-exhausted-zh"
    assert r.retrieval_trace.l0.category_filter == "数据库"


def test_nothing_relevant_is_guidance_not_failure(seeded):
    r = lookup_knowledge("how do I bake sourdough bread at home", kb_scope="rag-eval", settings=seeded)
    assert not r.found and r.evidence == [] and r.relevance_level is None
    assert r.message.startswith("No usable evidence in the knowledge base")
    agent = project_for_agent(r)
    assert agent.evidence_status == "NO_EVIDENCE" and agent.relevance_level is None


def test_lexical_match_without_meaning_trips_the_gate(seeded):
    """BM25 finds 'pool' in the MySQL runbook, rank 1 exists, and still nothing is usable."""
    r = lookup_knowledge("pool party for the kids this summer", kb_scope="rag-eval", settings=seeded)
    assert r.candidate_count > 0 and not r.found
    assert r.retrieval_trace.attempts[-1].top_quality < 0.5


def test_scope_isolation_in_every_attempt(seeded):
    r = lookup_knowledge(FALLBACK_QUERY, kb_scope="rag-eval", settings=seeded)
    assert len(r.retrieval_trace.attempts) == 2
    assert all(e.kb_scope == "rag-eval" for e in r.evidence)
    assert "other-kafka" not in docs(r) and "other-kafka" not in r.context.packed_text
    mine = lookup_knowledge(FALLBACK_QUERY, kb_scope="other-team", settings=seeded)
    assert docs(mine) == ["other-kafka"]
    everywhere = lookup_knowledge(FALLBACK_QUERY, kb_scope="", settings=seeded)  # empty = all scopes
    assert {"other-kafka", "kafka-consumer-lag"} <= set(docs(everywhere))


def test_dense_mode_on_the_same_collection(seeded):
    r = lookup_knowledge(
        "kafka consumer group lag growing", kb_scope="rag-eval", mode="dense", settings=seeded
    )
    assert r.mode == "dense" and docs(r)[0] == "kafka-consumer-lag"
    hybrid = lookup_knowledge("redis evicted_keys growing maxmemory", kb_scope="rag-eval", settings=seeded)
    assert hybrid.retrieval_trace.attempts[0].mode == "hybrid"


def test_weighted_fusion_path(seeded):
    weighted = Settings(home=seeded.home, dense_weight=2.0, sparse_weight=1.0)
    r = lookup_knowledge("kafka consumer group lag growing", kb_scope="rag-eval", settings=weighted)
    assert docs(r)[0] == "kafka-consumer-lag"


def test_audit_row_written_before_return(seeded):
    r = lookup_knowledge(FALLBACK_QUERY, kb_scope="rag-eval", settings=seeded)
    assert r.audit_id is not None and r.audit_error is None
    stores = open_stores(seeded)
    with stores.sql.session() as s:
        row = s.scalars(select(LookupAuditRow).where(LookupAuditRow.id == r.audit_id)).one()
    assert row.query == FALLBACK_QUERY and row.kb_scope == "rag-eval" and row.mode == "hybrid"
    assert row.selected_attempt == "UNFILTERED_VECTOR_RETRY"
    assert row.fallback_reason == "filtered_vector_low_quality"
    assert row.evidence_keys == [e.evidence_key for e in r.evidence]
    assert len(row.attempts) == 2 and "total" in row.timings_ms
    assert row.result["retrievalTrace"]["selectedAttempt"] == "UNFILTERED_VECTOR_RETRY"


def test_audit_failure_is_visible_and_keeps_the_answer(seeded, caplog):
    stores = open_stores(seeded)
    with stores.sql.engine.begin() as conn:
        conn.execute(text("ALTER TABLE lookup_audit RENAME TO lookup_audit_away"))
    try:
        r = lookup_knowledge("kafka consumer group lag growing", kb_scope="rag-eval", settings=seeded)
    finally:
        with stores.sql.engine.begin() as conn:
            conn.execute(text("ALTER TABLE lookup_audit_away RENAME TO lookup_audit"))
    assert r.found and r.audit_id is None and "lookup_audit" in r.audit_error
    assert any("audit write failed" in rec.message for rec in caplog.records)


def test_bad_input(seeded, tmp_path):
    with pytest.raises(LookupRejected, match="query is empty"):
        lookup_knowledge("   ", settings=seeded)
    with pytest.raises(LookupRejected, match="invalid kb_scope"):
        lookup_knowledge("x", kb_scope='x" or kb_scope != "', settings=seeded)
    with pytest.raises(LookupRejected, match="invalid mode"):
        lookup_knowledge("x", mode="sparse", settings=seeded)
    # a scope that does not exist is an error naming the ones that do (not "no usable evidence")
    with pytest.raises(LookupRejected, match=r"no scope 'rag_eval'.*did you mean 'rag-eval'\?"):
        lookup_knowledge("kafka lag", kb_scope="rag_eval", settings=seeded)
    long = lookup_knowledge("kafka consumer lag " * 60, kb_scope="rag-eval", settings=seeded)
    assert long.query_truncated and len(long.query) == 500 and project_for_agent(long).truncated
    with pytest.raises(IndexMissing, match="kbflow reindex"):
        lookup_knowledge("kafka", settings=Settings(home=tmp_path / "empty"))


def test_filtered_attempt_with_no_candidates_says_no_evidence(seeded, monkeypatch):
    """Orchestration rule on the real stores, with the filtered search forced empty."""
    import kbflow.retrieval.pipeline as pipeline

    real = pipeline.search_attempt
    calls = []

    def empty_when_filtered(client, targets, query, vectors, spec, category):
        calls.append(category)
        return [] if category else real(client, targets, query, vectors, spec, category)

    monkeypatch.setattr(pipeline, "search_attempt", empty_when_filtered)
    r = lookup_knowledge("kafka consumer group lag growing", kb_scope="rag-eval", settings=seeded)
    assert calls == ["Message Queue", None]  # exactly one retry, without the filter
    assert r.retrieval_trace.fallback_reason == "filtered_vector_no_evidence"
    assert r.retrieval_trace.attempts[0].candidate_count == 0
    assert r.found and docs(r)[0] == "kafka-consumer-lag"


def test_lookups_use_the_scope_calibration_and_say_which(seeded):
    from kbflow.retrieval import calibration
    from kbflow.retrieval.gate import Calibration

    query = "kafka consumer group lag growing"
    r = lookup_knowledge(query, kb_scope="rag-eval", settings=seeded)
    assert "golden" in r.retrieval_trace.calibrations["rag-eval"]  # the packaged default
    assert set(r.evidence[0].signals) == {"cosine", "coverage", "specific", "support", "unknown", "salient"}
    strict = Calibration(
        kind="logistic",
        weights={"bias": -6.0, "cosine": 6.0, "coverage": 1.0},
        floor=0.99,
        model_id=r_model(seeded),
        kb_scope="rag-eval",
        source="test: nothing passes",
    )
    stores = open_stores(seeded)
    calibration.store(stores.sql, strict, {"queries": 0})
    try:
        gated = lookup_knowledge(query, kb_scope="rag-eval", settings=seeded)
        assert "test: nothing passes" in gated.retrieval_trace.calibrations["rag-eval"]
        assert not gated.found and gated.message.startswith("No usable evidence")
        other = lookup_knowledge(query, kb_scope="other-team", settings=seeded)
        assert "golden" in other.retrieval_trace.calibrations["other-team"]  # per scope
    finally:
        from kbflow.core.sql import CalibrationRow

        with stores.sql.session() as s, s.begin():
            s.execute(CalibrationRow.__table__.delete())


def r_model(settings: Settings) -> str:
    from kbflow.core.embedder import model_id_for

    return model_id_for(settings.embedding_model, settings.embedding_backend)
