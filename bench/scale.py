"""Scale benchmark: what kbflow costs as the knowledge base grows (10k, 100k … chunks).

EMBEDDINGS ARE FAKE HERE. Every text gets a hashed, deterministic unit vector of the real
dimension (384), so that the store, planning, SQL and search costs are measured, not the model:
these figures are not quality figures. The model's own cost is known apart (bench/ingest.py:
about 50 chunks/s on this machine's two cores); add it on paper: chunks / 50 seconds.

For each size, one corpus is generated (deterministic: the same seed writes the same bytes,
its vocabulary drawn Zipf-like from the CACM titles and abstracts in ../shared/data/cacm) and:
  - a full reindex (a child process: wall time, chunks/s, peak RSS);
  - a no-change reindex, beside a raw `os.scandir` + `stat` walk of the same tree;
  - a one-document-changed reindex;
  - lookup p50/p95 through the Python API, dense, BM25 and hybrid;
  - `kbflow status` and `kbflow docs list` wall time (CLI processes);
  - disk use of the Milvus Lite file and of SQLite.
Then a table, a log-log chart (time and memory against chunks) and one JSON line.

    python bench/scale.py [--max-chunks 100000] [--sizes 10000,100000] [--chart scale.png]

Not measured yet (issue 24): 1M chunks, `--full` with the alias swap, `kbflow serve` (ready
time, lookups, RSS), the full reindex split by stage, a raw Milvus insert and search beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
    """Replace the model's forward pass by hashed unit vectors (same id, same dimension)."""
    import numpy as np

    from kbflow.core import embedder

    def encode(self, texts, threads=0, query=False):  # noqa: ANN001, ARG001
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
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


def child_reindex(root: str, home: str) -> None:
    """In a child process: reindex with fake embeddings; print seconds, chunks and peak RSS."""
    fake_embeddings()
    from kbflow.core.settings import Settings
    from kbflow.ingest.reindex import reindex

    started = time.perf_counter()
    summary = reindex([root], settings=Settings(home=home))
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps({"seconds": seconds, "ok": summary.ok, "written": summary.chunks_written, "rss_mb": rss})
    )


def reindex_run(root: Path, home: Path) -> dict:
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(root), str(home)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli_seconds(*args: str, home: Path) -> float:
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kbflow.flows.cli", *args], capture_output=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def lookups(home: Path, words: list[str], n: int = 60) -> dict[str, float]:
    """p50/p95 per mode, in this process (fake query embeddings too), after a warm-up."""
    fake_embeddings()
    from kbflow.core.settings import Settings
    from kbflow.core.stores import close_all
    from kbflow.retrieval.lookup import get_retriever

    retriever = get_retriever(Settings(home=home))
    rng = random.Random(3)
    queries = [" ".join(rng.sample(words[:2000], 5)) for _ in range(n)]
    out = {}
    for mode in ("dense", "bm25", "hybrid"):
        retriever.lookup(queries[0], kb_scope="scale", mode=mode)
        times = []
        for q in queries:
            started = time.perf_counter()
            retriever.lookup(q, kb_scope="scale", mode=mode)
            times.append((time.perf_counter() - started) * 1000)
        out[f"{mode}_p50_ms"], out[f"{mode}_p95_ms"] = round(pct(times, 50), 1), round(pct(times, 95), 1)
    close_all()
    from kbflow.retrieval.lookup import reset_retrievers

    reset_retrievers()
    return out


def size_of(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def measure(chunks: int, work: Path, words: list[str]) -> dict:
    docs = max(1, int(chunks / CHUNKS_PER_DOC))
    root, home = work / f"corpus-{chunks}", work / f"home-{chunks}"
    t = time.perf_counter()
    write_corpus(root, docs, words=words)
    print(f"[{chunks}] {docs} documents written in {time.perf_counter() - t:.0f} s", flush=True)
    full = reindex_run(root, home)
    assert full["ok"], full
    same = reindex_run(root, home)
    walk = min(raw_walk(root) for _ in range(3))
    one = root / "cat00" / "doc-0000000.md"
    one.write_text(one.read_text(encoding="utf-8") + "\n## Changed\n\nOne more section.\n", encoding="utf-8")
    changed = reindex_run(root, home)
    row = {
        "chunks": full["written"],
        "documents": docs,
        "full_s": round(full["seconds"], 1),
        "full_chunks_per_s": round(full["written"] / full["seconds"]),
        "full_rss_mb": round(full["rss_mb"]),
        "nochange_s": round(same["seconds"], 2),
        "nochange_rss_mb": round(same["rss_mb"]),
        "raw_walk_s": round(walk, 3),
        "nochange_over_walk": round(same["seconds"] / walk, 1),
        "onechange_s": round(changed["seconds"], 2),
        "onechange_over_nochange": round(changed["seconds"] / same["seconds"], 2),
        "status_s": round(cli_seconds("status", home=home), 2),
        "docs_list_s": round(cli_seconds("docs", "list", "--json", home=home), 2),
        "milvus_mb": round(size_of(home / "milvus.db"), 1),
        "sql_mb": round(size_of(home / "kbflow.db"), 1),
        **lookups(home, words),
    }
    print(f"[{chunks}] " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return row


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
    for key, label in (("hybrid_p95_ms", "hybrid p95 (ms)"), ("full_rss_mb", "reindex peak RSS (MB)")):
        b.loglog(x, [r[key] for r in rows], marker="o", label=label)
    a.set(xlabel="chunks", ylabel="seconds", title="reindex (fake embeddings)")
    b.set(xlabel="chunks", title="lookup latency and memory")
    for ax in (a, b):
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_reindex(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="chunk counts to measure")
    ap.add_argument("--max-chunks", type=int, default=100_000, help="skip sizes above this")
    ap.add_argument("--chart", default="scale.png", help="where the log-log chart goes")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if int(s) <= args.max_chunks]
    work = Path(tempfile.mkdtemp(prefix="kbflow-scale-"))
    words = vocabulary()
    # the model is exported once, before anything is timed: RSS and seconds are kbflow's own
    os.environ["KBFLOW_MODELS_DIR"] = str(work / "models")
    reindex_run(write_corpus(work / "warm", 2, words=words), work / "warm-home")
    try:
        rows = [measure(n, work, words) for n in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if len(rows) > 1:
        chart(rows, Path(args.chart))
    first, last = rows[0], rows[-1]
    growth = last["chunks"] / first["chunks"]
    ratios = {
        "nochange_over_walk": last["nochange_over_walk"],
        "onechange_over_nochange": last["onechange_over_nochange"],
        "hybrid_p95_largest_over_smallest": round(last["hybrid_p95_ms"] / first["hybrid_p95_ms"], 2),
        "full_s_growth_over_chunk_growth": round(last["full_s"] / first["full_s"] / growth, 2),
        "reindex_rss_largest_over_smallest": round(last["full_rss_mb"] / first["full_rss_mb"], 2),
    }
    out = {
        "bench": "scale",
        "metrics": {"embeddings": "FAKE (hashed unit vectors): not quality figures", "sizes": rows},
        "ratios": ratios,
        "targets": {
            "nochange_over_walk": "<= 3",
            "onechange_over_nochange": "~1",
            "hybrid_p95_largest_over_smallest": "<= 2",
            "full_s_growth_over_chunk_growth": "<= 1 (linear)",
            "reindex_rss_largest_over_smallest": "~1 (flat)",
        },
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
