"""One search attempt over the scope collections: hybrid (dense + BM25 fused by RRF) or dense.

Every attempt filters on kb_scope; a FILTERED_VECTOR attempt adds the L0 category. Each hit gets
`denseDistance`, the exact squared L2 of its stored vector to the query, for *every* candidate,
so quality never has to guess from rank. Filling it in changes no score, label or order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pymilvus import AnnSearchRequest, MilvusClient, RRFRanker

from kbcore.validation import eq, in_list, validate_category, validate_scope
from retrieval.contracts import Hit
from retrieval.fusion import rrf

OUTPUT_FIELDS = [
    "id",
    "doc_id",
    "source",
    "_source",
    "kb_scope",
    "category",
    "breadcrumb",
    "title",
    "heading_path",
    "chunk_index",
    "text",
]


@dataclass(frozen=True)
class ScopeTarget:
    kb_scope: str
    alias: str
    model_id: str
    quality_signal: str = "dense"  # "lexical" where the model cannot embed the scope's language


@dataclass(frozen=True)
class SearchSpec:
    mode: str  # hybrid | dense
    limit: int
    rrf_k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0


def _expr(scope: str, category: str | None) -> str:
    expr = eq("kb_scope", validate_scope(scope))
    if category:
        expr += f" and {eq('category', validate_category(category))}"
    return expr


def _entity_hit(raw: dict, rank: int, score: float, label: str) -> Hit:
    e = raw.get("entity", raw)
    return Hit(
        evidence_key=e["id"],
        doc_id=e["doc_id"],
        kb_scope=e["kb_scope"],
        source=e["source"],
        source_path=e.get("_source", ""),
        title=e.get("title", ""),
        breadcrumb=e.get("breadcrumb", ""),
        category=e.get("category", ""),
        heading_path=e.get("heading_path", ""),
        chunk_index=int(e.get("chunk_index", 0)),
        content=e.get("text", ""),
        original_rank=rank,
        score=float(score),
        score_label=label,
    )


def _search_one(
    client: MilvusClient,
    target: ScopeTarget,
    query: str,
    vector: np.ndarray,
    spec: SearchSpec,
    category: str | None,
) -> list[tuple[dict, float]]:
    """(raw hit, score) best first for one scope collection."""
    expr = _expr(target.kb_scope, category)
    dense_params = {"metric_type": "L2", "params": {"ef": max(64, spec.limit * 2)}}
    if spec.mode == "dense":
        res = client.search(
            target.alias,
            data=[vector.tolist()],
            anns_field="dense",
            limit=spec.limit,
            filter=expr,
            output_fields=OUTPUT_FIELDS,
            search_params=dense_params,
        )[0]
        return [(h, float(h["distance"])) for h in res]
    dense_req = AnnSearchRequest(
        data=[vector.tolist()], anns_field="dense", param=dense_params, limit=spec.limit, expr=expr
    )
    sparse_req = AnnSearchRequest(
        data=[query], anns_field="sparse", param={"metric_type": "BM25"}, limit=spec.limit, expr=expr
    )
    if spec.dense_weight == spec.sparse_weight:
        res = client.hybrid_search(
            target.alias,
            [dense_req, sparse_req],
            RRFRanker(spec.rrf_k),
            limit=spec.limit,
            output_fields=OUTPUT_FIELDS,
        )[0]
        # Milvus's RRF is unweighted; scale so scores match the weighted formula's units
        return [(h, float(h["distance"]) * spec.dense_weight) for h in res]
    dense = client.search(
        target.alias,
        data=[vector.tolist()],
        anns_field="dense",
        limit=spec.limit,
        filter=expr,
        output_fields=OUTPUT_FIELDS,
        search_params=dense_params,
    )[0]
    sparse = client.search(
        target.alias,
        data=[query],
        anns_field="sparse",
        limit=spec.limit,
        filter=expr,
        output_fields=OUTPUT_FIELDS,
        search_params={"metric_type": "BM25"},
    )[0]
    by_id = {h["id"]: h for h in [*sparse, *dense]}
    fused = rrf(
        [[h["id"] for h in dense], [h["id"] for h in sparse]],
        [spec.dense_weight, spec.sparse_weight],
        spec.rrf_k,
    )
    return [(by_id[i], s) for i, s in fused[: spec.limit]]


def dense_distances(
    client: MilvusClient, target: ScopeTarget, ids: Sequence[str], vector: np.ndarray
) -> dict[str, float]:
    """Exact squared L2 (the unit Milvus reports for L2) from each chunk's stored vector."""
    if not ids:
        return {}
    rows = client.query(
        target.alias,
        filter=f"{eq('kb_scope', target.kb_scope)} and {in_list('id', ids)}",
        output_fields=["id", "dense"],
    )
    out = {}
    for r in rows:
        diff = np.asarray(r["dense"], dtype=np.float32) - vector
        out[r["id"]] = float(diff @ diff)
    return out


def search_attempt(
    client: MilvusClient,
    targets: Sequence[ScopeTarget],
    query: str,
    vectors: dict[str, np.ndarray],
    spec: SearchSpec,
    category: str | None,
) -> list[Hit]:
    """Search every target scope and merge into one ranked list (originalRank from 1)."""
    merged: list[tuple[dict, float, ScopeTarget]] = []
    for target in targets:
        for raw, score in _search_one(client, target, query, vectors[target.model_id], spec, category):
            merged.append((raw, score, target))
    if spec.mode == "dense":
        merged.sort(key=lambda t: t[1])  # smaller L2 first
    else:
        merged.sort(key=lambda t: -t[1])  # larger fused score first
    merged = merged[: spec.limit]
    label = "dense" if spec.mode == "dense" else "hybrid"
    hits = [_entity_hit(raw, rank, score, label) for rank, (raw, score, _) in enumerate(merged, start=1)]
    for target in targets:
        ids = [h.evidence_key for h in hits if h.kb_scope == target.kb_scope]
        distances = dense_distances(client, target, ids, vectors[target.model_id])
        for h in hits:
            if h.kb_scope == target.kb_scope:
                h.quality_signal = target.quality_signal
                h.dense_distance = distances.get(h.evidence_key, h.dense_distance)
    return hits
