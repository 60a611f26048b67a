"""Withdrawals: when a participant withdrew (returned their Prolific submission after
finishing, or asked for their data to be deleted); none of their work counts or is published
any more. Assignments gain the ``withdrawn`` status (a string column: no schema change).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.add_column(sa.Column("withdrawn_at", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("withdrawn_at")
