"""Find Markdown files under the roots and parse them, collecting per-file failures.

A bad file never stops the scan: it becomes a `Failure` with its path and reason, and the
paths/ids of failed files are kept so the writer leaves their last good version in place.

A file whose stat (size, mtime, ctime, inode) equals the one recorded when it was indexed is not
read: its record stands in for it (`KnownFile`), so a no-change run costs a directory walk. The
scan may drop bodies (`keep_bodies=False`); the writer reads them again batch by batch (`load`),
so a run never holds the whole corpus's text.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kbflow.core.errors import InputError
from kbflow.ingest.parsing import DocumentError, ParsedDocument, derived_id_warning, parse_document, read_text

MARKDOWN_SUFFIXES = {".md", ".markdown"}
RACY_SECONDS = 2.0  # a file changed this recently may change again within its mtime's granularity


class RootError(InputError, ValueError):
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
    # (root, rel folder or link) that could not be read: records under them are kept as they are
    failed_dirs: set[tuple[str, str]] = field(default_factory=set)
    skipped_other_scope: int = 0
    allow_mass_delete: bool = False  # this run confirms removals the delete guards would refuse

    def scopes(self) -> set[str]:
        return {d.kb_scope for d in self.documents}

    def could_not_see(self, root: str, rel_path: str) -> bool:
        """True when this scan could not look at `rel_path`: it failed, or a folder or link
        above it could not be read. Such a document is kept, never removed."""
        if (root, rel_path) in self.failed_paths:
            return True
        return any(r == root and _under(rel_path, d) for r, d in self.failed_dirs)


@dataclass(slots=True)
class KnownFile:
    """What an indexed file's record says: enough to stand in for the file while its stat is
    unchanged."""

    kb_scope: str
    doc_id: str
    doc_id_derived: bool
    title: str
    breadcrumb: str
    language: str
    content_hash: str
    file_stat: str
    extra: dict[str, object] = field(default_factory=dict)


def _stat_part(st: os.stat_result) -> str:
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def stat_key(st: os.stat_result, scope_declared: bool) -> str | None:
    """The stat recorded with a document, and whether its scope was declared (an inherited
    scope depends on the run). None when the file changed too recently to trust its mtime
    (an edit in the same tick leaves it equal): such a file is read again next run."""
    now = time.time()
    if now - st.st_mtime < RACY_SECONDS or now - st.st_ctime < RACY_SECONDS:
        return None
    return f"{_stat_part(st)}:{'d' if scope_declared else 'i'}"


def _from_record(
    known: KnownFile, st: os.stat_result, root: str, rel: str, scope: str
) -> ParsedDocument | None:
    """The record standing in for an unchanged file, or None when the file must be read."""
    stat, _, kind = known.file_stat.rpartition(":")
    declared = kind == "d"
    if stat != _stat_part(st) or (not declared and scope != known.kb_scope):
        return None
    return ParsedDocument(
        doc_id=known.doc_id,
        doc_id_derived=known.doc_id_derived,
        kb_scope=known.kb_scope,
        title=known.title,
        breadcrumb=[p for p in known.breadcrumb.split(" > ") if p],
        keywords=[],
        language=known.language,
        body="",
        content_hash=known.content_hash,
        rel_path=rel,
        root=root,
        extra=dict(known.extra),
        scope_declared=declared,
        file_stat=known.file_stat,
        loaded=False,
    )


def _scan_file(
    f: Found, root: str, scope: str, max_file_bytes: int, known: KnownFile | None, keep_body: bool
) -> tuple[ParsedDocument, list[str]]:
    """One file as a document: from its record when its stat is unchanged, else read and parsed."""
    rel, st = f.rel, f.stat
    if known is not None and st.st_size <= max_file_bytes:
        stub = _from_record(known, st, root, rel, scope)
        if stub is not None:
            return stub, [derived_id_warning(stub.doc_id)] if stub.doc_id_derived else []
    text, digest = read_text(f.path, max_file_bytes)
    doc, warnings = parse_document(text, content_hash=digest, rel_path=rel, root=root, default_scope=scope)
    doc.file_stat = stat_key(st, doc.scope_declared)
    if not keep_body:
        doc.body, doc.loaded = "", False
    return doc, warnings


def load(doc: ParsedDocument, max_file_bytes: int) -> ParsedDocument:
    """The document with its body, read again for the write. DocumentError when the file is no
    longer the one the scan saw (its last good version is kept; the next run picks it up)."""
    if doc.loaded:
        return doc
    st = doc.path.stat()
    text, digest = read_text(doc.path, max_file_bytes)
    changed = DocumentError(
        "the file changed during this run; its last good version is kept and the next run indexes it"
    )
    if digest != doc.content_hash:
        raise changed
    fresh, _ = parse_document(
        text, content_hash=digest, rel_path=doc.rel_path, root=doc.root, default_scope=doc.kb_scope
    )
    if (fresh.doc_id, fresh.kb_scope) != (doc.doc_id, doc.kb_scope):
        raise changed
    fresh.file_stat = stat_key(st, fresh.scope_declared)
    return fresh


def normalize_root(root: str | Path) -> str:
    """The form a root is recorded in: absolute, `~` expanded, `..` folded, symlinks kept.

    Symlinks are kept on purpose: a `current -> release-N` root stays one root when the link
    moves, so a file deleted in the new release is removed, not orphaned under the old one."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(str(root))))


def _under(rel_path: str, folder: str) -> bool:
    return not folder or rel_path == folder or rel_path.startswith(folder + "/")


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


