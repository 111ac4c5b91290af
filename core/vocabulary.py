"""A scope's vocabulary: in how many of its documents each analysed term occurs.

A term that every document of a scope has (the product's name, in a knowledge base about one
product) says nothing about which document answers a question; a term no document has is what a
question asks that the scope cannot answer. The gate reads both (`retrieval/support.py`).

The counts live in SQL (`scope_terms`, with each document's terms in `document_terms`) and are
kept in step by every write: a written document's old terms are counted off and its new ones on,
a removed document's counted off, in the same transaction as its records. A lookup reads the
counts of its own terms only, so the cost does not grow with the scope.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from kbflow.core.analysis import chunk_terms
from kbflow.core.sql import DocumentTermsRow, ScopeTermRow

DOC_COUNT = ""  # the term under which a scope's number of counted documents is kept
MAX_TERM_CHARS = 256  # the column's width; a longer "term" is noise, never a question's word


@dataclass(frozen=True)
class Vocabulary:
    """The document frequencies of the terms a lookup asked about, in a scope of `docs`
    documents. `docs` 0 means the scope has no vocabulary yet (built before kbflow kept one):
    nothing is then absent and nothing is everywhere."""

    docs: int = 0
    df: Mapping[str, int] = field(default_factory=dict)

    def absent(self, term: str) -> bool:
        return self.docs > 0 and self.df.get(term, 0) == 0

    def everywhere(self, term: str) -> bool:
        """In every document of a scope of two or more: no evidence for any one of them."""
        return self.docs > 1 and self.df.get(term, 0) >= self.docs


def document_terms(chunks: Iterable[tuple[str, str, str]]) -> frozenset[str]:
    """The analysed terms of a document's chunks ((title, breadcrumb, text) each)."""
    out: set[str] = set()
    for title, breadcrumb, text in chunks:
        out |= chunk_terms(title, breadcrumb, text)
    return frozenset(t for t in out if t and len(t) <= MAX_TERM_CHARS)


