"""The owner's report as one self-contained HTML page: inline CSS and SVG, no script, no font,
nothing fetched. Every text from users (questions, titles) is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from kbflow.core.wording import counted
from kbflow.evaluation.history import CHARTED
from kbflow.insights.daily import Day
from kbflow.insights.gaps import GapsReport

W, H, LEFT, RIGHT, TOP, BOTTOM = 520, 200, 46, 12, 12, 30
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")

# fonts that have Chinese glyphs, named before the generic family: Chromium on a machine whose
# default sans-serif lacks them draws boxes otherwise (scripts/chromium.sh installs the last one)
CJK_FONTS = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "PingFang SC",
    "Microsoft YaHei",
    "WenQuanYi Micro Hei",
)
CJK = ",".join(f'"{f}"' for f in CJK_FONTS)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",{CJK},sans-serif;color:#1f2937;margin:0;
background:#f8fafc}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#6b7280;margin:0 0 16px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 16px;margin:12px 0}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #f1f5f9;vertical-align:top}
th{color:#475569;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:12px}
svg.chart{width:100%;height:auto}svg text{font:11px system-ui,{CJK},sans-serif;fill:#475569}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:10px;height:10px;
border-radius:2px;margin-right:4px;vertical-align:-1px}.empty{color:#6b7280;font-style:italic}
.bad{color:#b91c1c}ul.failed{margin:4px 0;padding-left:20px;font-size:13px}
""".replace("{CJK}", CJK)


def _nice_max(values: Sequence[float]) -> float:
    top = max([v for v in values if v is not None] or [0.0])
    if top <= 0:
        return 1.0
    for step in (1, 2, 2.5, 5, 10):
        for exp in range(-3, 7):
            ceiling = step * 10**exp
            if ceiling >= top:
                return float(ceiling)
    return float(top)


def _axes(labels: Sequence[str], top: float, percent: bool) -> list[str]:
    """Grid lines with y labels, and a few x labels (first, middle, last)."""
    out, plot_h = [], H - TOP - BOTTOM
    for i in range(5):
        value = top * i / 4
        y = TOP + plot_h - plot_h * i / 4
        text = f"{value:.0%}" if percent else (f"{value:.0f}" if top >= 10 else f"{value:.2f}")
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>')
    n = len(labels)
    for i in sorted({0, n // 2, n - 1} if n else set()):
        anchor = "start" if i == 0 and n > 1 else "end" if i == n - 1 and n > 1 else "middle"
        out.append(f'<text x="{_x(i, n):.1f}" y="{H - 10}" text-anchor="{anchor}">{escape(labels[i])}</text>')
    return out


def _x(i: int, n: int) -> float:
    return LEFT + (W - LEFT - RIGHT) * (0.5 if n == 1 else i / (n - 1))


def _y(value: float, top: float) -> float:
    return TOP + (H - TOP - BOTTOM) * (1 - value / top)


def line_chart(
    title: str, labels: Sequence[str], series: dict[str, Sequence[float | None]], percent: bool = False
) -> str:
    """One line per series (a gap where a value is None), a dot per point."""
    top = 1.0 if percent else _nice_max([v for vs in series.values() for v in vs if v is not None])
    parts = _axes(labels, top, percent)
    n = len(labels)
    for k, (name, values) in enumerate(series.items()):
        colour, d, pen = COLOURS[k % len(COLOURS)], [], "M"
        for i, v in enumerate(values):
            if v is None:
                pen = "M"
                continue
            d.append(f"{pen}{_x(i, n):.1f},{_y(v, top):.1f}")
            parts.append(f'<circle cx="{_x(i, n):.1f}" cy="{_y(v, top):.1f}" r="2.5" fill="{colour}"/>')
            pen = "L"
        if d:
            parts.append(
                f'<path class="series" data-series="{escape(name)}" d="{" ".join(d)}" fill="none" '
                f'stroke="{colour}" stroke-width="2"/>'
            )
    return _figure(title, parts, list(series))


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float]) -> str:
    top, n = _nice_max(values), len(labels)
    parts = _axes(labels, top, False)
    width = max((W - LEFT - RIGHT) / max(n, 1) * 0.7, 2)
    for i, v in enumerate(values):
        y = _y(v, top)
        parts.append(
            f'<rect class="bar" x="{_x(i, n) - width / 2:.1f}" y="{y:.1f}" width="{width:.1f}" '
            f'height="{TOP + H - TOP - BOTTOM - y:.1f}" fill="{COLOURS[0]}"><title>{escape(labels[i])}: '
            f"{v:g}</title></rect>"
        )
    return _figure(title, parts, [])


