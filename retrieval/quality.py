"""Score labels, and the lexical signal for scopes whose model cannot embed their language.

Ranking (originalRank) says who comes first; quality (`gate.py`) says whether it is good
enough, always from absolute signals, never from rank. Legacy score labels canonicalize to
`dense` or `hybrid` here, the only place that reads them.
"""

from __future__ import annotations

import re

from kbflow.core.analysis import CJK, jieba_module

LEGACY_LABELS = {
    "l2_distance": "dense",
    "l2": "dense",
    "dense": "dense",
    "vector": "dense",
    "rrf": "hybrid",
    "hybrid": "hybrid",
    "hybrid_rrf": "hybrid",
    # a BM25-only hit is a hybrid hit without a dense signal: quality falls back to lexical
    "bm25": "hybrid",
    "bm25_only": "hybrid",
    "bm25_only_no_dense": "hybrid",
    "sparse": "hybrid",
}
_TOKEN = re.compile(r"[\w][\w.\-]*", re.UNICODE)
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in is it my of on or our so that the "
    "this to was what when where which why with you your keeps keep".split()
    # Chinese question and filler words
    + "怎么办 怎么 如何 什么 为什么 怎样 哪些 是否 可以 一直 总是 时候 问题 出现 的话".split()
)


def canonical_label(label: str) -> str:
    try:
        return LEGACY_LABELS[label.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown score label {label!r}") from None


def content_terms(text: str) -> set[str]:
    """Content-bearing terms: words of 2+ characters minus stop words; for Chinese, jieba words
    of 2+ characters (single characters are mostly particles)."""
    words = {t.lower().strip(".-") for t in _TOKEN.findall(text)}
    if CJK.search(text):
        jieba = jieba_module()

        words = {w.lower() for w in jieba.cut(text) if w.strip()}
    return {w for w in words if len(w) >= 2 and w not in STOPWORDS}


def lexical_coverage(query: str, content: str) -> float:
    """Share of the query's content terms present in the content (jieba words for Chinese)."""
    q = content_terms(query)
    if not q:
        return 0.0
    text = content.lower()
    return sum(1 for t in q if t in text) / len(q)
