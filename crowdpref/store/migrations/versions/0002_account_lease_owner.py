"""Accounts being created record which process holds their lease (host:pid), so a rerun on the
same host takes over at once from a process that was killed instead of waiting for the lease to
run out.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(100)))


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("lease_owner")
