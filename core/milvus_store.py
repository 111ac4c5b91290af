"""Milvus side of the store: the chunk schema, per-scope aliases and physical collections.

Each kb_scope lives in its own physical collection behind a stable alias
(`<prefix>_<scope>_<hash>`). A full rebuild builds a new physical collection and moves the
alias, so a lookup never sees a half-built index and one scope's rebuild never touches
another scope; the analyzer (standard / jieba) is a per-scope choice for the same reason.
Every row still carries `kb_scope` and every search filters on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pymilvus import (
    AnnSearchRequest,
    DataType,
    Function,
    FunctionType,
    MilvusClient,
    MilvusException,
    RRFRanker,
)

from kbflow.core import lite_engine
from kbflow.core.alias_book import BOOK, AliasBook, has_native_aliases
from kbflow.core.chunk_store import (  # noqa: F401  (the limits are the schema's, re-exported)
    FIELD_MAX_BYTES,
    SCALAR_FIELDS,
    SOURCE_MAX_BYTES,
    TEXT_MAX_BYTES,
    WRITE_BATCH,
    ChunkRow,
    Scored,
    alias_for,
    new_physical_name,
)
from kbflow.core.milvus_connect import (  # noqa: F401  (re-exported: callers open stores through here)
    LITE_GRPC_OPTIONS,
    StoreUnavailable,
    grpc_options,
    is_lite_file,
    lock_holder,
    open_client,
)
from kbflow.core.validation import doc_key, eq, in_list, not_in_list, validate_category, validate_scope

QUERY_BATCH = 1000
ALIAS_TTL_S = 1.0  # a search reuses an alias resolved through the book this long
COLLECTION_NOT_FOUND = 100  # Milvus's error code, on Lite and on a server
# HNSW on a Milvus server. Milvus Lite 2.5 refuses HNSW ("local mode only support FLAT IVF_FLAT
# AUTOINDEX"), and its IVF_FLAT lost recall past one segment: recall@10 against exact search was
# 0.17-0.19 at 100k vectors at every nprobe up to nlist (bench/scale.py; 1.0 at 10k and 30k).
# FLAT is exact, and its C++ scan is fast enough for the sizes Lite serves (docs/sizing.md).
DENSE_INDEX = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 200}}
LITE_DENSE_INDEX: dict[str, Any] = {"index_type": "FLAT", "metric_type": "L2", "params": {}}


def dense_params(lite: bool, limit: int) -> dict[str, Any]:
    if lite:
        return {"metric_type": "L2", "params": {}}
    return {"metric_type": "L2", "params": {"ef": max(64, limit * 2)}}


# Said, not left to the engine: Milvus defaults k1 to 1.2, Milvus Lite 3.x used 1.5, and kbflow's
# golden figures and calibrations were measured with 1.5.
BM25_PARAMS = {"bm25_k1": 1.5, "bm25_b": 0.75}

# Parameters accepted by both Milvus Lite and a Milvus server (checked on Lite 3.2.2; the
# server's standard tokenizer does not lowercase unless told to).
ANALYZERS: dict[str, dict[str, Any]] = {
    "standard": {"tokenizer": "standard", "filter": ["lowercase"]},
    "jieba": {"tokenizer": "jieba", "filter": ["lowercase"]},
}


def build_schema(client: MilvusClient, dim: int, analyzer: str) -> Any:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    # doc_id holds doc_key(source), the only document value filters ever see; source is the
    # author's id as written, for display
    schema.add_field("doc_id", DataType.VARCHAR, max_length=64)
    schema.add_field("source", DataType.VARCHAR, max_length=SOURCE_MAX_BYTES)
    schema.add_field("kb_scope", DataType.VARCHAR, max_length=64)
    for name in ("_source", "category", "breadcrumb", "title", "heading_path"):
        schema.add_field(name, DataType.VARCHAR, max_length=FIELD_MAX_BYTES[name])
    schema.add_field("chunk_index", DataType.INT64)
    # raw text for display and excerpts; `lexical` is the analysed text BM25 indexes
    schema.add_field("text", DataType.VARCHAR, max_length=TEXT_MAX_BYTES)
    schema.add_field(
        "lexical",
        DataType.VARCHAR,
        max_length=TEXT_MAX_BYTES,
        enable_analyzer=True,
        analyzer_params=ANALYZERS[analyzer],
    )
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name="lexical_bm25",
            function_type=FunctionType.BM25,
            input_field_names=["lexical"],
            output_field_names=["sparse"],
        )
    )
    return schema


def create_collection(
    client: MilvusClient, name: str, dim: int, analyzer: str, lite: bool | None = None
) -> None:
    """The engine's index (`lite`: Milvus Lite, asked of the engine when not given). On Milvus
    Lite, Strong consistency: a lookup right after a reindex sees what it wrote (the one engine
    process makes that cheap); a server keeps its default."""
    if lite is None:
        lite = not has_native_aliases(client)
    index = client.prepare_index_params()
    index.add_index("dense", **(LITE_DENSE_INDEX if lite else DENSE_INDEX))
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params=BM25_PARAMS)
    extra = {"consistency_level": "Strong"} if lite else {}
    client.create_collection(name, schema=build_schema(client, dim, analyzer), index_params=index, **extra)


def alias_target(client: MilvusClient, alias: str) -> str | None:
    if alias not in client.list_aliases().get("aliases", []):
        return None
    return client.describe_alias(alias)["collection_name"]


def point_alias(client: MilvusClient, alias: str, physical: str) -> None:
    """Create or atomically move the alias."""
    if alias_target(client, alias) is None:
        client.create_alias(physical, alias)
    else:
        client.alter_alias(physical, alias)


def upsert_rows(client: MilvusClient, collection: str, rows: Sequence[dict[str, Any]]) -> int:
    for i in range(0, len(rows), WRITE_BATCH):
        client.upsert(collection, list(rows[i : i + WRITE_BATCH]))
    return len(rows)


def source_capacity(client: MilvusClient, collection: str) -> int:
    """max_length of a collection's `source` field: 64 in collections built before free-text
    sources, which a rebuild must widen."""
    for f in client.describe_collection(collection)["fields"]:
        if f["name"] == "source":
            return int(f.get("params", {}).get("max_length", 0))
    return 0


def scope_doc_filter(scope: str, sources: Iterable[str]) -> str:
    """Filter on the scope and the documents' keys: user text never enters the expression."""
    keys = sorted({doc_key(s) for s in sources})
    return f"{eq('kb_scope', validate_scope(scope))} and {in_list('doc_id', keys)}"


