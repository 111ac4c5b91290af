"""The small-scope trust set: knowledge bases about one product, and the questions users ask them.

Each scope (`eval/trust/scopes.json`) is a handful of documents about one product, cut from
`seed-docs/` or written for the set (`eval/trust/docs/`). Its questions
(`eval/trust/questions/<scope>.json`) are answerable (they name the documents that answer
them), near-domain (the same product, a feature the documents never mention; `absent` names the
terms checked to be missing from the scope) or off-domain. In such a scope the product's name is
in every document, which is where a gate that counts it as evidence turns confidently wrong.

`materialize` writes each scope's documents into a folder of its own under the scope
`trust-<scope>`; `judge` and `figures` give the six rates the issue measures.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbflow.core.errors import InputError

REPO = Path(__file__).resolve().parent.parent
TRUST_ROOT = REPO / "eval" / "trust"
SCOPE_PREFIX = "trust-"
KINDS = ("answerable", "near", "off")
_SCOPE_LINE = re.compile(r"^kb_scope:.*$", re.MULTILINE)
_SOURCE_LINE = re.compile(r"^source:\s*(\S+)\s*$", re.MULTILINE)


class TrustSetError(InputError, ValueError):
    """The trust set's files disagree with each other; the message names the file and why."""


@dataclass(frozen=True)
class TrustScope:
    name: str
    language: str
    product: str
    files: tuple[Path, ...]

    @property
    def kb_scope(self) -> str:
        return SCOPE_PREFIX + self.name


@dataclass(frozen=True)
class TrustQuestion:
    id: str
    scope: str
    language: str
    kind: str
    query: str
    expected: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


def load_scopes(
    names: Iterable[str] = (), root: Path = TRUST_ROOT, repo: Path = REPO
) -> dict[str, TrustScope]:
    """The scopes of the set (`names`: only these; empty: all)."""
    data = json.loads((root / "scopes.json").read_text(encoding="utf-8"))
    wanted = set(names)
    out = {}
    for name, spec in data["scopes"].items():
        if wanted and name not in wanted:
            continue
        files = sorted({p for pattern in spec["from"] for p in repo.glob(pattern)})
        if not files:
            raise TrustSetError(f"{root / 'scopes.json'}: scope {name!r} matches no documents")
        out[name] = TrustScope(name, spec["language"], spec["product"], tuple(files))
    return out


def _front_and_body(path: Path) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        raise TrustSetError(f"{path}: no frontmatter")
    _, front, body = text.split("---", 2)
    return front, body


def sources_of(scope: TrustScope) -> dict[str, str]:
    """source -> the document's whole text (frontmatter included), lowercased."""
    out = {}
    for path in scope.files:
        front, _body = _front_and_body(path)
        found = _SOURCE_LINE.search(front)
        if not found:
            raise TrustSetError(f"{path}: no `source:` in its frontmatter")
        out[found.group(1)] = path.read_text(encoding="utf-8").lower()
    return out


def load_questions(scopes: dict[str, TrustScope], root: Path = TRUST_ROOT) -> list[TrustQuestion]:
    """Every scope's questions, checked against its documents: an answerable question names
    documents the scope has, a near-domain one names terms no document of the scope contains."""
    out: list[TrustQuestion] = []
    seen: set[str] = set()
    for name, scope in scopes.items():
        path = root / "questions" / f"{name}.json"
        if not path.exists():
            continue
        docs = sources_of(scope)
        for raw in json.loads(path.read_text(encoding="utf-8"))["questions"]:
            q = TrustQuestion(
                raw["id"], name, scope.language, raw["kind"], raw["query"],
                tuple(raw.get("expected", ())), tuple(raw.get("absent", ())),
            )
            _check(q, docs, path, seen)
            seen.add(q.id)
            out.append(q)
    return out


def _check(q: TrustQuestion, docs: dict[str, str], path: Path, seen: set[str]) -> None:
    if q.id in seen:
        raise TrustSetError(f"{path}: question id {q.id!r} is used twice")
    if q.kind not in KINDS:
        raise TrustSetError(f"{path}: {q.id}: kind {q.kind!r} is not one of {', '.join(KINDS)}")
    if q.kind == "answerable":
        unknown = [s for s in q.expected if s not in docs]
        if not q.expected or unknown:
            raise TrustSetError(f"{path}: {q.id}: expected documents {unknown or '[]'} are not in the scope")
    if q.kind == "near":
        if not q.absent:
            raise TrustSetError(f"{path}: {q.id}: a near-domain question names the terms the scope lacks")
        present = [t for t in q.absent if any(t.lower() in text for text in docs.values())]
        if present:
            raise TrustSetError(f"{path}: {q.id}: {present} occur in the scope's documents")


