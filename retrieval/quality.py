"""The one quality normalizer: every stage that needs "is this good enough" asks here.

Ranking (originalRank) says who comes first; quality says whether it is good enough. Quality is
always an absolute signal: the squared L2 of the chunk's stored vector to the query
(`1 - clamp(L2, 0, max_l2) / max_l2`, the clamped cosine for normalized vectors). A candidate
with no dense signal gets a conservative lexical similarity (the share of the query's content
terms it contains), capped below PRECISE — never a rank-derived score, since rank 1 only means
"best of this batch".
"""

from __future__ import annotations

import re

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
LEXICAL_CAP = 0.74  # lexical evidence alone may reach REFERENCE, never PRECISE
_TOKEN = re.compile(r"[\w][\w.\-]*", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u9fff]")
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


def l2_to_quality(l2: float, max_l2: float) -> float:
    return 1.0 - min(max(l2, 0.0), max_l2) / max_l2


def content_terms(text: str) -> set[str]:
    """Content-bearing terms: words of 2+ characters minus stop words; for Chinese, jieba words
    of 2+ characters (single characters are mostly particles)."""
    words = {t.lower().strip(".-") for t in _TOKEN.findall(text)}
    if _CJK.search(text):
        import jieba

        words = {w.lower() for w in jieba.cut(text) if w.strip()}
    return {w for w in words if len(w) >= 2 and w not in STOPWORDS}


def lexical_similarity(query: str, content: str) -> float:
    """Share of the query's content terms present in the content, scaled into [0, LEXICAL_CAP]."""
    q = content_terms(query)
    if not q:
        return 0.0
    text = content.lower()
    return LEXICAL_CAP * sum(1 for t in q if t in text) / len(q)


def quality_score(
    label: str,
    score: float,
    dense_distance: float | None,
    *,
    max_l2: float,
    signal: str = "dense",
    query: str = "",
    content: str = "",
) -> float:
    """`signal="lexical"` is for scopes whose model gives no meaningful distance for their
    language (see Settings.lexical_quality_analyzers)."""
    if signal == "lexical":
        return lexical_similarity(query, content)
    if canonical_label(label) == "dense":
        return l2_to_quality(dense_distance if dense_distance is not None else score, max_l2)
    if dense_distance is not None:
        return l2_to_quality(dense_distance, max_l2)
    return lexical_similarity(query, content)
