"""How `kbflow gaps` reads to a person: the groups first (what to write next), then the
fallback's rescues and the documents' use; a progress bar on stderr while the audit is read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kbflow.core.wording import counted


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A bar of audit rows read (on a terminal, on stderr); yields its advance function."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from kbflow.flows.errors import console as piped_console

    console = piped_console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda n: None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("reading the lookup audit: {task.completed} rows"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("audit", total=None)
        yield lambda n: bar.advance(task, n)


def print_gaps(report: Any, top: int = 20) -> None:
    from rich.table import Table

    from kbflow.flows.errors import console as piped_console

    console = piped_console()
    if not console.is_terminal:
        console.width = 200
    scope = f"scope {report.scope}" if report.scope else "every scope"
    share = f"{report.unanswered / report.lookups:.0%}" if report.lookups else "–"
    console.print(
        f"knowledge gaps — {scope}, {report.since} → {report.until}: {counted(report.lookups, 'lookup')}, "
        f"{report.unanswered} unanswered ({share}), {counted(len(report.groups), 'group')}",
        highlight=False,
    )
    if report.ungrouped:
        kept = counted(report.ungrouped, "unanswered lookup")
        console.print(f"{kept} kept neither text nor embedding: not grouped")
    if report.groups:
        table = Table(
            "#", "about", "lookups", "callers", "examples", "what came nearest", "first / last seen"
        )
        for i, g in enumerate(report.groups[:top], 1):
            nearest = f"{g.nearest}\nquality {g.nearest_quality:.2f}" if g.nearest else "–"
            examples = "\n".join(g.examples) or "(text not kept)"
            table.add_row(
                str(i),
                g.label,
                str(g.count),
                str(g.callers),
                examples,
                nearest,
                f"{g.first_seen}\n{g.last_seen}",
            )
        console.print(table)
        if len(report.groups) > top:
            console.print(f"…and {len(report.groups) - top} smaller groups (--top N, or --json for all)")
    else:
        console.print("every lookup of the window found usable evidence")
    if report.rescued:
        console.print(
            f"\nrescued by the fallback ({len(report.rescued)}): the L0 hint misled, the retry found "
            "the answer in another category", highlight=False
        )
        for r in report.rescued[:top]:
            console.print(
                f"  {r.query!r}: L0 filtered on {r.misleading_category}, found {r.found}", highlight=False
            )
        if len(report.rescued) > top:
            console.print(f"  …and {len(report.rescued) - top} more (--json lists all)")
    console.print(f"\ndocuments never returned ({len(report.never_returned)}):", highlight=False)
    for d in report.never_returned[:top]:
        console.print(f"  {d}", highlight=False)
    if len(report.never_returned) > top:
        console.print(f"  …and {len(report.never_returned) - top} more (--json lists all)")
    if report.most_returned:
        console.print(
            "most returned: " + ", ".join(f"{d} ({n})" for d, n in report.most_returned), highlight=False
        )
