"""Judge one LookupResult against its golden case: pass/fail with reasons a person can act on."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from kbflow.evaluation.cases import GoldenCase
from kbflow.retrieval.contracts import LookupResult, RagToolResult


@dataclass
class CaseOutcome:
    case_id: str
    passed: bool
    failures: list[str] = field(default_factory=list)
    ranked_doc_ids: list[str] = field(default_factory=list)  # evidence documents, first occurrence order
    hit_level: str | None = None
    first_expected_rank: int | None = None
    selected_attempt: str = ""
    fallback_reason: str | None = None
    fallback_triggered: bool = False
    evidence_status: str = ""
    strong_hit: bool = False
    negative: str | None = None  # near | off for unanswerable cases
    found: bool = False
    weak_only: bool = False  # evidence, but no relevance level (the first piece is weak)
    candidate_doc_ids: list[str] = field(default_factory=list)  # selected attempt, first occurrence order
    filtered_doc_ids: list[str] | None = None  # the FILTERED_VECTOR attempt's candidates, if there was one
    known_limit: str | None = None  # the case's stated reason why it cannot pass by design

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ranked_docs(result: LookupResult) -> list[str]:
    return list(dict.fromkeys(e.doc_id for e in result.evidence))


def candidate_docs(result: LookupResult, attempt: str | None = None) -> list[str]:
    """Document ids of an attempt's ranked candidates (default: the selected attempt)."""
    hits = result.candidates.get(attempt or result.retrieval_trace.selected_attempt, [])
    return list(dict.fromkeys(h.doc_id for h in hits))


def _ranking_failures(case: GoldenCase, result: LookupResult, docs: list[str]) -> list[str]:
    """The right documents, in the top k, from the right scope, with the expected text."""
    top_k = docs[: case.k]
    top_evidence = [e for e in result.evidence if e.doc_id in top_k]
    fails: list[str] = []
    missing = [d for d in case.expected_doc_ids if d not in top_k]
    if missing:
        fails.append(f"expected {missing} within top {case.k}, got {top_k}")
    forbidden = [d for d in case.forbidden_doc_ids if d in docs]
    if forbidden:
        fails.append(f"forbidden documents returned: {forbidden}")
    foreign = sorted({e.kb_scope for e in result.evidence if e.kb_scope != case.kb_scope})
    if foreign:
        fails.append(f"evidence from other scopes: {foreign}")
    crumbs = {e.breadcrumb for e in top_evidence}
    fails += [f"breadcrumb {c!r} not in top {case.k} evidence" for c in case.expected_breadcrumbs
              if c not in crumbs]
    text = " ".join(e.excerpt for e in top_evidence).lower()
    fails += [f"keyword {kw!r} not in top {case.k} evidence" for kw in case.expected_keywords
              if kw.lower() not in text]
    return fails


def _trace_failures(case: GoldenCase, result: LookupResult, agent: RagToolResult) -> list[str]:
    """The attempt chosen, the fallback, the status the agent sees and the reranked top."""
    trace = result.retrieval_trace
    fails: list[str] = []
    if case.expected_selected_attempt and trace.selected_attempt != case.expected_selected_attempt:
        fails.append(f"selected attempt {trace.selected_attempt}, expected {case.expected_selected_attempt}")
    allowed = case.allowed_fallback_reasons
    if allowed is not None and trace.fallback_reason not in allowed:
        fails.append(f"fallback reason {trace.fallback_reason!r} not in {case.allowed_fallback_reasons}")
    if case.expected_evidence_status is not None and agent.evidence_status != case.expected_evidence_status:
        fails.append(f"evidence status {agent.evidence_status}, expected {case.expected_evidence_status}")
    fails += _level_failures(case, result)
    fired = len(trace.attempts) > 1
    if case.expect_fallback is not None and fired != case.expect_fallback:
        fails.append(
            f"fallback {'fired' if fired else 'did not fire'}, "
            f"expected it {'to fire' if case.expect_fallback else 'not to fire'}"
        )
    if case.expected_rerank_top_source is not None:
        top = result.evidence[0].source if result.evidence else None
        if top != case.expected_rerank_top_source:
            fails.append(f"rerank top source {top!r}, expected {case.expected_rerank_top_source!r}")
    return fails


def _level_failures(case: GoldenCase, result: LookupResult) -> list[str]:
    """A level vouches for an answer: confident only when an expected document is among the
    evidence it vouches for (not weak), and never for a question the knowledge base cannot answer."""
    if case.expect_confident is None:
        return []
    level = result.relevance_level if result.found else None
    if case.expect_confident:
        strong = [e.doc_id for e in result.evidence if not e.weak]
        if level is None:
            return ["no relevance level (weak evidence only), expected REFERENCE or better"]
        if not any(d in case.expected_doc_ids for d in strong):
            return [f"level {level} vouches for {strong}, none of them expected"]
        return []
    return [f"level {level} on a question the knowledge base cannot answer"] if level else []


def _context_failures(case: GoldenCase, result: LookupResult) -> list[str]:
    """The context pack: its sources, its budget, per-document limits and truncation."""
    ctx, fails = result.context, []
    absent = [s for s in case.expected_context_sources if s not in ctx.included_sources]
    if absent:
        fails.append(f"context pack lacks {absent} (has {ctx.included_sources})")
    if case.max_evidence_per_document is not None:
        per_doc = Counter(e.doc_id for e in result.evidence)
        over = {d: n for d, n in per_doc.items() if n > case.max_evidence_per_document}
        if over:
            fails.append(f"more than {case.max_evidence_per_document} evidence per document: {over}")
    if case.context_char_budget is not None and ctx.used_chars > case.context_char_budget:
        fails.append(f"context used {ctx.used_chars} chars over budget {case.context_char_budget}")
    if case.expect_context_truncated is not None:
        cut = ctx.packed_text.endswith("...") or "...\n\n[" in ctx.packed_text or bool(ctx.omitted_sources)
        if cut != case.expect_context_truncated:
            fails.append(f"context truncated={cut}, expected {case.expect_context_truncated}")
    return fails


def judge(case: GoldenCase, result: LookupResult, agent: RagToolResult) -> CaseOutcome:
    trace = result.retrieval_trace
    docs = ranked_docs(result)
    fails = (
        _ranking_failures(case, result, docs)
        + _trace_failures(case, result, agent)
        + _context_failures(case, result)
    )
    fired = len(trace.attempts) > 1
    first = next((i for i, d in enumerate(docs, start=1) if d in case.expected_doc_ids), None)
    return CaseOutcome(
        case_id=case.id,
        passed=not fails,
        failures=fails,
        ranked_doc_ids=docs,
        hit_level=result.relevance_level,
        first_expected_rank=first,
        selected_attempt=trace.selected_attempt,
        fallback_reason=trace.fallback_reason,
        fallback_triggered=fired,
        evidence_status=agent.evidence_status,
        strong_hit=first is not None and first <= case.k and result.relevance_level == "PRECISE",
        negative=case.negative,
        found=result.found,
        weak_only=result.found and result.relevance_level is None,
        candidate_doc_ids=candidate_docs(result),
        filtered_doc_ids=candidate_docs(result, "FILTERED_VECTOR")
        if "FILTERED_VECTOR" in result.candidates
        else None,
        known_limit=case.known_limit,
    )
