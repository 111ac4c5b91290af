"""What `kbflow serve` tells its operators: a request id on every response, one log line per
lookup (JSON with `log_format = json`), and the metrics of each lookup's outcome.

The log line carries the scope, mode, outcome, status, latency, request id and audit id, so a
user's report (the `X-Request-ID` header) leads to the line and the line to the audit row. It
never carries a key, and carries the question only when `audit_store_queries = full`.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException

from kbflow.flows.admission import Overloaded
from kbflow.flows.metrics import outcome_of

log = logging.getLogger("kbflow.service")
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a caller's own id is kept only in this shape


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The caller's X-Request-ID when it is a plain token, else a new one."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            given = value.decode("latin-1")
            if REQUEST_ID.fullmatch(given):
                return given
    return uuid.uuid4().hex[:16]


def with_request_id(send: Any, request_id: str) -> Any:
    """`send` that adds X-Request-ID to the response's headers."""

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            message = {**message, "headers": headers}
        await send(message)

    return sending


@dataclass
class Seen:
    """One lookup as the operators see it; the route fills `result`."""

    mode: str
    request_id: str
    query: str
    result: Any = None


@contextmanager
def observed(metrics: Any, settings: Any, seen: Seen) -> Iterator[Seen]:
    """Count the lookup's outcome, time the answered ones, and log one line, however it ends."""
    started = time.perf_counter()
    status, outcome = 200, "error"
    try:
        yield seen
        outcome = outcome_of(seen.result)
    except Overloaded:  # the check again after the body was read: a refusal, not a lookup
        status, outcome = 503, "refused"
        raise
    except HTTPException as exc:
        status = exc.status_code
        outcome = "rejected" if status < 500 else "error"
        raise
    except Exception:
        status = 500
        raise
    finally:
        _record(metrics, settings, seen, status, outcome, time.perf_counter() - started)


def _record(metrics: Any, settings: Any, seen: Seen, status: int, outcome: str, seconds: float) -> None:
    answered = seen.result is not None
    scope = (seen.result.kb_scope or "*") if answered else "-"
    if metrics is not None:
        if outcome == "refused":
            metrics.refusals.inc()
        else:
            metrics.observe(scope, seen.mode, outcome, seconds if answered else None)
    fields = {"event": "lookup", "scope": scope, "mode": seen.mode, "outcome": outcome, "status": status,
              "latency_ms": round(seconds * 1000, 1), "request_id": seen.request_id,
              "audit_id": getattr(seen.result, "audit_id", None)}
    if settings.audit_store_queries == "full":
        fields["query"] = seen.query
    log.info("lookup %s %s in %.0f ms (request %s)", outcome, scope, seconds * 1000, seen.request_id,
             extra={"kbflow": fields})


class JsonLines(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, and kbflow's own fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, "kbflow", None)
        out.update(fields if isinstance(fields, dict) else {"event": "log", "message": record.getMessage()})
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(log_format: str) -> dict[str, Any] | None:
    """The log config for uvicorn and kbflow: JSON lines on stderr with `json`; with `text`,
    uvicorn's own config (None) and kbflow's lookup lines in plain words."""
    if log_format != "json":
        logging.getLogger("kbflow").setLevel(logging.INFO)
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonLines}},
        "handlers": {"json": handler},
        "loggers": {
            name: {"handlers": ["json"], "level": "INFO", "propagate": False}
            for name in ("kbflow", "uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }
