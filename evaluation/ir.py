"""Standard IR evaluation through ranx: runs from ranked document lists, metric means, TREC run
files and paired significance tests.

Metric formulas are ranx's, never ours (they agree with trec_eval; tests/test_beir_eval.py
checks it). A judged query with no ranked document is kept as an empty result so that it
scores 0: trec_eval and pytrec_eval would silently skip it and flatter the mean.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ranx import Qrels, Run, compare, evaluate

CANDIDATE_METRICS = ("ndcg@10", "mrr@10", "recall@10", "recall@100", "precision@5")


@contextmanager
def _quiet() -> Any:
    """ranx's numba kernels warn about an unsigned cast on every first call; it is harmless."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def make_qrels(qrels: Mapping[str, Mapping[str, int]]) -> Qrels:
    """Only positive grades: a zero grade is 'judged not relevant', which ranx need not see."""
    return Qrels({q: {d: int(g) for d, g in docs.items() if g > 0} for q, docs in qrels.items()})


def ranked_docs(doc_ids: Iterable[str]) -> list[str]:
    """First-occurrence order: a document ranks where its best chunk ranks."""
    return list(dict.fromkeys(doc_ids))


def make_run(ranked: Mapping[str, Sequence[str]], name: str, qids: Iterable[str] = ()) -> Run:
    """{qid: [doc ids best first]} -> Run with descending scores; every id in `qids` is present,
    empty when it has no document, so it counts as 0 instead of being dropped."""
    data: dict[str, dict[str, float]] = {}
    for qid, docs in ranked.items():
        unique = ranked_docs(docs)
        data[str(qid)] = {d: float(len(unique) - i) for i, d in enumerate(unique)}
    for qid in qids:
        data.setdefault(str(qid), {})
    return Run(data, name=name)


def _comparable(qrels: Qrels, run: Run) -> Run:
    """Restrict a run to the judged queries and add the missing ones empty (scoring 0)."""
    data, qids = run.to_dict(), list(qrels.keys())
    kept = {q: dict(data.get(q, {})) for q in qids}
    return Run(kept, name=run.name)


def evaluate_run(qrels: Qrels, run: Run, metrics: Sequence[str]) -> dict[str, float]:
    """Mean of each metric over every judged query (missing or empty ones score 0)."""
    if not qrels.keys():
        return {m: 0.0 for m in metrics}
    with _quiet():
        scores = evaluate(qrels, _comparable(qrels, run), list(metrics), make_comparable=True)
    if len(metrics) == 1 and not isinstance(scores, dict):
        scores = {metrics[0]: scores}
    return {m: round(float(scores[m]), 4) for m in metrics}


def candidate_metrics(
    qrels: Mapping[str, Mapping[str, int]], ranked: Mapping[str, Sequence[str]], name: str = "run"
) -> dict[str, float]:
    """The headline: document-level candidate lists at depth."""
    return evaluate_run(make_qrels(qrels), make_run(ranked, name, qrels), CANDIDATE_METRICS)


def delivered_metrics(
    qrels: Mapping[str, Mapping[str, int]], ranked: Mapping[str, Sequence[str]], k: int
) -> dict[str, float]:
    """What the agent actually gets: at most return_n evidence blocks, so cut at k = return_n."""
    names = {"ndcg@k": f"ndcg@{k}", "mrr": "mrr", "recall@k": f"recall@{k}", "hit@k": f"hit_rate@{k}"}
    scores = evaluate_run(make_qrels(qrels), make_run(ranked, "delivered", qrels), list(names.values()))
    return {key: scores[metric] for key, metric in names.items()}


def write_trec(run: Run, path: Path) -> Path:
    """TREC run format (qid Q0 doc rank score tag); empty queries have no line, as usual."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run.save(str(path), kind="trec")
    return path


def load_trec(path: Path, name: str | None = None) -> Run:
    """A run file from an earlier configuration; named after the path as given unless told."""
    if not path.is_file():
        from kbflow.evaluation.cases import CaseFileError

        raise CaseFileError(f"{path}: run file not found")
    try:
        run = Run.from_file(str(path), kind="trec")
    except Exception as exc:  # ranx raises bare ValueError/IndexError on a malformed line
        from kbflow.evaluation.cases import CaseFileError

        raise CaseFileError(f"{path}: not a TREC run file: {exc}") from exc
    run.name = name or str(path)
    return run


def _unique_names(runs: Sequence[Run]) -> list[Run]:
    """ranx keys its report by run name; two runs with one name would overwrite each other."""
    seen: dict[str, int] = {}
    for run in runs:
        base = run.name or "run"
        seen[base] = seen.get(base, 0) + 1
        run.name = base if seen[base] == 1 else f"{base}-{seen[base]}"
    return list(runs)


def _p(value: Any) -> float | None:
    """Identical per-query scores give no t statistic (NaN), which JSON cannot carry."""
    p = float(value)
    return None if math.isnan(p) else float(f"{p:.4g}")


def compare_runs(
    qrels: Mapping[str, Mapping[str, int]],
    runs: Sequence[Run],
    metrics: Sequence[str] = CANDIDATE_METRICS,
    max_p: float = 0.05,
) -> dict[str, Any]:
    """Paired Student's t-test between every pair of runs over the same judged queries.

    Returns the ranx table (a superscript letter marks a significant win over that run) with a
    legend, the mean scores and every pair's p-values, so a JSON report can be read too."""
    if len(runs) < 2:
        return {"error": "nothing to compare: run --mode both or give --compare-runs FILE"}
    q = make_qrels(qrels)
    prepared = _unique_names([_comparable(q, r) for r in runs])
    with _quiet():
        report = compare(q, runs=prepared, metrics=list(metrics), stat_test="student", max_p=max_p)
    data = report.to_dict()
    names = [r.name for r in prepared]
    letters = "abcdefghijklmnopqrstuvwxyz"
    legend = ", ".join(f"{letters[i]} = {n}" for i, n in enumerate(names[: len(letters)]))
    p_values = {
        f"{a} vs {b}": {m: _p(data[a]["comparisons"][b][m]) for m in metrics}
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    }
    return {
        "stat_test": "student (paired t-test)",
        "max_p": max_p,
        "queries": len(q.keys()),
        "runs": names,
        "scores": {n: {m: round(float(data[n]["scores"][m]), 4) for m in metrics} for n in names},
        "p_values": p_values,
        "table": f"{report}\n{legend}; a superscript letter = significantly better than that run "
        f"(p < {max_p})",
    }
