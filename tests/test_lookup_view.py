"""The readable `kbflow lookup` view: the answer first, each evidence with its delivered rank,
title, section, quality and why it was found, the excerpt wrapped to the terminal's width."""

from __future__ import annotations

import re

import pytest

from kbflow.core.settings import Settings
from kbflow.flows.cli import main
from kbflow.flows.cli.lookup_view import PIPED_WIDTH, hit_reasons, lookup_lines, widest
from kbflow.ingest.reindex import reindex
from tests.conftest import write_doc

LONG = (
    "The consumer group lag keeps growing on every partition of the orders topic while the "
    "producers keep their usual rate; records-lag-max rises steadily, the consumers spend most of "
    "their time rebalancing and the backlog is measured in hours rather than in seconds."
)
BODY = f"""\
# Kafka consumer lag

## Symptoms

{LONG}

## Fix

Scale the consumer group out to the partition count, then raise max.poll.records and check that
session.timeout.ms covers the slowest batch: {LONG}
"""
QUERY = "kafka consumer group lag keeps growing"
RANK = re.compile(r"^(\d+)\. (.*)$")


@pytest.fixture
def home(tmp_path) -> str:
    docs = tmp_path / "docs"
    write_doc(
        docs, "kafka.md", source="kafka-lag", scope="ops", breadcrumb="Message Queue > Kafka", body=BODY
    )
    settings = Settings(home=tmp_path / "home")
    assert reindex([docs], settings=settings).ok
    return str(settings.home)


def _ranks(lines: list[str]) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for line in lines if (m := RANK.match(line))]


def test_the_view_shows_ranks_titles_sections_and_wrapped_excerpts(home, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["lookup", QUERY, "--scope", "ops", "--home", home]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("evidence FOUND — level ")
    ranks = _ranks(lines)
    assert [n for n, _ in ranks] == list(range(1, len(ranks) + 1)) and len(ranks) >= 2
    assert all(title == "Kafka consumer lag" for _, title in ranks)
    assert any("Message Queue > Kafka" in line and "kafka-lag#" in line for line in lines)
    assert any(line.strip().startswith("section: Kafka consumer lag > ") for line in lines)
    assert any(line.strip().startswith("quality ") for line in lines)
    # each candidate's rank in the dense and BM25 lists; the top one was found by both legs
    legs = [line.strip() for line in lines if line.strip().startswith("quality ")]
    assert re.search(r"dense #\d+, BM25 #\d+$", legs[0]), legs[0]
    # the gate's decision with each signal's value and weight (the packaged logistic model)
    gate = " ".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("1. "))])
    weighed = r"= sigmoid\(-\d+\.\d+ \+\d+\.\d+×cosine 0\.\d+ \+\d+\.\d+×coverage \d\.\d+\)"
    assert re.search(weighed, gate), gate
    assert any(line.strip().startswith("why: ") for line in lines)
    assert widest(lines) <= 60
    # the excerpt is there, wrapped: its words in order across indented lines
    excerpt = " ".join(line.strip() for line in lines if line.startswith("     "))
    assert "records-lag-max rises steadily" in excerpt


