"""`ChunkStore` in memory: the same contract as Milvus, for fast tests of planning and apply.

Rows live in dicts, search is brute force (squared L2 for dense, a plain BM25 over `lexical`
for text). Nothing is persisted. `refuse` lets a test make the store refuse chunks, the way
Milvus refuses a row that breaks its schema.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from kbflow.core.chunk_store import ChunkRow, Scored
from kbflow.core.validation import doc_key, validate_category, validate_scope

SOURCE_CAPACITY = 2048


class MemoryChunkStore:
    def __init__(self, refuse: Callable[[ChunkRow], str | None] | None = None) -> None:
        self.tables: dict[str, dict[str, ChunkRow]] = {}
        self.aliases: dict[str, str] = {}
        self.refuse = refuse  # row -> reason to refuse it, or None
        self.flushes = 0

    def _table(self, name: str) -> dict[str, ChunkRow]:
        name = self.aliases.get(name, name)
        if name not in self.tables:
            raise KeyError(f"collection not found: {name}")
        return self.tables[name]

    def collections(self) -> list[str]:
        return list(self.tables)

    def create_collection(self, name: str, dim: int, analyzer: str) -> None:
        self.tables.setdefault(name, {})

    def drop_collection(self, name: str) -> None:
        if name in self.aliases.values():
            raise RuntimeError(f"collection {name} still has an alias")
        self.tables.pop(name, None)

    def alias_target(self, alias: str) -> str | None:
        return self.aliases.get(alias)

    def point_alias(self, alias: str, physical: str) -> None:
        self._table(physical)
        self.aliases[alias] = physical

    def drop_alias(self, alias: str) -> None:
        self.aliases.pop(alias, None)

    def drop_unaliased(self, alias: str, target: str | None = None) -> list[str]:
        keep = target or self.alias_target(alias)
        dropped = [n for n in self.tables if n.startswith(alias + "__") and n != keep]
        for name in dropped:
            del self.tables[name]
        return dropped

    def source_capacity(self, collection: str) -> int:
        self._table(collection)
        return SOURCE_CAPACITY

    def load(self, collection: str) -> None:
        self._table(collection)

    def flush(self, collection: str) -> None:
        self._table(collection)
        self.flushes += 1

    def upsert(self, collection: str, rows: Sequence[ChunkRow]) -> int:
        table = self._table(collection)
        reasons = [r for r in map(self.refuse, rows) if r] if self.refuse else []
        if reasons:
            raise ValueError(reasons[0])  # all or nothing, like a refused Milvus batch
        for row in rows:
            table[row.id] = replace(row)
        return len(rows)

    def delete_docs(self, collection: str, scope: str, sources: Sequence[str]) -> None:
        keys = {doc_key(s) for s in sources}
        table = self._table(collection)
        for rid in [i for i, r in table.items() if r.kb_scope == scope and r.doc_id in keys]:
            del table[rid]

    def delete_chunks_from(self, collection: str, scope: str, doc_id: str, first: int) -> None:
        key, table = doc_key(doc_id), self._table(collection)
        gone = [i for i, r in table.items() if r.kb_scope == scope and r.doc_id == key]
        for rid in [i for i in gone if table[i].chunk_index >= first]:
            del table[rid]

    def read_docs(self, collection: str, scope: str, doc_ids: Sequence[str]) -> list[ChunkRow]:
        keys = {doc_key(d) for d in doc_ids}
        rows = self._table(collection).values()
        return [replace(r, lexical="") for r in rows if r.kb_scope == scope and r.doc_id in keys]

    def count(self, collection: str, scope: str) -> int:
        return sum(1 for r in self._table(collection).values() if r.kb_scope == validate_scope(scope))

    def _rows(
        self, collection: str, scope: str, category: str | None, exclude: Sequence[str] = ()
    ) -> list[ChunkRow]:
        validate_scope(scope)
        if category:
            validate_category(category)
        out = {doc_key(s) for s in exclude}
        rows = self._table(collection).values()
        return [
            r for r in rows
            if r.kb_scope == scope and (not category or r.category == category) and r.doc_id not in out
        ]

    def search(
        self, collection: str, vector: Sequence[float], *, scope: str, limit: int,
        category: str | None = None, exclude: Sequence[str] = (),
    ) -> Scored:
        def l2(row: ChunkRow) -> float:
            return sum((a - b) ** 2 for a, b in zip(row.dense, vector, strict=True))

        scored = [(r, l2(r)) for r in self._rows(collection, scope, category, exclude)]
        return sorted(scored, key=lambda t: t[1])[:limit]

    def text_search(
        self, collection: str, text: str, *, scope: str, limit: int, category: str | None = None,
        exclude: Sequence[str] = (),
    ) -> Scored:
        rows = self._rows(collection, scope, category, exclude)
        docs = [Counter(r.lexical.lower().split()) for r in rows]
        avg = sum(sum(d.values()) for d in docs) / max(len(docs), 1)
        terms = set(text.lower().split())
        df = {t: sum(1 for d in docs if t in d) for t in terms}
        idf = {t: math.log(1 + (len(docs) - n + 0.5) / (n + 0.5)) for t, n in df.items()}
        scored = []
        for row, tf in zip(rows, docs, strict=True):
            score = 0.0
            for t in terms & tf.keys():
                score += idf[t] * tf[t] * 2.2 / (tf[t] + 1.2 * (0.25 + 0.75 * sum(tf.values()) / max(avg, 1)))
            if score > 0:
                scored.append((row, score))
        return sorted(scored, key=lambda t: -t[1])[:limit]

    def hybrid_search(
        self, collection: str, vector: Sequence[float], text: str, *, scope: str, limit: int, rrf_k: int = 60
    ) -> Scored:
        fused: dict[str, float] = {}
        rows: dict[str, ChunkRow] = {}
        for leg in (self.search(collection, vector, scope=scope, limit=limit),
                    self.text_search(collection, text, scope=scope, limit=limit)):
            for rank, (row, _) in enumerate(leg, start=1):
                rows[row.id] = row
                fused[row.id] = fused.get(row.id, 0.0) + 1.0 / (rrf_k + rank)
        best = sorted(fused, key=lambda i: -fused[i])[:limit]
        return [(rows[i], fused[i]) for i in best]

    def close(self) -> None:
        pass
