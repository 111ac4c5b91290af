"""What a scope is built with: its embedding model, the pipeline fingerprint, the analyzer and
the lexical analysis.

A scope keeps the model and analyzer it was built with; only a full rebuild changes them
(`ScopeConfigMismatch` says so). Everything that shapes stored chunks goes into the fingerprint,
so a change to any of it rewrites the documents it touches. The model is chosen per scope: the
scope's own setting, else `embedding_model` when set, else by the documents' language (Chinese
gets `multilingual_model`, everything else the packaged English model).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kbflow.core.analysis import LexicalConfig
from kbflow.core.errors import InputError
from kbflow.core.models import ModelChoice, choice_for_id, model_id_for, resolve_model
from kbflow.core.settings import Settings
from kbflow.core.sql import ScopeRow
from kbflow.ingest.chunking import CHUNKER_VERSION
from kbflow.ingest.parsing import ParsedDocument


class ScopeConfigMismatch(InputError, RuntimeError):
    """The scope was built with another model or analyzer; only --full may change that."""


def pipeline_hash(settings: Settings, model_id: str | None = None) -> str:
    """Fingerprint of everything besides the file that shapes stored chunks; `model_id` is the
    scope's model (default: the one the settings name for every scope)."""
    model_id = model_id or model_id_for(settings.embedding_model, settings.embedding_backend)
    key = f"{CHUNKER_VERSION}|{settings.chunk_max_chars}|{settings.chunk_overlap_chars}|{model_id}"
    key += "|" + LexicalConfig(settings.lexical_analysis, settings.lexical_fields).version
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def is_chinese(docs: Sequence[ParsedDocument]) -> bool:
    """A scope is Chinese when any of its documents is (`language: zh`, or mostly CJK text):
    the English model cannot embed those, the multilingual one embeds both."""
    return any(d.language.startswith("zh") for d in docs)


def choose_model(settings: Settings, scope: str, docs: Sequence[ParsedDocument]) -> tuple[ModelChoice, bool]:
    """(the model this scope should be built with, whether it was chosen automatically). Set
    for the scope, else `embedding_model` when set, else by language. Checked, not loaded: an
    unknown model or a missing package is a ModelUnavailable naming what to install."""
    backend = settings.embedding_backend
    own = settings.scope_model(scope)
    if own is not None:
        return resolve_model(own, backend), False
    if "embedding_model" in settings.model_fields_set:
        return resolve_model(settings.embedding_model, backend), False
    if is_chinese(docs) and settings.multilingual_model:
        return resolve_model(settings.multilingual_model, backend), True
    return resolve_model("", backend), "embedding_backend" not in settings.model_fields_set


def scope_model(
    settings: Settings, scope: str, docs: Sequence[ParsedDocument], current: str | None, full: bool
) -> tuple[ModelChoice, str]:
    """(the model this run builds the scope with, a note for the summary or ""). An incremental
    run keeps the model the scope was built with when the choice was automatic (a new default
    never turns a reindex into a demand for --full) and says what --full would change; a model
    that was set explicitly and differs is a ScopeConfigMismatch when the run is incremental."""
    wanted, auto = choose_model(settings, scope, docs)
    if current is None or full or wanted.model_id == current:
        return wanted, ""
    if auto:
        kept = choice_for_id(current)
        return kept, (
            f"scope '{scope}' keeps {kept.label}, which it was built with; `kbflow reindex --full "
            f"--scope {scope}` rebuilds it with {wanted.label}"
        )
    raise ScopeConfigMismatch(
        f"scope '{scope}' was indexed with model '{current}' but this run uses "
        f"'{wanted.model_id}'; rerun with --full to rebuild the scope"
    )


def choose_analyzer(
    settings: Settings, scope: str, docs: Sequence[ParsedDocument], current: str | None = None
) -> str:
    """Per-scope setting first; else jieba when the scope's documents are Chinese; else the
    analyzer the scope already has (a rebuild from one of its roots keeps it) unless one was
    set (--analyzer, KBFLOW_ANALYZER); else the default."""
    own = settings.scope_analyzer(scope)
    if own:
        return own
    if is_chinese(docs):
        return "jieba"
    if "analyzer" in settings.model_fields_set:
        return settings.analyzer
    return current or settings.analyzer


def lexical_config(settings: Settings, analyzer: str) -> LexicalConfig:
    """kbflow analyses English and Chinese text itself (the same tokens reach Milvus Lite and a
    server); `lexical_analysis = lowercase` leaves tokenizing to Milvus (jieba for Chinese)."""
    return LexicalConfig(settings.lexical_analysis, settings.lexical_fields)


def check_scope_config(s: Settings, scope: str, scope_row: ScopeRow, model_id: str, dim: int) -> None:
    """An incremental run must use the model and analyzer the scope was built with, and a model
    whose vectors fit the scope's collection."""
    if scope_row.model_id != model_id:
        raise ScopeConfigMismatch(
            f"scope '{scope}' was indexed with model '{scope_row.model_id}' but this run uses "
            f"'{model_id}'; rerun with --full to rebuild the scope"
        )
    if scope_row.dim != dim:
        raise ScopeConfigMismatch(
            f"model '{model_id}' now gives {dim}-dimensional vectors but scope '{scope}' holds "
            f"{scope_row.dim}-dimensional ones (the model changed under the same name); rerun with "
            "--full to rebuild the scope"
        )
    wanted = s.scope_analyzer(scope)
    if wanted and wanted != scope_row.analyzer:
        raise ScopeConfigMismatch(
            f"scope '{scope}' uses analyzer '{scope_row.analyzer}' but '{wanted}' is configured; "
            "rerun with --full to rebuild the scope"
        )
