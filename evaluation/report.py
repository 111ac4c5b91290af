"""Eval reports (JSON + Markdown + a chart) and the baseline diff that gates changes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbflow.core.errors import InputError
from kbflow.evaluation.cases import GoldenCase
from kbflow.evaluation.judge import CaseOutcome
from kbflow.evaluation.metrics import aggregate, fallback_precision_recall

REPORT_SCHEMA = "kbflow.eval-report/2"
DIFF_SCHEMA = "kbflow.eval-diff/1"
METRIC_KEYS = (
    "pass_rate",
    "candidate_ndcg@10",
    "candidate_mrr",
    "candidate_recall@10",
    "false_no_evidence_rate",
    "weak_only_rate",
    "true_no_evidence_rate_near",
    "true_no_evidence_rate_off",
    "held_back_rate_near",
    "held_back_rate_off",
    "l0_false_kill_rate",
    "fallback_effectiveness",
    "recall@k",
    "hit@k",
    "mrr",
    "ndcg@k",
    "strong_hit_rate",
    "miss_count",
    "failed_count",
    "fallback_precision",
    "fallback_recall",
)
LOWER_IS_BETTER = {
    "miss_count",
    "failed_count",
    "false_no_evidence_rate",
    "weak_only_rate",
    "l0_false_kill_rate",
}
# metric moves smaller than this are noise (one of 16 cases moves recall by 0.0625)
TOLERANCE = 0.01


class BaselineError(InputError, ValueError):
    """The baseline cannot be compared (missing, malformed, older schema)."""


def _share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def honesty_metrics(pairs: Sequence[tuple[GoldenCase, CaseOutcome]]) -> dict[str, Any]:
    """No-evidence rates, the L0 filter's false kills and whether fallbacks helped."""
    positive = [(c, o) for c, o in pairs if c.expected_doc_ids]
    filtered = [(c, o) for c, o in positive if o.filtered_doc_ids is not None]
    fired = [(c, o) for c, o in positive if o.fallback_triggered and o.filtered_doc_ids is not None]

    def helped(c: GoldenCase, o: CaseOutcome) -> bool:
        before = set(o.filtered_doc_ids or [])
        return any(d in o.candidate_doc_ids and d not in before for d in c.expected_doc_ids)

    return {
        "false_no_evidence_rate": _share([not o.found for _, o in positive]),
        "weak_only_rate": _share([o.weak_only for _, o in positive]),
        "true_no_evidence_rate_near": _share([not o.found for _, o in pairs if o.negative == "near"]),
        "true_no_evidence_rate_off": _share([not o.found for _, o in pairs if o.negative == "off"]),
        # "no usable evidence" or weak evidence only: nothing the agent may act on as an answer
        "held_back_rate_near": _share([not o.found or o.weak_only for _, o in pairs if o.negative == "near"]),
        "held_back_rate_off": _share([not o.found or o.weak_only for _, o in pairs if o.negative == "off"]),
        "l0_false_kill_rate": _share(
            [not any(d in (o.filtered_doc_ids or []) for d in c.expected_doc_ids) for c, o in filtered]
        ),
        "fallback_effectiveness": _share([helped(c, o) for c, o in fired]),
    }


def mode_metrics(pairs: Sequence[tuple[GoldenCase, CaseOutcome]]) -> dict[str, Any]:
    positive = [(c, o) for c, o in pairs if c.expected_doc_ids]
    qrels = {c.id: c.graded for c, _ in positive}
    ranked = {c.id: o.ranked_doc_ids for c, o in positive}
    ir = aggregate(qrels, ranked, {c.id: c.k for c, _ in positive})
    cand = aggregate(qrels, {c.id: o.candidate_doc_ids for c, o in positive}, {c.id: 10 for c, _ in positive})
    labels = {c.id: c.expect_fallback for c, _ in pairs if c.expect_fallback is not None}
    fb = fallback_precision_recall(labels, {c.id: o.fallback_triggered for c, o in pairs})
    misses = sum(1 for c, o in positive if o.first_expected_rank is None or o.first_expected_rank > c.k)
    return {
        "cases": len(pairs),
        "pass_rate": round(sum(o.passed for _, o in pairs) / len(pairs), 4) if pairs else 0.0,
        **ir,
        "strong_hit_rate": round(sum(o.strong_hit for _, o in positive) / len(positive), 4)
        if positive
        else 0.0,
        "miss_count": misses,
        "failed_count": sum(not o.passed for _, o in pairs),
        **fb,
        # the ranked candidate list (document level, before the gate), as IR systems are judged
        "candidate_ndcg@10": cand["ndcg@k"],
        "candidate_mrr": cand["mrr"],
        "candidate_recall@10": cand["recall@k"],
        **honesty_metrics(pairs),
    }


