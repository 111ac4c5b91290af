"""Per-scope lexical analysis version, and the gate's calibrations per (model, scope).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scopes") as batch:
        batch.add_column(sa.Column("analysis", sa.String(64), nullable=True))
    op.create_table(
        "calibrations",
        sa.Column("model_id", sa.String(512), primary_key=True),
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("calibrations")
    with op.batch_alter_table("scopes") as batch:
        batch.drop_column("analysis")
