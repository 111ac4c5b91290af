"""`kbflow report --html`: one self-contained page, rendered in a real headless Chromium (Debian's
package; .ci/run installs it): no console error, the charts drawn, user text escaped."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from kbflow.core.settings import Settings
from kbflow.core.sql import EvalRunRow, LookupAuditRow, SqlStore
from kbflow.evaluation.history import record_eval_run
from kbflow.ingest.reindex import reindex
from kbflow.retrieval.lookup import lookup_knowledge
from tests.conftest import run_cli, write_doc

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DAYS = 10
HOSTILE = '<script>alert("x")</script> terraform state lock'
ZH = "保险库被密封了怎么办"  # unanswered, so the gaps table shows it


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A home with lookups spread over DAYS days and three live eval runs, and its report."""
    base = tmp_path_factory.mktemp("report")
    settings = Settings(home=base / "home")
    write_doc(
        base / "docs",
        "k.md",
        source="kafka-lag",
        scope="ops",
        breadcrumb="MQ > Kafka",
        body="# Kafka consumer lag\n\n## Symptoms\n\nConsumer group lag keeps growing.\n",
    )
    write_doc(
        base / "docs",
        "d.md",
        source="disk-full",
        scope="ops",
        breadcrumb="OS > Disk",
        body="# Disk full\n\n## Symptoms\n\nNo space left on device.\n",
    )
    assert reindex([base / "docs"], settings=settings).ok
    (base / "docs" / "broken.md").write_text("---\nkb_scope: [ops\n---\n# Broken\n", encoding="utf-8")
    assert not reindex([base / "docs"], settings=settings).ok  # the last run: one document failed
    questions = ["kafka consumer lag keeps growing", "no space left on device", HOSTILE, ZH]
    ids = [
        lookup_knowledge(q, kb_scope="ops", settings=settings).audit_id
        for _ in range(DAYS)
        for q in questions
    ]
    sql = SqlStore(settings.resolved_database_url)
    now = datetime.now(UTC)
    with sql.session() as s, s.begin():
        for i, audit_id in enumerate(ids):
            day = now - timedelta(days=i // len(questions))
            s.execute(update(LookupAuditRow).where(LookupAuditRow.id == audit_id).values(created_at=day))
    for k in range(3):
        metrics = {
            "cases": 10,
            "failed_count": k,
            "candidate_ndcg@10": 0.8 + k / 50,
            "candidate_mrr": 0.75,
            "false_no_evidence_rate": 0.02,
            "true_no_evidence_rate_near": 0.1,
            "true_no_evidence_rate_off": 1.0,
        }
        record_eval_run(sql, {"modes": {"hybrid": {"metrics": metrics}}}, "live")
    with sql.session() as s, s.begin():
        for k, run_id in enumerate(s.scalars(select(EvalRunRow.id).order_by(EvalRunRow.id)).all()):
            s.execute(
                update(EvalRunRow)
                .where(EvalRunRow.id == run_id)
                .values(created_at=now - timedelta(days=6 - 3 * k))
            )
    html = base / "report.html"
    done = run_cli("report", "--html", str(html), "--since", "14d", home=settings.home)
    assert done.returncode == 0, done.stderr
    return html


def test_the_page_is_self_contained_and_escapes_user_text(page):
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and not re.search(r'(src|href)="https?:', text)  # nothing fetched, no code
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text  # the question, shown as text
    for heading in ("Scopes", "Lookups", "Knowledge gaps", "Eval history"):
        assert f"<h2>{heading}" in text
    assert ZH in text and "kafka-lag" in text


def test_the_last_runs_failed_documents_are_named(page):
    text = page.read_text(encoding="utf-8")
    assert "1 document failed." in text
    assert re.search(r"<li><code>[^<]*broken\.md</code>: ", text), "the failed document is not named"


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium; scripts/chromium.sh installs it and a CJK font")
def test_chinese_questions_get_a_font_with_chinese_glyphs(page):
    from kbflow.insights.report_html import CJK_FONTS

    installed = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout
    named = [f for f in CJK_FONTS if f in installed]
    assert named, f"no font of the page's CJK stack {CJK_FONTS} is installed: run scripts/chromium.sh"
    assert f'"{named[0]}"' in page.read_text(encoding="utf-8")  # and the page asks for it


@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium); .ci/run installs it"
)
def test_the_report_renders_in_headless_chromium_with_its_charts(page, tmp_path):
    from PIL import Image

    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    rendered = subprocess.run(
        [
            CHROMIUM,
            *flags,
            f"--screenshot={shot}",
            "--window-size=1200,1800",
            "--enable-logging=stderr",
            "--v=0",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), rendered.stderr[-2000:]
    console = [line for line in rendered.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert dom.count('<rect class="bar"') == 15  # a bar per day of the 14-day window, today included
    series = re.findall(r'<path class="series" data-series="([^"]+)"', dom)
    assert {"no usable evidence", "p50", "p95", "nDCG@10", "MRR"} <= set(series), series
    assert "<script>alert" not in dom  # the hostile question stayed text
    image = Image.open(shot).convert("L")
    inked = sum(1 for p in image.getdata() if p < 200) / (image.width * image.height)
    assert inked > 0.01, f"the screenshot is nearly blank ({inked:.3%} dark pixels)"