def mode_differences(per_mode: dict[str, list[tuple[GoldenCase, CaseOutcome]]]) -> list[dict[str, Any]]:
    """Where dense and hybrid rank differently (top 10 candidate documents): the report shows
    where the modes part, and a run in which they stop parting is a regression."""
    if not {"hybrid", "dense"} <= set(per_mode):
        return []
    dense = {c.id: o for c, o in per_mode["dense"]}
    out = []
    for case, o in per_mode["hybrid"]:
        d = dense.get(case.id)
        if d is not None and o.candidate_doc_ids[:10] != d.candidate_doc_ids[:10]:
            out.append(
                {
                    "case_id": case.id,
                    "hybrid_top3": o.candidate_doc_ids[:3],
                    "dense_top3": d.candidate_doc_ids[:3],
                    "hybrid_passed": o.passed,
                    "dense_passed": d.passed,
                }
            )
    return out


def by_scope(pairs: Sequence[tuple[GoldenCase, CaseOutcome]]) -> dict[str, dict[str, Any]]:
    """The metrics of each scope's cases, when there are several (English and Chinese runbooks
    are judged apart: a regression in one must not hide in the other's average)."""
    scopes = sorted({c.kb_scope for c, _ in pairs})
    if len(scopes) < 2:
        return {}
    return {sc: mode_metrics([(c, o) for c, o in pairs if c.kb_scope == sc]) for sc in scopes}


def build_report(source: str, per_mode: dict[str, list[tuple[GoldenCase, CaseOutcome]]]) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source,
        "modes": {
            mode: {
                "metrics": mode_metrics(pairs),
                "by_scope": by_scope(pairs),
                "cases": [o.to_dict() for _, o in pairs],
            }
            for mode, pairs in per_mode.items()
        },
        "mode_differences": mode_differences(per_mode),
    }