@dataclass(slots=True)
class Found:
    """A Markdown file the walk found: its path, its path under the root, and its stat (taken
    once, by the walk; the scan compares it with the record)."""

    full: str  # a string: a Path per file costs as much as its stat
    rel: str
    stat: os.stat_result

    @property
    def path(self) -> Path:
        return Path(self.full)


def discover(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Markdown files under root (sorted; hidden entries skipped; symlinked folders followed
    once) and what could not be looked at: unreadable folders and dangling symlinks. Those are
    errors, never absences: a document under them is not treated as deleted."""
    found, problems = walk_markdown(root)
    return [f.path for f in found], problems


def walk_markdown(root: Path) -> tuple[list[Found], list[tuple[Path, str]]]:
    """`discover` with each file's stat: one `scandir` per folder and one `stat` per file, so a
    no-change scan costs what a raw walk of the tree costs."""
    found: list[Found] = []
    problems: list[tuple[Path, str]] = []
    seen_dirs: set[str] = set()
    stack: list[tuple[str, str]] = [(str(root), "")]  # (folder, its path under the root)
    while stack:
        folder, rel = stack.pop()
        real = os.path.realpath(folder)
        if real in seen_dirs:  # a symlink loop or a folder linked twice
            continue
        seen_dirs.add(real)
        try:
            files, subdirs, dangling = _scan_folder(folder, rel)
        except OSError as exc:  # unreadable, or listed but not searchable (no x bit)
            problems.append((Path(folder), f"cannot read folder: {exc.strerror or exc}"))
            continue
        found += files
        problems += dangling
        stack.extend(reversed(subdirs))
    found.sort(key=lambda f: f.rel.split("/"))
    return found, problems


def _scan_folder(folder: str, rel: str) -> tuple[list[Found], list[tuple[str, str]], list[tuple[Path, str]]]:
    """One folder: its Markdown files, its sub-folders (sorted) and its dangling links; all or
    nothing, so a folder that fails half-way is reported whole."""
    found: list[Found] = []
    subdirs: list[tuple[str, str]] = []
    problems: list[tuple[Path, str]] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                _entry(entry, child, found, subdirs, problems)
            except OSError as exc:  # a link that loops (self.md -> self.md) fails alone, named
                if exc.errno != errno.ELOOP:
                    raise  # anything else is the folder's (e.g. not searchable): reported whole
                problems.append((Path(entry.path), f"cannot follow symlink: {exc.strerror or exc}"))
    subdirs.sort()
    return found, subdirs, problems


def _entry(
    entry: os.DirEntry, child: str, found: list[Found], subdirs: list[tuple[str, str]],
    problems: list[tuple[Path, str]],
) -> None:
    """Sort one folder entry into the Markdown files, the sub-folders and the dangling links."""
    if entry.is_dir():  # follows a symlinked folder, as the walk always has
        subdirs.append((entry.path, child))
        return
    suffix = os.path.splitext(entry.name)[1].lower()
    if entry.is_symlink() and not os.path.exists(entry.path):
        if suffix in MARKDOWN_SUFFIXES or not suffix:
            problems.append((Path(entry.path), f"dangling symlink to {os.readlink(entry.path)}"))
        return
    if suffix in MARKDOWN_SUFFIXES and entry.is_file():
        found.append(Found(entry.path, child, entry.stat()))


def scan_roots(
    roots: Sequence[Path],
    *,
    default_scope: str,
    only_scope: str | None = None,
    max_file_bytes: int,
    known_paths: dict[tuple[str, str], str] | None = None,
    known_files: dict[tuple[str, str], KnownFile] | None = None,
    keep_bodies: bool = True,
) -> ScanResult:
    """Parse every file. `only_scope` restricts the run to one scope (files without kb_scope
    join it; files declaring another scope are skipped). `known_paths` maps (scope, doc_id) to
    the rel_path already indexed, so a duplicate keeps the file that owns the id today.
    `known_files` maps (root, rel_path) to its record: a file whose stat matches is not read."""
    known_files = known_files or {}
    result = ScanResult(roots=[str(r) for r in roots])
    scope_default = only_scope or default_scope
    parsed: list[ParsedDocument] = []
    for root in roots:
        files, problems = walk_markdown(root)
        for path, reason in problems:
            rel = path.relative_to(root).as_posix() if path != root else ""
            result.failures.append(Failure(str(path), f"{reason}; documents recorded under it are kept"))
            result.failed_dirs.add((str(root), rel))
        top = str(root)
        for f in files:
            path, rel = f.full, f.rel
            try:
                known = known_files.get((top, rel))
                doc, warnings = _scan_file(f, top, scope_default, max_file_bytes, known, keep_bodies)
            except DocumentError as exc:
                result.failures.append(Failure(path, exc.reason))
                result.failed_paths.add((top, rel))
                continue
            except OSError as exc:
                result.failures.append(Failure(path, f"cannot read file: {exc.strerror or exc}"))
                result.failed_paths.add((top, rel))
                continue
            if only_scope and doc.kb_scope != only_scope:
                result.skipped_other_scope += 1
                continue
            result.warnings.extend(Failure(path, w) for w in warnings)
            parsed.append(doc)

    _keep_one_per_source(parsed, result, known_paths or {})
    result.documents.sort(key=lambda d: (d.kb_scope, d.root, d.rel_path))
    return result


def _keep_one_per_source(
    parsed: list[ParsedDocument], result: ScanResult, known_paths: dict[tuple[str, str], str]
) -> None:
    """Two files claiming one (scope, source): the file that owns it today keeps it, the other
    fails with both paths named."""
    by_key: dict[tuple[str, str], list[ParsedDocument]] = {}
    for doc in parsed:
        by_key.setdefault((doc.kb_scope, doc.doc_id), []).append(doc)
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
