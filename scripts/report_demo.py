"""The README's screenshot of `kbflow report --html`: a seeded demo audit, not real traffic.

The English golden corpus is indexed, bench/gaps.py's seeded audit is asked (answerable golden
questions and 5 uncovered topics) and spread over the last 14 days, the committed baseline is
recorded as an eval run a week ago and one live eval run is made now; then the report is
written and rendered by headless Chromium into the PNG you name (the README's picture is
docs/img/report.png, refreshed only when asked for by name with --docs-image).

    python scripts/report_demo.py --out /tmp/report.png
    python scripts/report_demo.py --docs-image     # rewrites the tracked docs/img/report.png
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select, update

from kbflow.core.settings import Settings
from kbflow.core.sql import EvalRunRow, LookupAuditRow, SqlStore
from kbflow.evaluation.history import record_eval_run
from kbflow.evaluation.runner import EVAL_ROOT, run_eval
from kbflow.flows.report import write_owner_report
from kbflow.ingest.reindex import reindex

REPO = Path(__file__).resolve().parent.parent
DOCS_IMAGE = REPO / "docs" / "img" / "report.png"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gaps", REPO / "bench" / "gaps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="F.png", help="write the screenshot here (and the HTML beside it)")
    where.add_argument(
        "--docs-image", action="store_true", help="rewrite the tracked docs/img/report.png (the README's)"
    )
    args = ap.parse_args()
    args.out = str(DOCS_IMAGE if args.docs_image else Path(args.out).expanduser().absolute())
    work = Path(tempfile.mkdtemp(prefix="kbflow-report-demo-"))
    settings = Settings(home=work / "home")
    bench = _bench()
    assert reindex([REPO / "seed-docs"], scope="rag-eval", settings=settings).ok  # as the eval seeds it
    truth, _ = bench.seeded_audit(settings, "en", answerable=250, repeats=3)
    sql = SqlStore(settings.resolved_database_url)
    now = datetime.now(UTC)
    with sql.session() as s, s.begin():
        for i, audit_id in enumerate(sorted(truth)):
            at = now - timedelta(days=13 - (i * 14) // len(truth), hours=i % 9)
            s.execute(update(LookupAuditRow).where(LookupAuditRow.id == audit_id).values(created_at=at))
    baseline = json.loads((EVAL_ROOT / "reports" / "baseline.json").read_text(encoding="utf-8"))
    record_eval_run(sql, baseline, "baseline")
    with sql.session() as s, s.begin():
        s.execute(update(EvalRunRow).values(created_at=now - timedelta(days=7)))
    run_eval(source="live", modes=["hybrid", "dense"], settings=settings)
    with sql.session() as s:
        assert len(s.scalars(select(EvalRunRow.id)).all()) == 4
    html = write_owner_report(settings, work / "report.html", since=timedelta(days=14))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={args.out}",
            "--window-size=1200,2500",
            html.as_uri(),
        ],
        check=True,
        capture_output=True,
    )
    kept = Path(args.out).with_suffix(".html")
    shutil.copyfile(html, kept)
    print(f"wrote {args.out} (screenshot) and {kept} (open it in a browser)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