def delete_docs(client: MilvusClient, collection: str, scope: str, sources: Sequence[str]) -> None:
    """Delete every chunk of these documents (by source as written)."""
    for i in range(0, len(sources), QUERY_BATCH):
        client.delete(collection, filter=scope_doc_filter(scope, sources[i : i + QUERY_BATCH]))


def delete_chunks_from(client: MilvusClient, collection: str, scope: str, doc_id: str, first: int) -> None:
    """Delete a document's chunks with chunk_index >= first (left over from a longer version)."""
    expr = f"{scope_doc_filter(scope, [doc_id])} and chunk_index >= {int(first)}"
    client.delete(collection, filter=expr)


def read_doc_rows(client: MilvusClient, collection: str, scope: str, doc_ids: Sequence[str]) -> list[dict]:
    """Every stored field of these documents' chunks except the derived lexical text and BM25
    vector, which the caller recomputes under its own analysis."""
    out: list[dict] = []
    for i in range(0, len(doc_ids), 100):
        out.extend(
            client.query(
                collection,
                filter=scope_doc_filter(scope, doc_ids[i : i + 100]),
                output_fields=[*SCALAR_FIELDS, "dense"],
            )
        )
    for row in out:
        row["dense"] = [float(x) for x in row["dense"]]
    return out


