"""The knowledge-gaps report as Markdown: the Prefect artifact of the `knowledge-gaps` flow, and
`kbflow gaps --markdown`. What to write next comes first."""

from __future__ import annotations

from kbflow.core.wording import counted
from kbflow.insights.gaps import GapsReport


def _cell(text: str | None) -> str:
    return (text or "–").replace("|", "\\|").replace("\n", " ")


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "–"


def gaps_markdown(report: GapsReport, top: int = 20) -> str:
    scope = f"scope `{report.scope}`" if report.scope else "every scope"
    lines = [
        f"# Knowledge gaps — {scope}",
        "",
        f"{report.since} → {report.until}: **{counted(report.lookups, 'lookup')}**, "
        f"**{report.unanswered} unanswered** "
        f"({_share(report.unanswered, report.lookups)}: no usable evidence, or weak evidence only), "
        f"in {counted(len(report.groups), 'group')}.",
    ]
    if report.ungrouped:
        kept = counted(report.ungrouped, "unanswered lookup")
        lines.append(f"{kept} kept neither text nor embedding: not grouped.")
    lines += ["", "## What agents asked that the knowledge base could not answer", ""]
    if report.groups:
        lines += [
            "| # | about | lookups | callers | examples | what came nearest | first seen | last seen |",
            "|---:|---|---:|---:|---|---|---|---|",
        ]
        for i, g in enumerate(report.groups[:top], 1):
            examples = "<br>".join(_cell(e) for e in g.examples) or "(text not kept)"
            nearest = f"{_cell(g.nearest)} ({g.nearest_quality:.2f})" if g.nearest else "–"
            lines.append(
                f"| {i} | {_cell(g.label)} | {g.count} | {g.callers} | {examples} | {nearest} "
                f"| {g.first_seen} | {g.last_seen} |"
            )
        if len(report.groups) > top:
            lines.append(f"\n…and {len(report.groups) - top} smaller groups (`kbflow gaps --json` has all).")
    else:
        lines.append("Nothing: every lookup of the window found usable evidence.")
    lines += ["", "## Rescued by the fallback (the L0 hint misled)", ""]
    if report.rescued:
        lines += ["| query | L0 filtered on | found without it | when | caller |", "|---|---|---|---|---|"]
        lines += [
            f"| {_cell(r.query)} | {_cell(r.misleading_category)} | {_cell(r.found)} | {r.at} | {r.caller} |"
            for r in report.rescued
        ]
    else:
        lines.append("None.")
    lines += ["", f"## Documents never returned ({len(report.never_returned)})", ""]
    lines += [f"- `{d}`" for d in report.never_returned] or [
        "None: every document was returned at least once."
    ]
    lines += ["", "## Most returned", ""]
    lines += [f"- `{d}`: {n}" for d, n in report.most_returned] or ["None."]
    return "\n".join(lines) + "\n"
