"""Knowledge-gaps benchmark: how well `kbflow gaps` finds seeded topics, by method, and how fast
it reads a large audit.

(1) Seeded audit, per language: the golden corpus (seed-docs: scope rag-eval; seed-docs/zh:
    rag-eval-zh) is indexed; its answerable golden questions are asked (cycled to --answerable
    lookups) next to the questions of eval/gaps/seeded-topics.json (5 topics the corpus does
    not cover; each asked --repeats times by one of 3 callers). For each clustering method,
    centring (on / off) and threshold: the purity of the 5 largest groups (the share of a
    group's lookups from its commonest topic, answerable ones counting as impurity), whether
    those 5 are the 5 topics, the number of groups.
(2) Single-product scopes, per language (eval/trust/docs: ledgerd, starrocks-load-zh; the
    product's name is in every document): 3 gaps of 6 questions, each naming the product, asked
    --repeats times. With the default method: the purity of the 3 largest groups, whether they
    are the 3 gaps, and whether any label names the product (it must not).
(3) Scale: the audit is copied up to --rows rows (the copies keep their embeddings, as the
    audit does for unanswered lookups) and `knowledge_gaps` runs over the whole window with the
    default method: seconds, against the 30 s target.

    python bench/gaps.py [--rows 100000] [--answerable 250] [--repeats 3] [--languages en,zh]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbflow.core.settings import Settings  # noqa: E402
from kbflow.core.sql import LookupAuditRow  # noqa: E402
from kbflow.core.stores import close_all, open_stores  # noqa: E402
from kbflow.evaluation.cases import load_cases  # noqa: E402
from kbflow.evaluation.runner import EVAL_ROOT  # noqa: E402
from kbflow.ingest.reindex import reindex  # noqa: E402
from kbflow.insights.clustering import DEFAULT_METHOD  # noqa: E402
from kbflow.insights.gaps import knowledge_gaps, model_embedder  # noqa: E402
from kbflow.retrieval.lookup import lookup_knowledge  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOPICS = REPO / "eval" / "gaps" / "seeded-topics.json"
CALLERS = ("http:agent-a", "http:agent-b", "cli")


LANGUAGES = {  # language -> (seed-docs folder, scope, topics key)
    "en": ("seed-docs", "rag-eval", "topics"),
    "zh": ("seed-docs/zh", "rag-eval-zh", "topics_zh"),
}


def topics(language: str = "en") -> dict[str, list[str]]:
    return json.loads(TOPICS.read_text(encoding="utf-8"))[LANGUAGES[language][2]]


def seeded_corpus(root: Path, language: str = "en") -> Path:
    """The golden corpus of one language (the top folder of seed-docs, or its zh/)."""
    root.mkdir(parents=True, exist_ok=True)
    for md in sorted((REPO / LANGUAGES[language][0]).glob("*.md")):
        (root / md.name).write_text(md.read_text(encoding="utf-8"), encoding="utf-8")
    return root


def seeded_audit(settings: Settings, language: str = "en", answerable: int = 250, repeats: int = 3) -> tuple:
    """Ask the seeded lookups: (audit id -> topic name or "answerable", the documents returned)."""
    scope = LANGUAGES[language][1]
    cases = [
        c
        for c in load_cases(EVAL_ROOT / "cases" / "golden-cases.json")
        if c.expected_doc_ids and c.kb_scope == scope
    ]
    asks: list[tuple[str, str, str]] = []  # (query, truth, caller)
    for i in range(answerable):
        asks.append((cases[i % len(cases)].query, "answerable", CALLERS[i % 3]))
    for name, questions in topics(language).items():
        for r in range(repeats):
            asks.extend((q, name, CALLERS[(r + j) % 3]) for j, q in enumerate(questions))
    truth, returned = {}, set()
    for query, label, caller in asks:
        result = lookup_knowledge(query, kb_scope=scope, settings=settings, caller=caller)
        truth[result.audit_id] = label
        returned |= {e.doc_id for e in result.evidence}
    return truth, returned


def single_product(language: str) -> dict[str, Any]:
    """The single-product case of one language: scope, docs folder, product, topics."""
    return json.loads(TOPICS.read_text(encoding="utf-8"))["single_product"][language]


def single_product_audit(settings: Settings, language: str, repeats: int = 3) -> dict[int, str]:
    """Index the language's single-product scope and ask its 3 gaps: audit id -> gap."""
    case = single_product(language)
    assert reindex([REPO / case["docs"]], settings=settings).ok
    truth = {}
    for name, questions in case["topics"].items():
        for r in range(repeats):
            for j, q in enumerate(questions):
                caller = CALLERS[(r + j) % 3]
                result = lookup_knowledge(q, kb_scope=case["scope"], settings=settings, caller=caller)
                truth[result.audit_id] = name
    return truth


