"""`kbflow store migrate`: move a home built on Milvus Lite 3.x to the engine kbflow runs now."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kbflow.flows.cli.options import add_store_flags

DESCRIPTION = (
    "kbflow's embedded store is Milvus Lite 2.5 (Milvus's own C++ engine); homes built before ran "
    "on Milvus Lite 3.x, whose data directory the new engine cannot read. `kbflow store migrate` "
    "renames that directory to milvus.db.lite3 (kept: delete it yourself once you are content), then "
    "rebuilds every scope in full from the roots its documents were indexed from, with every vector "
    "taken from the embedding cache: nothing is embedded again. On a home that needs nothing it says "
    "so and changes nothing. Exit 1 when a recorded root is gone or a document failed."
)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("store", help="the Milvus store (migrate)", description=DESCRIPTION)
    p.add_argument("action", choices=["migrate"], help="migrate: rebuild a Milvus Lite 3.x home's chunks")
    add_store_flags(p)
    p.set_defaults(func=run, reads_home=True)


def run(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.cli.views import print_reindex_summary
    from kbflow.flows.errors import console
    from kbflow.ingest.migrate_store import migrate_store, old_store

    if old_store(settings) is None:
        where = settings.milvus_uri or settings.resolved_milvus_uri
        print(f"nothing to migrate: {where} is not a Milvus Lite 3.x directory")
        return 0
    print(f"migrating {settings.resolved_milvus_uri}: every scope is rebuilt from the embedding cache",
          file=sys.stderr)
    done = migrate_store(settings)
    out = {
        "kept": str(done.kept), "roots": done.roots, "missing_roots": done.missing_roots,
        "chunks_written": done.summary.chunks_written if done.summary else 0,
        "chunks_embedded": done.summary.chunks_embedded if done.summary else 0, "ok": done.ok,
    }
    if args.json:
        print(json.dumps(out))
    else:
        if done.summary is not None:
            print_reindex_summary(done.summary, console())
        for root in done.missing_roots:
            print(f"root gone, its documents were not rebuilt: {root}")
        print(f"the old data is kept in {done.kept}")
        print(f"verdict: {'MIGRATED' if done.ok else 'INCOMPLETE'} — {out['chunks_written']} chunks written, "
              f"{out['chunks_embedded']} embedded again")
    return 0 if done.ok else 1
