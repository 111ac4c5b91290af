"""Read one Markdown file and turn it into a validated `ParsedDocument` (SPEC §2.1-2.2).

Every rejection is a `DocumentError` whose reason names what is wrong; the caller reports it
against the file and goes on with the other files.

Ids: `source` becomes the doc_id exactly as written (any text up to 512 characters: URLs,
paths, slugs). A missing `source` gets a stable id derived from the file's path (reported as a
warning); a `source` that is present but invalid is rejected, because silently renaming an id
the author chose would break references to it.

Frontmatter is read with YAML's BaseLoader: every scalar stays the string the author typed, so
`kb_scope: no` is the scope "no" and `source: 0012` the id "0012", never False or 10.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter
import yaml
from frontmatter.default_handlers import YAMLHandler

from kbflow.core.analysis import CJK
from kbflow.core.errors import InputError
from kbflow.core.validation import InvalidValue, validate_category, validate_scope, validate_source

KNOWN_KEYS = {"source", "breadcrumb", "kb_scope", "title", "keywords", "language"}
_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


MAX_METADATA_BYTES = 64 * 1024  # frontmatter kept per document, as JSON
MAX_METADATA_DEPTH = 8


class _NoAliasLoader(yaml.BaseLoader):
    """BaseLoader that refuses aliases (`*name`): a few hundred bytes of nested aliases expand
    to gigabytes when the values are copied out ("billion laughs"), and frontmatter never needs
    them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise DocumentError(
                f"frontmatter uses a YAML alias (*{event.anchor}) at line {event.start_mark.line + 1}: "
                "aliases are refused (a few lines of them can expand to gigabytes); write the value out"
            )
        return super().compose_node(parent, index)


class _AsWrittenYAML(YAMLHandler):
    """Scalars stay strings: YAML 1.1 would turn `no` into False and `0012` into 10."""

    def load(self, fm: str, **kwargs: object) -> Any:
        meta = yaml.load(fm, Loader=_NoAliasLoader)  # noqa: S506 - BaseLoader builds no objects
        if meta is not None and not isinstance(meta, dict):
            kind = "a list" if isinstance(meta, list) else "a plain string"
            raise DocumentError(
                f"frontmatter is {kind}, not keys and values (such as `source: my-id`); "
                "the file was not indexed"
            )
        return meta


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "~", "null", "Null", "NULL"))


class DocumentError(InputError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class ParsedDocument:
    doc_id: str
    doc_id_derived: bool
    kb_scope: str
    title: str
    breadcrumb: list[str]
    keywords: list[str]
    language: str
    body: str
    content_hash: str
    rel_path: str
    root: str
    extra: dict[str, Any] = field(default_factory=dict)
    scope_declared: bool = False  # the frontmatter names kb_scope (else it came from the run)
    file_stat: str | None = None  # `sources.stat_key` of the file when it was read
    loaded: bool = True  # False: body not held (the scan keeps metadata only); `sources.load`

    @property
    def category(self) -> str:
        return self.breadcrumb[0] if self.breadcrumb else ""

    @property
    def domains(self) -> list[str]:
        return self.breadcrumb[1:]

    @property
    def breadcrumb_text(self) -> str:
        return " > ".join(self.breadcrumb)

    @property
    def path(self) -> Path:
        return Path(self.root) / self.rel_path


def read_text(path: Path, max_bytes: int) -> tuple[str, str]:
    """Return (text, sha256 of the bytes), rejecting oversize, binary and non-UTF-8 files."""
    size = path.stat().st_size
    if size > max_bytes:
        raise DocumentError(f"file is {size} bytes, over the {max_bytes}-byte limit (max_file_bytes)")
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise DocumentError("binary file (NUL bytes), not Markdown text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}") from exc
    return text.removeprefix("\ufeff"), hashlib.sha256(raw).hexdigest()


def derive_doc_id(rel_path: str) -> str:
    stem = rel_path.rsplit(".", 1)[0]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-").lower()[:55] or "doc"
    return f"{slug}-{hashlib.sha1(rel_path.encode()).hexdigest()[:8]}"


def derived_id_warning(doc_id: str) -> str:
    return f"no 'source' in frontmatter; derived stable id '{doc_id}' from the path"


def _str_list(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v).strip() for v in value if str(v).strip()]
    raise DocumentError(f"frontmatter '{key}' must be a list of strings or a comma-separated string")


