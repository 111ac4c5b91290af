"""Can a scope's gate be calibrated without labels? Synthetic pairs against real labels.

Indexes the golden corpus (English and Chinese scopes) and CACM, then fits the gate five ways
for each model and measures every fit on the real labelled queries (answerable, near-domain
and off-domain):

- packaged: the default shipped for the model;
- self: `kbflow eval calibrate --self` — pseudo-queries from the scope's own documents (title,
  heading, salient sentence, tf-idf keywords), each asked with its document and left out;
- labelled: the real labelled queries themselves (in-sample: the best case, not a forecast);
- labelled + leave-out: those plus each answerable query asked again with its answer left out;
- self + labelled.

It also reports how well the synthetic pairs predict the real rates: the near-domain refusal
rate of the left-out pseudo-queries against that of the real near-domain questions, under the
same calibration.

    python bench/answerability.py [--max-docs 60] [--home DIR]

Ends with one JSON line: {"bench": "answerability", "metrics": {...}, "ratios": {...}, "targets": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.signals import TriedSignals  # noqa: E402
from kbflow.calibration.calibrate import (  # noqa: E402
    LabelledQuery,
    achieved,
    calibrate,
    choose_floor,
    query_score,
)
from kbflow.calibration.calibration_data import beir_queries, golden_queries  # noqa: E402
from kbflow.calibration.recipe import SELF_FEATURES  # noqa: E402
from kbflow.calibration.self_calibration import (  # noqa: E402
    beir_asked,
    golden_asked,
    run_pairs,
    self_asked,
)
from kbflow.core.models import E5_MODEL_ID, base_model_id, short_name  # noqa: E402
from kbflow.core.settings import Settings  # noqa: E402
from kbflow.evaluation.beir import load_negatives  # noqa: E402
from kbflow.retrieval.calibration import packaged_default  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACM = REPO.parent / "shared" / "data" / "cacm" / "beir"
CACM_NEGATIVES = REPO / "eval" / "negatives" / "cacm-negatives.jsonl"
# (set name, the scopes its self pairs come from)
SETS = {"golden-en": ["rag-eval"], "golden-zh": ["rag-eval-zh"], "cacm": ["cacm"]}


def rates(cal, queries: list[LabelledQuery], pool: int) -> dict[str, float | None]:
    r = achieved(cal, queries, pool)
    return {
        "false no-ev": r["false_no_evidence_rate"],
        "near refused": r.get("true_no_evidence_rate_near"),
        "off refused": r.get("true_no_evidence_rate_off"),
    }


def real_sets(settings: Settings, pool: int, tried: TriedSignals) -> dict[str, list[LabelledQuery]]:
    golden = golden_queries(settings, pool, signals=tried)
    zh = [q for q in golden if base_model_id(q.model_id) == E5_MODEL_ID]
    en = [q for q in golden if base_model_id(q.model_id) != E5_MODEL_ID]
    out = {"golden-en": en, "golden-zh": zh}
    if CACM.exists():
        out["cacm"] = beir_queries(CACM, "cacm", settings, pool, load_negatives(CACM_NEGATIVES), tried)
    return out


def leave_out_sets(
    settings: Settings, pool: int, real: dict, tried: TriedSignals
) -> dict[str, list[LabelledQuery]]:
    golden = run_pairs(golden_asked(), settings, pool, with_answer=False, signals=tried)
    by_model = {name: {q.model_id for q in qs} for name, qs in real.items()}
    out = {name: [q for q in golden if q.model_id in by_model[name]] for name in ("golden-en", "golden-zh")}
    if "cacm" in real:
        out["cacm"] = run_pairs(beir_asked(CACM, "cacm"), settings, pool, with_answer=False, signals=tried)
    return out


CACHE_VERSION = 2  # raised whenever calibration data carries new signals: an older cache lacks them
BASE = ("cosine", "coverage")
# candidate signals tried beside the two the gate has used (retrieval/gate.py, list_signals)
FEATURE_SETS = {
    "cosine alone": ("cosine",),
    "cosine + coverage": BASE,
    "+ unmatched": (*BASE, "unmatched"),
    "+ margin": (*BASE, "margin"),
    "+ agreement": (*BASE, "agreement"),
    "+ novel": (*BASE, "novel"),
    "+ novel + margin": (*BASE, "novel", "margin"),
    "+ all four": (*BASE, "unmatched", "margin", "agreement", "novel"),
    # with the scope's vocabulary (bench/signals.py, Vocabulary)
    "+ salient": (*BASE, "salient"),
    "salient instead of coverage": ("cosine", "salient"),
    "+ absent": (*BASE, "absent"),
    "+ specificity": (*BASE, "specificity"),
    "+ bm25": (*BASE, "bm25"),
    "+ spread": (*BASE, "spread"),
}


def collect_all(
    settings: Settings, pool: int, max_docs: int, cache: Path
) -> dict[str, tuple[list, list, list]]:
    """{set: (real, self pairs, leave-out twins)}, from the lookups, or from `cache` when an
    earlier run of the same home and --max-docs wrote it (the lookups take minutes)."""
    if cache.exists():
        raw = json.loads(cache.read_text("utf-8"))
        return {
            name: tuple([LabelledQuery(**q) for q in part] for part in parts) for name, parts in raw.items()
        }
    tried = TriedSignals(settings)  # calibration data with the tried signals (bench/signals.py)
    real = real_sets(settings, pool, tried)
    leave = leave_out_sets(settings, pool, real, tried)
    out = {}
    for name, scopes in SETS.items():
        if name in real:
            asked = [a for s in scopes for a in self_asked(settings, s, max_docs)]
            synth = run_pairs(asked, settings, pool, signals=tried)
            out[name] = (real[name], synth, leave[name])
    cache.write_text(
        json.dumps({n: [[asdict(q) for q in part] for part in parts] for n, parts in out.items()})
    )
    return out


def fit(queries: list[LabelledQuery], model_id: str, pool: int, source: str, features=BASE):
    return calibrate(
        queries, model_id=model_id, kb_scope="*", pool=pool, source=source, features=features
    ).calibration


def feature_table(real, synth, leave, pool: int) -> dict[str, dict]:
    """Each feature set fitted two ways — on the self pairs alone (no labels) and on the labelled
    queries plus their leave-out twins — and measured on the real labelled queries."""
    model_id = real[0].model_id
    out = {}
    print("\n| signals | fitted on | false no-ev | near refused | off refused |\n|---|---|---:|---:|---:|")
    for name, features in FEATURE_SETS.items():
        for fitted_on, data in (("self", synth), ("labelled + leave-out", real + leave)):
            r = rates(fit(data, model_id, pool, fitted_on, features), real, pool)
            out[f"{name} / {fitted_on}"] = r
            print(f"| {name} | {fitted_on} | " + " | ".join(_fmt(v) for v in r.values()) + " |")
    return out


def measure(name: str, real, synth, leave, pool: int) -> tuple[list[tuple[str, dict]], dict]:
    model_id = real[0].model_id
    cals = {
        "packaged": packaged_default(base_model_id(model_id)),
        "self": fit(synth, model_id, pool, "self", SELF_FEATURES),  # what `--self` fits
        "labelled (in-sample)": fit(real, model_id, pool, "labelled"),
        "labelled + leave-out": fit(real + leave, model_id, pool, "labelled + leave-out"),
        "self + labelled": fit(synth + real, model_id, pool, "self + labelled"),
    }
    rows = [(label, rates(cal, real, pool)) for label, cal in cals.items()]
    real_near = [q for q in real if q.kind == "near"]
    forecast = {}
    for label in ("packaged", "self"):
        cal = cals[label]
        forecast[label] = {
            "synthetic near refused": achieved(cal, synth, pool)["true_no_evidence_rate_near"],
            "leave-out near refused": achieved(cal, leave, pool)["true_no_evidence_rate_near"],
            "real near refused": achieved(cal, real_near, pool)["true_no_evidence_rate_near"],
            "synthetic false no-ev": achieved(cal, synth, pool)["false_no_evidence_rate"],
            "real false no-ev": achieved(cal, real, pool)["false_no_evidence_rate"],
        }
    print(
        f"\n### {name} ({short_name(model_id)}): {sum(q.answerable for q in real)} answerable, "
        f"{len(real_near)} near, {sum(q.kind == 'off' for q in real)} off; "
        f"{len(synth) // 2} pseudo-queries, {len(leave)} leave-out twins\n"
    )
    print("| calibration | false no-ev | near refused | off refused |\n|---|---:|---:|---:|")
    for label, r in rows:
        print(f"| {label} | " + " | ".join(_fmt(v) for v in r.values()) + " |")
    print("\nforecast (does the synthetic set predict the real one?):")
    for label, f in forecast.items():
        print(f"- {label}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in f.items()))
    forecast["floor"] = floor_transfer(cals["packaged"], real, synth, pool)
    return rows, forecast


def floor_transfer(cal, real, synth, pool: int) -> dict[str, float]:
    """Could the self pairs have found the floor? Under the packaged weights: the floor the real
    answerable questions call for (<= 2 % refused) and the share of each synthetic half below it.
    A share that differs from scope to scope is a floor no label-free rule can place."""
    right = choose_floor([query_score(cal, q, pool) for q in real if q.answerable])

    def below(kind: str) -> float:
        scores = [query_score(cal, q, pool) for q in synth if q.kind == kind]
        return round(sum(s < right for s in scores) / len(scores), 4) if scores else 0.0

    out = {"packaged floor": cal.floor, "floor the real questions call for": right,
           "pseudo-queries below it": below("answerable"), "their leave-out twins below it": below("near")}
    print("- floor: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()))
    return out


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-docs", type=int, default=60, help="documents per scope that give pseudo-queries")
    ap.add_argument("--home", help="state directory (default: a fresh temporary one)")
    args = ap.parse_args()
    settings = Settings(home=Path(args.home or tempfile.mkdtemp(prefix="kbflow-answerability-")))
    pool = settings.retrieve_k
    t0 = time.perf_counter()
    cache = settings.home / f"answerability-{args.max_docs}-v{CACHE_VERSION}.json"
    data = collect_all(settings, pool, args.max_docs, cache)
    metrics: dict = {}
    for name, (real, synth, leave) in data.items():
        rows, forecast = measure(name, real, synth, leave, pool)
        features = feature_table(real, synth, leave, pool)
        metrics[name] = {"rates": dict(rows), "forecast": forecast, "features": features}
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    ratios = {
        f"{name}_self_near_refused_over_packaged": _ratio(
            m["rates"]["self"]["near refused"], m["rates"]["packaged"]["near refused"]
        )
        for name, m in metrics.items()
    }
    targets = {
        "golden_false_no_evidence": "<= 0.02",
        "golden_near_refused": ">= 0.6",
        "off_refused": ">= 0.95",
    }
    print(json.dumps({"bench": "answerability", "metrics": metrics, "ratios": ratios, "targets": targets}))
    return 0


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


if __name__ == "__main__":
    sys.exit(main())
