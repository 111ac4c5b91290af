"""Bad input: each file reported with its reason, the good ones indexed, nothing stored lost."""

from __future__ import annotations

import json

from kbflow.core import milvus_store as ms
from kbflow.core.validation import eq
from kbflow.ingest.reindex import reindex
from tests.conftest import write_doc


def make_tree(root):
    write_doc(root, "good.md", source="good-doc", scope="s1", body="# Good\n\n## A\n\nUseful text.\n")
    write_doc(root, "keeper.md", source="keeper", scope="s1", body="# Keeper\n\n## A\n\nIndexed before.\n")


BAD_FILES = {
    "yaml.md": ("---\nsource: [oops\n---\n# x\n\nbody\n", "invalid YAML frontmatter"),
    "empty.md": ("---\nsource: empty-doc\nkb_scope: s1\n---\n\n   \n", "empty body"),
    "badsource.md": ('---\nsource: "bell\\a"\nkb_scope: s1\n---\n# x\n\nbody\n', "control character U+0007"),
    "inject.md": ('---\nsource: inj\nkb_scope: x" or kb_scope != "\n---\n# x\n\nbody\n', "invalid kb_scope"),
    "dup.md": ("---\nsource: good-doc\nkb_scope: s1\n---\n# Dup\n\nsame id\n", "duplicate source 'good-doc'"),
}


def test_every_bad_file_reported_and_good_ones_indexed(tmp_path, settings, stores):
    docs = tmp_path / "docs"
    make_tree(docs)
    first = reindex([docs], settings=settings, stores=stores)
    assert first.ok and first.added == 2

    for name, (text, _) in BAD_FILES.items():
        (docs / name).write_text(text, encoding="utf-8")
    (docs / "latin1.md").write_bytes("---\nsource: l1\n---\n# Caf\xe9\n".encode("latin-1"))
    (docs / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "huge.md").write_text("---\nsource: huge\n---\n# Huge\n\n" + "word " * 300_000)
    # a file that indexed fine before now breaks: its last good version must stay served
    (docs / "keeper.md").write_text("---\nsource: keeper\nkb_scope: [broken\n---\n# Keeper\n")
    write_doc(docs, "new.md", source="new-doc", scope="s1", body="# New\n\n## B\n\nAlso useful.\n")

    summary = reindex([docs], settings=settings, stores=stores)
    reasons = {f["path"].rsplit("/", 1)[-1]: f["reason"] for f in summary.failed}
    for name, (_, reason) in BAD_FILES.items():
        assert reason in reasons[name], (name, reasons.get(name))
    assert "not valid UTF-8" in reasons["latin1.md"]
    assert "binary" in reasons["image.md"]
    assert "over the 1000000-byte limit" in reasons["huge.md"]
    assert "invalid YAML" in reasons["keeper.md"]
    assert len(summary.failed) == 9 and not summary.ok
    assert summary.added == 1 and summary.unchanged == 1 and summary.removed == 0

    alias = ms.alias_for(settings.collection_prefix, "s1")
    target = stores.chunks.alias_target(alias)
    stored = stores.milvus.query(target, filter=eq("kb_scope", "s1"), output_fields=["doc_id", "text"])
    by_doc = {r["doc_id"]: r["text"] for r in stored}
    assert set(by_doc) == {"good-doc", "keeper", "new-doc"}
    assert "Indexed before." in by_doc["keeper"]  # nothing already indexed is lost
    assert "same id" not in by_doc["good-doc"]  # the duplicate did not overwrite the owner

    from sqlalchemy import select

    from kbflow.core.sql import DocumentRow

    with stores.sql.session() as s:
        keeper = s.scalars(select(DocumentRow).where(DocumentRow.doc_id == "keeper")).one()
    assert keeper.status == "error" and "invalid YAML" in keeper.last_error

    # fixing the file clears the error; the injected scope never became a scope
    write_doc(docs, "keeper.md", source="keeper", scope="s1", body="# Keeper\n\n## A\n\nFixed now.\n")
    for name in [*BAD_FILES, "latin1.md", "image.md", "huge.md"]:
        (docs / name).unlink()
    fixed = reindex([docs], settings=settings, stores=stores)
    assert fixed.ok and fixed.updated == 1
    assert [c for c in stores.milvus.list_collections() if "or" in c] == []


def test_cli_exits_nonzero_with_json_failures(tmp_path, settings, capsys):
    from kbflow.flows.cli import main

    docs = tmp_path / "docs"
    make_tree(docs)
    (docs / "yaml.md").write_text(BAD_FILES["yaml.md"][0])
    code = main(["reindex", str(docs), "--home", str(settings.home), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["added"] == 2 and out["failed"][0]["path"].endswith("yaml.md")
    assert set(out) >= {
        "added",
        "updated",
        "unchanged",
        "removed",
        "failed",
        "chunks_written",
        "chunks_embedded",
        "cache_hits",
        "seconds",
    }
    assert main(["reindex", str(docs), "--home", str(settings.home), "--scope", 'x" or 1']) == 2
    assert main(["reindex", str(tmp_path / "missing"), "--home", str(settings.home)]) == 2
