"""Settings from a file: ./kbflow.toml or --config FILE (KBFLOW_CONFIG), below the environment
and the flags, and `kbflow config show` saying where each setting came from."""

from __future__ import annotations

import json
import os

import pytest

from kbflow.core.settings import CONFIG_ENV, Settings
from kbflow.flows.cli import main
from tests.conftest import REPO, write_doc


def show(capsys, *args: str) -> dict:
    assert main(["config", "show", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory of its own, with no settings file or variable from outside."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    for name in ("KBFLOW_DEFAULT_SCOPE", "KBFLOW_CHUNK_MAX_CHARS", "KBFLOW_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_the_repository_holds_no_settings_file():
    assert not (REPO / "kbflow.toml").exists()  # the test suite runs from there


def test_kbflow_toml_in_the_working_directory_is_used_by_a_command(workdir, capsys):
    (workdir / "kbflow.toml").write_text('default_scope = "team-a"\nchunk_max_chars = 1500\n')
    write_doc(workdir / "docs", "a.md", source="doc-a")  # no kb_scope: the default scope
    assert main(["reindex", "docs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scopes"]["team-a"]["documents"] == 1
    assert main(["docs", "list", "--json"]) == 0
    assert [d["kb_scope"] for d in json.loads(capsys.readouterr().out)["documents"]] == ["team-a"]
    settings = show(capsys)["settings"]
    assert settings["chunk_max_chars"] == {"value": 1500, "source": "kbflow.toml"}
    assert settings["home"] == {"value": ".kbflow", "source": "default"}
    assert Settings().default_scope == "team-a"  # the library reads it too


def test_environment_overrides_the_file_and_flags_override_both(workdir, capsys, monkeypatch):
    (workdir / "kbflow.toml").write_text(
        'default_scope = "team-a"\nhome = "from-file"\nchunk_max_chars = 1500\n'
    )
    monkeypatch.setenv("KBFLOW_DEFAULT_SCOPE", "team-b")
    monkeypatch.setenv("KBFLOW_HOME", "from-env")
    data = show(capsys, "--home", "from-flag")
    assert data["file"] == "kbflow.toml"
    s = data["settings"]
    assert s["default_scope"] == {"value": "team-b", "source": "env KBFLOW_DEFAULT_SCOPE"}
    assert s["home"] == {"value": "from-flag", "source": "flag --home"}
    assert s["chunk_max_chars"] == {"value": 1500, "source": "kbflow.toml"}
    assert s["max_evidence"] == {"value": 8, "source": "default"}


def test_config_flag_names_the_file_before_or_after_the_command(workdir, capsys):
    other = workdir / "conf" / "ops.toml"
    other.parent.mkdir()
    other.write_text("return_n = 7\n")
    (workdir / "kbflow.toml").write_text("return_n = 3\n")
    for argv in (
        ["--config", str(other), "config", "show", "--json"],
        ["config", "show", "--json", "--config", "conf/ops.toml"],
    ):
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["file"] == str(other) and data["settings"]["return_n"] == {
            "value": 7,
            "source": str(other),
        }
    assert CONFIG_ENV not in os.environ  # set for the command only
    assert show(capsys)["settings"]["return_n"]["value"] == 3


def test_readable_config_show_lists_every_setting_with_its_source(workdir, capsys):
    (workdir / "kbflow.toml").write_text("return_n = 4\n")
    assert main(["config", "show", "--home", "h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "settings file: kbflow.toml"
    assert len(lines) == 1 + len(Settings.model_fields)
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert set(by_name) == set(Settings.model_fields)
    assert any(line.startswith("return_n ") and line.endswith("  kbflow.toml") for line in lines)
    assert any(line.startswith("home ") and line.endswith("  flag --home") for line in lines)


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "does not exist"),
        ("return_n = \n", "is not valid TOML"),
        ("bogus = 1\n", "unknown setting bogus in"),
        ("return_n = 0\n", "invalid setting return_n (from"),
    ],
)
def test_a_bad_settings_file_is_one_line_naming_it_and_exit_2(workdir, capsys, content, says):
    path = workdir / "bad.toml"
    if content is not None:
        path.write_text(content)
    assert main(["--config", str(path), "status"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert says in err and str(path) in err
