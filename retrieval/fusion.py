"""Reciprocal rank fusion, `Σ w / (k + rank)`: ranks, not scores, because dense L2 and BM25
scores live on scales that cannot be compared."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def rrf(rankings: Sequence[Sequence[Hashable]], weights: Sequence[float] | None = None, k: int = 60):
    """Fuse ranked lists (best first). Returns [(item, score)] best first; ties keep the order
    in which items were first seen."""
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[Hashable, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])
