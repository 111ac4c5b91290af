"""Embedding backends: the ONNX export is cached once per user, the backend is part of the model
identity (fingerprint, scope, embedding cache), switching asks for --full, and a lookup on an
ONNX-built scope answers without importing torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from kbflow.core.embedder import get_embedder, model_id_for, split_model_id
from kbflow.core.onnx_backend import META_FILE
from kbflow.core.settings import Settings
from kbflow.core.sql import EmbeddingCacheRow, ScopeRow
from kbflow.core.stores import open_stores
from kbflow.ingest.reindex import pipeline_hash, reindex
from kbflow.retrieval import lookup_knowledge
from tests.conftest import REPO, write_doc

POOL = "# MySQL connection pool exhausted\n\n## Symptoms\n\nToo many connections; the pool is full.\n"
KAFKA = "# Kafka consumer lag\n\n## Symptoms\n\nThe consumer group lag keeps growing on the orders topic.\n"


def _corpus(tmp_path):
    docs = tmp_path / "docs"
    write_doc(docs, "pool.md", source="mysql-pool", scope="ops", body=POOL)
    write_doc(
        docs, "kafka.md", source="kafka-lag", scope="ops", breadcrumb="Message Queue > Kafka", body=KAFKA
    )
    return docs


def test_model_ids_name_the_backend_and_round_trip():
    assert model_id_for("", "torch") == "sentence-transformers/all-MiniLM-L6-v2"  # homes built before
    assert model_id_for("", "onnx-int8") == "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
    for model in ("", "/models/my-model"):
        for backend in ("torch", "onnx", "onnx-int8"):
            assert split_model_id(model_id_for(model, backend)) == (model, backend)
    torch_settings = Settings(home="h")
    assert pipeline_hash(torch_settings) != pipeline_hash(Settings(home="h", embedding_backend="onnx-int8"))


def test_a_gpu_device_means_torch_unless_an_onnx_backend_is_asked_for():
    assert Settings(home="h", embedding_device="cuda").embedding_backend == "torch"
    with pytest.raises(ValidationError, match="runs on the CPU"):
        Settings(home="h", embedding_device="cuda", embedding_backend="onnx")
    assert Settings(home="h").embedding_backend == "onnx"


def test_switching_backend_asks_for_full_and_never_mixes_the_cache(tmp_path):
    docs = _corpus(tmp_path)
    home = tmp_path / "home"
    assert reindex([docs], settings=Settings(home=home, embedding_backend="torch")).ok
    int8 = Settings(home=home, embedding_backend="onnx-int8", models_dir=tmp_path / "models")

    refused = reindex([docs], settings=int8)  # incremental: the scope's vectors are torch's
    assert not refused.ok
    assert any("--full" in f["reason"] and "onnx-int8" in f["reason"] for f in refused.failed)

    rebuilt = reindex([docs], full=True, settings=int8)
    assert rebuilt.ok and rebuilt.chunks_embedded > 0  # nothing taken from torch's cache rows
    assert list((tmp_path / "models").glob(f"*/onnx-int8/{META_FILE}")), "the export is cached"
    stores = open_stores(int8)
    with stores.sql.session() as s:
        assert s.get(ScopeRow, "ops").model_id.endswith("@onnx-int8")
        per_model = dict(
            s.execute(
                select(EmbeddingCacheRow.model_id, func.count()).group_by(EmbeddingCacheRow.model_id)
            ).all()
        )
    assert per_model == {
        model_id_for("", "torch"): rebuilt.chunks_embedded,
        model_id_for("", "onnx-int8"): rebuilt.chunks_embedded,
    }
    again = reindex([docs], full=True, settings=int8)
    assert again.ok and again.chunks_embedded == 0  # its own cache rows serve the rebuild

    # a lookup uses the scope's backend whatever this process is configured with
    for settings in (int8, Settings(home=home, embedding_backend="torch")):
        result = lookup_knowledge("kafka consumer group lag growing", kb_scope="ops", settings=settings)
        assert result.found and result.evidence[0].doc_id == "kafka-lag"


def test_a_home_keeps_its_backend_unless_one_is_set(tmp_path):
    """The default backend changed from torch to onnx: a home built before keeps reindexing
    incrementally with torch; an explicit setting still asks for --full."""
    docs = _corpus(tmp_path)
    home = tmp_path / "home"
    assert reindex([docs], settings=Settings(home=home, embedding_backend="torch")).ok
    write_doc(
        docs, "new.md", source="new-doc", scope="ops", body="# Disk full\n\n## Fix\n\nRotate the logs.\n"
    )
    default = reindex([docs], settings=Settings(home=home))
    assert default.ok and default.added == 1
    with open_stores(Settings(home=home)).sql.session() as s:
        assert s.get(ScopeRow, "ops").model_id == model_id_for("", "torch")
    explicit = reindex([docs], settings=Settings(home=home, embedding_backend="onnx"))
    assert not explicit.ok and any("--full" in f["reason"] for f in explicit.failed)
    fresh = reindex([docs], settings=Settings(home=tmp_path / "new-home"))
    assert fresh.ok
    with open_stores(Settings(home=tmp_path / "new-home")).sql.session() as s:
        assert s.get(ScopeRow, "ops").model_id == model_id_for("", "onnx")  # a new home: the default


def test_onnx_vectors_match_the_torch_model(tmp_path, capsys):
    texts = [POOL, KAFKA, "how do I rotate the TLS certificate on the gateway"]
    torch_vecs = get_embedder().encode(texts, 1)
    for backend, floor in (("onnx", 0.9999), ("onnx-int8", 0.98)):
        vecs = get_embedder("", "", 64, backend, tmp_path / "models").encode(texts, 1)
        # the one-off export says what it does, how long it usually takes, then how long it took
        said = capsys.readouterr().err
        assert f"exporting the embedding model for {backend}" in said and "(once; a few seconds)" in said
        assert re.search(r"kbflow: … done in \d+\.\d s", said), said
        assert vecs.shape == torch_vecs.shape
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
        assert (vecs * torch_vecs).sum(axis=1).min() >= floor, backend


def test_a_new_home_reuses_the_export_in_the_users_cache(tmp_path, monkeypatch):
    """By default exports live in the user's cache: the first home exports the model, a second
    home's first reindex uses that export; where the cache cannot be written, the home keeps its own."""
    docs = _corpus(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "KBFLOW_MODELS_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    kbflow = str(Path(sys.executable).with_name("kbflow"))
    said = []
    for home in ("first", "second"):
        env["KBFLOW_HOME"] = str(tmp_path / home)
        done = subprocess.run([kbflow, "reindex", str(docs)], cwd=REPO, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        said.append(done.stderr)
    assert "exporting the embedding model for onnx" in said[0]
    assert "exporting" not in said[1], said[1]
    assert list((tmp_path / "cache" / "kbflow" / "models").glob(f"*/onnx/{META_FILE}"))
    assert not (tmp_path / "second" / "models").exists()

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # no cache can be made under it
    assert Settings(home=tmp_path / "h", models_dir=None).resolved_models_dir == tmp_path / "h" / "models"


def test_a_lookup_on_an_onnx_scope_never_imports_torch(tmp_path):
    docs = _corpus(tmp_path)
    home = tmp_path / "home"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "KBFLOW_HOME": str(home),  # and the default backend
    }
    kbflow = str(Path(sys.executable).with_name("kbflow"))
    built = subprocess.run([kbflow, "reindex", str(docs)], cwd=REPO, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    code = (
        "import json, sys; from kbflow.retrieval import lookup_knowledge; "
        "r = lookup_knowledge('mysql too many connections', kb_scope='ops'); "
        "print(json.dumps({'doc': r.evidence[0].doc_id, 'torch': 'torch' in sys.modules, "
        "'timings': r.retrieval_trace.timings_ms}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["doc"] == "mysql-pool" and seen["torch"] is False
    assert "model_load" in seen["timings"]  # loading is its own stage, not embedding time
