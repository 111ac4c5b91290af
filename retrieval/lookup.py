"""Public entry points: `lookup_knowledge` and `project_for_agent`.

The model and the stores are opened once per process (per settings' store locations) and
reused by every call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kbflow.core.settings import Settings
from kbflow.core.stores import open_stores, with_announced_endpoint
from kbflow.retrieval.contracts import LookupResult, RagToolResult
from kbflow.retrieval.pipeline import Retriever
from kbflow.retrieval.projection import ProjectionLimits
from kbflow.retrieval.projection import project_for_agent as _project

_lock = threading.Lock()
_retrievers: dict[tuple[str, str, str], Retriever] = {}


def get_retriever(settings: Settings | None = None) -> Retriever:
    settings = with_announced_endpoint(settings or Settings())
    key = (settings.resolved_milvus_uri, settings.milvus_database, settings.resolved_database_url)
    with _lock:
        retriever = _retrievers.get(key)
        if retriever is None or retriever.stores.settings != settings:
            retriever = Retriever(open_stores(settings))
            _retrievers[key] = retriever
        return retriever


def reset_retrievers() -> None:
    with _lock:
        _retrievers.clear()


def lookup_knowledge(
    query: str,
    *,
    kb_scope: str | None = None,
    mode: str = "hybrid",
    settings: Settings | None = None,
    depth: int | None = None,
    exclude: str | Sequence[str] = (),
    caller: str | None = None,
) -> LookupResult:
    """Look up evidence for `query` in `kb_scope` (None = the settings' scope, empty = all).
    `depth` widens the candidate list (for evaluation); the evidence stays bounded by return_n.
    `exclude` searches as if these documents (by source; a string is one) were not indexed. `caller` names who
    asked, in the audit that `kbflow gaps` reads (default python)."""
    return get_retriever(settings).lookup(
        query, kb_scope=kb_scope, mode=mode, depth=depth, exclude=exclude, caller=caller
    )


def project_for_agent(result: LookupResult, settings: Settings | None = None) -> RagToolResult:
    return _project(result, ProjectionLimits.from_settings(settings or Settings()))
