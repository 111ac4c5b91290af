"""Documents keep their `source` as written (up to 512 characters): widen the doc_id columns.

Milvus collections built before this keep serving: their ids are plain, and a plain id is its
own Milvus key. The next reindex of such a scope rebuilds it once (widening the collection's
`source` field) from the embedding cache, without embedding anything again.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("documents", "l0_entries", "l0_terms")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("doc_id", type_=sa.String(512), existing_type=sa.String(64))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("doc_id", type_=sa.String(64), existing_type=sa.String(512))
