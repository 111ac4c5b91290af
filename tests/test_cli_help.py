"""The CLI's shape: every command dispatches through its own handler, every flag and
positional says what it does, and every expected error is one line with its class's exit code."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from kbflow.core.errors import InputError, KbflowError, StoreError
from kbflow.flows import cli
from kbflow.flows.cli import build_parser, main
from tests.conftest import REPO


def _parsers(parser: argparse.ArgumentParser, path: str = "kbflow"):
    """(command path, parser) for the top-level parser and every subcommand, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_flag_and_positional_has_help_text():
    missing = [
        f"{path}: {'/'.join(action.option_strings) or action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert not missing, f"arguments without help text: {missing}"


def test_every_subcommand_has_help_text():
    missing = [
        f"{path}: {choice.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
        if not (choice.help or "").strip()
    ]
    assert not missing, f"commands without help text: {missing}"


def test_every_command_dispatches_to_a_handler():
    leaves = [
        (path, parser)
        for path, parser in _parsers(build_parser())
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    ]
    # reindex, status, docs list, scope delete, forget, lookup, eval, serve, serve-flows, db, config show
    assert len(leaves) >= 11
    for path, parser in leaves:
        assert callable(parser.get_default("func")), f"{path} sets no func"


@pytest.mark.parametrize("error, code", [(InputError, 2), (StoreError, 3), (KbflowError, 2)])
def test_an_expected_error_is_one_line_with_its_class_exit_code(monkeypatch, capsys, tmp_path, error, code):
    def fails(args, settings):
        raise error("the store is\nbusy")

    monkeypatch.setattr(cli.manage, "status", fails)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "kbflow.db").touch()  # a home: status reads one, never makes one
    assert main(["status", "--home", str(tmp_path / "home")]) == code
    out, err = capsys.readouterr()
    assert out == "" and err == "kbflow: error: the store is busy\n"  # one line, no traceback


def test_python_dash_m_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "kbflow.flows.cli", "config", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0 and "show" in done.stdout, done.stderr


HEAVY = ("pymilvus", "torch", "prefect", "onnxruntime", "sqlalchemy")
IMPORTS_OF = """
import contextlib, io, sys
from kbflow.flows.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.mark.parametrize(
    "command", [["--help"], ["config", "show"], ["lookup", "--help"], ["reindex", "--help"]]
)
def test_help_and_config_show_load_no_store_model_or_prefect(command, tmp_path):
    """A command imports what it uses, when it uses it: the fast ones load no store, model or
    Prefect (kbflow config show took 5.9 s when it imported pymilvus, torch and Prefect)."""
    code = [sys.executable, "-c", IMPORTS_OF, *command]
    done = subprocess.run(code, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "kbflow" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
