"""Monitoring that scales with activity: per participant, a counter of the activity Argilla's
webhooks reported (``activity_seq``), how much of it the last read from Argilla covered
(``read_seq``) and when that read was (``read_at``, for the backstop); accounts are found by
their dataset id (what a webhook names).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.add_column(sa.Column("activity_seq", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("read_seq", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("read_at", sa.Float))
    op.create_index("ix_accounts_dataset", "accounts", ["dataset_id"])


def downgrade() -> None:
    op.drop_index("ix_accounts_dataset", "accounts")
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("read_at")
        batch.drop_column("read_seq")
        batch.drop_column("activity_seq")
