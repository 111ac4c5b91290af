"""`kbflow reindex`: index Markdown roots, in-process (with a progress bar on a terminal) or as
the Prefect `reindex` flow."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kbflow.flows.cli.options import RAW, add_store_flags, flag_overrides, say_what_loads

DESCRIPTION = (
    "Index every *.md under PATH... Unchanged files cost nothing; changed files replace their "
    "chunks; files gone from a root are removed (and listed). A document is its (kb_scope, source): "
    "a moved file or root keeps it, nothing is embedded again. A bad file is reported with its reason "
    "and the rest are still indexed (exit code 1). Nothing is removed when the scan looks partial: a "
    "missing or unreadable root or folder, a dangling symlink, a root that now holds no Markdown, or a "
    "run that would remove more than max_delete_fraction of a scope (exit code 1; --allow-mass-delete "
    "confirms)."
)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "reindex",
        help="index Markdown roots (incremental by default)",
        description=DESCRIPTION,
        formatter_class=RAW,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="root directory of Markdown files")
    p.add_argument("--scope", help="index only this kb_scope; files without kb_scope join it")
    p.add_argument("--full", action="store_true", help="rebuild into a new collection, switch the alias")
    p.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="confirm removals the guards refuse: a root that now holds no Markdown, or a run that "
        "would remove more than max_delete_fraction (default 0.5) of a scope's documents",
    )
    p.add_argument(
        "--analyzer",
        choices=["standard", "jieba"],
        help="BM25 analyzer for scopes created or rebuilt by this run",
    )
    p.add_argument(
        "--model",
        metavar="NAME",
        help="embedding model for scopes created or rebuilt by this run (with --scope: that scope's, "
        "as [scopes.S] embedding_model in kbflow.toml): all-MiniLM-L6-v2 (English), "
        "multilingual-e5-small (Chinese and mixed), or a sentence-transformers model directory; "
        "changing a scope's model needs --full. Default: by the documents' language",
    )
    p.add_argument("--prefect", action="store_true", help="run as the Prefect 'reindex' flow")
    p.add_argument(
        "--task-runner",
        choices=["default", "dask"],
        default="default",
        help="dask: embed batches on a Dask cluster through Prefect (implies --prefect)",
    )
    p.add_argument(
        "--dask-address", metavar="ADDR", help="scheduler address; default a local cluster (--dask-workers)"
    )
    p.add_argument(
        "--dask-workers",
        type=_at_least_one,
        default=2,
        metavar="N",
        help="workers of the local cluster when no --dask-address (one process, one thread each; default 2)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another run on the same scope to finish (default: refuse)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    add_store_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Any) -> int:
    from kbflow.flows.cli.views import print_reindex_summary
    from kbflow.flows.errors import console as piped_console
    from kbflow.ingest.sources import resolve_roots

    resolve_roots(args.paths)  # a missing or unreadable root fails before anything loads
    say_what_loads(settings)
    if args.scope:
        from kbflow.core.validation import validate_scope

        validate_scope(args.scope)
    if args.prefect or args.task_runner == "dask":
        summary, refits = _through_prefect(args, settings)
    else:
        from kbflow.calibration.recalibrate import refresh

        summary = _in_process(args, settings, piped_console(stderr=True))
        # a rebuilt scope's calibration describes chunks that are gone: fitted again on its recipe
        refits = [r.__dict__ for r in refresh(settings, list(summary.scopes))]
    if args.json:
        print(json.dumps({**summary.to_dict(), "calibrations": refits}, ensure_ascii=False))
    else:
        print_reindex_summary(summary, piped_console(soft_wrap=True))
        print_refits(refits)
    return 0 if summary.ok else 1


def print_refits(refits: list[dict[str, str]]) -> None:
    from kbflow.calibration.recalibrate import Refit

    for r in refits:
        print(Refit(**r).line())


def _through_prefect(args: argparse.Namespace, settings: Any) -> tuple[Any, list[dict[str, str]]]:
    """The same reindex as the Prefect flow; its result data back into a ReindexSummary, and
    what the flow did to the scopes' calibrations."""
    from kbflow.flows.reindex import run_reindex_flow
    from kbflow.ingest.reindex import ReindexSummary, ScopeSummary

    ok, data = run_reindex_flow(
        args.paths,
        args.scope,
        args.full,
        str(settings.home),
        args.task_runner,
        args.dask_address,
        dask_workers=args.dask_workers,
        allow_mass_delete=args.allow_mass_delete,
        settings=flag_settings(args),
    )
    scopes = {k: ScopeSummary(**v) for k, v in data.pop("scopes").items()}
    data.pop("ok")
    refits = data.pop("calibrations", [])
    return ReindexSummary(**data, scopes=scopes), refits


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings this command's flags set, for the flow (which reads the rest itself)."""
    from kbflow.flows.cli.options import settings_from_args

    names = {name for name in flag_overrides(args) if name != "home"}
    return settings_from_args(args).model_dump(mode="json", include=names) if names else {}


def _in_process(args: argparse.Namespace, settings: Any, err: Any) -> Any:
    """The library's reindex, with a progress bar per stage on a terminal."""
    from kbflow.ingest.reindex import reindex

    kwargs: dict[str, Any] = {
        "scope": args.scope,
        "full": args.full,
        "settings": settings,
        "wait_seconds": args.wait,
        "allow_mass_delete": args.allow_mass_delete,
    }
    if not err.is_terminal or args.no_progress:
        return reindex(args.paths, **kwargs)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                label = STAGE_LABELS.get(stage, f"{stage} documents")
                tasks[stage] = bar.add_task(label, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        return reindex(args.paths, progress=progress, **kwargs)


# the build stages are collection steps, not documents
STAGE_LABELS = {"build": "build the scope's collection", "rebuild": "rebuild the scope's collection"}


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
