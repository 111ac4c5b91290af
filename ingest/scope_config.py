"""What a scope is built with: the pipeline fingerprint, the analyzer and the lexical analysis.

A scope keeps the model and analyzer it was built with; only a full rebuild changes them
(`ScopeConfigMismatch` says so). Everything that shapes stored chunks goes into the fingerprint,
so a change to any of it rewrites the documents it touches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kbflow.core.analysis import LexicalConfig
from kbflow.core.embedder import model_id_for
from kbflow.core.errors import InputError
from kbflow.core.settings import Settings
from kbflow.core.sql import ScopeRow
from kbflow.ingest.chunking import CHUNKER_VERSION
from kbflow.ingest.parsing import ParsedDocument


class ScopeConfigMismatch(InputError, RuntimeError):
    """The scope was built with another model or analyzer; only --full may change that."""


def pipeline_hash(settings: Settings) -> str:
    """Fingerprint of everything besides the file that shapes stored chunks."""
    key = f"{CHUNKER_VERSION}|{settings.chunk_max_chars}|{settings.chunk_overlap_chars}|" + model_id_for(
        settings.embedding_model, settings.embedding_backend
    )
    key += "|" + LexicalConfig(settings.lexical_analysis, settings.lexical_fields).version
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def choose_analyzer(
    settings: Settings, scope: str, docs: Sequence[ParsedDocument], current: str | None = None
) -> str:
    """Per-scope setting first; else jieba when the scope's documents are Chinese; else the
    analyzer the scope already has (a rebuild from one of its roots keeps it) unless one was
    set (--analyzer, KBFLOW_ANALYZER); else the default."""
    if scope in settings.scope_analyzers:
        return settings.scope_analyzers[scope]
    if docs and any(d.language.startswith("zh") for d in docs):
        return "jieba"
    if "analyzer" in settings.model_fields_set:
        return settings.analyzer
    return current or settings.analyzer


def lexical_config(settings: Settings, analyzer: str) -> LexicalConfig:
    """kbflow analyses English text itself; jieba scopes leave tokenizing to Milvus."""
    mode = settings.lexical_analysis if analyzer == "standard" else "lowercase"
    return LexicalConfig(mode, settings.lexical_fields)


def check_scope_config(s: Settings, scope: str, scope_row: ScopeRow, model_id: str) -> None:
    """An incremental run must use the model and analyzer the scope was built with."""
    if scope_row.model_id != model_id:
        raise ScopeConfigMismatch(
            f"scope '{scope}' was indexed with model '{scope_row.model_id}' but this run uses "
            f"'{model_id}'; rerun with --full to rebuild the scope"
        )
    wanted = s.scope_analyzers.get(scope)
    if wanted and wanted != scope_row.analyzer:
        raise ScopeConfigMismatch(
            f"scope '{scope}' uses analyzer '{scope_row.analyzer}' but '{wanted}' is configured; "
            "rerun with --full to rebuild the scope"
        )
