"""Opening a Milvus client: Milvus Lite's engine for a file (started on first use), an engine's
socket, or a server; and saying in one line why a store cannot be opened."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pymilvus import MilvusClient

from kbflow.core import lite_engine
from kbflow.core.errors import StoreError


class StoreUnavailable(StoreError, RuntimeError):
    """The Milvus store could not be opened; the message says why and what to do. `held` is
    True when another process holds the Milvus Lite file; `holder` is its (pid, command line)
    when /proc/locks could tell."""

    def __init__(self, message: str, *, held: bool = False, holder: tuple[int, str] | None = None) -> None:
        super().__init__(message)
        self.held, self.holder = held, holder


def lock_holder(db: str) -> tuple[int, str] | None:
    """(pid, command line) of the process holding a Milvus Lite file's lock, from /proc/locks
    (Linux); None when it cannot be told."""
    try:
        st = os.stat(lite_engine.lock_path(Path(db).absolute()))
        with open("/proc/locks", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        on_file = len(parts) >= 6 and parts[5].rsplit(":", 1)[-1] == str(st.st_ino)
        if on_file and parts[1] in ("POSIX", "FLOCK"):
            pid = int(parts[4])
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            return pid, cmd
    return None


# pymilvus pings every 10 s, even between calls; Milvus Lite's gRPC server keeps gRPC's default
# policy (a ping at most every 5 minutes), so after a pause of ~30 s it answers GOAWAY
# "too_many_pings" and grpc prints it on stderr. Loopback needs no keepalive: ping as it allows.
LITE_GRPC_OPTIONS = {"grpc.keepalive_time_ms": 300_000, "grpc.keepalive_permit_without_calls": False}
_REMOTE = ("http://", "https://", "tcp://", "grpc://")


def is_lite_file(uri: str) -> bool:
    """A path to a Milvus Lite data file (not a server, not an engine's socket)."""
    return not uri.startswith((*_REMOTE, "unix:"))


def grpc_options(uri: str) -> dict[str, Any]:
    """The keepalive that Milvus Lite (a file, or `kbflow serve`'s loopback child) accepts; a
    Milvus server on another host keeps pymilvus's defaults."""
    if not uri.startswith(_REMOTE):
        return LITE_GRPC_OPTIONS
    host = urlparse(uri).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return LITE_GRPC_OPTIONS if loopback else {}


def open_client(uri: str, token: str = "", database: str = "") -> MilvusClient:
    """A client on `database` (empty: the server's default), which is created when absent: one
    Milvus server can then hold several kbflow installations, each in a database of its own."""
    client = _connect(uri, token)
    if database:
        try:
            if database not in client.list_databases():
                client.create_database(database)
            client.use_database(database)
        except Exception as exc:  # a server without the privilege, or without databases
            raise StoreUnavailable(
                f"cannot use Milvus database '{database}' at {uri}: {exc}. Create it (an admin:"
                " `create_database`) or leave KBFLOW_MILVUS_DATABASE empty for the default one."
            ) from exc
    return client


def _connect(uri: str, token: str) -> MilvusClient:
    if is_lite_file(uri):
        try:
            uri = lite_engine.lite_uri(uri)
        except lite_engine.LiteUnavailable as exc:
            raise _unavailable(uri, exc, exc.held) from exc
    kwargs: dict[str, Any] = {"uri": uri, "grpc_options": grpc_options(uri)}
    if token:
        kwargs["token"] = token
    try:
        return MilvusClient(**kwargs)
    except Exception as exc:  # pymilvus raises several unrelated types here
        raise _unavailable(uri, exc, False) from exc


def _unavailable(uri: str, exc: Exception, held: bool) -> StoreUnavailable:
    hint, holder = "", None
    if held:
        holder = lock_holder(uri)
        who = f"process {holder[0]} ({holder[1][:120]})" if holder else "another process"
        hint = (
            f" The Milvus Lite file {uri} is held by {who} (one process at a time):"
            " stop that process, or run `kbflow serve` to own the file (other kbflow commands"
            " then reach it through the endpoint it announces), or set KBFLOW_MILVUS_URI to a"
            " Milvus server."
        )
    return StoreUnavailable(f"cannot open Milvus at {uri}: {exc}.{hint}", held=held, holder=holder)
