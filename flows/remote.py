"""`kbflow lookup` through a running `kbflow serve`: no model load, no store opening.

The service announces itself in `<home>/serve.json` with a key that reads every scope; the file
is readable by its owner only. Standard library only, so a lookup through the service costs a
Python start, one HTTP request and the printing.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kbflow.core.announce import announced_endpoint
from kbflow.core.errors import KbflowError, StoreError
from kbflow.core.settings import MAX_QUERY_CHARS_CAP

BUSY_RETRIES = 3


class ServiceUnreachable(StoreError):
    """The announced service did not answer: the caller looks up in-process instead."""


class ServiceRefused(KbflowError):
    """The service answered with an error the user must see (bad scope, no index, ...)."""


class ServedLookup:
    def __init__(self, home: Path, timeout: float = 30.0) -> None:
        found = announced_endpoint(home)
        if not found or not found.get("http") or not found.get("local_key"):
            raise ServiceUnreachable(f"no kbflow serve is announced for {home}")
        url = urlsplit(found["http"])
        self.where = f"{found['http']} (pid {found['pid']})"
        self._key = found["local_key"]
        self._conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=timeout)

    def _post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
        try:
            self._conn.request(
                "POST",
                "/v1/lookup",
                json.dumps(body),
                {"Content-Type": "application/json", "X-API-Key": self._key},
            )
            resp = self._conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()
            raise ServiceUnreachable(f"kbflow serve at {self.where} did not answer: {exc}") from exc
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"detail": raw[:200].decode("utf-8", "replace")}
        return resp.status, data, resp.getheader("Retry-After") or "1"

    def lookup(self, query: str, kb_scope: str | None, mode: str | None, agent: bool) -> dict[str, Any]:
        # the service answers a query by its first max_query_chars: send no more than the cap and
        # one character, so a longer query is still flagged truncated and never refused as too large
        sent = " ".join(query.split())[: MAX_QUERY_CHARS_CAP + 1]
        body: dict[str, Any] = {"query": sent, "agent": agent}
        if kb_scope:
            body["kb_scope"] = kb_scope
        if mode:
            body["mode"] = mode
        for attempt in range(BUSY_RETRIES + 1):
            status, data, retry_after = self._post(body)
            if status == 200:
                return data
            busy = status == 503 and str(data.get("detail", "")).startswith("busy")
            if not busy:
                raise ServiceRefused(_detail(data))
            if attempt < BUSY_RETRIES:
                time.sleep(min(float(retry_after) if retry_after.isdigit() else 1.0, 5.0))
        raise ServiceUnreachable(f"kbflow serve at {self.where} stayed busy")


def _detail(data: dict[str, Any]) -> str:
    detail = data.get("detail", data)
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])[1:]))}: {d.get('msg')}" for d in detail)
    return str(detail)
