"""The one fallback: a category-filtered attempt that came back weak is retried unfiltered.

Only an attempt that had a category filter (from L0) and came back low quality is retried,
exactly once, as UNFILTERED_VECTOR_RETRY with the original query and the same scope(s). The
retry replaces the first result (no merge) and is accepted even if still weak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kbflow.retrieval.contracts import AttemptTrace
from kbflow.retrieval.postprocess import Processed

RETRY = "UNFILTERED_VECTOR_RETRY"

Attempt = Callable[[str, "str | None"], tuple[Processed, AttemptTrace]]  # (name, category) -> result


@dataclass
class Selected:
    """The attempt whose result is delivered, and every attempt made."""

    processed: Processed
    name: str
    attempts: list[AttemptTrace]
    fallback_reason: str | None = None


def first_attempt_name(category_filter: str | None) -> str:
    return "FILTERED_VECTOR" if category_filter else "UNFILTERED_VECTOR"


def with_fallback(attempt: Attempt, category_filter: str | None, enabled: bool = True) -> Selected:
    """Run the first attempt and, when the rule says so, the one retry."""
    name = first_attempt_name(category_filter)
    processed, trace = attempt(name, category_filter)
    selected = Selected(processed, name, [trace])
    if not (category_filter and processed.low_quality and enabled):
        return selected
    reason = "filtered_vector_no_evidence" if not processed.ranked else "filtered_vector_low_quality"
    retried, retry_trace = attempt(RETRY, None)  # original query, scope kept
    return Selected(retried, RETRY, [trace, retry_trace], reason)
