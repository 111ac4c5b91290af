"""BEIR evaluation: ranx metrics agree with trec_eval, run files keep the dataset's own ids,
negatives are reported by kind, and a broken document makes `kbflow eval --beir` exit 1."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytrec_eval

from kbflow.core.settings import Settings
from kbflow.evaluation import beir, ir
from kbflow.evaluation.beir import load_negatives, run_beir, safe_id
from kbflow.flows.cli import main

DOCS = [
    (
        "doc/1.a",
        "Connection pool exhausted",
        "HikariCP pool exhausted: requests time out waiting for a connection.",
    ),
    ("doc/2.b", "Kafka consumer lag", "Consumer group lag grows when consumers process records too slowly."),
    (
        "doc/3.c",
        "TLS certificate expired",
        "Clients fail with x509 certificate has expired errors after renewal.",
    ),
    (
        "doc/4.d",
        "Disk full on database host",
        "Postgres stops accepting writes when the data volume is full.",
    ),
    (
        "doc/5.e",
        "Redis eviction storm",
        "Redis evicts keys under maxmemory pressure and the cache hit rate drops.",
    ),
    ("doc/6.f", "DNS resolution failures", "Pods cannot resolve service names when CoreDNS is overloaded."),
    (
        "doc/7.g",
        "Out of memory kills",
        "The kernel OOM killer terminates the JVM when the heap exceeds the limit.",
    ),
    ("doc/8.h", "Slow SQL queries", "A missing index makes the orders query scan the whole table."),
    ("plain9", "Nginx 502 bad gateway", "Nginx returns 502 when the upstream application server is down."),
    ("doc:10", "Clock skew", "Token validation fails when server clocks drift apart by minutes."),
]
QUERIES = {
    "q1": "kafka consumer group lag growing",
    "q2": "x509 certificate has expired",
    "q3": "database connection pool exhausted timeouts",
    "q4": "orders query slow full table scan missing index",
    "q5": "nginx 502 upstream down",
}
QRELS = {
    "q1": {"doc/2.b": 1},
    "q2": {"doc/3.c": 1},
    "q3": {"doc/1.a": 2},
    "q4": {"doc/8.h": 1},
    "q5": {"plain9": 1},
}
NEGATIVES = [
    {"_id": "n1", "text": "kafka broker rack awareness replica placement", "kind": "near"},
    {"_id": "n2", "text": "best sourdough bread recipe with rye flour"},
]
METRICS = {
    "ndcg@10": "ndcg_cut_10",
    "mrr@10": "recip_rank",
    "recall@10": "recall_10",
    "recall@100": "recall_100",
    "precision@5": "P_5",
}


def _write_beir(root: Path, docs: list[tuple[str, str, str]], qrels: dict[str, dict[str, int]]) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs)
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items())
    )
    rows = "".join(f"{q}\t{d}\t{g}\n" for q, r in qrels.items() for d, g in r.items())
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return root


def _trec_eval(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """pytrec_eval's means over every judged query; it skips queries without a result, so they are
    added back as 0. MRR@10 is recip_rank over the top 10."""
    run = {q: r for q, r in run.items() if r and q in qrels}
    top10 = {q: dict(sorted(r.items(), key=lambda x: -x[1])[:10]) for q, r in run.items()}
    measures = {"ndcg_cut.10", "recall.10", "recall.100", "P.5"}
    scored = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    out = {}
    for name, measure in METRICS.items():
        source = rr if measure == "recip_rank" else scored
        out[name] = round(sum(source.get(q, {}).get(measure, 0.0) for q in qrels) / len(qrels), 4)
    return out


def _read_trec(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, q0, doc, rank, score, tag = line.split()
        assert q0 == "Q0" and int(rank) >= 1 and tag
        run.setdefault(qid, {})[doc] = float(score)
    return run


def test_ranx_metrics_match_trec_eval_and_empty_runs_count_zero():
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(150)]
    qrels = {f"q{i}": {d: rng.choice([1, 2]) for d in rng.sample(docs, rng.randint(1, 6))} for i in range(25)}
    ranked = {q: rng.sample(docs, rng.randint(1, 120)) for q in qrels}
    ranked["q0"] = []  # no candidate: must score 0, not vanish from the mean
    del ranked["q1"]  # missing altogether: the same
    ranked["unjudged"] = ["d1"]
    expected = _trec_eval(
        qrels, {q: {d: float(len(v) - i) for i, d in enumerate(v)} for q, v in ranked.items()}
    )
    assert ir.candidate_metrics(qrels, ranked) == pytest.approx(expected, abs=1e-4)
    assert ir.candidate_metrics({"a": {"x": 1}, "b": {"y": 1}}, {"a": ["x"], "b": []})["mrr@10"] == 0.5


def test_beir_report_run_files_and_negatives(tmp_path):
    data = _write_beir(tmp_path / "beir", DOCS, QRELS)
    neg_file = tmp_path / "neg.jsonl"
    neg_file.write_text("".join(json.dumps(n) + "\n" for n in NEGATIVES))
    negatives = load_negatives(neg_file)
    assert negatives["n2"] == (NEGATIVES[1]["text"], "off")
    settings = Settings(home=tmp_path / "h")
    report = run_beir(
        data, "beir-tiny", settings, ["hybrid", "dense"], depth=50, negatives=negatives, compare=True
    )
    assert report["ok"] and report["failed_documents"] == [] and report["indexed"] == len(DOCS)
    assert report["queries"] == len(QRELS) and report["depth"] == 50 and report["k"] == settings.return_n
    assert report["negatives"] == {"near": 1, "off": 1}
    assert report["settings"]["return_n"] == settings.return_n
    for mode in ("hybrid", "dense"):
        section = report["modes"][mode]
        path = Path(section["run_file"])
        assert path == settings.home / "runs" / f"beir-tiny.{mode}.trec" and path.is_file()
        run = _read_trec(path)
        ids = {d for r in run.values() for d in r}
        assert "doc/2.b" in ids and safe_id("doc/2.b") not in ids  # original ids, not kbflow's
        assert set(run) <= set(QRELS)  # the run file holds the judged queries
        assert section["candidates"] == pytest.approx(_trec_eval(QRELS, run), abs=1e-4)
        assert set(section["delivered"]) == {"ndcg@k", "mrr", "recall@k", "hit@k"}
        kinds = section["no_evidence"]["negatives"]
        assert kinds["near"]["queries"] == 1 and kinds["off"]["queries"] == 1
        assert set(section["no_evidence"]["true_no_evidence_rate"]) == {"near", "off"}
        assert "fallback_fired" in section["fallback"] and "l0_false_kill_rate" in section
    comparison = report["comparison"]
    assert comparison["runs"] == ["beir-tiny.hybrid", "beir-tiny.dense"]
    assert set(comparison["p_values"]["beir-tiny.hybrid vs beir-tiny.dense"]) == set(METRICS)


def test_cli_exits_1_on_a_broken_document_and_2_on_bad_input(tmp_path, capsys):
    broken = [*DOCS[:4], ("doc/empty.z", "", ""), *DOCS[7:]]  # no title, no text: empty body
    qrels = {q: r for q, r in QRELS.items() if q != "q1" and q != "q2"}
    data = _write_beir(tmp_path / "broken", broken, qrels)
    report_file = tmp_path / "report.json"
    home = str(tmp_path / "h")
    argv = ["eval", "--beir", str(data), "--scope", "broken", "--home", home, "--mode", "hybrid"]
    assert main([*argv, "--depth", "20", "--json-report", str(report_file)]) == 1
    out = capsys.readouterr().out
    assert "FAILED document doc/empty.z" in out and "nDCG@10" in out
    report = json.loads(report_file.read_text())
    assert [f["doc_id"] for f in report["failed_documents"]] == ["doc/empty.z"] and not report["ok"]
    assert main([*argv, "--negatives", str(tmp_path / "missing.jsonl")]) == 2
    assert main([*argv, "--compare-runs", str(tmp_path / "missing.trec")]) == 2


def _lookup(selected: str, candidates: dict[str, list[str]], fallback: bool, evidence: list[bool]) -> object:
    """A stand-in LookupResult: candidates per attempt as doc ids, evidence as weak flags (the
    level is the first piece's)."""
    hit = lambda d: SimpleNamespace(doc_id=d)  # noqa: E731
    return SimpleNamespace(
        found=bool(evidence),
        relevance_level=None if not evidence or evidence[0] else "REFERENCE",
        evidence=[SimpleNamespace(doc_id="x", weak=w) for w in evidence],
        candidates={name: [hit(d) for d in docs] for name, docs in candidates.items()},
        retrieval_trace=SimpleNamespace(
            attempts=[SimpleNamespace(attempt=name) for name in candidates],
            selected_attempt=selected,
            fallback_reason="filtered_vector_low_quality" if fallback else None,
        ),
    )


def test_fallback_l0_and_honesty_rates():
    f, r = "FILTERED_VECTOR", "UNFILTERED_VECTOR_RETRY"
    qrels = {"a": {"A": 1}, "b": {"B": 1}, "c": {"C": 1}, "d": {"D": 1}}
    results = {
        "a": _lookup(r, {f: ["x", "y"], r: ["A", "x"]}, True, [False]),  # needed and it helped
        "b": _lookup(r, {f: ["B"], r: ["B"]}, True, [True]),  # not needed; weak only
        "c": _lookup(f, {f: ["C"]}, False, []),  # no evidence though C was a candidate
        "d": _lookup("UNFILTERED_VECTOR", {"UNFILTERED_VECTOR": ["x"]}, False, []),
    }
    mapping = {"A": "A"}
    assert beir._fallback(qrels, results, mapping, k=1) == {
        "fallback_fired": 2,
        "fallback_precision": 0.5,
        "fallback_effectiveness": 0.5,
    }
    assert beir._l0(qrels, results, mapping) == {
        "l0_false_kill_rate": round(1 / 3, 4),
        "l0_filtered_lookups": 3,
    }
    honesty = beir._honesty(qrels, results, mapping)
    assert honesty["false_no_evidence_rate"] == 0.5
    assert honesty["false_no_evidence_with_relevant_candidate"] == 0.5
    assert honesty["weak_only_rate"] == 0.25
