"""The README's "Where it stands" table, generated from the files the figures come from: the
committed eval baseline (the golden runbooks, by scope) and the BEIR reports in bench/results/.
So the README and the docs can never show other figures than the ones a rerun reproduces.

    python scripts/where_it_stands.py            # print the table
    python scripts/where_it_stands.py --readme   # rewrite it in README.md (between its markers)

The docs build puts the same table where a page has `<!-- generated: where-it-stands -->`, and
tests/test_docs.py fails when README.md's copy differs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = "eval/rag-retrieval/reports/baseline.json"
BEGIN, END = "<!-- generated: where-it-stands -->", "<!-- end generated: where-it-stands -->"
# (row, the golden scope in the baseline's hybrid mode, or a BEIR result file)
ROWS = (
    ("golden runbooks, English (hybrid)", "scope", "rag-eval"),
    ("CACM (BEIR, depth 100)", "beir", "bench/results/beir-cacm.json"),
    ("golden runbooks, Chinese (hybrid)", "scope", "rag-eval-zh"),
    ("starrocks-faq-zh (BEIR, depth 100)", "beir", "bench/results/beir-starrocks-faq-zh.json"),
)


def _pct(rate: float) -> str:
    return f"{rate * 100:.1f} %"


def _row(label: str, kind: str, where: str) -> str:
    if kind == "scope":
        report = json.loads((REPO / BASELINE).read_text(encoding="utf-8"))
        m = report["modes"]["hybrid"]["by_scope"][where]
        figures = (m["candidate_ndcg@10"], m["candidate_mrr"], m["false_no_evidence_rate"])
        source = f"`{BASELINE}` ({report['generated_at'][:10]}, `kbflow eval --live`)"
    else:
        saved = json.loads((REPO / where).read_text(encoding="utf-8"))
        h = saved["report"]["modes"]["hybrid"]
        found, no_evidence = h["candidates"], h["no_evidence"]
        figures = (found["ndcg@10"], found["mrr@10"], no_evidence["false_no_evidence_rate"])
        source = f"`{where}` ({saved['measured_on']}, `kbflow eval --beir`: the command is in the file)"
    ndcg, mrr, false_none = figures
    return f"| {label} | {ndcg:.3f} | {mrr:.3f} | {_pct(false_none)} | {source} |"


def table() -> str:
    """The table, one row per set, each saying which run it comes from."""
    lines = [
        '| | nDCG@10 | MRR@10 | false "no usable evidence" | from |',
        "|---|---:|---:|---:|---|",
        *(_row(*row) for row in ROWS),
    ]
    return "\n".join(lines)


def readme_block(text: str) -> str:
    """What README.md holds between the markers."""
    m = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not m:
        raise ValueError(f"README.md has no {BEGIN} … {END} block")
    return m.group(1)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--readme"]:
        path = REPO / "README.md"
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(readme_block(text), table()), encoding="utf-8")
        print(f"rewrote the table in {path}")
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
