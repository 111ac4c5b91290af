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


def test_the_readmes_headline_figures_are_the_committed_runs():
    """README's "Where it stands" is generated from the baseline and bench/results: a figure
    changed by hand, or a run committed without regenerating it, fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("where_it_stands", REPO / "scripts" / "where_it_stands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    readme = module.readme_block((REPO / "README.md").read_text(encoding="utf-8"))
    assert readme == module.table(), "README.md is stale: run python scripts/where_it_stands.py --readme"


def reading_order() -> list[Path]:
    """The README, then the docs pages in the site's navigation order (mkdocs.yml)."""
    nav = re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?(\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M)
    pages = [REPO / "docs" / name for name in nav]
    return [REPO / "README.md", *pages, *(p for p in PAGES[1:] if p not in pages)]


WALK = [p for p in reading_order() if any(title == "tested" for title, _ in shell_blocks(p))]
# what a page says its tested commands print, checked on the reader's home
CLAIMS = {
    "README.md": ["verdict: PASS — regressions: none", "evidence FOUND — level"],
    "lookups.md": ["evidence WEAK —", "no usable evidence —"],
}
# what the README's set-up and its tour need of the checkout (a new user's clone)
CHECKOUT = ("pyproject.toml", "README.md", "scripts", "seed-docs", "eval")


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A new user's machine after the README's set-up: a checkout (file times kept) whose .venv is
    this one, HOME in a temporary folder, no KBFLOW_HOME, and `bash scripts/demo.sh` run in it —
    seed-docs/ indexed into the checkout's ./.kbflow."""
    import shutil

    base = tmp_path_factory.mktemp("reader")
    checkout, venv = base / "kbflow", Path(sys.executable).parent.parent
    checkout.mkdir()
    for name in CHECKOUT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, checkout / name, ignore=shutil.ignore_patterns("__pycache__", ".work"))
        else:
            shutil.copy2(src, checkout / name)
    (checkout / ".venv").symlink_to(venv)
    stamp = venv / ".kbflow-installed"
    if not stamp.exists() or (checkout / "pyproject.toml").stat().st_mtime > stamp.stat().st_mtime:
        pytest.skip("the .venv was not made by scripts/bootstrap.sh from this pyproject.toml")
    (base / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "KBFLOW_HOME"}
    env |= {
        "HOME": str(base / "home"),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
    }
    demo = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert (checkout / ".kbflow").is_dir() and "rag-eval-zh" in demo.stdout
    return checkout, env


@pytest.mark.parametrize("page", WALK, ids=lambda p: p.name)
def test_readme_then_every_guide_runs_as_written_on_one_home(reader, page: Path):
    """Each page's tested blocks, in reading order, in one shell per page, on the home the README
    built, as a reader following the docs on one machine runs them."""
    checkout, env = reader
    script = "\n".join(text for title, text in shell_blocks(page) if title == "tested")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script + "\nwait\n"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, f"{page.name}\nstdout:\n{ran.stdout[-3000:]}\nstderr:\n{ran.stderr[-3000:]}"
    assert "Traceback" not in ran.stderr
    missing = [claim for claim in CLAIMS.get(page.name, ()) if claim not in ran.stdout]
    assert not missing, f"{page.name} says its commands print {missing}; they did not:\n{ran.stdout[-3000:]}"
