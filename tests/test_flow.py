"""The Prefect reindex flow end to end (one temporary Prefect API per test session)."""

from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client

from kbflow.flows.reindex import reindex_flow, run_reindex_flow
from tests.conftest import write_doc


@pytest.fixture
def harness(prefect_harness):
    return prefect_harness


async def _artifact(key: str):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return found


def test_flow_completes_and_publishes_summary(tmp_path, harness):
    docs = tmp_path / "docs"
    write_doc(docs, "a.md", source="doc-a", scope="flow", body="# A\n\n## S\n\nAlpha text.\n")
    write_doc(docs, "b.md", source="doc-b", scope="flow", body="# B\n\n## S\n\nBeta text.\n")
    ok, summary = run_reindex_flow([str(docs)], None, False, str(tmp_path / "home"))
    assert ok and summary["added"] == 2 and summary["failed"] == []
    assert summary["calibrations"] == []  # no calibration stored for the scope: nothing to refit
    # tasks run in their own threads: their stages still reach the flow's summary
    stages = {"scan", "plan", "embed", "store_insert", "l0_build", "sql_records"}
    assert stages <= set(summary["stage_seconds"])
    ok, again = run_reindex_flow([str(docs)], None, False, str(tmp_path / "home"))
    assert ok and again["unchanged"] == 2 and again["chunks_embedded"] == 0

    import asyncio

    artifacts = asyncio.run(_artifact("reindex-summary"))
    assert any("| documents unchanged | 2 |" in a.data for a in artifacts)
    assert all("| where the time went | " in a.data for a in artifacts)

    (docs / "b.md").unlink()
    ok, removed = run_reindex_flow([str(docs)], None, False, str(tmp_path / "home"))
    assert ok and removed["removed_docs"][0]["doc_id"] == "doc-b"
    artifacts = asyncio.run(_artifact("reindex-summary"))
    assert any("## Removed" in a.data and "| flow | doc-b |" in a.data for a in artifacts)
    (docs / "a.md").unlink()  # the root is now empty: the flow refuses and ends Failed
    ok, refused = run_reindex_flow([str(docs)], None, False, str(tmp_path / "home"))
    assert not ok and refused["removed"] == 0 and "no Markdown file found" in refused["failed"][0]["reason"]


def test_flow_ends_failed_when_a_document_fails(tmp_path, harness):
    docs = tmp_path / "docs"
    write_doc(docs, "a.md", source="doc-a", scope="flow", body="# A\n\n## S\n\nAlpha text.\n")
    (docs / "bad.md").write_text("---\nsource: [x\n---\nbody\n")
    state = reindex_flow([str(docs)], home=str(tmp_path / "home"), return_state=True)
    assert state.is_failed()
    data = state.result(raise_on_failure=False)
    assert data["added"] == 1 and data["failed"][0]["path"].endswith("bad.md")


def test_eval_flows_and_their_deployments(tmp_path, harness):
    import asyncio

    from kbflow.flows.eval import deployments_summary, eval_corpus_refresh_flow, eval_flow

    home = str(tmp_path / "home")
    refresh = eval_corpus_refresh_flow(home=home, return_state=True)
    assert refresh.is_completed()
    scopes = refresh.result()
    assert scopes["rag-eval"]["added"] >= 12 and scopes["rag-eval-zh"]["added"] >= 2
    state = eval_flow(home=home, return_state=True)
    data = state.result(raise_on_failure=False)
    assert state.is_completed(), data["diff"]["regressions"]
    assert data["diff"]["ok"] and data["diff"]["known_failures"]  # baseline failures listed, not gating
    assert any("| chat-l0-filter-fallback | ✅" in a.data for a in asyncio.run(_artifact("eval-report")))
    hybrid_only = eval_flow(home=home, modes=["hybrid"], return_state=True)
    # the baseline has both modes: dropping one is a regression, and the run ends Failed
    assert hybrid_only.is_failed()
    assert any(
        "dense: mode missing" in r for r in hybrid_only.result(raise_on_failure=False)["diff"]["regressions"]
    )
    crons = {d["deployment"]: d["cron"] for d in deployments_summary(home)}
    assert crons == {"kbflow-eval-corpus-refresh": "0 5 * * *", "kbflow-eval": "0 6 * * *"}


