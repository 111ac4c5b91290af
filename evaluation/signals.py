"""Candidate signals tried for the gate beside its two (cosine, query-term coverage), computed
from a lookup's candidates when calibration data is collected. None of them added separation
on the golden corpus or CACM (`python bench/answerability.py`, README "Answerability"), so the
lookup does not compute them; calibration data carries them, so that the next idea is measured
the same way.

- `unmatched`: the share of the query's analysed terms that no candidate contains. BM25 fetches
  the chunks of the rarest terms first, so a term missing from all of them is (nearly) absent
  from the scope;
- `margin`: the candidate's cosine minus the best cosine of any other document's candidate;
- `agreement`: 1 / the worse of its dense and BM25 ranks when both legs found it, else 0;
- `novel`: how rare in general text (wordfreq) the rarest query word is that no candidate
  contains: a paraphrase misses common words, an uncovered question names a thing the scope
  never mentions. Left out when wordfreq is not installed (it comes with the test extra).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from kbflow.core.analysis import CJK, jieba_module
from kbflow.retrieval.gate import chunk_terms, query_terms
from kbflow.retrieval.quality import content_terms

ZIPF_SPAN = 6.0  # zipf 6 (one word in a thousand: "how", "怎么") is common; 0 is unseen


def selected_hits(result: Any) -> list[Any]:
    """The candidates of the attempt a lookup selected (what its gate judged)."""
    return result.candidates.get(result.retrieval_trace.selected_attempt, [])


def labelled_hits(
    query: str, hits: Sequence[Any], relevant: Callable[[Any], bool]
) -> list[tuple[dict[str, float], bool]]:
    """Calibration data of one query: each candidate's signals (its own and the tried ones) and
    whether it is relevant."""
    return [(sig, relevant(h)) for h, sig in zip(hits, candidate_signals(query, hits), strict=True)]


def candidate_signals(query: str, hits: Sequence[Any]) -> list[dict[str, float]]:
    """Each candidate's own signals plus the tried ones, in the candidates' order."""
    dense = [h for h in hits if h.quality_signal != "lexical"]
    extra = dict(zip((id(h) for h in dense), list_signals(query, dense), strict=True))
    return [{**h.signals, **extra.get(id(h), {})} for h in hits]


def list_signals(query: str, hits: Sequence[Any]) -> list[dict[str, float]]:
    if not hits:
        return []
    q_terms = query_terms(query)
    seen: set[str] = set()
    for h in hits:
        seen |= chunk_terms(h.title, h.breadcrumb, h.content)
    unmatched = round(len(q_terms - seen) / len(q_terms), 4) if q_terms else 0.0
    novel = novelty(query, hits)
    best_by_doc: dict[str, float] = {}
    for h in hits:
        best_by_doc[h.doc_id] = max(_cos(h.signals), best_by_doc.get(h.doc_id, 0.0))
    out = []
    for h in hits:
        others = [c for d, c in best_by_doc.items() if d != h.doc_id]
        ranks = (h.dense_rank, h.sparse_rank)
        row = {
            "unmatched": unmatched,
            "margin": round(_cos(h.signals) - max(others, default=0.0), 4),
            "agreement": round(1.0 / max(ranks), 4) if all(ranks) else 0.0,
        }
        if novel is not None:
            row["novel"] = novel
        out.append(row)
    return out


def _cos(signals: Mapping[str, float]) -> float:
    return signals.get("cosine", 0.0)


@lru_cache(maxsize=65536)
def rarity(word: str) -> float | None:
    """1 - zipf/6 from wordfreq's general-text frequencies (English or Chinese), in [0, 1]."""
    try:
        from wordfreq import zipf_frequency
    except ImportError:
        return None
    jieba_module()  # wordfreq's own jieba logs through the same logger: keep it quiet
    lang = "zh" if CJK.search(word) else "en"
    return round(max(0.0, min(1.0, 1.0 - zipf_frequency(word, lang) / ZIPF_SPAN)), 4)


def novelty(query: str, hits: Sequence[Any]) -> float | None:
    """The rarity of the rarest query word (surface form; jieba words for Chinese) found in no
    candidate's title, breadcrumb or text; None without wordfreq."""
    text = " ".join(f"{h.title} {h.breadcrumb} {h.content}" for h in hits).lower()
    missing = [w for w in content_terms(query) if w not in text]
    values = [rarity(w) for w in missing]
    if any(v is None for v in values):
        return None
    return max(values, default=0.0)
