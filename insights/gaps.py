"""Knowledge gaps: what agents asked that the knowledge base could not answer, read from the
lookup audit of a time window.

The lookups answered "no usable evidence" or with weak evidence only are grouped by meaning
(their embeddings, insights/clustering.py) and each group is named by its salient terms; in a
scope about one product, both read what a question asks less the terms every document has (the
product's name says nothing about a gap). The lookups the fallback really rescued are listed
apart, and so are the documents never returned and the most returned. Eval traffic
(`caller = eval`) is left out.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import select

from kbflow.core.evidence_keys import source_of
from kbflow.core.sql import DocumentRow, LookupAuditRow, ScopeRow, SqlStore
from kbflow.insights.clustering import (
    DEFAULT_METHOD,
    REFERENCE_QUESTIONS,
    cluster,
    salient_terms,
    unit_rows,
    without_terms,
)

# a term in this share of a scope's documents says nothing about a gap's topic: the product's
# name, and the product's core vocabulary (ticdc-zh's "同步" is in 6 of 7; with it kept, two of the
# 3 seeded Chinese gaps merge; bench/gaps.py, single-product)
EVERYWHERE_SHARE = 0.8
Embed = Callable[[str, list[str]], np.ndarray]  # (model id, texts) -> unit rows
Progress = Callable[[int], None]
_SINCE = re.compile(r"^(\d+)([hdw])$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str) -> timedelta:
    """`7d`, `24h`, `2w`: the window's length."""
    m = _SINCE.match(text.strip())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"--since {text!r}: give a length such as 24h, 7d or 4w")
    return timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


@dataclass
class Unanswered:
    """One weak or no-evidence lookup of the window."""

    id: int
    at: datetime
    query: str  # empty when the text was not kept
    kb_scope: str | None
    caller: str
    outcome: str
    top_key: str | None
    top_quality: float | None
    vector: np.ndarray | None
    model: str | None
    query_hash: str | None = None
    topic: str | None = None  # the question less its scope's everywhere terms, when it had any

    @property
    def key(self) -> str:
        """The same question asked again has the same key."""
        return self.query_hash or self.query or f"#{self.id}"


@dataclass
class GapGroup:
    label: str
    count: int
    callers: int
    examples: list[str]
    nearest: str | None  # the document that came nearest most often: "title (doc id)"
    nearest_quality: float | None
    first_seen: str
    last_seen: str
    ids: list[int] = field(default_factory=list)


@dataclass
class Rescued:
    query: str
    misleading_category: str | None
    found: str | None
    at: str
    caller: str


