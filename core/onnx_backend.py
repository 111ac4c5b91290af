"""ONNX Runtime backends for a sentence-transformers model: `onnx` (fp32) and `onnx-int8`.

The ONNX graph is exported once, offline, from the configured model's own weights and cached
under the home (`<home>/models/<model>/<backend>/`) with its tokenizer and pooling settings.
After that a process loads only onnxruntime and the tokenizer: no torch import, which is most of
a cold `kbflow lookup`. int8 is dynamic quantisation of the MatMul weights, per channel: per-tensor
scales cost several points of cosine on MiniLM (measured 0.94 mean against 0.995).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kbflow.core.errors import InputError

BACKENDS = ("torch", "onnx", "onnx-int8")
EXPORT_VERSION = "2"  # bump when the export recipe changes: old exports are then redone
META_FILE = "kbflow-onnx.json"
SUB_BATCH = 16  # measured: smaller batches pad less; 16 beat 64 on 400-char chunks (60 vs 48/s)


class BackendUnavailable(InputError, RuntimeError):
    """The model cannot run on the requested backend (says which and why)."""


def installed_files(path: Path) -> str:
    """The installed model's identity: each file's name, size and mtime. The export cache is
    shared by every home of a user, so a model replaced in place must not find the old export."""
    if not path.exists():
        return ""
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    stats = [(f, f.stat()) for f in files]
    return ";".join(f"{f.relative_to(path.parent)}:{st.st_size}:{st.st_mtime_ns}" for f, st in stats)


def export_dir(cache_root: Path, model_path: str, backend: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model_path).name or "model")[:60]
    identity = f"{model_path}|{EXPORT_VERSION}|{installed_files(Path(model_path))}"
    return cache_root / f"{slug}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}" / backend


def _pooling(st) -> tuple[str, bool]:
    """(pooling mode, normalize) of a Transformer → Pooling [→ Normalize] model; anything else
    (a Dense layer, a custom module) would be silently dropped by the export, so it is refused."""
    names = [type(m).__name__ for m in st]
    if names[:2] != ["Transformer", "Pooling"] or any(n != "Normalize" for n in names[2:]):
        raise BackendUnavailable(
            f"the ONNX backends support Transformer → Pooling [→ Normalize] models; this one is "
            f"{' → '.join(names)}: use embedding_backend=torch"
        )
    pool = st[1]
    mode = pool.get_pooling_mode_str() if hasattr(pool, "get_pooling_mode_str") else "mean"
    if mode not in ("mean", "cls"):
        raise BackendUnavailable(f"pooling '{mode}' is not supported by the ONNX backends: use torch")
    return mode, "Normalize" in names


def sentence_dim(st) -> int:
    """A SentenceTransformer's output size (the method was renamed in sentence-transformers 5)."""
    get = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
    return int(get())


def _eager_copy(st):
    """The model's transformer reloaded with eager attention: it exports as plain MatMul/Softmax
    that onnxruntime fuses, where the SDPA path exports a Where/IsNaN mask that took a third of
    the run time."""
    from transformers import AutoModel

    transformer = st[0]
    source = getattr(transformer, "auto_model", None) or transformer.model
    with tempfile.TemporaryDirectory() as weights:
        source.save_pretrained(weights)
        return AutoModel.from_pretrained(weights, attn_implementation="eager").eval()


def _write_graph(model, names: list[str], path: Path) -> None:
    """The transformer's last hidden state as an ONNX graph with dynamic batch and length."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state

    dummy = tuple(torch.ones(2, 8, dtype=torch.long) for _ in names)
    with torch.no_grad():
        torch.onnx.export(
            Hidden(model),
            dummy,
            str(path),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )


def quantize(path: Path) -> None:
    """Dynamic int8 of the MatMul weights, per channel, in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = path.with_suffix(".int8.onnx")
    quantize_dynamic(
        str(path), str(out), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"]
    )
    os.replace(out, path)


def export(model_path: str, target: Path, backend: str) -> None:
    """Export `model_path` for `backend` into `target` (atomically: a reader never sees half)."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model_path, device="cpu")
    mode, normalize = _pooling(st)
    takes_types = "token_type_ids" in st.tokenizer.model_input_names
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".export-"))
    try:
        _write_graph(_eager_copy(st), names, tmp / "model.onnx")
        if backend == "onnx-int8":
            quantize(tmp / "model.onnx")
        st.tokenizer.save_pretrained(str(tmp))
        meta = {
            "source": model_path,
            "backend": backend,
            "export_version": EXPORT_VERSION,
            "pooling": mode,
            "normalize": normalize,
            "max_seq_length": int(st.max_seq_length),
            "dim": sentence_dim(st),
            "inputs": names,
            "pad_id": int(st.tokenizer.pad_token_id or 0),
            "pad_token": str(st.tokenizer.pad_token or "[PAD]"),
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        tmp.chmod(0o755)  # mkdtemp makes it private; the export is read by other users' workers too
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished the same export first: use theirs
            if not (target / META_FILE).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_export(cache_root: Path, model_path: str, backend: str) -> Path:
    target = export_dir(cache_root, model_path, backend)
    if not (target / META_FILE).exists():
        from kbflow.core.timing import announced

        root, level = logging.getLogger(), logging.getLogger().level
        what = f"exporting the embedding model for {backend} into {target}"
        try:
            # the tracer's and the quantizer's notes on shapes are not the user's concern
            with announced(what, "a few seconds"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                root.setLevel(max(level, logging.ERROR))
                export(model_path, target, backend)
        except ImportError as exc:
            raise BackendUnavailable(
                f"embedding_backend={backend} needs {exc.name}: pip install onnxruntime onnx"
            ) from exc
        finally:
            root.setLevel(level)
    return target


class SessionCache:
    """One onnxruntime session per thread count for a graph file, made on first use (a reindex
    and the lookups beside it ask for different counts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()

    def __call__(self, threads: int):
        with self._lock:
            if threads not in self._sessions:
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                opts.log_severity_level = 3
                self._sessions[threads] = ort.InferenceSession(
                    str(self.path), opts, providers=["CPUExecutionProvider"]
                )
            return self._sessions[threads]


class OnnxEncoder:
    """Tokenizer + onnxruntime session + pooling, numerically the model's own forward pass.
    One session per thread count: a lookup runs in one thread, a reindex in more."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.directory = directory
        self.meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        self.dim = int(self.meta["dim"])
        tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tok.enable_truncation(self.meta["max_seq_length"])
        tok.enable_padding(pad_id=self.meta.get("pad_id", 0), pad_token=self.meta.get("pad_token", "[PAD]"))
        self._tokenizer = tok
        self.session = SessionCache(directory / "model.onnx")

    def _batch(self, session, texts: list[str]) -> np.ndarray:
        enc = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.meta["inputs"]:
            feeds["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
        hidden = session.run(None, feeds)[0]
        if self.meta["pooling"] == "cls":
            vecs = hidden[:, 0]
        else:
            m = mask[..., None].astype(np.float32)
            vecs = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        # normalized whatever the model's own last module: the embedder's contract (cosine = dot)
        return (vecs / np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)).astype(np.float32)

    def encode(self, texts: Sequence[str], threads: int) -> np.ndarray:
        session = self.session(threads)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths pad less
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i in range(0, len(order), SUB_BATCH):
            idx = order[i : i + SUB_BATCH]
            out[idx] = self._batch(session, [texts[j] for j in idx])
        return out
