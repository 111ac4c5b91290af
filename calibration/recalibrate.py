"""Keeping a scope's calibration no older than its collection.

A calibration is fitted on the candidates a scope's lookups returned; a full rebuild makes a new
collection (new chunks, maybe a new model), so the fit describes a scope that is gone. Each
stored calibration therefore keeps its recipe — what `kbflow eval calibrate` was asked to fit it
on (the golden cases, a BEIR dataset and its negatives, the scope's own pseudo-queries) — and
`refresh` fits it again on the same recipe: after a reindex that rebuilt the scope, from the
scheduled `kbflow-calibration-refresh` flow, and from `kbflow eval calibrate --refresh`.

A refit that fails keeps the old calibration (status goes on flagging it stale); one stored
before recipes existed cannot be refitted and says so.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from kbflow.calibration.recipe import Recipe
from kbflow.core.chunk_store import built_at
from kbflow.core.settings import Settings
from kbflow.core.sql import CalibrationRow, ScopeRow, SqlStore


@dataclass(frozen=True)
class Refit:
    """What a refresh did to one stored calibration."""

    model_id: str
    kb_scope: str
    outcome: str  # refitted | failed | no recipe
    detail: str = ""

    def line(self) -> str:
        return f"gate calibration of scope {self.kb_scope} ({self.model_id}): {self.outcome}" + (
            f" — {self.detail}" if self.detail else ""
        )


def due(sql: SqlStore, scopes: Sequence[str] | None = None, stale_only: bool = True) -> list[CalibrationRow]:
    """The scope calibrations (not a model's `*` one) to refit: those of `scopes` (every scope
    when None), and with `stale_only` only those fitted before their collection was built."""
    with sql.session() as session:
        built = {r.kb_scope: built_at(r.physical_collection) for r in session.scalars(select(ScopeRow))}
        rows = session.scalars(select(CalibrationRow).where(CalibrationRow.kb_scope != "*")).all()
    out = []
    for row in rows:
        if scopes is not None and row.kb_scope not in scopes:
            continue
        if stale_only and not _older(row.created_at, built.get(row.kb_scope)):
            continue
        out.append(row)
    return out


def _older(created: datetime | None, rebuilt: datetime | None) -> bool:
    if created is None or rebuilt is None:
        return False
    if created.tzinfo is None:  # SQLite drops the zone
        created = created.replace(tzinfo=rebuilt.tzinfo)
    return created < rebuilt


def refit(settings: Settings, row: CalibrationRow) -> Refit:
    """Fit one stored calibration again on its recipe, for its model, and store it (with the
    recipe); on failure the stored one stays as it was."""
    from kbflow.calibration.calibrate import calibrate
    from kbflow.calibration.calibration_data import collect
    from kbflow.core.stores import open_stores
    from kbflow.retrieval import calibration

    recipe_data = (row.data or {}).get("recipe")
    if not recipe_data:
        return Refit(
            row.model_id,
            row.kb_scope,
            "no recipe",
            "stored before calibrations kept their recipe: run `kbflow eval calibrate` again",
        )
    recipe = Recipe(**recipe_data)
    pool = settings.retrieve_k
    print(
        f"kbflow: fitting the gate calibration of scope {row.kb_scope} again on its recipe "
        f"({recipe.origin}) …",
        file=sys.stderr,
    )
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            queries, sources = collect(recipe.as_args(), settings, pool)
        mine = [q for q in queries if q.model_id == row.model_id]
        if not mine:
            raise ValueError(f"no query of the recipe was embedded with {row.model_id} any more")
        result = calibrate(
            mine,
            model_id=row.model_id,
            kb_scope=row.kb_scope,
            pool=pool,
            source=" + ".join(sources),
            features=recipe.features,
            origin=recipe.origin,
        )
    except Exception as exc:  # reported against the calibration; the others go on
        detail = f"{type(exc).__name__}: {exc}; the old one is kept"
        return Refit(row.model_id, row.kb_scope, "failed", detail)
    calibration.store(
        open_stores(settings).sql, result.calibration, {**result.to_dict(), "recipe": recipe.to_dict()}
    )
    rates = result.rates
    return Refit(
        row.model_id,
        row.kb_scope,
        "refitted",
        f"{recipe.origin}, {len(mine)} queries; false no-evidence "
        f"{_pct(rates['false_no_evidence_rate'])}, near-domain refused "
        f"{_pct(rates.get('true_no_evidence_rate_near'))}",
    )


def refresh(settings: Settings, scopes: Sequence[str] | None = None, stale_only: bool = True) -> list[Refit]:
    """Refit the scope calibrations that are due (see `due`)."""
    from kbflow.core.stores import open_stores

    rows = due(open_stores(settings).sql, scopes, stale_only)
    return [refit(settings, row) for row in rows]


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"
