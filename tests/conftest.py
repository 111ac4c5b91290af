"""Shared fixtures: real Milvus Lite + SQLite under a temp home, the real packaged model."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kbcore.settings import Settings  # noqa: E402
from kbcore.stores import Stores, close_all, open_stores  # noqa: E402
from retrieval.lookup import reset_retrievers  # noqa: E402

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
