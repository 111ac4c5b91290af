"""Fusion and modes on a real Milvus Lite store: the weights and the mode change what users get."""

from __future__ import annotations

import pytest

from kbflow.core.settings import Settings
from kbflow.ingest.reindex import reindex
from kbflow.retrieval.fusion import convex, min_max
from kbflow.retrieval.lookup import lookup_knowledge, reset_retrievers
from tests.conftest import write_doc

# The BM25 leg and the dense leg disagree on purpose: "ZQX7741" is a rare token only the
# parking-meter log repeats; the meaning of the query is the fruit salad.
QUERY = "ZQX7741 fruit"
DOCS = {
    "parking-log": "# Meter log\n\n## Entries\n\nZQX7741 ZQX7741 ZQX7741: parking meter jammed.\n",
    "fruit-salad": "# Salad\n\n## Recipe\n\nCut fruit (apples, pears, bananas) into a bowl, add lemon.\n",
    "bread": "# Bread\n\n## Baking\n\nKnead the dough, let it rise for an hour, then bake until golden.\n",
    "garden": "# Garden\n\n## Watering\n\nWater tomato plants early in the morning during hot weeks.\n",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    base = tmp_path_factory.mktemp("fusion")
    for name, body in DOCS.items():
        write_doc(base / "docs", f"{name}.md", source=name, scope="fz", breadcrumb="Misc > Notes", body=body)
    settings = Settings(home=base / "home")
    assert reindex([base / "docs"], settings=settings).ok
    reset_retrievers()
    return base / "home"


def first(home, mode="hybrid", **over):
    """The ranked candidates of one lookup under these settings."""
    reset_retrievers()
    r = lookup_knowledge(QUERY, kb_scope="fz", settings=Settings(home=home, **over), mode=mode)
    return r.candidates[r.retrieval_trace.selected_attempt]


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_fusion_weights_decide_which_leg_leads(home, fusion):
    dense_led = first(home, fusion=fusion, dense_weight=1.0, sparse_weight=0.001)
    bm25_led = first(home, fusion=fusion, dense_weight=0.001, sparse_weight=1.0)
    assert dense_led[0].dense_rank == 1 and dense_led[0].doc_id == "fruit-salad"
    assert bm25_led[0].sparse_rank == 1 and bm25_led[0].doc_id == "parking-log"


def test_dense_mode_ranks_by_dense_distance_only(home):
    hits = first(home, mode="dense")
    assert [h.score_label for h in hits] == ["dense"] * len(hits)
    assert all(h.sparse_rank is None for h in hits)
    distances = [h.dense_distance for h in hits]
    assert distances == sorted(distances) and hits[0].doc_id == "fruit-salad"
    hybrid = first(home, fusion="rrf", dense_weight=0.001)
    assert any(h.sparse_rank is not None for h in hybrid)


def test_convex_combination_of_min_max_scores():
    assert min_max({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    fused = dict(convex({"a": 0.9, "b": 0.5, "c": 0.7}, {"b": 10.0, "c": 5.0}, alpha=0.5))
    assert fused["a"] == pytest.approx(0.5 * 1.0)  # top dense, absent from BM25
    assert fused["b"] == pytest.approx(0.5 * 0.0 + 0.5 * 1.0)
    assert fused["c"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.0)
    assert [i for i, _ in convex({"a": 0.9, "b": 0.5}, {"b": 1.0, "a": 0.0}, alpha=0.9)][0] == "a"


def _leg(*texts: str):
    from kbflow.core.chunk_store import ChunkRow
    from kbflow.retrieval.search import Leg

    rows = [
        ChunkRow(id=f"d{i}", doc_id=f"d{i}", source=f"d{i}", source_path="", kb_scope="s", category="",
                 breadcrumb="", title="", heading_path="", chunk_index=0, text=t)
        for i, t in enumerate(texts)
    ]
    return Leg(rows, [1.0] * len(texts))


def test_lexical_trust_follows_how_much_of_the_query_bm25_found():
    from kbflow.retrieval.search import lexical_trust

    # an alert name covered whole: full trust
    assert lexical_trust("KubePodCrashLooping", _leg("KubePodCrashLooping fires when pods crash loop")) == 1.0
    # a paraphrase sharing one common word with the corpus: little trust
    low = lexical_trust("the machine ran out of room to write files", _leg("files are rotated daily"))
    assert 0 < low < 0.5
    # a long question whose best hit matches three of its terms: full trust although the share is low
    question = "articles about time sharing operating systems for large computers and their scheduling"
    assert lexical_trust(question, _leg("time sharing system scheduling")) == 1.0
    assert lexical_trust("anything", _leg()) == 0.0
