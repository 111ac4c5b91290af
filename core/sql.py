"""SQL side of the store: documents, L0 index, embedding cache, scopes and reindex runs.

Plain SQLAlchemy 2 models that run unchanged on SQLite (default) and PostgreSQL. Every query
binds its parameters; nothing user-controlled is formatted into SQL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from kbflow.core.schema import ensure_schema


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class ScopeRow(Base):
    """One kb_scope: which physical collection its alias points to and how it was built."""

    __tablename__ = "scopes"
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    alias: Mapped[str] = mapped_column(String(255))
    physical_collection: Mapped[str] = mapped_column(String(255))
    analyzer: Mapped[str] = mapped_column(String(32))
    model_id: Mapped[str] = mapped_column(String(512))
    dim: Mapped[int] = mapped_column(Integer)
    # kbflow's own lexical analysis (kbflow.core.analysis.LexicalConfig.version); NULL = built before
    # it existed, BM25 over the raw text
    analysis: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class DocumentRow(Base):
    """The record table behind incremental reindex (cf. LangChain's record manager)."""

    __tablename__ = "documents"
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    doc_id: Mapped[str] = mapped_column(String(512), primary_key=True)  # the source as written
    root: Mapped[str] = mapped_column(Text)
    source_path: Mapped[str] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text, default="")
    breadcrumb: Mapped[str] = mapped_column(Text, default="")
    content_hash: Mapped[str] = mapped_column(String(64))
    pipeline_hash: Mapped[str] = mapped_column(String(64))
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    # writing: Milvus write in progress (an interrupted run left it; the next run redoes it)
    # indexed: Milvus and SQL agree; error: the file's latest version failed, last good kept
    status: Mapped[str] = mapped_column(String(16))
    doc_id_derived: Mapped[bool] = mapped_column(Boolean, default=False)
    extra_metadata: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    indexed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # size:mtime_ns:ctime_ns:inode when the indexed version was read; NULL: read it next time
    file_stat: Mapped[str | None] = mapped_column(String(96), nullable=True)
    language: Mapped[str | None] = mapped_column(String(16), nullable=True)

    __table_args__ = (Index("ix_documents_root", "root"),)


class L0EntryRow(Base):
    """Per-document navigation entry (SPEC §2.4)."""

    __tablename__ = "l0_entries"
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    doc_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    title: Mapped[str] = mapped_column(Text, default="")
    breadcrumb: Mapped[str] = mapped_column(Text, default="")
    category: Mapped[str] = mapped_column(Text, default="")
    domains: Mapped[list[str]] = mapped_column(JSON, default=list)
    keywords: Mapped[list[str]] = mapped_column(JSON, default=list)
    entities: Mapped[list[str]] = mapped_column(JSON, default=list)


class L0TermRow(Base):
    """One normalized term of an L0 entry, indexed by (scope, term) so a query's terms match
    with one bound `IN` lookup instead of a scan."""

    __tablename__ = "l0_terms"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb_scope: Mapped[str] = mapped_column(String(64))
    doc_id: Mapped[str] = mapped_column(String(512))
    term: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(16))  # title | category | domain | keyword | entity

    __table_args__ = (
        Index("ix_l0_terms_scope_term", "kb_scope", "term"),
        Index("ix_l0_terms_scope_doc", "kb_scope", "doc_id"),
    )


class DocumentTermsRow(Base):
    """A document's analysed terms (space-separated), as its chunks were indexed: what its
    document frequencies were counted from, so a changed or removed document is counted off
    exactly (core.vocabulary)."""

    __tablename__ = "document_terms"
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    doc_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    terms: Mapped[str] = mapped_column(Text, default="")


class ScopeTermRow(Base):
    """In how many of a scope's documents a term occurs (term "" counts the documents): the
    scope's vocabulary, kept in step with document_terms by every write."""

    __tablename__ = "scope_terms"
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    term: Mapped[str] = mapped_column(String(256), primary_key=True)
    df: Mapped[int] = mapped_column(Integer, default=0)


class EmbeddingCacheRow(Base):
    __tablename__ = "embedding_cache"
    model_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    text_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, little-endian
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CalibrationRow(Base):
    """The gate's calibration for one (embedding model, scope); scope "*" serves every scope of
    the model that has none of its own. `params` is kbflow.retrieval.gate.Calibration; `data`
    says what it was fitted on."""

    __tablename__ = "calibrations"
    model_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReindexRunRow(Base):
    __tablename__ = "reindex_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    mode: Mapped[str] = mapped_column(String(16))
    roots: Mapped[list[str]] = mapped_column(JSON)
    kb_scope: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ok: Mapped[bool] = mapped_column(Boolean)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)


class ScopeLockRow(Base):
    """Held by the one reindex run working on a scope (see ingest.locks)."""

    __tablename__ = "scope_locks"
    kb_scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LookupAuditRow(Base):
    """One row per lookup, written before the result is returned (SPEC §3.9)."""

    __tablename__ = "lookup_audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    query: Mapped[str] = mapped_column(Text)
    kb_scope: Mapped[str | None] = mapped_column(String(64), nullable=True)
    mode: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[list[Any]] = mapped_column(JSON)
    selected_attempt: Mapped[str] = mapped_column(String(32))
    fallback_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    evidence_keys: Mapped[list[str]] = mapped_column(JSON)
    relevance_level: Mapped[str | None] = mapped_column(String(16), nullable=True)
    found: Mapped[bool] = mapped_column(Boolean)
    timings_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    # the owner's view (insights/gaps.py) reads these without parsing `result`:
    caller: Mapped[str | None] = mapped_column(String(64), nullable=True)  # cli, python, http:<key id>, eval
    outcome: Mapped[str | None] = mapped_column(String(8), nullable=True)  # found | weak | none
    total_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    top_key: Mapped[str | None] = mapped_column(String(600), nullable=True)  # what came nearest
    top_quality: Mapped[float | None] = mapped_column(Float, nullable=True)
    query_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)  # sha256, not with `none`
    # the query's embedding (float16), kept for weak and no-evidence lookups: gaps cluster on it
    query_vector: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    vector_model: Mapped[str | None] = mapped_column(String(200), nullable=True)

    __table_args__ = (
        Index("ix_lookup_audit_created", "created_at"),
        Index("ix_lookup_audit_scope_created", "kb_scope", "created_at"),
    )


class EvalRunRow(Base):
    """One mode of one live golden-case eval run: the eval history the owner's report charts."""

    __tablename__ = "eval_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    source: Mapped[str] = mapped_column(String(16))  # live | snapshot
    mode: Mapped[str] = mapped_column(String(16))
    cases: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # the report's metrics of that mode

    __table_args__ = (Index("ix_eval_runs_created", "created_at"),)


class SqlStore:
    """Engine + session factory. A new database gets the latest schema; an older one must be
    migrated with `kbflow db upgrade` (`migrate=False` skips the check, for that command)."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = url
        self.engine: Engine = create_engine(url, future=True)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        if migrate:
            ensure_schema(self.engine)
        self.session: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL keeps it consistent; one fsync per checkpoint
    cur.close()
