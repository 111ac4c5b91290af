"""Pseudo-queries made from a scope's own text, for calibrating its gate without labels.

Each pseudo-query comes from one document and is asked twice: with the document in the scope
(an answerable question whose answer is known) and with it left out (`exclude`), which makes a
near-domain question by construction — the same words, the same product, the answer missing.
Four kinds, as a person or an agent would ask:

- `title`: the document's title;
- `heading`: a section heading that is not the title;
- `sentence`: the document's most salient sentence (highest mean tf-idf of its terms);
- `keywords`: the 4 terms of one chunk with the highest tf-idf.

Terms are surface words (jieba words for Chinese) minus stop words, so a pseudo-query reads as
text, not as stems. Everything is deterministic for a given corpus and seed.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kbflow.core.chunk_store import ChunkRow
from kbflow.retrieval.quality import content_terms

KINDS = ("title", "heading", "sentence", "keywords")
KEYWORDS = 4
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")
_MARKUP = re.compile(r"`+|[#>*_|\[\]()]+")
_CODE = re.compile(r"```.*?(```|$)", re.DOTALL)
COMMON = 0.3  # a term in more than this share of documents says nothing about one of them


def prose(text: str) -> str:
    """The text people write questions from: code blocks, tables and command lines removed (a
    question quotes an error, rarely a whole command)."""
    lines = [
        line
        for line in _CODE.sub(" ", text).splitlines()
        if not line.lstrip().startswith(("|", "$", "#!", "    "))
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class PseudoQuery:
    qid: str
    text: str
    source: str  # the document it was made from (its answer)
    kind: str  # title | heading | sentence | keywords


def _sentences(text: str) -> list[str]:
    out = []
    for raw in _SENTENCE_END.split(_MARKUP.sub(" ", prose(text))):
        sentence = " ".join(raw.split())
        cjk = sum(1 for ch in sentence if "\u4e00" <= ch <= "\u9fff")
        size = cjk + len(sentence.split()) if cjk else len(sentence.split())
        if 6 <= size <= 40:
            out.append(sentence)
    return out


class _Idf:
    """Inverse document frequency of surface terms over the scope's documents."""

    def __init__(self, docs: dict[str, list[ChunkRow]]) -> None:
        df: Counter[str] = Counter()
        for rows in docs.values():
            df.update(set().union(*(content_terms(prose(r.text)) for r in rows)))
        self.n = max(len(docs), 1)
        self.df = df

    def __call__(self, term: str) -> float:
        return math.log((self.n + 1) / (self.df.get(term, 0) + 1)) + 1.0

    def salience(self, text: str) -> float:
        terms = content_terms(text)
        return sum(self(t) for t in terms) / len(terms) if len(terms) >= 4 else 0.0

    def specific(self, text: str) -> bool:
        """Has a term that fewer than COMMON of the documents hold ("处理方法" has none)."""
        return any(self.df.get(t, 0) <= COMMON * self.n for t in content_terms(text))


def _heading(rows: Sequence[ChunkRow], title: str, idf: _Idf, rng: random.Random) -> str | None:
    heads = sorted(
        {h.split(" > ")[-1].strip() for r in rows for h in [r.heading_path] if h} - {title.strip(), ""}
    )
    heads = [h for h in heads if len(content_terms(h)) >= 2 and idf.specific(h)]
    return rng.choice(heads) if heads else None


def _keywords(rows: Sequence[ChunkRow], idf: _Idf, rng: random.Random) -> str | None:
    text = prose(rng.choice(list(rows)).text).lower()
    tf = {t: text.count(t) for t in content_terms(text)}
    ranked = sorted((t for t in tf if idf.specific(t)), key=lambda t: (-tf[t] * idf(t), t))[:KEYWORDS]
    return " ".join(ranked) if len(ranked) >= 2 else None


def for_document(source: str, rows: Sequence[ChunkRow], idf: _Idf, rng: random.Random) -> list[PseudoQuery]:
    """Up to one pseudo-query of each kind from one document's chunks."""
    title = rows[0].title.strip()
    sentences = [s for r in rows for s in _sentences(r.text)]
    texts = {
        "title": title if len(content_terms(title)) >= 1 else None,
        "heading": _heading(rows, title, idf, rng),
        "sentence": max(sentences, key=lambda s: (idf.salience(s), s)) if sentences else None,
        "keywords": _keywords(rows, idf, rng),
    }
    return [
        PseudoQuery(f"self:{kind}:{source}", text, source, kind)
        for kind, text in texts.items()
        if text and text.strip()
    ]


def pseudo_queries(chunks: Iterable[ChunkRow], max_docs: int = 60, seed: int = 13) -> list[PseudoQuery]:
    """Pseudo-queries from up to `max_docs` documents (a seeded sample when there are more)."""
    docs: dict[str, list[ChunkRow]] = {}
    for row in sorted(chunks, key=lambda r: (r.source, r.chunk_index)):
        docs.setdefault(row.source, []).append(row)
    idf = _Idf(docs)
    rng = random.Random(seed)
    chosen = sorted(docs) if len(docs) <= max_docs else sorted(rng.sample(sorted(docs), max_docs))
    return [q for source in chosen for q in for_document(source, docs[source], idf, rng)]