def test_piped_output_wraps_to_a_sensible_width(home, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["lookup", QUERY, "--scope", "ops", "--home", home]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert widest(lines) <= PIPED_WIDTH and max(map(len, lines)) > 60  # wrapped, not squeezed


def _result(ranks: list[int], **trace: object) -> dict:
    evidence = [
        {
            "evidenceKey": f"doc-{r}#0",
            "docId": f"doc-{r}",
            "kbScope": "ops",
            "source": f"doc-{r}",
            "title": f"Title {r}",
            "breadcrumb": "Cache > Redis",
            "headingPath": f"Title {r} > Symptoms",
            "originalRank": r,
            "hitReasons": ["l0_entity_overlap"],
            "excerpt": f"Title {r} > Symptoms\nevicted_keys grows " * 3,
            "qualityScore": 0.9 - r / 100,
            "weak": r > 5,
            "signals": {"cosine": 0.8, "coverage": 0.5},
        }
        for r in ranks
    ]
    gate = {
        "decision": "PRECISE",
        "topEvidenceKey": evidence[0]["evidenceKey"] if evidence else None,
        "topSignals": {},
        "topQuality": 0.89,
        "floor": 0.1,
        "reference": 0.5,
        "precise": 0.85,
    }
    return {
        "query": "redis evictions",
        "mode": "hybrid",
        "found": bool(evidence),
        "evidence": evidence,
        "candidateCount": 9,
        "relevanceLevel": "PRECISE" if evidence else None,
        "completenessHint": "sufficient: several precise sources",
        "message": None if evidence else "No usable evidence in the knowledge base",
        "retrievalTrace": {
            "l0": {"categoryFilter": "Cache"},
            "selectedAttempt": "FILTERED_VECTOR",
            "fallbackReason": None,
            "calibrations": {"ops": "default"},
            "gate": gate,
            **trace,
        },
    }


def test_ranks_are_as_delivered_without_the_candidates_gaps():
    lines = lookup_lines(_result([3, 7, 12]), agent=False, width=80)
    assert [n for n, _ in _ranks(lines)] == [1, 2, 3]
    assert [t for _, t in _ranks(lines)] == ["Title 3", "Title 7", "Title 12"]
    assert any("quality 0.87 · PRECISE" in line for line in lines)
    assert any("quality 0.83 · weak" in line for line in lines)  # rank 2: originalRank 7
    assert any("weak: does not vouch for an answer" in line for line in lines)


def test_hit_reasons_in_words():
    data = _result(
        [1], selectedAttempt="UNFILTERED_VECTOR_RETRY", fallbackReason="filtered_vector_low_quality"
    )
    reasons = hit_reasons(data["evidence"][0], data["retrievalTrace"])
    assert reasons == [
        "close in meaning to the query (cosine 0.80)",
        "contains 50% of the query's terms",
        "an identifier in the query is one of its entities (L0 index)",
        "found by the unfiltered retry",
    ]
    lines = lookup_lines(data, agent=False, width=200)
    assert any(
        "the unfiltered retry: the search within the L0 category Cache found only weak" in x for x in lines
    )


def test_no_evidence_says_so_first():
    lines = lookup_lines(_result([]), agent=False, width=80)
    assert lines[0].startswith("no usable evidence — 0 delivered of 9 candidates")
    assert lines[-1] == "No usable evidence in the knowledge base" and not _ranks(lines)


def test_weak_evidence_says_weak_first_and_what_weak_means():
    data = _result([1])
    data["relevanceLevel"] = None
    lines = lookup_lines(data, agent=False, width=200)
    weak = "evidence WEAK — close to the question, but it vouches for no answer — 1 delivered of 9 candidates"
    assert lines[0].startswith(weak)


def test_completeness_counts_the_precise_pieces_themselves():
    from types import SimpleNamespace

    from kbflow.retrieval.assemble import completeness_hint
    from kbflow.retrieval.gate import Calibration

    cals = {"ops": Calibration(reference=0.5, precise=0.8)}

    def piece(q: float) -> SimpleNamespace:
        return SimpleNamespace(kb_scope="ops", quality_score=q, confidence=None, weak=q < 0.5)

    one_of_two = completeness_hint([piece(0.9), piece(0.6)], "PRECISE", cals)
    assert one_of_two.startswith("partial: 1 of 2 sources precise")
    assert completeness_hint([piece(0.9), piece(0.85), piece(0.4)], "PRECISE", cals).startswith(
        "sufficient: 2 of 3 sources precise"
    )
    assert completeness_hint([piece(0.4)], None, cals).startswith("partial: weak evidence only")
    assert completeness_hint([], None, cals) == "none: no usable evidence"


def test_levels_use_the_best_candidates_scope_even_when_it_was_not_delivered():
    data = _result([3, 4])
    trace = data["retrievalTrace"]
    trace["calibrations"] = {"ops": "calibrated", "other": "default"}  # thresholds differ per scope
    trace["gate"]["topEvidenceKey"] = "doc-3#5"  # the best chunk, cut by the per-document cap
    lines = lookup_lines(data, agent=False, width=80)
    assert sum("· PRECISE" in line for line in lines) == 2
    trace["gate"]["topEvidenceKey"] = "elsewhere#0"  # another scope's document: only weak or not
    lines = lookup_lines(data, agent=False, width=80)
    assert sum("· usable" in line for line in lines) == 2
