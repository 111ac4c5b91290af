"""Documents remember the file's stat (size, mtime, ctime, inode) and language when they were
read, so a no-change reindex can skip reading a file whose stat is unchanged. Existing rows keep
NULLs there: their files are read once more, and the next run skips them.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = (("file_stat", sa.String(96)), ("language", sa.String(16)))


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        for name, _ in COLUMNS:
            batch.drop_column(name)
