"""Hostile files, wrong names and broken pipes: nothing a user types or drops in a
folder takes kbflow down. Each test failed on the main this change started from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, LookupAuditRow, SqlStore
from kbflow.ingest.reindex import reindex
from kbflow.retrieval.lookup import lookup_knowledge
from tests.conftest import REPO, run_cli, write_doc

# 363 bytes: seven levels of nine aliases each expand to 9^7 = 4.8 million strings when copied out
BOMB = textwrap.dedent("""\
    ---
    source: lol
    kb_scope: ops
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    ---
    # Laughs

    A body.
    """)
GOOD = "# Disk full\n\n## Fix\n\nRemove old WAL archives and extend the volume.\n"


def _python(code: str, timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


# --- 1. a few hundred bytes must not cost gigabytes -------------------------------------------


def test_a_yaml_alias_bomb_is_refused_in_bounded_time_and_memory(tmp_path: Path):
    """Parsing the bomb in a child process: refused within a second and a few megabytes (the
    child is killed after 20 s; on main it ran for minutes towards gigabytes)."""
    (tmp_path / "bomb.md").write_text(BOMB, "utf-8")
    code = f"""
import time, tracemalloc, resource
from kbflow.ingest.parsing import DocumentError, parse_document
text = open({str(tmp_path / "bomb.md")!r}, encoding="utf-8").read()
tracemalloc.start(); t = time.perf_counter()
try:
    parse_document(text, content_hash="h", rel_path="bomb.md", root="/r", default_scope="d")
    print("ACCEPTED")
except DocumentError as exc:
    print("REFUSED", exc.reason)
