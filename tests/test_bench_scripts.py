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


def test_answerability_bench_scores_every_fit_on_the_real_questions(capsys):
    """bench/answerability.py's tables, on toy labelled sets (its lookups are the real ones)."""
    from kbflow.calibration.calibrate import LabelledQuery
    from kbflow.core.embedder import DEFAULT_MODEL_ID
    from tests.test_calibration import labelled

    bench = _load("answerability")
    real = [LabelledQuery(q.qid, q.dataset, q.kind, q.hits, DEFAULT_MODEL_ID) for q in labelled(1)]
    synth = labelled(2)
    leave = [q for q in labelled(3) if q.kind != "answerable"]
    rows, forecast = bench.measure("toy", real, synth, leave, pool=20)
    assert [label for label, _ in rows][:2] == ["packaged", "self"]
    assert all(set(r) == {"false no-ev", "near refused", "off refused"} for _, r in rows)
    assert set(forecast) == {"packaged", "self", "floor"}
    floor = forecast["floor"]  # where the floor the real questions call for sits among the pairs
    assert 0 <= floor["pseudo-queries below it"] <= 1 and 0 <= floor["their leave-out twins below it"] <= 1
    features = bench.feature_table(real, synth, leave, pool=20)
    assert len(features) == 2 * len(bench.FEATURE_SETS)
    assert "| cosine + coverage | self |" in capsys.readouterr().out


def test_scale_bench_generator_is_deterministic(tmp_path: Path):
    """bench/scale.py's corpus: the same seed writes the same bytes, another seed other ones."""
    bench = _load("scale")
    words = [f"w{i}" for i in range(200)]

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.md"))}

    a = files(bench.write_corpus(tmp_path / "a", 12, seed=5, words=words))
    b = files(bench.write_corpus(tmp_path / "b", 12, seed=5, words=words))
    c = files(bench.write_corpus(tmp_path / "c", 12, seed=6, words=words))
    assert len(a) == 12 and a == b and a != c
    assert all(text.startswith(b"---\nsource: doc-") and b"\n## " in text for text in a.values())