def parse_document(
    text: str, *, content_hash: str, rel_path: str, root: str, default_scope: str
) -> tuple[ParsedDocument, list[str]]:
    """Parse frontmatter + body. Returns the document and warnings (e.g. a derived id)."""
    warnings: list[str] = []
    try:
        post = frontmatter.loads(text, handler=_AsWrittenYAML())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DocumentError(f"invalid YAML frontmatter{where}: {problem}") from exc
    except DocumentError:
        raise
    except Exception as exc:  # python-frontmatter raises ValueError/TypeError on non-mapping YAML
        raise DocumentError(f"invalid frontmatter: {exc}") from exc
    meta: dict[str, Any] = dict(post.metadata)
    body = post.content
    if not body.strip():
        raise DocumentError("empty body: the file has no Markdown content after the frontmatter")

    doc_id, derived = _source(meta.get("source"), rel_path, warnings)
    scope_value = meta.get("kb_scope")
    try:
        kb_scope = validate_scope(str(scope_value).strip()) if not _blank(scope_value) else default_scope
    except InvalidValue as exc:
        raise DocumentError(str(exc)) from exc

    breadcrumb = _breadcrumb(meta.get("breadcrumb"))

    title = "" if _blank(meta.get("title")) else str(meta.get("title")).strip()
    if not title:
        m = _H1.search(body)
        title = m.group(1).strip() if m else doc_id

    language = "" if _blank(meta.get("language")) else str(meta.get("language")).strip().lower()
    if not language:
        language = "zh" if len(CJK.findall(body)) > 0.2 * max(len(body.strip()), 1) else "en"

    extra = {k: _jsonable(v) for k, v in meta.items() if k not in KNOWN_KEYS}
    _bounded(extra)
    doc = ParsedDocument(
        doc_id=doc_id,
        doc_id_derived=derived,
        kb_scope=kb_scope,
        title=title,
        breadcrumb=breadcrumb,
        keywords=_str_list(meta.get("keywords"), "keywords"),
        language=language,
        body=body,
        content_hash=content_hash,
        rel_path=rel_path,
        root=root,
        extra=extra,
        scope_declared=not _blank(scope_value),
    )
    return doc, warnings


def _source(raw: Any, rel_path: str, warnings: list[str]) -> tuple[str, bool]:
    """(doc_id, derived): the author's source as written, or an id derived from the path."""
    if _blank(raw):
        doc_id = derive_doc_id(rel_path)
        warnings.append(derived_id_warning(doc_id))
        return doc_id, True
    if not isinstance(raw, str):
        raise DocumentError("frontmatter 'source' must be a single value, not a list or mapping")
    try:
        return validate_source(raw.strip()), False
    except InvalidValue as exc:
        raise DocumentError(str(exc)) from exc


def _breadcrumb(value: Any) -> list[str]:
    """`A > B > C` or a list; the first part is the category, which reaches filters."""
    if _blank(value):
        breadcrumb: list[str] = []
    elif isinstance(value, list):
        breadcrumb = [str(p).strip() for p in value if str(p).strip()]
    else:
        breadcrumb = [p.strip() for p in str(value).split(">") if p.strip()]
    if breadcrumb:
        try:
            validate_category(breadcrumb[0])
        except InvalidValue as exc:
            raise DocumentError(f"breadcrumb: {exc}") from exc
    return breadcrumb


def _bounded(extra: dict[str, Any]) -> None:
    """The frontmatter kept with the record stays small: at most MAX_METADATA_BYTES as JSON,
    nested at most MAX_METADATA_DEPTH deep."""
    def depth(value: Any) -> int:
        if isinstance(value, dict):
            return 1 + max((depth(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return 1 + max((depth(v) for v in value), default=0)
        return 0

    if depth(extra) > MAX_METADATA_DEPTH:
        raise DocumentError(f"frontmatter is nested more than {MAX_METADATA_DEPTH} levels deep")
    size = len(json.dumps(extra, ensure_ascii=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise DocumentError(
            f"frontmatter holds {size} bytes of extra keys, over the {MAX_METADATA_BYTES} a document may "
            "keep: move the data into the body"
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)  # dates and other YAML scalars