print("SECONDS", time.perf_counter() - t, "PEAK", tracemalloc.get_traced_memory()[1])
"""
    out = _python(code, timeout=20).stdout
    assert "REFUSED frontmatter uses a YAML alias (*a) at line 5" in out, out
    seconds, peak = float(out.split("SECONDS ")[1].split()[0]), int(out.split("PEAK ")[1].split()[0])
    assert seconds < 1.0 and peak < 5_000_000, out


def test_the_bomb_fails_alone_and_its_neighbours_are_indexed(settings: Settings, tmp_path: Path):
    docs = tmp_path / "kb"
    (docs).mkdir()
    (docs / "bomb.md").write_text(BOMB, "utf-8")
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    big = "x" * 70_000  # no aliases, but more frontmatter than a record keeps
    write_doc(docs, "big.md", source="big", scope="ops", body=GOOD, extra=f"notes: {big}")
    summary = reindex([docs], settings=settings)
    reasons = {Path(f["path"]).name: f["reason"] for f in summary.failed}
    assert set(reasons) == {"bomb.md", "big.md"}
    assert "YAML alias" in reasons["bomb.md"] and "over the 65536" in reasons["big.md"]
    with SqlStore(settings.resolved_database_url).session() as s:
        assert s.scalars(select(DocumentRow.doc_id)).all() == ["good"]


def test_a_home_holding_a_bloated_record_is_repaired_and_docs_list_stays_fast(tmp_path: Path):
    """A record an earlier kbflow wrote with megabytes of expanded frontmatter: `kbflow db
    upgrade` empties it and has its file read again; the next reindex refuses the file with the
    reason; `docs list` never reads the frontmatter."""
    from alembic import command

    from kbflow.core.schema import _config

    home, docs = tmp_path / "home", tmp_path / "kb"
    write_doc(docs, "laughs.md", source="lol", scope="ops", body=GOOD)
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    assert run_cli("reindex", str(docs), home=home).returncode == 0
    sql = SqlStore(f"sqlite:///{home / 'kbflow.db'}")
    with sql.session() as s, s.begin():  # what the bomb left in a home of the old kbflow
        s.execute(update(DocumentRow).where(DocumentRow.doc_id == "lol")
                  .values(extra_metadata={"g": [["lol"] * 9] * 50_000}))
    with sql.engine.begin() as conn:
        command.stamp(_config(conn), "0007")
    sql.dispose()
    (docs / "laughs.md").write_text(BOMB, "utf-8")
    assert run_cli("db", "upgrade", home=home).returncode == 0
    with SqlStore(f"sqlite:///{home / 'kbflow.db'}").session() as s:
        assert s.get(DocumentRow, ("ops", "lol")).extra_metadata == {}
    t = time.perf_counter()
    listed = run_cli("docs", "list", "--json", home=home)
    assert listed.returncode == 0 and time.perf_counter() - t < 30
    again = run_cli("reindex", str(docs), home=home)
    assert again.returncode == 1 and "laughs.md" in again.stdout + again.stderr
    assert "YAML alias" in again.stdout + again.stderr


# --- 2. one looping symlink must not block a whole root ---------------------------------------


def test_looping_symlinks_are_named_skipped_and_the_rest_indexed(settings: Settings, tmp_path: Path):
    docs = tmp_path / "kb"
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    os.symlink("self.md", docs / "self.md")
    os.symlink("b.md", docs / "a.md")
    os.symlink("a.md", docs / "b.md")
    summary = reindex([docs], settings=settings)
    failed = {Path(f["path"]).name: f["reason"] for f in summary.failed}
    assert set(failed) == {"self.md", "a.md", "b.md"}
    assert all("symbolic links" in r for r in failed.values())
    assert summary.added == 1 and not summary.ok


# --- 4. no tracebacks where the docs promise one line -----------------------------------------


@pytest.mark.parametrize("command", [["status"], ["lookup", "disk full", "--scope", "ops"], ["reindex", "."]])
def test_an_unreachable_database_is_one_line_and_exit_3(tmp_path: Path, command: list[str]):
    env = {**os.environ, "KBFLOW_DATABASE_URL": "postgresql+psycopg://kb:hunter2@127.0.0.1:1/kb"}
    exe = Path(sys.executable).with_name("kbflow")
    r = subprocess.run([str(exe), *command, "--home", str(tmp_path / "h")], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("kbflow: error:")]
    assert len(errors) == 1 and "cannot reach the database" in errors[0] and "127.0.0.1:1" in errors[0]
    assert "Traceback" not in r.stderr and "hunter2" not in r.stderr + r.stdout


def test_every_command_may_be_piped_into_a_reader_that_stops(tmp_path: Path):
    """`kbflow … | head`: the reader goes away before the command writes (the pipe is closed at
    once, so every write meets it gone); the command stops quietly."""
    docs, home = tmp_path / "kb", tmp_path / "home"
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    assert run_cli("reindex", str(docs), home=home).returncode == 0
    exe = Path(sys.executable).with_name("kbflow")
    commands = (["docs", "list", "--json"], ["lookup", "disk full", "--scope", "ops"], ["status"], ["--help"])
    for args in commands:
        where = [] if args == ["--help"] else ["--home", str(home)]
        proc = subprocess.Popen([str(exe), *args, *where], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # `| head -c 0`
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0 and "Traceback" not in err, (args, err)


def test_calibrating_a_one_document_scope_without_labels_says_what_is_missing(tmp_path: Path):
    docs, home = tmp_path / "kb", tmp_path / "home"
    write_doc(docs, "disk.md", source="disk", scope="tour", body=GOOD)
    assert run_cli("reindex", str(docs), home=home).returncode == 0
    r = run_cli("eval", "calibrate", "--self", "--scope", "tour", home=home)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "has 1 indexed document(s); --self needs at least 2" in r.stderr


# --- 7. privacy and retention at their boundaries ---------------------------------------------

DISTINCT = ("zorblax", "quuxinator", "flumpernickel")


def test_hashed_audit_keeps_no_trace_of_the_question_anywhere(settings: Settings, tmp_path: Path):
    """Every column of the row (but the hash and the vector) and everything the owner's views
    render from it: gaps JSON and Markdown, the HTML report."""
    docs = tmp_path / "kb"
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    assert reindex([docs], settings=settings).ok
    hashed = settings.model_copy(update={"audit_store_queries": "hashed"})
    questions = [f"how do I {w} the disk volume for {w} archives" for w in DISTINCT]
    for q in questions:
        lookup_knowledge(q, kb_scope="ops", settings=hashed)
    sql = SqlStore(settings.resolved_database_url)
    with sql.session() as s:
        rows = s.scalars(select(LookupAuditRow)).all()
        dump = json.dumps([{c.key: getattr(r, c.key) for c in LookupAuditRow.__table__.columns
                            if c.key not in ("query_hash", "query_vector")} for r in rows], default=str)
    env_home = ["--home", str(settings.home)]
    exe = Path(sys.executable).with_name("kbflow")
    gaps = subprocess.run([str(exe), "gaps", "--json", "--since", "1d", "--markdown", str(tmp_path / "g.md"),
                           *env_home], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KBFLOW_AUDIT_STORE_QUERIES": "hashed"})
    html = subprocess.run([str(exe), "report", "--html", str(tmp_path / "r.html"), *env_home],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KBFLOW_AUDIT_STORE_QUERIES": "hashed"})
    assert gaps.returncode == 0 and html.returncode == 0, gaps.stderr + html.stderr
    files = [(tmp_path / name).read_text("utf-8") for name in ("g.md", "r.html")]
    rendered = [dump, gaps.stdout, *files]
    for text in rendered:
        assert not any(w in text.lower() for w in DISTINCT), [w for w in DISTINCT if w in text.lower()]


def test_retention_keeps_rows_just_inside_and_deletes_just_outside(database_url: str, tmp_path: Path, capsys):  # noqa: E501
    """N days minus an hour kept, N days plus an hour deleted: the dry run's count, `--yes`'s
    and the rows left agree exactly, on SQLite and on PostgreSQL."""
    from kbflow.flows.cli import main

    home = tmp_path / "home"
    settings = Settings(home=home, database_url=database_url)
    sql = SqlStore(settings.resolved_database_url)
    days, now = 90, datetime.now(UTC)
    inside, outside = now - timedelta(days=days) + timedelta(hours=1), now - timedelta(days=days, hours=1)
    with sql.session() as s, s.begin():
        for when, n in ((inside, 3), (outside, 5)):
            s.add_all([LookupAuditRow(created_at=when, query="q", kb_scope="ops", mode="hybrid", attempts=[],
                                      selected_attempt="UNFILTERED_VECTOR", evidence_keys=[], found=False,
                                      timings_ms={}, result={}) for _ in range(n)])
    args = ["audit", "purge", "--json", "--home", str(home), "--database-url", database_url]
    assert main(args) == 0
    dry = json.loads(capsys.readouterr().out)
    assert main([*args, "--yes"]) == 0
    done = json.loads(capsys.readouterr().out)
    with sql.session() as s:
        left = s.scalars(select(LookupAuditRow.created_at)).all()
    assert dry["would_delete"] == done["deleted"] == 5 and len(left) == 3


# --- 3. a scope or home that does not exist is an error, not "no usable evidence" -------------


def test_an_unknown_scope_is_an_error_naming_the_scopes_and_never_a_gap(settings: Settings, tmp_path: Path, capsys):  # noqa: E501
    from fastapi.testclient import TestClient

    from kbflow.core.stores import close_all
    from kbflow.flows.service import create_app
    from kbflow.retrieval.lookup import reset_retrievers

    docs = tmp_path / "kb"
    write_doc(docs, "good.md", source="good", scope="rag-eval", body=GOOD)
    assert reindex([docs], settings=settings).ok
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/lookup", json={"query": "kafka consumer lag", "kb_scope": "rag_eval"})
        assert r.status_code == 404 and "did you mean 'rag-eval'" in r.json()["detail"]
        good = client.post("/v1/lookup", json={"query": "disk full", "kb_scope": "rag-eval"})
        assert good.status_code == 200
    reset_retrievers()
    close_all()
    from kbflow.flows.cli import main

    capsys.readouterr()
    code = main(["lookup", "kafka consumer lag", "--scope", "RAG-EVAL", "--home", str(settings.home)])
    err = capsys.readouterr().err
    assert code == 2 and "no scope 'RAG-EVAL' (scopes are case-sensitive)" in err
    assert "the scopes are rag-eval" in err and "did you mean 'rag-eval'" in err
    with SqlStore(settings.resolved_database_url).session() as s:  # audited: the one real lookup
        assert [r.kb_scope for r in s.scalars(select(LookupAuditRow))] == ["rag-eval"]


def test_a_read_command_finds_the_home_above_and_never_makes_one(tmp_path: Path):
    docs, project = tmp_path / "kb", tmp_path / "project"
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    (project / "deep" / "er").mkdir(parents=True)
    exe = str(Path(sys.executable).with_name("kbflow"))
    env = {k: v for k, v in os.environ.items() if k != "KBFLOW_HOME"}

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)

    lost = run("lookup", "disk full", "--scope", "ops", cwd=project / "deep")
    assert lost.returncode == 2 and f"no kbflow home at {project / 'deep' / '.kbflow'}" in lost.stderr
    assert not any(p.name == ".kbflow" for p in tmp_path.rglob(".kbflow"))  # nothing left behind
    assert run("reindex", str(docs), cwd=project).returncode == 0  # makes ./.kbflow
    found = run("lookup", "disk full", "--scope", "ops", cwd=project / "deep" / "er")
    assert found.returncode == 0 and found.stdout.startswith("evidence ")  # FOUND or WEAK
    assert sorted(p.parent for p in tmp_path.rglob(".kbflow")) == [project]


# --- 5. the same question gets the same treatment on every path ------------------------------


def test_the_python_api_truncates_a_long_query_and_takes_exclude_as_one_source(settings: Settings, tmp_path: Path):  # noqa: E501
    from pydantic import ValidationError

    from kbflow.retrieval.request import LookupRejected

    docs = tmp_path / "kb"
    write_doc(docs, "good.md", source="good", scope="ops", body=GOOD)
    assert reindex([docs], settings=settings).ok
    long = "disk full on the database volume " * 3000
    result = lookup_knowledge(long, kb_scope="ops", settings=settings)
    assert result.query_truncated and result.query == " ".join(long.split())[:500]
    assert result.evidence and result.evidence[0].doc_id == "good"
    assert not lookup_knowledge("disk full", kb_scope="ops", settings=settings, exclude="good").evidence
    with pytest.raises(LookupRejected, match="a string or a list of strings"):
        lookup_knowledge("disk full", kb_scope="ops", settings=settings, exclude=[b"good"])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="max_query_chars"):
        Settings(home=tmp_path / "h", max_query_chars=5000)  # more than one HTTP body carries


def test_an_evidence_key_holds_one_hash_even_for_a_url_source(settings: Settings, tmp_path: Path):
    from kbflow.core.evidence_keys import evidence_key, source_of
    from kbflow.insights.gaps import doc_of

    url = "https://wiki.example/runbooks/disk#full-volume%20fix"
    docs = tmp_path / "kb"
    write_doc(docs, "good.md", source=url, scope="ops", body=GOOD)
    assert reindex([docs], settings=settings).ok
    [first, *_] = lookup_knowledge("disk full", kb_scope="ops", settings=settings).evidence
    assert first.doc_id == url and first.evidence_key.count("#") == 1
    assert first.evidence_key.split("#")[0] == "https://wiki.example/runbooks/disk%23full-volume%2520fix"
    assert source_of(first.evidence_key) == doc_of(first.evidence_key) == url
    assert source_of(f"{url}#3") == url  # a key stored before the escaping still reads
    assert evidence_key("plain-id", 0) == "plain-id#0"  # a plain id's key is as it always was


# --- the README's promise: no traceback, one line, the exit code — for every command ----------

# every leaf command with arguments that reach its work; {kb}, {gone}, {out}, {port} filled in
EVERY_COMMAND = {
    "reindex": ["reindex", "{kb}"],
    "status": ["status"],
    "docs list": ["docs", "list"],
    "scope delete": ["scope", "delete", "ops"],
    "forget": ["forget", "{gone}"],
    "lookup": ["lookup", "disk full", "--scope", "ops"],
    "eval": ["eval", "--offline"],
    "gaps": ["gaps"],
    "report": ["report", "--html", "{out}"],
    "audit purge": ["audit", "purge"],
    "serve": ["serve", "--port", "{port}"],
    "serve-flows": ["serve-flows", "--dry-run"],
    "db": ["db", "current"],
    "store": ["store", "migrate"],
    "config show": ["config", "show"],
}
# they never open the SQL database (store migrate: not on a home with nothing to migrate)
NO_DATABASE = {"eval", "serve-flows", "config show", "store"}
# the documented exit of each as called above, when nothing goes wrong (default 0)
USUAL_EXIT = {"forget": {1},  # nothing is indexed from a root that never was
              "eval": {0, 1}}  # exit 1 when a frozen case fails (some dense cases do, by design)


def _leaf_commands() -> dict[str, object]:
    """{command: its parser} for every command that runs something."""
    import argparse

    from kbflow.flows.cli import build_parser

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...] = ()):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield " ".join(path), p
        for a in subs:
            for name, sub in a.choices.items():
                yield from walk(sub, (*path, name))

    return dict(walk(build_parser()))


def _argv(name: str, tmp: Path, **extra: str) -> list[str]:
    from kbflow.flows.serve import free_port

    fill = {"kb": str(tmp / "kb"), "gone": str(tmp / "gone"), "out": str(tmp / "r.html"),
            "port": str(free_port())}
    return [a.format(**fill) for a in EVERY_COMMAND[name]]


def _run_all(jobs: dict[str, list[str]], env: dict[str, str], cwd: Path, close_stdout: bool = False,
             at_once: int = 1):
    """Run the commands (one at a time: a Milvus Lite file has one owner); {name: (exit, stderr)}."""
    from concurrent.futures import ThreadPoolExecutor

    exe = str(Path(sys.executable).with_name("kbflow"))

    def one(argv: list[str]) -> tuple[int, str]:
        out = subprocess.PIPE if close_stdout else subprocess.DEVNULL
        proc = subprocess.Popen([exe, *argv], stdout=out, stderr=subprocess.PIPE, env=env, cwd=cwd)
        if close_stdout:
            proc.stdout.close()  # `| head -c 0`: the reader is gone before the first write
        err = proc.stderr.read().decode()
        return proc.wait(timeout=300), err

    with ThreadPoolExecutor(at_once) as pool:
        done = dict(zip(jobs, pool.map(one, jobs.values()), strict=True))
    return done


def _one_line(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kbflow: error:")]


def test_every_command_keeps_the_one_line_promise(tmp_path: Path):
    """Every command, with an unreachable database, piped into a reader that stops, and given a
    scope that does not exist: no traceback, one line naming the thing, the documented exit."""
    leaves = _leaf_commands()
    assert set(EVERY_COMMAND) == set(leaves), "a new command must join this table"
    write_doc(tmp_path / "kb", "good.md", source="good", scope="ops", body=GOOD)
    home = tmp_path / "home"
    env = {**os.environ, "KBFLOW_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    assert run_cli("reindex", str(tmp_path / "kb"), home=home).returncode == 0

    unreachable = {**env, "KBFLOW_DATABASE_URL": "postgresql+psycopg://kb:hunter2@127.0.0.1:1/kb"}
    every = {n: _argv(n, tmp_path) for n in EVERY_COMMAND}
    for name, (code, err) in _run_all(every, unreachable, tmp_path, at_once=4).items():  # no store opens
        assert "Traceback" not in err and "hunter2" not in err, (name, err)
        if name in NO_DATABASE:
            assert code in USUAL_EXIT.get(name, {0}), (name, code, err)
        else:
            assert code == 3 and len(_one_line(err)) == 1, (name, code, err)
            assert "cannot reach the database" in _one_line(err)[0], (name, err)

    piped = {n: _argv(n, tmp_path) for n in EVERY_COMMAND if n != "serve"}  # serve writes no stdout
    for name, (code, err) in _run_all(piped, env, tmp_path, close_stdout=True).items():
        assert "Traceback" not in err and "BrokenPipe" not in err, (name, err)
        assert code in USUAL_EXIT.get(name, {0}), (name, code, err)

    unknown = {
        "lookup": ["lookup", "disk full", "--scope", "Ops"],
        "docs list": ["docs", "list", "--scope", "Ops"],
        "gaps": ["gaps", "--scope", "Ops"],
        "report": ["report", "--html", str(tmp_path / "r.html"), "--scope", "Ops"],
        "eval": ["eval", "calibrate", "--self", "--scope", "Ops"],
        "scope delete": ["scope", "delete", "Ops"],  # deleting nothing: exit 1, as documented
    }
    with_scope = {n for n, p in leaves.items() if any(a.dest == "scope" for a in p._actions)}
    assert set(unknown) == with_scope - {"reindex"}  # reindex --scope makes a scope
    for name, (code, err) in _run_all(unknown, env, tmp_path).items():
        lines = [line for line in err.splitlines() if line.startswith("kbflow:") and "loading" not in line]
        assert "Traceback" not in err and len(lines) == 1 and "'Ops'" in lines[0], (name, err)
        assert code == (1 if name == "scope delete" else 2), (name, code, err)
        assert name == "eval" or "the scopes are ops" in lines[0], (name, err)
