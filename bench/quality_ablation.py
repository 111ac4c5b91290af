"""Quality ablation: each retrieval choice measured on the golden corpus and on CACM.

Every row is one `kbflow eval` command with settings from the environment (printed with the
row), so each figure in the README can be reproduced on its own. Golden rows run the live golden
cases (`kbflow eval --live --mode hybrid|dense --json`); CACM rows run
`kbflow eval --beir ../shared/data/cacm/beir --depth 100` with the CACM negatives. Candidate
metrics are document-level over the ranked candidate list (trec_eval/ranx); the gate's figures
are the no-evidence rates. Variants that change the analysis get their own home (golden) or
scope (CACM); the embedding cache means nothing is embedded twice within one home.

    python bench/quality_ablation.py [--only golden|cacm] [--home DIR]

Ends with one JSON line: {"bench": "quality_ablation", "metrics": {...}, "ratios": {...},
"targets": {...}}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACM = REPO.parent / "shared" / "data" / "cacm" / "beir"
NEGATIVES = REPO / "eval" / "negatives" / "cacm-negatives.jsonl"
BM25_ONLY = {"KBFLOW_FUSION": "rrf", "KBFLOW_DENSE_WEIGHT": "0.000001", "KBFLOW_LEXICAL_TRUST": "false"}

# (row name, environment, mode); the first row is the default pipeline
ROWS: list[tuple[str, dict[str, str], str]] = [
    ("default: convex 0.7 + lexical trust, stem+ids+fields, depth 100", {}, "hybrid"),
    ("dense only", {}, "dense"),
    ("BM25 only (stem+ids+fields)", BM25_ONLY, "hybrid"),
    (
        "BM25 only, lowercase (Milvus analyzer alone)",
        {**BM25_ONLY, "KBFLOW_LEXICAL_ANALYSIS": "lowercase"},
        "hybrid",
    ),
    ("analysis: stem, no identifier splitting", {"KBFLOW_LEXICAL_ANALYSIS": "stem"}, "hybrid"),
    ("analysis: lowercase only", {"KBFLOW_LEXICAL_ANALYSIS": "lowercase"}, "hybrid"),
    ("fields off (text only)", {"KBFLOW_LEXICAL_FIELDS": "false"}, "hybrid"),
    ("fusion: RRF k=60", {"KBFLOW_FUSION": "rrf"}, "hybrid"),
    (
        "fusion: RRF k=60, lexical trust off",
        {"KBFLOW_FUSION": "rrf", "KBFLOW_LEXICAL_TRUST": "false"},
        "hybrid",
    ),
    ("fusion: RRF k=20", {"KBFLOW_FUSION": "rrf", "KBFLOW_RRF_K": "20"}, "hybrid"),
    ("fusion: convex 0.7, lexical trust off", {"KBFLOW_LEXICAL_TRUST": "false"}, "hybrid"),
    ("fusion: convex 0.6", {"KBFLOW_CONVEX_ALPHA": "0.6"}, "hybrid"),
    ("fusion: convex 0.5", {"KBFLOW_CONVEX_ALPHA": "0.5"}, "hybrid"),
    (
        "fusion: convex 0.5, lexical trust off",
        {"KBFLOW_CONVEX_ALPHA": "0.5", "KBFLOW_LEXICAL_TRUST": "false"},
        "hybrid",
    ),
    ("fusion: convex 0.8", {"KBFLOW_CONVEX_ALPHA": "0.8"}, "hybrid"),
    ("fusion: convex 0.3", {"KBFLOW_CONVEX_ALPHA": "0.3"}, "hybrid"),
    # BEIR rows run at depth 100 whatever retrieve_k is; these fetch what production fetches
    ("retrieve_k 20 (the default), CACM at depth 20", {"DEPTH": "20"}, "hybrid"),
    ("retrieve_k 50, CACM at depth 50", {"KBFLOW_RETRIEVE_K": "50", "DEPTH": "50"}, "hybrid"),
    ("retrieve_k 100, CACM at depth 100", {"KBFLOW_RETRIEVE_K": "100"}, "hybrid"),
    ("max_chunks_per_document 1", {"KBFLOW_MAX_CHUNKS_PER_DOCUMENT": "1"}, "hybrid"),
    ("max_chunks_per_document 3", {"KBFLOW_MAX_CHUNKS_PER_DOCUMENT": "3"}, "hybrid"),
]
ANALYSIS_KEYS = ("KBFLOW_LEXICAL_ANALYSIS", "KBFLOW_LEXICAL_FIELDS")


def analysis_key(env: dict[str, str]) -> str:
    """Which index a row needs: rows that change the analysis get their own."""
    parts = [env.get(k, "") for k in ANALYSIS_KEYS if k.startswith("KBFLOW_")]
    return "-".join(p.replace("+", "") for p in parts if p) or "default"


def kbflow(args: list[str], env: dict[str, str]) -> dict:
    settings_env = {k: v for k, v in env.items() if k.startswith("KBFLOW_")}
    full_env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
        **settings_env,
    }
    out = subprocess.run(
        [sys.executable, "-m", "kbflow.flows.cli", *args, "--json"],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode not in (0, 1):
        raise SystemExit(f"kbflow {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def golden_row(home: Path, env: dict[str, str], mode: str) -> tuple[dict, str]:
    args = ["eval", "--live", "--mode", mode, "--home", str(home / f"golden-{analysis_key(env)}")]
    met = kbflow(args, env)["report"]["modes"][mode]["metrics"]
    row = {
        "nDCG@10": met["candidate_ndcg@10"],
        "MRR": met["candidate_mrr"],
        "delivered nDCG@K": met["ndcg@k"],
        "false no-ev": met["false_no_evidence_rate"],
        "true no-ev near": met["true_no_evidence_rate_near"],
        "true no-ev off": met["true_no_evidence_rate_off"],
    }
    return row, "kbflow " + " ".join(args)


def cacm_row(home: Path, env: dict[str, str], mode: str) -> tuple[dict, str]:
    scope = f"cacm-{analysis_key(env)}"
    args = ["eval", "--beir", str(CACM), "--scope", scope, "--mode", mode, "--depth", env.get("DEPTH", "100")]
    args += ["--negatives", str(NEGATIVES), "--home", str(home / "cacm")]
    m = kbflow(args, env)["modes"][mode]
    c, ne = m["candidates"], m["no_evidence"]
    row = {
        "nDCG@10": c["ndcg@10"],
        "MRR": c["mrr@10"],
        "R@100": c["recall@100"],
        "P@5": c["precision@5"],
        "delivered nDCG@K": m["delivered"]["ndcg@k"],
        "false no-ev": ne["false_no_evidence_rate"],
        "true no-ev near": ne["true_no_evidence_rate"].get("near"),
        "true no-ev off": ne["true_no_evidence_rate"].get("off"),
    }
    return row, "kbflow " + " ".join(args)


def fmt(v: object) -> str:
    return "–" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def table(name: str, rows: list[tuple[str, dict[str, str], dict, str]]) -> list[str]:
    cols = list(rows[0][2])
    lines = [f"### {name}", "", "| variant | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for label, env, row, _cmd in rows:
        env_txt = " ".join(f"{k}={v}" for k, v in env.items() if k.startswith("KBFLOW_"))
        lines.append(
            f"| {label}"
            + (f" (`{env_txt}`)" if env_txt else "")
            + " | "
            + " | ".join(fmt(row[c]) for c in cols)
            + " |"
        )
    lines += ["", "Commands (each row: its environment, then):", ""]
    lines += [f"- {label}: `{cmd}`" for label, _e, _r, cmd in rows[:2]]
    lines.append("- the other rows: the same command with the environment shown in the row")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["golden", "cacm"])
    ap.add_argument("--home", help="state directory (default: a fresh temporary one)")
    args = ap.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="kbflow-ablation-"))
    results: dict[str, list] = {}
    for corpus, run in (("golden", golden_row), ("cacm", cacm_row)):
        if args.only and args.only != corpus:
            continue
        if corpus == "cacm" and not CACM.exists():
            print(f"skipping CACM: {CACM} not found", file=sys.stderr)
            continue
        results[corpus] = []
        for label, env, mode in ROWS:
            row, cmd = run(home, env, mode)
            print(
                f"{corpus:6s} {label:55s} " + "  ".join(f"{k} {fmt(v)}" for k, v in row.items()), flush=True
            )
            results[corpus].append((label, env, row, cmd))
    for corpus, rows in results.items():
        print("\n".join(["", *table(corpus, rows)]))
    metrics, ratios, targets = {}, {}, {}
    for corpus, rows in results.items():
        by = {label: row for label, _e, row, _c in rows}
        hybrid, dense = by[ROWS[0][0]]["nDCG@10"], by["dense only"]["nDCG@10"]
        bm25 = by["BM25 only (stem+ids+fields)"]["nDCG@10"]
        metrics[f"{corpus}_hybrid_ndcg@10"] = hybrid
        metrics[f"{corpus}_dense_ndcg@10"], metrics[f"{corpus}_bm25_ndcg@10"] = dense, bm25
        metrics[f"{corpus}_false_no_evidence"] = by[ROWS[0][0]]["false no-ev"]
        ratios[f"{corpus}_hybrid_over_best_single_leg"] = round(hybrid / max(dense, bm25), 4)
        targets[f"{corpus}_hybrid_over_best_single_leg"] = "> 1"
        targets[f"{corpus}_false_no_evidence"] = "<= 0.02"
    if "cacm" in results:
        ratios["cacm_hybrid_over_rrf_reference_0.541"] = round(metrics["cacm_hybrid_ndcg@10"] / 0.541, 4)
        targets["cacm_hybrid_over_rrf_reference_0.541"] = ">= 1"
    print(json.dumps({"bench": "quality_ablation", "metrics": metrics, "ratios": ratios, "targets": targets}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
