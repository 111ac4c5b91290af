"""Trust on small, single-product scopes: is kbflow ever confidently wrong there?

Indexes every scope of the trust set (`eval/trust/`: single-product knowledge bases of 4-20
documents, English and Chinese) into one home, asks each scope its questions (answerable,
near-domain, off-domain) through the real lookup, and reports the issue's six figures overall,
per language and per scope:

- answerable: false "no usable evidence", hit@3, the right document at REFERENCE or better,
  weak evidence only;
- near-domain: held back (refused or weak only), confidently wrong (REFERENCE or PRECISE);
- off-domain: refused.

    python bench/trust.py [--home bench/.work/trust] [--details out.json] [--scopes a,b]

The home is kept between runs (a rerun reindexes nothing that did not change). `--details`
writes each question's outcome and its candidates' gate signals. Ends with one JSON line:
{"bench": "trust", "metrics": {...}, "ratios": {...}, "targets": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kbflow.core.settings import Settings  # noqa: E402
from kbflow.evaluation.trust import (  # noqa: E402
    Judged,
    figures,
    judge,
    load_questions,
    load_scopes,
    materialize,
)
from kbflow.ingest.reindex import reindex  # noqa: E402
from kbflow.retrieval.lookup import lookup_knowledge  # noqa: E402

TARGETS = {
    "near_confidently_wrong": ("<=", 0.05),
    "near_held_back": (">=", 0.90),
    "false_no_evidence": ("<=", 0.02),
    "right_at_reference": (">=", 0.80),
    "answerable_weak_only": ("<=", 0.15),
    "off_refused": (">=", 0.95),
}
COLUMNS = [
    ("n a/n/o", None),
    ("false no-ev", "false_no_evidence"),
    ("hit@3", "hit_at_3"),
    ("right ≥REF", "right_at_reference"),
    ("weak-only", "answerable_weak_only"),
    ("near held back", "near_held_back"),
    ("near conf. wrong", "near_confidently_wrong"),
    ("off refused", "off_refused"),
]


def index(settings: Settings, roots: dict[str, Path]) -> None:
    for name, root in roots.items():
        t = time.perf_counter()
        summary = reindex([root], settings=settings)
        if not summary.ok:
            raise SystemExit(f"indexing scope {name} failed: {summary.failed}")
        print(f"  indexed {name}: {summary.added} added, {summary.updated} updated "
              f"({time.perf_counter() - t:.1f} s)", file=sys.stderr)


def ask(settings: Settings, questions: list, scopes: dict) -> tuple[list[Judged], list[dict[str, Any]]]:
    judged, details = [], []
    for q in questions:
        r = lookup_knowledge(q.query, kb_scope=scopes[q.scope].kb_scope, settings=settings, caller="eval")
        j = judge(q, r)
        judged.append(j)
        cands = r.candidates.get(r.retrieval_trace.selected_attempt, [])
        details.append({
            "id": q.id, "scope": q.scope, "kind": q.kind, "query": q.query, "expected": list(q.expected),
            "level": j.level, "found": r.found, "top": j.top,
            "evidence": [[e.source, e.quality_score, e.weak] for e in r.evidence],
            "candidates": [
                {"source": h.source, "key": h.evidence_key, "quality": h.quality_score, **h.signals}
                for h in cands
            ],
        })
    return judged, details


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f} %"


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| set | " + " | ".join(c for c, _ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, f in rows.items():
        cells = [f"{f['answerable']}/{f['near']}/{f['off']}"]
        cells += [_pct(f[k]) for _c, k in COLUMNS[1:]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(f: dict[str, Any]) -> dict[str, bool]:
    out = {}
    for key, (op, target) in TARGETS.items():
        v = f[key]
        out[key] = v is not None and (v <= target if op == "<=" else v >= target)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=REPO / "bench" / ".work" / "trust")
    ap.add_argument("--models-dir", type=Path, default=None, help="ONNX exports (default: the home's)")
    ap.add_argument("--details", type=Path, default=None, help="write each question's outcome here")
    ap.add_argument("--scopes", default="", help="comma-separated scope names (default: all)")
    args = ap.parse_args(argv)

    settings = Settings(home=args.home, models_dir=args.models_dir)
    settings.ensure_home()
    scopes = load_scopes([s for s in args.scopes.split(",") if s])
    questions = load_questions(scopes)
    roots = materialize(scopes.values(), args.home / "docs")
    index(settings, roots)
    t = time.perf_counter()
    judged, details = ask(settings, questions, scopes)
    seconds = time.perf_counter() - t

    rows = {"all": figures(judged)}
    for lang in ("en", "zh"):
        rows[lang] = figures([j for j in judged if j.question.language == lang])
    for name in scopes:
        rows[name] = figures([j for j in judged if j.question.scope == name])
    print(table(rows))
    ok = verdicts(rows["all"])
    for key, met in ok.items():
        op, target = TARGETS[key]
        print(f"{'met    ' if met else 'MISSED '} {key} {op} {_pct(target)}: {_pct(rows['all'][key])}")
    if args.details:
        args.details.write_text(json.dumps(details, ensure_ascii=False, indent=1), encoding="utf-8")
    metrics = {**{f"{k}": v for k, v in rows["all"].items()},
               **{f"{lang}_{k}": rows[lang][k] for lang in ("en", "zh") for k in TARGETS},
               "questions": len(judged), "scopes": len(scopes), "lookup_seconds": round(seconds, 1)}
    print(json.dumps({"bench": "trust", "metrics": metrics,
                      "ratios": {}, "targets": {k: f"{op} {t}" for k, (op, t) in TARGETS.items()},
                      "met": ok}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
