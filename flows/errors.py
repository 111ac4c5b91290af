"""Expected failures of a kbflow command, told in one line: no traceback.

A Milvus Lite file belongs to one process at a time. When another process holds it, the CLI
says so in one line: who holds it and what to do.
"""

from __future__ import annotations

import re
import sys
from typing import Any


def store_unavailable_message(exc: BaseException, uri: str) -> str:
    """One line for a store that could not be opened: for a held Milvus Lite file, the holder's
    pid and command and the three ways out; otherwise the error itself, on one line."""
    if not getattr(exc, "held", False):
        return " ".join(str(exc).split())
    holder = getattr(exc, "holder", None)  # found once, when the store refused to open
    if holder is None:
        who = "another process"
    else:
        cmd = " ".join(holder[1].split())
        who = f"process {holder[0]} ({cmd[:100]}{'…' if len(cmd) > 100 else ''})"
    return (
        f"the Milvus Lite file {uri} is in use by {who}; one process at a time. Wait for it to "
        "finish or stop it, run `kbflow serve` to own the file (other kbflow commands on this "
        "home then go through it), or set KBFLOW_MILVUS_URI to a Milvus server."
    )


def error_message(exc: BaseException, uri: str | None) -> str:
    """What the CLI says for an expected error: a store that could not be opened (it has `held`)
    says so in one line, with the holder and the ways out when its file is held; everything
    else says what it says."""
    if hasattr(exc, "held") and uri:
        return store_unavailable_message(exc, uri)
    return str(exc)


JSON_LINES = {"on": False}  # log_format = json: errors are JSON objects too


def use_log_format(log_format: str) -> None:
    """With `json`, the command's errors and kbflow's log records are one JSON object a line."""
    if log_format == "json" and not JSON_LINES["on"]:
        import logging.config

        from kbflow.flows.service_ops import configure_logging

        logging.config.dictConfig(configure_logging("json"))
        JSON_LINES["on"] = True


def say_error(message: str, exit_code: int = 2) -> int:
    """One line on stderr (line breaks in the message become spaces); returns the exit code
    (2 by default: the command could not run)."""
    one_line = re.sub(r"\s*\n\s*", " ", message).strip()
    if JSON_LINES["on"]:
        import json
        from datetime import UTC, datetime

        event = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "level": "error",
                 "logger": "kbflow.cli", "event": "error", "message": one_line, "exit_code": exit_code}
        print(json.dumps(event, ensure_ascii=False), file=sys.stderr)
    else:
        print(f"kbflow: error: {one_line}", file=sys.stderr)
    return exit_code


def is_database_error(exc: BaseException) -> bool:
    """The SQL database could not be reached or refused the connection (not a bug of ours)."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    return isinstance(exc, OperationalError | InterfaceError)


def database_message(exc: BaseException, settings: object) -> str:
    """One line for a database that cannot be reached: where (its password hidden), the
    driver's first line of why, and where the address comes from."""
    url = getattr(settings, "resolved_database_url", "") if settings is not None else ""
    where = url
    try:
        from sqlalchemy.engine import make_url

        where = make_url(url).render_as_string(hide_password=True) if url else "the database"
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as configured, password or not
        where = "the configured database"
    orig = getattr(exc, "orig", None) or exc
    why = next((line.strip() for line in str(orig).splitlines() if line.strip()), type(exc).__name__)
    return (
        f"cannot reach the database {where}: {why}. Check that it is running and reachable, or point "
        "KBFLOW_DATABASE_URL (--database-url) at one that is"
    )


def reader_gone() -> int:
    """The reader of our output went away (`kbflow … | head`): stop quietly, not with a
    traceback. Exit 0: a reader that has read enough is not a failure of the command."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail
    except OSError:
        pass
    return 0


def console(**options: Any) -> Any:
    """A rich Console whose broken pipe is ours to handle: rich exits 1 on its own, the CLI
    exits 0 quietly for a reader that has read enough (`reader_gone`)."""
    from rich.console import Console

    class _PipedConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _PipedConsole(**options)
