"""The eval's closing line: did the run pass, and why — regressions, improvements, known
failures, and the headline figures beside the baseline's."""

from __future__ import annotations

from typing import Any

# (label, metric key, shown as a percentage) for the verdict's figures beside the baseline's
VERDICT_FIGURES = (
    ("nDCG@10", "candidate_ndcg@10", False),
    ("MRR", "candidate_mrr", False),
    ("false no-evidence", "false_no_evidence_rate", True),
)


def verdict_line(outcome: Any, show_known: bool = False) -> str:
    """One line that says whether the run passed and why: regressions, improvements, known
    failures, and the first mode's headline figures beside the baseline's."""
    cases = sum(m["metrics"]["cases"] for m in outcome.report["modes"].values())
    parts = []
    if outcome.diff is None:
        n = len(outcome.failed)
        parts.append(f"{n} of {cases} cases failed" if n else f"all {cases} cases passed")
    else:
        reg, imp = outcome.diff["regressions"], outcome.diff["improvements"]
        parts.append(f"regressions: {len(reg) if reg else 'none'}" + (f" ({_first(reg)})" if reg else ""))
        parts.append(f"improvements: {len(imp) if imp else 'none'}")
        n_known = len(outcome.diff["known_failures"])
        hint = "" if show_known or not n_known else ", listed with --show-known"
        parts.append(f"known failures: {n_known} (failing in the baseline too{hint})")
    parts.append(_figures(outcome))
    return f"verdict: {'PASS' if outcome.ok else 'FAIL'} — " + "; ".join(p for p in parts if p)


def _first(items: list[str]) -> str:
    head = items[0].split(": ")[0]
    return head + (f" and {len(items) - 1} more" if len(items) > 1 else "")


def _figures(outcome: Any) -> str:
    mode = next(iter(outcome.report["modes"]), None)
    if mode is None:
        return ""
    cur = outcome.report["modes"][mode]["metrics"]
    base = (outcome.baseline or {}).get("modes", {}).get(mode, {}).get("metrics", {})
    shown = []
    for label, key, pct in VERDICT_FIGURES:
        if cur.get(key) is None:
            continue
        fmt = (lambda v: f"{v * 100:.1f} %") if pct else (lambda v: f"{v:.3f}")
        beside = f" (baseline {fmt(base[key])})" if base.get(key) is not None else ""
        shown.append(f"{label} {fmt(cur[key])}{beside}")
    return f"{mode} " + ", ".join(shown) if shown else ""
