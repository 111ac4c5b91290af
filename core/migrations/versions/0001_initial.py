"""Initial schema: scopes, documents, L0, embedding cache, reindex runs, locks, lookup audit.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "scopes",
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("alias", sa.String(255), nullable=False),
        sa.Column("physical_collection", sa.String(255), nullable=False),
        sa.Column("analyzer", sa.String(32), nullable=False),
        sa.Column("model_id", sa.String(512), nullable=False),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_table(
        "documents",
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("doc_id", sa.String(64), primary_key=True),
        sa.Column("root", sa.Text, nullable=False),
        sa.Column("source_path", sa.Text, nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("breadcrumb", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("pipeline_hash", sa.String(64), nullable=False),
        sa.Column("chunk_count", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("doc_id_derived", sa.Boolean, nullable=False),
        sa.Column("extra_metadata", sa.JSON, nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("indexed_at", TZ, nullable=True),
    )
    op.create_index("ix_documents_root", "documents", ["root"])
    op.create_table(
        "l0_entries",
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("doc_id", sa.String(64), primary_key=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("breadcrumb", sa.Text, nullable=False),
        sa.Column("category", sa.Text, nullable=False),
        sa.Column("domains", sa.JSON, nullable=False),
        sa.Column("keywords", sa.JSON, nullable=False),
        sa.Column("entities", sa.JSON, nullable=False),
    )
    op.create_table(
        "l0_terms",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kb_scope", sa.String(64), nullable=False),
        sa.Column("doc_id", sa.String(64), nullable=False),
        sa.Column("term", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
    )
    op.create_index("ix_l0_terms_scope_term", "l0_terms", ["kb_scope", "term"])
    op.create_index("ix_l0_terms_scope_doc", "l0_terms", ["kb_scope", "doc_id"])
    op.create_table(
        "embedding_cache",
        sa.Column("model_id", sa.String(512), primary_key=True),
        sa.Column("text_hash", sa.String(64), primary_key=True),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
    )
    op.create_table(
        "reindex_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("finished_at", TZ, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("roots", sa.JSON, nullable=False),
        sa.Column("kb_scope", sa.String(64), nullable=True),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("summary", sa.JSON, nullable=False),
    )
    op.create_table(
        "scope_locks",
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("acquired_at", TZ, nullable=False),
        sa.Column("heartbeat_at", TZ, nullable=False),
    )
    op.create_table(
        "lookup_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("kb_scope", sa.String(64), nullable=True),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("attempts", sa.JSON, nullable=False),
        sa.Column("selected_attempt", sa.String(32), nullable=False),
        sa.Column("fallback_reason", sa.String(64), nullable=True),
        sa.Column("evidence_keys", sa.JSON, nullable=False),
        sa.Column("relevance_level", sa.String(16), nullable=True),
        sa.Column("found", sa.Boolean, nullable=False),
        sa.Column("timings_ms", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
    )
    op.create_index("ix_lookup_audit_created", "lookup_audit", ["created_at"])


def downgrade() -> None:
    for table in (
        "lookup_audit",
        "scope_locks",
        "reindex_runs",
        "embedding_cache",
        "l0_terms",
        "l0_entries",
        "documents",
        "scopes",
    ):
        op.drop_table(table)
