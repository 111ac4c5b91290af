"""Contract of each retrieval stage on hand-made inputs (pure logic: no store, no model).

Covers the seeds' pitfalls table: quality never re-sorts; dedup and level run in parallel;
rank 1 is not proof of quality; returnN vs maxEvidence; BM25-only batches trip the gate.
"""

from __future__ import annotations

import pytest

from kbflow.retrieval.contracts import (
    AttemptTrace,
    ContextPack,
    Evidence,
    Hit,
    L0Navigation,
    LookupResult,
    RerankTrace,
    RetrievalTrace,
)
from kbflow.retrieval.fusion import rrf
from kbflow.retrieval.gate import Calibration
from kbflow.retrieval.l0_navigation import query_terms
from kbflow.retrieval.packing import pack
from kbflow.retrieval.postprocess import PostprocessConfig, attach_l0_reasons, postprocess, score_hits
from kbflow.retrieval.projection import ProjectionLimits, project_for_agent
from kbflow.retrieval.quality import canonical_label, lexical_coverage
from kbflow.retrieval.rerank import NoopReranker, run_rerank


def hit(
    key: str,
    rank: int,
    *,
    l2: float | None = None,
    label: str = "hybrid",
    content: str = "text",
    breadcrumb: str = "A > B",
    reasons: list[str] | None = None,
) -> Hit:
    doc = key.split("#")[0]
    return Hit(
        evidence_key=key,
        doc_id=doc,
        kb_scope="s",
        source=doc,
        original_rank=rank,
        score=1.0 / rank,
        score_label=label,
        dense_distance=l2,
        content=content,
        breadcrumb=breadcrumb,
        hit_reasons=reasons or [],
    )


CFG = PostprocessConfig()
# the plain cosine with the classic thresholds: these tests pin the stages, not a calibration
COSINE = Calibration(kind="cosine", floor=0.5, reference=0.5, precise=0.75)
CALS = {"s": COSINE}


def scored(hits, query="q", cals=CALS):
    return score_hits(hits, query, cals)


def post(hits, cals=CALS):
    return postprocess(hits, CFG, cals)


# --- fusion ---------------------------------------------------------------------------------


def test_rrf_formula_and_weights():
    fused = dict(rrf([["a", "b"], ["b", "c"]], k=60))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61) and fused["c"] == pytest.approx(1 / 62)
    weighted = rrf([["a"], ["b"]], weights=[2.0, 1.0], k=60)
    assert [x for x, _ in weighted] == ["a", "b"]
    with pytest.raises(ValueError):
        rrf([["a"]], weights=[1, 2])


# --- quality --------------------------------------------------------------------------------


def test_quality_is_absolute_and_labels_canonicalize():
    """Quality comes from the stored vector's distance (cosine = 1 - L2/2), whatever the label."""
    [h] = scored([hit("a#0", 1, l2=0.5)])
    assert h.quality_score == pytest.approx(0.75) and h.signals["cosine"] == pytest.approx(0.75)
    [d] = scored([hit("a#0", 1, l2=1.0, label="l2_distance")])  # legacy dense label
    assert d.score_label == "dense" and d.quality_score == pytest.approx(0.5)
    assert canonical_label("bm25_only_no_dense") == "hybrid" and canonical_label("L2_DISTANCE") == "dense"
    with pytest.raises(ValueError):
        canonical_label("mystery")


def test_rank_one_is_not_proof_of_quality():
    """A BM25-only batch (no dense signal) must not get 1.0 at rank 1: without a distance the
    cosine signal is 0, so lexical matches alone never pass the gate."""
    batch = [
        hit("a#0", 1, label="bm25_only_no_dense", content="mysql pool"),
        hit("b#0", 2, label="bm25_only_no_dense", content="pool"),
    ]
    out = scored(batch, "python snake habitat pool")
    assert all(h.quality_score < 0.5 for h in out)  # lexically matching, semantically unrelated
    p = post(out)
    assert p.low_quality and p.relevance_level is None and p.evidence == []


def test_logistic_calibration_combines_cosine_and_coverage():
    cal = Calibration(kind="logistic", weights={"bias": -6.0, "cosine": 9.0, "coverage": 3.0}, floor=0.1)
    weak_paraphrase = cal.quality({"cosine": 0.35, "coverage": 0.0})
    covered = cal.quality({"cosine": 0.35, "coverage": 1.0})
    assert 0 < weak_paraphrase < covered < 1
    assert covered == pytest.approx(1 / (1 + 2.718281828 ** (6.0 - 9.0 * 0.35 - 3.0)), rel=1e-6)


