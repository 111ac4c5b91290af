"""Admission for `kbflow serve`: a lookup is let in when the wait it can expect is one a caller
tolerates, and refused at once (503 with Retry-After) when it is not.

A fixed queue length is the wrong unit: 16 waiting lookups of 40 ms are a 0.3 s wait, and 16 of
2 s are 16 s. So the service keeps a running estimate of one lookup's service time (measured
on its own workers, so contention is in it) and admits while
``(lookups ahead of this one) / workers × service time <= serve_max_wait_ms``. A hard ceiling
(`serve_queue`) still bounds memory whatever the estimate says.
"""

from __future__ import annotations

import asyncio
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kbflow.core.errors import StoreError

PRIOR_SERVICE_MS = 100.0  # before the first lookup is measured: a warm lookup here takes 20-80 ms
SMOOTHING = 0.2  # weight of the newest service time in the running estimate


class Overloaded(StoreError):
    """Admitting this lookup would make it wait longer than callers tolerate: 503 at once."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason, self.retry_after_s = reason, retry_after_s


class Admission:
    """`workers` lookups run at once in threads of their own; more wait while their expected
    wait stays within `max_wait_ms` (0 = no wait rule, count only) and fewer than `queue` wait."""

    def __init__(
        self, workers: int, queue: int, max_wait_ms: float = 0.0, prior_ms: float = PRIOR_SERVICE_MS
    ) -> None:
        self.workers, self.queue, self.max_wait_ms = workers, queue, max_wait_ms
        self.service_ms = prior_ms
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kbflow-lookup")
        self._slots = asyncio.Semaphore(workers)
        self._admitted = 0

    @property
    def admitted(self) -> int:
        """Lookups let in and not yet answered: running or waiting."""
        return self._admitted

    def expected_wait_ms(self) -> float:
        """Wait for one more lookup before a worker takes it: those ahead of it in line, shared
        among the workers, each taking the estimated service time."""
        ahead = self._admitted - self.workers + 1
        return 0.0 if ahead <= 0 else ahead / self.workers * self.service_ms

    def check(self) -> None:
        """Raise Overloaded when one more lookup should not be let in now."""
        waiting = max(self._admitted - self.workers, 0)
        if waiting >= self.queue:
            raise Overloaded(f"busy: {self.workers} lookups running and {waiting} waiting; retry shortly", 1)
        wait = self.expected_wait_ms()
        if self.max_wait_ms and wait > self.max_wait_ms:
            excess_s = (wait - self.max_wait_ms) / 1000  # when enough of the line has drained
            raise Overloaded(
                f"busy: a lookup now would wait about {wait:.0f} ms, over the "
                f"{self.max_wait_ms:.0f} ms allowed (serve_max_wait_ms); retry shortly",
                max(1, math.ceil(excess_s)),
            )

    async def run(self, fn: Any, *args: Any) -> Any:
        self.check()
        self._admitted += 1  # one event loop: no lock needed between the check and the count
        try:
            async with self._slots:
                started = time.perf_counter()
                try:
                    return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
                finally:
                    took = (time.perf_counter() - started) * 1000
                    self.service_ms += SMOOTHING * (took - self.service_ms)
        finally:
            self._admitted -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
