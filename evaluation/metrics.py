"""IR metrics via trec_eval (pytrec-eval-terrier), plus the pipeline-behaviour rates.

Metrics are computed over the cases that expect documents (negative cases have no relevant
document and would make recall undefined); a case with no evidence scores 0 on every measure,
which trec_eval would otherwise silently skip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean

import pytrec_eval

MEASURES = ("recall", "success", "recip_rank", "ndcg_cut")


def per_query(
    qrels: Mapping[str, Mapping[str, int]], ranked: Mapping[str, Sequence[str]], k: int
) -> dict[str, dict[str, float]]:
    """{query: {recall@k, hit@k, mrr, ndcg@k}} for one cutoff k. Ranks become descending scores."""
    run = {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in ranked.items() if docs}
    evaluator = pytrec_eval.RelevanceEvaluator(
        {q: dict(r) for q, r in qrels.items()}, {f"recall.{k}", f"success.{k}", "recip_rank", f"ndcg_cut.{k}"}
    )
    scored = evaluator.evaluate({q: r for q, r in run.items() if q in qrels})
    out = {}
    for q in qrels:
        m = scored.get(q, {})
        out[q] = {
            "recall@k": m.get(f"recall_{k}", 0.0),
            "hit@k": m.get(f"success_{k}", 0.0),
            "mrr": m.get("recip_rank", 0.0),
            "ndcg@k": m.get(f"ndcg_cut_{k}", 0.0),
        }
    return out


def aggregate(
    qrels: Mapping[str, Mapping[str, int]], ranked: Mapping[str, Sequence[str]], cutoffs: Mapping[str, int]
) -> dict[str, float]:
    """Mean of each measure over queries, each query at its own cutoff."""
    rows: dict[str, dict[str, float]] = {}
    for k in sorted(set(cutoffs.values())):
        subset = {q: r for q, r in qrels.items() if cutoffs[q] == k}
        rows.update(per_query(subset, ranked, k))
    if not rows:
        return {"recall@k": 0.0, "hit@k": 0.0, "mrr": 0.0, "ndcg@k": 0.0}
    return {
        name: round(mean(r[name] for r in rows.values()), 4)
        for name in ("recall@k", "hit@k", "mrr", "ndcg@k")
    }


def fallback_precision_recall(
    labels: Mapping[str, bool], triggered: Mapping[str, bool]
) -> dict[str, float | None]:
    """Over the cases that label whether a fallback should happen."""
    tp = sum(1 for c, want in labels.items() if want and triggered.get(c))
    fp = sum(1 for c, want in labels.items() if not want and triggered.get(c))
    fn = sum(1 for c, want in labels.items() if want and not triggered.get(c))
    return {
        "fallback_precision": round(tp / (tp + fp), 4) if tp + fp else None,
        "fallback_recall": round(tp / (tp + fn), 4) if tp + fn else None,
        "fallback_labelled_cases": len(labels),
    }
