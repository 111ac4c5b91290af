"""`kbflow lookup`: in-process, or sent to a running `kbflow serve` (flows/remote.py), and the
readable table both print."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from kbflow.flows.errors import say_error


def lookup_through_service(
    args: argparse.Namespace, make_settings: Callable[[argparse.Namespace], Any]
) -> int | None:
    """With a `kbflow serve` announced for the home, send the lookup there: no model to load.
    None = no service to use (or it did not answer): the caller looks up in-process."""
    if args.in_process or args.milvus_uri or args.database_url:
        return None
    from kbflow.flows.remote import ServedLookup, ServiceRefused, ServiceUnreachable

    try:
        settings = make_settings(args)
        client = ServedLookup(settings.home)
    except (ValidationError, ValueError, ServiceUnreachable):  # bad settings: the main path says so
        return None
    print(f"kbflow: looking up through kbflow serve at {client.where}", file=sys.stderr)

    def run(query: str, scope: str | None) -> dict[str, Any]:
        return client.lookup(
            query, scope or settings.kb_scope or None, args.mode or settings.search_mode, args.agent
        )

    try:
        return lookup(args, settings, run, (ServiceRefused,))
    except ServiceRefused as exc:
        return say_error(str(exc))
    except ServiceUnreachable as exc:
        if args.queries:
            return say_error(f"{exc}; rerun with --in-process")
        print(f"kbflow: {exc}; looking up in-process", file=sys.stderr)
        return None


def lookup(
    args: argparse.Namespace,
    settings: Any,
    run: Any = None,
    line_errors: tuple[type[Exception], ...] = (),
) -> int:
    """`run(query, scope)` gives the result as JSON data: in-process by default, or the service's."""
    if run is None:
        from kbflow.retrieval import lookup_knowledge, project_for_agent
        from kbflow.retrieval.pipeline import LookupRejected

        line_errors = (LookupRejected,)

        def run(query: str, scope: str | None) -> dict[str, Any]:
            result = lookup_knowledge(
                query, kb_scope=scope, mode=args.mode or settings.search_mode, settings=settings
            )
            return project_for_agent(result, settings).to_json() if args.agent else result.to_json()

    if args.queries:
        if args.query:
            return say_error("give either QUERY or --queries, not both")
        failed = 0
        with open(args.queries, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                item: Any = None
                try:
                    item = json.loads(line)
                    if not isinstance(item, dict) or not isinstance(item.get("query"), str):
                        raise ValueError('each line must be an object with a string "query"')
                    out = {
                        "id": item.get("id", n),
                        "result": run(item["query"], item.get("kb_scope", args.scope)),
                    }
                except (ValueError, *line_errors) as exc:
                    failed += 1
                    line_id = item.get("id", n) if isinstance(item, dict) else n
                    out = {"id": line_id, "error": f"{args.queries}:{n}: {exc}"}
                print(json.dumps(out, ensure_ascii=False), flush=True)
        return 1 if failed else 0
    if not args.query:
        return say_error("give a QUERY (or --queries FILE.jsonl)")
    data = run(args.query, args.scope)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
        return 0
    from rich.console import Console

    _print_lookup(data, args.agent, Console(soft_wrap=True))
    return 0


def _print_lookup(data: dict[str, Any], agent: bool, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    if agent:
        console.print(
            f"evidence_status {data['evidence_status']}, relevance {data['relevance_level']}, "
            f"truncated {data['truncated']}",
            highlight=False,
        )
        for e in data["evidence"]:
            weak = " weak" if e.get("weak") else ""
            console.print(
                f"- {e['evidence_key']} ({e['quality_score']:.2f}{weak}) {e['breadcrumb']}",
                highlight=False,
                markup=False,
            )
        return
    trace = data["retrievalTrace"]
    level = data["relevanceLevel"] or "none"
    console.print(f"query: {data['query']}", highlight=False, markup=False)
    console.print(
        f"level {level} — attempt {trace['selectedAttempt']}"
        + (f" (fallback: {trace['fallbackReason']})" if trace["fallbackReason"] else "")
        + (f" — L0 category {trace['l0']['categoryFilter']}" if trace["l0"]["categoryFilter"] else ""),
        highlight=False,
    )
    _print_gate(trace, console)
    if not data["found"]:
        console.print(data["message"], highlight=False, markup=False)
        return
    table = Table()
    for col in ("rank", "doc", "breadcrumb", "section", "quality", "hit reasons"):
        table.add_column(col)
    for e in data["evidence"]:
        table.add_row(
            *(
                Text(c)
                for c in (
                    str(e["originalRank"]),
                    e["evidenceKey"],
                    e["breadcrumb"],
                    e["headingPath"],
                    f"{e['qualityScore']:.2f}" + (" weak" if e.get("weak") else ""),
                    ", ".join(e["hitReasons"]),
                )
            )
        )
    console.print(table)
    if all(e.get("weak") for e in data["evidence"]):
        console.print("all evidence is weak (below the reference threshold): corroborate before acting")


def _print_gate(trace: dict[str, Any], console: Any) -> None:
    """The gate's decision in words, with the signals and thresholds it came from."""
    gate = trace.get("gate")
    if not gate:
        return
    line = f"gate: {gate['decision']}"
    if gate.get("topEvidenceKey"):
        signals = ", ".join(f"{k} {v:.2f}" for k, v in gate["topSignals"].items())
        line += (
            f" — best {gate['topEvidenceKey']} ({signals}) quality {gate['topQuality']:.2f};"
            f" floor {gate['floor']:.2f}, reference {gate['reference']:.2f}, precise {gate['precise']:.2f}"
        )
    console.print(line, highlight=False)
    for scope, label in trace.get("calibrations", {}).items():
        console.print(f"  calibration for scope {scope}: {label}", highlight=False, markup=False)