def _old_terms(session: Session, scope: str, doc_ids: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for start in range(0, len(doc_ids), 500):
        part = doc_ids[start : start + 500]
        rows = session.execute(
            select(DocumentTermsRow.doc_id, DocumentTermsRow.terms).where(
                DocumentTermsRow.kb_scope == scope, DocumentTermsRow.doc_id.in_(part)
            )
        )
        out.update({d: t for d, t in rows})
    return out


def count_documents(session: Session, scope: str, terms_by_doc: Mapping[str, Iterable[str]]) -> None:
    """Record these documents' terms, replacing what was counted for them before (inside the
    caller's transaction)."""
    if not terms_by_doc:
        return
    docs = list(terms_by_doc)
    old = _old_terms(session, scope, docs)
    delta: Counter[str] = Counter()
    rows = []
    for doc in docs:
        new = sorted(set(terms_by_doc[doc]))
        if doc in old:
            delta.subtract(old[doc].split())
        else:
            delta[DOC_COUNT] += 1
        delta.update(new)
        rows.append({"kb_scope": scope, "doc_id": doc, "terms": " ".join(new)})
    _delete_rows(session, scope, list(old))
    session.execute(insert(DocumentTermsRow), rows)
    _apply(session, scope, delta)


def forget_documents(session: Session, scope: str, doc_ids: Sequence[str]) -> None:
    """Count these documents off the scope's vocabulary (they were removed)."""
    old = _old_terms(session, scope, list(doc_ids))
    if not old:
        return
    delta: Counter[str] = Counter({DOC_COUNT: -len(old)})
    for terms in old.values():
        delta.subtract(terms.split())
    _delete_rows(session, scope, list(old))
    _apply(session, scope, delta)


def forget_scope(session: Session, scope: str) -> None:
    session.execute(delete(DocumentTermsRow).where(DocumentTermsRow.kb_scope == scope))
    session.execute(delete(ScopeTermRow).where(ScopeTermRow.kb_scope == scope))


def counted_documents(session: Session, scope: str) -> set[str]:
    return set(session.scalars(select(DocumentTermsRow.doc_id).where(DocumentTermsRow.kb_scope == scope)))


def _delete_rows(session: Session, scope: str, doc_ids: list[str]) -> None:
    for start in range(0, len(doc_ids), 500):
        session.execute(
            delete(DocumentTermsRow).where(
                DocumentTermsRow.kb_scope == scope, DocumentTermsRow.doc_id.in_(doc_ids[start : start + 500])
            )
        )


def _apply(session: Session, scope: str, delta: Counter[str]) -> None:
    """Add `delta` to the scope's counts; a count that reaches zero is removed."""
    changes = {t: d for t, d in delta.items() if d}
    if not changes:
        return
    existing: set[str] = set()
    terms = list(changes)
    for start in range(0, len(terms), 500):
        existing |= set(
            session.scalars(
                select(ScopeTermRow.term).where(
                    ScopeTermRow.kb_scope == scope, ScopeTermRow.term.in_(terms[start : start + 500])
                )
            )
        )
    new = [{"kb_scope": scope, "term": t, "df": d} for t, d in changes.items() if t not in existing and d > 0]
    if new:
        session.execute(insert(ScopeTermRow), new)
    by_step: dict[int, list[str]] = {}
    for t, d in changes.items():
        if t in existing:
            by_step.setdefault(d, []).append(t)
    for step, group in by_step.items():  # one UPDATE per distinct change (mostly +1 and -1)
        for start in range(0, len(group), 500):
            session.execute(
                update(ScopeTermRow)
                .where(ScopeTermRow.kb_scope == scope, ScopeTermRow.term.in_(group[start : start + 500]))
                .values(df=ScopeTermRow.df + step)
            )
    if any(d < 0 for d in changes.values()):
        session.execute(delete(ScopeTermRow).where(ScopeTermRow.kb_scope == scope, ScopeTermRow.df <= 0))


def read(session: Session, scope: str, terms: Iterable[str], exclude: Sequence[str] = ()) -> Vocabulary:
    """The counts of `terms` in `scope`, as if the documents in `exclude` were not indexed."""
    wanted = sorted({t for t in terms if t and len(t) <= MAX_TERM_CHARS} | {DOC_COUNT})
    df: Counter[str] = Counter(
        dict(
            session.execute(
                select(ScopeTermRow.term, ScopeTermRow.df).where(
                    ScopeTermRow.kb_scope == scope, ScopeTermRow.term.in_(wanted)
                )
            ).all()
        )
    )
    if exclude:
        left_out = _old_terms(session, scope, list(exclude))
        df[DOC_COUNT] -= len(left_out)
        for doc_terms in left_out.values():
            df.subtract(t for t in doc_terms.split() if t in df)
    docs = max(0, df.pop(DOC_COUNT, 0))
    return Vocabulary(docs, {t: n for t, n in df.items() if n > 0})


def everywhere_terms(
    session: Session, scope: str, min_documents: int = 3, share: float = 1.0
) -> frozenset[str]:
    """The terms (at least) `share` of the documents of `scope` have — its product's name, in a
    knowledge base about one product — when it has at least `min_documents`: they say nothing
    about a question's topic inside the scope."""
    docs = scope_documents_counted(session, scope)
    if docs < min_documents:
        return frozenset()
    rows = session.scalars(
        select(ScopeTermRow.term).where(
            ScopeTermRow.kb_scope == scope,
            ScopeTermRow.df >= max(2, math.ceil(share * docs)),
            ScopeTermRow.term != DOC_COUNT,
        )
    )
    return frozenset(rows)


def scope_documents_counted(session: Session, scope: str) -> int:
    return int(
        session.scalar(
            select(func.coalesce(func.max(ScopeTermRow.df), 0)).where(
                ScopeTermRow.kb_scope == scope, ScopeTermRow.term == DOC_COUNT
            )
        )
        or 0
    )
