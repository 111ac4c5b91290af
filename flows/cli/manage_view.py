"""How `kbflow status`, `docs list`, `scope delete` and `forget` read to a person: on a terminal
to its width; piped, one line per table row (greppable)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from kbflow.core.wording import counted


def _console(soft_wrap: bool = False) -> Any:
    from kbflow.flows.errors import console as piped_console

    console = piped_console(soft_wrap=soft_wrap)
    if not soft_wrap and not console.is_terminal:
        console.width = 400
    return console


def print_status(
    uri: str, statuses: Sequence[Any], roots: Sequence[Mapping[str, Any]], run: Any, held: str = ""
) -> None:
    console = _console(soft_wrap=True)
    if held:
        console.print(f"[yellow]note:[/yellow] {held}", highlight=False)
    if not statuses:
        console.print(f"nothing indexed under {uri}; run `kbflow reindex PATH`")
        return
    console.print(f"kbflow status — milvus {uri}", highlight=False)
    for st in statuses:
        target = st.alias_target or "[red]MISSING: run `kbflow reindex --full`[/red]"
        held = st.chunks < 0
        in_milvus = "? chunks in Milvus (held)" if held else f"{counted(st.chunks, 'chunk')} in Milvus"
        console.print(
            f"scope [bold]{st.kb_scope}[/bold]: {counted(st.documents, 'document')} "
            f"({_health(st)}), {in_milvus} "
            f"({st.chunks_recorded} recorded)\n  collection {st.collection} -> {target}\n"
            f"  analyzer {st.analyzer}, model {st.model_name or st.model} ({st.dim}-d), "
            f"last changed {st.updated_at}\n  gate calibration: {_calibration(st.calibration)}"
            + (f"\n  [yellow]note:[/yellow] {st.note}" if st.note else "")
            + (f"\n  [yellow]calibration fit:[/yellow] {st.calibration['unfit']}"
               if st.calibration.get("unfit") else ""),
            highlight=False,
        )
        for root, n in st.roots.items():
            console.print(f"  root {root}: {counted(n, 'document')}", highlight=False, markup=False)
    console.print("documents per root:")
    for r in roots:
        per_scope = ", ".join(f"{scope} {n}" for scope, n in r["scopes"].items())
        line = f"  {r['root']}: {counted(r['documents'], 'document')} ({per_scope})"
        console.print(line, highlight=False, markup=False)
    if run:
        console.print(
            f"last reindex: {run['finished_at']} ({run['mode']}, "
            f"{'ok' if run['ok'] else counted(run.get('failed', 0), 'failure')})"
        )
        for f in run.get("failed_documents", []):
            console.print(f"  FAILED {f['path']}: {f['reason']}", highlight=False, markup=False)


def _health(st: Any) -> str:
    parts = [f"{st.documents_with_errors} with errors"]
    if st.documents_interrupted:
        parts.append(f"{st.documents_interrupted} interrupted: the next reindex resumes them")
    return ", ".join(parts)


def _calibration(c: Mapping[str, str]) -> str:
    origin = c.get("origin", "none")
    if origin == "packaged":
        return "the model's packaged default (`kbflow eval calibrate --self --scope S` forecasts it here)"
    if origin == "none":
        return "none: quality is the plain cosine (`kbflow eval calibrate` fits one from labelled queries)"
    where = "this scope" if c.get("stored_for") not in ("*", "") else "every scope of the model"
    stale = ""
    if c.get("stale"):
        stale = f" — [yellow]{c['stale']}: refit it (`kbflow eval calibrate --refresh`)[/yellow]"
    return f"{origin}, fitted {c.get('created_at', '?')}{_age(c.get('created_at', ''))} for {where}{stale}"


def _age(created_at: str) -> str:
    """' (3 days ago)', from a calibration's ISO time; '' when it cannot be read."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(created_at)
    except ValueError:
        return ""
    seconds = (datetime.now(UTC) - (when if when.tzinfo else when.replace(tzinfo=UTC))).total_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f" ({n} {unit}{'s' if n > 1 else ''} ago)"
    return " (just now)"


def print_documents(docs: Sequence[Any], filters: Mapping[str, str | None]) -> None:
    from rich.table import Table
    from rich.text import Text

    console = _console()
    if not docs:
        what = " ".join(f"{k} {v}" for k, v in filters.items() if v)
        console.print(f"no documents indexed{' for ' + what if what else ''}", highlight=False)
        return
    table = Table(title=f"{len(docs)} document(s)")
    for col in ("id", "scope", "root", "path", "chunks", "status", "last error"):
        table.add_column(col, overflow="fold", justify="right" if col == "chunks" else "left")
    for d in docs:
        status = d.status if d.status == "indexed" else f"[red]{d.status}[/red]"
        cells = (d.doc_id, d.kb_scope, d.root, d.path, str(d.chunks))
        table.add_row(*(Text(c) for c in cells), status, Text(d.last_error or ""))
    console.print(table)


def scope_delete_lines(plan: Any, removed: bool) -> list[str]:
    collections = ", ".join(plan.collections) or "none"
    what = (
        f"scope {plan.scope}: alias {plan.alias or 'none'}, collection(s) {collections}, "
        f"{plan.documents} document(s), {plan.l0_entries} L0 entr{'y' if plan.l0_entries == 1 else 'ies'}"
    )
    if removed:
        return [f"removed {what}; calibrations kept"]
    return [
        f"would remove {what}; calibrations are kept",
        f"nothing removed (dry run): run `kbflow scope delete {plan.scope} --yes` to remove it",
    ]


def print_forget(root: str, given: str, shares: Sequence[Any], removed: bool) -> None:
    from rich.table import Table

    table = Table()
    for col in ("scope", "documents", "chunks", "the scope itself"):
        table.add_column(col, justify="right" if col in ("documents", "chunks") else "left")
    for s in shares:
        fate = "kept (other documents)"
        if s.scope_removed:
            fate = f"{'removed' if removed else 'would be removed'}: no documents left"
        table.add_row(s.kb_scope, str(s.documents), str(s.chunks), fate)
    console = _console()
    console.print(f"{'removed' if removed else 'would remove'} from {root}:", highlight=False, markup=False)
    console.print(table)
    if not removed:
        console.print(
            f"nothing removed (dry run): run `kbflow forget {shlex.quote(given)} --yes` to remove them",
            highlight=False,
            markup=False,
        )
