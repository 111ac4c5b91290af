"""Turn a document's chunks into `ChunkRow`s that fit the store's schema, and write them so that
one document the store refuses fails alone.

Every field with a store limit is cut per document before the write (UTF-8 bytes, never inside
a character) and the cut is reported as a warning naming the field; a batch the store still
refuses is retried document by document, and only the documents refused again fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kbflow.core.analysis import LexicalConfig
from kbflow.core.chunk_store import FIELD_MAX_BYTES, TEXT_MAX_BYTES, WRITE_BATCH, ChunkRow, ChunkStore
from kbflow.core.embedder import EmbedStats
from kbflow.core.models import ModelChoice
from kbflow.core.settings import Settings
from kbflow.core.stores import Stores, is_transient
from kbflow.core.timing import stage
from kbflow.core.validation import doc_key
from kbflow.core.vocabulary import count_documents, document_terms
from kbflow.ingest.chunking import Chunk, chunk_markdown
from kbflow.ingest.l0_index import L0Entry, build_l0_entry
from kbflow.ingest.parsing import DocumentError, ParsedDocument
from kbflow.ingest.sources import load

Progress = Callable[[str, int, int], None]  # (stage, done, total)
Encoder = Callable[[list[str]], Any]  # texts -> normalized vectors (an alternative to the local model)


@dataclass
class Written:
    """What a streamed write leaves for the records, without any text: per written document its
    chunk count and L0 entry, and the documents the store (or a re-read) refused."""

    docs: list[ParsedDocument] = field(default_factory=list)  # bodies dropped
    n_chunks: dict[str, int] = field(default_factory=dict)
    l0: dict[str, L0Entry] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def chunks(self) -> int:
        return sum(self.n_chunks[d.doc_id] for d in self.docs)


BeforeWrite = Callable[[list[ParsedDocument], dict[str, int]], None]


def stream_write(
    stores: Stores,
    collection: str,
    docs: Sequence[ParsedDocument],
    lexical: LexicalConfig,
    stats: EmbedStats,
    warnings: list[dict[str, str]],
    *,
    model: ModelChoice | None = None,
    progress: Progress | None = None,
    encoder: Encoder | None = None,
    before_write: BeforeWrite | None = None,
) -> Written:
    """Read, chunk, embed and write the documents `reindex_batch_chars` of text at a time, so a
    run holds one batch of text and vectors, never the corpus. `before_write` runs before each
    batch reaches the store (the incremental run marks its records `writing` there)."""
    out, total, done = Written(), len(docs), 0
    for batch in _batches(docs, stores.settings, out.refused):
        chunks, vectors = embed_documents(stores, batch, stats, encoder, model)
        with stage("chunk"):
            rows = build_rows(batch, chunks, vectors, lexical, warnings)
        if before_write:
            with stage("sql_records"):
                before_write(batch, {d: len(c) for d, c in chunks.items()})
        with stage("store_insert"):
            refused = write_documents(stores.chunks, collection, rows)
        out.refused.update(refused)
        with stage("vocabulary"):
            count_written(stores, batch, rows, refused)
        with stage("l0_build"):
            for d in batch:
                if d.doc_id not in refused:
                    out.n_chunks[d.doc_id] = len(chunks[d.doc_id])
                    out.l0[d.doc_id] = build_l0_entry(d, chunks[d.doc_id])
                    out.docs.append(replace(d, body="", loaded=False))  # records need no text
        done += len(batch)
        if progress:
            progress("embed", done, total)
            progress("write", done, total)
    return out


def count_written(
    stores: Stores, batch: Sequence[ParsedDocument], rows: dict[str, list[ChunkRow]], refused: dict[str, str]
) -> None:
    """The scope's vocabulary counts the batch's written documents (their old version off, the
    new on), from the very fields the gate reads. A refused document keeps what was counted for
    the version the store still holds."""
    if not batch:
        return
    terms = {
        d.doc_id: document_terms((r.title, r.breadcrumb, r.text) for r in rows[d.doc_id])
        for d in batch
        if d.doc_id not in refused
    }
    with stores.sql.session() as session, session.begin():
        count_documents(session, batch[0].kb_scope, terms)


def _batches(
    docs: Sequence[ParsedDocument], settings: Settings, refused: dict[str, str]
) -> Iterator[list[ParsedDocument]]:
    """Documents with their bodies, a batch of about `reindex_batch_chars` at a time. A file
    that cannot be read again, or changed since the scan, is refused alone."""
    batch: list[ParsedDocument] = []
    size = 0
    for doc in docs:
        try:
            with stage("read"):
                loaded = load(doc, settings.max_file_bytes)
        except DocumentError as exc:
            refused[doc.doc_id] = exc.reason
            continue
        except OSError as exc:
            refused[doc.doc_id] = f"cannot read file: {exc.strerror or exc}"
            continue
        batch.append(loaded)
        size += len(loaded.body)
        if size >= settings.reindex_batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def embed_documents(
    stores: Stores,
    docs: Sequence[ParsedDocument],
    stats: EmbedStats,
    encoder: Encoder | None = None,
    model: ModelChoice | None = None,
) -> tuple[dict[str, list[Chunk]], dict[str, Any]]:
    """Chunk every document and embed its chunks (through the cache) with the scope's `model`
    (default: the settings' one): (chunks, vectors) by doc_id. The model loads only when some
    chunk is not in the cache under its id."""
    s = stores.settings
    with stage("chunk"):
        chunks = {d.doc_id: chunk_markdown(d.body, s.chunk_max_chars, s.chunk_overlap_chars) for d in docs}
    texts = [c.text for d in docs for c in chunks[d.doc_id]]
    with stage("embed"):
        vectors = embed_texts(stores, texts, stats, None, encoder, model) if texts else []
    by_doc, i = {}, 0
    for d in docs:
        n = len(chunks[d.doc_id])
        by_doc[d.doc_id] = vectors[i : i + n]
        i += n
    return chunks, by_doc


def embed_texts(
    stores: Stores,
    texts: list[str],
    stats: EmbedStats,
    on_batch: Callable[[int], None] | None = None,
    encoder: Encoder | None = None,
    model: ModelChoice | None = None,
) -> Any:
    embedder = stores.embedder_for(model) if model is not None else stores.embedder
    return stores.cache_for(embedder).embed(texts, stats, on_batch, encoder)


def build_rows(
    docs: Sequence[ParsedDocument],
    chunks: dict[str, list[Chunk]],
    vectors: dict[str, Any],
    lexical: LexicalConfig,
    warnings: list[dict[str, str]],
) -> dict[str, list[ChunkRow]]:
    """Every document's rows by doc_id; a field cut to fit is added to `warnings` with its path."""
    by_doc = {}
    for d in docs:
        by_doc[d.doc_id], cuts = chunk_rows(d, chunks[d.doc_id], vectors[d.doc_id], lexical)
        warnings.extend({"path": str(d.path), "reason": w} for w in cuts)
    return by_doc


def fit_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")


def _fit(value: str, name: str, cuts: dict[str, int]) -> str:
    limit = FIELD_MAX_BYTES[name]
    size = len(value.encode("utf-8"))
    if size > limit:
        cuts[name] = max(cuts.get(name, 0), size)
        return fit_bytes(value, limit)
    return value


def chunk_rows(
    doc: ParsedDocument, chunks: Sequence[Chunk], vectors: Any, lexical: LexicalConfig
) -> tuple[list[ChunkRow], list[str]]:
    """The document's rows and a warning per field that had to be cut to the store's limit."""
    cuts: dict[str, int] = {}
    key = doc_key(doc.doc_id)
    common = {
        "doc_id": key,
        "source": _fit(doc.doc_id, "source", cuts),
        "source_path": _fit(doc.rel_path, "_source", cuts),
        "kb_scope": doc.kb_scope,
        "category": _fit(doc.category, "category", cuts),
        "breadcrumb": _fit(doc.breadcrumb_text, "breadcrumb", cuts),
        "title": _fit(doc.title, "title", cuts),
    }
    rows = [
        ChunkRow(
            **common,
            id=f"{key}#{c.index}",
            heading_path=_fit(c.heading_text, "heading_path", cuts),
            chunk_index=c.index,
            text=_fit(c.text, "text", cuts),
            lexical=fit_bytes(lexical.index_text(doc.title, doc.breadcrumb_text, c.text), TEXT_MAX_BYTES),
            dense=[float(x) for x in v],
        )
        for c, v in zip(chunks, vectors, strict=True)
    ]
    warnings = [
        f"{name} is {size} bytes, over the store's {FIELD_MAX_BYTES[name]}: cut to fit"
        for name, size in sorted(cuts.items())
    ]
    return rows, warnings


def relex(rows: list[ChunkRow], lexical: LexicalConfig) -> list[ChunkRow]:
    """Rows copied from another collection get their lexical text under this build's analysis."""
    for row in rows:
        row.lexical = fit_bytes(lexical.index_text(row.title, row.breadcrumb, row.text), TEXT_MAX_BYTES)
    return rows


def write_documents(
    store: ChunkStore,
    collection: str,
    rows_by_doc: dict[str, list[ChunkRow]],
) -> dict[str, str]:
    """Upsert every document's rows in batches; returns {doc_id: reason} for the documents the
    store refused even on their own. A transient error (connection, timeout) is raised, so the
    caller's retry converges."""
    refused: dict[str, str] = {}
    batch: list[str] = []
    size = 0

    def flush() -> None:
        if batch:
            refused.update(_upsert_batch(store, collection, {d: rows_by_doc[d] for d in batch}))
            batch.clear()

    for doc_id, rows in rows_by_doc.items():
        if size + len(rows) > WRITE_BATCH:
            flush()
            size = 0
        batch.append(doc_id)
        size += len(rows)
    flush()
    return refused


def _upsert_batch(store: ChunkStore, collection: str, docs: dict[str, list[ChunkRow]]) -> dict[str, str]:
    try:
        store.upsert(collection, [r for rows in docs.values() for r in rows])
        return {}
    except Exception as exc:
        if is_transient(exc):
            raise
        if len(docs) == 1:
            return {next(iter(docs)): _reason(exc)}
    refused: dict[str, str] = {}
    for doc_id, rows in docs.items():
        try:
            store.upsert(collection, rows)
        except Exception as exc:
            if is_transient(exc):
                raise
            refused[doc_id] = _reason(exc)
    return refused


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"the store refused this document: {text[:300]}"
