"""The docs stay true: the site builds strictly with its generated references, every shell block
says whether it runs, and the ones titled *tested* do run, as a user would type them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kbflow.core.settings import Settings
from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)(.*)$")
TITLE = re.compile(r'title="([^"]*)"')


def shell_blocks(page: Path) -> list[tuple[str, str]]:
    """(title, text) of each ```bash block of the page, in order."""
    blocks, current, title = [], None, ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if current is None:
            m = FENCE.match(line)
            if m and m.group(1) == "bash":
                found = TITLE.search(m.group(2))
                current, title = [], found.group(1) if found else ""
        elif line == "```":
            blocks.append((title, "\n".join(current)))
            current = None
        else:
            current.append(line)
    return blocks


def test_every_shell_block_says_whether_it_runs():
    untitled = [str(p.relative_to(REPO)) for p in PAGES for title, _ in shell_blocks(p) if not title]
    assert not untitled, f"shell blocks without a title ('tested', or why not): {untitled}"
    assert sum(title == "tested" for p in PAGES for title, _ in shell_blocks(p)) >= 8


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if k != "NO_MKDOCS_2_WARNING"}
    built = subprocess.run(
        ["bash", "scripts/docs.sh", "build", "--strict", "-d", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    # a build says what it did and nothing else: no theme banner, no jieba dictionary notes
    noise = [line for line in built.stderr.splitlines() if line.strip() and not line.startswith("INFO")]
    assert not noise, noise
    return out


def test_the_site_builds_strictly_with_the_cli_reference_generated_from_the_parser(site):
    from kbflow.flows.cli import build_parser
    from scripts.docs_reference import _commands

    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    commands = [line for line, _, _ in _commands(build_parser(), "kbflow")]
    assert {"kbflow reindex", "kbflow eval", "kbflow docs list", "kbflow config show"} <= set(commands)
    missing = [c for c in commands if f">{c}<" not in page]
    assert not missing, f"commands missing from the CLI reference: {missing}"
    assert "--allow-mass-delete" in page and "--max-docs" in page  # the flags of each command, too


def test_the_settings_reference_lists_every_setting_with_its_meaning(site):
    page = (site / "settings" / "index.html").read_text(encoding="utf-8")
    fields = Settings.model_fields
    assert all(f.description for f in fields.values()), [n for n, f in fields.items() if not f.description]
    missing = [n for n in fields if f"KBFLOW_{n.upper()}" not in page]
    assert not missing, f"settings missing from the reference: {missing}"


TESTED_PAGES = [p for p in PAGES if any(title == "tested" for title, _ in shell_blocks(p))]


@pytest.mark.parametrize("page", TESTED_PAGES, ids=lambda p: p.name)
def test_tested_examples_run_as_written(page: Path, tmp_path: Path):
    """The page's tested blocks, in order, in one shell with `kbflow` on PATH: a fresh home
    (HOME and KBFLOW_HOME in a temporary folder) and the repository as the working folder."""
    script = "\n".join(text for title, text in shell_blocks(page) if title == "tested")
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "KBFLOW_HOME": str(tmp_path / ".kbflow"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
    }
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script + "\nwait\n"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, f"{page.name}\nstdout:\n{ran.stdout[-3000:]}\nstderr:\n{ran.stderr[-3000:]}"
    assert "Traceback" not in ran.stderr
