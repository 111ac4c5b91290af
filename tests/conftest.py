"""Shared fixtures: real Milvus Lite + SQLite under a temp home, the real packaged model."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# every test gets a fresh home; the default backend's ONNX export is made once per session and
# shared through the models_dir setting (subprocesses inherit it), not once per home
os.environ.setdefault("KBFLOW_MODELS_DIR", tempfile.mkdtemp(prefix="kbflow-test-models-"))

from kbflow.core.settings import Settings  # noqa: E402
from kbflow.core.stores import Stores, close_all, open_stores  # noqa: E402
from kbflow.retrieval.lookup import reset_retrievers  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def write_doc(
    root: Path,
    name: str,
    *,
    source: str | None = None,
    scope: str | None = None,
    breadcrumb: str | None = "Database > MySQL",
    keywords: list[str] | None = None,
    body: str = "# Title\n\n## Section\n\nSome text about databases.\n",
    extra: str = "",
) -> Path:
    """Write a Markdown file with frontmatter; None leaves a key out."""
    lines = []
    if source is not None:
        lines.append(f"source: {source}")
    if scope is not None:
        lines.append(f"kb_scope: {scope}")
    if breadcrumb is not None:
        lines.append(f"breadcrumb: {breadcrumb}")
    if keywords is not None:
        lines.append(f"keywords: [{', '.join(keywords)}]")
    if extra:
        lines.append(extra)
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + "\n".join(lines) + "\n---\n" + textwrap.dedent(body), encoding="utf-8")
    return path


# Three ops runbooks in scope "ops" whose fix text says which revision is served: the tests of
# a rebuild (killed, or watched step by step) change every document and check what answers.
OPS_TOPICS = {
    "redis-evictions": (
        "Cache > Redis",
        "Redis evictions",
        "evicted_keys keeps growing because Redis reached maxmemory",
    ),
    "kafka-lag": (
        "Message Queue > Kafka",
        "Kafka consumer lag",
        "the consumer group lag keeps growing and records-lag-max rises",
    ),
    "mysql-pool": (
        "Database > MySQL",
        "MySQL connection pool exhausted",
        "HikariCP reports connection is not available after 30000ms",
    ),
}
OPS_FIXES = {
    1: "Raise maxmemory, then restart the consumer or the pool (runbook revision one).",
    2: "Scale out the instance and alert the owning team first (runbook revision two).",
}


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    """The installed `kbflow` command on `home`, as a user runs it."""
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    exe = Path(sys.executable).with_name("kbflow")
    return subprocess.run(
        [str(exe), *args, "--home", str(home)], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )


def wait_until_healthy(base: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until a started `kbflow serve` answers /healthz; fails with its stderr if it exits."""
    import httpx

    deadline = time.time() + timeout
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "service did not come up"
        time.sleep(0.5)


def write_ops_corpus(docs: Path, revision: int) -> None:
    """Write the ops corpus at `revision` (1 or 2)."""
    for source, (breadcrumb, title, symptom) in OPS_TOPICS.items():
        write_doc(
            docs,
            f"{source}.md",
            source=source,
            scope="ops",
            breadcrumb=breadcrumb,
            body=f"# {title}\n\n## Symptoms\n\nWhen {symptom}: {OPS_FIXES[revision]}\n",
        )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture(autouse=True)
def _close_stores():
    """Each test gets its own Milvus Lite file; release the previous one's handles."""
    yield
    reset_retrievers()
    close_all()


@pytest.fixture
def stores(settings: Settings) -> Stores:
    return open_stores(settings)


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for the whole session (it takes seconds to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


POSTGRES_URL = os.environ.get("KBFLOW_TEST_POSTGRES_URL", "")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path: Path):
    """A fresh database per test: a SQLite file, or a new database on the PostgreSQL server that
    KBFLOW_TEST_POSTGRES_URL names (.ci/run starts one on loopback; locally:
    `export KBFLOW_TEST_POSTGRES_URL=$(bash scripts/postgres.sh)`). Without it the PostgreSQL
    cases are skipped."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kb.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("KBFLOW_TEST_POSTGRES_URL not set (CI sets it; locally: bash scripts/postgres.sh)")
    import uuid

    from sqlalchemy import create_engine, text

    name = f"kbflow_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))  # name is generated here, not user input
    yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    reset_retrievers()
    close_all()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
