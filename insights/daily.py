"""The audit per day: lookups, the no-evidence and weak rates, latency p50 and p95 (eval traffic
left out). What the owner's report charts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np
from sqlalchemy import select

from kbflow.core.sql import LookupAuditRow, SqlStore


@dataclass
class Day:
    day: str  # ISO date, UTC
    lookups: int
    no_evidence_rate: float
    weak_rate: float
    p50_ms: float | None
    p95_ms: float | None

    def to_json(self) -> dict:
        return asdict(self)


def daily_series(sql: SqlStore, since: datetime, until: datetime, scope: str | None = None) -> list[Day]:
    """One Day per calendar day of the window, days without lookups included (as zeros)."""
    stmt = select(
        LookupAuditRow.created_at,
        LookupAuditRow.outcome,
        LookupAuditRow.found,
        LookupAuditRow.relevance_level,
        LookupAuditRow.total_ms,
        LookupAuditRow.caller,
    ).where(LookupAuditRow.created_at >= since)
    if scope:
        stmt = stmt.where(LookupAuditRow.kb_scope == scope)
    outcomes: dict[date, list[str]] = defaultdict(list)
    latency: dict[date, list[float]] = defaultdict(list)
    with sql.session() as s:
        for row in s.execute(stmt.execution_options(yield_per=5000)):
            if row.caller == "eval":
                continue
            at = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
            day = at.astimezone(UTC).date()
            kind = row.outcome or ("none" if not row.found else "found" if row.relevance_level else "weak")
            outcomes[day].append(kind)
            if row.total_ms is not None:
                latency[day].append(row.total_ms)
    out, day, last = [], since.astimezone(UTC).date(), until.astimezone(UTC).date()
    while day <= last:
        kinds, ms = outcomes.get(day, []), latency.get(day, [])
        n = len(kinds)
        out.append(
            Day(
                day=day.isoformat(),
                lookups=n,
                no_evidence_rate=round(kinds.count("none") / n, 4) if n else 0.0,
                weak_rate=round(kinds.count("weak") / n, 4) if n else 0.0,
                p50_ms=round(float(np.percentile(ms, 50)), 1) if ms else None,
                p95_ms=round(float(np.percentile(ms, 95)), 1) if ms else None,
            )
        )
        day += timedelta(days=1)
    return out
