"""Labelled queries for `kbflow eval calibrate`, and how the result is shown.

Queries come from the golden cases (answerable ones name their documents; unanswerable ones say
`near` or `off`) and from a BEIR dataset (qrels) plus negative queries. Each query runs through
the real lookup; what is kept is its candidates' gate signals and whether each is relevant.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbflow.calibration.calibrate import CalibrationResult, LabelledQuery
from kbflow.calibration.labels import Signals, labelled_hits, own_signals, selected_hits
from kbflow.core.settings import Settings
from kbflow.retrieval.gate import Calibration


def golden_queries(
    settings: Settings, depth: int, cases_path: Path | None = None, signals: Signals = own_signals
) -> list[LabelledQuery]:
    """The golden cases of scopes whose quality comes from the dense model (not lexical): the
    packaged ones (their scopes reseeded from seed-docs/ first), or a user's own `cases_path`,
    asked of the scopes as they are indexed."""
    from kbflow.evaluation.cases import load_cases
    from kbflow.evaluation.runner import EVAL_ROOT, seed_scopes
    from kbflow.retrieval.lookup import lookup_knowledge

    cases = load_cases(cases_path or EVAL_ROOT / "cases" / "golden-cases.json")
    if cases_path is None:
        seed_scopes(settings, sorted({c.kb_scope for c in cases}))
    out = []
    for case in cases:
        r = lookup_knowledge(
            case.query, kb_scope=case.kb_scope, mode="hybrid", settings=settings, depth=depth, caller="eval"
        )
        hits = selected_hits(r)
        if any(h.quality_signal == "lexical" for h in hits):
            continue
        kind = "answerable" if case.expected_doc_ids else (case.negative or "off")
        expected = set(case.expected_doc_ids)
        relevant = lambda h, expected=expected: h.doc_id in expected  # noqa: E731
        hits = labelled_hits(case.query, hits, relevant, case.kb_scope, signals=signals)
        model = r.retrieval_trace.models.get(case.kb_scope, "")
        out.append(LabelledQuery(case.id, "golden", kind, hits, model))
    return out


def beir_queries(
    root: Path,
    scope: str,
    settings: Settings,
    depth: int,
    negatives: dict[str, tuple[str, str]],
    signals: Signals = own_signals,
) -> list[LabelledQuery]:
    """A BEIR dataset's judged queries (answerable) plus negatives, through the real lookup."""
    from kbflow.evaluation.beir import ingest_beir, load_beir, run_lookups

    mapping, _summary = ingest_beir(root, scope, settings)
    _corpus, queries, qrels = load_beir(root)
    judged = {q: queries[q] for q in qrels if q in queries}
    texts = {**judged, **{q: t for q, (t, _k) in negatives.items()}}
    results = run_lookups(texts, scope, settings, "hybrid", depth, f"calibrate {scope}")
    out = []
    for qid, r in results.items():
        rel = qrels.get(qid, {})
        kind = "answerable" if qid in judged else negatives[qid][1]
        relevant = lambda h, rel=rel: mapping.get(h.doc_id, h.doc_id) in rel  # noqa: E731
        hits = labelled_hits(texts[qid], selected_hits(r), relevant, scope, signals=signals)
        model = r.retrieval_trace.models.get(scope, "")
        name = root.name if root.name != "beir" else root.parent.name
        out.append(LabelledQuery(qid, name, kind, hits, model))
    return out


def render(result: CalibrationResult) -> str:
    """The distributions side by side, the chosen thresholds and what they achieve, in words."""
    cal, rates = result.calibration, result.rates
    lines = ["gate signals of each query's best candidate (answerable | near-domain | off-domain):", ""]
    lines.append(
        f"{'signal':9s} {'kind':10s} {'n':>4s} {'min':>6s} {'p10':>6s} {'median':>6s} {'p90':>6s} {'max':>6s}"
    )
    for signal, by_kind in result.distributions.items():
        for kind, q in by_kind.items():
            if q:
                lines.append(
                    f"{signal:9s} {kind:10s} {q['n']:>4d} {q['min']:>6.3f} {q['p10']:>6.3f} "
                    f"{q['median']:>6.3f} {q['p90']:>6.3f} {q['max']:>6.3f}"
                )
    terms = " ".join(f"{v:+.3f}*{k}" for k, v in cal.weights.items() if k != "bias")
    lines += [
        "",
        f"model: quality = sigmoid({cal.weights.get('bias', 0):+.3f} {terms})",
        f"thresholds: usable floor {cal.floor:.3f}, reference {cal.reference:.3f}, precise {cal.precise:.3f}",
        f"objective: {rates['objective']}",
        f"false no-evidence on answerable: {_pct(rates['false_no_evidence_rate'])} of {rates['answerable']}",
        *(
            f"true no-evidence {kind}-domain: {_pct(rates.get(f'true_no_evidence_rate_{kind}'))} "
            f"of {rates.get(kind, 0)}"
            for kind in ("near", "off")
        ),
        f"top-1 precision at reference: {_pct(rates['top1_precision_at_reference'])}, "
        f"at precise: {_pct(rates['top1_precision_at_precise'])}",
    ]
    if not rates["objective_met"]:
        lines.append("the objective cannot be met on this data: no floor keeps false no-evidence <= 2 %")
    lines += _levels_lines(cal)
    return "\n".join(lines)


