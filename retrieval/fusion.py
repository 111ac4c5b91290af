"""Fusion of the dense and BM25 legs.

RRF, `Σ w / (k + rank)`, uses ranks only. The convex combination,
`α · norm(dense) + (1 − α) · norm(bm25)` with min-max normalisation per query, uses the
scores' spread as well; Bruch et al. (TOIS 2023) found it better than RRF and cheap to tune.
Both are selectable (`Settings.fusion`); the README's ablation says which is the default and why.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence


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


def min_max(scores: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """Scale to [0, 1] over this query's candidates; all-equal scores map to 1."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo <= 1e-12:
        return {i: 1.0 for i in scores}
    return {i: (s - lo) / (hi - lo) for i, s in scores.items()}


def convex(dense: Mapping[Hashable, float], sparse: Mapping[Hashable, float], alpha: float):
    """`alpha` is the dense share. `dense` holds a similarity for every candidate (exact, from
    the stored vectors); a candidate the BM25 leg did not return scores 0 there. Returns
    [(item, score)] best first."""
    d, s = min_max(dense), min_max(sparse)
    items = list(dict.fromkeys([*sparse, *dense]))
    fused = {i: alpha * d.get(i, 0.0) + (1 - alpha) * s.get(i, 0.0) for i in items}
    return sorted(fused.items(), key=lambda kv: -kv[1])