def _figure(title: str, parts: list[str], legend: list[str]) -> str:
    keys = "".join(
        f'<span><i style="background:{COLOURS[k % len(COLOURS)]}"></i>{escape(name)}</span>'
        for k, name in enumerate(legend)
    )
    return (
        f'<figure><figcaption><b>{escape(title)}</b> <span class="legend">{keys}</span></figcaption>'
        f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">'
        + "".join(parts)
        + "</svg></figure>"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{escape(str(c))}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _scopes(scopes: Sequence[dict[str, Any]], last_run: dict[str, Any] | None) -> str:
    rows = []
    for s in scopes:
        docs = f"{s['documents']}"
        if s.get("documents_with_errors"):
            docs += f' <span class="bad">({s["documents_with_errors"]} failed)</span>'
        cal = s.get("calibration") or {}
        calibration = escape(" · ".join(v for v in (cal.get("origin"), cal.get("when")) if v) or "–")
        rows.append(
            [
                escape(s["kb_scope"]),
                docs,
                s["chunks_recorded"],
                escape(s.get("model_name") or s["model"]),
                escape(s["analyzer"]),
                calibration,
                escape(s["updated_at"]),
            ]
        )
    table = _table(
        ["scope", "documents", "chunks", "model", "analyzer", "calibration", "last reindex"],
        rows,
        numeric=[2],
    )
    if last_run:
        status = "ok" if last_run["ok"] else '<span class="bad">failed</span>'
        table += (
            f"<p>Last run: {escape(last_run['mode'])} reindex, finished {escape(last_run['finished_at'])}, "
            f"{status}, {counted(last_run['failed'], 'document')} failed.</p>"
        )
        table += _failed_documents(last_run.get("failed_documents", []))
    return table


def _failed_documents(failed: Sequence[dict[str, str]], shown: int = 10) -> str:
    """The last run's failed documents by name and reason, the first `shown` of them."""
    if not failed:
        return ""
    items = "".join(
        f"<li><code>{escape(f['path'])}</code>: {escape(f['reason'])}</li>" for f in failed[:shown]
    )
    rest = len(failed) - shown
    more = f"<li>…and {rest} more: <code>kbflow status</code> lists them all</li>" if rest > 0 else ""
    return f'<ul class="failed">{items}{more}</ul>'


def _gaps(gaps: GapsReport, top: int = 10) -> str:
    if not gaps.groups:
        return '<p class="empty">Every lookup of the window found usable evidence.</p>'
    rows = [
        [
            i,
            escape(g.label),
            g.count,
            g.callers,
            "<br>".join(escape(e) for e in g.examples) or "(text not kept)",
            escape(f"{g.nearest} ({g.nearest_quality:.2f})" if g.nearest else "–"),
            escape(g.last_seen),
        ]
        for i, g in enumerate(gaps.groups[:top], 1)
    ]
    never = ", ".join(escape(d) for d in gaps.never_returned[:30]) or "none"
    more = f" … and {len(gaps.never_returned) - 30} more" if len(gaps.never_returned) > 30 else ""
    return (
        _table(
            ["#", "about", "lookups", "callers", "examples", "what came nearest", "last asked"],
            rows,
            numeric=[0, 2, 3],
        )
        + f"<p><b>Never returned ({len(gaps.never_returned)}):</b> {never}{more}</p>"
    )


def _history(history: Sequence[dict[str, Any]]) -> str:
    if not history:
        return '<p class="empty">No live eval run recorded yet: <code>kbflow eval --live</code></p>'
    charts = []
    for mode in sorted({h["mode"] for h in history}):
        runs = [h for h in history if h["mode"] == mode]
        labels = [h["at"][:10] for h in runs]
        series = {name: [h["metrics"].get(key) for h in runs] for key, name in CHARTED.items()}
        charts.append(line_chart(f"eval history — {mode}", labels, series, percent=True))
    return '<div class="grid">' + "".join(charts) + "</div>"


def render(
    *,
    generated: str,
    window: str,
    scopes: Sequence[dict[str, Any]],
    last_run: dict[str, Any] | None,
    days: Sequence[Day],
    gaps: GapsReport,
    history: Sequence[dict[str, Any]],
) -> str:
    labels = [d.day[5:] for d in days]
    lookups = bar_chart("lookups per day", labels, [d.lookups for d in days])
    rates = line_chart(
        "no usable evidence and weak, share of the day's lookups",
        labels,
        {
            "no usable evidence": [d.no_evidence_rate if d.lookups else None for d in days],
            "weak only": [d.weak_rate if d.lookups else None for d in days],
        },
        percent=True,
    )
    latency = line_chart(
        "lookup latency per day (ms)",
        labels,
        {"p50": [d.p50_ms for d in days], "p95": [d.p95_ms for d in days]},
    )
    total = sum(d.lookups for d in days)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>kbflow report</title><style>{CSS}</style></head><body><main>"
        f'<h1>kbflow — knowledge base report</h1><p class="sub">{escape(window)} · '
        f"{counted(total, 'lookup')} · "
        f"generated {escape(generated)}</p>"
        f"<h2>Scopes</h2><section>{_scopes(scopes, last_run)}</section>"
        f'<h2>Lookups</h2><section><div class="grid">{lookups}{rates}{latency}</div></section>'
        f"<h2>Knowledge gaps: what agents asked that the knowledge base could not answer</h2>"
        f"<section>{_gaps(gaps)}</section>"
        f"<h2>Eval history</h2><section>{_history(history)}</section>"
        "</main></body></html>\n"
    )
