"""The benchmarks call the write side's own functions: keep them runnable as those change."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import REPO, write_doc


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ingest_bench_chunks_a_corpus_like_reindex(tmp_path: Path, settings):
    bench = _load("ingest")
    write_doc(tmp_path, "a.md", source="a", body="# A\n\n## One\n\nFirst section.\n\n## Two\n\nSecond.\n")
    texts, docs = bench.parsed_corpus(tmp_path, settings)
    assert len(texts) == 2 and "First section." in texts[0] and [d.doc_id for d in docs] == ["a"]
