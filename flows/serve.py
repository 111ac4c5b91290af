"""`kbflow serve`: the HTTP lookup service, and the one owner of an embedded Milvus Lite file.

A Milvus Lite file can be opened by one process only. With the embedded default, `serve`
starts Milvus Lite's gRPC server on a free loopback port as its child, reaches it as a client
like any Milvus, and announces the endpoint in `<home>/serve.json`; other kbflow commands on
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
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

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


def wait_for_port(port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"Milvus Lite server exited with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"Milvus Lite server did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _die_with_parent_hook() -> Callable[[], None] | None:
    """Linux: a pre-exec hook that has the Milvus Lite child sent SIGTERM when its parent dies,
    even by SIGKILL, so no orphan keeps the data file locked. libc is resolved here, in the
    parent: between fork and exec the child only makes the one system call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_milvus_lite_server(data_dir: str, token: str) -> tuple[subprocess.Popen, str]:
    """Milvus Lite's gRPC server for `data_dir` on a free loopback port, answering only calls
    that carry `token`: (process, uri)."""
    from kbflow.core.lite_server import TOKEN_ENV

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbflow.core.lite_server", "--data-dir", data_dir, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, TOKEN_ENV: token},
        preexec_fn=_die_with_parent_hook(),  # noqa: PLW1509
    )
    try:
        wait_for_port(port, proc=proc)
    except RuntimeError as exc:
        err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
        proc.kill()
        hint = " (is another process holding the file?)" if "lock" in err.lower() else ""
        raise RuntimeError(f"{exc}{hint}: {err.strip().splitlines()[-1] if err.strip() else ''}") from None
    return proc, f"http://127.0.0.1:{port}"


def write_private(path: Path, data: dict) -> None:
    """Written whole (rename) and readable by the owner only: it holds the store's token."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _own_lite_file(settings: Settings) -> tuple[Settings, dict, Callable[[], None]]:
    """Start the token-guarded Milvus Lite server for the home's file: (settings that reach it,
    what to announce about it, how to stop it). RuntimeError says why it could not start."""
    token = secrets.token_urlsafe(32)
    child, milvus_uri = start_milvus_lite_server(settings.resolved_milvus_uri, token)

    def stop() -> None:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()

    note = {
        "milvus_uri": milvus_uri,
        "milvus_token": token,
        "data_dir": str(Path(settings.resolved_milvus_uri).resolve()),
    }
    print(
        f"kbflow serve: owns {settings.resolved_milvus_uri} (Milvus Lite at {milvus_uri}, token-guarded) "
        f"for {settings.home}; other kbflow commands on this home use it",
        file=sys.stderr,
    )
    return settings.model_copy(update={"milvus_uri": milvus_uri, "milvus_token": token}), note, stop


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