def _levels_lines(cal: Calibration) -> list[str]:
    if not cal.levels.get("rates"):
        return ["levels: the packaged level model of the model (these lookups could not teach one)"]
    w, r = cal.levels["weights"], cal.levels["rates"]
    terms = " ".join(f"{v:+.3f}*{k}" for k, v in w.items() if k != "bias")
    return [
        f"level model: confidence = sigmoid({w.get('bias', 0):+.3f} {terms}) (fitted towards the packaged "
        "one); REFERENCE at confidence 0.5, PRECISE at 0.8",
        f"answerable right at REFERENCE or better: {_pct(r['right_at_reference'])}, weak only: "
        f"{_pct(r['weak_only'])}; near-domain answered with confidence: {_pct(r['near_confident'])}, "
        f"off-domain: {_pct(r['off_confident'])}",
    ]


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


Fitted = tuple[CalibrationResult, Sequence[LabelledQuery]]


def write_chart(results: Sequence[Fitted], path: Path, pool: int) -> None:
    """One row per model (so an English and a multilingual model sit one above the other).
    Left: each query's best candidate in (cosine, coverage) by kind, with the floor's line.
    Right: histograms of the query quality by kind, with the three thresholds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(12, 5 * len(results)), squeeze=False)
    for (result, queries), (ax1, ax2) in zip(results, axes, strict=True):
        _chart_row(result, queries, pool, ax1, ax2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _chart_row(result: CalibrationResult, queries: Sequence[LabelledQuery], pool: int, ax1: Any, ax2: Any):
    import numpy as np

    from kbflow.calibration.calibrate import query_score
    from kbflow.core.models import short_name

    cal = result.calibration
    colours = {"answerable": "tab:green", "near": "tab:orange", "off": "tab:red"}
    for kind, colour in colours.items():
        group = [q for q in queries if q.kind == kind and q.hits]
        best = [max(q.hits[:pool], key=lambda h: cal.quality(h[0]))[0] for q in group]
        ax1.scatter(
            [b["cosine"] for b in best], [b["coverage"] for b in best], s=12, c=colour, label=kind, alpha=0.7
        )
        scores = [query_score(cal, q, pool) for q in group]
        ax2.hist(scores, bins=20, range=(0, 1), alpha=0.5, color=colour, label=kind)
    _floor_line(ax1, cal, np)
    name = short_name(cal.model_id) if cal.model_id else "model"
    ax1.set_title(f"{name}: best candidate of each query")
    ax1.set_xlabel("cosine")
    ax1.set_ylabel("query-term coverage")
    ax1.legend()
    for value, label in ((cal.floor, "floor"), (cal.reference, "reference"), (cal.precise, "precise")):
        ax2.axvline(value, linestyle="--", color="black")
        ax2.text(value, ax2.get_ylim()[1] * 0.9, label, rotation=90)
    ax2.set_title(f"{name}: gate quality by kind of query")
    ax2.set_xlabel("gate quality of the best candidate")
    ax2.legend()


def _floor_line(ax: Any, cal: Calibration, np: Any) -> None:
    w = cal.weights
    if cal.kind != "logistic" or not w.get("coverage"):
        return
    z = np.log(cal.floor / (1 - cal.floor)) if 0 < cal.floor < 1 else 0.0
    xs = np.linspace(0, 1, 50)
    ax.plot(xs, (z - w["bias"] - w["cosine"] * xs) / w["coverage"], "k--", label="usable floor")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.05, 1.05)


def collect(args: Any, settings: Settings, depth: int) -> tuple[list[LabelledQuery], list[str]]:
    queries: list[LabelledQuery] = []
    sources: list[str] = []
    if args.golden:
        own = Path(args.cases) if getattr(args, "cases", None) else None
        queries += golden_queries(settings, depth, own)
        sources.append(f"the golden cases of {own}" if own else "the golden cases")
    if args.beir:
        from kbflow.evaluation.beir import load_negatives, negatives_from

        negatives: dict[str, tuple[str, str]] = {}
        if args.negatives:
            negatives.update(load_negatives(Path(args.negatives)))
        if args.negatives_from:
            negatives.update(negatives_from(Path(args.negatives_from)))
        queries += beir_queries(Path(args.beir), args.scope, settings, depth, negatives)
        name = Path(args.beir).name if Path(args.beir).name != "beir" else Path(args.beir).parent.name
        sources.append(f"BEIR {name} ({len(negatives)} negatives)")
    if getattr(args, "self_pairs", False):
        from kbflow.calibration.self_calibration import run_pairs, self_asked

        asked = self_asked(settings, args.scope, args.max_docs)
        print(f"asking {len(asked)} pseudo-queries from scope {args.scope}, with and without their "
              "document …", file=sys.stderr)
        queries += run_pairs(asked, settings, depth)
        sources.append(f"self: {len(asked)} pseudo-queries from scope {args.scope}")
    return queries, sources


def by_model(queries: Sequence[LabelledQuery], wanted: str | None) -> dict[str, list[LabelledQuery]]:
    """The queries grouped by the model that embedded them: a calibration belongs to one model.
    `wanted` (a model name) keeps only that model's queries."""
    from kbflow.core.models import base_model_id, resolve_model

    keep = base_model_id(resolve_model(wanted).model_id) if wanted else None
    groups: dict[str, list[LabelledQuery]] = {}
    for q in queries:
        if keep is None or base_model_id(q.model_id) == keep:
            groups.setdefault(q.model_id, []).append(q)
    return dict(sorted(groups.items()))


