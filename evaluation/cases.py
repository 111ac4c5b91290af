"""Golden cases: one behaviour to protect per case, expectations from design intent.

Assertions are about what a user sees and how the pipeline behaved — expected documents within
top K, breadcrumbs, evidence keywords, the selected attempt, allowed fallback reasons, the
evidence status, the context pack's sources, the rerank top source — never raw scores, chunk
ids or the full order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbflow.core.errors import InputError
from kbflow.core.validation import validate_scope

CASES_SCHEMA = "kbflow.golden-cases/1"


class CaseFileError(InputError, ValueError):
    """A cases or fixture file is malformed; the message names the file, the case and the field."""


class GoldenCase(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,80}$")
    behaviour: str = ""
    query: str = Field(min_length=1)
    kb_scope: str = Field(alias="kbScope")
    k: int = Field(5, alias="K", ge=1, le=50)
    expected_doc_ids: list[str] = Field(default_factory=list, alias="expectedDocIds")
    forbidden_doc_ids: list[str] = Field(default_factory=list, alias="forbiddenDocIds")
    expected_breadcrumbs: list[str] = Field(default_factory=list, alias="expectedBreadcrumbs")
    expected_keywords: list[str] = Field(default_factory=list, alias="expectedKeywords")
    expected_selected_attempt: (
        Literal["FILTERED_VECTOR", "UNFILTERED_VECTOR", "UNFILTERED_VECTOR_RETRY"] | None
    ) = Field(None, alias="expectedSelectedAttempt")
    allowed_fallback_reasons: (
        list[Literal["filtered_vector_low_quality", "filtered_vector_no_evidence"] | None] | None
    ) = Field(None, alias="allowedFallbackReasons")
    expect_fallback: bool | None = Field(None, alias="expectFallback")
    # None: either (a near-domain question may be refused or answered weakly; expectConfident says)
    expected_evidence_status: Literal["FOUND", "NO_EVIDENCE"] | None = Field(alias="expectedEvidenceStatus")
    # True: REFERENCE or better with an expected document among the non-weak evidence; False: no
    # level (weak evidence only, or none)
    expect_confident: bool | None = Field(None, alias="expectConfident")
    expected_context_sources: list[str] = Field(default_factory=list, alias="expectedContextSources")
    expected_rerank_top_source: str | None = Field(None, alias="expectedRerankTopSource")
    max_evidence_per_document: int | None = Field(None, alias="maxEvidencePerDocument", ge=1)
    context_char_budget: int | None = Field(None, alias="contextCharBudget", ge=100)
    expect_context_truncated: bool | None = Field(None, alias="expectContextTruncated")
    # unanswerable cases: near = same products, a question the corpus does not answer; off = unrelated
    negative: Literal["near", "off"] | None = None
    # why the pipeline, by its contract, does not do what the case asks: shown beside its failure
    # in every report (the case still fails; it is a limit stated, not a pass)
    known_limit: str | None = Field(None, alias="knownLimit")

    @field_validator("kb_scope")
    @classmethod
    def _scope(cls, v: str) -> str:
        return validate_scope(v)

    @property
    def graded(self) -> dict[str, int]:
        """qrels for IR metrics: every expected document is relevant (grade 1)."""
        return {d: 1 for d in self.expected_doc_ids}


def load_cases(path: Path) -> list[GoldenCase]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CaseFileError(f"{path}: cannot read cases: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != CASES_SCHEMA:
        raise CaseFileError(f'{path}: expected an object with "schema": "{CASES_SCHEMA}" and "cases"')
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise CaseFileError(f'{path}: "cases" must be a non-empty list')
    cases, seen = [], set()
    for i, raw in enumerate(raw_cases):
        case_id = raw.get("id", f"#{i}") if isinstance(raw, dict) else f"#{i}"
        try:
            case = GoldenCase.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "(case)"
            raise CaseFileError(f"{path}: case {case_id!r}: field {field!r}: {err['msg']}") from exc
        if case.id in seen:
            raise CaseFileError(f"{path}: case {case.id!r}: duplicate id")
        seen.add(case.id)
        cases.append(case)
    return cases