def test_flow_runs_scan_plan_and_apply_as_tasks_and_retries_a_transient_error(tmp_path, harness, monkeypatch):
    import asyncio

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    import kbflow.flows.reindex as flow_module

    docs = tmp_path / "docs"
    write_doc(docs, "a.md", source="doc-a", scope="staged", body="# A\n\n## S\n\nAlpha text.\n")
    real, calls = flow_module.apply_plan, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("milvus went away")  # transient: the apply task is retried
        return real(*args, **kwargs)

    monkeypatch.setattr(flow_module, "apply_plan", flaky)
    state = reindex_flow([str(docs)], home=str(tmp_path / "home"), return_state=True)
    assert state.is_completed() and state.result()["added"] == 1 and len(calls) == 2

    async def task_runs():
        flow_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        async with get_client() as client:
            return await client.read_task_runs(flow_run_filter=flow_run)

    runs = {r.name: r for r in asyncio.run(task_runs())}
    assert {"plan-staged", "apply-staged"} <= set(runs) and any(n.startswith("scan") for n in runs)
    assert runs["apply-staged"].run_count == 2 and runs["plan-staged"].run_count == 1


def test_calibration_refresh_refits_what_a_rebuild_left_stale(tmp_path, harness, capsys):
    """A library rebuild (which knows nothing of calibrations) leaves the scope's calibration
    stale; `kbflow eval calibrate --refresh` and the scheduled calibration-refresh flow fit it
    again on its recipe, and status no longer flags it."""
    import json
    import time

    from kbflow.core.settings import Settings
    from kbflow.flows.calibration import calibration_refresh_flow
    from kbflow.flows.cli import main
    from kbflow.ingest.reindex import reindex
    from tests.conftest import REPO

    home = tmp_path / "home"
    settings = Settings(home=home)

    def kb(*args: str) -> tuple[int, str]:
        rc = main([*args, "--home", str(home)])
        return rc, capsys.readouterr().out

    def calibration() -> dict:
        return json.loads(kb("status", "--json")[1])["scopes"][0]["calibration"]

    def rebuild() -> None:
        time.sleep(1.1)  # a collection's build time (in its name) has whole seconds
        assert reindex([REPO / "seed-docs"], scope="rag-eval", full=True, settings=settings).ok
        assert "fitted before the last full rebuild" in calibration()["stale"]

    assert reindex([REPO / "seed-docs"], scope="rag-eval", settings=settings).ok
    rc, out = kb("eval", "calibrate", "--self", "--scope", "rag-eval", "--max-docs", "6", "--store")
    assert rc in (0, 1) and "stored for model" in out
    assert kb("eval", "calibrate", "--refresh")[1].startswith("every scope calibration is at least as new")

    rebuild()
    rc, out = kb("eval", "calibrate", "--refresh")
    assert rc == 0 and "gate calibration of scope rag-eval" in out and "refitted" in out
    assert "stale" not in calibration() and calibration()["origin"] == "self"

    rebuild()
    state = calibration_refresh_flow(home=str(home), return_state=True)
    assert state.is_completed()
    [refit] = state.result()
    assert refit["kb_scope"] == "rag-eval" and refit["outcome"] == "refitted"
    assert "stale" not in calibration()
    import asyncio

    [artifact] = asyncio.run(_artifact("calibration-refresh"))
    assert "| rag-eval |" in artifact.data and "refitted" in artifact.data

    # the reindex flow refits what its own full rebuild made stale
    time.sleep(1.1)
    ok, summary = run_reindex_flow([str(REPO / "seed-docs")], "rag-eval", True, str(home))
    assert ok and [r["outcome"] for r in summary["calibrations"]] == ["refitted"]
    assert "stale" not in calibration()
