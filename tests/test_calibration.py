"""The gate's calibration: fitted on labelled queries, stored per (model, scope), used by lookups."""

from __future__ import annotations

import random

import pytest

from kbflow.calibration.calibrate import (
    MAX_FALSE_NO_EVIDENCE,
    LabelledQuery,
    achieved,
    calibrate,
    choose_floor,
    queries_from_samples,
)
from kbflow.core.embedder import DEFAULT_MODEL_ID
from kbflow.core.settings import Settings
from kbflow.core.stores import open_stores
from kbflow.retrieval import calibration
from kbflow.retrieval.gate import Calibration


def labelled(seed: int = 7) -> list[LabelledQuery]:
    """Answerable queries: the relevant chunk first, with a high cosine or a high coverage;
    unanswerable ones: only weak candidates. Near-domain ones sit in between."""
    rng = random.Random(seed)
    out = []
    for i in range(100):
        good = {"cosine": rng.uniform(0.35, 0.9), "coverage": rng.uniform(0.3, 1.0)}
        rest = [({"cosine": rng.uniform(0.1, 0.4), "coverage": rng.uniform(0, 0.3)}, False) for _ in range(6)]
        out.append(LabelledQuery(f"a{i}", "toy", "answerable", [(good, True), *rest]))
    for i in range(40):
        kind = "near" if i % 2 else "off"
        hi = 0.5 if kind == "near" else 0.3
        hits = [({"cosine": rng.uniform(0.05, hi), "coverage": rng.uniform(0, hi)}, False) for _ in range(7)]
        out.append(LabelledQuery(f"n{i}", "toy", kind, hits))
    return out


def test_choose_floor_keeps_the_false_no_evidence_budget():
    scores = [i / 100 for i in range(100)]
    floor = choose_floor(scores)
    assert sum(s < floor for s in scores) <= MAX_FALSE_NO_EVIDENCE * len(scores)
    assert sum(s < floor + 0.011 for s in scores) > MAX_FALSE_NO_EVIDENCE * len(scores)  # the highest such


def test_calibration_on_a_small_labelled_set_meets_the_objective():
    queries = labelled()
    res = calibrate(queries, model_id="m", kb_scope="s", pool=20, source="toy")
    cal, rates = res.calibration, res.rates
    assert cal.kind == "logistic" and cal.weights["cosine"] > 0 and cal.weights["coverage"] > 0
    assert cal.floor <= cal.reference <= cal.precise
    assert rates["objective_met"] and rates["false_no_evidence_rate"] <= MAX_FALSE_NO_EVIDENCE
    assert rates["true_no_evidence_rate_off"] >= 0.95  # off-domain candidates are all weak here
    assert rates["true_no_evidence_rate_near"] is not None
    # the distributions are reported side by side per kind, for each signal and the quality
    assert set(res.distributions["cosine"]) == {"answerable", "near", "off"}
    # the stored samples reproduce the same rates
    again = achieved(cal, queries_from_samples(res.samples), 20)
    assert again["false_no_evidence_rate"] == rates["false_no_evidence_rate"]


def test_calibration_says_when_the_objective_cannot_be_met():
    # answerable queries whose right chunk looks exactly like an off-domain one
    queries = [
        LabelledQuery(f"a{i}", "t", "answerable", [({"cosine": 0.2, "coverage": 0.0}, True)])
        for i in range(10)
    ]
    queries += [
        LabelledQuery(f"o{i}", "t", "off", [({"cosine": 0.2, "coverage": 0.0}, False)]) for i in range(10)
    ]
    res = calibrate(queries, model_id="m", kb_scope="s", pool=5, source="t")
    assert res.rates["false_no_evidence_rate"] == 0.0 and res.rates["true_no_evidence_rate_off"] == 0.0
    with pytest.raises(ValueError, match="relevant and irrelevant"):
        calibrate(queries[10:], model_id="m", kb_scope="s", pool=5, source="t")


def test_resolution_order_and_settings_override(tmp_path):
    settings = Settings(home=tmp_path / "h")
    sql = open_stores(settings).sql
    packaged = calibration.resolve(sql, settings, DEFAULT_MODEL_ID, "ops", lexical=False)
    assert packaged.kind == "logistic" and "golden" in packaged.source  # shipped with the package
    other = calibration.resolve(sql, settings, "my/model", "ops", lexical=False)
    assert other.kind == "cosine"  # nobody calibrated this model: the plain cosine
    star = Calibration(kind="logistic", weights={"bias": -1.0, "cosine": 2.0}, floor=0.2, model_id="my/model")
    calibration.store(sql, star, {"queries": 3})
    assert calibration.resolve(sql, settings, "my/model", "ops", lexical=False).floor == 0.2
    own = Calibration(**{**star.to_dict(), "kb_scope": "ops", "floor": 0.3})
    calibration.store(sql, own, {"queries": 3})
    assert calibration.resolve(sql, settings, "my/model", "ops", lexical=False).floor == 0.3
    assert calibration.resolve(sql, settings, "my/model", "other", lexical=False).floor == 0.2
    forced = Settings(home=tmp_path / "h", usable_floor=0.05, reference_threshold=0.6)
    cal = calibration.resolve(sql, forced, "my/model", "ops", lexical=False)
    assert (cal.floor, cal.reference, cal.precise) == (0.05, 0.6, own.precise)
    assert "from settings" in cal.source
    assert [(m, s) for m, s, _, _ in calibration.stored_list(sql)] == [("my/model", "*"), ("my/model", "ops")]


def test_a_running_retriever_sees_a_new_calibration_and_a_rebuilt_scope(tmp_path):
    """The retriever checks a scope once and reuses that while the scope's row and the stored
    calibrations stay as they were; a calibration stored by another command, or a rebuild,
    takes effect on the next lookup without a restart."""
    from kbflow.ingest.reindex import reindex
    from kbflow.retrieval.lookup import get_retriever
    from tests.conftest import write_doc

    docs = tmp_path / "docs"
    body = "# Kafka consumer lag\n\n## Symptoms\n\nThe consumer group lag keeps growing.\n"
    write_doc(docs, "k.md", source="kafka-lag", scope="ops", breadcrumb="Message Queue > Kafka", body=body)
    settings = Settings(home=tmp_path / "home")
    assert reindex([docs], settings=settings).ok
    retriever = get_retriever(settings)
    query = "kafka consumer group lag keeps growing"
    assert retriever.lookup(query, kb_scope="ops").found
    model_id = retriever.targets("ops")[0].model_id
    strict = Calibration(floor=0.999, reference=0.9995, precise=0.9999, model_id=model_id, kb_scope="ops")
    calibration.store(open_stores(settings).sql, strict, {})
    assert not retriever.lookup(query, kb_scope="ops").found  # the new floor applies at once

    before = retriever.targets("ops")[0]
    assert reindex([docs], full=True, settings=settings).ok
    calibration.store(open_stores(settings).sql, Calibration(model_id=model_id, kb_scope="ops"), {})
    result = retriever.lookup(query, kb_scope="ops")
    assert result.found and result.evidence[0].doc_id == "kafka-lag"  # served from the new collection
    assert retriever.targets("ops")[0] == before  # the same alias and model after the swap
