"""Find Markdown files under the roots and parse them, collecting per-file failures.

A bad file never stops the scan: it becomes a `Failure` with its path and reason, and the
paths/ids of failed files are kept so the writer leaves their last good version in place.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ingest.parsing import DocumentError, ParsedDocument, parse_document, read_text

MARKDOWN_SUFFIXES = {".md", ".markdown"}


class RootError(ValueError):
    """A root given to reindex is missing or not a directory."""


@dataclass
class Failure:
    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass
class ScanResult:
    roots: list[str]
    documents: list[ParsedDocument] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    warnings: list[Failure] = field(default_factory=list)
    failed_paths: set[tuple[str, str]] = field(default_factory=set)  # (root, rel_path)
    skipped_other_scope: int = 0

    def scopes(self) -> set[str]:
        return {d.kb_scope for d in self.documents}


def normalize_root(root: str | Path) -> str:
    """The form a root is recorded in: absolute, `~` expanded, `..` folded, symlinks kept.

    Symlinks are kept on purpose: a `current -> release-N` root stays one root when the link
    moves, so a file deleted in the new release is removed, not orphaned under the old one."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(str(root))))


def resolve_roots(roots: Sequence[str | Path]) -> list[Path]:
    out = []
    for r in roots:
        p = Path(normalize_root(r))
        if not p.exists():
            raise RootError(f"root {r} does not exist")
        if not p.is_dir():
            raise RootError(f"root {r} is not a directory")
        if not os.access(p, os.R_OK | os.X_OK):
            raise RootError(f"root {r} cannot be read (permission denied); nothing was changed")
        out.append(p)
    return out


def discover(root: Path) -> list[Path]:
    """Markdown files under root, sorted, skipping hidden files and directories."""
    found = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if p.is_file() and p.suffix.lower() in MARKDOWN_SUFFIXES:
            found.append(p)
    return sorted(found)


def scan_roots(
    roots: Sequence[Path],
    *,
    default_scope: str,
    only_scope: str | None = None,
    max_file_bytes: int,
    known_paths: dict[tuple[str, str], str] | None = None,
) -> ScanResult:
    """Parse every file. `only_scope` restricts the run to one scope (files without kb_scope
    join it; files declaring another scope are skipped). `known_paths` maps (scope, doc_id) to
    the rel_path already indexed, so a duplicate keeps the file that owns the id today."""
    result = ScanResult(roots=[str(r) for r in roots])
    scope_default = only_scope or default_scope
    parsed: list[ParsedDocument] = []
    for root in roots:
        for path in discover(root):
            rel = path.relative_to(root).as_posix()
            try:
                text, digest = read_text(path, max_file_bytes)
                doc, warnings = parse_document(
                    text, content_hash=digest, rel_path=rel, root=str(root), default_scope=scope_default
                )
            except DocumentError as exc:
                result.failures.append(Failure(str(path), exc.reason))
                result.failed_paths.add((str(root), rel))
                continue
            except OSError as exc:
                result.failures.append(Failure(str(path), f"cannot read file: {exc.strerror or exc}"))
                result.failed_paths.add((str(root), rel))
                continue
            if only_scope and doc.kb_scope != only_scope:
                result.skipped_other_scope += 1
                continue
            result.warnings.extend(Failure(str(path), w) for w in warnings)
            parsed.append(doc)

    by_key: dict[tuple[str, str], list[ParsedDocument]] = {}
    for doc in parsed:
        by_key.setdefault((doc.kb_scope, doc.doc_id), []).append(doc)
    known_paths = known_paths or {}
    for key, docs in by_key.items():
        if len(docs) == 1:
            result.documents.append(docs[0])
            continue
        owner = next((d for d in docs if d.rel_path == known_paths.get(key)), docs[0])
        result.documents.append(owner)
        for d in docs:
            if d is not owner:
                result.failures.append(
                    Failure(
                        str(d.path),
                        f"duplicate source '{d.doc_id}' in scope '{d.kb_scope}': "
                        f"already used by {owner.path}; this file was not indexed",
                    )
                )
                result.failed_paths.add((d.root, d.rel_path))
    result.documents.sort(key=lambda d: (d.kb_scope, d.root, d.rel_path))
    return result
