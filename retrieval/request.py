"""A lookup's input, checked and normalized before anything is searched: bad input is a
LookupRejected whose message says what to give instead."""

from __future__ import annotations

from collections.abc import Sequence

from kbflow.core.errors import InputError
from kbflow.core.settings import Settings
from kbflow.core.validation import validate_scope
from kbflow.retrieval.assemble import Request

MODES = ("hybrid", "dense", "bm25")


class LookupRejected(InputError, ValueError):
    """Bad lookup input (empty query, invalid scope or mode); the message says which."""


def excluded_sources(exclude: str | Sequence[str]) -> tuple[str, ...]:
    """`exclude` as sources: a string is one source (never its characters); anything else that
    is not a list of strings is refused rather than silently matching nothing."""
    if isinstance(exclude, str):
        return (exclude,)
    items = tuple(exclude)
    if not all(isinstance(x, str) for x in items):
        wrong = repr(exclude)[:200]
        raise LookupRejected(f"exclude names documents by source: a string or a list of strings, not {wrong}")
    return tuple(sorted(set(items)))


class UnknownScope(LookupRejected):
    """No scope of that name: a typo is an error, never "no usable evidence" (nor a knowledge
    gap). Scopes are case-sensitive."""


def unknown_scope_message(scope: str, scopes: list[str]) -> str:
    import difflib

    folded = {s.lower(): s for s in scopes}
    close = difflib.get_close_matches(scope, scopes, n=1, cutoff=0.6)
    near = folded.get(scope.lower()) or (close[0] if close else None)
    hint = f"; did you mean {near!r}?" if near else ""
    shown = ", ".join(scopes[:20]) + (f" and {len(scopes) - 20} more" if len(scopes) > 20 else "")
    return f"no scope {scope!r} (scopes are case-sensitive): the scopes are {shown}{hint}"


def checked_request(s: Settings, query: str, kb_scope: str | None, mode: str | None) -> Request:
    """The lookup's input, checked and normalized; bad input is a LookupRejected."""
    if not isinstance(query, str) or not query.strip():
        raise LookupRejected("query is empty: give the symptom, error message or question to look up")
    mode = mode or s.search_mode
    if mode not in MODES:
        raise LookupRejected(f"invalid mode {mode!r}: use one of {', '.join(MODES)}")
    kb_scope = kb_scope if kb_scope is not None else (s.kb_scope or None)
    if kb_scope:
        try:
            validate_scope(kb_scope)
        except ValueError as exc:
            raise LookupRejected(str(exc)) from exc
    query = " ".join(query.split())
    return Request(query[: s.max_query_chars], kb_scope, mode, len(query) > s.max_query_chars)
