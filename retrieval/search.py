"""One search attempt over the scope collections: hybrid (dense + BM25 fused by RRF) or dense.

Every attempt filters on kb_scope; a FILTERED_VECTOR attempt adds the L0 category. Each hit gets
`denseDistance`, the exact squared L2 of its stored vector to the query, for *every* candidate
(BM25-only ones included), so quality never has to guess from rank. Filling it in changes no
score, label or order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pymilvus import AnnSearchRequest, MilvusClient, RRFRanker

from kbcore import milvus_store as ms
from kbcore.validation import eq, validate_category, validate_scope
from retrieval.contracts import Hit
from retrieval.fusion import rrf

OUTPUT_FIELDS = ms.SCALAR_FIELDS
HIT_FIELDS = [*OUTPUT_FIELDS, "dense"]


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
    sparse_params = {"metric_type": "BM25"}

    def leg(data: list, field: str, params: dict) -> list[dict]:
        return client.search(
            target.alias,
            data=data,
            anns_field=field,
            limit=spec.limit,
            filter=expr,
            output_fields=HIT_FIELDS,
            search_params=params,
        )[0]

    if spec.mode == "dense":
        return [(h, float(h["distance"])) for h in leg([vector.tolist()], "dense", dense_params)]
    if spec.dense_weight == spec.sparse_weight:
        requests = [
            AnnSearchRequest(
                data=[vector.tolist()], anns_field="dense", param=dense_params, limit=spec.limit, expr=expr
            ),
            AnnSearchRequest(
                data=[query], anns_field="sparse", param=sparse_params, limit=spec.limit, expr=expr
            ),
        ]
        res = client.hybrid_search(
            target.alias, requests, RRFRanker(spec.rrf_k), limit=spec.limit, output_fields=HIT_FIELDS
        )[0]
        # Milvus's RRF is unweighted; scale so scores match the weighted formula's units
        return [(h, float(h["distance"]) * spec.dense_weight) for h in res]
    dense = leg([vector.tolist()], "dense", dense_params)
    sparse = leg([query], "sparse", sparse_params)
    by_id = {h["id"]: h for h in [*sparse, *dense]}
    fused = rrf(
        [[h["id"] for h in dense], [h["id"] for h in sparse]],
        [spec.dense_weight, spec.sparse_weight],
        spec.rrf_k,
    )
    return [(by_id[i], s) for i, s in fused[: spec.limit]]


def squared_l2(stored: Sequence[float], vector: np.ndarray) -> float:
    """Exact squared L2 (the unit Milvus reports for L2) of a stored vector to the query."""
    diff = np.asarray(stored, dtype=np.float32) - vector
    return float(diff @ diff)


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
    hits = []
    for rank, (raw, score, target) in enumerate(merged, start=1):
        hit = _entity_hit(raw, rank, score, label)
        # every candidate carries its stored vector (requested as an output field), so its
        # distance is exact whichever leg found it, at no extra round trip
        hit.dense_distance = squared_l2(raw.get("entity", raw)["dense"], vectors[target.model_id])
        hit.quality_signal = target.quality_signal
        hits.append(hit)
    return hits
