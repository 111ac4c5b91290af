"""Context pack: evidence in priority order into a character budget."""

from __future__ import annotations

from collections.abc import Sequence

from kbflow.retrieval.contracts import ContextPack, Evidence

STRATEGY = "priority_order_truncate_tail"
ELLIPSIS = "..."


def header(i: int, ev: Evidence) -> str:
    where = ev.breadcrumb or ev.title
    section = f" / {ev.heading_path}" if ev.heading_path else ""
    return f"[{i}] {ev.source} — {where}{section}\n"


def pack(evidence: Sequence[Evidence], budget: int) -> ContextPack:
    """Each entry is header + content. Content that does not fit is cut with '...'; an entry
    whose header does not fit is omitted (and listed)."""
    parts: list[str] = []
    used = 0
    included: list[str] = []
    omitted: list[str] = []
    for i, ev in enumerate(evidence, start=1):
        sep = "\n\n" if parts else ""
        head = header(i, ev)
        room = budget - used - len(sep) - len(head)
        if room < 0:
            omitted.append(ev.source)
            continue
        body = ev.excerpt
        if len(body) > room:
            body = body[: max(room - len(ELLIPSIS), 0)] + ELLIPSIS if room >= len(ELLIPSIS) else ""
        entry = sep + head + body
        parts.append(entry)
        used += len(entry)
        included.append(ev.source)
    return ContextPack(
        packed_text="".join(parts),
        strategy=STRATEGY,
        char_budget=budget,
        used_chars=used,
        included_sources=list(dict.fromkeys(included)),
        omitted_sources=list(dict.fromkeys(omitted)),
    )
