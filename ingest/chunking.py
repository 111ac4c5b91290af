"""Split a Markdown body into section chunks with markdown-it-py (SPEC §2.3).

A chunk never crosses a heading; it carries its heading path, and its text starts with that
path so both the dense and the BM25 side see the section's context. Code blocks and tables
stay whole when they fit the cap; a longer one is split on line boundaries (a table repeats
its header). Prose that overflows is split on sentences, and the next chunk of the same
section starts with a short overlap from the previous one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

CHUNKER_VERSION = "md-sections-1"

_md = MarkdownIt("commonmark").enable("table")
_ATOMIC = {"fence", "code_block", "table_open"}
_SENTENCE = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


@dataclass(frozen=True)
class Chunk:
    index: int
    heading_path: tuple[str, ...]
    text: str

    @property
    def heading_text(self) -> str:
        return " > ".join(self.heading_path)


@dataclass
class _Block:
    kind: str
    text: str


def _sections(body: str) -> list[tuple[tuple[str, ...], list[_Block]]]:
    lines = body.splitlines()
    tokens = _md.parse(body)
    sections: list[tuple[tuple[str, ...], list[_Block]]] = [((), [])]
    stack: list[tuple[int, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.map is None or tok.nesting == -1:
            i += 1
            continue
        if tok.type == "heading_open":
            level = int(tok.tag[1:])
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append((tuple(t for _, t in stack), []))
        else:
            start, end = tok.map
            text = "\n".join(lines[start:end]).strip("\n")
            if text.strip():
                sections[-1][1].append(_Block(tok.type, text))
        i += 1
    return [(path, blocks) for path, blocks in sections if blocks]


def _split_lines(block: _Block, limit: int) -> list[str]:
    """Split an atomic block that does not fit on line boundaries; tables keep their header."""
    lines = block.text.splitlines()
    header: list[str] = []
    if block.kind == "table_open" and len(lines) > 2:
        header, lines = lines[:2], lines[2:]
    fence_open: list[str] = []
    fence_close: list[str] = []
    if block.kind == "fence" and len(lines) > 2:
        fence_open, lines, fence_close = [lines[0]], lines[1:-1], [lines[-1]]
    frame = len("\n".join(header + fence_open + fence_close)) + 2
    pieces: list[str] = []
    current: list[str] = []
    size = frame
    for line in lines:
        line = line[: max(limit - frame, 20)]
        if current and size + len(line) + 1 > limit:
            pieces.append("\n".join(header + fence_open + current + fence_close))
            current, size = [], frame
        current.append(line)
        size += len(line) + 1
    if current:
        pieces.append("\n".join(header + fence_open + current + fence_close))
    return pieces


def _split_prose(text: str, limit: int) -> list[str]:
    sentences = [s for s in _SENTENCE.split(text) if s and s.strip()]
    pieces: list[str] = []
    current = ""
    for sentence in sentences:
        while len(sentence) > limit:  # one over-long sentence: cut at a space if there is one
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            head, sentence = sentence[:cut], sentence[cut:].lstrip()
            if current:
                pieces.append(current)
                current = ""
            pieces.append(head)
        joined = f"{current} {sentence}".strip() if current else sentence
        if len(joined) > limit and current:
            pieces.append(current)
            current = sentence
        else:
            current = joined
    if current:
        pieces.append(current)
    return pieces


def _tail(text: str, overlap: int) -> str:
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    tail = text[-overlap:]
    space = tail.find(" ")
    return tail[space + 1 :] if 0 <= space < overlap // 2 else tail


def _pack(blocks: list[_Block], budget: int, overlap: int) -> list[str]:
    """Greedily pack a section's blocks into pieces of at most `budget` characters."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    prose_tail = ""
    for block in blocks:
        atomic = block.kind in _ATOMIC
        if len(block.text) <= budget:
            pieces = [block.text]
        elif atomic:
            pieces = _split_lines(block, budget)
        else:
            pieces = _split_prose(block.text, budget - overlap)
        for piece in pieces:
            if current and size + len(piece) + 2 > budget:
                parts.append("\n\n".join(current))
                current, size = [], 0
                if prose_tail and not atomic and len(prose_tail) + len(piece) + 2 <= budget:
                    current, size = [prose_tail], len(prose_tail) + 2
            current.append(piece)
            size += len(piece) + 2
            prose_tail = "" if atomic else _tail(piece, overlap)
    if current:
        parts.append("\n\n".join(current))
    return parts


def chunk_markdown(body: str, max_chars: int = 1000, overlap: int = 120) -> list[Chunk]:
    """Chunks in document order; `index` is the evidenceKey suffix (`docId#index`)."""
    chunks: list[Chunk] = []
    for path, blocks in _sections(body):
        prefix = " > ".join(path)
        budget = max(max_chars - (len(prefix) + 2 if prefix else 0), 100)
        for part in _pack(blocks, budget, overlap):
            text = f"{prefix}\n\n{part}" if prefix else part
            chunks.append(Chunk(index=len(chunks), heading_path=path, text=text))
    if not chunks and body.strip():  # headings only: keep the text rather than drop the doc
        chunks.append(Chunk(index=0, heading_path=(), text=body.strip()[:max_chars]))
    return chunks
