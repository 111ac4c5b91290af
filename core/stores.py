"""Opens the stores once per process: SQL engine, chunk store (Milvus) and (lazily) the embedder."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from kbflow.core.announce import announced_endpoint
from kbflow.core.chunk_store import ChunkStore
from kbflow.core.embedder import (
    Embedder,
    EmbeddingCache,
    base_model_id,
    get_embedder,
    model_id_for,
    split_model_id,
)
from kbflow.core.milvus_store import MilvusChunkStore, is_lite_file, open_client
from kbflow.core.models import ModelChoice
from kbflow.core.settings import Settings
from kbflow.core.sql import ScopeRow, SqlStore


@dataclass
class Stores:
    settings: Settings
    sql: SqlStore
    chunks: ChunkStore
    _embedder: Embedder | None = field(default=None, repr=False)

    @property
    def embedder(self) -> Embedder:
        """The model the settings name for every scope (a scope may have its own: embedder_for)."""
        if self._embedder is None:
            s = self.settings
            self._embedder = self.embedder_for(ModelChoice(s.embedding_model, s.embedding_backend))
        return self._embedder

    def embedder_for(self, model: ModelChoice) -> Embedder:
        """One loaded model per process and choice, loaded on first use only."""
        s = self.settings
        return get_embedder(
            model.name, s.embedding_device, s.embedding_batch_size, model.backend, s.resolved_models_dir
        )

    @property
    def milvus(self) -> Any:
        """The raw Milvus client behind the chunk store (for the core and tests that inspect it)."""
        return self.chunks.client  # type: ignore[attr-defined]

    @property
    def embedding_cache(self) -> EmbeddingCache:
        return self.cache_for(self.embedder)

    def cache_for(self, embedder: Embedder) -> EmbeddingCache:
        return EmbeddingCache(self.sql, embedder, ingest_threads(self.settings))

    def close(self) -> None:
        self.sql.dispose()
        self.chunks.close()


_lock = threading.Lock()
_open: dict[tuple[str, str, str], Stores] = {}


def keep_home_backend(stores: Stores) -> Stores:
    """A backend that is not set explicitly is the one the home's scopes were built with: a new
    default never turns every existing scope's next reindex into a demand for --full."""
    s = stores.settings
    if "embedding_backend" in s.model_fields_set:
        return stores
    with stores.sql.session() as session:
        built = session.scalars(select(ScopeRow.model_id)).all()
    model = model_id_for(s.embedding_model)
    backends = {split_model_id(m)[1] for m in built if base_model_id(m) == model}
    if len(backends) != 1 or s.embedding_backend in backends:
        return stores
    return Stores(s.model_copy(update={"embedding_backend": backends.pop()}), stores.sql, stores.chunks)


def ingest_threads(settings: Settings) -> int:
    """Threads a reindex embeds with: the setting, else every core, or every core but one while
    a service answers lookups from this home (its queries then keep a core of their own)."""
    if settings.embedding_threads:
        return settings.embedding_threads
    cores = os.cpu_count() or 1
    return max(1, cores - 1) if announced_endpoint(settings.home) is not None else cores


def query_threads(settings: Settings) -> int:
    """A lookup embeds one short query: one thread is as fast and never fights a busy machine."""
    return settings.embedding_threads or 1


def with_announced_endpoint(settings: Settings) -> Settings:
    """An embedded Milvus Lite file is owned by one process: when `kbflow serve` owns it, reach
    it through the endpoint the server announced instead of opening the file."""
    if settings.milvus_uri or not settings.uses_milvus_lite:
        return settings
    found = announced_endpoint(settings.home)
    if found is None or not found.get("milvus_uri"):
        return settings
    return settings.model_copy(
        update={"milvus_uri": found["milvus_uri"], "milvus_token": found.get("milvus_token", "")}
    )


def open_stores(settings: Settings) -> Stores:
    """Shared per (milvus uri, database url): a Milvus Lite file may be opened once per process."""
    settings = with_announced_endpoint(settings)
    uri = settings.resolved_milvus_uri
    key = (uri, settings.milvus_database, settings.resolved_database_url)
    with _lock:
        stores = _open.get(key)
        if stores is None:
            if settings.uses_milvus_lite or not settings.database_url:
                settings.ensure_home()
            stores = Stores(
                settings=settings,
                sql=SqlStore(settings.resolved_database_url),
                chunks=MilvusChunkStore(open_client(uri, settings.milvus_token, settings.milvus_database),
                                        lite_db=uri if is_lite_file(uri) else None),
            )
            _open[key] = stores
        elif stores.settings is not settings:
            stores = Stores(settings, stores.sql, stores.chunks)  # embedders are cached by get_embedder
        return stores


def close_all() -> None:
    with _lock:
        for stores in _open.values():
            stores.close()
        _open.clear()


def is_transient(exc: BaseException) -> bool:
    """Errors worth a retry: lost connections, timeouts, a busy database — not bad input."""
    from pymilvus.exceptions import MilvusException, MilvusUnavailableException
    from sqlalchemy.exc import OperationalError

    if isinstance(exc, ConnectionError | TimeoutError | MilvusUnavailableException | OperationalError):
        return True
    if isinstance(exc, MilvusException):
        text = str(exc).lower()
        return any(w in text for w in ("unavailable", "deadline", "connection", "timeout", "timed out"))
    return False
