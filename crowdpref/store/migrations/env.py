"""Alembic environment for the study store. crowdpref runs migrations itself
(:func:`crowdpref.store.engine.upgrade`), handing over an open connection in a transaction that
holds the store's write lock, so two processes never migrate at once."""

from __future__ import annotations

from alembic import context

from crowdpref.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
