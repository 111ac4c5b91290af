"""One settings object for every knob (SPEC §1).

Values come from, lowest to highest priority: defaults here, a TOML settings file, `KBFLOW_*`
environment variables, then CLI flags (the CLI passes them as keyword arguments). The file is
`KBFLOW_CONFIG` when set (`kbflow --config FILE` sets it for the command), else `kbflow.toml`
in the working directory when there is one; its top-level keys are the field names below
(`default_scope = "team-a"`, `chunk_max_chars = 1500`). All state lives under `home` unless
`milvus_uri` / `database_url` point elsewhere.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from kbflow.core.errors import InputError
from kbflow.core.user_cache import user_models_dir
from kbflow.core.validation import validate_scope

CONFIG_ENV = "KBFLOW_CONFIG"
DEFAULT_CONFIG_FILE = "kbflow.toml"

Analyzer = Literal["standard", "jieba"]
SearchMode = Literal["hybrid", "dense", "bm25"]
LexicalMode = Literal["stem+ids", "stem", "lowercase"]
Fusion = Literal["rrf", "convex"]
EmbeddingBackend = Literal["torch", "onnx", "onnx-int8"]
AuditQueries = Literal["full", "hashed", "none"]


class ScopeSettings(BaseModel):
    """What `[scopes.<name>]` in kbflow.toml (or KBFLOW_SCOPES as JSON) sets for one scope."""

    model_config = ConfigDict(extra="forbid")
    analyzer: Analyzer | None = Field(None, description="BM25 analyzer of the scope.")
    embedding_model: str | None = Field(
        None, description="Embedding model of the scope (all-MiniLM-L6-v2, multilingual-e5-small, a path)."
    )


MAX_QUERY_CHARS_CAP = 4000  # what one HTTP lookup body carries at any encoding (12 bytes a character)


class ConfigFileError(InputError, ValueError):
    """A settings file that was named but is missing, or that is not valid TOML."""


def config_file() -> Path | None:
    """The settings file in effect, read at each construction (so relative to the working
    directory of the moment): KBFLOW_CONFIG, which must exist, else ./kbflow.toml if present."""
    named = os.environ.get(CONFIG_ENV, "").strip()
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigFileError(f"settings file {path} ({CONFIG_ENV} or --config) does not exist")
        return path
    local = Path(DEFAULT_CONFIG_FILE)
    return local if local.is_file() else None


def _toml_source(settings_cls: type[BaseSettings], path: Path) -> TomlConfigSettingsSource:
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"settings file {path} is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"settings file {path} cannot be read: {exc}") from None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KBFLOW_", extra="forbid", validate_default=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (keyword arguments) > KBFLOW_* environment > the settings file > defaults."""
        path = config_file()
        return (init_settings, env_settings, *([_toml_source(settings_cls, path)] if path else []))

    # --- where state lives ------------------------------------------------------------
    home: Path = Field(Path(".kbflow"), description="Directory holding the embedded stores.")
    milvus_uri: str = Field("", description="Milvus URI; empty = Milvus Lite file <home>/milvus.db.")
    milvus_token: str = Field("", description="Milvus token (user:password or API key).")
    milvus_database: str = Field(
        "",
        pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,63})?$",
        description="Milvus database; empty = the server's default. Created when absent.",
    )
    database_url: str = Field("", description="SQLAlchemy URL; empty = SQLite file <home>/kbflow.db.")
    collection_prefix: str = Field(
        "kbflow",
        pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$",
        description="Prefix of Milvus aliases and collections.",
    )

    # --- HTTP service ---------------------------------------------------------------
    api_keys: dict[str, list[str]] = Field(
        default_factory=dict,
        description='API key -> kb_scopes it may read ("*" = all), e.g. {"k1": ["ops"]}.',
    )
    api_keys_file: Path | None = Field(None, description="JSON file with the same mapping as api_keys.")

    serve_workers: int = Field(
        0, ge=0, le=256, description="Lookups the service runs at once; 0 = one per CPU core."
    )
    serve_max_wait_ms: int = Field(
        2000,
        ge=0,
        le=600_000,
        description="Longest wait for a worker the service lets a lookup in for, estimated from "
        "recent service times; a lookup that would wait longer gets 503 with Retry-After at once. "
        "0 = no wait rule (serve_queue alone).",
    )
    serve_queue: int = Field(
        1000,
        ge=0,
        le=100_000,
        description="Hard ceiling on lookups waiting for a worker, whatever the expected wait: "
        "past it the service answers 503 at once instead of queueing without bound.",
    )

    metrics_access: Literal["auto", "open", "key", "off"] = Field(
        "auto",
        description="GET /metrics: auto = open when serve binds loopback, else an API key is needed; "
        "open; key (always a key); off (no endpoint).",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="json: serve logs one JSON object per line (never a key; the question only "
        "when audit_store_queries = full)."
    )

    # --- the lookup audit -------------------------------------------------------------
    audit_store_queries: AuditQueries = Field(
        "full",
        description="What the lookup audit keeps of each question: full (its text), hashed (a sha256 "
        "and, for unanswered ones, its embedding: gaps still group them, without examples) or none.",
    )
    audit_retention_days: int = Field(
        90,
        ge=0,
        le=36_500,
        description="Audit rows older than this are purged by the knowledge-gaps flow and "
        "`kbflow audit purge --yes`; 0 = keep them forever.",
    )

    # --- embedding ------------------------------------------------------------------
    embedding_model: str = Field(
        "", description="sentence-transformers model name or path; empty = packaged all-MiniLM-L6-v2."
    )
    multilingual_model: str = Field(
        "multilingual-e5-small",
        description="The model a scope whose documents are Chinese gets when no model is set for it "
        "(nor embedding_model for every scope); empty = the English default there too.",
    )
    embedding_device: str = Field("", description="torch device; empty = cuda when present, else cpu.")
    embedding_batch_size: int = Field(64, ge=1, le=4096, description="Chunks embedded per forward pass.")
    embedding_backend: EmbeddingBackend = Field(
        "onnx",
        description="onnx (onnxruntime, fp32: the same rankings as torch, 3x faster query embedding, "
        "no torch import for a lookup), onnx-int8 or torch (sentence-transformers). ONNX graphs are "
        "exported from the model on first use, offline, into models_dir. Part of the model identity: "
        "switching asks for reindex --full. Not set, a home keeps the backend its scopes were built with.",
    )
    models_dir: Path | None = Field(
        None,
        description="Where ONNX exports are cached; empty = this user's cache ($XDG_CACHE_HOME or "
        "~/.cache, then kbflow/models), shared by every home, or <home>/models where that cannot be written.",
    )
    embedding_threads: int = Field(
        0,
        ge=0,
        le=256,
        description="Threads per forward pass; 0 = measured defaults: lookups 1, a reindex every core, "
        "or every core but one while a kbflow serve runs on the same home.",
    )

    # --- ingestion ------------------------------------------------------------------
    analyzer: Analyzer = Field(
        "standard", description="BM25 analyzer of a new scope whose documents are not Chinese."
    )
    scope_analyzers: dict[str, Analyzer] = Field(
        default_factory=dict, description='Per-scope analyzer, e.g. {"kb-zh": "jieba"}.'
    )
    scopes: dict[str, ScopeSettings] = Field(
        default_factory=dict,
        description='Per-scope settings: [scopes.kb-zh] analyzer = "jieba", embedding_model = '
        '"multilingual-e5-small" (env: KBFLOW_SCOPES as JSON).',
    )
    default_scope: str = Field("default", description="kb_scope of files whose frontmatter names none.")
    lexical_analysis: LexicalMode = Field(
        "stem+ids",
        description="BM25 text analysis done by kbflow: stem+ids (stop words, Snowball stems, "
        "identifiers whole and split), stem (no identifier splitting), lowercase (Milvus only).",
    )
    lexical_fields: bool = Field(True, description="Title and breadcrumb take part in the BM25 match.")
    chunk_max_chars: int = Field(1000, ge=200, le=8000, description="Longest chunk, in characters.")
    chunk_overlap_chars: int = Field(
        120, ge=0, le=1000, description="Characters of prose repeated between neighbouring chunks."
    )
    max_file_bytes: int = Field(
        1_000_000, ge=1024, description="Larger files are rejected, named in the report."
    )
    max_delete_fraction: float = Field(
        0.5,
        ge=0,
        le=1,
        description="A reindex that would remove more than this share of a scope's documents "
        "removes none and fails (a failed mount or half-done checkout looks like that).",
    )
    allow_mass_delete: bool = Field(
        False, description="Confirm removals the max_delete_fraction or empty-root guards refuse."
    )
    trust_file_stat: bool = Field(
        True,
        description="An incremental reindex does not read a file whose size, mtime, ctime and "
        "inode equal those recorded when it was indexed (a no-change run then costs a directory "
        "walk). Turn off on filesystems that do not keep mtime (some network mounts).",
    )
    reindex_batch_chars: int = Field(
        500_000,
        ge=10_000,
        description="A reindex reads, chunks, embeds and writes documents this many characters "
        "at a time, so its memory does not grow with the corpus.",
    )

    # --- retrieval (SPEC §1 defaults) ------------------------------------------------
    search_mode: SearchMode = Field("hybrid", description="Lookup mode: hybrid, dense or bm25.")
    kb_scope: str = Field("", description="Scope for lookups; empty = all scopes.")
    fusion: Fusion = Field(
        "convex", description="How the dense and BM25 legs are fused: convex (min-max scores) or rrf."
    )
    lexical_trust: bool = Field(
        True, description="Weight the BM25 leg by the share of the query its best hits contain."
    )
    convex_alpha: float = Field(
        0.7, gt=0, lt=1, description="Convex fusion: the dense leg's share (before the weights and trust)."
    )
    rrf_k: int = Field(60, ge=1, description="RRF fusion: the rank constant k.")
    dense_weight: float = Field(1.0, gt=0, description="Weight of the dense leg in either fusion.")
    sparse_weight: float = Field(1.0, gt=0, description="Weight of the BM25 leg in either fusion.")
    retrieve_k: int = Field(20, ge=1, le=1000, description="Candidates each leg retrieves.")
    return_n: int = Field(5, ge=1, le=100, description="Evidence items a lookup returns.")
    max_chunks_per_document: int = Field(2, ge=1, description="Evidence items one document may fill.")
    max_l2: float = Field(
        2.0,
        gt=0,
        description="The spec's L2 cut-off; unit vectors are never farther apart than 2.0, so the pipeline "
        "does not apply it.",
    )
    # Empty = the calibration's (kbflow eval calibrate; the packaged model ships one). Set, they
    # override it for every scope.
    usable_floor: float | None = Field(None, ge=0, le=1, description="Quality below it: not evidence.")
    reference_threshold: float | None = Field(
        None, ge=0, le=1, description="Below it: weak evidence (on the level model's confidence where the "
        "calibration has one, else on quality)."
    )
    precise_threshold: float | None = Field(
        None, ge=0, le=1, description="At or above it: PRECISE (on the same score as the reference)."
    )
    level_by_coverage: bool = Field(
        True,
        description="Levels ask that the evidence cover the question: the calibration's level model reads "
        "each question word's weight (one embedding per word, at most 16, for lookups with usable evidence) "
        "and which words the evidence and the scope have. False: levels read quality alone (cheaper, and "
        "confidently wrong more often on single-product scopes).",
    )
    fallback_enabled: bool = Field(True, description="Retry a weak filtered attempt once without the filter.")
    lexical_quality_analyzers: list[Analyzer] = Field(
        default_factory=lambda: ["jieba"],
        description="Scopes with these analyzers, indexed with the default English model, take "
        "quality from lexical coverage: all-MiniLM-L6-v2 gives no meaningful distance for Chinese.",
    )
    context_char_budget: int = Field(4000, ge=100, description="Characters of evidence text a lookup packs.")
    max_query_chars: int = Field(
        500, ge=1, le=MAX_QUERY_CHARS_CAP,
        description="Longer queries are answered truncated (flagged), on every path.",
    )
    max_excerpt_chars: int = Field(1200, ge=1, description="Agent projection: longest excerpt per item.")
    max_evidence: int = Field(8, ge=1, description="Agent projection: most evidence items.")
    max_projection_bytes: int = Field(
        16 * 1024, ge=1024, description="Agent projection: largest JSON answer."
    )

    @model_validator(mode="after")
    def _backend_fits_device(self) -> Settings:
        """ONNX backends run on the CPU: a GPU device with no backend chosen means torch."""
        if self.embedding_device in ("", "cpu") or self.embedding_backend == "torch":
            return self
        if "embedding_backend" in self.model_fields_set:
            raise ValueError(
                f"embedding_backend {self.embedding_backend} runs on the CPU; embedding_device "
                f"{self.embedding_device!r} needs embedding_backend torch"
            )
        self.embedding_backend = "torch"
        return self

    @field_validator("default_scope")
    @classmethod
    def _scope_ok(cls, v: str) -> str:
        return validate_scope(v)

    @field_validator("kb_scope")
    @classmethod
    def _lookup_scope_ok(cls, v: str) -> str:
        return validate_scope(v) if v else v

    @field_validator("scope_analyzers", "scopes")
    @classmethod
    def _scope_keys_ok(cls, v: dict[str, Any]) -> dict[str, Any]:
        for scope in v:
            validate_scope(scope)
        return v

    def scope_analyzer(self, scope: str) -> str | None:
        """The analyzer set for this scope ([scopes.S] analyzer, else scope_analyzers), or None."""
        own = self.scopes.get(scope)
        if own is not None and own.analyzer:
            return own.analyzer
        return self.scope_analyzers.get(scope)

    def scope_model(self, scope: str) -> str | None:
        """The embedding model set for this scope, or None (then embedding_model, or the choice by
        language)."""
        own = self.scopes.get(scope)
        return own.embedding_model if own is not None and own.embedding_model is not None else None

    @property
    def resolved_milvus_uri(self) -> str:
        return self.milvus_uri or str(self.home / "milvus.db")

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'kbflow.db'}"

    @property
    def resolved_models_dir(self) -> Path:
        """Where ONNX exports of the embedding model are cached: one cache per user, so a new home
        (an eval, a second knowledge base) does not spend ~8 s exporting the model again."""
        return self.models_dir or user_models_dir() or self.home / "models"

    @property
    def uses_milvus_lite(self) -> bool:
        return not self.resolved_milvus_uri.startswith(("http://", "https://", "tcp://", "grpc://"))

    def ensure_home(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)


def setting_origins(flags: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where each field's value comes from, by the precedence Settings applies: the flag that
    gave it (`flags`: field -> flag), `env KBFLOW_X`, the settings file's path, or `default`."""
    path = config_file()
    from_file = set(_toml_source(Settings, path)()) if path else set()
    from_env = set(EnvSettingsSource(Settings)())
    flags = flags or {}
    out: dict[str, str] = {}
    for name in Settings.model_fields:
        if name in flags:
            out[name] = flags[name]
        elif name in from_env:
            out[name] = f"env KBFLOW_{name.upper()}"
        elif name in from_file:
            out[name] = str(path)
        else:
            out[name] = "default"
    return out


def public_value(name: str, value: Any) -> Any:
    """A setting as `kbflow config show` prints it: secrets masked, JSON-friendly."""
    if name == "milvus_token":
        return "***" if value else ""
    if name == "api_keys":
        return {f"***{n}": scopes for n, scopes in enumerate(value.values(), start=1)}
    if name == "database_url" and "@" in value and "://" in value:
        scheme, rest = value.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        return f"{scheme}://{cred.split(':', 1)[0]}:***@{host}" if ":" in cred else value
    return str(value) if isinstance(value, Path) else value
