"""Which signals should the level model read? Each candidate set, fitted and judged on scopes it
has never seen.

For every question of the trust set (`eval/trust/`) and the golden cases, the first piece of
evidence of the real lookup gives the signals the lookup computes (quality, cosine, coverage,
and the level model's specific, support, unknown and salient) plus one it does not:
`centred`, the cosine of query and chunk after removing the scope's mean chunk vector (the
direction every text of a single-product scope shares: the multilingual model gives every
Chinese text a cosine of 0.82-0.96).

Each signal set is fitted as the level model is (`calibration/levels.py`, positives: answerable
questions whose first evidence answers them) and judged leave-one-scope-out on the trust scopes,
the golden cases always in the training data, per model (English: all-MiniLM-L6-v2; Chinese:
multilingual-e5-small). Reported: answerable right at REFERENCE or better, weak only, and
near-domain questions answered with confidence.

    python bench/trust_signals.py [--home bench/.work/trust]

Uses the home `bench/trust.py` builds (run that first). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from kbflow.calibration.levels import _fit  # noqa: E402
from kbflow.calibration.self_calibration import scope_chunks  # noqa: E402
from kbflow.core.models import base_model_id  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402
from kbflow.core.stores import query_threads  # noqa: E402
from kbflow.evaluation.trust import load_questions, load_scopes  # noqa: E402
from kbflow.retrieval.calibration import PACKAGED, packaged_default  # noqa: E402
from kbflow.retrieval.lookup import get_retriever, lookup_knowledge  # noqa: E402

SETS = {
    "quality alone (levels before)": ("quality",),
    "cosine + coverage": ("cosine", "coverage"),
    "quality + salient": ("quality", "salient"),
    "quality + centred": ("quality", "centred"),
    "quality + centred + salient": ("quality", "centred", "salient"),
    "quality + specific + unknown": ("quality", "specific", "unknown"),
    "quality + support + unknown": ("quality", "support", "unknown"),
    "quality + specific + support + unknown": ("quality", "specific", "support", "unknown"),
    "the level model: quality + specific + support + unknown + salient": (
        "quality", "specific", "support", "unknown", "salient"),
    "the level model + centred": ("quality", "specific", "support", "unknown", "salient", "centred"),
}


class Scopes:
    """Per scope, once: its mean chunk vector."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self._mean = settings, {}

    def mean(self, scope: str) -> np.ndarray:
        if scope not in self._mean:
            vecs = np.array([c.dense for c in scope_chunks(self.settings, scope)], dtype=np.float32)
            self._mean[scope] = vecs.mean(axis=0)
        return self._mean[scope]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


def sample(settings: Settings, scopes: Scopes, query: str, kb_scope: str, expected: set[str]) -> dict | None:
    """The first piece of evidence's signals, or None when the lookup found none."""
    r = lookup_knowledge(query, kb_scope=kb_scope, settings=settings, caller="eval")
    if not r.found:
        return None
    first = r.evidence[0]
    ranked = r.candidates[r.retrieval_trace.selected_attempt]
    hit = next(h for h in ranked if h.evidence_key == first.evidence_key)
    model = r.retrieval_trace.models[kb_scope]
    qv = get_retriever(settings)._embedder(model).encode_queries([query], query_threads(settings))[0]
    mean = scopes.mean(kb_scope)
    centred = float(_unit(qv - mean) @ _unit(np.asarray(hit.vector, dtype=np.float32) - mean))
    return {"quality": first.quality_score, **first.signals, "centred": centred,
            "right": first.source in expected, "model": base_model_id(model)}


def collect(settings: Settings) -> list[dict[str, Any]]:
    from kbflow.evaluation.cases import load_cases
    from kbflow.evaluation.runner import EVAL_ROOT

    scopes, out = Scopes(settings), []
    trust = load_scopes()
    for q in load_questions(trust):
        s = sample(settings, scopes, q.query, trust[q.scope].kb_scope, set(q.expected))
        out.append({"group": q.scope, "kind": q.kind, "s": s})
    for c in load_cases(EVAL_ROOT / "cases" / "golden-cases.json"):
        s = sample(settings, scopes, c.query, c.kb_scope, set(c.expected_doc_ids))
        kind = "answerable" if c.expected_doc_ids else (c.negative or "off")
        out.append({"group": "golden", "kind": kind, "s": s})
    return out


def _confident(w: np.ndarray, feats: tuple[str, ...], s: dict | None) -> bool:
    if s is None:
        return False
    z = w[0] + sum(wi * s.get(f, 0.0) for wi, f in zip(w[1:], feats, strict=True))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z)))) >= 0.5


def _fit_set(rows: list[dict], feats: tuple[str, ...]) -> np.ndarray:
    answered = [r for r in rows if r["s"] is not None]
    x = np.array([[r["s"].get(f, 0.0) for f in feats] for r in answered])
    y = np.array([1.0 if r["kind"] == "answerable" and r["s"]["right"] else 0.0 for r in answered])
    return _fit(x, y, None, 1e-2)


def rates(rows: list[dict], flags: list[bool]) -> dict[str, float]:
    ans = [(r, f) for r, f in zip(rows, flags, strict=True) if r["kind"] == "answerable"]
    near = [f for r, f in zip(rows, flags, strict=True) if r["kind"] == "near"]
    return {
        "right": round(sum(f and r["s"]["right"] for r, f in ans) / len(ans), 3),
        "weak_only": round(sum(r["s"] is not None and not f for r, f in ans) / len(ans), 3),
        "near_confident": round(sum(near) / len(near), 3),
    }


def loso(rows: list[dict], feats: tuple[str, ...]) -> dict[str, float]:
    trust = [r for r in rows if r["group"] != "golden"]
    golden = [r for r in rows if r["group"] == "golden"]
    ordered, flags = [], []
    for g in sorted({r["group"] for r in trust}):
        w = _fit_set([r for r in trust if r["group"] != g] + golden, feats)
        test = [r for r in trust if r["group"] == g]
        ordered += test
        flags += [_confident(w, feats, r["s"]) for r in test]
    return rates(ordered, flags)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=REPO / "bench" / ".work" / "trust")
    args = ap.parse_args(argv)
    settings = Settings(home=args.home)
    rows = collect(settings)
    by_model: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["s"] is not None:
            by_model[r["s"]["model"]].append(r)
    for r in rows:  # a refused question belongs to its scope's model: the model of its scope's others
        if r["s"] is None:
            peers = [p for p in rows if p["group"] == r["group"] and p["s"] is not None]
            if peers:
                by_model[peers[0]["s"]["model"]].append(r)
    metrics: dict[str, Any] = {}
    for base in PACKAGED:
        if base not in by_model or packaged_default(base) is None:
            continue
        print(f"\n### {base}: leave-one-scope-out on the trust scopes\n")
        print("| signals | right ≥REF | weak-only | near confident |\n|---|---:|---:|---:|")
        for name, feats in SETS.items():
            r = loso(by_model[base], feats)
            metrics[f"{base.rsplit('/', 1)[-1]}: {name}"] = r
            print(f"| {name} | {100 * r['right']:.0f} % | {100 * r['weak_only']:.0f} % | "
                  f"{100 * r['near_confident']:.0f} % |")
    line = {"bench": "trust_signals", "metrics": metrics, "ratios": {}, "targets": {}}
    print(json.dumps(line, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
