"""HTTP lookup service for the agent (FastAPI): the HTTP interface to the read side, next to the
other interfaces (the `kbflow` CLI in flows/cli, the Prefect task in flows/lookup.py); nothing in
kbflow.retrieval imports it.

POST /v1/lookup {query, kb_scope, mode, agent} -> LookupResult (or RagToolResult when agent);
GET /v1/scopes; GET /healthz. API keys (header `X-API-Key` or `Authorization: Bearer`) map to
the kb_scopes they may read: no key -> 401, a scope outside the key -> 403 with no data, a
malformed body -> 422 naming the field. A JSON body is read whatever its declared content
type (`curl -d` sends a form type); a body that is not JSON is 415 naming the type expected.
With no keys configured the service is open and must bind loopback only. The model and
stores load once, at start-up.

(No `from __future__ import annotations` here: FastAPI resolves the dependency annotations
defined inside create_app at run time.)
"""

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from kbflow.core.settings import Settings
from kbflow.core.validation import InvalidValue, validate_scope
from kbflow.flows.admission import Admission, Overloaded
from kbflow.flows.metrics import ServeMetrics
from kbflow.flows.service_ops import Seen, observed, request_id_of, with_request_id
from kbflow.retrieval.lookup import get_retriever, project_for_agent
from kbflow.retrieval.pipeline import IndexMissing
from kbflow.retrieval.request import LookupRejected, UnknownScope

log = logging.getLogger("kbflow.service")
MAX_BODY_BYTES = 64 * 1024  # a lookup body is a query and three small fields: larger is abuse (413)
TOO_LARGE = (
    f"request body over {MAX_BODY_BYTES} bytes: a lookup is answered from the query's first "
    "max_query_chars characters (500 by default), so send at most those"
)


class LookupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)  # any length the body allows: answered truncated, flagged
    kb_scope: str | None = None
    mode: Literal["hybrid", "dense", "bm25"] = "hybrid"
    agent: bool = False


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, refused with 413 past `limit` bytes: a declared length is checked before
    anything is read, a streamed body as it arrives."""
    too_large = TOO_LARGE if limit == MAX_BODY_BYTES else f"request body over {limit} bytes"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(status_code=413, detail=too_large)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(status_code=413, detail=too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_surrogate(v) for v in value)


def parse_lookup_body(raw: bytes) -> LookupRequest:
    """JSON whatever the declared content type: `curl -d '{…}'` says form-urlencoded."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HTTPException(
            status_code=415,
            detail="the body must be a JSON object (Content-Type: application/json), e.g. "
            '{"query": "kafka consumer lag", "kb_scope": "rag-eval"}',
        ) from exc
    if _has_surrogate(data):  # "\ud800" escapes are valid JSON but no text: nothing can encode them
        raise HTTPException(
            status_code=422, detail=[{"loc": ["body"], "msg": "strings must be valid Unicode text"}]
        )
    try:
        return LookupRequest.model_validate(data)
    except ValidationError as exc:
        detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise HTTPException(status_code=422, detail=detail) from exc


def load_keys(settings: Settings) -> dict[str, set[str]]:
    keys = {k: set(v) for k, v in settings.api_keys.items()}
    if settings.api_keys_file:
        data = json.loads(settings.api_keys_file.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise ValueError(f'{settings.api_keys_file}: expected {{"key": ["scope", ...]}}')
        keys.update({k: set(v) for k, v in data.items()})
    for scopes in keys.values():
        for scope in scopes - {"*"}:
            validate_scope(scope)
    return keys


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: dict[str, set[str]]) -> None:
    if not keys and not is_loopback(host):
        raise ValueError(
            f"refusing to bind {host} without API keys: set KBFLOW_API_KEYS or KBFLOW_API_KEYS_FILE, "
            "or bind 127.0.0.1"
        )


def given_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or (auth[7:] if auth.lower().startswith("bearer ") else "")


def caller_of(key: str, local_key: str | None) -> str:
    """Who asked, for the audit: a key by a short digest (never the key), `cli` for the key
    kbflow's own commands use, `http` on an open service."""
    if not key:
        return "http"
    if local_key and hmac.compare_digest(key.encode("utf-8", "surrogateescape"), local_key.encode("utf-8")):
        return "cli"
    return "http:" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def answer(
    retriever: Any, settings: Settings, body: LookupRequest, allowed: set[str] | None, caller: str = "http"
) -> tuple[Any, dict[str, Any]]:
    """The lookup behind POST /v1/lookup: scope checks, then the pipeline (sync: run in a thread);
    the result and the JSON answered."""
    scope = body.kb_scope or None
    if scope is not None:
        try:
            validate_scope(scope)
        except InvalidValue as exc:
            raise HTTPException(
                status_code=422, detail=[{"loc": ["body", "kb_scope"], "msg": str(exc)}]
            ) from exc
    if allowed is not None:
        if scope is None:
            raise HTTPException(status_code=403, detail="this key must name a kb_scope it may read")
        if scope not in allowed:
            raise HTTPException(status_code=403, detail=f"this key may not read kb_scope {scope!r}")
    try:
        result = retriever.lookup(body.query, kb_scope=scope, mode=body.mode, caller=caller)
    except UnknownScope as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    except LookupRejected as exc:
        raise HTTPException(status_code=422, detail=[{"loc": ["body", "query"], "msg": str(exc)}]) from exc
    except IndexMissing as exc:
        raise HTTPException(status_code=503, detail=str(exc)) from exc
    return result, (project_for_agent(result, settings).to_json() if body.agent else result.to_json())


