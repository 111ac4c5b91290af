"""Build and store the L0 navigation entry of a document (SPEC §2.4).

Keywords come from the frontmatter and the headings; entities are identifiers found in the
body (`max_connections`, `HikariCP`, `spring.datasource.url`, inline code). Terms are stored
normalized (lowercased, trimmed) in `l0_terms` so the read side can match a query's terms with
one indexed lookup.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, insert
from sqlalchemy.orm import Session

from kbflow.core.sql import L0EntryRow, L0TermRow
from kbflow.ingest.chunking import Chunk
from kbflow.ingest.parsing import ParsedDocument

MAX_ENTITIES = 40
_ENTITY_PATTERNS = [
    re.compile(r"`([^`\s]{2,64})`"),  # inline code without spaces
    re.compile(r"\b([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+)\b"),  # snake_case / SCREAMING_CASE
    re.compile(r"\b([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)\b"),  # CamelCase, HikariCP
    re.compile(r"\b([a-z]+[0-9]*(?:[A-Z][a-z0-9]*)+)\b"),  # camelCase
    re.compile(r"\b([A-Z]{2,}[a-z]+[A-Za-z]*)\b"),  # OOMKilled, CrashLoopBackOff-like
    re.compile(r"\b([a-z][a-z0-9-]*(?:\.[a-z0-9-]+){2,})\b"),  # dotted config keys
]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


@dataclass
class L0Entry:
    kb_scope: str
    doc_id: str
    title: str
    breadcrumb: str
    category: str
    domains: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)

    def terms(self) -> list[tuple[str, str]]:
        """(normalized term, kind) pairs, without duplicates."""
        pairs = [(self.title, "title"), (self.category, "category")]
        pairs += [(d, "domain") for d in self.domains]
        pairs += [(k, "keyword") for k in self.keywords]
        pairs += [(e, "entity") for e in self.entities]
        seen: dict[tuple[str, str], None] = {}
        for term, kind in pairs:
            norm = normalize_term(term)
            if norm:
                seen.setdefault((norm, kind), None)
        return list(seen)


def normalize_term(term: str) -> str:
    return " ".join(term.lower().split())[:256]


def extract_entities(body: str) -> list[str]:
    counts: Counter[str] = Counter()
    prose = _FENCE.sub(" ", body)  # code blocks are full of noise identifiers
    for pattern in _ENTITY_PATTERNS:
        for m in pattern.finditer(prose):
            value = m.group(1).strip(".,;:()[]{}")
            if len(value) >= 3:
                counts[value] += 1
    return [e for e, _ in counts.most_common(MAX_ENTITIES)]


def build_l0_entry(doc: ParsedDocument, chunks: Sequence[Chunk]) -> L0Entry:
    keywords = list(dict.fromkeys(doc.keywords))
    for chunk in chunks:
        for heading in chunk.heading_path:
            if heading != doc.title and heading not in keywords:
                keywords.append(heading)
    return L0Entry(
        kb_scope=doc.kb_scope,
        doc_id=doc.doc_id,
        title=doc.title,
        breadcrumb=doc.breadcrumb_text,
        category=doc.category,
        domains=doc.domains,
        keywords=keywords,
        entities=extract_entities(doc.body),
    )


def write_l0(session: Session, entry: L0Entry) -> None:
    """Replace the document's entry and terms (inside the caller's transaction)."""
    write_l0_many(session, entry.kb_scope, [entry])


def write_l0_many(session: Session, kb_scope: str, entries: Sequence[L0Entry]) -> None:
    """Replace many documents' entries and terms at once: one delete and one multi-row insert
    per table (a reindex writes thousands)."""
    if not entries:
        return
    delete_l0(session, kb_scope, [e.doc_id for e in entries])
    fields = ("kb_scope", "doc_id", "title", "breadcrumb", "category", "domains", "keywords", "entities")
    session.execute(insert(L0EntryRow), [{f: getattr(e, f) for f in fields} for e in entries])
    terms = [
        {"kb_scope": kb_scope, "doc_id": e.doc_id, "term": term, "kind": kind}
        for e in entries
        for term, kind in e.terms()
    ]
    if terms:
        session.execute(insert(L0TermRow), terms)


def delete_l0(session: Session, kb_scope: str, doc_ids: Sequence[str]) -> None:
    if not doc_ids:
        return
    session.execute(delete(L0TermRow).where(L0TermRow.kb_scope == kb_scope, L0TermRow.doc_id.in_(doc_ids)))
    session.execute(delete(L0EntryRow).where(L0EntryRow.kb_scope == kb_scope, L0EntryRow.doc_id.in_(doc_ids)))
