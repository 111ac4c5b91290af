"""The shipped corpus and the README's main job (`kbflow reindex seed-docs`) via the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kbflow.ingest.sources import scan_roots
from tests.conftest import REPO

SEED = REPO / "seed-docs"


def test_corpus_shape():
    scan = scan_roots([SEED], default_scope="default", max_file_bytes=1_000_000)
    assert scan.failures == [] and scan.warnings == []
    english = [d for d in scan.documents if d.kb_scope == "rag-eval"]
    chinese = [d for d in scan.documents if d.kb_scope == "rag-eval-zh"]
    assert len(english) >= 12 and len({d.category for d in english}) >= 4
    assert len(chinese) >= 2 and all(d.language == "zh" for d in chinese)
    decoy = next(d for d in english if d.doc_id == "chat-gateway-release-notes")
    assert {"chat", "consumer lag"} <= {k.lower() for k in decoy.keywords}
    body = decoy.body.lower()
    assert "kafka" not in body and "consumer" not in body  # matches L0 terms, weak as evidence


def kbflow(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    exe = Path(sys.executable).with_name("kbflow")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)


def test_main_job_indexes_seed_docs_then_reruns_free(tmp_path):
    home = tmp_path / "home"
    first = kbflow("reindex", "seed-docs", "--json", home=home)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["added"] >= 15 and summary["failed"] == []
    again = json.loads(kbflow("reindex", "seed-docs", "--json", home=home).stdout)
    assert again["unchanged"] == summary["added"] and again["chunks_embedded"] == 0
    status = json.loads(kbflow("status", "--json", home=home).stdout)
    by_scope = {s["kb_scope"]: s for s in status["scopes"]}
    assert by_scope["rag-eval"]["analyzer"] == "standard" and by_scope["rag-eval-zh"]["analyzer"] == "jieba"
    assert by_scope["rag-eval"]["chunks"] == by_scope["rag-eval"]["chunks_recorded"] > 0
    assert by_scope["rag-eval"]["alias_target"].startswith(by_scope["rag-eval"]["collection"] + "__")
    text = kbflow("status", home=home).stdout
    assert "scope rag-eval:" in text and "jieba" in text
