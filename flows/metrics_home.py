"""What the home's SQL records about itself, for the metrics: scope sizes, the last reindex of
each scope (and whether it succeeded), the last live eval of each mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from kbflow.core.sql import DocumentRow, EvalRunRow, ReindexRunRow, ScopeRow


@dataclass
class ScopeRuns:
    last: float  # Unix time the last run finished
    ok: bool  # whether that run succeeded
    last_ok: float | None  # Unix time the last successful run finished


@dataclass
class HomeState:
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # scope -> (documents, chunks)
    reindex: dict[str, ScopeRuns] = field(default_factory=dict)
    evals: dict[str, tuple[float, int]] = field(default_factory=dict)  # mode -> (time, failed cases)


def _ts(when: datetime) -> float:
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


RUNS_READ = 500  # the latest reindex runs read: enough to find every scope's last one in practice


def read_home(sql: Any) -> HomeState:
    state = HomeState()
    with sql.session() as s:
        known = set(s.scalars(select(ScopeRow.kb_scope)))
        for scope, n, chunks in s.execute(
            select(DocumentRow.kb_scope, func.count(), func.sum(DocumentRow.chunk_count)).group_by(
                DocumentRow.kb_scope
            )
        ):
            if scope in known:
                state.sizes[scope] = (int(n), int(chunks or 0))
        runs = s.execute(
            select(ReindexRunRow.finished_at, ReindexRunRow.kb_scope, ReindexRunRow.ok, ReindexRunRow.summary)
            .order_by(ReindexRunRow.finished_at.desc())
            .limit(RUNS_READ)
        ).all()
        newest_eval = (
            select(EvalRunRow.mode, func.max(EvalRunRow.created_at).label("at"))
            .where(EvalRunRow.source == "live")
            .group_by(EvalRunRow.mode)
            .subquery()
        )
        same = (EvalRunRow.mode == newest_eval.c.mode) & (EvalRunRow.created_at == newest_eval.c.at)
        evals = s.execute(
            select(EvalRunRow.mode, EvalRunRow.created_at, EvalRunRow.failed).join(newest_eval, same)
        ).all()
    for finished, kb_scope, ok, summary in runs:  # newest first
        for scope in [kb_scope] if kb_scope else list((summary or {}).get("scopes") or {}):
            if scope not in known:
                continue
            at = _ts(finished)
            seen = state.reindex.get(scope)
            if seen is None:
                state.reindex[scope] = ScopeRuns(last=at, ok=bool(ok), last_ok=at if ok else None)
            elif seen.last_ok is None and ok:
                seen.last_ok = at
    for mode, at, failed in evals:
        state.evals[mode] = (_ts(at), int(failed))
    return state
