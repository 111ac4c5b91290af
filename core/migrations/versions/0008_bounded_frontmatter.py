"""Frontmatter kept per document is bounded (64 KiB of extra keys, no YAML aliases): a record
an earlier kbflow wrote with more (a few bytes of nested YAML aliases once expanded to hundreds
of megabytes) loses it here, and its content hash and stat, so the next reindex reads its file
again and refuses it with the reason, while every command that reads records stays fast.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MAX_METADATA_BYTES = 64 * 1024


def upgrade() -> None:
    documents = sa.table(
        "documents",
        sa.column("extra_metadata", sa.JSON()),
        sa.column("content_hash", sa.String()),
        sa.column("file_stat", sa.String()),
    )
    size = sa.func.length(sa.cast(documents.c.extra_metadata, sa.Text()))
    op.get_bind().execute(
        documents.update()
        .where(size > MAX_METADATA_BYTES)
        .values(extra_metadata={}, content_hash="", file_stat=None)
    )


def downgrade() -> None:
    pass  # nothing to restore: the frontmatter removed was never usable
