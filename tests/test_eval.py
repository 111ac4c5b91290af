"""The eval closure: it passes on today's pipeline, it can fail, it says why, its numbers are
standard."""

from __future__ import annotations

import json

import pytest
import pytrec_eval

from kbflow.core.settings import Settings
from kbflow.evaluation.beir import run_beir, safe_id
from kbflow.evaluation.cases import CaseFileError, load_cases
from kbflow.evaluation.metrics import aggregate, fallback_precision_recall, per_query
from kbflow.evaluation.report import BaselineError, check_report, diff_reports
from kbflow.evaluation.runner import EVAL_ROOT, run_eval
from kbflow.flows.cli import main

BASELINE = EVAL_ROOT / "reports" / "baseline.json"
CASES = EVAL_ROOT / "cases" / "golden-cases.json"


# --- cases file ---------------------------------------------------------------------------------


def test_golden_cases_cover_the_behaviours():
    cases = load_cases(CASES)
    ids = {c.id for c in cases}
    assert len(cases) >= 15 and "chat-l0-filter-fallback" in ids
    assert any(c.expected_evidence_status == "NO_EVIDENCE" and not c.expected_doc_ids for c in cases)
    assert any(c.kb_scope == "rag-eval-zh" for c in cases)
    assert any(c.expected_selected_attempt == "UNFILTERED_VECTOR" for c in cases)
    assert any(c.max_evidence_per_document for c in cases) and any(c.context_char_budget for c in cases)


def test_malformed_cases_name_the_case_and_field(tmp_path):
    bad = tmp_path / "cases.json"
    raw = json.loads(CASES.read_text())
    raw["cases"][2]["expectedEvidenceStatus"] = "MAYBE"
    bad.write_text(json.dumps(raw))
    with pytest.raises(
        CaseFileError, match=r"case 'postgres-multichunk-capped': field 'expectedEvidenceStatus'"
    ):
        load_cases(bad)
    raw["cases"][2]["expectedEvidenceStatus"] = "FOUND"
    raw["cases"][3]["kbScope"] = 'x" or 1'
    bad.write_text(json.dumps(raw))
    with pytest.raises(CaseFileError, match="case 'redis-eviction': field 'kbScope'"):
        load_cases(bad)
    bad.write_text('{"cases": []}')
    with pytest.raises(CaseFileError, match="schema"):
        load_cases(bad)


def test_malformed_fixture_names_case_and_field(tmp_path):
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    for f in (EVAL_ROOT / "fixtures").glob("*.json"):
        fixtures.joinpath(f.name).write_text(f.read_text())
    doc = json.loads((fixtures / "nginx-502.json").read_text())
    del doc["results"]["hybrid"]["retrievalTrace"]
    (fixtures / "nginx-502.json").write_text(json.dumps(doc))
    with pytest.raises(CaseFileError, match=r"case 'nginx-502'.*field 'results.hybrid.retrievalTrace'"):
        run_eval(source="offline", modes=["hybrid"], settings=Settings(), fixtures_dir=fixtures)


# --- metrics against trec_eval ------------------------------------------------------------------


def test_metrics_match_trec_eval_on_hand_made_runs():
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
    ranked = {"q1": ["x", "a", "b"], "q2": ["c"], "q3": []}  # q3 found nothing
    ours = per_query(qrels, ranked, 3)
    assert ours["q1"]["mrr"] == pytest.approx(0.5) and ours["q1"]["recall@k"] == 1.0
    assert ours["q2"] == {"recall@k": 1.0, "hit@k": 1.0, "mrr": 1.0, "ndcg@k": 1.0}
    assert ours["q3"] == {"recall@k": 0.0, "hit@k": 0.0, "mrr": 0.0, "ndcg@k": 0.0}
    # nDCG@3 of q1 by hand: DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    import math

    assert ours["q1"]["ndcg@k"] == pytest.approx((1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3)))
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3"}).evaluate(
        {"q1": {"x": 3.0, "a": 2.0, "b": 1.0}, "q2": {"c": 1.0}}
    )
    assert ours["q1"]["ndcg@k"] == pytest.approx(direct["q1"]["ndcg_cut_3"])
    agg = aggregate(qrels, ranked, {"q1": 3, "q2": 3, "q3": 3})
    assert agg["mrr"] == pytest.approx(round((0.5 + 1 + 0) / 3, 4))
    assert fallback_precision_recall(
        {"a": True, "b": False, "c": True}, {"a": True, "b": True, "c": False}
    ) == {"fallback_precision": 0.5, "fallback_recall": 0.5, "fallback_labelled_cases": 3}


