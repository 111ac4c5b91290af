"""lookup through the CLI (table, JSON, agent, batch) and as a Prefect task inside a flow."""

from __future__ import annotations

import json

import pytest
from prefect import flow

from kbflow.core.settings import Settings
from kbflow.flows.cli import main
from kbflow.flows.lookup import lookup_knowledge_task
from kbflow.ingest.reindex import reindex
from tests.conftest import write_doc

BODY = """\
# Kafka consumer lag

## Symptoms

The consumer group lag keeps growing; records-lag-max rises on every partition of the orders topic.
"""


@pytest.fixture
def home(tmp_path) -> str:
    write_doc(
        tmp_path / "docs",
        "kafka.md",
        source="kafka-lag",
        scope="ops",
        breadcrumb="Message Queue > Kafka",
        keywords=["consumer lag"],
        body=BODY,
    )
    settings = Settings(home=tmp_path / "home")
    assert reindex([tmp_path / "docs"], settings=settings).ok
    return str(settings.home)


def test_cli_lookup_table_json_agent(home, capsys):
    assert main(["lookup", "kafka consumer group lag keeps growing", "--scope", "ops", "--home", home]) == 0
    table = capsys.readouterr().out
    assert "kafka-lag#0" in table and "level" in table and "UNFILTERED_VECTOR" in table
    assert main(["lookup", "kafka consumer group lag keeps growing", "--home", home, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["found"] and result["evidence"][0]["docId"] == "kafka-lag"
    assert main(["lookup", "kafka consumer group lag", "--home", home, "--json", "--agent"]) == 0
    agent = json.loads(capsys.readouterr().out)
    assert agent["evidence_status"] == "FOUND" and agent["evidence"][0]["document_id"] == "kafka-lag"
    assert main(["lookup", "  ", "--home", home]) == 2
    assert "query is empty" in capsys.readouterr().err


def test_cli_batch(home, tmp_path, capsys):
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "a", "query": "kafka consumer lag growing", "kb_scope": "ops"}\n'
        '{"id": "b", "query": "sourdough bread recipe"}\n'
        "not json\n",
        encoding="utf-8",
    )
    assert main(["lookup", "--queries", str(queries), "--home", home]) == 1  # one bad line
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["id"] for x in lines] == ["a", "b", 3]
    assert lines[0]["result"]["found"] and not lines[1]["result"]["found"]
    assert "q.jsonl:3" in lines[2]["error"]


def test_prefect_task_inside_a_flow(home, prefect_harness):
    @flow
    def triage(alert: str) -> dict:
        return lookup_knowledge_task(alert, kb_scope="ops", agent=True, home=home)

    out = triage("kafka consumer group lag keeps growing")
    assert out["evidence_status"] == "FOUND" and out["evidence"][0]["document_id"] == "kafka-lag"
