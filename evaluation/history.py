"""The eval history: each live golden-case run's metrics, per mode, kept in SQL so that the
owner's report can chart quality over time (nDCG@10, MRR, the no-evidence rates)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from kbflow.core.sql import EvalRunRow, SqlStore

CHARTED = {  # report metric -> what the owner's report calls it
    "candidate_ndcg@10": "nDCG@10",
    "candidate_mrr": "MRR",
    "false_no_evidence_rate": "false no-evidence",
    "true_no_evidence_rate_near": "near-domain refused",
    "true_no_evidence_rate_off": "off-domain refused",
}


def record_eval_run(sql: SqlStore, report: dict[str, Any], source: str) -> None:
    """One row per mode of the report (a live or snapshot run; offline runs judge fixtures)."""
    with sql.session() as s, s.begin():
        for mode, body in report.get("modes", {}).items():
            m = body.get("metrics", {})
            s.add(
                EvalRunRow(
                    source=source,
                    mode=mode,
                    cases=int(m.get("cases", 0)),
                    failed=int(m.get("failed_count", 0)),
                    metrics={k: m[k] for k in CHARTED if m.get(k) is not None},
                )
            )


def eval_history(sql: SqlStore, since: datetime | None = None) -> list[dict[str, Any]]:
    """Oldest first: {at, source, mode, cases, failed, metrics}."""
    stmt = select(EvalRunRow).order_by(EvalRunRow.created_at, EvalRunRow.id)
    if since is not None:
        stmt = stmt.where(EvalRunRow.created_at >= since)
    with sql.session() as s:
        rows = s.scalars(stmt).all()
        return [
            {
                "at": (r.created_at if r.created_at.tzinfo else r.created_at.replace(tzinfo=UTC)).isoformat(
                    timespec="seconds"
                ),
                "source": r.source,
                "mode": r.mode,
                "cases": r.cases,
                "failed": r.failed,
                "metrics": dict(r.metrics),
            }
            for r in rows
        ]