def single_product_row(sql, embed, truth: dict[int, str], language: str) -> dict[str, Any]:
    """Gaps on the single-product scope alone: are its 3 gaps 3 pure groups, named without the
    product?"""
    case = single_product(language)
    report = knowledge_gaps(sql, embed, scope=case["scope"], since=timedelta(days=1))
    top = report.groups[:3]
    found, purities = set(), []
    for g in top:
        topic, n = Counter(truth.get(i, "?") for i in g.ids).most_common(1)[0]
        purities.append(n / g.count)
        found.add(topic)
    product = case["product"].lower()
    row = {
        "language": language,
        "case": "single-product",
        "scope": case["scope"],
        "unanswered": report.unanswered,
        "asked": len(truth),
        "groups": len(report.groups),
        "top3_min_purity": round(min(purities, default=0.0), 3),
        "top3_are_the_gaps": found == set(case["topics"]),
        "labels": [g.label for g in top],
        "labels_name_the_product": any(product in g.label.lower() for g in report.groups),
    }
    print("  " + "  ".join(f"{k} {v}" for k, v in row.items()))
    return row


def top5_purity(report, truth: dict[int, str], language: str = "en") -> tuple[float, bool, int]:
    """(the lowest purity among the 5 largest groups, whether they are the 5 topics, groups)."""
    found, purities = set(), []
    for g in report.groups[:5]:
        labels = Counter(truth.get(i, "answerable") for i in g.ids)
        topic, n = labels.most_common(1)[0]
        purities.append(n / g.count)
        found.add(topic)
    return min(purities, default=0.0), found == set(topics(language)), len(report.groups)


def grow_audit(stores, rows: int, seed: int = 7) -> int:
    """Copy the audit's rows until it holds `rows`. Each copy is a distinct question to gaps (its
    own hash, its embedding moved by a little noise), the worst case: nothing repeats, so the
    leader method runs over every unanswered copy."""
    import hashlib

    import numpy as np
    from sqlalchemy import func, select

    rng = np.random.default_rng(seed)
    with stores.sql.session() as s:
        have = s.scalar(select(func.count()).select_from(LookupAuditRow))
        originals = s.scalars(select(LookupAuditRow)).all()
        columns = [c.key for c in LookupAuditRow.__table__.columns if c.key != "id"]
        template = [{c: getattr(r, c) for c in columns} for r in originals]
    n = 0
    with stores.sql.session() as s, s.begin():
        while have < rows:
            batch = []
            for row in template[: rows - have]:
                n += 1
                copy = {**row, "query_hash": hashlib.sha256(f"{n}".encode()).hexdigest()}
                if row["query_vector"] is not None:
                    v = np.frombuffer(row["query_vector"], dtype=np.float16).astype(np.float32)
                    v = v + rng.normal(0, 0.01, v.shape).astype(np.float32)
                    copy["query_vector"] = (v / np.linalg.norm(v)).astype(np.float16).tobytes()
                batch.append(copy)
            s.execute(LookupAuditRow.__table__.insert(), batch)
            have += len(batch)
    return have


