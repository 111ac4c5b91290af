"""Candidate signals tried for the gate beside its two (cosine, query-term coverage), computed
from a lookup's candidates. None of them added separation on the golden corpus or CACM
(`python bench/answerability.py`, docs/quality.md "Answerability"), so the lookup does not compute
them and the product does not carry them: `TriedSignals` hands them to the calibration data a
benchmark collects (`kbflow.calibration.labels.Signals`), so that the next idea is measured the
same way.

- `unmatched`: the share of the query's analysed terms that no candidate contains. BM25 fetches
  the chunks of the rarest terms first, so a term missing from all of them is (nearly) absent
  from the scope;
- `margin`: the candidate's cosine minus the best cosine of any other document's candidate;
- `agreement`: 1 / the worse of its dense and BM25 ranks when both legs found it, else 0;
- `novel`: how rare in general text (wordfreq) the rarest query word is that no candidate
  contains: a paraphrase misses common words, an uncovered question names a thing the scope
  never mentions. Left out when wordfreq is not installed (it comes with the test extra);
- `spread`: how much more of the query the first 10 candidates cover together than this one
  does: an uncovered question finds its words scattered over several documents.

With the scope's vocabulary (`Vocabulary` below, document frequencies built from its chunks;
without the documents a leave-out lookup left out):

- `salient`: the candidate's share of the query's salient terms, each term weighted by its
  idf in the scope (coverage that counts a rare term more than a word every document has);
- `absent`: the share of the query's words that occur nowhere in the scope, each weighted by
  its rarity in general text;
- `specificity`: the mean idf of the query's terms that the scope has, over the idf of a term
  it lacks: a vague question is made of words every document has;
- `bm25`: the candidate's BM25 score over the most its query could reach ((k1 + 1) x the
  query's idf mass).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from kbflow.calibration.self_calibration import scope_chunks
from kbflow.core.analysis import CJK, analyze, chunk_terms, jieba_module
from kbflow.core.chunk_store import ChunkRow
from kbflow.core.settings import Settings
from kbflow.retrieval.gate import query_terms
from kbflow.retrieval.quality import content_terms


@dataclass(frozen=True)
class Vocabulary:
    doc_terms: Mapping[str, frozenset[str]]  # document (its source) -> its analysed terms
    df: Mapping[str, int] = field(default_factory=dict)
    docs: int = 0

    @classmethod
    def from_chunks(cls, chunks: Iterable[ChunkRow]) -> Vocabulary:
        terms: dict[str, set[str]] = {}
        for c in chunks:
            terms.setdefault(c.source, set()).update(chunk_terms(c.title, c.breadcrumb, c.text))
        df: Counter[str] = Counter()
        for t in terms.values():
            df.update(t)
        return cls({doc: frozenset(t) for doc, t in terms.items()}, df, len(terms))

    def without(self, documents: Iterable[str]) -> Vocabulary:
        """The vocabulary of the scope with these documents (sources) left out, as `exclude`
        leaves them out of a lookup: their terms counted off, not the scope counted again."""
        gone = set(documents) & self.doc_terms.keys()
        if not gone:
            return self
        df = Counter(self.df)
        for doc in gone:
            df.subtract(self.doc_terms[doc])
        kept = {d: t for d, t in self.doc_terms.items() if d not in gone}
        return Vocabulary(kept, +df, len(kept))  # `+` drops the terms no document has any more

    def idf(self, term: str) -> float:
        """BM25's idf (as Milvus computes it): rare terms weigh most, a term in every document
        next to nothing, an absent term the most of all."""
        n = self.df.get(term, 0)
        return math.log(1.0 + (self.docs - n + 0.5) / (n + 0.5))


ZIPF_SPAN = 6.0  # zipf 6 (one word in a thousand: "how", "怎么") is common; 0 is unseen
SPREAD_DEPTH = 10
BM25_K1 = 1.2  # Milvus's default


class TriedSignals:
    """A `kbflow.calibration.labels.Signals` that adds the tried signals to the lookup's own:
    each scope's vocabulary is built once from its chunks, less what a leave-out lookup left
    out."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._built: dict[str, Vocabulary] = {}

    def vocabulary(self, scope: str, left_out: Sequence[str] = ()) -> Vocabulary:
        if scope not in self._built:
            self._built[scope] = Vocabulary.from_chunks(scope_chunks(self.settings, scope))
        return self._built[scope].without(left_out)

    def __call__(
        self, query: str, hits: Sequence[Any], scope: str, left_out: Sequence[str] = ()
    ) -> list[dict[str, float]]:
        return candidate_signals(query, hits, self.vocabulary(scope, left_out))


def candidate_signals(
    query: str, hits: Sequence[Any], vocab: Vocabulary | None = None
) -> list[dict[str, float]]:
    """Each candidate's own signals plus the tried ones, in the candidates' order."""
    dense = [h for h in hits if h.quality_signal != "lexical"]
    tried = list_signals(query, dense)
    if vocab is not None:
        tried = [{**t, **v} for t, v in zip(tried, vocabulary_signals(query, dense, vocab), strict=True)]
    extra = dict(zip((id(h) for h in dense), tried, strict=True))
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
    union = set()
    for h in hits[:SPREAD_DEPTH]:
        union |= q_terms & chunk_terms(h.title, h.breadcrumb, h.content)
    together = len(union) / len(q_terms) if q_terms else 0.0
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
            "spread": round(together - h.signals.get("coverage", 0.0), 4),
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


def vocabulary_signals(query: str, hits: Sequence[Any], vocab: Vocabulary) -> list[dict[str, float]]:
    """`salient`, `absent`, `specificity` and `bm25` of each candidate (module docstring)."""
    q_terms = query_terms(query)
    mass = sum(vocab.idf(t) for t in q_terms)
    ceiling = vocab.idf("")  # the idf of a term no document has
    known = [vocab.idf(t) / ceiling for t in q_terms if vocab.df.get(t)]
    query_level = {
        "absent": absent_share(query, vocab),
        "specificity": round(sum(known) / len(known), 4) if known else 0.0,
    }
    out = []
    for h in hits:
        matched = q_terms & chunk_terms(h.title, h.breadcrumb, h.content)
        bm25 = (h.sparse_score or 0.0) / ((BM25_K1 + 1) * mass) if mass else 0.0
        out.append({
            **query_level,
            "salient": round(sum(vocab.idf(t) for t in matched) / mass, 4) if mass else 0.0,
            "bm25": round(min(1.0, bm25), 4),
        })
    return out


def absent_share(query: str, vocab: Vocabulary) -> float:
    """The query's words (surface forms; jieba words for Chinese) whose analysed terms no
    document of the scope has, as a share of all its words, each weighted by its general-text
    rarity (1 each without wordfreq)."""
    weights = {}
    for w in content_terms(query):
        r = rarity(w)
        weights[w] = 1.0 if r is None else r
    total = sum(weights.values())
    if not total:
        return 0.0
    missing = sum(
        weight for w, weight in weights.items() if not any(vocab.df.get(t) for t in analyze(w).split())
    )
    return round(missing / total, 4)