def materialize(scopes: Iterable[TrustScope], out: Path) -> dict[str, Path]:
    """Each scope's documents copied into `out/<scope>/`, their `kb_scope` set to the trust
    scope; an unchanged file is left alone, so a reindex of the copy stays incremental."""
    roots = {}
    for scope in scopes:
        folder = out / scope.name
        folder.mkdir(parents=True, exist_ok=True)
        wanted = set()
        for path in scope.files:
            text = path.read_text(encoding="utf-8")
            front, body = text.split("---", 2)[1:]
            if _SCOPE_LINE.search(front):
                front = _SCOPE_LINE.sub(f"kb_scope: {scope.kb_scope}", front, count=1)
            else:
                front = front.rstrip("\n") + f"\nkb_scope: {scope.kb_scope}\n"
            target = folder / path.name
            wanted.add(target.name)
            new = f"---{front}---{body}"
            if not target.exists() or target.read_text(encoding="utf-8") != new:
                target.write_text(new, encoding="utf-8")
        for stale in folder.glob("*.md"):
            if stale.name not in wanted:
                stale.unlink()
        roots[scope.name] = folder
    return roots


TRUST_CASES = REPO / "eval" / "rag-retrieval" / "cases" / "trust-cases.json"


def as_cases(scopes: dict[str, TrustScope], questions: Sequence[TrustQuestion]) -> dict[str, Any]:
    """The questions as golden cases (`kbflow eval --cases …trust-cases.json`): an answerable one
    expects an answering document in the top 3 at REFERENCE or better; a near-domain one no
    level; an off-domain one no usable evidence."""
    cases = []
    for q in questions:
        case: dict[str, Any] = {"id": q.id, "query": q.query, "kbScope": scopes[q.scope].kb_scope, "K": 3}
        if q.kind == "answerable":
            case |= {"behaviour": f"{q.scope}: answered by its document, with confidence",
                     "expectedDocIds": list(q.expected), "expectedEvidenceStatus": "FOUND",
                     "expectConfident": True}
        elif q.kind == "near":
            case |= {"behaviour": f"{q.scope}: asks about {', '.join(q.absent)}, which the scope lacks: "
                     "never confident", "expectedEvidenceStatus": None, "negative": "near",
                     "expectConfident": False}
        else:
            case |= {"behaviour": f"{q.scope}: nothing to do with the scope", "negative": "off",
                     "expectedEvidenceStatus": "NO_EVIDENCE", "expectConfident": False}
        cases.append(case)
    return {"schema": "kbflow.golden-cases/1", "generated_from": "eval/trust (python bench/trust.py --cases)",
            "cases": cases}


def seed_roots(home: Path) -> dict[str, Path]:
    """Every trust scope's documents, written under `home`: {kb_scope: folder}."""
    scopes = load_scopes()
    roots = materialize(scopes.values(), home / "trust-docs")
    return {scopes[name].kb_scope: root for name, root in roots.items()}


@dataclass(frozen=True)
class Judged:
    """What one lookup did with one question, in the terms the figures count."""

    question: TrustQuestion
    refused: bool  # no usable evidence
    weak_only: bool  # evidence, all of it weak
    confident: bool  # REFERENCE or PRECISE
    right_confident: bool  # confident, and an answering document is among the non-weak evidence
    hit_at_3: bool  # an answering document among the first three pieces of evidence
    level: str | None
    top: str | None  # the first evidence's document


def judge(q: TrustQuestion, result: Any) -> Judged:
    evidence = list(result.evidence)
    confident = bool(result.found and result.relevance_level)
    strong = [e.source for e in evidence if not e.weak]
    return Judged(
        question=q,
        refused=not result.found,
        weak_only=bool(result.found and not result.relevance_level),
        confident=confident,
        right_confident=confident and any(s in q.expected for s in strong),
        hit_at_3=any(e.source in q.expected for e in evidence[:3]),
        level=result.relevance_level if result.found else None,
        top=evidence[0].source if evidence else None,
    )


def _share(values: Sequence[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def figures(judged: Sequence[Judged]) -> dict[str, Any]:
    """The six rates of the issue: answerable (false no-evidence, hit@3, right document at
    REFERENCE or better, weak-only), near-domain (held back, confidently wrong) and off-domain
    (refused), plus the counts."""
    by = {k: [j for j in judged if j.question.kind == k] for k in KINDS}
    ans, near, off = by["answerable"], by["near"], by["off"]
    return {
        "answerable": len(ans),
        "near": len(near),
        "off": len(off),
        "false_no_evidence": _share([j.refused for j in ans]),
        "hit_at_3": _share([j.hit_at_3 for j in ans]),
        "right_at_reference": _share([j.right_confident for j in ans]),
        "answerable_weak_only": _share([j.weak_only for j in ans]),
        "answerable_confidently_wrong": _share([j.confident and not j.right_confident for j in ans]),
        "near_refused": _share([j.refused for j in near]),
        "near_held_back": _share([j.refused or j.weak_only for j in near]),
        "near_confidently_wrong": _share([j.confident for j in near]),
        "off_refused": _share([j.refused for j in off]),
        "off_confidently_wrong": _share([j.confident for j in off]),
    }
