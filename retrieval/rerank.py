"""Rerank stage. Today a no-op that records its trace; a model reranker (cross-encoder) plugs
in behind the same interface without touching the pipeline."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from kbflow.retrieval.contracts import Evidence, RerankTrace


class Reranker(Protocol):
    name: str

    def rerank(self, query: str, evidence: Sequence[Evidence]) -> list[Evidence]: ...


class NoopReranker:
    name = "noop"

    def rerank(self, query: str, evidence: Sequence[Evidence]) -> list[Evidence]:
        return list(evidence)


def run_rerank(
    reranker: Reranker, query: str, evidence: Sequence[Evidence]
) -> tuple[list[Evidence], RerankTrace]:
    t = time.perf_counter()
    out = reranker.rerank(query, evidence)
    return out, RerankTrace(
        reranker=reranker.name,
        applied=not isinstance(reranker, NoopReranker),
        input_count=len(evidence),
        output_count=len(out),
        elapsed_ms=round((time.perf_counter() - t) * 1000, 3),
    )
