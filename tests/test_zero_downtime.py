"""A `--full` reindex never takes the scope off the air: the HTTP lookup service answers with
evidence at every step of the rebuild — the old text until the alias moves, the new text after.

The rebuild reports its steps through `progress` ("rebuild", 1..3, 3); the callback asks the
service (same process, same Milvus Lite file, through its HTTP endpoint) while the rebuild waits
for it, so each answer is taken exactly at that step, not after a guessed sleep."""

from __future__ import annotations

from fastapi.testclient import TestClient

from kbflow.core import milvus_store as ms
from kbflow.core.settings import Settings
from kbflow.core.stores import open_stores
from kbflow.flows.service import create_app
from kbflow.ingest.reindex import reindex
from tests.conftest import write_ops_corpus

QUERY = {"query": "redis evicted_keys keeps growing maxmemory", "kb_scope": "ops"}
REVISIONS = ("revision one", "revision two")


def answer(client: TestClient) -> dict:
    """What a caller of the service sees: status, whether evidence came, which revision."""
    r = client.post("/v1/lookup", json=QUERY)
    body = r.json()
    evidence = body.get("evidence", []) if r.status_code == 200 else []
    return {
        "status": r.status_code,
        "found": body.get("found") if r.status_code == 200 else body,
        "top": evidence[0]["docId"] if evidence else None,
        "revisions": {rev for rev in REVISIONS for e in evidence if rev in e["excerpt"]},
    }


def test_full_reindex_serves_evidence_at_every_step(tmp_path):
    settings = Settings(home=tmp_path / "home")
    docs = tmp_path / "docs"
    write_ops_corpus(docs, 1)
    stages: set[str] = set()
    first = reindex([docs], settings=settings, progress=lambda stage, *_: stages.add(stage))
    assert first.ok
    assert "build" in stages and "rebuild" not in stages  # a scope's first index is no rebuild
    old = first.scopes["ops"].physical_collection
    stores = open_stores(settings)
    alias = ms.alias_for(settings.collection_prefix, "ops")
    write_ops_corpus(docs, 2)  # every document changes; only the rebuild below may publish it

    steps: list[dict] = []
    with TestClient(create_app(settings)) as client:
        before = answer(client)

        def progress(stage: str, done: int, total: int) -> None:
            if stage != "rebuild":
                return
            # the rebuild waits here while the service answers (assertions come afterwards: a
            # failure raised inside the run would be reported as a failed scope, not here)
            steps.append(
                {
                    "step": (done, total),
                    "alias_target": stores.chunks.alias_target(alias),
                    "collections": sorted(
                        c for c in stores.milvus.list_collections() if c.startswith(alias + "__")
                    ),
                    **answer(client),
                }
            )

        full = reindex([docs], scope="ops", full=True, settings=settings, progress=progress)
        after = answer(client)

    assert full.ok, full.failed
    new = full.scopes["ops"].physical_collection
    assert new != old
    good = {"status": 200, "found": True, "top": "redis-evictions"}
    assert {k: before[k] for k in good} == good and before["revisions"] == {"revision one"}
    assert [s["step"] for s in steps] == [(1, 3), (2, 3), (3, 3)]
    for s in steps:  # never an error, never an empty answer
        assert {k: s[k] for k in good} == good, s

    created, switched, dropped = steps
    # 1/3: the new collection exists but is not served: the old text is
    assert created["alias_target"] == old and created["collections"] == sorted([old, new])
    assert created["revisions"] == {"revision one"}
    # 2/3: the alias serves the new collection; the old one still exists
    assert switched["alias_target"] == new and switched["collections"] == sorted([old, new])
    assert switched["revisions"] == {"revision two"}
    # 3/3: the old collection is gone; the new text is served
    assert dropped["alias_target"] == new and dropped["collections"] == [new]
    assert dropped["revisions"] == {"revision two"}
    assert {k: after[k] for k in good} == good and after["revisions"] == {"revision two"}
