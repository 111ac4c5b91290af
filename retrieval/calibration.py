"""Where a scope's gate calibration comes from, in order: a calibration stored for (model,
scope) by `kbflow eval calibrate`; one stored for (model, "*"); the default shipped for each
packaged model (`default_calibration.json` for all-MiniLM-L6-v2, fitted on the golden corpus
and CACM; `default_calibration.multilingual-e5-small.json`, fitted on the Chinese golden corpus
and starrocks-faq-zh); else the plain cosine. A calibration without a level model borrows the
packaged one of its model (fitted on the small-scope trust set and the golden corpus: `python
bench/trust.py --fit`). Thresholds set in Settings override whichever applies."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from sqlalchemy import select

from kbflow.core.models import DEFAULT_MODEL_ID, E5_MODEL_ID, base_model_id
from kbflow.core.settings import Settings
from kbflow.core.sql import CalibrationRow, SqlStore, utcnow
from kbflow.retrieval.gate import LEVELS_SPAN, Calibration

DEFAULT_FILE = Path(__file__).with_name("default_calibration.json")
PACKAGED = {  # base model id -> its packaged calibration (its backends share it)
    DEFAULT_MODEL_ID: DEFAULT_FILE,
    E5_MODEL_ID: Path(__file__).with_name("default_calibration.multilingual-e5-small.json"),
}
LEXICAL = Calibration(
    kind="lexical", floor=0.5, reference=0.5, precise=0.75, source="lexical coverage (model cannot embed)"
)


@lru_cache(maxsize=8)
def packaged_default(base_model: str = DEFAULT_MODEL_ID) -> Calibration | None:
    path = PACKAGED.get(base_model)
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path else None
    except FileNotFoundError:
        return None
    return Calibration.from_dict(data["calibration"]) if data else None


def _stored_row(sql: SqlStore, model_id: str, scope: str) -> tuple[str, dict, datetime | None] | None:
    """(the scope it was stored for, its params, when) of the calibration that applies: the
    scope's own, else the model's `*` one."""
    with sql.session() as session:
        for key in (scope, "*"):
            row = session.get(CalibrationRow, (model_id, key))
            if row is not None:
                created = row.created_at
                if created is not None and created.tzinfo is None:  # SQLite drops the zone
                    created = created.replace(tzinfo=UTC)
                return key, row.params, created
    return None


def stored(sql: SqlStore, model_id: str, scope: str) -> Calibration | None:
    found = _stored_row(sql, model_id, scope)
    return Calibration.from_dict(found[1]) if found else None


def resolve(sql: SqlStore, settings: Settings, model_id: str, scope: str, lexical: bool) -> Calibration:
    if lexical:
        cal = LEXICAL
    else:
        packaged = packaged_default(base_model_id(model_id))  # serves each of the model's backends
        cal = stored(sql, model_id, scope) or packaged or Calibration(model_id=model_id)
        if packaged is not None:  # a calibration stored without a level model borrows the packaged one
            cal = cal.with_levels(packaged.levels)
    return cal.with_overrides(settings.usable_floor, settings.reference_threshold, settings.precise_threshold)


def describe(
    sql: SqlStore, model_id: str, scope: str, rebuilt: datetime | None = None, documents: int | None = None
) -> dict[str, str]:
    """Which calibration a scope's lookups use, for `kbflow status`: its origin (labelled, self,
    self + labelled, packaged, none), the scope it was stored for, when, and from what; `stale`
    when it was fitted before the scope's collection was last rebuilt (`rebuilt`); `unfit` when
    the scope's `documents` lie outside what its level model was fitted on."""
    found = _stored_row(sql, model_id, scope)
    packaged = packaged_default(base_model_id(model_id))
    if found is not None:
        key, params, created = found
        cal = Calibration.from_dict(params)
        out = {"origin": cal.origin or "labelled", "stored_for": key,
               "created_at": created.isoformat(timespec="seconds") if created else "", "source": cal.source}
        if key == scope and rebuilt and created and created < rebuilt:
            out["stale"] = f"fitted before the last full rebuild ({rebuilt:%Y-%m-%d %H:%M} UTC)"
    elif packaged is not None:
        cal = packaged
        out = {"origin": "packaged", "stored_for": "", "created_at": "", "source": packaged.source}
    else:
        return {"origin": "none", "stored_for": "", "created_at": "", "source": Calibration().source}
    if packaged is not None:
        cal = cal.with_levels(packaged.levels)
    unfit = fit_note(cal, scope, documents)
    if unfit:
        out["unfit"] = unfit
    return out


def fit_note(cal: Calibration, scope: str, documents: int | None) -> str:
    """What to know, and do, when a scope is much smaller or larger than the scopes its level
    model was fitted on; "" when it is like them."""
    span = cal.levels.get("scope_documents") if cal.judges_coverage else None
    if not span or documents is None:
        return ""
    low, high = span
    fix = (
        "Label about ten questions of this scope as golden cases (answerable ones naming their "
        "documents, near- and off-domain ones marked \"negative\") and run `kbflow eval calibrate "
        f"--golden --cases FILE --scope {scope}` to fit one here"
    )
    if not cal.levels_apply(documents):
        return (
            f"its level model was fitted on scopes of {low}-{high} documents and this one has {documents}: "
            f"levels here read quality alone (a level model judges scopes up to {high * LEVELS_SPAN} "
            f"documents). {fix}"
        )
    if documents < low:
        return (
            f"its level model was fitted on scopes of {low}-{high} documents and this one has {documents}: "
            f"its levels are a forecast from larger scopes. {fix}"
        )
    return ""


def store(sql: SqlStore, cal: Calibration, data: dict) -> None:
    with sql.session() as session, session.begin():
        session.merge(
            CalibrationRow(
                model_id=cal.model_id,
                kb_scope=cal.kb_scope,
                params=cal.to_dict(),
                data=data,
                created_at=utcnow(),
            )
        )


def stored_list(sql: SqlStore) -> list[tuple[str, str, dict, dict]]:
    with sql.session() as session:
        rows = session.scalars(
            select(CalibrationRow).order_by(CalibrationRow.model_id, CalibrationRow.kb_scope)
        )
        return [(r.model_id, r.kb_scope, r.params, r.data) for r in rows]
