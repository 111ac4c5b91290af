"""`kbflow status`, `kbflow docs list`, `kbflow scope delete`, `kbflow forget`: see and remove
what is indexed.

Removals are dry runs unless `--yes` is given: the command prints what it would remove and
exits 0 having removed nothing. Exit codes: 0 done (or dry run), 1 refused (nothing to remove,
a root that still exists), 2 bad arguments, 3 store unavailable or scope locked.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kbflow.flows.cli import manage_view as view
from kbflow.flows.cli.options import RAW, add_store_flags, known_scopes, require_scope

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

exit codes: 0 removed (or dry run), 1 nothing is indexed under that scope, 2 bad arguments,
3 store unavailable, or the scope is being reindexed (see --wait).

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
2 bad arguments, 3 store unavailable, or a scope is being reindexed (see --wait).

examples:
  kbflow docs list --json | jq -r '.documents[].root' | sort -u     the roots that are indexed
  kbflow forget /srv/old-docs               dry run: documents per scope that would go
  kbflow forget /srv/old-docs --yes         remove them
"""


def add_parsers(sub: Any) -> None:
    for build in (_status_parser, _docs_parser, _scope_parser, _forget_parser):
        build(sub)


def _status_parser(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="show what is indexed, per scope and per root",
        description="Per scope: documents (per root), chunks in Milvus next to the recorded count, "
        "collection and alias target, analyzer, model; then documents per root. Scopes without "
        "documents are not listed.",
    )
    add_store_flags(p)
    p.set_defaults(func=status, reads_home=True)


def _docs_parser(sub: Any) -> None:
    p = sub.add_parser(
        "docs",
        help="list the indexed documents",
        description="Inspect the document records: what is indexed, from where, in which state.",
    )
    actions = p.add_subparsers(dest="docs_action", required=True, metavar="ACTION", help="what to do: list")
    p = actions.add_parser(
        "list",
        help="one row per document: id, scope, root, path, chunks, status, last error",
        description="List the indexed documents: id (the source as written), scope, root, path, "
        "chunks, status and last error, as a table or --json.",
        epilog=DOCS_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("--scope", help="only this kb_scope")
    p.add_argument("--root", help="only documents indexed from this root directory")
    add_store_flags(p)
    p.set_defaults(func=docs_list, reads_home=True)


def _scope_parser(sub: Any) -> None:
    p = sub.add_parser("scope", help="manage scopes (delete)", description="Manage whole kb_scopes.")
    actions = p.add_subparsers(
        dest="scope_action", required=True, metavar="ACTION", help="what to do: delete"
    )
    p = actions.add_parser(
        "delete",
        help="remove a scope: collections, alias, L0, documents (dry run without --yes)",
        description="Remove a kb_scope and everything indexed under it.",
        epilog=SCOPE_EPILOG,
        formatter_class=RAW,
    )
    p.add_argument("scope", metavar="SCOPE", help="the kb_scope to remove")
    _removal_flags(p)
    add_store_flags(p)
    p.set_defaults(func=scope_delete, reads_home=True)


def _forget_parser(sub: Any) -> None:
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
    add_store_flags(p)
    p.set_defaults(func=forget, reads_home=True)


def _removal_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="really remove (default: dry run, removes nothing)")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for a reindex of the scope to finish (default: refuse)",
    )


def _refuse(message: str) -> int:
    print(f"kbflow: {message}", file=sys.stderr)
    return 1


def _dump(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False))


def status(args: argparse.Namespace, settings: Any) -> int:
    """Per scope and per root; scopes without documents are not listed. While another process
    (a reindex) holds the Milvus Lite file, what SQL records is still shown, Milvus's counts not."""
    from kbflow.core.chunk_store import built_at
    from kbflow.core.milvus_store import StoreUnavailable
    from kbflow.core.sql import SqlStore
    from kbflow.core.stores import open_stores
    from kbflow.ingest.status import last_run, root_counts, scope_statuses_from
    from kbflow.retrieval.calibration import describe

    held, uri = "", settings.resolved_milvus_uri
    try:
        stores = open_stores(settings)
        sql, chunks, uri = stores.sql, stores.chunks, stores.settings.resolved_milvus_uri  # or a serve's
    except StoreUnavailable as exc:
        if not exc.held:
            raise
        who = f"process {exc.holder[0]} ({exc.holder[1][:120]})" if exc.holder else "another process"
        held = f"{who} holds the Milvus Lite file: chunk counts are not shown until it finishes"
        sql, chunks = SqlStore(settings.resolved_database_url), None
    statuses = scope_statuses_from(sql, chunks, settings.multilingual_model)
    for st in statuses:
        st.calibration = describe(sql, st.model, st.kb_scope, built_at(st.alias_target or ""), st.documents)
    roots, run = root_counts(statuses), last_run(sql)
    if args.json:
        scopes = [s.to_dict() for s in statuses]
        db = settings.milvus_database or None
        _dump({"home": str(settings.home), "milvus_uri": uri, "milvus_database": db,
               "milvus_held": held or None, "scopes": scopes, "roots": roots, "last_run": run})
    else:
        where = f"{uri} (database {settings.milvus_database})" if settings.milvus_database else uri
        view.print_status(where, statuses, roots, run, held)
    return 0


def docs_list(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.core.stores import open_stores
    from kbflow.ingest.manage import list_documents

    stores = open_stores(settings)
    require_scope(stores.sql, args.scope)
    docs = list_documents(stores, scope=args.scope, root=args.root)
    if args.json:
        _dump({"count": len(docs), "documents": [d.to_dict() for d in docs]})
    else:
        view.print_documents(docs, {"scope": args.scope, "root": args.root})
    return 0


def scope_delete(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.core.stores import open_stores
    from kbflow.ingest.manage import delete_scope

    plan = delete_scope(open_stores(settings), args.scope, dry_run=not args.yes, wait_seconds=args.wait)
    if args.json:
        _dump({**plan.to_dict(), "dry_run": not args.yes})
    if plan.empty:
        scopes = known_scopes(open_stores(settings).sql)
        there = f": the scopes are {', '.join(scopes[:20])}" if scopes else ""
        return _refuse(f"nothing is indexed under scope {args.scope!r}{there}")
    if not args.json:
        for line in view.scope_delete_lines(plan, removed=args.yes):
            print(line)
    return 0


def forget(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.core.stores import open_stores
    from kbflow.ingest.manage import RootStillExists, forget_root
    from kbflow.ingest.sources import normalize_root

    stores = open_stores(settings)
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
    if not args.json:
        view.print_forget(root, args.root, shares, removed=args.yes)
    return 0
