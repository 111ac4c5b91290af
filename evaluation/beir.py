"""BEIR datasets (corpus.jsonl, queries.jsonl, qrels/test.tsv): ingest into their own scope by
the normal reindex, run every judged query (and unanswerable negatives) through lookup_knowledge and
report IR metrics on the candidate lists at depth, on the evidence delivered at k = return_n, and how
honest the no-evidence answers, the fallback and L0 are. Reports and run files use the dataset's
ORIGINAL ids. load_beir, load_negatives, negatives_from, ingest_beir, run_lookups serve calibrate too.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kbflow.core.settings import Settings
from kbflow.evaluation import ir
from kbflow.evaluation.cases import CaseFileError

FILTERED = "FILTERED_VECTOR"
RETRY = "UNFILTERED_VECTOR_RETRY"
NEGATIVE_KINDS = ("near", "off")
SETTING_NAMES = (
    "fusion rrf_k dense_weight sparse_weight retrieve_k lexical_analysis lexical_fields "
    "max_chunks_per_document return_n".split()
)
Qrels = Mapping[str, Mapping[str, int]]
Negatives = Mapping[str, tuple[str, str]]  # qid -> (text, kind)
Ids = Mapping[str, str]  # kbflow doc id -> original id (the same string: sources are kept as written)
Results = Mapping[str, Any]  # qid -> LookupResult


def safe_id(raw: str) -> str:
    """A file name for a free-form BEIR id (the id itself stays the document's source)."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", raw):
        return raw
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", raw).strip("-")[:50] or "doc"
    return f"{slug}-{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CaseFileError(f"{path}:{n}: not JSON: {exc}") from exc
            if not isinstance(row, dict) or "_id" not in row:
                raise CaseFileError(f"{path}:{n}: expected an object with an _id")
            if not str(row["_id"]) or re.search(r"\s", str(row["_id"])):
                raise CaseFileError(f"{path}:{n}: _id {row['_id']!r} is empty or has whitespace (TREC ids)")
            rows.append(row)
    return rows


def _queries(path: Path) -> dict[str, dict[str, Any]]:
    """Query rows by id; an empty text would make the lookup refuse, so it is bad input here."""
    if not path.is_file():
        raise CaseFileError(f"{path}: queries file not found")
    out: dict[str, dict[str, Any]] = {}
    for row in _jsonl(path):
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise CaseFileError(f"{path}: query {row['_id']!r} has no text")
        out[str(row["_id"])] = row
    return out


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or row[0] == "query-id":
                continue
            try:
                qid, did, grade = row[0], row[1], int(row[2])
            except (IndexError, ValueError) as exc:
                raise CaseFileError(f"{path}:{n}: expected query-id<TAB>corpus-id<TAB>score") from exc
            if grade > 0:
                qrels.setdefault(qid, {})[did] = grade
    return qrels


def load_beir(
    root: Path, split: str = "test"
) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """(corpus rows, {qid: text}, {qid: {original doc id: grade > 0}})."""
    for name in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / name).exists():
            raise CaseFileError(f"{root}: BEIR dataset lacks {name}")
    corpus = _jsonl(root / "corpus.jsonl")
    if not corpus:
        raise CaseFileError(f"{root}/corpus.jsonl: no documents")
    queries = {qid: row["text"] for qid, row in _queries(root / "queries.jsonl").items()}
    return corpus, queries, _read_qrels(root / f"qrels/{split}.tsv")


def load_negatives(path: Path) -> dict[str, tuple[str, str]]:
    """Unanswerable queries {qid: (text, kind)}; kind is near (on-topic, not covered) or off."""
    out = {}
    for qid, row in _queries(path).items():
        kind = row.get("kind") or "off"
        if kind not in NEGATIVE_KINDS:
            raise CaseFileError(f"{path}: query {qid!r} has kind {kind!r}; use near or off")
        out[qid] = (row["text"], kind)
    return out


def negatives_from(root: Path) -> dict[str, tuple[str, str]]:
    """Another dataset's queries as off-domain negatives, ids prefixed neg- to stay apart."""
    return {f"neg-{qid}": (row["text"], "off") for qid, row in _queries(root / "queries.jsonl").items()}


