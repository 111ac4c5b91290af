"""Pre-retrieval L0 navigation: narrow the search boundary from the query, never decide it.

The query's terms (words, 2-3 word phrases, and jieba tokens for Chinese) are matched against
the scope's `l0_terms` with one bound `IN` query. The category with the most matches becomes
the `categoryFilter` (if it clearly leads); matches per document become hit reasons. Nothing
here changes a score or an order — and the fallback can always overrule the filter.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from kbflow.core.analysis import CJK, jieba_module
from kbflow.core.sql import L0EntryRow, L0TermRow
from kbflow.retrieval.contracts import L0Navigation

MIN_CATEGORY_MATCHES = 2
MAX_TITLES = 5
_WORD = re.compile(r"[\w][\w.\-]*", re.UNICODE)
REASON_BY_KIND = {
    "keyword": "l0_keyword_overlap",
    "entity": "l0_entity_overlap",
    "domain": "l0_domain_overlap",
    "category": "l0_category_overlap",
    "title": "l0_title_overlap",
}


def query_terms(query: str, max_ngram: int = 3) -> list[str]:
    """Candidate L0 terms of a query: normalized words and their 2..max_ngram-word phrases;
    for Chinese, jieba tokens and joins of adjacent tokens (the way the jieba analyzer cuts)."""
    text = query.lower()
    words = [w.strip(".-") for w in _WORD.findall(text)]
    words = [w for w in words if w]
    terms: list[str] = []
    for n in range(1, max_ngram + 1):
        terms += [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    if CJK.search(text):
        jieba = jieba_module()

        toks = [t.strip() for t in jieba.cut(text) if t.strip()]
        for n in range(1, max_ngram + 1):
            terms += ["".join(toks[i : i + n]) for i in range(len(toks) - n + 1)]
        terms += [t for t in jieba.cut_for_search(text) if t.strip()]
    terms.append(" ".join(text.split()))
    return list(dict.fromkeys(t for t in terms if t))[:400]


def navigate(
    session: Session, query: str, scopes: Sequence[str], exclude: Collection[str] = ()
) -> L0Navigation:
    """`exclude`: documents (by source) treated as absent, so a leave-out run gets no hint from
    the document it leaves out."""
    if not scopes:
        return L0Navigation()
    terms = query_terms(query)
    matches = session.execute(
        select(L0TermRow.kb_scope, L0TermRow.doc_id, L0TermRow.term, L0TermRow.kind).where(
            L0TermRow.kb_scope.in_(list(scopes)), L0TermRow.term.in_(terms)
        )
    ).all()
    if not matches:
        return L0Navigation()
    per_doc: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for scope, doc_id, term, kind in matches:
        if doc_id not in exclude:
            per_doc[(scope, doc_id)].add((term, kind))
    if not per_doc:
        return L0Navigation()
    # plain columns, not ORM rows: a common term can match hundreds of documents
    entries = {
        (scope, doc_id): (category, title)
        for scope, doc_id, category, title in session.execute(
            select(L0EntryRow.kb_scope, L0EntryRow.doc_id, L0EntryRow.category, L0EntryRow.title).where(
                L0EntryRow.kb_scope.in_(list(scopes)),
                L0EntryRow.doc_id.in_([d for _, d in per_doc]),
            )
        )
    }
    by_category: dict[str, int] = defaultdict(int)
    for key, found in per_doc.items():
        doc_category = entries.get(key, (None, None))[0]
        if doc_category:
            by_category[doc_category] += len(found)
    ranked = sorted(by_category.items(), key=lambda kv: (-kv[1], kv[0]))
    category = None
    if ranked and ranked[0][1] >= MIN_CATEGORY_MATCHES and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]):
        category = ranked[0][0]

    def of_kind(*kinds: str) -> list[str]:
        return sorted({t for found in per_doc.values() for t, k in found if k in kinds})

    docs_by_strength = sorted(per_doc, key=lambda k: (-len(per_doc[k]), k))
    return L0Navigation(
        category_filter=category,
        domain_hints=of_kind("domain", "category"),
        matched_keywords=of_kind("keyword", "title"),
        entities=of_kind("entity"),
        l0_titles=[entries[k][1] for k in docs_by_strength if k in entries][:MAX_TITLES],
        doc_reasons={
            f"{scope}:{doc_id}": sorted({REASON_BY_KIND[kind] for _, kind in per_doc[(scope, doc_id)]})
            for scope, doc_id in per_doc
        },
    )
