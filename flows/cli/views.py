"""How the smaller commands read to a person: the reindex summary, the eval summary, the
database revision line and the settings in effect. Each takes results computed elsewhere and
only prints them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kbflow.core.wording import counted


def print_reindex_summary(summary: Any, console: Any) -> None:
    """The counts table, then each scope, removal, warning and failure on its own line."""
    from rich.markup import escape
    from rich.table import Table

    from kbflow.flows.common import summary_rows  # the write side, only when a reindex ran

    table = Table(title=f"kbflow reindex ({summary.mode})", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, value in summary_rows(summary):
        table.add_row(label, value)
    console.print(table)
    for sc in summary.scopes.values():
        console.print(
            f"scope [bold]{sc.kb_scope}[/bold]: {counted(sc.documents, 'document')}, analyzer {sc.analyzer}, "
            f"collection {sc.collection} -> {sc.physical_collection}",
            highlight=False,
        )
    for d in summary.removed_docs:
        console.print(f"removed {d['kb_scope']}/{d['doc_id']} ({d['path']})", highlight=False, markup=False)
    for w in summary.warnings:
        console.print(f"[yellow]warning[/yellow] {escape(w['path'])}: {escape(w['reason'])}", highlight=False)
    if summary.skipped_other_scope:
        console.print(f"{summary.skipped_other_scope} file(s) declare another kb_scope and were skipped")
    for f in summary.failed:
        console.print(f"[red]FAILED[/red] {escape(f['path'])}: {escape(f['reason'])}", highlight=False)


def eval_lines(outcome: Any, show_known: bool = False) -> list[str]:
    """The golden-case run: metrics, new failures, the baseline diff, and one closing verdict.
    Known failures (failing in the baseline too) are counted; listed only on request."""
    from kbflow.evaluation.report import summary_lines
    from kbflow.evaluation.verdict import verdict_line

    lines = list(summary_lines(outcome.report))
    known = set(outcome.diff["known_failures"]) if outcome.diff is not None else set()
    limits = {
        f"{mode}:{c['case_id']}": c.get("known_limit")
        for mode, rep in outcome.report["modes"].items()
        for c in rep["cases"]
    }
    for name in outcome.failed:
        if name in known and not show_known:
            continue
        lines.append(f"{'known failure (failed in the baseline too)' if name in known else 'FAILED'} {name}")
        if limits.get(name):
            lines.append(f"  why it must not pass: {limits[name]}")
    if outcome.diff is not None:
        lines += [f"REGRESSION {r}" for r in outcome.diff["regressions"]]
        lines += [f"improved {r}" for r in outcome.diff["improvements"]]
    for path in outcome.fixtures[:1]:
        lines.append(f"wrote {len(outcome.fixtures)} fixtures to {path.parent}")
    return [*lines, verdict_line(outcome, show_known)]


def fields_line(data: Mapping[str, Any]) -> str:
    """`key: value` pairs on one line (kbflow db)."""
    return "  ".join(f"{k}: {v}" for k, v in data.items())


def config_lines(rows: Iterable[Mapping[str, Any]], file: str | None) -> list[str]:
    """One aligned line per setting: name, value (JSON), where it came from."""
    rows = list(rows)
    shown = [(r["name"], json.dumps(r["value"], ensure_ascii=False), r["source"]) for r in rows]
    name_w = max((len(n) for n, _, _ in shown), default=0)
    value_w = min(max((len(v) for _, v, _ in shown), default=0), 48)
    lines = [f"settings file: {file or 'none (no ./kbflow.toml, no --config or KBFLOW_CONFIG)'}"]
    lines += [f"{n:<{name_w}}  {v:<{value_w}}  {s}" for n, v, s in shown]
    return lines
