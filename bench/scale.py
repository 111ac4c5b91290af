"""Scale benchmark: what kbflow costs as the knowledge base grows (10k, 100k … chunks).

EMBEDDINGS ARE FAKE HERE. Every text gets a hashed, deterministic unit vector of the real
dimension (384), so that the store, planning, SQL and search costs are measured, not the model:
these figures are not quality figures. The model's own cost is known apart (bench/ingest.py:
about 50 chunks/s on this machine's two cores); add it on paper: chunks / 50 seconds.

For each size, one corpus is generated (deterministic: the same seed writes the same bytes,
its vocabulary drawn Zipf-like from the CACM titles and abstracts in ../shared/data/cacm) and,
each in a child process whose process tree's resident memory is watched (past --mem-limit-mb,
default 80 % of RAM, it is stopped and the run says so, cleanly):
  - a full reindex: wall time, chunks/s, seconds per stage (summary.stage_seconds), peak RSS
    of kbflow and of Milvus Lite apart (each reindex starts an engine process of its own, as a
    `kbflow reindex` does when no `kbflow serve` runs);
  - a no-change reindex, beside a raw `os.scandir` + `stat` walk of the same tree;
  - a one-document-changed reindex;
  - lookup p50/p95 through the Python API, dense, BM25 and hybrid;
  - `kbflow serve`: seconds until /healthz answers, hybrid p50/p95 over HTTP, peak RSS, and a
    no-change and a one-document-changed reindex through it (its engine keeps the collection loaded);
  - `--full` with the alias swap (up to --swap-max);
  - `kbflow status` and `kbflow docs list` wall time (CLI processes);
  - disk use of the Milvus Lite file and of SQLite;
  - the floor beside them: pymilvus alone inserting and searching as many vectors.
Then a Markdown table, a log-log chart (time and memory against chunks) and one JSON line.

    python bench/scale.py [--sizes 10000,100000] [--max-chunks 100000] [--chart scale.png]
                          [--swap-max 100000] [--mem-limit-mb N] [--rows rows.json]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scale_probes as probes  # noqa: E402
from bench.scale_probes import OutOfMemory, child, cli_seconds, reindex_run, serve_run  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACM = REPO.parent / "shared" / "data" / "cacm" / "beir" / "corpus.jsonl"
CHUNKS_PER_DOC = 4.4  # measured on the generated corpus (948 chunks from 217 documents)
DIM = 384


def vocabulary(limit: int = 5000) -> list[str]:
    """Words of the CACM titles and abstracts, commonest first (a Zipf-like rank list)."""
    counts: Counter = Counter()
    if CACM.exists():
        for line in CACM.read_text(encoding="utf-8").splitlines():
            doc = json.loads(line)
            counts.update(re.findall(r"[a-z]{3,}", f"{doc['title']} {doc['text']}".lower()))
    words = [w for w, _ in counts.most_common(limit)]
    return words or [f"term{i}" for i in range(limit)]


def _sentence(rng: random.Random, words: list[str], weights: list[float], n: int) -> str:
    return " ".join(rng.choices(words, weights=weights, k=n)).capitalize() + "."


def write_corpus(root: Path, docs: int, seed: int = 11, words: list[str] | None = None) -> Path:
    """`docs` Markdown runbooks under root/<category>/, frontmatter, 3-6 sections each."""
    words = words or vocabulary()
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    rng = random.Random(seed)
    for i in range(docs):
        category = f"cat{i % 20:02d}"
        title = _sentence(rng, words, weights, 5)[:-1]
        sections = []
        for _ in range(rng.randint(3, 6)):
            heading = _sentence(rng, words, weights, 3)[:-1]
            body = " ".join(
                _sentence(rng, words, weights, rng.randint(8, 16)) for _ in range(rng.randint(6, 10))
            )
            sections.append(f"## {heading}\n\n{body}\n")
        front = f"source: doc-{i:07d}\ntitle: {title}\nkb_scope: scale\nbreadcrumb: Generated > {category}"
        text = f"---\n{front}\n---\n# {title}\n\n" + "\n".join(sections)
        path = root / category / f"doc-{i:07d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def fake_embeddings() -> None:
    """The model's forward pass replaced by hashed vectors: the sum of a fixed random vector per
    distinct word, so texts that share words lie near each other (recall means something)."""
    import numpy as np

    from kbflow.core import embedder

    cache: dict[str, np.ndarray] = {}

    def word(w: str, dim: int) -> np.ndarray:
        if w not in cache:
            seed = int.from_bytes(hashlib.blake2b(w.encode("utf-8"), digest_size=8).digest(), "little")
            cache[w] = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
        return cache[w]

    def encode(self, texts, threads=0, query=False):  # noqa: ANN001, ARG001
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            v = sum((word(w, self.dim) for w in set(t.lower().split())), np.zeros(self.dim, np.float32))
            v = v + word(t, self.dim) * 0.5  # every text its own point, even with the same words
            out[i] = v / np.linalg.norm(v)
        return out

    embedder.Embedder._encode = encode


def raw_walk(root: Path) -> float:
    """The physical floor of a no-change scan: every entry listed and stat'ed."""
    started = time.perf_counter()
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                entry.stat()
                if entry.is_dir():
                    stack.append(Path(entry.path))
    return time.perf_counter() - started


