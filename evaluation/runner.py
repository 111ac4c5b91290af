"""Run the golden cases: offline (frozen fixtures, no Milvus, SQL or model), live (the real
lookup against a freshly seeded scope) and snapshot (live, then freeze fixtures)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbflow.core.settings import Settings
from kbflow.evaluation.cases import CaseFileError, GoldenCase
from kbflow.evaluation.judge import CaseOutcome, judge
from kbflow.evaluation.report import build_report
from kbflow.retrieval.contracts import Hit, LookupResult
from kbflow.retrieval.projection import ProjectionLimits, project_for_agent

log = logging.getLogger("kbflow.eval")

FIXTURE_SCHEMA = "kbflow.eval-fixture/2"
EVAL_ROOT = Path(__file__).resolve().parent.parent / "eval" / "rag-retrieval"
SEED_DOCS = Path(__file__).resolve().parent.parent / "seed-docs"
OPS_SCOPE, OPS_RUNBOOKS = "kbflow-ops", Path(__file__).resolve().parent.parent / "deploy" / "runbooks"

ResultSource = Callable[[GoldenCase, str], LookupResult]


def evaluate(
    cases: Sequence[GoldenCase], modes: Sequence[str], source: ResultSource, *, label: str, settings: Settings
) -> tuple[dict[str, Any], dict[str, dict[str, LookupResult]]]:
    per_mode: dict[str, list[tuple[GoldenCase, CaseOutcome]]] = {}
    results: dict[str, dict[str, LookupResult]] = {}
    for mode in modes:
        per_mode[mode] = []
        for case in cases:
            result = source(case, mode)
            results.setdefault(case.id, {})[mode] = result
            per_mode[mode].append(
                (
                    case,
                    judge(case, result, project_for_agent(result, ProjectionLimits.from_settings(settings))),
                )
            )
    return build_report(label, per_mode), results


# --- offline ----------------------------------------------------------------------------------


def fixture_source(fixtures_dir: Path) -> ResultSource:
    cache: dict[str, dict[str, Any]] = {}

    def load(case: GoldenCase, mode: str) -> LookupResult:
        path = fixtures_dir / f"{case.id}.json"
        if case.id not in cache:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise CaseFileError(
                    f"case {case.id!r}: no fixture {path}; run `kbflow eval --snapshot`"
                ) from None
            except json.JSONDecodeError as exc:
                raise CaseFileError(f"case {case.id!r}: fixture {path} is not JSON: {exc}") from exc
            if not isinstance(data, dict) or data.get("schema") != FIXTURE_SCHEMA:
                raise CaseFileError(
                    f"case {case.id!r}: fixture {path}: field 'schema' must be {FIXTURE_SCHEMA!r}"
                )
            cache[case.id] = data
        data = cache[case.id]
        raw = (data.get("results") or {}).get(mode)
        if raw is None:
            raise CaseFileError(f"case {case.id!r}: fixture {path}: field 'results.{mode}' is missing")
        try:
            result = LookupResult.model_validate(raw)
            result.candidates = _restore_candidates((data.get("candidates") or {}).get(mode, {}))
            return result
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise CaseFileError(
                f"case {case.id!r}: fixture {path}: field 'results.{mode}.{field}': {err['msg']}"
            ) from exc

    return load


# --- live / snapshot --------------------------------------------------------------------------


def seed_scopes(settings: Settings, scopes: Sequence[str], seed_docs: Path = SEED_DOCS) -> None:
    """Reseed each scope from seed-docs, from the trust set (`trust-*` scopes: eval/trust,
    written under the home first), or from kbflow's own runbooks (`kbflow-ops`: deploy/runbooks).
    Incremental: free when nothing changed."""
    from kbflow.evaluation.trust import SCOPE_PREFIX, seed_roots
    from kbflow.ingest.reindex import reindex

    trust = seed_roots(settings.home) if any(s.startswith(SCOPE_PREFIX) for s in scopes) else {}
    own = {OPS_SCOPE: OPS_RUNBOOKS, **trust}
    for scope in scopes:
        summary = reindex([own.get(scope, seed_docs)], scope=scope, settings=settings)
        if not summary.ok:
            raise RuntimeError(f"seeding scope {scope!r} failed: {summary.failed}")


def live_source(settings: Settings) -> ResultSource:
    from kbflow.retrieval.lookup import lookup_knowledge

    def run(case: GoldenCase, mode: str) -> LookupResult:
        s = settings
        if case.context_char_budget is not None:
            s = settings.model_copy(update={"context_char_budget": case.context_char_budget})
        return lookup_knowledge(case.query, kb_scope=case.kb_scope, mode=mode, settings=s, caller="eval")

    return run


def _compact_candidates(result: LookupResult) -> dict[str, list[list[Any]]]:
    """Each attempt's ranked candidates as [evidenceKey, docId, kbScope, quality]: what the
    eval reads of them, small enough to commit."""
    return {
        attempt: [[h.evidence_key, h.doc_id, h.kb_scope, h.quality_score] for h in hits]
        for attempt, hits in result.candidates.items()
    }


def _restore_candidates(data: dict[str, list[list[Any]]]) -> dict[str, list[Hit]]:
    return {
        attempt: [
            Hit(
                evidence_key=key,
                doc_id=doc,
                kb_scope=scope,
                source=doc,
                original_rank=rank,
                score=0.0,
                score_label="hybrid",
                quality_score=quality,
            )
            for rank, (key, doc, scope, quality) in enumerate(rows, start=1)
        ]
        for attempt, rows in data.items()
    }


def write_fixtures(fixtures_dir: Path, results: dict[str, dict[str, LookupResult]]) -> list[Path]:
    fixtures_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for case_id, by_mode in results.items():
        path = fixtures_dir / f"{case_id}.json"
        payload = {
            "schema": FIXTURE_SCHEMA,
            "caseId": case_id,
            "results": {m: r.model_copy(update={"audit_id": None}).to_json() for m, r in by_mode.items()},
            "candidates": {m: _compact_candidates(r) for m, r in by_mode.items()},
        }
        path.write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


# --- one call for the CLI and the flow --------------------------------------------------------


class EvalOutcome:
    def __init__(
        self,
        report: dict[str, Any],
        diff: dict[str, Any] | None,
        fixtures: list[Path],
        baseline: dict[str, Any] | None = None,
    ) -> None:
        self.report, self.diff, self.fixtures, self.baseline = report, diff, fixtures, baseline

    @property
    def failed(self) -> list[str]:
        from kbflow.evaluation.report import failed_cases

        return failed_cases(self.report)

    @property
    def ok(self) -> bool:
        """Against a baseline: no regression (a case that failed there may still fail, and is
        listed). Without one: every case passes."""
        return self.diff["ok"] if self.diff is not None else not self.failed


def run_eval(
    *,
    source: str,
    modes: Sequence[str],
    settings: Settings,
    cases_path: Path = EVAL_ROOT / "cases" / "golden-cases.json",
    fixtures_dir: Path = EVAL_ROOT / "fixtures",
    compare_to: Path | None = None,
    scope: str | None = None,
) -> EvalOutcome:
    """source: offline | live | snapshot. Raises CaseFileError / BaselineError on bad input."""
    from kbflow.evaluation.cases import load_cases
    from kbflow.evaluation.report import check_report, diff_reports

    cases = load_cases(cases_path)
    if scope:
        cases = [c for c in cases if c.kb_scope == scope]
        if not cases:
            raise CaseFileError(f"{cases_path}: no case has kbScope {scope!r}")
    baseline = None
    if compare_to is not None:  # check before the (slow) run, so a bad baseline fails fast
        try:
            baseline = check_report(json.loads(compare_to.read_text(encoding="utf-8")), str(compare_to))
        except (OSError, json.JSONDecodeError) as exc:
            from kbflow.evaluation.report import BaselineError

            raise BaselineError(f"{compare_to}: cannot read baseline: {exc}") from exc
    if source == "offline":
        report, _ = evaluate(cases, modes, fixture_source(fixtures_dir), label="offline", settings=settings)
        fixtures: list[Path] = []
    else:
        seed_scopes(settings, sorted({c.kb_scope for c in cases}))
        report, results = evaluate(cases, modes, live_source(settings), label=source, settings=settings)
        fixtures = write_fixtures(fixtures_dir, results) if source == "snapshot" else []
        _record(settings, report, source)
    diff = diff_reports(report, baseline) if baseline is not None else None
    return EvalOutcome(report, diff, fixtures, baseline)


def _record(settings: Settings, report: dict[str, Any], source: str) -> None:
    """Keep the run in the eval history; a history that cannot be written never fails the eval."""
    from kbflow.core.sql import SqlStore
    from kbflow.evaluation.history import record_eval_run

    try:
        record_eval_run(SqlStore(settings.resolved_database_url), report, source)
    except Exception as exc:  # noqa: BLE001 - reported, the eval's own result stands
        log.warning("eval history not recorded: %s: %s", type(exc).__name__, exc)
