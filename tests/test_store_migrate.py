"""A home built on Milvus Lite 3.x (a data directory) is detected, named, and rebuilt by one
command from the embedding cache, with the old data kept."""

from __future__ import annotations

import json
import shutil

from tests.conftest import run_cli, write_doc


def test_an_old_engine_home_is_named_and_migrated_without_embedding_again(tmp_path):
    home, docs = tmp_path / "home", tmp_path / "docs"
    for name, topic in (("pool", "connection pool exhausted"), ("lag", "replica lag grows")):
        body = f"# {topic}\n\n## Fix\n\nWhen the {topic}.\n"
        write_doc(docs, f"{name}.md", source=name, scope="ops", body=body)
    assert run_cli("reindex", str(docs), home=home).returncode == 0
    # what a Milvus Lite 3.x home looks like to this version: milvus.db is a directory
    (home / "milvus.db").unlink()
    (home / "milvus.db").mkdir()
    (home / "milvus.db" / "LOCK").write_text("")

    looked = run_cli("lookup", "connection pool exhausted", "--scope", "ops", home=home)
    assert looked.returncode != 0 and "Traceback" not in looked.stderr
    assert "Milvus Lite 3.x" in looked.stderr and "kbflow store migrate" in looked.stderr
    assert (home / "milvus.db" / "LOCK").exists()  # nothing was changed

    done = run_cli("store", "migrate", "--json", home=home)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ok"] and out["chunks_written"] >= 2 and out["chunks_embedded"] == 0  # the cache served
    assert (home / "milvus.db.lite3" / "LOCK").exists()  # the old data is kept
    looked = run_cli("lookup", "connection pool exhausted", "--scope", "ops", "--json", home=home)
    assert looked.returncode == 0, looked.stderr
    assert json.loads(looked.stdout)["evidence"][0]["docId"] == "pool"

    again = run_cli("store", "migrate", home=home)
    assert again.returncode == 0 and "nothing to migrate" in again.stdout


def test_a_root_gone_since_is_reported_and_the_old_data_kept(tmp_path):
    home, docs = tmp_path / "home", tmp_path / "docs"
    write_doc(docs, "a.md", source="a", scope="ops", body="# A\n\n## B\n\nText about the pool.\n")
    assert run_cli("reindex", str(docs), home=home).returncode == 0
    (home / "milvus.db").unlink()
    (home / "milvus.db").mkdir()
    shutil.rmtree(docs)
    done = run_cli("store", "migrate", home=home)
    assert done.returncode == 1
    assert f"root gone, its documents were not rebuilt: {docs}" in done.stdout
    assert "verdict: INCOMPLETE" in done.stdout and (home / "milvus.db.lite3").is_dir()
