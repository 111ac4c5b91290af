"""Seconds per stage of a run (scan, plan, read, chunk, embed, store, SQL and L0 …), so a slow
reindex says where its time went without a profiler.

A run opens a `StageClock` with `stage_clock()`; code anywhere below it wraps a step in
`stage(name)`. Outside a clock, `stage` costs one context-variable lookup and records nothing.
The clock is a shared object, so tasks that copy the context (Prefect's thread pool) add to it.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class StageClock:
    seconds: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}


_current: ContextVar[StageClock | None] = ContextVar("kbflow_stage_clock", default=None)


@contextmanager
def stage_clock() -> Iterator[StageClock]:
    """A fresh clock for the steps run inside the block (an enclosing clock is kept aside)."""
    clock = StageClock()
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)


def current_clock() -> StageClock | None:
    return _current.get()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the block's wall time to `name` on the current clock, if any (nested stages count
    in both: keep them disjoint where the figures are summed)."""
    clock = _current.get()
    if clock is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        clock.add(name, time.perf_counter() - started)


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Pause the cycle collector for a block that builds one object per document and frees
    none (the scan, the plan): its full passes over a growing heap cost a third of a no-change
    run at 100k chunks, and more per document as the corpus grows. Nothing is lost: cycles made
    meanwhile are collected after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def announced(what: str, expect: str) -> Iterator[None]:
    """A one-off slow step on stderr: what it is and how long it usually takes, then how long
    it took (a model derived on first use runs for seconds with nothing else to show)."""
    import sys

    print(f"kbflow: {what} (once; {expect}) …", file=sys.stderr, flush=True)
    started = time.perf_counter()
    yield
    print(f"kbflow: … done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
