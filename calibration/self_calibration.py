"""Calibration data without labels: pseudo-queries asked with their document in the scope
(answerable) and left out (near-domain), and the leave-out twin of any labelled query.

Both run through the real lookup (`exclude` leaves documents out of L0 and both legs), so the
signals are the ones a user's lookups will have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from kbflow.calibration.calibrate import LabelledQuery
from kbflow.calibration.labels import Signals, labelled_hits, own_signals, selected_hits
from kbflow.calibration.self_queries import pseudo_queries
from kbflow.core.chunk_store import ChunkRow
from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow

LEFT_OUT = ":left-out"


@dataclass(frozen=True)
class Asked:
    """A query whose answer is known: its text, scope and the documents (sources) that answer it."""

    qid: str
    text: str
    kb_scope: str
    answers: tuple[str, ...]
    dataset: str


def scope_chunks(settings: Settings, scope: str) -> list[ChunkRow]:
    """Every chunk of the scope's indexed documents, read back from the store."""
    from kbflow.core.stores import open_stores
    from kbflow.retrieval.lookup import get_retriever

    targets = get_retriever(settings).targets(scope)
    if not targets:
        raise ValueError(f"scope {scope!r} is not indexed: run `kbflow reindex` first")
    stores = open_stores(settings)
    with stores.sql.session() as session:
        sources = session.scalars(
            select(DocumentRow.doc_id).where(DocumentRow.kb_scope == scope, DocumentRow.status == "indexed")
        ).all()
    return stores.chunks.read_docs(targets[0].alias, scope, sorted(sources))


def self_asked(settings: Settings, scope: str, max_docs: int) -> list[Asked]:
    return [
        Asked(q.qid, q.text, scope, (q.source,), f"self:{q.kind}")
        for q in pseudo_queries(scope_chunks(settings, scope), max_docs=max_docs)
    ]


def run_pairs(
    asked: Sequence[Asked],
    settings: Settings,
    depth: int,
    with_answer: bool = True,
    signals: Signals = own_signals,
) -> list[LabelledQuery]:
    """Each query asked with its answer left out (kind `near`) and, when `with_answer`, as it is
    (kind `answerable`). Scopes whose quality is lexical (a model that cannot embed them) are
    skipped, as in the labelled calibration."""
    from kbflow.retrieval.lookup import lookup_knowledge

    out: list[LabelledQuery] = []
    for a in asked:
        kinds = (("answerable", ()), ("near", a.answers)) if with_answer else (("near", a.answers),)
        for kind, exclude in kinds:
            r = lookup_knowledge(
                a.text,
                kb_scope=a.kb_scope,
                mode="hybrid",
                settings=settings,
                depth=depth,
                exclude=exclude,
                caller="eval",
            )
            hits = selected_hits(r)
            if any(h.quality_signal == "lexical" for h in hits):
                break
            qid = a.qid if kind == "answerable" else a.qid + LEFT_OUT
            model = r.retrieval_trace.models.get(a.kb_scope, "")
            relevant = lambda h, answers=a.answers: h.doc_id in answers  # noqa: E731
            labelled = labelled_hits(a.text, hits, relevant, a.kb_scope, exclude, signals)
            out.append(LabelledQuery(qid, a.dataset, kind, labelled, model))
    return out


def golden_asked() -> list[Asked]:
    """The answerable golden cases, with the documents that answer them."""
    from kbflow.evaluation.cases import load_cases
    from kbflow.evaluation.runner import EVAL_ROOT

    return [
        Asked(c.id, c.query, c.kb_scope, tuple(c.expected_doc_ids), "golden")
        for c in load_cases(EVAL_ROOT / "cases" / "golden-cases.json")
        if c.expected_doc_ids and c.kb_scope
    ]


def beir_asked(root: Path, scope: str) -> list[Asked]:
    """A BEIR dataset's judged queries with their relevant documents (sources are the ids)."""
    from kbflow.evaluation.beir import load_beir

    _corpus, queries, qrels = load_beir(root)
    name = root.name if root.name != "beir" else root.parent.name
    return [
        Asked(q, queries[q], scope, tuple(sorted(d for d, g in rel.items() if g > 0)), name)
        for q, rel in sorted(qrels.items())
        if q in queries and any(g > 0 for g in rel.values())
    ]
