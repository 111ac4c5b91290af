"""Calibration without labels: pseudo-queries from a scope's own documents, asked with their
document and left out, fitted into the scope's gate by `kbflow eval calibrate --self`."""

from __future__ import annotations

import json

from kbflow.calibration.self_queries import pseudo_queries
from kbflow.core.chunk_store import ChunkRow
from tests.conftest import REPO, run_cli


def chunk(source: str, i: int, title: str, heading: str, text: str) -> ChunkRow:
    return ChunkRow(f"{source}#{i}", source, source, f"{source}.md", "ops", "", "", title, heading, i, text)


def corpus(n: int) -> list[ChunkRow]:
    rows = []
    for d in range(n):
        rows += [
            chunk(f"doc{d}", 0, f"Replica {d} lag on shard{d}", "Symptoms",
                  f"The replica{d} falls behind the primary when shard{d} takes bulk writes.\n\n"
                  "```\nSELECT * FROM pg_stat_replication WHERE state = 'streaming';\n```\n"),
            chunk(f"doc{d}", 1, f"Replica {d} lag on shard{d}", f"Throttle the importer{d} nightly",
                  f"Lower the importer{d} batch size so WAL shipping for shard{d} keeps pace overnight."),
        ]
    return rows


def stored_calibrations(home) -> list[tuple[dict, dict]]:
    from kbflow.core.settings import Settings
    from kbflow.core.sql import CalibrationRow, SqlStore

    with SqlStore(Settings(home=home).resolved_database_url).session() as session:
        return [(row.params, row.data) for row in session.query(CalibrationRow)]


def forget_recipes(home) -> None:
    """Make the stored calibrations look like ones stored before recipes were kept."""
    from kbflow.core.settings import Settings
    from kbflow.core.sql import CalibrationRow, SqlStore

    sql = SqlStore(Settings(home=home).resolved_database_url)
    with sql.session() as session, session.begin():
        for row in session.query(CalibrationRow):
            row.data = {k: v for k, v in row.data.items() if k != "recipe"}


def test_pseudo_queries_are_deterministic_and_read_as_text():
    rows = corpus(12)
    first = pseudo_queries(rows, max_docs=5, seed=3)
    assert first == pseudo_queries(list(reversed(rows)), max_docs=5, seed=3)  # order of rows is irrelevant
    assert len({q.source for q in first}) == 5
    assert {q.kind for q in first} == {"title", "heading", "sentence", "keywords"}
    by_kind = {(q.source, q.kind): q.text for q in first}
    source = first[0].source
    n = source.removeprefix("doc")
    assert by_kind[(source, "title")] == f"Replica {n} lag on shard{n}"
    # "Symptoms" heads every document: it names none of them, so the specific heading is asked
    assert by_kind[(source, "heading")] == f"Throttle the importer{n} nightly"
    assert all("SELECT" not in q.text for q in first)  # code blocks are not where questions come from
    assert {q.source for q in pseudo_queries(rows, max_docs=5, seed=4)} != {q.source for q in first}


def test_calibrate_self_fits_the_scope_and_status_says_so(tmp_path):
    """The whole path on real parts: seed docs indexed, pseudo-queries asked twice through the
    real lookup (their document in, then left out), the fit stored for (model, scope), and
    `kbflow status` naming its origin; bad input exits 2 with the reason."""
    home = tmp_path / "home"
    out = run_cli("reindex", str(REPO / "seed-docs"), "--scope", "rag-eval", home=home)
    assert out.returncode == 0, out.stderr
    out = run_cli("eval", "calibrate", "--self", "--scope", "rag-eval", "--max-docs", "12", home=home)
    assert out.returncode in (0, 1), out.stderr  # 1: the objective cannot be met on these pairs
    assert "pseudo-queries from scope rag-eval" in out.stderr
    assert "true no-evidence near-domain" in out.stdout and "not stored" in out.stdout
    assert "the gate lookups in scope rag-eval use now (logistic for" in out.stdout  # the packaged one
    assert "their leave-out twins answered" in out.stdout
    status = json.loads(run_cli("status", "--json", home=home).stdout)
    assert status["scopes"][0]["calibration"]["origin"] == "packaged"  # shown, not used
    args = ("eval", "calibrate", "--self", "--scope", "rag-eval", "--max-docs", "12", "--store")
    out = run_cli(*args, home=home)
    assert out.returncode in (0, 1), out.stderr
    assert "stored for model" in out.stdout
    [(params, data)] = stored_calibrations(home)
    assert set(params["weights"]) == {"bias", "cosine"}  # a lifted sentence's coverage says nothing
    assert data["recipe"]["self_pairs"] and data["recipe"]["max_docs"] == 12  # what a refit replays
    status = json.loads(run_cli("status", "--json", home=home).stdout)
    cal = {s["kb_scope"]: s["calibration"] for s in status["scopes"]}
    assert cal["rag-eval"]["origin"] == "self" and cal["rag-eval"]["stored_for"] == "rag-eval"
    assert "self: " in cal["rag-eval"]["source"]
    text = run_cli("status", home=home).stdout
    assert "gate calibration: self, fitted" in text and "refit it" not in text
    assert " ago) for this scope" in text or "(just now) for this scope" in text  # its age

    # a full rebuild refits it on the recipe it was stored with: never older than its collection
    fitted = cal["rag-eval"]["created_at"]
    out = run_cli("reindex", str(REPO / "seed-docs"), "--scope", "rag-eval", "--full", home=home)
    assert out.returncode == 0, out.stderr
    assert "gate calibration of scope rag-eval" in out.stdout and ": refitted — self, " in out.stdout
    again = json.loads(run_cli("status", "--json", home=home).stdout)["scopes"][0]["calibration"]
    assert again["origin"] == "self" and again["created_at"] > fitted and "stale" not in again

    # one stored before calibrations kept their recipe cannot be refitted: kept, and flagged
    forget_recipes(home)
    out = run_cli("reindex", str(REPO / "seed-docs"), "--scope", "rag-eval", "--full", "--json", home=home)
    assert out.returncode == 0, out.stderr
    [refit] = json.loads(out.stdout)["calibrations"]
    assert refit["outcome"] == "no recipe" and "kbflow eval calibrate" in refit["detail"]
    status = json.loads(run_cli("status", "--json", home=home).stdout)
    assert "fitted before the last full rebuild" in status["scopes"][0]["calibration"]["stale"]
    assert status["scopes"][0]["calibration"]["origin"] == "self"  # still the one lookups use
    assert "refit it (`kbflow eval calibrate --refresh`)" in run_cli("status", home=home).stdout
    out = run_cli("eval", "calibrate", "--refresh", home=home)
    assert out.returncode == 1 and "no recipe" in out.stdout

    bad = run_cli("eval", "calibrate", "--self", "--scope", "nowhere", home=home)
    assert bad.returncode == 2 and "nowhere" in bad.stderr and "not indexed" in bad.stderr
    assert run_cli("eval", "calibrate", "--self", home=home).returncode == 2  # --self needs a scope