SELF_MIN_DOCUMENTS = 2


def calibrate_command(args: Any, settings: Settings) -> int:
    """`kbflow eval calibrate`: one calibration per model the queries were embedded with; exit 0
    when each meets the objective, 1 when one cannot, 2 on bad input."""
    from kbflow.calibration.calibrate import calibrate

    refused = _refusal(args, settings)
    if refused:
        print(f"kbflow: error: {refused}", file=sys.stderr)
        return 2
    pool, self_pairs = settings.retrieve_k, getattr(args, "self_pairs", False)
    try:
        queries, sources = collect(args, settings, pool)
    except ValueError as exc:  # e.g. --self on a scope that is not indexed
        print(f"kbflow: error: {exc}", file=sys.stderr)
        return 2
    groups = by_model(queries, getattr(args, "model", None))
    export = getattr(args, "export", None)
    if export and len(groups) != 1:
        names = ", ".join(groups) or "none"
        print(f"kbflow: error: --export writes one model's calibration; the queries used {names}: "
              "choose one with --model NAME", file=sys.stderr)
        return 2
    from kbflow.calibration.recipe import Recipe

    recipe = Recipe.from_args(args)
    # exported, a calibration is a default for any scope of the model
    scope = "*" if export or not args.scope else args.scope
    results = []
    for model_id, group in groups.items():
        result = calibrate(
            group, model_id=model_id, kb_scope=scope, pool=pool, source=" + ".join(sources),
            features=recipe.features, origin=recipe.origin,
        )
        if not self_pairs:  # pseudo-queries are lifted from their documents: they would teach levels wrong
            result = with_levels(result, group, " + ".join(sources), scope_size(settings, args.scope))
        print(f"== {model_id}: {len(group)} queries ==\n{render(result)}\n")
        if self_pairs:
            print(gate_in_use(settings, args.scope, group, pool) + "\n")
        results.append((result, group))
    _save(args, settings, results, pool)
    return 0 if all(r.rates["objective_met"] for r, _ in results) else 1


