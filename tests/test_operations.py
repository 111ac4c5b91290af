"""Operating kbflow like any other service: the alert rules pass promtool and its unit
tests, each alert's runbook is a kbflow document that answers the alert's name, and a real
Prometheus scraping a real `kbflow serve` sees exactly the lookups, refusals and latency that
were made — with JSON log lines a machine can read and a request id that ties them together."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from kbflow.flows.serve import free_port
from tests.conftest import REPO, run_cli, wait_until_healthy, write_doc

RULES = REPO / "deploy" / "prometheus" / "kbflow-rules.yml"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (bash scripts/prometheus.sh); .ci/run installs it"
)
DISK = "# Disk full on the database volume\n\n## Fix\n\nRemove old WAL archives and extend the volume.\n"


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


@needs_promtool
def test_the_rules_pass_promtool_and_their_unit_tests():
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([PROMTOOL, "test", "rules", str(RULES.with_suffix(".test.yml"))],
                            capture_output=True, text=True, timeout=300)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    unit = yaml.safe_load(RULES.with_suffix(".test.yml").read_text())
    tested_alerts = {t["alertname"] for test in unit["tests"] for t in test.get("alert_rule_test", [])}
    assert tested_alerts == {a["alert"] for a in alerts()}  # every alert fires in a test, once


def test_every_alert_has_its_runbook_as_a_kbflow_document_and_a_golden_case():
    import frontmatter

    cases = json.loads((REPO / "eval/rag-retrieval/cases/ops-cases.json").read_text())["cases"]
    by_query = {c["query"]: c for c in cases}
    names = {a["alert"] for a in alerts()}
    assert {"KbflowServiceDown", "KbflowLookupsFailing", "KbflowNoEvidenceRateHigh",
            "KbflowLookupLatencyHigh", "KbflowAdmissionRefusing", "KbflowReindexStale"} <= names
    for alert in alerts():
        runbook = REPO / alert["annotations"]["runbook_url"]
        meta = frontmatter.load(runbook)
        assert meta["kb_scope"] == "kbflow-ops" and meta["source"] == runbook.stem, runbook
        assert meta["title"].startswith(alert["alert"]) and meta["breadcrumb"].startswith("kbflow > Alerts")
        assert {"## What it means", "## Confirm", "## Fix"} <= set(re.findall(r"^## .+$", meta.content, re.M))
        case = by_query[alert["alert"]]
        assert case["expectedDocIds"] == [runbook.stem] and case["K"] == 1 and case["expectConfident"]
    assert len(list((REPO / "deploy/runbooks").glob("*.md"))) == len(names)


# --- a real kbflow serve, scraped by a real Prometheus ------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`kbflow serve` with one worker and 1 ms of wait allowed (a burst is refused), JSON logs,
    hashed questions in the audit, and an API key that /metrics needs (metrics_access = key)."""
    tmp = tmp_path_factory.mktemp("ops")
    write_doc(tmp / "docs", "disk.md", source="disk-full", scope="ops", body=DISK)
    home = tmp / "home"
    assert run_cli("reindex", str(tmp / "docs"), home=home).returncode == 0
    port = free_port()
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "KBFLOW_SERVE_WORKERS": "1", "KBFLOW_SERVE_MAX_WAIT_MS": "1", "KBFLOW_LOG_FORMAT": "json",
           "KBFLOW_AUDIT_STORE_QUERIES": "hashed", "KBFLOW_API_KEYS": '{"k-ops": ["ops"]}',
           "KBFLOW_METRICS_ACCESS": "key"}
    log = (tmp / "serve.log").open("w")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("kbflow")), "serve", "--port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    wait_until_healthy(base, proc)
    yield base, tmp
    proc.terminate()
    proc.wait(30)
    log.close()


