"""`kbflow lookup`: in-process, or sent to a running `kbflow serve` (flows/remote.py) when one
is announced for the home. Both give the result as JSON data; `--json` prints it as it is, the
readable view (lookup_view) renders it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from kbflow.core.errors import InputError
from kbflow.flows.cli.options import add_store_flags, say_what_loads

Run = Callable[[str, "str | None"], dict[str, Any]]

DESCRIPTION = (
    "Run lookup_knowledge: L0 navigation, hybrid (or dense) search, quality gate, one fallback, context "
    "pack, audit. Prints the evidence readably (rank, title, breadcrumb, section, quality, why it was "
    "found, the excerpt wrapped to the terminal), or JSON with --json (the LookupResult; the agent's "
    'RagToolResult with --agent). With --queries FILE.jsonl (lines {"id":…, "query":…, "kb_scope":…}) '
    'prints one JSON line {"id", "result"} per query. When a `kbflow serve` runs on the home, the lookup '
    "is sent to it (its settings; no model load, well under a second)."
)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("lookup", help="look up evidence for a query", description=DESCRIPTION)
    p.add_argument("query", nargs="?", help="the symptom, error message or question")
    p.add_argument("--scope", help="kb_scope to search (default: all scopes)")
    p.add_argument(
        "--mode",
        choices=["hybrid", "dense", "bm25"],
        help="search mode (default hybrid): dense = vectors only, bm25 = keywords only",
    )
    p.add_argument("--agent", action="store_true", help="project to the agent contract (RagToolResult)")
    p.add_argument("--queries", metavar="FILE.jsonl", help="batch: one JSON object per line")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="load the model here even when a kbflow serve runs on this home (by default the lookup "
        "is sent to it, with its settings, and no model is loaded)",
    )
    add_store_flags(p)
    p.set_defaults(func=run, reads_home=True)


def run(args: argparse.Namespace, settings: Any) -> int:
    if args.queries and args.query:
        raise InputError("give either QUERY or --queries, not both")
    if not args.queries and not args.query:
        raise InputError("give a QUERY (or --queries FILE.jsonl)")
    if args.queries and not os.access(args.queries, os.R_OK):  # told before a model loads
        raise InputError(f"cannot read {args.queries}: no such readable file")
    answered = _through_service(args, settings)
    if answered is not None:
        return answered
    from kbflow.retrieval.request import LookupRejected

    say_what_loads(settings)
    return answer(args, _in_process(args, settings), (LookupRejected,))


def _through_service(args: argparse.Namespace, settings: Any) -> int | None:
    """With a `kbflow serve` announced for the home, send the lookup there: no model to load.
    None = no service to use (or it did not answer): the caller looks up in-process."""
    if args.in_process or args.milvus_uri or args.database_url:
        return None
    from kbflow.flows.remote import ServedLookup, ServiceRefused, ServiceUnreachable

    try:
        client = ServedLookup(settings.home)
    except (ServiceUnreachable, ValueError):  # none announced, or an announcement that is not ours
        return None
    print(f"kbflow: looking up through kbflow serve at {client.where}", file=sys.stderr)

    def remote(query: str, scope: str | None) -> dict[str, Any]:
        return client.lookup(
            query, scope or settings.kb_scope or None, args.mode or settings.search_mode, args.agent
        )

    try:
        return answer(args, remote, (ServiceRefused,))
    except ServiceUnreachable as exc:
        if args.queries:  # lines were printed already: looking up again would repeat them
            raise ServiceUnreachable(f"{exc}; rerun with --in-process") from None
        print(f"kbflow: {exc}; looking up in-process", file=sys.stderr)
        return None


def _in_process(args: argparse.Namespace, settings: Any) -> Run:
    from kbflow.retrieval import lookup_knowledge, project_for_agent

    def local(query: str, scope: str | None) -> dict[str, Any]:
        result = lookup_knowledge(
            query, kb_scope=scope, mode=args.mode or settings.search_mode, settings=settings, caller="cli"
        )
        return project_for_agent(result, settings).to_json() if args.agent else result.to_json()

    return local


def answer(args: argparse.Namespace, run: Run, line_errors: tuple[type[Exception], ...]) -> int:
    """One query printed (JSON or readable), or a batch: one JSON line per query, a bad line
    answered with its error (exit code 1) while the others go on."""
    if args.queries:
        return _batch(args.queries, args.scope, run, line_errors)
    data = run(args.query, args.scope)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        from kbflow.flows.cli.lookup_view import print_lookup

        print_lookup(data, agent=args.agent)
    return 0


def _batch(path: str, scope: str | None, run: Run, line_errors: tuple[type[Exception], ...]) -> int:
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 (closed below, errors told first)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    failed = 0
    with fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            item: Any = None
            try:
                item = json.loads(line)
                if not isinstance(item, dict) or not isinstance(item.get("query"), str):
                    raise ValueError('each line must be an object with a string "query"')
                out = {"id": item.get("id", n), "result": run(item["query"], item.get("kb_scope", scope))}
            except (ValueError, *line_errors) as exc:
                failed += 1
                line_id = item.get("id", n) if isinstance(item, dict) else n
                out = {"id": line_id, "error": f"{path}:{n}: {exc}"}
            print(json.dumps(out, ensure_ascii=False), flush=True)
    return 1 if failed else 0
