"""Validation of every value that can reach a Milvus filter expression.

Milvus Lite does not support filter templates (`filter_params`), so values are checked against
a strict pattern and quoted here — the only place that builds filter literals. Anything that
does not match is rejected, never escaped.

A document's `source` is free text (URLs, paths, long slugs), so it never reaches a filter at
all: Milvus rows are keyed and filtered by `doc_key(source)`, which only ever contains
`[A-Za-z0-9_~-]`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

from kbflow.core.errors import InputError

SCOPE_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
# ids of indexes built before free-text sources: they are their own key, so those keep serving
LEGACY_ID_PATTERN = SCOPE_PATTERN
SOURCE_MAX_CHARS = 512
# Categories come from human breadcrumbs (may be Chinese, may contain spaces): letters of any
# script, digits, space, '_', '-', '.', '&', '/'. No quote or backslash can pass.
CATEGORY_PATTERN = re.compile(r"[\w .&/-]{1,128}")


class InvalidValue(InputError, ValueError):
    """A user-controlled value failed validation; the message names the value and the rule."""


def validate_scope(value: str) -> str:
    if not isinstance(value, str) or not SCOPE_PATTERN.fullmatch(value):
        raise InvalidValue(f"invalid kb_scope {value!r}: must match [A-Za-z0-9_-]{{1,64}}")
    return value


def validate_source(value: str) -> str:
    """Any non-empty string of at most 512 characters without control characters."""
    if not isinstance(value, str) or not value:
        raise InvalidValue("invalid source: it must be a non-empty string")
    if len(value) > SOURCE_MAX_CHARS:
        raise InvalidValue(
            f"invalid source {value[:60]!r}…: {len(value)} characters, at most {SOURCE_MAX_CHARS}"
        )
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        raise InvalidValue(f"invalid source {value[:80]!r}: control character U+{ord(bad):04X}")
    return value


def doc_key(source: str) -> str:
    """The Milvus key of a document: the source itself when it is a plain id (so indexes built
    before free-text sources keep working), else `~` and a SHA-256 prefix of it."""
    if LEGACY_ID_PATTERN.fullmatch(source):
        return source
    return "~" + hashlib.sha256(validate_source(source).encode("utf-8")).hexdigest()[:40]


def validate_category(value: str) -> str:
    if not isinstance(value, str) or not CATEGORY_PATTERN.fullmatch(value):
        raise InvalidValue(
            f"invalid category {value!r}: letters, digits, space and _ - . & / only, at most 128"
        )
    return value


def literal(value: str) -> str:
    """Quote an already-validated value as a Milvus string literal."""
    if '"' in value or "\\" in value or "'" in value:  # defence in depth: validators exclude these
        raise InvalidValue(f"refusing to quote {value!r}")
    return f'"{value}"'


def eq(field: str, value: str) -> str:
    return f"{field} == {literal(value)}"


def in_list(field: str, values: Iterable[str]) -> str:
    return f"{field} in [{', '.join(literal(v) for v in values)}]"


def not_in_list(field: str, values: Iterable[str]) -> str:
    return f"{field} not in [{', '.join(literal(v) for v in values)}]"