def _refusal(args: Any, settings: Settings) -> str | None:
    """Why these arguments cannot calibrate (exit 2), or None."""
    self_pairs = getattr(args, "self_pairs", False)
    if not (args.golden or args.beir or self_pairs):
        return "give --golden, --beir DIR --scope S, --self --scope S, or several"
    if self_pairs and not args.scope:
        return "--self needs --scope S (the scope whose documents make the queries)"
    if args.beir and not args.scope:
        return "--beir needs --scope S (the scope the dataset is ingested into)"
    size = scope_size(settings, args.scope) if self_pairs else None
    if self_pairs and not size:
        return f"scope {args.scope!r} is not indexed: run `kbflow reindex` first"
    if self_pairs and size < SELF_MIN_DOCUMENTS:
        return (f"scope {args.scope} has {size} indexed document(s); --self needs at least "
                f"{SELF_MIN_DOCUMENTS}: each pseudo-query is also asked with its document left out, which "
                "must leave other documents to find. Label questions instead: `kbflow eval calibrate "
                "--golden --cases FILE --scope S`")
    return None


def scope_size(settings: Settings, scope: str | None) -> int | None:
    """The scope's indexed documents (None without a scope)."""
    if not scope:
        return None
    from sqlalchemy import func, select

    from kbflow.core.sql import DocumentRow
    from kbflow.core.stores import open_stores

    with open_stores(settings).sql.session() as session:
        return session.scalar(select(func.count()).where(DocumentRow.kb_scope == scope))


def with_levels(
    result: CalibrationResult, queries: Sequence[LabelledQuery], source: str, documents: int | None = None
) -> CalibrationResult:
    """The result with a level model fitted on the same lookups (towards the packaged one of the
    model), when they can teach one; else the calibration borrows the packaged level model.
    `documents`: the size of the scope it is fitted for, which it then counts as seen."""
    from kbflow.calibration.levels import fit_for
    from kbflow.core.models import base_model_id
    from kbflow.retrieval.calibration import packaged_default

    cal = result.calibration
    packaged = packaged_default(base_model_id(cal.model_id))
    levels = fit_for(queries, cal, source, packaged.levels if packaged else None)
    if levels is None:
        return result
    if documents is not None:
        span = (packaged.levels.get("scope_documents") if packaged else None) or [documents, documents]
        levels["scope_documents"] = [min(span[0], documents), max(span[1], documents)]
    result.calibration = Calibration.from_dict({**cal.to_dict(), "levels": levels})
    return result


def gate_in_use(settings: Settings, scope: str, queries: Sequence[LabelledQuery], pool: int) -> str:
    """What the calibration the scope's lookups use now does on its self pairs: no labels needed,
    and on the golden corpus the leave-out twins' refusal rate tracked the real near-domain one
    (README, Answerability)."""
    from kbflow.calibration.calibrate import achieved
    from kbflow.core.stores import open_stores
    from kbflow.retrieval.calibration import resolve

    cal = resolve(open_stores(settings).sql, settings, queries[0].model_id, scope, lexical=False)
    rates = achieved(cal, queries, pool)
    return (
        f"the gate lookups in scope {scope} use now ({cal.label}):\n"
        f"  pseudo-queries answered \"no usable evidence\" (false): {_pct(rates['false_no_evidence_rate'])}\n"
        f"  their leave-out twins answered \"no usable evidence\" (expected near-domain refusal): "
        f"{_pct(rates.get('true_no_evidence_rate_near'))}"
    )


def _save(args: Any, settings: Settings, results: list[Fitted], pool: int) -> None:
    import json

    from kbflow.calibration.recipe import Recipe
    from kbflow.core.stores import open_stores
    from kbflow.retrieval import calibration

    if args.chart:
        write_chart(results, Path(args.chart), pool)
        print(f"chart: {args.chart}")
    export = getattr(args, "export", None)
    if export:
        data = results[0][0].to_dict()
        Path(export).write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"calibration written to {export}")
    store = args.store
    if store is None:  # a fit on self pairs alone is a diagnosis, not a gate (README, Answerability)
        store = not (getattr(args, "self_pairs", False) and not (args.golden or args.beir))
        if not store:
            print("not stored: fitted on pseudo-queries alone (on cosine: their coverage is 1 by "
                  "construction), such a gate refused 1.3-11.5 % of the real answerable questions of three "
                  "labelled sets and answered 44 % of the Chinese off-domain ones; --store uses it anyway")
    if store:
        for result, _ in results:
            cal = result.calibration
            # the recipe lets a rebuild of the scope fit it again (calibration/recalibrate.py)
            data = {**result.to_dict(), "recipe": Recipe.from_args(args).to_dict()}
            calibration.store(open_stores(settings).sql, cal, data)
            print(f"stored for model {cal.model_id}, scope {cal.kb_scope}: lookups there use it now")