def write_markdown_corpus(corpus: Sequence[dict], out: Path, scope: str) -> dict[str, str]:
    """One Markdown file per BEIR document, its `source` the dataset's own id; returns file
    stem -> id. Files of documents no longer in the corpus are removed, so the scope mirrors
    this dataset."""
    out.mkdir(parents=True, exist_ok=True)
    mapping: dict[str, str] = {}
    for doc in corpus:
        original = str(doc["_id"])
        stem = safe_id(original)
        if stem in mapping:
            raise CaseFileError(f"corpus.jsonl: duplicate document id {original!r}")
        mapping[stem] = original
        title = " ".join(str(doc.get("title") or "").split())
        body = f"# {title}\n\n{doc.get('text') or ''}\n" if title else f"{doc.get('text') or ''}\n"
        fm = {"source": original, "kb_scope": scope, "title": title or original}
        front = yaml.safe_dump(fm, allow_unicode=True, sort_keys=False)
        (out / f"{stem}.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    for stale in out.glob("*.md"):
        if stale.stem not in mapping:
            stale.unlink()
    return mapping


def ingest_beir(
    root: Path, scope: str, settings: Settings, corpus: Sequence[dict] | None = None
) -> tuple[dict[str, str], dict[str, Any]]:
    """Reindex the corpus into `scope` under <home>/beir/<scope>; failed documents are listed in
    summary["failed_documents"] with their original ids, the rest stay indexed."""
    from kbflow.ingest.reindex import reindex

    corpus = corpus if corpus is not None else load_beir(root)[0]
    out = settings.home / "beir" / scope
    stems = write_markdown_corpus(corpus, out, scope)
    summary = reindex([out], scope=scope, settings=settings).to_dict()
    summary["failed_documents"] = [
        {"doc_id": stems.get(Path(f["path"]).stem), "path": f["path"], "reason": f["reason"]}
        for f in summary.get("failed", [])
    ]
    return {original: original for original in stems.values()}, summary


def run_lookups(
    queries: Mapping[str, str], scope: str, settings: Settings, mode: str, depth: int, progress_label: str
) -> dict[str, Any]:
    """{qid: LookupResult}, each lookup fetching at least `depth` candidate chunks; a progress
    bar on stderr when it is a terminal (stdout may carry the JSON report)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kbflow.retrieval.lookup import lookup_knowledge

    console = Console(stderr=True)
    columns = (TextColumn(progress_label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    results: dict[str, Any] = {}
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(progress_label, total=len(queries))
        for qid, text in queries.items():
            results[qid] = lookup_knowledge(
                text, kb_scope=scope, mode=mode, settings=settings, depth=depth, caller="eval"
            )
            bar.advance(task)
    return results


def _docs(hits: Sequence[Any], mapping: Ids) -> list[str]:
    return ir.ranked_docs(mapping.get(h.doc_id, h.doc_id) for h in hits)


def candidate_docs(result: Any, mapping: Ids, attempt: str | None = None) -> list[str]:
    """Document-level ranked list of an attempt (default: the selected one), original ids."""
    name = attempt or result.retrieval_trace.selected_attempt
    return _docs(result.candidates.get(name, []), mapping)


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _weak_only(result: Any) -> bool:  # evidence, but no level: nothing to act on uncorroborated
    return bool(result.found) and result.relevance_level is None


def _honesty(qrels: Qrels, results: Results, mapping: Ids) -> dict[str, Any]:
    """Answerable queries answered 'no evidence', and whether the answer was in the candidates."""
    missed = [q for q in qrels if not results[q].found]
    with_candidate = [q for q in missed if set(candidate_docs(results[q], mapping)) & set(qrels[q])]
    weak_only = [q for q in qrels if _weak_only(results[q])]
    return {
        "false_no_evidence_rate": _rate(len(missed), len(qrels)),
        "false_no_evidence": len(missed),
        "false_no_evidence_with_relevant_candidate": _rate(len(with_candidate), len(missed)),
        "weak_only_rate": _rate(len(weak_only), len(qrels)),
    }


def _negatives(negatives: Negatives, results: Results) -> dict[str, Any]:
    """Per kind: unanswerable queries answered found=false, weak only, or either (held back)."""
    out: dict[str, Any] = {}
    for kind in NEGATIVE_KINDS:
        got = [results[q] for q, (_, k) in negatives.items() if k == kind]
        out[kind] = {
            "queries": len(got),
            "true_no_evidence_rate": _rate(sum(not r.found for r in got), len(got)),
            "weak_only_rate": _rate(sum(_weak_only(r) for r in got), len(got)),
            "held_back_rate": _rate(sum(not r.found or _weak_only(r) for r in got), len(got)),
        }
    return out


def _fallback(qrels: Qrels, results: Results, mapping: Ids, k: int) -> dict[str, Any]:
    """Was the unfiltered retry needed (the filtered top-k had nothing relevant), and did it help?"""
    fired = [q for q in qrels if results[q].retrieval_trace.fallback_reason is not None]
    needed = helped = 0
    for q in fired:
        relevant = set(qrels[q])
        filtered = set(candidate_docs(results[q], mapping, FILTERED)[:k]) & relevant
        retried = set(candidate_docs(results[q], mapping, RETRY)[:k]) & relevant
        needed += not filtered
        helped += bool(retried - filtered)
    return {
        "fallback_fired": len(fired),
        "fallback_precision": _rate(needed, len(fired)),
        "fallback_effectiveness": _rate(helped, len(fired)),
    }


def _l0(qrels: Qrels, results: Results, mapping: Ids) -> dict[str, Any]:
    """How often L0's category filter removed every relevant document from the candidates."""
    filtered = [q for q in qrels if any(a.attempt == FILTERED for a in results[q].retrieval_trace.attempts)]
    killed = [q for q in filtered if not set(candidate_docs(results[q], mapping, FILTERED)) & set(qrels[q])]
    return {"l0_false_kill_rate": _rate(len(killed), len(filtered)), "l0_filtered_lookups": len(filtered)}


def evaluate_mode(
    qrels: Qrels, results: Results, negatives: Negatives, mapping: Ids, k: int, name: str
) -> tuple[dict[str, Any], Any]:
    """One mode's report section and its candidate run (for the TREC file and comparisons)."""
    run = ir.make_run({q: candidate_docs(results[q], mapping) for q in qrels}, name, qrels)
    delivered = {q: _docs(results[q].evidence, mapping) for q in qrels}
    no_evidence = _honesty(qrels, results, mapping)
    no_evidence["negatives"] = _negatives(negatives, results)
    no_evidence["true_no_evidence_rate"] = {
        kind: v["true_no_evidence_rate"] for kind, v in no_evidence["negatives"].items()
    }
    section = {
        "candidates": ir.evaluate_run(ir.make_qrels(qrels), run, ir.CANDIDATE_METRICS),
        "delivered": ir.delivered_metrics(qrels, delivered, k),
        "no_evidence": no_evidence,
        "fallback": _fallback(qrels, results, mapping, k),
        **_l0(qrels, results, mapping),
    }
    return section, run


def settings_summary(settings: Settings) -> dict[str, Any]:
    """The retrieval knobs a reader needs to reproduce the numbers (missing ones: None)."""
    out = {}
    for name in SETTING_NAMES:
        value = getattr(settings, name, None)
        out[name] = value if value is None or isinstance(value, str | int | float | bool) else str(value)
    return out


def run_beir(
    root: Path,
    scope: str,
    settings: Settings,
    modes: Sequence[str],
    *,
    depth: int = 100,
    negatives: Negatives | None = None,
    run_dir: Path | None = None,
    compare: bool = False,
    compare_runs: Sequence[Path] = (),
) -> dict[str, Any]:
    """Ingest, run every judged query and negative per mode, write one TREC run per mode and
    optionally compare the runs (paired t-test). report["ok"] is False when documents failed."""
    negatives = dict(negatives or {})
    corpus, queries, qrels = load_beir(root)
    judged = {q: r for q, r in qrels.items() if q in queries}
    if not judged:
        raise CaseFileError(f"{root}: no query of qrels/test.tsv is in queries.jsonl")
    if clash := sorted(set(negatives) & set(queries)):
        raise CaseFileError(f"negative query ids also in {root}/queries.jsonl: {', '.join(clash[:5])}")
    extra_runs = [ir.load_trec(Path(p)) for p in compare_runs]  # before run files are overwritten
    mapping, summary = ingest_beir(root, scope, settings, corpus)
    k = settings.return_n
    out_dir = run_dir or settings.home / "runs"
    report: dict[str, Any] = {
        "dataset": str(root),
        "scope": scope,
        "documents": len(corpus),
        "queries": len(judged),
        "negatives": {kind: sum(v[1] == kind for v in negatives.values()) for kind in NEGATIVE_KINDS},
        "depth": depth,
        "k": k,
        "indexed": sum(summary.get(n, 0) for n in ("added", "updated", "unchanged")),
        "failed_documents": summary["failed_documents"],
        "ok": not summary["failed_documents"],
        "settings": settings_summary(settings),
        "modes": {},
        "run_files": [],
    }
    texts = {q: queries[q] for q in judged} | {q: text for q, (text, _) in negatives.items()}
    runs = []
    for mode in modes:
        started = time.perf_counter()
        results = run_lookups(texts, scope, settings, mode, depth, f"{scope} {mode}")
        section, run = evaluate_mode(judged, results, negatives, mapping, k, f"{scope}.{mode}")
        path = ir.write_trec(run, out_dir / f"{scope}.{mode}.trec")
        section["run_file"] = str(path)
        section["seconds"] = round(time.perf_counter() - started, 2)
        report["modes"][mode] = section
        report["run_files"].append(str(path))
        runs.append(run)
    if compare or extra_runs:
        report["comparison"] = ir.compare_runs(judged, runs + extra_runs)
    return report


def beir_command(args: Any, settings: Settings) -> int:
    """`kbflow eval --beir`: 0, 1 when documents failed to index (after reporting), bad input
    raises CaseFileError (exit 2)."""
    if not args.scope:
        raise CaseFileError("--beir needs --scope S (the scope the dataset is ingested into)")
    if args.depth < 1:
        raise CaseFileError("--depth must be at least 1")
    negatives = load_negatives(Path(args.negatives)) if args.negatives else {}
    if args.negatives_from:
        negatives |= negatives_from(Path(args.negatives_from))
    modes = {"both": ["hybrid", "dense"], "all": ["hybrid", "dense", "bm25"]}.get(args.mode, [args.mode])
    options = {"depth": args.depth, "negatives": negatives, "run_dir": args.run_dir and Path(args.run_dir)}
    options |= {"compare": args.compare, "compare_runs": [Path(f) for f in args.compare_runs]}
    report = run_beir(Path(args.beir), args.scope, settings, modes, **options)
    if args.json_report:
        Path(args.json_report).write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", "utf-8")
    print(json.dumps(report, ensure_ascii=False) if args.json else "\n".join(summary_lines(report)))
    return 0 if report["ok"] else 1


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The readable summary `kbflow eval --beir` prints without --json."""
    k, neg = report["k"], report["negatives"]
    lines = [
        f"BEIR {report['dataset']} -> scope {report['scope']}: {report['documents']} documents "
        f"({report['indexed']} indexed, {len(report['failed_documents'])} failed), {report['queries']} "
        f"judged queries, negatives near {neg['near']} off {neg['off']}, depth {report['depth']}, k {k}"
    ]
    for f in report["failed_documents"]:
        lines.append(f"FAILED document {f['doc_id']} ({f['path']}): {f['reason']}")
    for mode, m in report["modes"].items():
        c, d, ne, fb = (m[n] for n in ("candidates", "delivered", "no_evidence", "fallback"))
        true_ne = ne["true_no_evidence_rate"]
        lines += [
            f"{mode}",
            f"  candidates  nDCG@10 {_fmt(c['ndcg@10'])}  MRR@10 {_fmt(c['mrr@10'])}  recall@10 "
            f"{_fmt(c['recall@10'])}  recall@100 {_fmt(c['recall@100'])}  P@5 {_fmt(c['precision@5'])}",
            f"  delivered   nDCG@{k} {_fmt(d['ndcg@k'])}  MRR {_fmt(d['mrr'])}  recall@{k} "
            f"{_fmt(d['recall@k'])}  hit@{k} {_fmt(d['hit@k'])}",
            f"  no evidence false {_fmt(ne['false_no_evidence_rate'])} (relevant doc among candidates "
            f"{_fmt(ne['false_no_evidence_with_relevant_candidate'])})  weak only "
            f"{_fmt(ne['weak_only_rate'])}  true: near {_fmt(true_ne['near'])} off {_fmt(true_ne['off'])}"
            f"  (or weak: near {_fmt(ne['negatives']['near']['held_back_rate'])} "
            f"off {_fmt(ne['negatives']['off']['held_back_rate'])})",
            f"  fallback    fired {fb['fallback_fired']}  precision {_fmt(fb['fallback_precision'])}  "
            f"effectiveness {_fmt(fb['fallback_effectiveness'])}  L0 false kill "
            f"{_fmt(m['l0_false_kill_rate'])} of {m['l0_filtered_lookups']} filtered",
            f"  run file    {m['run_file']}  ({m['seconds']} s)",
        ]
    comparison = report.get("comparison")
    if comparison:
        lines.append(comparison.get("error") or f"paired t-test over {comparison['queries']} queries:")
        if "table" in comparison:
            lines.append(comparison["table"])
    return lines
