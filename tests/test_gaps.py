"""The owner's view: `kbflow gaps` finds what agents asked that the knowledge base could not
answer, from a real audit of real lookups; the audit's retention and privacy modes."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from kbflow.core.settings import Settings
from kbflow.core.sql import DocumentRow, L0EntryRow, LookupAuditRow, SqlStore
from kbflow.ingest.reindex import reindex
from kbflow.retrieval.audit import purge_expired
from kbflow.retrieval.lookup import lookup_knowledge
from tests.conftest import REPO, run_cli


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gaps", REPO / "bench" / "gaps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """The English golden corpus and ~550 real lookups: 250 answerable golden questions, and the
    100 questions of 5 uncovered topics, each asked 3 times by 3 callers."""
    bench = _bench()
    base = tmp_path_factory.mktemp("gaps")
    settings = Settings(home=base / "home")
    assert reindex([bench.seeded_corpus(base / "corpus")], settings=settings).ok
    truth, returned = bench.seeded_audit(settings, "en", answerable=250, repeats=3)
    return settings, truth, returned, bench.topics("en")


def test_gaps_lists_the_seeded_topics_first_each_pure(audited):
    settings, truth, _, topics = audited
    cli = run_cli("gaps", "--json", home=settings.home)
    assert cli.returncode == 0, cli.stderr
    report = json.loads(cli.stdout)
    assert report["lookups"] == len(truth) and report["unanswered"] >= 200
    found_topics = []
    for group in report["groups"][:5]:
        labels = Counter(truth[i] for i in group["ids"])
        topic, n = labels.most_common(1)[0]
        assert n / group["count"] >= 0.8, (group["label"], labels)
        assert group["callers"] == 3 and len(group["examples"]) == 3
        assert all(e in topics[topic] for e in group["examples"])
        assert group["nearest"] and group["first_seen"] <= group["last_seen"]
        found_topics.append(topic)
    assert sorted(found_topics) == sorted(topics), [g["label"] for g in report["groups"][:5]]
    rescued = {r["query"]: r for r in report["rescued"]}  # the golden fallback case, asked by 3 callers
    fallback = rescued["chat messages arrive late and consumer lag keeps growing"]
    assert fallback["misleading_category"] and fallback["found"] == "kafka-consumer-lag"
    # only real rescues: evidence at a level, in a document outside the category the hint chose
    sql = SqlStore(settings.resolved_database_url)
    with sql.session() as s:
        for r in report["rescued"]:
            category = s.scalars(select(L0EntryRow.category).where(L0EntryRow.doc_id == r["found"])).first()
            assert category != r["misleading_category"], r
        levels = s.scalars(
            select(LookupAuditRow.relevance_level).where(LookupAuditRow.query.in_(list(rescued)))
        ).all()
    assert levels and None not in levels
    labels = " ".join(g["label"] for g in report["groups"][:5])
    assert all(word in labels for word in ("elasticsearch", "terraform", "jenkins", "vault", "cassandra"))


def test_no_answered_lookup_is_in_any_group(audited):
    settings, *_ = audited
    report = json.loads(run_cli("gaps", "--json", home=settings.home).stdout)
    sql = SqlStore(settings.resolved_database_url)
    with sql.session() as s:
        answered = set(s.scalars(select(LookupAuditRow.id).where(LookupAuditRow.outcome == "found")))
    grouped = {i for g in report["groups"] for i in g["ids"]}
    assert answered and grouped and not answered & grouped
    assert len(grouped) == report["unanswered"]  # every unanswered lookup is in one group


def test_documents_never_returned_are_listed_exactly(audited):
    settings, _, returned, _ = audited
    report = json.loads(run_cli("gaps", "--json", "--scope", "rag-eval", home=settings.home).stdout)
    sql = SqlStore(settings.resolved_database_url)
    with sql.session() as s:
        every = set(s.scalars(select(DocumentRow.doc_id).where(DocumentRow.kb_scope == "rag-eval")))
    assert report["never_returned"] == sorted(f"rag-eval:{d}" for d in every - returned)
    assert 0 < len(report["never_returned"]) < len(every)
    top, count = report["most_returned"][0]
    assert top.startswith("rag-eval:") and count > 1


def test_the_readable_report_and_its_markdown(audited, tmp_path):
    settings, *_ = audited
    cli = run_cli("gaps", "--since", "1d", "--markdown", str(tmp_path / "gaps.md"), home=settings.home)
    assert cli.returncode == 0, cli.stderr
    assert "knowledge gaps — every scope" in cli.stdout and "documents never returned" in cli.stdout
    md = (tmp_path / "gaps.md").read_text(encoding="utf-8")
    assert md.startswith("# Knowledge gaps") and "| # | about | lookups | callers |" in md
    bad = run_cli("gaps", "--since", "7x", home=settings.home)
    assert bad.returncode == 2 and "24h, 7d or 4w" in bad.stderr


def test_the_knowledge_gaps_flow_publishes_its_artifact(audited, prefect_harness):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from kbflow.flows.gaps import knowledge_gaps_flow

    settings, *_ = audited
    report = knowledge_gaps_flow(home=str(settings.home), since="1d")
    assert report["unanswered"] >= 200

    async def artifacts(name: str):
        async with get_client() as client:
            key = ArtifactFilter(key=ArtifactFilterKey(any_=[name]))
            return await client.read_artifacts(artifact_filter=key)

    assert any("What agents asked" in a.data for a in asyncio.run(artifacts("knowledge-gaps")))
    links = asyncio.run(artifacts("kbflow-report"))
    page = settings.home.resolve() / "reports" / "kbflow-report.html"
    assert page.exists() and any(page.as_uri() in a.data for a in links)


def test_serve_flows_schedules_knowledge_gaps_weekly(tmp_path):
    cli = run_cli("serve-flows", "--dry-run", home=tmp_path / "home")
    assert cli.returncode == 0, cli.stderr
    flows = {d["flow"]: d["cron"] for d in json.loads(cli.stdout)}
    assert flows["knowledge-gaps"] == "0 7 * * 1"
    assert flows["calibration-refresh"] == "30 5 * * *"  # between the corpus refresh and the eval


@pytest.fixture(scope="module")
def small_home(tmp_path_factory):
    base = tmp_path_factory.mktemp("audit")
    settings = Settings(home=base / "home")
    assert reindex([_bench().seeded_corpus(base / "corpus")], settings=settings).ok
    return base


def test_hashed_mode_keeps_no_question_text_and_still_groups(small_home):
    settings = Settings(home=small_home / "home", audit_store_queries="hashed")
    topics = _bench().topics("en")
    asked = topics["vault"][:8] + topics["cassandra"][:8]
    ids = [lookup_knowledge(q, kb_scope="rag-eval", settings=settings).audit_id for q in asked]
    sql = SqlStore(settings.resolved_database_url)
    with sql.session() as s:
        rows = s.scalars(select(LookupAuditRow).where(LookupAuditRow.id.in_(ids))).all()
        stored = json.dumps([[r.query, r.attempts, r.result] for r in rows], ensure_ascii=False)
        kept = [(r.query_hash, r.query_vector) for r in rows if r.outcome != "found"]
    assert not any(q in stored for q in asked)
    assert "vault" not in stored.lower() and "cassandra" not in stored.lower()
    assert kept and all(h and v for h, v in kept)
    from kbflow.insights.gaps import knowledge_gaps, model_embedder

    report = knowledge_gaps(sql, model_embedder(settings), since=timedelta(hours=1))
    mine = [g for g in report.groups if set(g.ids) & set(ids)]
    assert mine and all(g.examples == [] and g.label == "(question text not kept)" for g in mine)
    assert max(g.count for g in mine) >= 4  # grouped on the embeddings alone


def test_none_mode_keeps_nothing_of_the_question(small_home):
    settings = Settings(home=small_home / "home", audit_store_queries="none")
    result = lookup_knowledge("vault is sealed after a restart", kb_scope="rag-eval", settings=settings)
    with SqlStore(settings.resolved_database_url).session() as s:
        row = s.get(LookupAuditRow, result.audit_id)
        assert row.query == "" and row.query_hash is None and row.query_vector is None
        assert "vault" not in json.dumps([row.attempts, row.result]).lower()


def test_purge_deletes_only_expired_rows_while_lookups_keep_answering(small_home):
    settings = Settings(home=small_home / "home")
    sql = SqlStore(settings.resolved_database_url)
    template = lookup_knowledge("kafka consumer lag", kb_scope="rag-eval", settings=settings).audit_id
    old = datetime.now(UTC) - timedelta(days=400)
    with sql.session() as s, s.begin():
        row = s.get(LookupAuditRow, template)
        columns = [c.key for c in LookupAuditRow.__table__.columns if c.key != "id"]
        copy = {c: getattr(row, c) for c in columns}
        s.execute(LookupAuditRow.__table__.insert(), [{**copy, "created_at": old}] * 20_000)
    results, stop = [], threading.Event()

    def ask() -> None:
        while not stop.is_set():
            results.append(
                lookup_knowledge("disk full no space left", kb_scope="rag-eval", settings=settings)
            )

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        purged = purge_expired(sql, retention_days=90)
    finally:
        stop.set()
        asker.join()
    assert purged == 20_000
    assert results and all(r.found and r.audit_id and not r.audit_error for r in results)
    with sql.session() as s:
        left = s.scalars(select(LookupAuditRow.created_at)).all()
    assert left and min(t if t.tzinfo else t.replace(tzinfo=UTC) for t in left) > old + timedelta(days=300)
    assert purge_expired(sql, retention_days=0) == 0  # 0 keeps everything
    with sql.session() as s, s.begin():  # backdate everything: the CLI dry run counts, --yes deletes
        s.execute(update(LookupAuditRow).values(created_at=old))
    dry = run_cli("audit", "purge", "--json", home=settings.home)
    assert json.loads(dry.stdout)["would_delete"] == len(left)
    done = run_cli("audit", "purge", "--yes", "--json", home=settings.home)
    assert json.loads(done.stdout)["deleted"] == len(left)


def test_rows_audited_before_kbflow_kept_embeddings_are_embedded_again(small_home):
    """Rows written before the owner's-view columns existed hold NULL there: gaps embeds their
    text with their scope's model, and reads their outcome from `found` and the level."""
    settings = Settings(home=small_home / "home")
    sql = SqlStore(settings.resolved_database_url)
    old = {
        "kb_scope": "rag-eval",
        "mode": "hybrid",
        "attempts": [],
        "selected_attempt": "FILTERED_VECTOR",
        "evidence_keys": [],
        "relevance_level": None,
        "found": False,
        "timings_ms": {},
        "result": {},
    }
    questions = [
        "jenkins agents offline",
        "jenkins build agents are offline again",
        "jenkins agent went offline",
    ]
    with sql.session() as s, s.begin():
        s.execute(LookupAuditRow.__table__.insert(), [{**old, "query": q} for q in questions])
    from kbflow.insights.gaps import knowledge_gaps, model_embedder

    report = knowledge_gaps(sql, model_embedder(settings), scope="rag-eval", since=timedelta(hours=1))
    jenkins = [g for g in report.groups if "jenkins" in g.label]
    assert len(jenkins) == 1 and jenkins[0].count == 3 and report.ungrouped == 0