def raw_records(home: Path) -> float:
    """The other floor of a no-change run: the record table read whole by sqlite3, no ORM."""
    started = time.perf_counter()
    with contextlib.closing(sqlite3.connect(home / "kbflow.db")) as db:
        db.execute("SELECT * FROM documents").fetchall()
    return time.perf_counter() - started


def child_main(kind: str, *args: str) -> None:
    """In a child process (`--child KIND …`): fake embeddings, then one measurement."""
    fake_embeddings()
    if kind == "reindex":
        probes.child_reindex(*args)
    elif kind == "lookups":
        print(json.dumps(probes.lookups(Path(args[0]), vocabulary())))
    elif kind == "raw":
        print(json.dumps(probes.raw_milvus(Path(args[0]), int(args[1]))))
    elif kind == "serve":
        from kbflow.flows.cli import main as cli_main

        os.environ["KBFLOW_HOME"] = args[0]
        sys.exit(cli_main(["serve", "--port", args[1]]))


def size_of(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def measure(chunks: int, work: Path, words: list[str], swap: bool) -> dict:
    docs = max(1, int(chunks / CHUNKS_PER_DOC))
    root, home = work / f"corpus-{chunks}", work / f"home-{chunks}"
    t = time.perf_counter()
    write_corpus(root, docs, words=words)
    print(f"[{chunks}] {docs} documents written in {time.perf_counter() - t:.0f} s", flush=True)
    full = reindex_run(root, home)
    assert full["ok"], full
    print(f"[{chunks}] full reindex {full['seconds']:.0f} s, stages {full['stages']}", flush=True)
    same = reindex_run(root, home)
    walk = min(raw_walk(root) for _ in range(3))
    records = min(raw_records(home) for _ in range(3))
    one = root / "cat00" / "doc-0000000.md"
    one.write_text(one.read_text(encoding="utf-8") + "\n## Changed\n\nOne more section.\n", encoding="utf-8")
    changed = reindex_run(root, home)
    row = {
        "chunks": full["written"],
        "documents": docs,
        "full_s": round(full["seconds"], 1),
        "full_chunks_per_s": round(full["written"] / full["seconds"]),
        "full_rss_mb": round(full["tree_peak_rss_mb"]),
        "full_milvus_rss_mb": full["milvus_peak_rss_mb"],
        "full_stage_s": {k: round(v, 1) for k, v in sorted(full["stages"].items(), key=lambda kv: -kv[1])},
        "nochange_s": round(same["seconds"], 2),
        "nochange_rss_mb": round(same["tree_peak_rss_mb"]),
        "nochange_milvus_rss_mb": same["milvus_peak_rss_mb"],
        "nochange_stage_s": same["stages"],
        "raw_walk_s": round(walk, 3),
        "nochange_over_walk": round(same["seconds"] / walk, 1),
        "raw_records_s": round(records, 3),
        "nochange_over_walk_and_records": round(same["seconds"] / (walk + records), 1),
        "onechange_s": round(changed["seconds"], 2),
        "onechange_over_nochange": round(changed["seconds"] / same["seconds"], 2),
        "onechange_stage_s": {k: round(v, 2) for k, v in changed["stages"].items() if v >= 0.05},
    }
    print(f"[{chunks}] " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    try:
        probe(row, root, home, work, words, swap)
    except Exception as exc:  # the row keeps what was measured, and says what failed
        row["failed"] = f"{type(exc).__name__}: {exc}"[:500]
        row["stopped"] = isinstance(exc, OutOfMemory)
    print(f"[{chunks}] " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return row


def probe(row: dict, root: Path, home: Path, work: Path, words: list[str], swap: bool) -> None:
    """Everything after the reindex runs: lookups, serve, the swap, the CLI, disk, the raw floor."""
    chunks = row["chunks"]
    looked = child("lookups", str(home))
    looked["lookup_rss_mb"] = looked.pop("tree_peak_rss_mb")
    row.update(looked)
    row.update(serve_run(home, words, root))
    if swap:
        rebuilt = reindex_run(root, home, full=True)
        row.update(swap_s=round(rebuilt["seconds"], 1), swap_rss_mb=rebuilt["tree_peak_rss_mb"])
        row["swap_alias_s"] = round(rebuilt["stages"].get("alias_swap", 0.0), 2)
    row.update(
        status_s=cli_seconds("status", home=home),
        docs_list_s=cli_seconds("docs", "list", "--json", home=home),
        milvus_mb=round(size_of(home / "milvus.db"), 1),
        sql_mb=round(size_of(home / "kbflow.db"), 1),
    )
    shutil.rmtree(root, ignore_errors=True)
    raw = child("raw", str(work / f"raw-{chunks}.db"), str(row["chunks"]))
    raw["raw_rss_mb"] = raw.pop("tree_peak_rss_mb")  # measured as the reindex's, by the parent
    row.update(raw)
    shutil.rmtree(work / f"raw-{chunks}.db", ignore_errors=True)


def chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["chunks"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (
        ("full_s", "full reindex"),
        ("nochange_s", "no-change reindex"),
        ("onechange_s", "one document changed"),
        ("raw_walk_s", "raw scandir+stat walk"),
    ):
        a.loglog(x, [r[key] for r in rows], marker="o", label=label)
    for key, label in (
        ("hybrid_p95_ms", "hybrid p95 (ms)"),
        ("raw_dense_p95_ms", "raw pymilvus dense p95 (ms)"),
        ("full_rss_mb", "reindex peak RSS, kbflow (MB)"),
        ("full_milvus_rss_mb", "reindex peak RSS, Milvus Lite (MB)"),
        ("serve_rss_mb", "serve peak RSS (MB)"),
    ):
        have = [r for r in rows if key in r]
        b.loglog([r["chunks"] for r in have], [r[key] for r in have], marker="o", label=label)
    a.set(xlabel="chunks", ylabel="seconds", title="reindex (fake embeddings)")
    b.set(xlabel="chunks", title="lookup latency and memory")
    for ax in (a, b):
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


TABLE = (
    ("full reindex (s)", "full_s"),
    ("full reindex peak RSS: kbflow / Milvus Lite (MB)", ("full_rss_mb", "full_milvus_rss_mb")),
    ("no-change reindex (s)", "nochange_s"),
    ("raw scandir+stat walk (s)", "raw_walk_s"),
    ("raw read of the record table, sqlite3 (s)", "raw_records_s"),
    ("one document changed (s)", "onechange_s"),
    ("while `kbflow serve` runs: no change / one changed (s)", ("served_nochange_s", "served_onechange_s")),
    ("--full with alias swap (s)", "swap_s"),
    ("dense p50/p95 (ms)", ("dense_p50_ms", "dense_p95_ms")),
    ("bm25 p50/p95 (ms)", ("bm25_p50_ms", "bm25_p95_ms")),
    ("hybrid p50/p95 (ms)", ("hybrid_p50_ms", "hybrid_p95_ms")),
    ("serve: hybrid p50/p95 over HTTP (ms)", ("serve_hybrid_p50_ms", "serve_hybrid_p95_ms")),
    ("serve: ready (s)", "serve_ready_s"),
    ("serve: peak RSS (MB)", "serve_rss_mb"),
    ("status / docs list (s)", ("status_s", "docs_list_s")),
    ("disk Milvus / SQL (MB)", ("milvus_mb", "sql_mb")),
    ("raw pymilvus insert (s)", "raw_insert_s"),
    ("raw pymilvus insert peak RSS (MB)", "raw_rss_mb"),
    ("no-change reindex peak RSS: kbflow / Milvus Lite (MB)", ("nochange_rss_mb", "nochange_milvus_rss_mb")),
    ("raw pymilvus dense p50/p95 (ms)", ("raw_dense_p50_ms", "raw_dense_p95_ms")),
)


def _fmt(value: object) -> str:
    return f"{value:,}" if isinstance(value, int | float) else str(value)


def print_table(rows: list[dict]) -> None:
    """A Markdown table, one column per size (what the README's Sizing section holds)."""

    def cell(r: dict, key: str | tuple[str, str]) -> str:
        keys = key if isinstance(key, tuple) else (key,)
        return " / ".join(_fmt(r[k]) if k in r else "–" for k in keys)

    print("| | " + " | ".join(f"{r['chunks']:,} chunks ({r['documents']:,} docs)" for r in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for label, key in TABLE:
        print(f"| {label} | " + " | ".join(cell(r, key) for r in rows) + " |")
    for r in rows:
        print(f"full reindex by stage at {r['chunks']:,} chunks (s): {r['full_stage_s']}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="chunk counts to measure")
    ap.add_argument("--max-chunks", type=int, default=100_000, help="skip sizes above this")
    ap.add_argument("--chart", default="scale.png", help="where the log-log chart goes")
    ap.add_argument("--swap-max", type=int, default=100_000, help="--full (the alias swap) up to this size")
    ap.add_argument("--mem-limit-mb", type=float, default=probes.MEM_LIMIT_MB,
                    help="stop a measured process tree past this resident memory (default 80%% of RAM)")
    ap.add_argument("--rows", help="a JSON file of rows: earlier sizes are read from it, new ones added")
    return ap.parse_args()


def run_sizes(args: argparse.Namespace) -> tuple[list[dict], dict | None]:
    """Measure each size in turn; a size whose process passes the memory limit ends the run."""
    sizes = [int(s) for s in args.sizes.split(",") if int(s) <= args.max_chunks]
    saved = json.loads(Path(args.rows).read_text()) if args.rows and Path(args.rows).exists() else []
    rows = [r for r in saved if r.get("size") not in sizes]
    work = Path(tempfile.mkdtemp(prefix="kbflow-scale-"))
    words = vocabulary()
    # the model is exported once, before anything is timed: RSS and seconds are kbflow's own
    os.environ["KBFLOW_MODELS_DIR"] = str(work / "models")
    reindex_run(write_corpus(work / "warm", 2, words=words), work / "warm-home")
    stopped = None
    try:
        for n in sizes:
            try:
                rows.append({"size": n, **measure(n, work, words, swap=n <= args.swap_max)})
            except OutOfMemory as exc:
                stopped = {"size": n, "stopped": str(exc)}
                print(f"[{n}] STOPPED: {exc}", flush=True)
                break
            if args.rows:
                Path(args.rows).write_text(json.dumps(rows, indent=1))
            if rows[-1].get("stopped"):
                stopped = {"size": n, "stopped": rows[-1]["failed"]}
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return sorted(rows, key=lambda r: r["chunks"]), stopped


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child_main(*sys.argv[2:])
        return 0
    args = parse_args()
    probes.MEM_LIMIT_MB = args.mem_limit_mb
    rows, stopped = run_sizes(args)
    if len(rows) > 1:
        chart(rows, Path(args.chart))
    print_table(rows)
    first, last = rows[0], rows[-1]
    growth = last["chunks"] / first["chunks"]
    ratios = {
        "nochange_over_walk": last["nochange_over_walk"],
        "nochange_over_walk_and_records": last.get("nochange_over_walk_and_records"),
        "onechange_over_nochange": last["onechange_over_nochange"],
        "served_onechange_minus_nochange_s": last.get("served_onechange_minus_nochange_s"),
        "hybrid_p95_largest_over_smallest": (
            round(last["hybrid_p95_ms"] / first["hybrid_p95_ms"], 2) if "hybrid_p95_ms" in last else None
        ),
        "full_s_growth_over_chunk_growth": round(last["full_s"] / first["full_s"] / growth, 2),
        "reindex_rss_largest_over_smallest": round(last["full_rss_mb"] / first["full_rss_mb"], 2),
        "dense_recall_at_10_lowest": min((r["dense_recall_at_10"] for r in rows if "dense_recall_at_10" in r),
                                         default=None),
    }
    metrics = {
        "embeddings": "FAKE (hashed unit vectors): not quality figures",
        "sizes": rows,
        "stopped": stopped,
    }
    targets = {
        "nochange_over_walk": "<= 3",
        "nochange_over_walk_and_records": "<= 3 (the floor with the records a no-change run must read)",
        "onechange_over_nochange": "~1",
        "served_onechange_minus_nochange_s": "<= 2 (through a running serve: the collection is loaded)",
        "hybrid_p95_largest_over_smallest": "<= 2",
        "full_s_growth_over_chunk_growth": "<= 1 (linear)",
        "reindex_rss_largest_over_smallest": "~1 (flat)",
        "dense_recall_at_10_lowest": ">= 0.95 (against exact search, at every size)",
        "hybrid_p95_ms_at_100k": "<= 50",
    }
    print(json.dumps({"bench": "scale", "metrics": metrics, "ratios": ratios, "targets": targets}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