def sweep(sql, embed, truth: dict[int, str], language: str, thresholds: list[float]) -> list[dict]:
    """Every method, centred or not, at every threshold; last, the default (auto, its threshold)."""
    runs = [(m, c, t) for m in ("average", "leader", "two-stage") for c in (True, False) for t in thresholds]
    rows = []
    for method, center, threshold in [*runs, (DEFAULT_METHOD, True, None)]:
        started = time.perf_counter()
        report = knowledge_gaps(
            sql, embed, since=timedelta(days=1), method=method, threshold=threshold, center=center
        )
        purity, five, groups = top5_purity(report, truth, language)
        rows.append(
            {
                "language": language,
                "method": method,
                "centred": center,
                "threshold": threshold,
                "top5_min_purity": round(purity, 3),
                "top5_are_the_topics": five,
                "groups": groups,
                "unanswered": report.unanswered,
                "seconds": round(time.perf_counter() - started, 2),
            }
        )
        print("  " + "  ".join(f"{k} {v}" for k, v in rows[-1].items()))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--answerable", type=int, default=250)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--languages", default="en,zh")
    ap.add_argument("--thresholds", default="0.15,0.2,0.25,0.3,0.35,0.4")
    args = ap.parse_args()
    thresholds = [float(x) for x in args.thresholds.split(",")]
    rows, singles, big, seconds, total = [], [], None, 0.0, 0
    for language in args.languages.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"kbflow-gaps-bench-{language}-"))
        settings = Settings(home=work / "home")
        summary = reindex([seeded_corpus(work / "corpus", language)], settings=settings)
        assert summary.ok, summary.failed
        stores = open_stores(settings)
        t = time.perf_counter()
        truth, _ = seeded_audit(settings, language, args.answerable, args.repeats)
        print(f"[{language}] seeded audit: {len(truth)} lookups in {time.perf_counter() - t:.1f} s")
        embed = model_embedder(settings)
        rows += sweep(stores.sql, embed, truth, language, thresholds)
        single_truth = single_product_audit(settings, language, args.repeats)
        singles.append(single_product_row(stores.sql, embed, single_truth, language))
        if language == args.languages.split(",")[0]:
            total = grow_audit(stores, args.rows)
            started = time.perf_counter()
            big = knowledge_gaps(stores.sql, embed, since=timedelta(days=1))
            seconds = time.perf_counter() - started
            print(f"{total} audit rows ({big.unanswered} unanswered, each distinct): gaps in {seconds:.1f} s")
        close_all()
    defaults = [r for r in rows if r["method"] == DEFAULT_METHOD]
    out = {
        "bench": "gaps",
        "metrics": {
            "seeded": rows,
            "single_product": singles,
            "rows": total,
            "unanswered": big.unanswered if big else 0,
        },
        "ratios": {
            "seconds_over_target": round(seconds / 30, 3),
            **{f"default_top5_min_purity_{r['language']}": r["top5_min_purity"] for r in defaults},
            **{f"single_product_top3_min_purity_{r['language']}": r["top3_min_purity"] for r in singles},
        },
        "targets": {
            "seconds": "< 30 at 100k rows",
            "top5_min_purity": ">= 0.8",
            "top5_are_the_topics": True,
            "single_product": "top 3 groups the 3 gaps, purity >= 0.75, no label names the product",
        },
    }
    print(json.dumps(out, ensure_ascii=False))
    ok = seconds < 30 and all(r["top5_min_purity"] >= 0.8 and r["top5_are_the_topics"] for r in defaults)
    ok = ok and all(
        r["top3_min_purity"] >= 0.75 and r["top3_are_the_gaps"] and not r["labels_name_the_product"]
        for r in singles
    )
    return 0 if ok and defaults else 1


if __name__ == "__main__":
    sys.exit(main())