def count_rows(client: MilvusClient, collection: str, scope: str) -> int:
    """Rows of the scope's collection, which holds that scope alone (`alias_for`): counted
    without a filter, which Milvus answers from its segments, where a filtered count makes
    Milvus Lite evaluate it row by row (6.7 s and +470 MB at 100k chunks; at 1M `kbflow status`
    was killed for memory on a 24 GiB machine)."""
    validate_scope(scope)
    res = client.query(collection, filter="", output_fields=["count(*)"])
    return int(res[0]["count(*)"]) if res else 0


def search_filter(scope: str, category: str | None = None, exclude: Iterable[str] = ()) -> str:
    """The scope (and category) filter of a search, from validated values; `exclude` leaves
    documents out by source, through their keys, so no user text enters the expression."""
    expr = eq("kb_scope", validate_scope(scope))
    if category:
        expr += f" and {eq('category', validate_category(category))}"
    keys = sorted({doc_key(s) for s in exclude})
    if keys:
        expr += f" and {not_in_list('doc_id', keys)}"
    return expr


HIT_FIELDS = [*SCALAR_FIELDS, "dense"]


def _scored(res: list) -> Scored:
    return [(ChunkRow.from_store(h), float(h["distance"])) for h in res]


class MilvusChunkStore:
    """`ChunkStore` on a Milvus client (Milvus Lite or a server): the only code that talks to
    pymilvus about chunks. On an engine without aliases (Milvus Lite) kbflow keeps them in an
    `AliasBook`, and every name a caller passes is resolved through it."""

    def __init__(self, client: MilvusClient, lite_db: str | None = None) -> None:
        self.client = client
        self.lite_db = lite_db  # the file whose engine this process started, if any
        self.book = None if has_native_aliases(client) else AliasBook(client)
        self._resolved: dict[str, tuple[str, float]] = {}  # alias -> (collection, when), for searches

    @property
    def lite(self) -> bool:
        """Milvus Lite's engine (no aliases, no HNSW)."""
        return self.book is not None

    def _name(self, name: str) -> str:
        """A physical collection's name for an alias (a physical name is returned as is)."""
        if self.book is None or "__" in name or name == BOOK:
            return name
        return self.book.target(name) or name

    def _search_name(self, name: str, fresh: bool = False) -> str:
        """`_name` for a search, reused for ALIAS_TTL_S: asking the book on every leg cost ~1 ms
        each. Never for a write, which must land where the alias points now."""
        if self.book is None or "__" in name:
            return name
        now, seen = time.monotonic(), self._resolved.get(name)
        if seen is not None and not fresh and now - seen[1] < ALIAS_TTL_S:
            return seen[0]
        target = self._name(name)
        self._resolved[name] = (target, now)
        return target

    def _searching(self, collection: str, run: Callable[[str], list]) -> Scored:
        """A search on the alias's collection. One dropped since it was resolved (a rebuild in
        another process moved the alias, then dropped the old one) is resolved again, once."""
        name = self._search_name(collection)
        try:
            return _scored(run(name))
        except MilvusException as exc:
            if name == collection or exc.code != COLLECTION_NOT_FOUND:
                raise
            return _scored(run(self._search_name(collection, fresh=True)))

    def collections(self) -> list[str]:
        return [c for c in self.client.list_collections() if c != BOOK]

    def create_collection(self, name: str, dim: int, analyzer: str) -> None:
        create_collection(self.client, name, dim, analyzer, lite=self.lite)

    def drop_collection(self, name: str) -> None:
        if self.book is not None and name in self.book.pointed_to():
            raise RuntimeError(f"collection {name} still has an alias")
        self.client.drop_collection(name)

    def alias_target(self, alias: str) -> str | None:
        if self.book is None:
            return alias_target(self.client, alias)
        target = self.book.target(alias)
        return target if target is not None and self.client.has_collection(target) else None

    def point_alias(self, alias: str, physical: str) -> None:
        self._resolved.pop(alias, None)
        if self.book is None:
            point_alias(self.client, alias, physical)
        else:
            self.book.point(alias, physical)

    def drop_alias(self, alias: str) -> None:
        self._resolved.pop(alias, None)
        if self.book is None:
            self.client.drop_alias(alias)
        else:
            self.book.drop(alias)

    def drop_unaliased(self, alias: str, target: str | None = None) -> list[str]:
        """Drop this alias's physical collections the alias does not point to (left by a crash
        or superseded by a rebuild). `target`: the alias's collection when the caller knows it."""
        keep = target or self.alias_target(alias)
        dropped = [n for n in self.collections() if n.startswith(alias + "__") and n != keep]
        for name in dropped:
            self.client.drop_collection(name)
        return dropped

    def source_capacity(self, collection: str) -> int:
        return source_capacity(self.client, self._name(collection))

    def load(self, collection: str) -> None:
        self.client.load_collection(self._name(collection))

    def flush(self, collection: str) -> None:
        self.client.flush(self._name(collection))

    def upsert(self, collection: str, rows: Sequence[ChunkRow]) -> int:
        return upsert_rows(self.client, self._name(collection), [r.to_store() for r in rows])

    def delete_docs(self, collection: str, scope: str, sources: Sequence[str]) -> None:
        delete_docs(self.client, self._name(collection), scope, sources)

    def delete_chunks_from(self, collection: str, scope: str, doc_id: str, first: int) -> None:
        delete_chunks_from(self.client, self._name(collection), scope, doc_id, first)

    def read_docs(self, collection: str, scope: str, doc_ids: Sequence[str]) -> list[ChunkRow]:
        rows = read_doc_rows(self.client, self._name(collection), scope, doc_ids)
        return [ChunkRow.from_store(r) for r in rows]

    def count(self, collection: str, scope: str) -> int:
        """On Milvus Lite, from the segments' statistics (deletes subtracted, checked), which needs
        no load: loading 100k chunks into a fresh engine took ~8 s. A server counts loaded."""
        name = self._name(collection)
        if self.lite:
            validate_scope(scope)
            return int(self.client.get_collection_stats(name)["row_count"])
        self.client.load_collection(name)
        return count_rows(self.client, name, scope)

    def search(
        self, collection: str, vector: Sequence[float], *, scope: str, limit: int,
        category: str | None = None, exclude: Sequence[str] = (),
    ) -> Scored:
        return self._searching(collection, lambda name: self.client.search(
            name, data=[list(vector)], anns_field="dense", limit=limit,
            filter=search_filter(scope, category, exclude), output_fields=HIT_FIELDS,
            search_params=dense_params(self.lite, limit),
        )[0])

    def text_search(
        self, collection: str, text: str, *, scope: str, limit: int, category: str | None = None,
        exclude: Sequence[str] = (),
    ) -> Scored:
        return self._searching(collection, lambda name: self.client.search(
            name, data=[text], anns_field="sparse", limit=limit,
            filter=search_filter(scope, category, exclude), output_fields=HIT_FIELDS,
            search_params={"metric_type": "BM25"},
        )[0])

    def hybrid_search(
        self, collection: str, vector: Sequence[float], text: str, *, scope: str, limit: int, rrf_k: int = 60
    ) -> Scored:
        """Both legs fused by the store itself (RRF): the plain baseline kbflow is measured against."""
        expr = search_filter(scope)
        reqs = [
            AnnSearchRequest(data=[list(vector)], anns_field="dense", limit=limit, expr=expr,
                             param=dense_params(self.lite, limit)),
            AnnSearchRequest(data=[text], anns_field="sparse", limit=limit, expr=expr,
                             param={"metric_type": "BM25"}),
        ]
        return self._searching(collection, lambda name: self.client.hybrid_search(
            name, reqs, RRFRanker(rrf_k), limit=limit, output_fields=SCALAR_FIELDS)[0])

    def close(self) -> None:
        self.client.close()
        if self.lite_db is not None:
            lite_engine.release(self.lite_db)


def create_vector_only_collection(client: MilvusClient, name: str, dim: int) -> None:
    """An id and a dense vector under the index kbflow's collections use, nothing else: the
    floor `bench/scale.py` measures kbflow's insert and search against."""
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    index = client.prepare_index_params()
    lite = not has_native_aliases(client)
    index.add_index("dense", **(LITE_DENSE_INDEX if lite else DENSE_INDEX))
    client.create_collection(name, schema=schema, index_params=index)
