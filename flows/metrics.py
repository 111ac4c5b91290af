"""Prometheus metrics of `kbflow serve`: what it does (lookups, latency, admission) counted as it
happens, and what the home records (scopes, reindex and eval runs) read from SQL at scrape
time, so one scrape target covers the installation and short-lived runs need no Pushgateway.

Names follow Prometheus' conventions: the `kbflow_` prefix, base units, `_total` on counters.
Labels stay low-cardinality: scope (only a scope that answered; a refused or failed lookup is
`-`, a lookup over every scope `*`), mode, outcome — never the question, a key or a source.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = ("found", "weak", "none", "rejected", "error")
# lookup seconds: a quiet lookup takes 20-90 ms here (English), about 220 ms in Chinese; a line
# under load waits up to serve_max_wait_ms (2 s) more — buckets resolve both ends
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0, 1.5, 2.5, 4.0, 8.0)
STATE_TTL_S = 10.0  # SQL is read at most this often, however often Prometheus scrapes
disable_created_metrics()  # no `_created` series beside each counter: nothing here reads them


def outcome_of(result: Any) -> str:
    """found: evidence at a level (REFERENCE or PRECISE); weak: evidence with no level; none."""
    if not result.found:
        return "none"
    return "found" if result.relevance_level else "weak"


def kbflow_version() -> str:
    try:
        return version("kbflow")
    except PackageNotFoundError:
        return "unknown"


class ServeMetrics:
    """One registry per service (the tests start several in one process)."""

    def __init__(self, sql: Any = None, admission: Any = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.lookups = Counter(
            "kbflow_lookups", "Lookups answered or refused, by scope, mode and outcome "
            "(found, weak, none, rejected: bad input or unknown scope, error).",
            ["scope", "mode", "outcome"], registry=self.registry,
        )
        self.latency = Histogram(
            "kbflow_lookup_duration_seconds", "Time to answer a lookup (admitted to answered).",
            ["mode"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.refusals = Counter(
            "kbflow_admission_refusals", "Lookups refused at once with 503 by admission.",
            registry=self.registry,
        )
        self.model_load = Gauge(
            "kbflow_model_load_seconds", "Seconds the service took to load its models and stores at start.",
            registry=self.registry,
        )
        self.build = Gauge(
            "kbflow_build_info", "kbflow's version and the embedding models of its scopes (always 1).",
            ["version", "models"], registry=self.registry,
        )
        if admission is not None:
            self.registry.register(AdmissionCollector(admission))
        if sql is not None:
            self.registry.register(HomeCollector(sql))

    def observe(self, scope: str | None, mode: str, outcome: str, seconds: float | None) -> None:
        self.lookups.labels(scope=scope or "*", mode=mode, outcome=outcome).inc()
        if seconds is not None:
            self.latency.labels(mode=mode).observe(seconds)

    def started(self, load_seconds: float, models: list[str]) -> None:
        self.model_load.set(load_seconds)
        self.build.labels(version=kbflow_version(), models=",".join(sorted(models))).set(1)


class AdmissionCollector(Collector):
    """The line as it is at scrape time."""

    def __init__(self, admission: Any) -> None:
        self.admission = admission

    def collect(self) -> Iterator[GaugeMetricFamily]:
        a = self.admission
        for name, text, value in (
            ("kbflow_lookups_in_flight", "Lookups admitted: running or waiting.", a.admitted),
            ("kbflow_admission_queue_depth", "Lookups admitted and waiting for a worker.",
             max(a.admitted - a.workers, 0)),
            ("kbflow_admission_expected_wait_seconds", "The wait one more lookup could expect now.",
             a.expected_wait_ms() / 1e3),
            ("kbflow_admission_service_time_seconds", "The running estimate of one lookup's service time.",
             a.service_ms / 1e3),
            ("kbflow_admission_workers", "Lookups run at once.", a.workers),
        ):
            yield GaugeMetricFamily(name, text, value=value)


class HomeCollector(Collector):
    """Scopes, reindex runs and eval runs as SQL records them (read at most every STATE_TTL_S)."""

    def __init__(self, sql: Any) -> None:
        self.sql = sql
        self._cached: tuple[float, list[GaugeMetricFamily]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] > STATE_TTL_S:
            self._cached = (now, home_families(self.sql))
        yield from self._cached[1]


def home_families(sql: Any) -> list[GaugeMetricFamily]:
    from kbflow.flows.metrics_home import read_home

    state = read_home(sql)
    docs = GaugeMetricFamily("kbflow_scope_documents", "Documents indexed per scope.", labels=["scope"])
    chunks = GaugeMetricFamily("kbflow_scope_chunks", "Chunks indexed per scope.", labels=["scope"])
    for scope, (n_docs, n_chunks) in state.sizes.items():
        docs.add_metric([scope], n_docs)
        chunks.add_metric([scope], n_chunks)
    last_ok = GaugeMetricFamily(
        "kbflow_reindex_last_success_timestamp_seconds",
        "When the last successful reindex of the scope finished (Unix time).", labels=["scope"])
    last_run = GaugeMetricFamily(
        "kbflow_reindex_last_run_timestamp_seconds",
        "When the last reindex of the scope finished, successful or not (Unix time).", labels=["scope"])
    last_state = GaugeMetricFamily(
        "kbflow_reindex_last_run_success", "1 when the scope's last reindex succeeded, 0 when it failed.",
        labels=["scope"])
    for scope, run in state.reindex.items():
        if run.last_ok is not None:
            last_ok.add_metric([scope], run.last_ok)
        last_run.add_metric([scope], run.last)
        last_state.add_metric([scope], 1.0 if run.ok else 0.0)
    eval_at = GaugeMetricFamily("kbflow_eval_last_run_timestamp_seconds",
                                "When the last live eval run finished (Unix time).", labels=["mode"])
    eval_failed = GaugeMetricFamily("kbflow_eval_last_run_failed_cases",
                                    "Golden cases the last live eval run failed.", labels=["mode"])
    for mode, (at, failed) in state.evals.items():
        eval_at.add_metric([mode], at)
        eval_failed.add_metric([mode], failed)
    return [docs, chunks, last_ok, last_run, last_state, eval_at, eval_failed]
