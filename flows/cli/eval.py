"""`kbflow eval`: the golden retrieval cases (offline, live or snapshot) gated on a baseline, a
BEIR dataset at depth (--beir), and `kbflow eval calibrate` (the gate's thresholds)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kbflow.flows.cli.options import add_store_flags, say_what_loads

DESCRIPTION = (
    "Evaluate eval/rag-retrieval/cases/golden-cases.json. --offline judges the frozen fixtures (no "
    "Milvus, SQL or model); --live (default) reseeds the cases' scopes from seed-docs/ and runs the real "
    "lookup; --snapshot does the same and rewrites the fixtures. With --compare-to, exit code 1 on a "
    "regression (cases that fail in the baseline too are counted as known failures; --show-known lists "
    "them); without it, 1 on any "
    "failed case; 2 on a malformed cases file, fixture or baseline. `kbflow eval --beir DIR` evaluates a "
    "BEIR dataset at depth; `kbflow eval calibrate` fits the gate."
)
ACTION_HELP = (
    "run (default): evaluate the golden cases, or a BEIR dataset with --beir. calibrate: read labelled "
    "answerable and unanswerable queries (the golden cases with --golden, a BEIR dataset with --beir plus "
    "--negatives/--negatives-from, or both), show the gate signals' distributions for each group, choose "
    "the gate thresholds (usable floor, reference and precise) from them, and store the calibration per "
    "(embedding model, scope) so later lookups in that scope use it"
)


SHOW_KNOWN_HELP = (
    "list the known failures (cases failing in the baseline too) one per line; by default the verdict "
    "only counts them"
)
MODE_SETS = {"both": ["hybrid", "dense"], "all": ["hybrid", "dense", "bm25"]}


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "eval", help="run the golden retrieval cases and gate on the baseline", description=DESCRIPTION
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--offline",
        dest="source",
        action="store_const",
        const="offline",
        help="judge the frozen fixtures: no Milvus, SQL or model",
    )
    src.add_argument(
        "--live",
        dest="source",
        action="store_const",
        const="live",
        help="reseed the cases' scopes from seed-docs/ and run the real lookup (default)",
    )
    src.add_argument(
        "--snapshot",
        dest="source",
        action="store_const",
        const="snapshot",
        help="rewrite fixtures/<caseId>.json from live results",
    )
    p.add_argument(
        "--mode",
        choices=["hybrid", "dense", "bm25", "both", "all"],
        default="both",
        help="search mode(s) to run: both = hybrid and dense (default), all = hybrid, dense and bm25",
    )
    p.add_argument("--scope", help="only the cases of this scope; with --beir, the scope to ingest into")
    p.add_argument(
        "--model",
        metavar="NAME",
        help="embedding model of the scope(s) this eval builds (with --scope: that scope's), e.g. "
        "all-MiniLM-L6-v2 or multilingual-e5-small; default: by the documents' language. calibrate: "
        "fit only the queries embedded with it",
    )
    p.add_argument("--cases", help="cases file (default eval/rag-retrieval/cases/golden-cases.json)")
    p.add_argument("--fixtures", help="fixtures directory (default eval/rag-retrieval/fixtures)")
    p.add_argument("--json-report", metavar="F", help="write the full report as JSON to F")
    p.add_argument("--show-known", action="store_true", help=SHOW_KNOWN_HELP)
    p.add_argument(
        "--markdown-report", metavar="F", help="write the report as Markdown to F, and a chart F.png"
    )
    p.add_argument(
        "--compare-to", metavar="BASELINE.json", help="gate on this baseline report: exit 1 on a regression"
    )
    p.add_argument("--diff-json-report", metavar="F", help="with --compare-to: write the diff as JSON to F")
    p.add_argument(
        "--diff-markdown-report", metavar="F", help="with --compare-to: write the diff as Markdown to F"
    )
    p.add_argument("action", nargs="?", choices=["run", "calibrate"], default="run", help=ACTION_HELP)
    _beir_args(p)
    _calibrate_args(p)
    add_store_flags(p)
    p.set_defaults(func=run)


def _beir_args(p: argparse.ArgumentParser) -> None:
    beir = p.add_argument_group(
        "BEIR datasets",
        "Ingest a BEIR dataset into --scope, run every judged query with --depth candidates and report "
        "nDCG@10, MRR@10, recall@10/@100 and P@5 on the candidate lists (original document ids), the "
        "delivered-evidence metrics at k = return_n, no-evidence honesty, fallback and L0 figures.",
    )
    beir.add_argument(
        "--beir", metavar="DIR", help="evaluate a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/test.tsv)"
    )
    beir.add_argument(
        "--depth", type=int, default=100, metavar="N", help="candidate chunks fetched per query (default 100)"
    )
    beir.add_argument(
        "--negatives",
        metavar="QUERIES.jsonl",
        help='unanswerable queries, one {"_id", "text", "kind": "near"|"off"} per line (kind default off)',
    )
    beir.add_argument(
        "--negatives-from",
        metavar="DIR",
        help="another BEIR dataset whose queries.jsonl serve as off-domain negatives (ids prefixed neg-)",
    )
    beir.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where the TREC run files <scope>.<mode>.trec are written (default <home>/runs)",
    )
    beir.add_argument(
        "--compare",
        action="store_true",
        help="compare the modes' candidate runs (and any --compare-runs) with a paired t-test",
    )
    beir.add_argument(
        "--compare-runs",
        nargs="+",
        default=[],
        metavar="F",
        help="TREC run files from earlier configurations to compare against (implies --compare)",
    )


def _calibrate_args(p: argparse.ArgumentParser) -> None:
    cal = p.add_argument_group(
        "calibrate",
        "kbflow eval calibrate [--golden] [--beir DIR --scope S --negatives F | --negatives-from DIR] "
        "[--self --scope S] [--no-store] [--chart F.png] | --refresh [--scope S]",
    )
    cal.add_argument(
        "--golden",
        action="store_true",
        help="use the golden cases (yours with --cases FILE: answerable ones naming their documents, "
        'near- and off-domain ones with "negative"; ten of a scope are enough to adjust its level model)',
    )
    cal.add_argument(
        "--self",
        dest="self_pairs",
        action="store_true",
        help="no labels needed: make pseudo-queries from scope S's own documents (titles, headings, "
        "salient sentences, tf-idf keywords) and ask each with its document and with it left out "
        "(a near-domain question by construction), and fit the gate on cosine alone (a pseudo-query's "
        "coverage is 1 by construction). Measured against labelled sets, such a fit is no better than the "
        "packaged default on all of them (README, Answerability), so it is shown, not stored, unless "
        "--store; with --golden or --beir the pairs join the labelled queries",
    )
    cal.add_argument(
        "--max-docs",
        type=int,
        default=60,
        metavar="N",
        help="--self: documents that give pseudo-queries (a seeded sample of the scope; default 60)",
    )
    cal.add_argument(
        "--refresh",
        action="store_true",
        help="fit again, on the recipe each was stored with, the scope calibrations fitted before their "
        "scope's last full rebuild (a reindex and the calibration-refresh flow do this too); with --scope S, "
        "that scope's, stale or not",
    )
    cal.add_argument(
        "--store",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="store the chosen calibration per (model, scope) (the default, except with --self alone); "
        "--no-store only shows it",
    )
    cal.add_argument("--chart", metavar="F.png", help="write the gate signals' distributions chart to F.png")
    cal.add_argument(
        "--export",
        metavar="F.json",
        help="also write the calibration and the data it came from to F.json (how the packaged default "
        "retrieval/default_calibration.json is made)",
    )


def run(args: argparse.Namespace, settings: Any) -> int:
    if args.source != "offline":
        say_what_loads(settings)
    if args.action == "calibrate" and args.refresh:
        return _refresh(args, settings)
    if args.action == "calibrate":
        from kbflow.calibration.calibration_data import calibrate_command

        return calibrate_command(args, settings)
    if args.beir:
        from kbflow.evaluation.beir import beir_command

        return beir_command(args, settings)
    outcome = _golden(args, settings)
    _write_reports(args, outcome)
    if args.json:
        print(json.dumps({"report": outcome.report, "diff": outcome.diff}, ensure_ascii=False))
    else:
        from kbflow.flows.cli.views import eval_lines

        for line in eval_lines(outcome, show_known=args.show_known):
            print(line)
    return 0 if outcome.ok else 1


def _refresh(args: argparse.Namespace, settings: Any) -> int:
    """`kbflow eval calibrate --refresh`: 0 when every due calibration was refitted (or none was
    due), 1 when one could not be (it is kept, and status flags it)."""
    from kbflow.calibration.recalibrate import refresh

    refits = refresh(settings, [args.scope] if args.scope else None, stale_only=not args.scope)
    for r in refits:
        print(r.line())
    if not refits:
        print("every scope calibration is at least as new as its scope's collection: nothing to refit")
    return 0 if all(r.outcome == "refitted" for r in refits) else 1


def _golden(args: argparse.Namespace, settings: Any) -> Any:
    from kbflow.evaluation.runner import EVAL_ROOT, run_eval

    return run_eval(
        source=args.source or "live",
        modes=MODE_SETS.get(args.mode, [args.mode]),
        settings=settings,
        cases_path=Path(args.cases) if args.cases else EVAL_ROOT / "cases" / "golden-cases.json",
        fixtures_dir=Path(args.fixtures) if args.fixtures else EVAL_ROOT / "fixtures",
        compare_to=Path(args.compare_to) if args.compare_to else None,
        scope=args.scope,
    )


def _write_reports(args: argparse.Namespace, outcome: Any) -> None:
    """The report files asked for: JSON, Markdown with its chart, and the baseline diff."""
    from kbflow.evaluation.report import diff_markdown, report_markdown, write_chart

    report = outcome.report
    if args.json_report:
        Path(args.json_report).write_text(
            json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
    if args.markdown_report:
        md = Path(args.markdown_report)
        chart = md.with_suffix(".png")
        write_chart(report, chart)
        md.write_text(report_markdown(report, chart.name), encoding="utf-8")
    if outcome.diff is not None:
        if args.diff_json_report:
            Path(args.diff_json_report).write_text(
                json.dumps(outcome.diff, indent=1) + "\n", encoding="utf-8"
            )
        if args.diff_markdown_report:
            Path(args.diff_markdown_report).write_text(diff_markdown(outcome.diff), encoding="utf-8")
