"""The audit rows carry what the owner's view reads: who asked, the outcome, the latency, what
came nearest, and (for weak and no-evidence lookups) the query's embedding, so that
`kbflow gaps` groups unanswered questions without re-embedding them, and can do so even when
the query text is not kept (`audit_store_queries = hashed`). Existing rows keep NULLs there:
gaps embeds their text again.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COLUMNS = (
    ("caller", sa.String(64)),
    ("outcome", sa.String(8)),
    ("total_ms", sa.Float()),
    ("top_key", sa.String(600)),
    ("top_quality", sa.Float()),
    ("query_hash", sa.String(64)),
    ("query_vector", sa.LargeBinary()),
    ("vector_model", sa.String(200)),
)


def upgrade() -> None:
    with op.batch_alter_table("lookup_audit") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lookup_audit") as batch:
        for name, _ in COLUMNS:
            batch.drop_column(name)
