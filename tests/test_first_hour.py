"""What a new user meets in the first hour: each test reproduces one reported defect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kbflow.core import milvus_store as ms
from kbflow.flows.cli import main
from kbflow.ingest.parsing import DocumentError, parse_document
from kbflow.ingest.reindex import reindex
from tests.conftest import REPO, write_doc

KBFLOW = str(Path(sys.executable).with_name("kbflow"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_ANALYTICS_ENABLED"}
    return {**env, **extra}


def test_prefect_telemetry_is_off_unless_the_user_turns_it_on(tmp_path):
    current = (
        "from prefect.settings import get_current_settings as s; enabled = s().server.analytics_enabled; "
    )
    probe = current + (
        "import os, kbflow.flows.cli; print(os.environ['PREFECT_SERVER_ANALYTICS_ENABLED'], enabled)"
    )
    off = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=_env(), capture_output=True, text=True)
    assert off.stdout.split() == ["false", "False"], off.stderr
    on = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=_env(PREFECT_SERVER_ANALYTICS_ENABLED="true"),
        capture_output=True,
        text=True,
    )
    assert on.stdout.split() == ["true", "True"], on.stderr
    # `prefect …` run from the repository root reads pyproject.toml's [tool.prefect.server]
    plain = current + "print(enabled)"
    repo = subprocess.run([sys.executable, "-c", plain], cwd=REPO, env=_env(), capture_output=True, text=True)
    assert repo.stdout.strip() == "False", repo.stderr


def test_an_invalid_json_setting_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [KBFLOW, "status", "--home", str(tmp_path / "home")],
        env=_env(KBFLOW_API_KEYS="not json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "KBFLOW_API_KEYS" in lines[0] and "JSON" in lines[0]


def test_a_frontmatter_list_or_string_is_a_bad_file_not_the_default_scope(tmp_path, settings, stores):
    for text, kind in (
        ("---\n- a\n- b\n---\n# T\n\nbody\n", "a list"),
        ("---\njust words\n---\n# T\n\nx\n", "a plain string"),
    ):
        try:
            parse_document(text, content_hash="h", rel_path="x.md", root="/r", default_scope="default")
        except DocumentError as exc:
            assert f"frontmatter is {kind}" in exc.reason
        else:
            raise AssertionError(f"{kind} frontmatter was accepted")
    docs = tmp_path / "docs"
    (docs).mkdir()
    (docs / "list.md").write_text("---\n- source: x\n---\n# T\n\nbody\n", encoding="utf-8")
    write_doc(docs, "ok.md", source="ok", scope="s", body="# Ok\n\n## A\n\nFine.\n")
    summary = reindex([docs], settings=settings, stores=stores)
    assert [Path(f["path"]).name for f in summary.failed] == ["list.md"]
    assert set(summary.scopes) == {"s"}  # nothing landed in `default`


def test_a_new_document_after_an_interrupted_run_is_added_not_updated(
    tmp_path, settings, stores, monkeypatch
):
    docs = tmp_path / "docs"
    write_doc(docs, "a.md", source="a", scope="s", body="# A\n\n## X\n\nFirst page.\n")
    reindex([docs], settings=settings, stores=stores)
    write_doc(docs, "b.md", source="b", scope="s", body="# B\n\n## X\n\nSecond page.\n")
    real = ms.upsert_rows

    def lost_connection(*args, **kwargs):
        raise ConnectionError("connection to Milvus lost")

    monkeypatch.setattr(ms, "upsert_rows", lost_connection)
    broken = reindex([docs], settings=settings, stores=stores)
    assert not broken.ok and "store error" in broken.failed[0]["reason"]
    monkeypatch.setattr(ms, "upsert_rows", real)
    again = reindex([docs], settings=settings, stores=stores)
    assert again.ok and again.added == 1 and again.updated == 0


def test_status_shows_when_the_scope_last_changed_and_the_last_run(tmp_path, settings, stores, capsys):
    docs = tmp_path / "docs"
    write_doc(docs, "a.md", source="a", scope="s", body="# A\n\n## X\n\nFirst page.\n")
    write_doc(docs, "b.md", source="b", scope="s", body="# B\n\n## X\n\nSecond page.\n")
    write_doc(docs, "c.md", source="c", scope="s", body="# C\n\n## X\n\nThird page.\n")
    reindex([docs], settings=settings, stores=stores)
    assert main(["status", "--json", "--home", str(settings.home)]) == 0
    first = json.loads(capsys.readouterr().out)["scopes"][0]["updated_at"]
    time.sleep(1.1)
    write_doc(docs, "a.md", source="a", scope="s", body="# A\n\n## X\n\nFirst page, edited.\n")
    (docs / "c.md").unlink()
    assert reindex([docs], settings=settings, stores=stores).ok
    assert main(["status", "--home", str(settings.home)]) == 0
    out = capsys.readouterr().out
    assert first not in out and "last changed" in out
    assert "last reindex:" in out and "(incremental, ok)" in out


def test_start_up_says_what_is_loading(tmp_path, settings, capsys):
    write_doc(tmp_path / "docs", "a.md", source="a", scope="s", body="# A\n\n## X\n\nFirst page.\n")
    assert main(["reindex", str(tmp_path / "docs"), "--home", str(settings.home), "--json"]) == 0
    captured = capsys.readouterr()
    first = captured.err.splitlines()[0]
    assert "loading the stores" in first and "embedding models" in first and "multilingual-e5-small" in first
    json.loads(captured.out)  # stdout stays one JSON object


def test_a_missing_root_fails_before_anything_loads(tmp_path, capsys):
    """The root is checked first; no store is opened, no model announced."""
    home = tmp_path / "home"
    assert main(["reindex", str(tmp_path / "nowhere"), "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert f"root {tmp_path / 'nowhere'} does not exist" in err
    assert "loading the stores" not in err and not (home / "milvus.db").exists()


def test_status_calls_records_a_killed_run_left_interrupted_not_errors(tmp_path, settings, stores, capsys):
    """`kill -9` in the write phase leaves records `writing`; status says the
    next reindex resumes them instead of counting them as errors, and the next run does."""
    from sqlalchemy import update

    from kbflow.core.sql import DocumentRow

    docs = tmp_path / "docs"
    for name in "abc":
        write_doc(docs, f"{name}.md", source=name, scope="s", body=f"# {name}\n\n## X\n\nPage {name}.\n")
    assert reindex([docs], settings=settings, stores=stores).ok
    with stores.sql.session() as session, session.begin():  # what a killed write phase leaves
        session.execute(update(DocumentRow).where(DocumentRow.doc_id != "a").values(status="writing"))
    assert main(["status", "--home", str(settings.home)]) == 0
    out = capsys.readouterr().out
    assert "3 documents (0 with errors, 2 interrupted: the next reindex resumes them)" in out
    assert reindex([docs], settings=settings, stores=stores).ok
    assert main(["status", "--json", "--home", str(settings.home)]) == 0
    scope = json.loads(capsys.readouterr().out)["scopes"][0]
    assert scope["documents_interrupted"] == 0 and scope["documents_with_errors"] == 0


def test_documents_that_change_root_are_told_not_silent(tmp_path, settings, stores):
    """Indexing a subfolder of an indexed root, the outer root again, or a
    renamed root moves records between roots; each run says so in its warnings."""
    root = tmp_path / "kb"
    for name in ("a", "b"):
        body = f"# {name}\n\n## X\n\nPage {name}.\n"
        write_doc(root / "sub1", f"{name}.md", source=name, scope="s", body=body)
    write_doc(root, "c.md", source="c", scope="s", body="# c\n\n## X\n\nPage c.\n")

    def moves(summary) -> list[str]:
        assert summary.ok, summary.failed
        return [w["reason"] for w in summary.warnings if " moved from root " in w["reason"]]

    assert moves(reindex([root], settings=settings, stores=stores)) == []
    inner = moves(reindex([root / "sub1"], settings=settings, stores=stores))
    assert inner == [
        f"2 documents moved from root {root} to root {root / 'sub1'}: they are now recorded under "
        f"{root / 'sub1'}; reindexing {root} moves them back"
    ]
    assert moves(reindex([root], settings=settings, stores=stores))[0].startswith(
        f"2 documents moved from root {root / 'sub1'} to root {root}"
    )
    root.rename(tmp_path / "kb2")
    renamed = moves(reindex([tmp_path / "kb2"], settings=settings, stores=stores))
    assert renamed == [f"3 documents moved from root {root} (gone: renamed?) to root {tmp_path / 'kb2'}"]


def test_status_reads_sql_while_another_process_holds_milvus(tmp_path):
    """A reindex holding the Milvus Lite file no longer blanks `kbflow status`:
    it shows what SQL records and says who holds the file and that chunk counts wait for it."""
    from kbflow.core.settings import Settings
    from tests.conftest import run_cli

    settings = Settings(home=tmp_path / "home")
    docs = tmp_path / "docs"
    for name in "ab":
        write_doc(docs, f"{name}.md", source=name, scope="s", body=f"# {name}\n\n## X\n\nPage {name}.\n")
    assert run_cli("reindex", str(docs), home=settings.home).returncode == 0
    hold = (
        "import sys, time; from kbflow.core.milvus_store import open_client; c = open_client(sys.argv[1]); "
        "c.list_collections(); print('holding', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(settings.home / "milvus.db")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        out = run_cli("status", home=settings.home)
        assert out.returncode == 0, out.stderr
        assert f"process {holder.pid} " in out.stdout and "holds the Milvus Lite file" in out.stdout
        assert "scope s: 2 documents (0 with errors), ? chunks in Milvus (held) (2 recorded)" in out.stdout
        data = json.loads(run_cli("status", "--json", home=settings.home).stdout)
        assert data["milvus_held"] and data["scopes"][0]["chunks"] == -1
        assert data["scopes"][0]["calibration"]["origin"] == "packaged"
    finally:
        holder.kill()
        holder.wait(30)


PAUSE = (
    "import json, sys, time\n"
    "from pymilvus import MilvusClient\n"
    "from kbflow.core.lite_engine import lite_uri\n"
    "from kbflow.core.milvus_store import grpc_options\n"
    "uri = lite_uri(sys.argv[1])\n"
    "options = {**grpc_options(uri), **json.loads(sys.argv[2])}\n"
    "c = MilvusClient(uri=uri, grpc_options=options)\n"
    "c.create_collection('pause', dimension=4)\n"
    "c.insert('pause', [{'id': 1, 'vector': [0.1, 0.2, 0.3, 0.4]}])\n"
    "time.sleep(float(sys.argv[3]))\n"
    "print(len(c.query('pause', filter='id > 0')))\n"
)


def _pause(path: Path, seconds: float, **options: int) -> str:
    """A write, a pause, a read, on a Milvus Lite file: what grpc printed on stderr.
    `max_pings_without_data = 0` lifts the client's own ping cap, which made the defect show
    only now and then (after ~40 s, in a long reindex)."""
    extra = json.dumps({"grpc.http2.max_pings_without_data": 0, **options})
    done = subprocess.run(
        [sys.executable, "-c", PAUSE, str(path), extra, str(seconds)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    return done.stderr


def test_a_pause_between_calls_prints_no_grpc_goaway(tmp_path):
    """Milvus Lite's gRPC server allows a keepalive ping every 5 minutes; pymilvus pings every
    10 s, and the server answered GOAWAY "too_many_pings", printed on stderr of a long
    reindex. Pinging often (here every second) still gets it; kbflow's client pings as the
    server allows and gets none in a pause that pymilvus's pings would not survive."""
    pymilvus_but_faster = {"grpc.keepalive_time_ms": 1000, "grpc.keepalive_permit_without_calls": 1}
    assert "too_many_pings" in _pause(tmp_path / "often.db", 12, **pymilvus_but_faster)
    quiet = _pause(tmp_path / "kbflow.db", 35)  # pymilvus's 10 s pings: GOAWAY by 30 s
    assert "GOAWAY" not in quiet and "too_many_pings" not in quiet, quiet


def test_only_milvus_lite_endpoints_get_the_relaxed_keepalive():
    assert ms.grpc_options("/tmp/home/milvus.db") == ms.LITE_GRPC_OPTIONS
    assert ms.grpc_options("http://127.0.0.1:19530") == ms.LITE_GRPC_OPTIONS  # serve's Lite child
    assert ms.grpc_options("http://milvus.prod:19530") == {}  # a server keeps pymilvus's keepalive