def _lifespan(settings: Settings) -> Any:
    """Models and stores load once, before the first request; the lookup pool closes last."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        started = time.perf_counter()
        retriever = get_retriever(settings)
        retriever.warm_up()
        app.state.retriever = retriever
        app.state.admission = Admission(
            settings.serve_workers or (os.cpu_count() or 1), settings.serve_queue, settings.serve_max_wait_ms
        )
        if settings.metrics_access != "off":
            app.state.metrics = ServeMetrics(retriever.stores.sql, app.state.admission)
            app.state.metrics.started(time.perf_counter() - started, retriever.model_ids())
        yield
        app.state.admission.close()

    return lifespan


async def _overloaded(request: Request, exc: Exception) -> JSONResponse:
    return _busy(exc)


def _busy(exc: Exception) -> JSONResponse:
    reason, retry = (exc.reason, exc.retry_after_s) if isinstance(exc, Overloaded) else ("busy", 1)
    return JSONResponse(status_code=503, content={"detail": reason}, headers={"Retry-After": str(retry)})


class AdmitFirst:
    """Admission before any other work: a lookup the service cannot take in time is refused
    before routing, key checks, body reading or a thread hop — under a burst, with the workers
    holding the CPU, a refusal that waits its turn behind them takes as long as an answer."""

    def __init__(self, app: Any, state: Any) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope.get("headers", []))
        scope.setdefault("state", {})["request_id"] = request_id
        send = with_request_id(send, request_id)
        admission = getattr(self.state, "admission", None)
        if admission is not None and scope["path"] == "/v1/lookup":
            try:
                admission.check()
            except Overloaded as exc:
                metrics = getattr(self.state, "metrics", None)
                if metrics is not None:
                    metrics.refusals.inc()
                await _busy(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def key_check(keys: dict[str, set[str]] | None) -> Any:
    """The request's scopes by its key: None = every scope (an open service, `keys` None, or a
    '*' key); 401 for a missing or unknown key. Async: no thread hop per request."""

    async def allowed_scopes(request: Request) -> set[str] | None:
        if keys is None:
            return None
        given = given_key(request)
        offered = given.encode("utf-8", "surrogateescape")  # any header text compares, never raises
        for key, scopes in keys.items():
            if given and hmac.compare_digest(offered, key.encode("utf-8")):
                return None if "*" in scopes else scopes
        raise HTTPException(status_code=401, detail="missing or unknown API key")

    return allowed_scopes


def create_app(settings: Settings, local_key: str | None = None, host: str = "127.0.0.1") -> FastAPI:
    """`local_key` reads every scope: `kbflow serve` announces it, in a file only its owner can
    read, to kbflow commands on the same home."""
    keys = load_keys(settings)
    configured = bool(keys)
    if local_key:
        keys = {**keys, local_key: {"*"}}

    app = FastAPI(title="kbflow lookup", version="1", lifespan=_lifespan(settings))
    app.add_exception_handler(Overloaded, _overloaded)
    app.add_middleware(AdmitFirst, state=app.state)

    allowed_scopes = key_check(keys if configured else None)
    Allowed = Annotated[set[str] | None, Depends(allowed_scopes)]

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "auth": configured}  # nothing internal: no store address, no paths

    @app.get("/v1/scopes")
    def scopes(allowed: Allowed) -> dict[str, Any]:
        from kbflow.ingest.status import scope_statuses

        rows = [s.to_dict() for s in scope_statuses(app.state.retriever.stores)]
        shown = ("kb_scope", "documents", "chunks", "analyzer", "model")
        visible = [r for r in rows if allowed is None or r["kb_scope"] in allowed]
        return {"scopes": [{k: r[k] for k in shown} for r in visible]}

    @app.post(
        "/v1/lookup",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": LookupRequest.model_json_schema()}},
            }
        },
    )
    async def lookup(request: Request, allowed: Allowed) -> dict[str, Any]:
        seen = Seen("-", request.state.request_id, "")
        with observed(getattr(app.state, "metrics", None), settings, seen):
            body = parse_lookup_body(await read_body(request))  # AdmitFirst let it in; run() checks again
            seen.mode, seen.query = body.mode, body.query
            caller = caller_of(given_key(request), local_key)
            seen.result, out = await app.state.admission.run(
                answer, app.state.retriever, settings, body, allowed, caller
            )
        return out

    if settings.metrics_access != "off":
        open_metrics = settings.metrics_access == "open" or (
            settings.metrics_access == "auto" and is_loopback(host)
        )
        _add_metrics(app, None if open_metrics else allowed_scopes)
    return app


def _add_metrics(app: FastAPI, needs_key: Any) -> None:
    """GET /metrics: Prometheus text; `needs_key` (the lookup's key check) when not open."""

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if needs_key is not None:
            await needs_key(request)  # 401 without a known key
        text = await run_in_threadpool(generate_latest, app.state.metrics.registry)  # reads SQL
        return Response(text, media_type=CONTENT_TYPE_LATEST)