def test_a_home_with_nothing_in_it_is_told_not_created(tmp_path):
    for command in (["gaps"], ["report", "--html", str(tmp_path / "r.html")], ["audit", "purge"]):
        done = run_cli(*command, home=tmp_path / "nowhere")
        assert done.returncode == 2 and "no kbflow home at" in done.stderr, done.stderr
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("language", ["en", "zh"])
def test_single_product_gaps_are_kept_apart_and_named_without_the_product(tmp_path, language):
    """A scope about one product (ledgerd; TiCDC): its name is in every document and in every
    question. Three different gaps stay three groups, and no label is the product's name."""
    bench = _bench()
    settings = Settings(home=tmp_path / "home")
    truth = bench.single_product_audit(settings, language, repeats=1)
    case = bench.single_product(language)
    cli = run_cli("gaps", "--json", "--scope", case["scope"], home=settings.home)
    assert cli.returncode == 0, cli.stderr
    report = json.loads(cli.stdout)
    top = report["groups"][:3]
    gaps = set()
    for group in top:
        topic, n = Counter(truth[i] for i in group["ids"]).most_common(1)[0]
        assert n / group["count"] >= 0.75, (group["label"], group["ids"])
        gaps.add(topic)
    assert gaps == set(case["topics"]), [g["label"] for g in report["groups"]]
    product = case["product"].lower()
    assert not any(product in g["label"].lower() for g in report["groups"]), [g["label"] for g in top]
    assert all(product in e.lower() for g in top for e in g["examples"])  # the questions as asked
