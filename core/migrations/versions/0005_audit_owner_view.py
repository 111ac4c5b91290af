"""The audit rows carry what the owner's view reads: who asked, the outcome, the latency, what
came nearest, and (for weak and no-evidence lookups) the query's embedding, so that
`kbflow gaps` groups unanswered questions without re-embedding them, and can do so even when
the query text is not kept (`audit_store_queries = hashed`). Existing rows keep NULLs there:
gaps embeds their text again. And `eval_runs`: each live eval run's metrics per mode, the eval
history of `kbflow report`.

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
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("cases", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
    )
    op.create_index("ix_eval_runs_created", "eval_runs", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_eval_runs_created", table_name="eval_runs")
    op.drop_table("eval_runs")
    with op.batch_alter_table("lookup_audit") as batch:
        for name, _ in COLUMNS:
            batch.drop_column(name)
