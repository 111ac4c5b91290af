"""Alembic environment: runs on the connection kbflow.core.schema hands over (SQLite or PostgreSQL)."""

from alembic import context

from kbflow.core.sql import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
