"""`lookup_knowledge` as a Prefect task, for use inside other flows.

from kbflow.flows.lookup import lookup_knowledge_task

@flow
def triage(alert: str):
    evidence = lookup_knowledge_task(alert, kb_scope="payments", agent=True)
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from kbflow.core.settings import Settings
from kbflow.flows.reindex import _retry_transient
from kbflow.retrieval import lookup_knowledge, project_for_agent


@task(
    name="lookup-knowledge",
    retries=2,
    retry_delay_seconds=[1, 5],
    retry_condition_fn=_retry_transient,
    cache_policy=NO_CACHE,
)
def lookup_knowledge_task(
    query: str,
    kb_scope: str | None = None,
    mode: str = "hybrid",
    agent: bool = False,
    home: str | None = None,
) -> dict[str, Any]:
    """The LookupResult (or, with agent=True, the RagToolResult) as JSON."""
    settings = Settings(**({"home": home} if home else {}))
    result = lookup_knowledge(query, kb_scope=kb_scope, mode=mode, settings=settings, caller="prefect")
    return project_for_agent(result, settings).to_json() if agent else result.to_json()
