"""A scope's vocabulary: in how many of its documents each analysed term occurs.

The scope-level gate signals tried for issue 23 (`signals.py`: `salient`, `absent`,
`specificity`, `bm25`) need document frequencies, which the lookup does not have (Milvus keeps
BM25's statistics to itself). Calibration data is collected offline, so the vocabulary is built
there from the scope's chunks, and a leave-out lookup gets the vocabulary without the documents
it left out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kbflow.core.analysis import chunk_terms
from kbflow.core.chunk_store import ChunkRow


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
