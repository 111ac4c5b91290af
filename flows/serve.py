"""`kbflow serve`: the HTTP lookup service, and the one owner of an embedded Milvus Lite file.

A Milvus Lite file can be opened by one process only. With the embedded default, `serve`
starts Milvus Lite's engine as its child on a unix socket only its user can reach, reaches it
as a client like any Milvus, and announces the endpoint in `<home>/serve.json`; other kbflow commands on
the same home (reindex, status, eval) find the announcement and use the endpoint instead of the
file. The announcement is removed when the service stops.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from kbflow.core import lite_engine
from kbflow.core.announce import ENDPOINT_FILE, announced_endpoint
from kbflow.core.errors import InputError, StoreError
from kbflow.core.settings import Settings


class ServeSetupError(InputError, ValueError):
    """The API keys or the bind address cannot be served (unreadable keys file, no keys on a
    public address)."""


class ServeUnavailable(StoreError, RuntimeError):
    """The home is already served, or its Milvus Lite file could not be served."""


def _client_host(host: str) -> str:
    """Where a local client reaches a service bound to `host` (a wildcard bind: loopback)."""
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_milvus_lite_server(db: str) -> tuple[subprocess.Popen, str]:
    """Milvus Lite's engine for the file `db` on a free loopback port, without access control:
    a stand-in Milvus server for tests and benchmarks, (process, uri). `kbflow serve` itself
    reaches its engine on an owner-only socket instead."""
    child = lite_engine.serve_tcp(Path(db), free_port())
    return child.proc, child.uri


def write_private(path: Path, data: dict) -> None:
    """Written whole (rename) and readable by the owner only: it holds the store's token."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _own_lite_file(settings: Settings) -> tuple[Settings, dict, Callable[[], None]]:
    """Start Milvus Lite's engine for the home's file on a socket only this user can reach:
    (settings that reach it, what to announce about it, how to stop it). RuntimeError says why
    it could not start."""
    db = settings.resolved_milvus_uri
    try:
        milvus_uri = lite_engine.lite_uri(db)
    except lite_engine.LiteUnavailable as exc:
        raise RuntimeError(str(exc)) from exc
    note = {"milvus_uri": milvus_uri, "milvus_token": "", "data_dir": str(Path(db).resolve())}
    print(
        f"kbflow serve: owns {db} (Milvus Lite at {milvus_uri}, owner-only) for {settings.home};"
        " other kbflow commands on this home use it",
        file=sys.stderr,
    )
    return settings.model_copy(update={"milvus_uri": milvus_uri}), note, lambda: lite_engine.release(db)


def serve(settings: Settings, host: str, port: int) -> int:
    """Serve until stopped; ServeSetupError / ServeUnavailable say why it cannot start."""
    import uvicorn

    from kbflow.core.sql import SqlStore
    from kbflow.flows.service import check_bind, create_app, load_keys
    from kbflow.flows.service_ops import configure_logging

    try:
        keys = load_keys(settings)
        check_bind(host, keys)
    except (ValueError, OSError) as exc:
        raise ServeSetupError(str(exc)) from exc
    if not keys:
        print(f"kbflow serve: no API keys configured: open access, bound to loopback {host} only",
              file=sys.stderr)
    SqlStore(settings.resolved_database_url).dispose()  # an unreachable database: one line, before uvicorn
    holder = announced_endpoint(settings.home)
    owns_file = settings.uses_milvus_lite and not settings.milvus_uri
    if holder is not None and owns_file:
        raise ServeUnavailable(
            f"{settings.home} is already served by pid {holder['pid']} ({holder.get('http')})"
        )
    settings.ensure_home()  # the Lite file and serve.json live there
    cleanups: list[Callable[[], None]] = []
    note: dict = {}
    if owns_file:
        try:
            settings, note, stop = _own_lite_file(settings)
        except RuntimeError as exc:
            raise ServeUnavailable(str(exc)) from exc
        cleanups.append(stop)
    # `kbflow lookup` on this home sends its query here with this key instead of loading a model
    local_key = secrets.token_urlsafe(32)
    if holder is None:
        announcement = settings.home / ENDPOINT_FILE
        write_private(
            announcement,
            {
                "pid": os.getpid(),
                "http": f"http://{_client_host(host)}:{port}",
                "local_key": local_key,
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                **note,
            },
        )
        cleanups.insert(0, lambda: announcement.unlink(missing_ok=True))
    # uvicorn re-raises SIGTERM after its graceful shutdown: make that a normal exit so the
    # announcement is removed and the Milvus Lite child stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        app = create_app(settings, local_key=local_key, host=host)
        config = configure_logging(settings.log_format)
        uvicorn.run(app, host=host, port=port, log_level="info", **({"log_config": config} if config else {}))
    finally:
        for cleanup in cleanups:
            cleanup()
    return 0
