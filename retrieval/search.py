"""One search attempt over the scope collections: hybrid (dense + BM25, fused here), dense, or
bm25 (the BM25 leg alone, ranked by its own scores; the query is still embedded, so every
candidate's quality has its exact cosine).

Every attempt filters on kb_scope; a FILTERED_VECTOR attempt adds the L0 category. The two
legs run as separate searches and are fused client-side (`fusion.py`: RRF or a convex
combination), so each hit keeps its rank in each leg — the gate reads whether the legs agree.
The BM25 leg gets the query analysed the way the scope's chunks were (`kbflow.core.analysis`).
Each hit gets `denseDistance`, the exact squared L2 of its *stored* vector to the query, for
every candidate (BM25-only ones included), so quality never has to guess from rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from kbflow.core.analysis import LexicalConfig
from kbflow.core.chunk_store import ChunkRow, ChunkStore
from kbflow.core.evidence_keys import evidence_key
from kbflow.retrieval.contracts import Hit
from kbflow.retrieval.fusion import convex, rrf
from kbflow.retrieval.gate import coverage, query_terms


@dataclass(frozen=True)
class ScopeTarget:
    kb_scope: str
    alias: str
    model_id: str
    quality_signal: str = "dense"  # "lexical" where the model cannot embed the scope's language
    lexical: LexicalConfig | None = None  # None: built before kbflow analysed text (raw BM25)


@dataclass(frozen=True)
class SearchSpec:
    mode: str  # hybrid | dense | bm25
    limit: int
    rrf_k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    fusion: str = "rrf"  # rrf | convex
    convex_alpha: float = 0.7  # convex: the dense leg's share at equal weights and full trust
    lexical_trust: bool = True  # scale the BM25 leg by how much of the query its best hits contain
    exclude: tuple[str, ...] = ()  # documents (by source) searched as if not indexed: leave-out runs


@dataclass
class Leg:
    """One leg's hits, best first, and their scores."""

    rows: list[ChunkRow]
    scores: list[float]


def _leg(scored: list[tuple[ChunkRow, float]]) -> Leg:
    return Leg([r for r, _ in scored], [score for _, score in scored])


def _to_hit(row: ChunkRow, rank: int, score: float, label: str) -> Hit:
    return Hit(
        # the store keys rows by doc_key(source); people and agents see the source as written
        evidence_key=evidence_key(row.source, row.chunk_index),
        doc_id=row.source,
        kb_scope=row.kb_scope,
        source=row.source,
        source_path=row.source_path,
        title=row.title,
        breadcrumb=row.breadcrumb,
        category=row.category,
        heading_path=row.heading_path,
        chunk_index=row.chunk_index,
        content=row.text,
        original_rank=rank,
        score=float(score),
        score_label=label,
    )


def squared_l2(stored: Sequence[float], vector: np.ndarray) -> float:
    """Exact squared L2 (the unit Milvus reports for L2) of a stored vector to the query."""
    diff = np.asarray(stored, dtype=np.float32) - vector
    return float(diff @ diff)


_LEGS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbflow-bm25-leg")


def run_legs(
    store: ChunkStore,
    target: ScopeTarget,
    query: str,
    vector: np.ndarray,
    spec: SearchSpec,
    category: str | None,
) -> tuple[Leg, Leg]:
    """The dense leg and the BM25 leg (empty in dense mode, or when analysis leaves no term;
    the dense leg is empty in bm25 mode)."""
    where = {"scope": target.kb_scope, "limit": spec.limit, "category": category, "exclude": spec.exclude}
    dense_vector = vector.tolist()
    text = target.lexical.query_text(query) if target.lexical else query
    if spec.mode == "bm25":
        return Leg([], []), _leg(store.text_search(target.alias, text, **where) if text.strip() else [])
    if spec.mode == "dense" or not text.strip():
        return _leg(store.search(target.alias, dense_vector, **where)), Leg([], [])
    # the legs are two round trips that wait on the store, not on us: send them together
    sparse = _LEGS.submit(store.text_search, target.alias, text, **where)
    dense = store.search(target.alias, dense_vector, **where)
    return _leg(dense), _leg(sparse.result())


TRUST_TOP = 5  # BM25 hits whose query-term coverage sets the leg's trust
TRUST_TERMS = 3  # matching this many of the query's terms earns the BM25 leg full weight


