"""Webhook replays: a delivery also records a hash of what its sender signed (timestamp and raw
body), unique, so the same signed content re-sent under a new ``X-Event-ID`` (the id is not
signed) is a duplicate. Earlier deliveries have none (NULL; a unique index allows many).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("webhook_deliveries")}
    if "signed_hash" in columns:  # a store stamped with an older revision that already has it
        return
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("signed_hash", sa.String(64)))
        batch.create_index("ix_webhook_deliveries_signed_hash", ["signed_hash"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_index("ix_webhook_deliveries_signed_hash")
        batch.drop_column("signed_hash")
