"""Each document's analysed terms and each scope's document frequencies (the scope's
vocabulary), which the gate reads to tell the terms that discriminate inside a scope from the
ones every document has. Existing scopes start empty and are counted by their next reindex.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "document_terms",
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("terms", sa.Text(), nullable=False, server_default=""),
    )
    op.create_table(
        "scope_terms",
        sa.Column("kb_scope", sa.String(64), primary_key=True),
        sa.Column("term", sa.String(256), primary_key=True),
        sa.Column("df", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("scope_terms")
    op.drop_table("document_terms")
