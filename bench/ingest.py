"""Ingestion benchmark: is everything besides embedding cheap?

On a generated corpus (default ~1,040 chunks) it measures, side by side in one process:
  (a) model.encode alone over exactly the chunk texts a reindex embeds,
  (b) a full reindex into a fresh home (cold embedding cache),
  (c) a no-change incremental reindex of the same root,
and prints b/a (target <= 1.25: embedding is the floor on CPU) and c/b (target <= 0.05).
With --corpus DIR it takes the first --docs Markdown files of DIR instead (e.g. the Chinese
`../shared/data/starrocks-faq-zh/seed-docs`): the scope's model is then the one kbflow chooses
for them (multilingual-e5-small for Chinese), or --model; --compare-model also times another
model over the same texts (chunks/s of both models side by side).

    python bench/ingest.py [--docs 260] [--sections 4] [--words 110]
    python bench/ingest.py --corpus ../shared/data/starrocks-faq-zh/seed-docs --docs 300 \
        --compare-model all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbflow.core.embedder import get_embedder  # noqa: E402
from kbflow.core.models import ModelChoice, resolve_model  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402
from kbflow.core.stores import close_all, ingest_threads, open_stores  # noqa: E402
from kbflow.ingest.chunking import chunk_markdown  # noqa: E402
from kbflow.ingest.parsing import DocumentError, ParsedDocument, parse_document, read_text  # noqa: E402
from kbflow.ingest.reindex import reindex  # noqa: E402
from kbflow.ingest.scope_config import choose_model  # noqa: E402
from kbflow.ingest.sources import discover  # noqa: E402

VOCAB = (
    "pool connection timeout replica lag queue consumer partition broker offset cache eviction "
    "memory latency request upstream gateway certificate node pod container restart probe limit "
    "heap thread index query table lock deadlock commit rollback shard leader election quorum "
    "disk inode throughput backlog retry backoff circuit breaker rate limiter token session "
    "cluster region failover snapshot checkpoint compaction flush segment bloom filter"
).split()


def make_corpus(root: Path, docs: int, sections: int, words: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    cats = ["Database", "Cache", "Message Queue", "Gateway", "Kubernetes"]
    for i in range(docs):
        body = [f"# Runbook {i}: {' '.join(rng.sample(VOCAB, 3))}\n"]
        for j in range(sections):
            text = " ".join(rng.choice(VOCAB) for _ in range(words))
            body.append(f"## Section {j} {rng.choice(VOCAB)}\n\n{text.capitalize()}.\n")
        crumb = f"{cats[i % len(cats)]} > Area {i % 7}"
        fm = f"---\nsource: bench-{i:05d}\nkb_scope: bench\nbreadcrumb: {crumb}\n---\n"
        (root / f"doc-{i:05d}.md").write_text(fm + "\n".join(body), encoding="utf-8")


def copy_corpus(source: Path, root: Path, docs: int) -> None:
    """The first `docs` Markdown files of `source` (sorted) that parse, moved into the scope
    `bench`. A file a reindex would reject (e.g. a breadcrumb that is not a valid category) is
    skipped: the bench times the indexing of good documents."""
    taken = skipped = 0
    for path in sorted(source.glob("*.md")):
        if taken == docs:
            break
        text = re.sub(r"(?m)^kb_scope:.*$", "kb_scope: bench", path.read_text(encoding="utf-8"), count=1)
        try:
            parse_document(text, content_hash="", rel_path=path.name, root=str(root), default_scope="bench")
        except DocumentError:
            skipped += 1
            continue
        (root / path.name).write_text(text, encoding="utf-8")
        taken += 1
    if not taken:
        raise SystemExit(f"{source}: no Markdown file kbflow can index")
    if skipped:
        print(f"skipped {skipped} file(s) a reindex would reject")


def parsed_corpus(root: Path, settings: Settings) -> tuple[list[str], list[ParsedDocument]]:
    """The chunk texts a reindex embeds, and the parsed documents."""
    texts, docs = [], []
    files, _problems = discover(root)
    for path in files:
        text, digest = read_text(path, settings.max_file_bytes)
        doc, _ = parse_document(
            text, content_hash=digest, rel_path=path.name, root=str(root), default_scope="bench"
        )
        docs.append(doc)
        texts += [
            c.text for c in chunk_markdown(doc.body, settings.chunk_max_chars, settings.chunk_overlap_chars)
        ]
    return texts, docs


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=260, help="documents in the generated corpus")
    ap.add_argument("--sections", type=int, default=4, help="sections per document")
    ap.add_argument("--words", type=int, default=110, help="words per section")
    ap.add_argument("--corpus", type=Path, help="take the first --docs Markdown files of this directory")
    ap.add_argument("--model", help="the scope's embedding model (default: kbflow's choice by language)")
    ap.add_argument("--compare-model", help="also time this model's encode over the same chunk texts")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    return ap.parse_args()


def encode_only(settings: Settings, texts: list[str], model: ModelChoice) -> float:
    """(a): seconds the model alone takes to embed every chunk, with the reindex's threads."""
    embedder = get_embedder(
        model.name,
        settings.embedding_device,
        settings.embedding_batch_size,
        model.backend,
        settings.resolved_models_dir,
    )
    threads = ingest_threads(settings)  # what the reindex below embeds with
    embedder.encode(texts[:64], threads)  # warm-up: model load (and export) are not part of (a)
    print(f"model {model.label}, {threads} threads")
    t = time.perf_counter()
    embedder.encode(texts, threads)
    return time.perf_counter() - t