def test_coverage_counts_analysed_query_terms():
    [h] = scored(
        [hit("a#0", 1, l2=1.0, content="Pods keep crash looping: KubePodCrashLooping fires")],
        "pod crash looping alert",
    )
    assert h.signals["coverage"] == pytest.approx(3 / 4)  # pod, crash, loop of pod/crash/loop/alert


def test_lexical_signal_for_chinese_uses_words_not_particles():
    assert lexical_coverage("数据库连接池满了怎么办", "数据库连接池耗尽排查") == pytest.approx(1.0)
    assert lexical_coverage("今天天气怎么样", "数据库连接池耗尽排查") == 0.0
    assert lexical_coverage("connection pool timeout", "the connection pool hit its timeout") == 1.0


# --- post-process ---------------------------------------------------------------------------


def test_order_is_never_resorted_by_quality():
    hits = scored([hit("a#0", 1, l2=0.9), hit("b#0", 2, l2=0.1), hit("c#0", 3, l2=0.5)])
    p = post(list(reversed(hits)))
    assert [e.evidence_key for e in p.evidence] == ["a#0", "b#0", "c#0"]
    assert p.evidence[1].quality_score > p.evidence[0].quality_score  # better but still second


def test_duplicates_merge_reasons_and_fill_breadcrumb():
    hits = scored(
        [
            hit("a#0", 1, l2=0.2, breadcrumb="", reasons=["dense"]),
            hit("a#0", 2, l2=0.2, breadcrumb="DB > MySQL", reasons=["l0_keyword_overlap"]),
        ]
    )
    p = post(hits)
    assert len(p.evidence) == 1
    assert p.evidence[0].hit_reasons == ["dense", "l0_keyword_overlap"]
    assert p.evidence[0].breadcrumb == "DB > MySQL"


def test_cap_per_document_and_return_n():
    hits = scored(
        [hit(f"a#{i}", i + 1, l2=0.2) for i in range(4)] + [hit(f"d{i}#0", 5 + i, l2=0.2) for i in range(6)]
    )
    p = post(hits)
    keys = [e.evidence_key for e in p.evidence]
    assert keys == ["a#0", "a#1", "d0#0", "d1#0", "d2#0"]  # 2 per document, 5 in all


def test_level_reads_ranked_list_not_deduped_output():
    """Dedup (output) and level (evaluation) are parallel: the level comes from the best
    candidate in the ranked list even when the per-document cap drops it from the output."""
    hits = scored([hit("a#0", 1, l2=0.9), hit("a#1", 2, l2=0.9), hit("a#2", 3, l2=0.2)])
    p = post(hits)
    assert [e.evidence_key for e in p.evidence] == ["a#0", "a#1"]
    assert p.top_quality == pytest.approx(0.9) and p.relevance_level == "PRECISE"


@pytest.mark.parametrize(
    ("l2", "level", "low"), [(0.4, "PRECISE", False), (0.9, "REFERENCE", False), (1.2, None, True)]
)
def test_levels_and_gate(l2, level, low):
    p = post(scored([hit("a#0", 1, l2=l2)]))
    assert p.relevance_level == level and p.low_quality is low


def test_weak_evidence_is_returned_labelled_and_below_floor_dropped():
    cal = {"s": Calibration(kind="cosine", floor=0.3, reference=0.5, precise=0.75)}
    hits = scored([hit("a#0", 1, l2=1.2), hit("b#0", 2, l2=1.6)], cals=cal)  # cosine 0.4 and 0.2
    p = post(hits, cal)
    assert [(e.evidence_key, e.weak) for e in p.evidence] == [("a#0", True)]
    assert p.relevance_level is None and p.low_quality  # weak evidence gives no level
    agent = project_for_agent(result_with(p.evidence, level=None))
    assert agent.evidence_status == "FOUND" and agent.relevance_level is None
    assert [e.weak for e in agent.evidence] == [True]


def test_no_hits_is_low_quality_without_level():
    p = post([])
    assert p.low_quality and p.top_quality is None and p.relevance_level is None


def test_l0_adds_reasons_and_changes_no_score_or_order():
    hits = scored([hit("a#0", 1, l2=0.6), hit("b#0", 2, l2=0.3)])
    nav = L0Navigation(category_filter="X", doc_reasons={"s:b": ["l0_keyword_overlap"]})
    with_l0 = attach_l0_reasons(hits, nav)
    assert [(h.evidence_key, h.quality_score, h.original_rank) for h in with_l0] == [
        (h.evidence_key, h.quality_score, h.original_rank) for h in hits
    ]
    assert with_l0[1].hit_reasons == ["l0_keyword_overlap"] and with_l0[0].hit_reasons == []