# --- offline, live, gate --------------------------------------------------------------------------


def test_offline_eval_passes_without_stores(tmp_path, monkeypatch):
    import kbflow.core.stores
    from kbflow.evaluation.report import report_markdown
    from kbflow.flows.cli.views import eval_lines

    def no_stores(*_a, **_k):
        raise AssertionError("offline mode must not open Milvus or SQL")

    monkeypatch.setattr(kbflow.core.stores, "open_stores", no_stores)
    outcome = run_eval(
        source="offline", modes=["hybrid", "dense"], settings=Settings(home=tmp_path), compare_to=BASELINE
    )
    assert outcome.ok, (outcome.failed, outcome.diff["regressions"])
    assert set(outcome.report["modes"]) == {"hybrid", "dense"}
    # a case that must not pass by the pipeline's contract fails, and every report says why
    assert "hybrid:a2-decoy-mysql-migration-gunicorn" in outcome.failed
    why = "  why it must not pass: The fallback contract retries a filtered attempt only when it is weak"
    assert any(line.startswith(why) for line in eval_lines(outcome, show_known=True))
    markdown = report_markdown(outcome.report, "c.png")
    assert "*known limit, why it must not pass:* The fallback contract" in markdown


def test_offline_eval_ends_with_a_verdict_and_lists_known_failures_on_request(tmp_path, capsys):
    assert main(["eval", "--offline", "--compare-to", str(BASELINE)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert not any(line.startswith("known failure") for line in out)  # counted, not listed
    assert out[-1].startswith("verdict: PASS — regressions: none")
    assert main(["eval", "--offline", "--compare-to", str(BASELINE), "--show-known"]) == 0
    listed = capsys.readouterr().out.strip().splitlines()
    known = [line for line in listed if line.startswith("known failure")]
    assert known and f"known failures: {len(known)} " in listed[-1]
    # a baseline in which one of those cases passed: the verdict fails and names it
    base = json.loads(BASELINE.read_text())
    mode, case_id = known[0].split()[-1].split(":", 1)
    next(c for c in base["modes"][mode]["cases"] if c["case_id"] == case_id)["passed"] = True
    (tmp_path / "b.json").write_text(json.dumps(base))
    assert main(["eval", "--offline", "--compare-to", str(tmp_path / "b.json")]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"verdict: FAIL — regressions: 1 ({mode}:{case_id})")


def test_live_eval_matches_baseline_and_degraded_pipeline_fails_the_gate(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    report, diff_md = tmp_path / "report.json", tmp_path / "diff.md"
    code = main(
        [
            "eval",
            "--live",
            "--home",
            str(home),
            "--json-report",
            str(report),
            "--markdown-report",
            str(tmp_path / "report.md"),
            "--compare-to",
            str(BASELINE),
            "--diff-markdown-report",
            str(diff_md),
        ]
    )
    assert code == 0, diff_md.read_text()
    assert (tmp_path / "report.png").stat().st_size > 1000  # the chart beside the markdown
    live = json.loads(report.read_text())
    base = json.loads(BASELINE.read_text())
    for mode in ("hybrid", "dense"):  # the live run reproduces the committed baseline case by case
        assert [c["passed"] for c in live["modes"][mode]["cases"]] == [
            c["passed"] for c in base["modes"][mode]["cases"]
        ]
    # cases that fail in the baseline too are counted as known failures, not regressions, and the
    # output ends with one verdict line beside the baseline's figures
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("verdict: PASS — regressions: none; improvements: none; known failures: ")
    assert "listed with --show-known" in last and "nDCG@10" in last and "(baseline " in last
    fb = next(c for c in live["modes"]["hybrid"]["cases"] if c["case_id"] == "chat-l0-filter-fallback")
    assert fb["selected_attempt"] == "UNFILTERED_VECTOR_RETRY"

    # a deliberately degraded pipeline: the fallback retry switched off by its setting
    monkeypatch.setenv("KBFLOW_FALLBACK_ENABLED", "false")
    code = main(
        [
            "eval",
            "--live",
            "--home",
            str(home),
            "--compare-to",
            str(BASELINE),
            "--diff-json-report",
            str(tmp_path / "diff.json"),
        ]
    )
    assert code == 1
    diff = json.loads((tmp_path / "diff.json").read_text())
    assert not diff["ok"]
    assert any("chat-l0-filter-fallback: passed before, fails now" in r for r in diff["regressions"])
    assert "REGRESSION hybrid:chat-l0-filter-fallback" in capsys.readouterr().out

    # both live runs are in the home's eval history, per mode, the degraded one worse
    from kbflow.core.settings import Settings
    from kbflow.core.sql import SqlStore
    from kbflow.evaluation.history import eval_history

    runs = eval_history(SqlStore(Settings(home=home).resolved_database_url))
    hybrid = [r for r in runs if r["mode"] == "hybrid"]
    assert [r["source"] for r in runs] == ["live"] * 4 and len(hybrid) == 2
    first = live["modes"]["hybrid"]["metrics"]
    assert hybrid[0]["metrics"]["candidate_ndcg@10"] == first["candidate_ndcg@10"]
    assert hybrid[1]["failed"] > hybrid[0]["failed"]


def test_diff_separates_regressions_from_improvements():
    base = json.loads(BASELINE.read_text())
    cur = json.loads(BASELINE.read_text())
    case = cur["modes"]["hybrid"]["cases"][0]
    case["passed"], case["failures"] = False, ["expected x"]
    cur["modes"]["hybrid"]["metrics"]["mrr"] = 0.5
    cur["modes"]["dense"]["metrics"]["miss_count"] = 0
    back = json.loads(BASELINE.read_text())
    back["modes"]["dense"]["cases"][1]["passed"] = False  # baseline had a failure that is now fixed
    d = diff_reports(cur, back)
    assert any(case["case_id"] in r and "fails now" in r for r in d["regressions"])
    assert any("mrr" in r for r in d["regressions"])
    assert any("passes now" in i for i in d["improvements"])
    assert diff_reports(base, base)["ok"]


def test_old_baseline_schema_is_refused(tmp_path):
    old = json.loads(BASELINE.read_text())
    old["schema"] = "kbflow.eval-report/0"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.raises(BaselineError, match="regenerate the baseline"):
        check_report(json.loads(path.read_text()), str(path))
    assert main(["eval", "--offline", "--compare-to", str(path)]) == 2


# --- BEIR -----------------------------------------------------------------------------------------


def test_beir_import_reports_metrics(tmp_path):
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    docs = [
        (
            "d1",
            "Connection pool exhausted",
            "HikariCP pool exhausted: requests time out waiting for a connection.",
        ),
        ("d/2", "Kafka consumer lag", "Consumer group lag grows when consumers process records too slowly."),
        ("d3", "TLS certificate expired", "Clients fail with x509 certificate has expired errors."),
    ]
    (data / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs)
    )
    (data / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "kafka consumer group lag growing"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "x509 certificate has expired"})
        + "\n"
    )
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td/2\t1\nq2\td3\t1\n")
    report = run_beir(data, "beir-tiny", Settings(home=tmp_path / "home"), ["hybrid"])
    assert report["documents"] == 3 and report["queries"] == 2
    # the odd id "d/2" is the document's source as written (safe_id only names its file)
    assert report["modes"]["hybrid"]["delivered"]["hit@k"] == 1.0
    assert safe_id("d/2") != "d/2"
