"""Milvus Lite's C++ engine (milvus-lite 2.5), run by kbflow as a child process.

milvus-lite 2.5 ships Milvus's own engine as a binary that serves one data file over gRPC.
pymilvus would start it itself for a `*.db` uri, but through a package import that needs
`pkg_resources` (gone from current setuptools) and on a socket in the shared /tmp. kbflow starts
it instead: on a unix socket in a directory only the owner can enter, with the file's lock held
by the process that started it. The engine stops when that lock goes, so when its parent ends
(even by SIGKILL) the file is free again.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kbflow.core.errors import StoreError

START_TIMEOUT_S = 30.0


class LiteUnavailable(StoreError, RuntimeError):
    """The engine could not be started for a file: held by another process (`held`), written by
    another engine (`old_engine`), or missing from the installation."""

    def __init__(
        self, message: str, *, held: bool = False, old_engine: bool = False, signalled: bool = False
    ) -> None:
        super().__init__(message)
        self.held, self.old_engine, self.signalled = held, old_engine, signalled


def lock_path(db: Path) -> Path:
    """The lock the engine watches (milvus-lite's own convention, so its tools agree)."""
    return db.parent / f".{db.name}.lock"


def binary_dir() -> Path:
    """The engine's binary and libraries, found without importing milvus_lite (its __init__
    imports pkg_resources)."""
    spec = importlib.util.find_spec("milvus_lite")
    where = list(spec.submodule_search_locations or []) if spec else []
    lib = Path(where[0]) / "lib" if where else None
    if lib is None or not (lib / "milvus").exists():
        raise LiteUnavailable(
            "Milvus Lite's engine is not installed (milvus-lite 2.5: `pip install 'milvus-lite==2.5.1'`)"
        )
    return lib


def old_engine_message(db: Path) -> str:
    return (
        f"{db} is a directory: it was written by Milvus Lite 3.x, which kbflow no longer uses (it"
        " searched row by row; docs/sizing.md). Nothing was changed. Rebuild this home's chunks"
        " from its embedding cache (nothing is embedded again): `kbflow store migrate`"
    )


def _die_with_parent() -> Callable[[], None] | None:
    """Linux: the engine gets SIGTERM when its parent dies, even by SIGKILL. libc is resolved
    here, in the parent: between fork and exec the child makes one system call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(args: list[str], cwd: Path) -> subprocess.Popen:
    lib = binary_dir()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    return subprocess.Popen(
        [str(lib / "milvus"), *args], env=env, cwd=str(cwd), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent(),  # noqa: PLW1509
    )


def _wait_until(ready: Callable[[], bool], proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace").strip()
            tail = err.splitlines()[-1] if err else "no message"
            raise LiteUnavailable(f"Milvus Lite exited with code {proc.returncode} ({what}): {tail}",
                                  signalled=proc.returncode < 0)
        if ready():
            return
        time.sleep(0.02)
    proc.kill()
    raise LiteUnavailable(f"Milvus Lite did not answer within {START_TIMEOUT_S:.0f} s ({what})")


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        return s.connect_ex(str(path)) == 0


@dataclass
class LiteChild:
    """One running engine on one data file, reached at `uri` by this process's user only."""

    db: Path
    proc: subprocess.Popen
    lock: IO[str] | None
    sock_dir: Path | None
    uri: str

    def stop(self) -> None:
        if self.lock is not None:
            self.lock.close()  # the engine sees its lock go and stops
            self.lock = None
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.sock_dir is not None:
            shutil.rmtree(self.sock_dir, ignore_errors=True)


def start(db: Path, tries: int = 3) -> LiteChild:
    """Hold `db`'s lock and start the engine on a socket in a fresh owner-only directory.
    LiteUnavailable(held=True) when another process holds the file. An engine killed by a
    signal while starting is started again (seen once in a full test run: gRPC's poller
    aborted on its first epoll_wait)."""
    attempt = 1
    while True:
        try:
            return _start(db)
        except LiteUnavailable as exc:
            if exc.held or exc.old_engine or not exc.signalled or attempt >= tries:
                raise
        attempt += 1


def _start(db: Path) -> LiteChild:
    db = db.absolute()
    if db.is_dir():
        raise LiteUnavailable(old_engine_message(db), old_engine=True)
    db.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path(db), "a")  # noqa: SIM115  (held for the engine's lifetime)
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise LiteUnavailable(f"{db} is held by another process", held=True) from None
    sock_dir = Path(tempfile.mkdtemp(prefix="kbflow-milvus-"))  # mode 0700
    sock = sock_dir / "milvus.sock"
    try:
        proc = _spawn([str(db), f"unix:{sock}", "ERROR", str(lock_path(db))], db.parent)
        _wait_until(lambda: sock.exists() and _connects(sock), proc, str(db))
        os.chmod(sock, 0o600)
    except BaseException:
        lock.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
        raise
    return LiteChild(db, proc, lock, sock_dir, f"unix:{sock}")


def serve_tcp(db: Path, port: int) -> LiteChild:
    """The engine on a loopback TCP port, with no access control: a stand-in for a Milvus
    server in tests and benchmarks (kbflow's own processes use `start`)."""
    db = db.absolute()
    db.parent.mkdir(parents=True, exist_ok=True)
    proc = _spawn([str(db), f"127.0.0.1:{port}", "ERROR"], db.parent)

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    _wait_until(listening, proc, f"{db} on port {port}")
    return LiteChild(db, proc, None, None, f"http://127.0.0.1:{port}")


_children: dict[Path, LiteChild] = {}
_guard = threading.Lock()


def lite_uri(db: str | Path) -> str:
    """The gRPC uri of this process's engine for `db`, started on first use (one per file)."""
    path = Path(db).absolute()
    with _guard:
        child = _children.get(path)
        if child is None or child.proc.poll() is not None:
            child = _children[path] = start(path)
        return child.uri


def release(db: str | Path) -> None:
    """Stop this process's engine for `db`, freeing the file for another process."""
    with _guard:
        child = _children.pop(Path(db).absolute(), None)
    if child is not None:
        child.stop()


@atexit.register
def _stop_all() -> None:
    with _guard:
        children = list(_children.values())
        _children.clear()
    for child in children:
        with contextlib.suppress(Exception):
            child.stop()
