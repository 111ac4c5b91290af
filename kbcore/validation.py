"""Validation of every value that can reach a Milvus filter expression.

Milvus Lite does not support filter templates (`filter_params`), so values are checked against
a strict pattern and quoted here — the only place that builds filter literals. Anything that
does not match is rejected, never escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SCOPE_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
DOC_ID_PATTERN = SCOPE_PATTERN
# Categories come from human breadcrumbs (may be Chinese, may contain spaces): letters of any
# script, digits, space, '_', '-', '.', '&', '/'. No quote or backslash can pass.
CATEGORY_PATTERN = re.compile(r"[\w .&/-]{1,128}")


class InvalidValue(ValueError):
    """A user-controlled value failed validation; the message names the value and the rule."""


def validate_scope(value: str) -> str:
    if not isinstance(value, str) or not SCOPE_PATTERN.fullmatch(value):
        raise InvalidValue(f"invalid kb_scope {value!r}: must match [A-Za-z0-9_-]{{1,64}}")
    return value


def validate_doc_id(value: str) -> str:
    if not isinstance(value, str) or not DOC_ID_PATTERN.fullmatch(value):
        raise InvalidValue(f"invalid source/doc_id {value!r}: must match [A-Za-z0-9_-]{{1,64}}")
    return value


def validate_category(value: str) -> str:
    if not isinstance(value, str) or not CATEGORY_PATTERN.fullmatch(value):
        raise InvalidValue(
            f"invalid category {value!r}: letters, digits, space and _ - . & / only, at most 128"
        )
    return value


def literal(value: str) -> str:
    """Quote an already-validated value as a Milvus string literal."""
    if '"' in value or "\\" in value:  # defence in depth: validators above exclude both
        raise InvalidValue(f"refusing to quote {value!r}")
    return f'"{value}"'


def eq(field: str, value: str) -> str:
    return f"{field} == {literal(value)}"


def in_list(field: str, values: Iterable[str]) -> str:
    return f"{field} in [{', '.join(literal(v) for v in values)}]"