def lexical_trust(query: str, sparse: Leg) -> float:
    """How far to trust the BM25 leg, in [0, 1], from its top hits. A paraphrase that shares one
    common word with the corpus still gets BM25 hits; they deserve little weight. A hit that
    contains the query's terms — all of a short query (an identifier, an error string) or
    TRUST_TERMS of a long question — earns full weight. Counting terms as well as the share keeps
    long natural-language queries, whose best hits cover only part of them, at full weight."""
    terms = query_terms(query)
    best = 0.0
    for row in sparse.rows[:TRUST_TOP]:
        share = coverage(terms, row.title, row.breadcrumb, row.text)
        best = max(best, share, min(1.0, share * len(terms) / TRUST_TERMS))
    return best


def fuse_legs(
    dense: Leg, sparse: Leg, vector: np.ndarray, spec: SearchSpec, query: str = ""
) -> list[tuple[ChunkRow, float, int | None, int | None, float | None]]:
    """(row, fused score, dense rank, BM25 rank, BM25 score magnitude) best first."""
    judge = spec.lexical_trust and sparse.rows and spec.mode == "hybrid"
    trust = lexical_trust(query, sparse) if judge else 1.0
    by_id: dict[str, ChunkRow] = {}
    for row in [*sparse.rows, *dense.rows]:
        by_id[row.id] = row
    dense_ids = [row.id for row in dense.rows]
    sparse_ids = [row.id for row in sparse.rows]
    if spec.mode == "dense":
        fused = [(i, -d) for i, d in zip(dense_ids, dense.scores, strict=True)]
    elif spec.mode == "bm25":  # magnitudes: Milvus Lite's BM25 scores are negative, a server's positive
        fused = [(i, abs(s)) for i, s in zip(sparse_ids, sparse.scores, strict=True)]
    elif spec.fusion == "convex":
        cosine = {i: 1.0 - squared_l2(by_id[i].dense, vector) / 2.0 for i in by_id}
        # BM25 scores come back negative from Milvus Lite and positive from a server: use the
        # magnitude, whose order is the leg's order on both
        fused = convex(
            cosine,
            {i: abs(s) for i, s in zip(sparse_ids, sparse.scores, strict=True)},
            _alpha(spec, trust),
        )
    else:
        fused = rrf([dense_ids, sparse_ids], [spec.dense_weight, spec.sparse_weight * trust], spec.rrf_k)
    d_rank = {i: r for r, i in enumerate(dense_ids, start=1)}
    s_rank = {i: r for r, i in enumerate(sparse_ids, start=1)}
    s_score = {i: abs(v) for i, v in zip(sparse_ids, sparse.scores, strict=True)}
    return [(by_id[i], s, d_rank.get(i), s_rank.get(i), s_score.get(i)) for i, s in fused]


def _alpha(spec: SearchSpec, trust: float) -> float:
    """The dense share of a convex fusion: `convex_alpha` at equal weights and full trust."""
    dense = spec.convex_alpha * spec.dense_weight
    sparse = (1 - spec.convex_alpha) * spec.sparse_weight * trust
    return dense / (dense + sparse)


def search_attempt(
    store: ChunkStore,
    targets: Sequence[ScopeTarget],
    query: str,
    vectors: dict[str, np.ndarray],
    spec: SearchSpec,
    category: str | None,
) -> list[Hit]:
    """Search every target scope and merge into one ranked list (originalRank from 1)."""
    merged: list[tuple[ChunkRow, float, int | None, int | None, float | None, ScopeTarget]] = []
    for target in targets:
        vector = vectors[target.model_id]
        dense, sparse = run_legs(store, target, query, vector, spec, category)
        merged += [(*f, target) for f in fuse_legs(dense, sparse, vector, spec, query)]
    merged.sort(key=lambda t: -t[1])
    label = "dense" if spec.mode == "dense" else "hybrid"
    hits = []
    for rank, (raw, score, d_rank, s_rank, s_score, target) in enumerate(merged[: spec.limit], start=1):
        hit = _to_hit(raw, rank, -score if spec.mode == "dense" else score, label)  # dense: L2
        # every candidate carries its stored vector (requested as an output field), so its
        # distance is exact whichever leg found it, at no extra round trip
        hit.dense_distance = squared_l2(raw.dense, vectors[target.model_id])
        hit.dense_rank, hit.sparse_rank, hit.sparse_score = d_rank, s_rank, s_score
        hit.vector = list(raw.dense) if len(raw.dense) else None
        hit.quality_signal = target.quality_signal
        hits.append(hit)
    return hits
