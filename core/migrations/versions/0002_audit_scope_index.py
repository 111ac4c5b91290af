"""Index lookup_audit by (kb_scope, created_at): audits are read per scope, newest first.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_lookup_audit_scope_created", "lookup_audit", ["kb_scope", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_lookup_audit_scope_created", table_name="lookup_audit")
