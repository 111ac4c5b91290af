"""The chunk store's contract: one typed row and the operations the write and read sides need.

Only the core knows how rows are stored. `ChunkRow` is the one shape of a chunk on both sides:
the writer builds it, the store converts it to its own row and back, and search hands it to the
read side. `ChunkStore` names every operation kbflow performs on the store: the Milvus
implementation (`milvus_store.MilvusChunkStore`) is what runs; the in-memory one
(`memory_store.MemoryChunkStore`) lets planning and apply logic be tested in milliseconds.

Scopes and categories are passed as values, never as filter text: each implementation builds
its own filter from validated values, so user text cannot reach a filter expression.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kbflow.core.validation import validate_scope

# per-field limits (bytes) of the chunk schema; the writer cuts a document's values to them
TEXT_MAX_BYTES = 65535
SOURCE_MAX_BYTES = 2048  # 512 characters of any script
FIELD_MAX_BYTES = {
    "source": SOURCE_MAX_BYTES,
    "_source": 2048,
    "category": 512,
    "breadcrumb": 2048,
    "title": 2048,
    "heading_path": 4096,
    "text": TEXT_MAX_BYTES,
    "lexical": TEXT_MAX_BYTES,
}
WRITE_BATCH = 500  # rows per upsert
SCALAR_FIELDS = [
    "id",
    "doc_id",
    "source",
    "_source",
    "kb_scope",
    "category",
    "breadcrumb",
    "title",
    "heading_path",
    "chunk_index",
    "text",
]


@dataclass
class ChunkRow:
    """One chunk as stored. `doc_id` is `doc_key(source)`, the only document value a filter
    ever sees; `source` is the author's id as written, for display."""

    id: str
    doc_id: str
    source: str
    source_path: str
    kb_scope: str
    category: str
    breadcrumb: str
    title: str
    heading_path: str
    chunk_index: int
    text: str
    dense: Sequence[float] = field(default_factory=list, repr=False)
    lexical: str = field(default="", repr=False)  # the analysed text BM25 indexes

    def to_store(self) -> dict[str, Any]:
        """The row as the store's schema names its fields."""
        return {
            "id": self.id,
            "doc_id": self.doc_id,
            "source": self.source,
            "_source": self.source_path,
            "kb_scope": self.kb_scope,
            "category": self.category,
            "breadcrumb": self.breadcrumb,
            "title": self.title,
            "heading_path": self.heading_path,
            "chunk_index": self.chunk_index,
            "text": self.text,
            "lexical": self.lexical,
            "dense": list(self.dense),
        }

    @classmethod
    def from_store(cls, row: dict[str, Any]) -> ChunkRow:
        """A row read back (a search hit nests it under `entity`)."""
        e = row.get("entity", row)
        return cls(
            id=e["id"],
            doc_id=e.get("doc_id", ""),
            source=e.get("source", ""),
            source_path=e.get("_source", ""),
            kb_scope=e.get("kb_scope", ""),
            category=e.get("category", ""),
            breadcrumb=e.get("breadcrumb", ""),
            title=e.get("title", ""),
            heading_path=e.get("heading_path", ""),
            chunk_index=int(e.get("chunk_index", 0)),
            text=e.get("text", ""),
            dense=e.get("dense") if e.get("dense") is not None else [],
            lexical=e.get("lexical", ""),
        )


def alias_for(prefix: str, scope: str) -> str:
    """The scope's stable alias; its physical collections are named `<alias>__<time>_<rand>`."""
    validate_scope(scope)
    digest = hashlib.sha1(scope.encode()).hexdigest()[:6]
    return f"{prefix}_{scope.replace('-', '_')}_{digest}"


def new_physical_name(alias: str) -> str:
    return f"{alias}__{datetime.now(UTC):%Y%m%d%H%M%S}_{secrets.token_hex(2)}"


def built_at(physical: str) -> datetime | None:
    """When a physical collection was built (a full rebuild makes a new one), from its name."""
    stamp = physical.rpartition("__")[2].partition("_")[0]
    try:
        return datetime.strptime(stamp, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


Scored = list[tuple[ChunkRow, float]]  # best first, with the store's score (L2 or BM25)


class ChunkStore(Protocol):
    """Every operation kbflow performs on its chunk store. A scope lives in a physical
    collection behind a stable alias; a full rebuild builds a new collection and moves the alias."""

    # collections and aliases
    def collections(self) -> list[str]: ...
    def create_collection(self, name: str, dim: int, analyzer: str) -> None: ...
    def drop_collection(self, name: str) -> None: ...
    def alias_target(self, alias: str) -> str | None: ...
    def point_alias(self, alias: str, physical: str) -> None: ...
    def drop_alias(self, alias: str) -> None: ...
    def drop_unaliased(self, alias: str, target: str | None = None) -> list[str]: ...
    def source_capacity(self, collection: str) -> int: ...
    def load(self, collection: str) -> None: ...
    def flush(self, collection: str) -> None: ...

    # rows
    def upsert(self, collection: str, rows: Sequence[ChunkRow]) -> int: ...
    def delete_docs(self, collection: str, scope: str, sources: Sequence[str]) -> None: ...
    def delete_chunks_from(self, collection: str, scope: str, doc_id: str, first: int) -> None: ...
    def read_docs(self, collection: str, scope: str, doc_ids: Sequence[str]) -> list[ChunkRow]: ...
    def count(self, collection: str, scope: str) -> int: ...

    # search: dense (L2, smaller is nearer), BM25 over `lexical`, and the store's own fusion
    # `exclude`: documents (by source) left out of a search, as if they were not indexed
    def search(
        self, collection: str, vector: Sequence[float], *, scope: str, limit: int,
        category: str | None = None, exclude: Sequence[str] = (),
    ) -> Scored: ...
    def text_search(
        self, collection: str, text: str, *, scope: str, limit: int, category: str | None = None,
        exclude: Sequence[str] = (),
    ) -> Scored: ...
    def hybrid_search(
        self, collection: str, vector: Sequence[float], text: str, *, scope: str, limit: int, rrf_k: int = 60
    ) -> Scored: ...

    def close(self) -> None: ...
