"""The docs' generated references, and the MkDocs hook that puts them in their pages.

The CLI reference is built from `kbflow`'s own argparse parser and the settings reference from
the `Settings` model, at every `mkdocs build`: a flag or a setting added to the code appears in
the docs with nothing to remember. A page asks for one with a marker line:

    <!-- generated: cli -->
    <!-- generated: settings -->
    <!-- generated: where-it-stands -->   (the README's headline table, scripts/where_it_stands.py)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # Material's end-of-life banner on every build


def on_startup(**_: Any) -> None:
    """MkDocs hook: the search index cuts Chinese pages with jieba; its dictionary notes (four
    lines on stderr per build) are kept off."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)


MARKERS = {
    "<!-- generated: cli -->": "cli",
    "<!-- generated: settings -->": "settings",
    "<!-- generated: where-it-stands -->": "where-it-stands",
}


def _commands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, str, Any]]:
    """(command line, one-line help, parser) for the parser and every sub-command under it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", helps.get(name, ""), sub
                yield from _commands(sub, f"{prefix} {name}")


def cli_reference() -> str:
    """Every command's `--help`, as `kbflow COMMAND --help` prints it."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: a fixed width keeps builds alike
    from kbflow.flows.cli import build_parser

    root = build_parser()
    parts = [
        "Generated from the `kbflow` argument parser at every docs build; what it prints is what "
        "`kbflow COMMAND --help` prints.\n",
        "## kbflow\n",
        f"```text\n{root.format_help().rstrip()}\n```\n",
    ]
    for line, summary, parser in _commands(root, "kbflow"):
        parts.append(f"## {line}\n")
        if summary:
            parts.append(f"{summary[0].upper()}{summary[1:]}.\n")
        parts.append(f"```text\n{parser.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not getattr(annotation, "__args__", None) else None
    return text or str(annotation).replace("typing.", "").replace("pathlib.", "")


def _default(field: Any) -> str:
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None or value == "":
        return "empty"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_reference() -> str:
    """One row per field of `Settings`: its name, environment variable, type, default, meaning."""
    from kbflow.core.settings import Settings

    rows = [
        "Generated from the `Settings` model (`core/settings.py`) at every docs build.\n",
        "| setting | environment | type | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        rows.append(
            f"| `{name}` | `KBFLOW_{name.upper()}` | {_cell(_type_name(field.annotation))} "
            f"| {_cell(_default(field))} | {_cell(field.description or '')} |"
        )
    return "\n".join(rows) + "\n"


def where_it_stands() -> str:
    """The headline quality table (scripts/where_it_stands.py), from the baseline and bench/results."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("where_it_stands.py")
    spec = importlib.util.spec_from_file_location("where_it_stands", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table() + "\n"


GENERATORS = {"cli": cli_reference, "settings": settings_reference, "where-it-stands": where_it_stands}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: each marker line becomes its generated reference."""
    for marker, name in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, GENERATORS[name]())
    return markdown
