"""Opens the stores once per process: SQL engine, Milvus client and (lazily) the embedder."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pymilvus import MilvusClient

from kbcore.embedder import Embedder, EmbeddingCache, get_embedder
from kbcore.milvus_store import open_client
from kbcore.settings import Settings
from kbcore.sql import SqlStore


@dataclass
class Stores:
    settings: Settings
    sql: SqlStore
    milvus: MilvusClient
    _embedder: Embedder | None = field(default=None, repr=False)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            s = self.settings
            self._embedder = get_embedder(s.embedding_model, s.embedding_device, s.embedding_batch_size)
        return self._embedder

    @property
    def embedding_cache(self) -> EmbeddingCache:
        return EmbeddingCache(self.sql, self.embedder)

    def close(self) -> None:
        self.sql.dispose()
        self.milvus.close()


_lock = threading.Lock()
_open: dict[tuple[str, str], Stores] = {}


def open_stores(settings: Settings) -> Stores:
    """Shared per (milvus uri, database url): a Milvus Lite file may be opened once per process."""
    key = (settings.resolved_milvus_uri, settings.resolved_database_url)
    with _lock:
        stores = _open.get(key)
        if stores is None:
            if settings.uses_milvus_lite or not settings.database_url:
                settings.ensure_home()
            stores = Stores(
                settings=settings,
                sql=SqlStore(settings.resolved_database_url),
                milvus=open_client(settings.resolved_milvus_uri, settings.milvus_token),
            )
            _open[key] = stores
        elif stores.settings is not settings:
            stores = Stores(settings, stores.sql, stores.milvus)  # embedders are cached by get_embedder
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