def _pct(v: Any) -> str:
    return "–" if v is None else f"{v:.1%}"


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Per mode, in words: ranking quality, delivered evidence, no-evidence honesty, fallback."""
    out = []
    for mode, m in report["modes"].items():
        met = m["metrics"]
        g = met.get
        out += [
            f"{mode}: {met['cases']} cases, pass rate {met['pass_rate']:.3f}",
            f"  candidates  nDCG@10 {_fmt(g('candidate_ndcg@10'))}  MRR {_fmt(g('candidate_mrr'))}"
            f"  recall@10 {_fmt(met.get('candidate_recall@10'))}",
            f"  delivered   recall@K {met['recall@k']:.3f}  MRR {met['mrr']:.3f}  nDCG@K {met['ndcg@k']:.3f}"
            f"  strong hits {met['strong_hit_rate']:.3f}  misses {met['miss_count']}",
            f"  no evidence answerable (false) {_pct(met.get('false_no_evidence_rate'))}"
            f"  weak only {_pct(met.get('weak_only_rate'))}"
            f"  unanswerable (true) near {_pct(met.get('true_no_evidence_rate_near'))}"
            f" off {_pct(met.get('true_no_evidence_rate_off'))}"
            f"  (or weak: near {_pct(met.get('held_back_rate_near'))}"
            f" off {_pct(met.get('held_back_rate_off'))})",
            f"  fallback    precision {_fmt(g('fallback_precision'))}  recall {_fmt(g('fallback_recall'))}"
            f"  effectiveness {_fmt(met.get('fallback_effectiveness'))}"
            f"  L0 false kills {_pct(met.get('l0_false_kill_rate'))}",
        ]
        for scope, sm in (m.get("by_scope") or {}).items():
            out.append(
                f"  scope {scope}: {sm['cases']} cases, pass {sm['pass_rate']:.3f}, nDCG@10 "
                f"{_fmt(sm.get('candidate_ndcg@10'))}, MRR {_fmt(sm.get('candidate_mrr'))}, no evidence: "
                f"false {_pct(sm.get('false_no_evidence_rate'))}, true near "
                f"{_pct(sm.get('true_no_evidence_rate_near'))} "
                f"off {_pct(sm.get('true_no_evidence_rate_off'))}"
            )
    return out


def failed_cases(report: dict[str, Any]) -> list[str]:
    return [
        f"{mode}:{c['case_id']}" for mode, m in report["modes"].items() for c in m["cases"] if not c["passed"]
    ]


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def report_markdown(report: dict[str, Any], chart_name: str | None = None) -> str:
    modes = list(report["modes"])
    lines = [f"# Retrieval eval ({report['source']})", "", f"Generated {report['generated_at']}.", ""]
    lines += ["| metric | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    for key in ("cases", *METRIC_KEYS):
        lines.append(
            f"| {key} | " + " | ".join(_fmt(report["modes"][m]["metrics"].get(key)) for m in modes) + " |"
        )
    lines += _scope_table(report, modes)
    if chart_name:
        lines += ["", f"![metrics per mode]({chart_name})"]
    diffs = report.get("mode_differences") or []
    if diffs:
        lines += ["", f"## Where dense and hybrid differ ({len(diffs)} cases)", ""]
        lines += ["| case | hybrid top 3 | dense top 3 | hybrid | dense |", "|---|---|---|---|---|"]
        for d in diffs:
            lines.append(
                f"| {d['case_id']} | {', '.join(d['hybrid_top3'])} | {', '.join(d['dense_top3'])} | "
                f"{'✅' if d['hybrid_passed'] else '❌'} | {'✅' if d['dense_passed'] else '❌'} |"
            )
    for mode in modes:
        lines += [
            "",
            f"## {mode}",
            "",
            "| case | pass | level | first expected rank | attempt | fallback | status |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in report["modes"][mode]["cases"]:
            lines.append(
                f"| {c['case_id']} | {'✅' if c['passed'] else '❌'} | {c['hit_level'] or '–'} | "
                f"{c['first_expected_rank'] or '–'} | {c['selected_attempt']} | "
                f"{c['fallback_reason'] or '–'} | {c['evidence_status']} |"
            )
        failing = [c for c in report["modes"][mode]["cases"] if not c["passed"]]
        if failing:
            lines += ["", "Failures:", ""]
            lines += [_failure_line(c) for c in failing]
    return "\n".join(lines) + "\n"


def _failure_line(case: dict[str, Any]) -> str:
    line = f"- `{case['case_id']}`: " + "; ".join(case["failures"])
    if case.get("known_limit"):
        line += f"\n  - *known limit, why it must not pass:* {case['known_limit']}"
    return line


def _scope_table(report: dict[str, Any], modes: list[str]) -> list[str]:
    scopes = sorted({sc for m in modes for sc in report["modes"][m].get("by_scope") or {}})
    if not scopes:
        return []
    keys = ("cases", "pass_rate", "candidate_ndcg@10", "candidate_mrr", "false_no_evidence_rate",
            "true_no_evidence_rate_near", "true_no_evidence_rate_off", "held_back_rate_near",
            "held_back_rate_off")
    cols = [(m, sc) for m in modes for sc in scopes]
    out = ["", "Per scope:", "", "| metric | " + " | ".join(f"{m} {sc}" for m, sc in cols) + " |"]
    out.append("|---|" + "---:|" * len(cols))
    for key in keys:
        cells = [_fmt((report["modes"][m].get("by_scope") or {}).get(sc, {}).get(key)) for m, sc in cols]
        out.append(f"| {key} | " + " | ".join(cells) + " |")
    return out


def write_chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["pass_rate", "recall@k", "hit@k", "mrr", "ndcg@k", "strong_hit_rate"]
    modes = list(report["modes"])
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    width = 0.8 / max(len(modes), 1)
    for i, mode in enumerate(modes):
        values = [report["modes"][mode]["metrics"].get(k) or 0.0 for k in keys]
        ax.bar([x + i * width for x in range(len(keys))], values, width, label=mode)
    ax.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(keys))], keys, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("kbflow retrieval eval")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- baseline diff ----------------------------------------------------------------------------


def check_report(report: Any, where: str) -> dict[str, Any]:
    if not isinstance(report, dict) or "schema" not in report:
        raise BaselineError(f"{where}: not a kbflow eval report (no schema field)")
    if report["schema"] != REPORT_SCHEMA:
        raise BaselineError(
            f"{where}: report schema {report['schema']!r} is not {REPORT_SCHEMA!r}; regenerate the baseline "
            "with this version (kbflow eval --live --json-report …) rather than compare across schemas"
        )
    if not isinstance(report.get("modes"), dict):
        raise BaselineError(f"{where}: report has no modes")
    return report


def diff_reports(current: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Separate regressions (fail the gate) from intended improvements and neutral changes."""
    regressions: list[str] = []
    improvements: list[str] = []
    notes: list[str] = []
    known: list[str] = []  # failed in the baseline and still fail: listed, not a regression
    for mode in sorted(set(baseline["modes"]) | set(current["modes"])):
        if mode not in current["modes"]:
            regressions.append(f"{mode}: mode missing from the current run")
            continue
        if mode not in baseline["modes"]:
            notes.append(f"{mode}: new mode, no baseline")
            continue
        cur = {c["case_id"]: c for c in current["modes"][mode]["cases"]}
        base = {c["case_id"]: c for c in baseline["modes"][mode]["cases"]}
        for cid in sorted(set(cur) | set(base)):
            if cid not in cur:
                regressions.append(f"{mode}:{cid}: case removed (update the baseline if intended)")
            elif cid not in base:
                notes.append(f"{mode}:{cid}: new case ({'pass' if cur[cid]['passed'] else 'FAIL'})")
            elif base[cid]["passed"] and not cur[cid]["passed"]:
                regressions.append(
                    f"{mode}:{cid}: passed before, fails now: " + "; ".join(cur[cid]["failures"])
                )
            elif not base[cid]["passed"] and cur[cid]["passed"]:
                improvements.append(f"{mode}:{cid}: failed before, passes now")
            elif not cur[cid]["passed"]:
                known.append(f"{mode}:{cid}")
            elif cur[cid]["selected_attempt"] != base[cid]["selected_attempt"]:
                notes.append(
                    f"{mode}:{cid}: selected attempt {base[cid]['selected_attempt']} -> "
                    f"{cur[cid]['selected_attempt']}"
                )
        cm, bm = current["modes"][mode]["metrics"], baseline["modes"][mode]["metrics"]
        collapsed = baseline.get("mode_differences") and not current.get("mode_differences")
        if mode == "dense" and collapsed and "hybrid" in current["modes"]:
            regressions.append(
                f"dense and hybrid now rank every case alike (the baseline differed on "
                f"{len(baseline['mode_differences'])} cases): is one mode running the other?"
            )
        pairs = [(mode, cm, bm)]
        cs, bs = current["modes"][mode].get("by_scope") or {}, baseline["modes"][mode].get("by_scope") or {}
        pairs += [(f"{mode} {sc}", cs[sc], bs[sc]) for sc in sorted(set(cs) & set(bs))]
        for where, cur_m, base_m in pairs:
            _compare_metrics(where, cur_m, base_m, regressions, improvements)
    return {
        "schema": DIFF_SCHEMA,
        "baseline_generated_at": baseline.get("generated_at"),
        "current_generated_at": current.get("generated_at"),
        "regressions": regressions,
        "improvements": improvements,
        "notes": notes,
        "known_failures": known,
        "ok": not regressions,
    }


def _compare_metrics(where: str, cur: dict, base: dict, regressions: list, improvements: list) -> None:
    for key in METRIC_KEYS:
        a, b = cur.get(key), base.get(key)
        if a is None or b is None or abs(a - b) <= TOLERANCE:
            continue
        worse = a > b if key in LOWER_IS_BETTER else a < b
        (regressions if worse else improvements).append(f"{where}: {key} {_fmt(b)} -> {_fmt(a)}")


def diff_markdown(diff: dict[str, Any]) -> str:
    verdict = "no regression" if diff["ok"] else f"{len(diff['regressions'])} regression(s)"
    lines = [
        f"# Eval diff against baseline: {verdict}",
        "",
        f"Baseline {diff['baseline_generated_at']}, current {diff['current_generated_at']}.",
        "",
    ]
    for title, key in (
        ("Regressions", "regressions"),
        ("Improvements", "improvements"),
        ("Known failures (failed in the baseline too)", "known_failures"),
        ("Other changes", "notes"),
    ):
        lines += [f"## {title}", ""]
        lines += [f"- {x}" for x in diff.get(key, [])] or ["- none"]
        lines.append("")
    return "\n".join(lines)
