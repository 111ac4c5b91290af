"""BEIR-format datasets (corpus.jsonl, queries.jsonl, qrels/test.tsv): ingest into their own
scope through the normal reindex path, run every judged query through lookup_knowledge, and
report the same IR metrics as the golden cases."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from evaluation.cases import CaseFileError
from evaluation.metrics import aggregate
from kbcore.settings import Settings


def safe_id(raw: str) -> str:
    """BEIR ids are free-form; kbflow doc ids are [A-Za-z0-9_-]{1,64}."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", raw):
        return raw
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", raw).strip("-")[:50] or "doc"
    return f"{slug}-{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise CaseFileError(f"{path}:{n}: not JSON: {exc}") from exc
    return rows


def load_beir(
    root: Path, split: str = "test"
) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    for name in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / name).exists():
            raise CaseFileError(f"{root}: BEIR dataset lacks {name}")
    corpus = _jsonl(root / "corpus.jsonl")
    queries = {str(q["_id"]): q["text"] for q in _jsonl(root / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with (root / f"qrels/{split}.tsv").open(encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if not row or row[0] == "query-id":
                continue
            qid, did, grade = row[0], row[1], int(row[2])
            if grade > 0:
                qrels.setdefault(qid, {})[did] = grade
    return corpus, queries, qrels


def write_markdown_corpus(corpus: Sequence[dict], out: Path, scope: str) -> dict[str, str]:
    """One Markdown file per BEIR document; returns kbflow doc id -> original id."""
    out.mkdir(parents=True, exist_ok=True)
    mapping = {}
    for doc in corpus:
        original = str(doc["_id"])
        doc_id = safe_id(original)
        mapping[doc_id] = original
        title = " ".join(str(doc.get("title") or "").split())
        body = f"# {title}\n\n{doc.get('text', '')}\n" if title else f"{doc.get('text', '')}\n"
        fm = {"source": doc_id, "kb_scope": scope, "title": title or doc_id}
        front = yaml.safe_dump(fm, allow_unicode=True, sort_keys=False)
        (out / f"{doc_id}.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return mapping


def run_beir(root: Path, scope: str, settings: Settings, modes: Sequence[str]) -> dict[str, Any]:
    """Metrics at k = return_n: the pipeline returns at most that many evidence blocks."""
    from ingest.reindex import reindex
    from retrieval.lookup import lookup_knowledge

    k = settings.return_n
    corpus, queries, qrels = load_beir(root)
    mapping = write_markdown_corpus(corpus, settings.home / "beir" / scope, scope)
    summary = reindex([settings.home / "beir" / scope], scope=scope, settings=settings)
    judged = {q: r for q, r in qrels.items() if q in queries}
    report: dict[str, Any] = {
        "dataset": str(root),
        "scope": scope,
        "documents": len(corpus),
        "queries": len(judged),
        "k": k,
        "indexed": summary.to_dict()["added"],
        "modes": {},
    }
    for mode in modes:
        ranked = {}
        for qid in judged:
            result = lookup_knowledge(queries[qid], kb_scope=scope, mode=mode, settings=settings)
            ranked[qid] = [mapping.get(d, d) for d in dict.fromkeys(e.doc_id for e in result.evidence)]
        report["modes"][mode] = aggregate(judged, ranked, {q: k for q in judged})
    return report