@dataclass
class GapsReport:
    scope: str | None
    since: str
    until: str
    lookups: int
    unanswered: int
    ungrouped: int  # unanswered lookups with neither text nor embedding kept
    groups: list[GapGroup]
    rescued: list[Rescued]
    never_returned: list[str]
    most_returned: list[tuple[str, int]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def doc_of(evidence_key: str) -> str:
    return source_of(evidence_key)


def _at(row_time: datetime) -> datetime:
    return row_time if row_time.tzinfo else row_time.replace(tzinfo=UTC)


@dataclass
class Window:
    lookups: int = 0
    unanswered: list[Unanswered] = field(default_factory=list)
    returned: Counter = field(default_factory=Counter)  # (scope or None, doc id) -> lookups


def read_window(
    sql: SqlStore, scope: str | None, since: datetime, progress: Progress | None = None, batch: int = 2000
) -> Window:
    """The window's audit rows, read in batches of `batch` columns (never the full results)."""
    cols = (
        LookupAuditRow.id,
        LookupAuditRow.created_at,
        LookupAuditRow.query,
        LookupAuditRow.kb_scope,
        LookupAuditRow.caller,
        LookupAuditRow.outcome,
        LookupAuditRow.found,
        LookupAuditRow.relevance_level,
        LookupAuditRow.evidence_keys,
        LookupAuditRow.top_key,
        LookupAuditRow.top_quality,
        LookupAuditRow.query_vector,
        LookupAuditRow.vector_model,
        LookupAuditRow.query_hash,
    )
    stmt = select(*cols).where(LookupAuditRow.created_at >= since).order_by(LookupAuditRow.id)
    if scope:
        stmt = stmt.where(LookupAuditRow.kb_scope == scope)
    window = Window()
    with sql.session() as s:
        for row in s.execute(stmt.execution_options(yield_per=batch)):
            if row.caller == "eval":
                continue
            window.lookups += 1
            kind = row.outcome or ("none" if not row.found else "found" if row.relevance_level else "weak")
            for key in row.evidence_keys or ():
                window.returned[(row.kb_scope, doc_of(key))] += 1
            if kind != "found":
                vector = (
                    None if row.query_vector is None else np.frombuffer(row.query_vector, dtype=np.float16)
                )
                window.unanswered.append(
                    Unanswered(
                        row.id,
                        _at(row.created_at),
                        row.query,
                        row.kb_scope,
                        row.caller or "python",
                        kind,
                        row.top_key,
                        row.top_quality,
                        vector,
                        row.vector_model,
                        row.query_hash,
                    )
                )
            if progress and window.lookups % batch == 0:
                progress(batch)
    if progress:
        progress(window.lookups % batch)
    return window


def _embed_each(todo: dict[tuple[str, str], list[Unanswered]], embed: Embed) -> None:
    """Embed each (model, text) once, one call per model, and give every entry waiting on it
    the vector."""
    by_model: dict[str, list[str]] = defaultdict(list)
    for model, text in todo:
        by_model[model].append(text)
    for model, texts in by_model.items():
        for text, vector in zip(texts, embed(model, texts), strict=True):
            for e in todo[(model, text)]:
                e.vector = vector


def fill_vectors(entries: Sequence[Unanswered], scope_models: dict[str, str], embed: Embed) -> None:
    """Embed the text of rows kept without an embedding (rows written before kbflow kept them),
    once per distinct text, with the model of their scope."""
    todo: dict[tuple[str, str], list[Unanswered]] = defaultdict(list)
    fallback = next(iter(sorted(set(scope_models.values()))), None)
    for e in entries:
        if e.vector is None and e.query:
            e.model = scope_models.get(e.kb_scope or "", fallback)
            if e.model:
                todo[(e.model, e.query)].append(e)
    _embed_each(todo, embed)


def everywhere_by_scope(sql: SqlStore, scopes: Iterable[str]) -> dict[str, frozenset[str]]:
    """Per scope, the terms all its documents share (see core.vocabulary.everywhere_terms)."""
    from kbflow.core.vocabulary import everywhere_terms

    with sql.session() as s:
        found = {sc: everywhere_terms(s, sc, share=EVERYWHERE_SHARE) for sc in sorted(set(scopes))}
    return {scope: terms for scope, terms in found.items() if terms}


def retopic(
    entries: Sequence[Unanswered],
    everywhere: dict[str, frozenset[str]],
    scope_models: dict[str, str],
    embed: Embed,
) -> None:
    """Group and name questions by what they ask about, not by the product they all name: in a
    scope about one product, a question's everywhere terms are taken out and the rest embedded
    again (once per distinct text), as the lookup's model embeds queries."""
    todo: dict[tuple[str, str], list[Unanswered]] = defaultdict(list)
    for e in entries:
        terms = everywhere.get(e.kb_scope or "")
        model = e.model or scope_models.get(e.kb_scope or "")
        if not (terms and e.query and model):
            continue
        topic = without_terms(e.query, terms)
        if topic != e.query:
            e.topic, e.model = topic, model
            todo[(model, topic)].append(e)
    _embed_each(todo, embed)


def _titles(sql: SqlStore, doc_ids: Iterable[str]) -> dict[str, str]:
    wanted = sorted(set(doc_ids))
    out: dict[str, str] = {}
    with sql.session() as s:
        for i in range(0, len(wanted), 500):
            rows = s.execute(
                select(DocumentRow.doc_id, DocumentRow.title).where(
                    DocumentRow.doc_id.in_(wanted[i : i + 500])
                )
            )
            out.update({r.doc_id: r.title for r in rows})
    return out


def _examples(members: list[Unanswered], n: int = 3) -> list[str]:
    """The group's most typical questions: nearest the centre of the group's meaning (an
    outlier the grouping let in is not what the group is about), in arrival order without
    vectors."""
    asked = list(dict.fromkeys(m.query for m in members if m.query))
    vectors = {m.query: m.vector for m in members if m.query and m.vector is not None}
    if len(vectors) < len(asked) or len(asked) <= n:
        return asked[:n]
    rows = unit_rows(np.array([vectors[q] for q in asked]))
    closeness = rows @ rows.mean(axis=0)
    return [asked[i] for i in np.argsort(-closeness, kind="stable")[:n]]


def _group(members: list[Unanswered], label: str, titles: dict[str, str]) -> GapGroup:
    nearest = Counter(doc_of(m.top_key) for m in members if m.top_key).most_common(1)
    doc = nearest[0][0] if nearest else None
    quality = max(
        (m.top_quality or 0.0 for m in members if m.top_key and doc_of(m.top_key) == doc), default=None
    )
    examples = _examples(members)
    times = sorted(m.at for m in members)
    return GapGroup(
        label=label,
        count=len(members),
        callers=len({m.caller for m in members}),
        examples=examples,
        nearest=f"{titles.get(doc) or doc} ({doc})" if doc else None,
        nearest_quality=None if quality is None else round(quality, 3),
        first_seen=times[0].isoformat(timespec="seconds"),
        last_seen=times[-1].isoformat(timespec="seconds"),
        ids=sorted(m.id for m in members),
    )


def group_unanswered(
    sql: SqlStore,
    entries: Sequence[Unanswered],
    method: str = DEFAULT_METHOD,
    threshold: float | None = None,
    embed: Embed | None = None,
) -> list[GapGroup]:
    """Groups of unanswered lookups by meaning, per embedding model, largest first. With
    `embed`, cosines are taken after removing what the model gives every text (centred on
    REFERENCE_QUESTIONS), so one threshold serves every model."""
    by_model: dict[str, list[Unanswered]] = defaultdict(list)
    for e in entries:
        if e.vector is not None and e.model:
            by_model[e.model].append(e)
    clusters: list[list[Unanswered]] = []
    for model, members in by_model.items():
        asked: dict[str, list[Unanswered]] = defaultdict(list)  # a question asked again is one point
        for m in members:
            asked[m.key].append(m)
        distinct = list(asked.values())
        reference = embed(model, list(REFERENCE_QUESTIONS)) if embed else None
        labels = cluster(np.stack([same[0].vector for same in distinct]), method, threshold, reference)
        grouped: dict[int, list[Unanswered]] = defaultdict(list)
        for same, label in zip(distinct, labels, strict=True):
            grouped[int(label)].extend(same)
        clusters.extend(grouped.values())
    clusters.sort(key=lambda c: (-len(c), min(m.id for m in c)))
    terms = salient_terms([[m.topic or m.query for m in c if m.query] for c in clusters])
    titles = _titles(sql, (doc_of(m.top_key) for c in clusters for m in c if m.top_key))
    return [
        _group(c, " · ".join(t) if t else "(question text not kept)", titles)
        for c, t in zip(clusters, terms, strict=True)
    ]


def model_embedder(settings: Any) -> Embed:
    """Queries embedded as the lookups embedded them: the scope's model, query prefix and all."""
    from kbflow.core.embedder import get_embedder
    from kbflow.core.models import split_model_id
    from kbflow.core.stores import query_threads

    def embed(model_id: str, texts: list[str]) -> np.ndarray:
        name, backend = split_model_id(model_id)
        e = get_embedder(
            name,
            settings.embedding_device,
            settings.embedding_batch_size,
            backend,
            settings.resolved_models_dir,
        )
        return e.encode_queries(texts, max(query_threads(settings), 1))

    return embed


def knowledge_gaps(
    sql: SqlStore,
    embed: Embed,
    *,
    scope: str | None = None,
    since: timedelta = timedelta(days=7),
    method: str = DEFAULT_METHOD,
    threshold: float | None = None,
    progress: Progress | None = None,
    now: datetime | None = None,
    center: bool = True,
) -> GapsReport:
    """The owner's view of one window: reads SQL only (a running `kbflow serve` may hold Milvus)."""
    from kbflow.insights.usage import document_usage, rescued_lookups

    until = now or datetime.now(UTC)
    start = until - since
    window = read_window(sql, scope, start, progress)
    with sql.session() as s:
        scope_models = {
            r.kb_scope: r.model_id for r in s.execute(select(ScopeRow.kb_scope, ScopeRow.model_id))
        }
    fill_vectors(window.unanswered, scope_models, embed)
    everywhere = everywhere_by_scope(sql, (e.kb_scope for e in window.unanswered if e.kb_scope))
    retopic(window.unanswered, everywhere, scope_models, embed)
    groups = group_unanswered(sql, window.unanswered, method, threshold, embed if center else None)
    never, most = document_usage(sql, scope, window.returned)
    return GapsReport(
        scope=scope,
        since=start.isoformat(timespec="seconds"),
        until=until.isoformat(timespec="seconds"),
        lookups=window.lookups,
        unanswered=len(window.unanswered),
        ungrouped=sum(1 for e in window.unanswered if e.vector is None),
        groups=groups,
        rescued=[Rescued(**r) for r in rescued_lookups(sql, scope, start)],
        never_returned=never,
        most_returned=most,
    )
