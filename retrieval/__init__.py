"""Read side: `lookup_knowledge(query, kb_scope=..., mode=...)` -> LookupResult."""

from kbflow.retrieval.lookup import lookup_knowledge, project_for_agent

__all__ = ["lookup_knowledge", "project_for_agent"]