def _scrape(base: str) -> str:
    r = httpx.get(f"{base}/metrics", headers={"X-API-Key": "k-ops"}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            got = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def _lookups(base: str) -> tuple[dict[str, int], int, list[str]]:
    """Lookups of each outcome and a refused burst: ({outcome: count}, refusals, request ids)."""
    key, done, ids = {"X-API-Key": "k-ops"}, {}, []
    asked = ["disk full on the database volume", "WAL archives fill the disk", "zyxwv plokm qwerty",
             "kubernetes pod eviction threshold"]
    for query in asked:
        r = httpx.post(f"{base}/v1/lookup", json={"query": query, "kb_scope": "ops"}, headers=key, timeout=60)
        assert r.status_code == 200
        body, ids = r.json(), [*ids, r.headers["x-request-id"]]
        outcome = "none" if not body["found"] else ("found" if body["relevanceLevel"] else "weak")
        done[outcome] = done.get(outcome, 0) + 1
    bad = httpx.post(f"{base}/v1/lookup", json={"query": "disk", "kb_scope": "Ops"}, headers=key, timeout=60)
    assert bad.status_code == 403  # a scope outside the key: refused before any lookup, not counted
    codes: list[int] = []
    barrier = threading.Barrier(12)

    def one() -> None:
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            codes.append(c.post(f"{base}/v1/lookup", json={"query": "disk full", "kb_scope": "ops"},
                                headers=key).status_code)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(codes) <= {200, 503} and 503 in codes, codes
    done["found"] = done.get("found", 0) + codes.count(200)  # the burst's answered ones: found
    return done, codes.count(503), ids


def test_metrics_count_exactly_what_was_done_and_pass_promtool(served):
    base, tmp = served
    assert httpx.get(f"{base}/metrics", timeout=30).status_code == 401  # metrics_access = key
    done, refused, ids = _lookups(base)
    text = _scrape(base)
    for outcome in ("found", "weak", "none"):
        assert _sample(text, "kbflow_lookups_total", outcome=outcome) == done.get(outcome, 0), (outcome, done)
    assert _sample(text, "kbflow_admission_refusals_total") == refused
    assert _sample(text, "kbflow_lookup_duration_seconds_count") == sum(done.values())
    assert _sample(text, "kbflow_scope_documents", scope="ops") == 1
    assert _sample(text, "kbflow_reindex_last_run_success", scope="ops") == 1
    assert _sample(text, "kbflow_build_info") == 1 and _sample(text, "kbflow_model_load_seconds") > 0
    assert "disk" not in text.lower() and "k-ops" not in text  # no question, no key, in any label
    exposed = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("kbflow_")}
    dashboard = json.loads((REPO / "deploy/grafana/kbflow.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    charted = {m for e in exprs for m in re.findall(r"kbflow_\w+", e)}
    alerted = set(re.findall(r"kbflow_\w+", RULES.read_text()))
    assert charted <= exposed and alerted <= exposed, (charted - exposed, alerted - exposed)
    if PROMTOOL:
        checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # one JSON object per lookup line, with its request id; a hashed audit keeps no question there
    time.sleep(0.5)
    logged = (tmp / "serve.log").read_text().splitlines()
    lines = [json.loads(line) for line in logged if line.startswith("{")]
    lookups = [e for e in lines if e.get("event") == "lookup"]
    assert {e["request_id"] for e in lookups} >= set(ids)
    assert all(set(e) >= {"ts", "level", "scope", "outcome", "latency_ms", "request_id"} for e in lookups)
    assert not any("query" in e or "k-ops" in json.dumps(e) for e in lines)


@pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (bash scripts/prometheus.sh)")
def test_a_real_prometheus_scrapes_what_the_service_did(served, tmp_path):
    base, _ = served
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "kbflow", "authorization": {"credentials": "k-ops"},
                            "static_configs": [{"targets": [base.removeprefix("http://")]}]}],
    }))
    flags = [f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"]
    prom = subprocess.Popen([PROMETHEUS, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        _until(lambda: _query(api, 'up{job="kbflow"}') == 1.0, "Prometheus to scrape kbflow")
        before = _scraped(api)
        done, refused, _ = _lookups(base)
        want = {k: before.get(k, 0) + v for k, v in done.items()}
        seen = lambda: all(_scraped(api).get(k) == v for k, v in want.items())  # noqa: E731
        _until(seen, f"Prometheus to see {want}")
        assert _query(api, "sum(kbflow_admission_refusals_total)") >= refused
        rules = httpx.get(f"{api}/rules", timeout=10).json()["data"]["groups"][0]["rules"]
        assert {r["name"] for r in rules} == {a["alert"] for a in alerts()}
        assert all(r["health"] == "ok" for r in rules), rules
        if CHROMIUM:
            _screenshot(f"http://127.0.0.1:{port}", tmp_path)
    finally:
        prom.terminate()
        prom.wait(30)


def _query(api: str, expr: str) -> float | None:
    data = httpx.get(f"{api}/query", params={"query": expr}, timeout=10).json()["data"]["result"]
    return float(data[0]["value"][1]) if data else None


def _scraped(api: str) -> dict[str, int]:
    data = httpx.get(f"{api}/query", params={"query": "sum by (outcome) (kbflow_lookups_total)"},
                     timeout=10).json()["data"]["result"]
    return {r["metric"]["outcome"]: int(float(r["value"][1])) for r in data}


def _until(ok, what: str, seconds: float = 60.0) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if ok():
                return
        except (httpx.HTTPError, KeyError, IndexError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"waited {seconds:.0f} s for {what}")


def _screenshot(prometheus: str, tmp_path: Path) -> None:
    """Prometheus' own graph of the lookup rate, rendered by headless Chromium; with
    KBFLOW_SCREENSHOT_TO set, kept there (how docs/img/prometheus-lookups.png was made)."""
    from urllib.parse import quote

    from PIL import Image

    expr = quote("sum by (outcome) (kbflow_lookups_total)")
    url = f"{prometheus}/graph?g0.expr={expr}&g0.tab=0&g0.range_input=30s"
    shot = tmp_path / "prometheus.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--virtual-time-budget=8000", f"--screenshot={shot}", "--window-size=1280,900", url],
                   capture_output=True, timeout=120)
    image = Image.open(shot).convert("L")
    inked = sum(1 for p in image.getdata() if p < 200) / (image.width * image.height)
    assert inked > 0.01, f"the screenshot is nearly blank ({inked:.3%} dark pixels)"
    if os.environ.get("KBFLOW_SCREENSHOT_TO"):
        shutil.copy(shot, os.environ["KBFLOW_SCREENSHOT_TO"])


def test_the_cli_tells_its_errors_as_json_lines_when_asked(tmp_path):
    write_doc(tmp_path / "docs", "disk.md", source="disk-full", scope="ops", body=DISK)
    home = tmp_path / "home"
    assert run_cli("reindex", str(tmp_path / "docs"), home=home).returncode == 0
    env = {**os.environ, "KBFLOW_LOG_FORMAT": "json", "KBFLOW_HOME": str(home)}
    r = subprocess.run([str(Path(sys.executable).with_name("kbflow")), "lookup", "disk", "--scope", "Ops"],
                       capture_output=True, text=True, env=env, timeout=300)
    [event] = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    assert r.returncode == 2 and event["level"] == "error" and event["exit_code"] == 2
    assert "no scope 'Ops'" in event["message"] and "Traceback" not in r.stderr