def reindex_twice(root: Path, settings: Settings, n_texts: int, docs: int) -> tuple[float, float]:
    """(b) a full reindex on a cold cache and (c) a rerun with nothing changed, in seconds."""
    stores = open_stores(settings)
    t = time.perf_counter()
    full = reindex([root], full=True, stores=stores)
    b = time.perf_counter() - t
    assert full.ok and full.chunks_embedded == n_texts, full.to_dict()
    t = time.perf_counter()
    again = reindex([root], stores=stores)
    c = time.perf_counter() - t
    assert again.ok and again.chunks_embedded == 0 and again.unchanged == docs
    return b, c


def main() -> int:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbflow-bench-"))
    root = work / "corpus"
    root.mkdir()
    if args.corpus:
        copy_corpus(args.corpus, root, args.docs)
    else:
        make_corpus(root, args.docs, args.sections, args.words)
    scopes = {"bench": {"embedding_model": args.model}} if args.model else {}
    settings = Settings(home=work / "home", scopes=scopes)
    texts, docs = parsed_corpus(root, settings)
    model, _auto = choose_model(settings, "bench", docs)
    print(
        f"corpus: {len(docs)} documents, {len(texts)} chunks, "
        f"{sum(map(len, texts)) / len(texts):.0f} chars/chunk avg"
    )
    other = None
    if args.compare_model:
        other = resolve_model(args.compare_model, settings.embedding_backend)
        other_s = encode_only(settings, texts, other)
        print(f"(a') {other.label} encode only {other_s:8.2f} s  ({len(texts) / other_s:6.1f} chunks/s)")
    a = encode_only(settings, texts, model)
    b, c = reindex_twice(root, settings, len(texts), len(docs))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(a) model.encode only        {a:8.2f} s  ({len(texts) / a:6.1f} chunks/s)")
    print(f"(b) full reindex, cold cache {b:8.2f} s  ({len(texts) / b:6.1f} chunks/s)")
    print(f"(c) no-change incremental    {c:8.2f} s")
    print(f"b/a = {b / a:.3f}  (target <= 1.25)")
    print(f"c/b = {c / b:.4f} (target <= 0.05)")
    print(f"peak RSS {rss:.0f} MiB")
    summary = {
        "bench": "ingest",
        "metrics": {
            "model": model.label,
            "chunks": len(texts),
            "encode_chunks_per_s": round(len(texts) / a, 1),
            "encode_s": round(a, 2),
            "full_reindex_s": round(b, 2),
            "no_change_s": round(c, 3),
            "peak_rss_mib": round(rss),
        },
        "ratios": {
            "full_over_encode": round(b / a, 3),
            "no_change_over_full": round(c / b, 4),
            **({"compare_model_speed_over_model": round(a / other_s, 2)} if other else {}),
        },
        "targets": {"full_over_encode": "<= 1.25", "no_change_over_full": "<= 0.05"},
    }
    print(json.dumps(summary))
    close_all()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if b / a <= 1.25 and c / b <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