def test_query_terms_cover_phrases_and_chinese():
    terms = query_terms("Chat messages arrive late")
    assert {"chat", "messages arrive late", "arrive late"} <= set(terms)
    zh = query_terms("数据库连接池满了怎么办")
    assert {"数据库", "连接池"} <= set(zh)


# --- packing --------------------------------------------------------------------------------


def ev(key: str, text: str, quality: float = 0.8) -> Evidence:
    doc = key.split("#")[0]
    return Evidence(
        evidence_key=key,
        doc_id=doc,
        kb_scope="s",
        source=doc,
        breadcrumb="A > B",
        excerpt=text,
        quality_score=quality,
        original_rank=1,
    )


def test_pack_truncates_then_omits_in_priority_order():
    items = [ev("a#0", "x" * 60), ev("b#0", "y" * 200), ev("c#0", "z" * 10)]
    p = pack(items, budget=150)
    assert p.included_sources == ["a", "b"] and p.omitted_sources == ["c"]
    assert p.used_chars == len(p.packed_text) <= 150
    assert p.packed_text.endswith("...") and "x" * 60 in p.packed_text
    whole = pack(items, budget=4000)
    assert whole.omitted_sources == [] and "z" * 10 in whole.packed_text and whole.used_chars <= 4000


# --- rerank ---------------------------------------------------------------------------------


def test_noop_rerank_keeps_order_and_traces():
    items = [ev("a#0", "x"), ev("b#0", "y")]
    out, trace = run_rerank(NoopReranker(), "q", items)
    assert out == items and trace.reranker == "noop" and not trace.applied and trace.output_count == 2


# --- projection -----------------------------------------------------------------------------


def result_with(evidence: list[Evidence], query: str = "q", level: str | None = "PRECISE") -> LookupResult:
    nav = L0Navigation()
    return LookupResult(
        query=query,
        kb_scope="s",
        mode="hybrid",
        found=bool(evidence),
        evidence=evidence,
        candidate_count=len(evidence),
        returned_count=len(evidence),
        relevance_level=level,
        completeness_hint="",
        message=None,
        context=ContextPack(
            packed_text="", strategy="x", char_budget=1, used_chars=0, included_sources=[], omitted_sources=[]
        ),
        retrieval_trace=RetrievalTrace(
            l0=nav,
            attempts=[AttemptTrace(attempt="UNFILTERED_VECTOR", query_used=query, mode="hybrid")],
            selected_attempt="UNFILTERED_VECTOR",
        ),
        rerank_trace=RerankTrace(reranker="noop", applied=False, input_count=0, output_count=0),
    )


def test_projection_within_bounds_is_lossless():
    out = project_for_agent(result_with([ev("a#0", "short"), ev("b#0", "also short")]))
    assert out.evidence_status == "FOUND" and not out.truncated and len(out.evidence) == 2
    assert out.evidence[0].document_id == "a" and out.relevance_level == "PRECISE"


def test_projection_bounds_each_set_truncated():
    long_q = project_for_agent(result_with([ev("a#0", "x")], query="q" * 900))
    assert len(long_q.query) == 500 and long_q.truncated
    long_excerpt = project_for_agent(result_with([ev("a#0", "x" * 5000)]))
    assert len(long_excerpt.evidence[0].excerpt) == 1200 and long_excerpt.truncated
    dup = project_for_agent(result_with([ev("a#0", "x"), ev("a#0", "x")]))
    assert len(dup.evidence) == 1 and dup.truncated
    # returnN (5) is the business target; maxEvidence (8) is a guard that bites only when violated
    many = project_for_agent(result_with([ev(f"d{i}#0", "x") for i in range(12)]))
    assert len(many.evidence) == 8 and many.truncated
    five = project_for_agent(result_with([ev(f"d{i}#0", "x") for i in range(5)]))
    assert len(five.evidence) == 5 and not five.truncated


def test_projection_byte_budget_emptying_means_no_evidence():
    out = project_for_agent(result_with([ev("a#0", "x" * 1000)]), ProjectionLimits(max_bytes=400))
    assert out.evidence == [] and out.truncated
    assert out.evidence_status == "NO_EVIDENCE" and out.relevance_level is None
    bytes_ok = project_for_agent(result_with([ev(f"d{i}#0", "é" * 1100) for i in range(8)]))
    import json

    assert len(json.dumps(bytes_ok.to_json(), ensure_ascii=False).encode()) <= 16 * 1024
    assert bytes_ok.truncated and 0 < len(bytes_ok.evidence) < 8


def test_lookup_result_round_trips_as_json():
    r = result_with([ev("a#0", "x")])
    data = r.to_json()
    assert "originalRank" in data["evidence"][0] and "retrievalTrace" in data and "rerankTrace" in data
    assert LookupResult.model_validate(data) == r
