"""Per-scope reindex locks in SQL, so two runs on one scope never interleave.

A lock row names its holder (host, pid, run id) and is refreshed as the run progresses. A
second run waits up to `wait_seconds` and then refuses with a message naming the holder. A lock
whose holder is gone — a dead pid on this host, or no heartbeat for `stale_after` seconds — is
taken over, so a run killed mid-way never blocks the next one.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from kbflow.core.errors import StoreError
from kbflow.core.sql import ScopeLockRow, SqlStore, utcnow

STALE_AFTER_S = 600


class ScopeLocked(StoreError, RuntimeError):
    """Another live run holds the scope's lock."""


def _alive(host: str, pid: int) -> bool:
    if host != socket.gethostname():
        return True  # cannot tell: rely on the heartbeat
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ScopeLocks:
    def __init__(self, sql: SqlStore, stale_after: float = STALE_AFTER_S) -> None:
        self.sql = sql
        self.stale_after = stale_after
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held: list[str] = []

    def _try(self, scope: str) -> ScopeLockRow | None:
        """Acquire, or return the live holder's row."""
        host, pid = socket.gethostname(), os.getpid()
        with self.sql.session() as s:
            try:
                with s.begin():
                    s.add(ScopeLockRow(kb_scope=scope, owner=self.owner, host=host, pid=pid))
                return None
            except IntegrityError:
                pass
        with self.sql.session() as s, s.begin():
            row = s.get(ScopeLockRow, scope)
            if row is None:
                return self._try(scope)
            heartbeat = row.heartbeat_at if row.heartbeat_at.tzinfo else row.heartbeat_at.replace(tzinfo=UTC)
            stale = datetime.now(UTC) - heartbeat > timedelta(seconds=self.stale_after)
            if stale or not _alive(row.host, row.pid):
                taken = s.execute(
                    update(ScopeLockRow)
                    .where(ScopeLockRow.kb_scope == scope, ScopeLockRow.owner == row.owner)
                    .values(owner=self.owner, host=host, pid=pid, acquired_at=utcnow(), heartbeat_at=utcnow())
                ).rowcount
                return None if taken == 1 else row
            s.expunge(row)
            return row

    def acquire(self, scopes: Iterable[str], wait_seconds: float = 0.0) -> None:
        deadline = time.monotonic() + wait_seconds
        for scope in sorted(set(scopes)):  # one global order: no two runs wait on each other
            while True:
                holder = self._try(scope)
                if holder is None:
                    self.held.append(scope)
                    break
                if time.monotonic() >= deadline:
                    self.release()
                    raise ScopeLocked(
                        f"scope '{scope}' is being reindexed by pid {holder.pid} on {holder.host} since "
                        f"{holder.acquired_at:%Y-%m-%d %H:%M:%S} UTC; wait for it to finish (or pass "
                        f"--wait SECONDS); a lock whose process is gone is taken over automatically"
                    )
                time.sleep(0.5)

    def heartbeat(self) -> None:
        if not self.held:
            return
        with self.sql.session() as s, s.begin():
            s.execute(
                update(ScopeLockRow).where(ScopeLockRow.owner == self.owner).values(heartbeat_at=utcnow())
            )

    def release(self) -> None:
        if self.held:
            with self.sql.session() as s, s.begin():
                s.execute(delete(ScopeLockRow).where(ScopeLockRow.owner == self.owner))
        self.held = []

    def holders(self) -> list[ScopeLockRow]:
        with self.sql.session() as s:
            return list(s.scalars(select(ScopeLockRow)))


@contextmanager
def scope_locks(sql: SqlStore, scopes: Iterable[str], wait_seconds: float = 0.0):
    locks = ScopeLocks(sql)
    locks.acquire(scopes, wait_seconds)
    try:
        yield locks
    finally:
        locks.release()
