"""Webhooks answered at once: a delivery is recorded with the work it asks for (``pending``:
the participant and the platform status) and replied to; the portal releases the work after the
reply, and runs again at its start whatever a process that died left ``pending``. Existing
deliveries were handled before they were recorded: ``done``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("state", sa.String(20), nullable=False, server_default="done"))
        batch.add_column(sa.Column("collection_id", sa.Integer))
        batch.add_column(sa.Column("participant_id", sa.Integer))
        batch.add_column(sa.Column("platform_status", sa.String(30)))


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_column("platform_status")
        batch.drop_column("participant_id")
        batch.drop_column("collection_id")
        batch.drop_column("state")
