"""Rendering shared by the CLI and the flows."""

from __future__ import annotations

import json
from typing import Any

from kbflow.ingest.reindex import ReindexSummary


def deployment_summary(flow_name: str, deployment: Any, cron: str) -> dict[str, Any]:
    """A deployment as `kbflow serve-flows --dry-run` prints it: what would be registered."""
    return {
        "flow": flow_name,
        "deployment": deployment.name,
        "cron": cron,
        "schedules": [json.loads(s.model_dump_json()) for s in deployment.schedules],
    }


def summary_rows(summary: ReindexSummary) -> list[tuple[str, str]]:
    """(label, value) pairs in the order a person reads a reindex result."""
    return [
        ("documents added", str(summary.added)),
        ("documents updated", str(summary.updated)),
        ("documents unchanged", str(summary.unchanged)),
        ("documents removed", str(summary.removed)),
        ("documents failed", str(len(summary.failed))),
        ("chunks written", str(summary.chunks_written)),
        ("chunks embedded", str(summary.chunks_embedded)),
        ("embedding cache hits", str(summary.cache_hits)),
        ("seconds", f"{summary.seconds:.1f}"),
        *([("where the time went", _stages(summary.stage_seconds))] if summary.stage_seconds else []),
    ]


def _stages(seconds: dict[str, float], top: int = 5) -> str:
    """The largest stages first, e.g. `embed 41.2 s · store_insert 3.0 s · read 1.1 s`."""
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])[:top]
    return " · ".join(f"{name} {s:.1f} s" for name, s in ranked)


def summary_markdown(summary: ReindexSummary) -> str:
    scope = f" — scope `{summary.kb_scope}`" if summary.kb_scope else ""
    lines = [f"# kbflow reindex ({summary.mode})", "", f"Roots: {', '.join(summary.roots)}{scope}", ""]
    lines += ["| | |", "|---|---:|", *(f"| {k} | {v} |" for k, v in summary_rows(summary)), ""]
    if summary.scopes:
        lines += [
            "| scope | collection | physical collection | analyzer | documents |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {s.kb_scope} | {s.collection} | {s.physical_collection} | {s.analyzer} | {s.documents} |"
            for s in summary.scopes.values()
        ]
        lines.append("")
    if summary.removed_docs:
        lines += ["## Removed", "", "| scope | source | path |", "|---|---|---|"]
        lines += [
            f"| {d['kb_scope']} | {_cell(d['doc_id'])} | {_cell(d['path'])} |" for d in summary.removed_docs
        ]
        lines.append("")
    if summary.warnings:
        lines += ["## Warnings", "", "| file | warning |", "|---|---|"]
        lines += [f"| {_cell(w['path'])} | {_cell(w['reason'])} |" for w in summary.warnings]
        lines.append("")
    if summary.failed:
        lines += ["## Failed", "", "| file | reason |", "|---|---|"]
        lines += [f"| {f['path']} | {f['reason'].replace('|', '/')} |" for f in summary.failed]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
