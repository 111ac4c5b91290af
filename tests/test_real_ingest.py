"""The write side on real-world input: free-text ids, moved folders, guarded deletes, one bad
file never blocking others, full rebuilds across roots. Real Milvus Lite, SQLite and model."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import select

from kbflow.core import milvus_store as ms
from kbflow.core.evidence_keys import source_of
from kbflow.core.sql import DocumentRow
from kbflow.core.validation import doc_key
from kbflow.flows.cli import main
from kbflow.ingest.reindex import reindex
from kbflow.retrieval import lookup_knowledge, project_for_agent
from tests.conftest import write_doc

REAL_IDS = {
    "slug.md": "runbook-prometheus-prometheuserrorsendingalertstosomealertmanagers-with-a-long-tail",
    "url.md": "https://wiki.example.com/ops/db#pool",
    "path.md": "docs/runbooks/etcd.md",
    "odd.md": 'it\'s "quoted" \\ or kb_scope != "x" and 1 == 1',
}
TOPICS = {
    "slug.md": "# Alertmanager delivery\n\n## Fix\n\nPrometheus fails sending alerts to alertmanagers.\n",
    "url.md": "# Database pool\n\n## Fix\n\nThe connection pool of the database is exhausted.\n",
    "path.md": "# Etcd quorum\n\n## Fix\n\nEtcd lost quorum after two members failed.\n",
    "odd.md": "# Quoting\n\n## Fix\n\nFrontmatter ids may hold quotes and backslashes safely.\n",
}


def records(stores, scope: str) -> dict[str, DocumentRow]:
    with stores.sql.session() as s:
        return {r.doc_id: r for r in s.scalars(select(DocumentRow).where(DocumentRow.kb_scope == scope))}


def write_real(root: Path, scope: str = "real") -> None:
    for name, source in REAL_IDS.items():
        quoted = json.dumps(source)  # a YAML double-quoted scalar
        write_doc(root, name, source=quoted, scope=scope, body=TOPICS[name])


def top_doc(query: str, settings, scope: str | None = "real") -> str | None:
    result = lookup_knowledge(query, kb_scope=scope, settings=settings)
    return result.evidence[0].doc_id if result.evidence else None


def test_real_ids_are_kept_exactly_as_written(tmp_path, settings, capsys):
    docs = tmp_path / "docs"
    write_real(docs)
    assert main(["reindex", str(docs), "--home", str(settings.home), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == 4 and out["failed"] == []
    assert top_doc("etcd lost quorum", settings) == "docs/runbooks/etcd.md"
    result = lookup_knowledge("database connection pool exhausted", kb_scope="real", settings=settings)
    top = result.evidence[0]
    assert top.doc_id == top.source == "https://wiki.example.com/ops/db#pool"
    # The fragment's `#` is escaped in the key, so the key's one `#` splits it back to the source.
    assert top.evidence_key == "https://wiki.example.com/ops/db%23pool#0"
    assert source_of(top.evidence_key) == top.source
    agent = project_for_agent(result, settings).to_json()
    assert agent["evidence"][0]["document_id"] == "https://wiki.example.com/ops/db#pool"
    assert top_doc("quotes and backslashes in ids", settings) == REAL_IDS["odd.md"]


def test_same_source_in_two_scopes_stays_two_documents(tmp_path, settings, stores):
    for scope in ("team-a", "team-b"):
        write_doc(
            tmp_path / scope,
            "pool.md",
            source="shared-id",
            scope=scope,
            body=f"# Pool in {scope}\n\n## Fix\n\nRaise the connection pool size for {scope}.\n",
        )
    assert reindex([tmp_path / "team-a", tmp_path / "team-b"], settings=settings, stores=stores).ok
    result = lookup_knowledge("raise the connection pool size", kb_scope=None, settings=settings)
    scopes = {(e.kb_scope, e.doc_id) for e in result.evidence}
    assert scopes == {("team-a", "shared-id"), ("team-b", "shared-id")}
    agent = project_for_agent(result, settings).to_json()
    assert {e["kb_scope"] for e in agent["evidence"]} == {"team-a", "team-b"}


def test_yaml_values_are_read_as_written(tmp_path, settings, stores):
    write_doc(tmp_path / "d", "a.md", source="0012", scope="no", body="# A\n\n## B\n\nOctal looking id.\n")
    summary = reindex([tmp_path / "d"], settings=settings, stores=stores)
    assert summary.ok and set(summary.scopes) == {"no"}
    assert set(records(stores, "no")) == {"0012"}


def test_moving_the_folder_re_embeds_nothing_and_keeps_every_document(tmp_path, settings, stores):
    old, new = tmp_path / "old", tmp_path / "moved" / "docs"
    write_real(old)
    assert reindex([old], settings=settings, stores=stores).ok
    new.parent.mkdir()
    shutil.move(old, new)
    moved = reindex([new], settings=settings, stores=stores)
    assert moved.ok, moved.failed
    assert moved.chunks_embedded == 0 and moved.removed == 0 and moved.added == 0
    assert {r.root for r in records(stores, "real").values()} == {str(new)}
    assert top_doc("etcd lost quorum", settings) == "docs/runbooks/etcd.md"
    # the old root is gone: reindexing it is an error, not a deletion
    assert main(["reindex", str(old), "--home", str(settings.home)]) == 2
    assert len(records(stores, "real")) == 4


def test_a_renamed_file_keeps_its_document(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    write_real(docs)
    reindex([docs], settings=settings, stores=stores)
    (docs / "sub").mkdir()
    (docs / "path.md").rename(docs / "sub" / "etcd-renamed.md")
    summary = reindex([docs], settings=settings, stores=stores)
    assert summary.ok and summary.removed == 0 and summary.added == 0 and summary.chunks_embedded == 0
    assert records(stores, "real")["docs/runbooks/etcd.md"].source_path == "sub/etcd-renamed.md"
    hit = lookup_knowledge("etcd lost quorum", kb_scope="real", settings=settings).evidence[0]
    assert hit.source_path == "sub/etcd-renamed.md"


def test_two_existing_files_claiming_one_source_is_the_only_conflict(tmp_path, settings, stores):
    a, b = tmp_path / "a", tmp_path / "b"
    write_doc(a, "x.md", source="same", scope="s", body="# X\n\n## Y\n\nFirst copy.\n")
    reindex([a], settings=settings, stores=stores)
    write_doc(b, "x.md", source="same", scope="s", body="# X\n\n## Y\n\nSecond copy.\n")
    clash = reindex([b], settings=settings, stores=stores)
    assert not clash.ok and "also claimed by" in clash.failed[0]["reason"]
    assert str(a / "x.md") in clash.failed[0]["reason"]
    write_doc(a, "x.md", source="renamed", scope="s", body="# X\n\n## Y\n\nFirst copy.\n")
    assert reindex([b], settings=settings, stores=stores).ok  # a no longer claims it


def test_an_emptied_root_is_refused_and_everything_stays_served(tmp_path, settings, stores, capsys):
    docs = tmp_path / "docs"
    write_real(docs)
    reindex([docs], settings=settings, stores=stores)
    for f in docs.glob("*.md"):
        f.unlink()
    code = main(["reindex", str(docs), "--home", str(settings.home), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["removed"] == 0
    assert "no Markdown file found under this root" in out["failed"][0]["reason"]
    assert top_doc("etcd lost quorum", settings) == "docs/runbooks/etcd.md"
    assert main(["reindex", str(docs), "--home", str(settings.home), "--allow-mass-delete", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 4


def test_removing_most_of_a_scope_needs_confirmation(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    write_real(docs)
    reindex([docs], settings=settings, stores=stores)
    for name in ("slug.md", "url.md", "path.md"):
        (docs / name).unlink()
    refused = reindex([docs], settings=settings, stores=stores)
    assert not refused.ok and refused.removed == 0
    assert "would remove 3 of the scope's 4 documents" in refused.failed[0]["reason"]
    (docs / "odd.md").unlink()
    write_doc(docs, "path.md", source='"docs/runbooks/etcd.md"', scope="real", body=TOPICS["path.md"])
    write_doc(
        docs, "url.md", source='"https://wiki.example.com/ops/db#pool"', scope="real", body=TOPICS["url.md"]
    )
    one = reindex([docs], settings=settings, stores=stores)  # 2 of 4: within the fraction
    assert one.ok and {d["doc_id"] for d in one.removed_docs} == {REAL_IDS["slug.md"], REAL_IDS["odd.md"]}


def test_a_dangling_symlink_is_an_error_not_a_deletion(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    write_real(docs)
    reindex([docs], settings=settings, stores=stores)
    target = tmp_path / "elsewhere.md"
    shutil.move(docs / "path.md", target)
    (docs / "path.md").symlink_to(target)
    assert reindex([docs], settings=settings, stores=stores).ok  # a live link is a file
    target.unlink()
    summary = reindex([docs], settings=settings, stores=stores)
    assert not summary.ok and summary.removed == 0
    assert "dangling symlink" in summary.failed[0]["reason"]
    assert top_doc("etcd lost quorum", settings) == "docs/runbooks/etcd.md"
    assert records(stores, "real")["docs/runbooks/etcd.md"].status == "error"


def test_an_unreadable_folder_is_an_error_not_a_deletion(tmp_path, settings, stores, monkeypatch):
    docs = tmp_path / "docs"
    write_real(docs / "team")
    write_doc(docs, "top.md", source="top", scope="real", body="# Top\n\n## A\n\nTop level page.\n")
    reindex([docs], settings=settings, stores=stores)
    if os.geteuid() != 0:
        (docs / "team").chmod(0)
    else:  # root reads any folder: make the walk meet the error a mode-000 folder gives
        real_scandir = os.scandir

        def scandir(path="."):
            if os.fspath(path).endswith("team"):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        summary = reindex([docs], settings=settings, stores=stores)
    finally:
        (docs / "team").chmod(0o755)
    assert not summary.ok and summary.removed == 0
    assert "cannot read folder" in summary.failed[0]["reason"]
    assert len(records(stores, "real")) == 5
    monkeypatch.undo()
    assert top_doc("etcd lost quorum", settings) == "docs/runbooks/etcd.md"


def test_a_renamed_root_with_one_file_deleted_removes_exactly_that_document(tmp_path, settings, stores):
    old, new = tmp_path / "kb-v1", tmp_path / "kb-v2"
    write_real(old)
    reindex([old], settings=settings, stores=stores)
    old.rename(new)
    (new / "slug.md").unlink()
    summary = reindex([new], settings=settings, stores=stores)
    assert summary.ok and summary.chunks_embedded == 0
    assert [d["doc_id"] for d in summary.removed_docs] == [REAL_IDS["slug.md"]]
    assert set(records(stores, "real")) == set(REAL_IDS.values()) - {REAL_IDS["slug.md"]}
    assert top_doc("prometheus fails sending alerts to alertmanagers", settings) != REAL_IDS["slug.md"]


def test_a_repointed_current_link_removes_the_deleted_document(tmp_path, settings, stores):
    r1, r2, current = tmp_path / "release-1", tmp_path / "release-2", tmp_path / "current"
    write_real(r1)
    current.symlink_to(r1)
    reindex([current], settings=settings, stores=stores)
    shutil.copytree(r1, r2)
    (r2 / "url.md").unlink()
    current.unlink()
    current.symlink_to(r2)
    summary = reindex([current], settings=settings, stores=stores)
    assert summary.ok, summary.failed
    assert [d["doc_id"] for d in summary.removed_docs] == [REAL_IDS["url.md"]]
    assert REAL_IDS["url.md"] not in records(stores, "real")


def test_a_3000_character_title_fails_only_its_own_file(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    write_real(docs)
    long_title = "T" * 3000
    write_doc(
        docs,
        "long.md",
        source="long",
        scope="real",
        extra=f"title: {long_title}",
        body="# x\n\n## y\n\nA page with a very long title.\n",
    )
    deep = "\n".join(f"{'#' * min(i, 6)} {'h' * 900}" for i in range(1, 7)) + "\n\nDeep page body.\n"
    write_doc(docs, "deep.md", source="deep", scope="real", body=deep)
    summary = reindex([docs], settings=settings, stores=stores)
    assert summary.ok and summary.added == 6
    warned = {Path(w["path"]).name: w["reason"] for w in summary.warnings}
    assert "title is 3000 bytes" in warned["long.md"]
    assert set(warned) == {"long.md"} or "heading_path" in warned.get("deep.md", "heading_path")
    hit = lookup_knowledge("page with a very long title", kb_scope="real", settings=settings).evidence[0]
    assert hit.doc_id == "long" and len(hit.title) == 2048


def test_a_document_the_store_refuses_fails_alone(stores):
    """write_documents retries a refused batch document by document (real Milvus Lite)."""
    from kbflow.ingest.writing import write_documents

    client = stores.milvus
    ms.create_collection(client, "refusal_probe", 4, "standard")
    good = {
        "id": "g#0",
        "doc_id": "g",
        "source": "g",
        "_source": "g.md",
        "kb_scope": "s",
        "category": "",
        "breadcrumb": "",
        "title": "ok",
        "heading_path": "",
        "chunk_index": 0,
        "text": "fine",
        "lexical": "fine",
        "dense": [0.5, 0.5, 0.5, 0.5],
    }
    bad = {**good, "id": "b#0", "doc_id": "b", "source": "b", "dense": [0.5, 0.5, 0.5]}  # dim 3, not 4
    refused = write_documents(client, "refusal_probe", {"g": [good], "b": [bad]})
    assert set(refused) == {"b"} and "store refused" in refused["b"]
    client.flush("refusal_probe")
    client.load_collection("refusal_probe")
    stored = client.query("refusal_probe", filter='kb_scope == "s"', output_fields=["doc_id"])
    assert [r["doc_id"] for r in stored] == ["g"]


def test_full_rebuild_across_two_roots_copies_the_other_roots_documents(tmp_path, settings, stores):
    a, b = tmp_path / "a", tmp_path / "b"
    write_doc(
        a,
        "pool.md",
        source="https://wiki/a",
        scope="ops",
        body="# Pool\n\n## Fix\n\nThe connection pool is exhausted.\n",
    )
    write_doc(
        b,
        "etcd.md",
        source="docs/b/etcd.md",
        scope="ops",
        body="# Etcd\n\n## Fix\n\nEtcd lost quorum after two members failed.\n",
    )
    reindex([a], settings=settings, stores=stores)
    reindex([b], settings=settings, stores=stores)
    alias = ms.alias_for(settings.collection_prefix, "ops")
    before = stores.chunks.alias_target(alias)
    stores.milvus.release_collection(before)  # as a fresh process finds it
    full = reindex([a], full=True, settings=settings, stores=stores)
    assert full.ok, full.failed
    assert full.chunks_copied >= 1 and full.chunks_embedded == 0
    assert stores.chunks.alias_target(alias) != before
    assert top_doc("etcd lost quorum", settings, "ops") == "docs/b/etcd.md"
    assert top_doc("connection pool exhausted", settings, "ops") == "https://wiki/a"
    assert {r.root for r in records(stores, "ops").values()} == {str(a), str(b)}


def test_an_index_built_with_plain_ids_keeps_its_keys(stores):
    """Indexes from before free-text sources used the id itself as the Milvus key."""
    assert doc_key("mysql-pool") == "mysql-pool"
    assert doc_key("docs/a.md").startswith("~") and len(doc_key("docs/a.md")) == 41
    assert doc_key("docs/a.md") != doc_key("docs/a.md ")


def test_the_summary_lists_what_was_removed(tmp_path, settings, stores, capsys):
    docs = tmp_path / "docs"
    write_real(docs)
    reindex([docs], settings=settings, stores=stores)
    (docs / "odd.md").unlink()
    assert main(["reindex", str(docs), "--home", str(settings.home)]) == 0
    out = capsys.readouterr().out
    assert f"removed real/{REAL_IDS['odd.md']}" in out.replace("\n", "")


def test_an_index_from_before_free_text_sources_keeps_serving_and_widens_once(
    tmp_path, settings, stores, monkeypatch
):
    """A collection whose `source` field holds 64 bytes (the old schema) serves its plain ids;
    the first run that meets a long source rebuilds it from the embedding cache."""
    docs = tmp_path / "docs"
    write_doc(docs, "pool.md", source="mysql-pool", scope="old", body=TOPICS["url.md"])
    monkeypatch.setattr(ms, "SOURCE_MAX_BYTES", 64)
    reindex([docs], settings=settings, stores=stores)
    monkeypatch.undo()
    alias = ms.alias_for(settings.collection_prefix, "old")
    assert ms.source_capacity(stores.milvus, stores.chunks.alias_target(alias)) == 64
    assert top_doc("connection pool exhausted", settings, "old") == "mysql-pool"
    write_doc(docs, "etcd.md", source='"docs/runbooks/etcd.md"', scope="old", body=TOPICS["path.md"])
    summary = reindex([docs], settings=settings, stores=stores)
    assert summary.ok and summary.added == 1 and summary.chunks_embedded == 1  # only the new page
    assert ms.source_capacity(stores.milvus, stores.chunks.alias_target(alias)) == ms.SOURCE_MAX_BYTES
    assert top_doc("etcd lost quorum", settings, "old") == "docs/runbooks/etcd.md"
    assert top_doc("connection pool exhausted", settings, "old") == "mysql-pool"


def test_a_root_given_through_a_symlinked_parent_is_the_same_root(tmp_path, settings, stores):
    real = tmp_path / "real-parent" / "docs"
    write_real(real)
    reindex([real], settings=settings, stores=stores)
    (tmp_path / "link").symlink_to(tmp_path / "real-parent")
    (real / "odd.md").unlink()
    summary = reindex([tmp_path / "link" / "docs"], settings=settings, stores=stores)
    assert summary.ok and summary.chunks_embedded == 0
    assert [d["doc_id"] for d in summary.removed_docs] == [REAL_IDS["odd.md"]]


def test_a_failing_file_under_a_renamed_root_keeps_its_last_good_version(tmp_path, settings, stores):
    old, new = tmp_path / "docs-old", tmp_path / "docs-new"
    write_real(old)
    reindex([old], settings=settings, stores=stores)
    old.rename(new)
    (new / "path.md").write_text("---\nsource: [broken\n---\nbody\n", encoding="utf-8")
    summary = reindex([new], settings=settings, stores=stores)
    assert not summary.ok and summary.removed == 0
    assert records(stores, "real")["docs/runbooks/etcd.md"].status == "error"
    assert top_doc("etcd lost quorum", settings) == "docs/runbooks/etcd.md"


def test_a_folder_listed_but_not_searchable_is_an_error(tmp_path, settings, stores, monkeypatch):
    docs = tmp_path / "docs"
    write_real(docs / "team")
    write_doc(docs, "top.md", source="top", scope="real", body="# Top\n\n## A\n\nTop level page.\n")
    reindex([docs], settings=settings, stores=stores)
    real_scandir = os.scandir

    class Unsearchable:  # what a folder without its x bit answers: names listed, none stat'ed
        def __init__(self, entry):
            self.entry = entry

        def __getattr__(self, name):
            return getattr(self.entry, name)

        def stat(self, **_):
            raise PermissionError(13, "Permission denied", self.entry.path)

    @contextmanager
    def listing(path):
        with real_scandir(path) as entries:
            yield [Unsearchable(e) for e in entries]

    def scandir(path="."):  # tests run as root, where chmod denies nothing
        return listing(path) if Path(path).name == "team" else real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    summary = reindex([docs], settings=settings, stores=stores)
    monkeypatch.undo()
    assert not summary.ok and summary.removed == 0
    assert "cannot read folder" in summary.failed[0]["reason"] and len(records(stores, "real")) == 5


def test_one_document_moved_out_of_a_missing_root_does_not_adopt_it(tmp_path, settings, stores):
    a, b = tmp_path / "a", tmp_path / "b"
    write_real(a)
    reindex([a], settings=settings, stores=stores)
    b.mkdir()
    shutil.move(a / "path.md", b / "path.md")
    a.rename(tmp_path / "a-unmounted")  # a is briefly missing
    summary = reindex([b], settings=settings, stores=stores)
    assert summary.ok and summary.removed == 0  # a's three other documents stay
    assert len(records(stores, "real")) == 4


def test_a_rebuild_from_one_root_keeps_the_scopes_analyzer(tmp_path, settings, stores):
    zh, en = tmp_path / "zh", tmp_path / "en"
    write_doc(
        zh,
        "z.md",
        source="z",
        scope="mixed",
        extra="language: zh",
        body="# 数据库\n\n## 处理\n\n连接池耗尽。\n",
    )
    write_doc(en, "e.md", source="e", scope="mixed", body="# Pool\n\n## Fix\n\nThe pool is exhausted.\n")
    assert reindex([zh, en], settings=settings, stores=stores).scopes["mixed"].analyzer == "jieba"
    full = reindex([en], full=True, settings=settings, stores=stores)
    assert full.ok and full.scopes["mixed"].analyzer == "jieba" and full.chunks_copied == 1


def test_a_never_indexed_document_that_failed_is_written_when_it_comes_back(
    tmp_path, settings, stores, monkeypatch
):
    import kbflow.ingest.sources as sources

    docs = tmp_path / "docs"
    write_real(docs)
    reindex([docs], settings=settings, stores=stores)
    write_doc(
        docs, "new.md", source="brand-new", scope="real", body="# Zebra\n\n## X\n\nZebra stripes page.\n"
    )

    def lost(*args, **kwargs):
        raise ConnectionError("connection to Milvus lost")

    with monkeypatch.context() as m:  # run 1 dies before the new document reaches Milvus
        m.setattr(ms, "upsert_rows", lost)
        assert not reindex([docs], settings=settings, stores=stores).ok
    real_read = sources.read_text

    def unreadable(path, limit):
        if path.name == "new.md":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path, limit)

    with monkeypatch.context() as m:  # run 2 cannot read it: its record becomes `error`
        m.setattr(sources, "read_text", unreadable)
        assert not reindex([docs], settings=settings, stores=stores).ok
    assert records(stores, "real")["brand-new"].status == "error"
    summary = reindex([docs], settings=settings, stores=stores)  # run 3: it must really be written
    assert summary.ok and summary.chunks_written >= 1 and summary.added == 1
    assert top_doc("zebra stripes", settings) == "brand-new"


def test_forget_force_removes_a_root_that_still_exists(tmp_path, settings, stores, capsys):
    r1, r2 = tmp_path / "release-1", tmp_path / "release-2"
    write_real(r1)
    reindex([r1], settings=settings, stores=stores)
    assert main(["forget", str(r1), "--yes", "--home", str(settings.home)]) == 1  # it exists
    assert main(["forget", str(r1), "--yes", "--force", "--home", str(settings.home)]) == 0
    assert records(stores, "real") == {}
    shutil.copytree(r1, r2)
    assert reindex([r2], settings=settings, stores=stores).added == 4
