"""`kbflow docs list`, `kbflow scope delete`, `kbflow forget`: see and remove what is indexed.

Removals are dry runs unless `--yes` is given: the command prints what it would remove and
exits 0 having removed nothing. Exit codes: 0 done (or dry run), 1 refused (nothing to remove,
a root that still exists), 2 could not run (bad arguments, store unavailable, scope locked).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any

Common = Callable[[argparse.ArgumentParser], None]
RAW = argparse.RawDescriptionHelpFormatter

DOCS_EPILOG = """\
status: indexed (served), writing (a run was interrupted: the next reindex redoes it),
error (the file's latest version failed: the last good version is still served; see last error).

examples:
  kbflow docs list                          every document, one table row each
  kbflow docs list --scope rag-eval         one scope
  kbflow docs list --root seed-docs         what was indexed from one root (any spelling of it)
  kbflow docs list --json                   {"count": N, "documents": [{doc_id, kb_scope, root, path,
                                            chunks, status, last_error, indexed_at}, ...]}
"""

SCOPE_EPILOG = """\
Without --yes nothing is removed: the command prints what it would remove and exits 0.
Removed: the scope's Milvus alias and collections, its L0 entries, its document records and its
scope record. Kept: calibrations (per model and scope), the embedding cache, reindex history.
Reindexing the scope's files later builds it afresh (the embedding cache makes that cheap).

exit codes: 0 removed (or dry run), 1 nothing is indexed under that scope,
2 bad arguments, store unavailable, or the scope is being reindexed (see --wait).

examples:
  kbflow scope delete team-a                what would go (dry run)
  kbflow scope delete team-a --yes          remove it
  kbflow scope delete team-a --yes --json   {"scope", "alias", "collections", "documents", ...}
"""

FORGET_EPILOG = """\
Reindex removes a document when its file is gone from a root it is given; a root that no longer
exists at all (moved, renamed, unmounted for good) is never reindexed again, so its documents
stay searchable until forgotten. forget removes them from Milvus, the L0 index and SQL, one scope
at a time under that scope's reindex lock; a scope left without documents is removed entirely.
A root that still exists is refused: reindex it, or delete its files and reindex.
Without --yes nothing is removed: the command prints how many documents per scope would go.

exit codes: 0 removed (or dry run), 1 refused (the root exists) or nothing indexed from it,
2 bad arguments, store unavailable, or a scope is being reindexed (see --wait).

examples:
  kbflow docs list --json | jq -r '.documents[].root' | sort -u     the roots that are indexed
  kbflow forget /srv/old-docs               dry run: documents per scope that would go
  kbflow forget /srv/old-docs --yes         remove them
"""


def add_parsers(sub: Any, common: Common) -> None:
    """The `docs`, `scope` and `forget` commands (their own subparsers)."""
    p = sub.add_parser(
        "docs",
        help="list the indexed documents",
        description="Inspect the document records: what is indexed, from where, in which state.",
    )
    docs = p.add_subparsers(dest="docs_action", required=True, metavar="ACTION")
    p = docs.add_parser(
        "list",
        help="one row per document: id, scope, root, path, chunks, status, last error",
        description="List the indexed documents: id (the source as written), scope, root, path, "
        "chunks, status and last error, as a table or --json.",
        epilog=DOCS_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("--scope", help="only this kb_scope")
    p.add_argument("--root", help="only documents indexed from this root directory")
    common(p)

    p = sub.add_parser("scope", help="manage scopes (delete)", description="Manage whole kb_scopes.")
    scope = p.add_subparsers(dest="scope_action", required=True, metavar="ACTION")
    p = scope.add_parser(
        "delete",
        help="remove a scope: collections, alias, L0, documents (dry run without --yes)",
        description="Remove a kb_scope and everything indexed under it.",
        epilog=SCOPE_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("scope", metavar="SCOPE", help="the kb_scope to remove")
    _removal_flags(p)
    common(p)

    p = sub.add_parser(
        "forget",
        help="remove what was indexed from a root that no longer exists (dry run without --yes)",
        description="Remove every document indexed from ROOT, a directory that no longer exists.",
        epilog=FORGET_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("root", metavar="ROOT", help="the root as it was given to reindex (any spelling)")
    p.add_argument(
        "--force",
        action="store_true",
        help="forget ROOT although it still exists on disk: it is no longer indexed from there (an "
        "old release folder whose link moved on, a copy kept for rollback)",
    )
    _removal_flags(p)
    common(p)


def _removal_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="really remove (default: dry run, removes nothing)")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for a reindex of the scope to finish (default: refuse)",
    )


def run(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.core.stores import open_stores

    stores = open_stores(settings)
    if args.command == "docs":
        return _docs_list(args, stores)
    if args.command == "scope":
        return _scope_delete(args, stores)
    return _forget(args, stores)


def _console() -> Any:
    """On a terminal, its width; piped, one line per table row (greppable)."""
    from rich.console import Console

    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console.width = 400
    return console


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _refuse(message: str) -> int:
    print(f"kbflow: {message}", file=sys.stderr)
    return 1


def _docs_list(args: argparse.Namespace, stores: Any) -> int:
    from rich.table import Table
    from rich.text import Text

    from kbflow.ingest.manage import list_documents

    docs = list_documents(stores, scope=args.scope, root=args.root)
    if args.json:
        print(json.dumps({"count": len(docs), "documents": [d.to_dict() for d in docs]}, ensure_ascii=False))
        return 0
    console = _console()
    if not docs:
        what = " ".join(f"{k} {v}" for k, v in (("scope", args.scope), ("root", args.root)) if v)
        console.print(f"no documents indexed{' for ' + what if what else ''}", highlight=False)
        return 0
    table = Table(title=f"{len(docs)} document(s)")
    for col in ("id", "scope", "root", "path", "chunks", "status", "last error"):
        table.add_column(col, overflow="fold", justify="right" if col == "chunks" else "left")
    for d in docs:
        status = d.status if d.status == "indexed" else f"[red]{d.status}[/red]"
        cells = (d.doc_id, d.kb_scope, d.root, d.path, str(d.chunks))
        table.add_row(*(Text(c) for c in cells), status, Text(d.last_error or ""))
    console.print(table)
    return 0


def _scope_delete(args: argparse.Namespace, stores: Any) -> int:
    from kbflow.ingest.manage import delete_scope

    plan = delete_scope(stores, args.scope, dry_run=not args.yes, wait_seconds=args.wait)
    if args.json:
        print(json.dumps({**plan.to_dict(), "dry_run": not args.yes}, ensure_ascii=False))
    if plan.empty:
        return _refuse(f"nothing is indexed under scope {args.scope!r} (`kbflow status` lists the scopes)")
    if args.json:
        return 0
    collections = ", ".join(plan.collections) or "none"
    what = (
        f"scope {plan.scope}: alias {plan.alias or 'none'}, collection(s) {collections}, "
        f"{plan.documents} document(s), {plan.l0_entries} L0 entr{'y' if plan.l0_entries == 1 else 'ies'}"
    )
    if args.yes:
        print(f"removed {what}; calibrations kept")
    else:
        print(f"would remove {what}; calibrations are kept")
        print(f"nothing removed (dry run): run `kbflow scope delete {plan.scope} --yes` to remove it")
    return 0


def _forget(args: argparse.Namespace, stores: Any) -> int:
    from rich.table import Table

    from kbflow.ingest.manage import RootStillExists, forget_root
    from kbflow.ingest.sources import normalize_root

    try:
        shares = forget_root(
            stores, args.root, dry_run=not args.yes, wait_seconds=args.wait, force=args.force
        )
    except RootStillExists as exc:
        return _refuse(f"refused: {exc}")
    root = normalize_root(args.root)
    if args.json:
        total = sum(s.documents for s in shares)
        scopes = [s.to_dict() for s in shares]
        print(json.dumps({"root": root, "dry_run": not args.yes, "documents": total, "scopes": scopes}))
    if not shares:
        return _refuse(f"nothing is indexed from {root} (`kbflow docs list` shows the roots)")
    if args.json:
        return 0
    verb = "removed" if args.yes else "would remove"
    table = Table()
    for col in ("scope", "documents", "chunks", "the scope itself"):
        table.add_column(col, justify="right" if col in ("documents", "chunks") else "left")
    for s in shares:
        fate = "kept (other documents)"
        if s.scope_removed:
            fate = f"{'removed' if args.yes else 'would be removed'}: no documents left"
        table.add_row(s.kb_scope, str(s.documents), str(s.chunks), fate)
    console = _console()
    console.print(f"{verb} from {root}:", highlight=False, markup=False)
    console.print(table)
    if not args.yes:
        console.print(
            f"nothing removed (dry run): run `kbflow forget {shlex.quote(args.root)} --yes` to remove them",
            highlight=False,
            markup=False,
        )
    return 0


def status(args: argparse.Namespace, settings: Any) -> int:
    """`kbflow status`: per scope and per root; scopes without documents are not listed."""
    from rich.console import Console

    from kbflow.core.stores import open_stores
    from kbflow.ingest.status import last_run, root_counts, scope_statuses

    stores = open_stores(settings)
    statuses = scope_statuses(stores)
    roots = root_counts(statuses)
    run = last_run(stores)
    if args.json:
        print(
            json.dumps(
                {
                    "home": str(settings.home),
                    "milvus_uri": stores.settings.resolved_milvus_uri,
                    "scopes": [s.to_dict() for s in statuses],
                    "roots": roots,
                    "last_run": run,
                },
                ensure_ascii=False,
            )
        )
        return 0
    console = Console(soft_wrap=True)
    if not statuses:
        console.print(
            f"nothing indexed under {stores.settings.resolved_milvus_uri}; run `kbflow reindex PATH`"
        )
        return 0
    console.print(f"kbflow status — milvus {stores.settings.resolved_milvus_uri}", highlight=False)
    for st in statuses:
        target = st.alias_target or "[red]MISSING: run `kbflow reindex --full`[/red]"
        console.print(
            f"scope [bold]{st.kb_scope}[/bold]: {st.documents} documents "
            f"({st.documents_with_errors} with errors), {st.chunks} chunks in Milvus "
            f"({st.chunks_recorded} recorded)\n  collection {st.collection} -> {target}\n"
            f"  analyzer {st.analyzer}, model {st.model} ({st.dim}-d), last changed {st.updated_at}",
            highlight=False,
        )
        for root, n in st.roots.items():
            console.print(f"  root {root}: {_n(n, 'document')}", highlight=False, markup=False)
    console.print("documents per root:")
    for r in roots:
        per_scope = ", ".join(f"{scope} {n}" for scope, n in r["scopes"].items())
        console.print(
            f"  {r['root']}: {_n(r['documents'], 'document')} ({per_scope})", highlight=False, markup=False
        )
    if run:
        console.print(
            f"last reindex: {run['finished_at']} ({run['mode']}, "
            f"{'ok' if run['ok'] else _n(run.get('failed', 0), 'failure')})"
        )
    return 0
