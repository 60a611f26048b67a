"""Quality checks: per participant the checks graded and passed, the verdict, and when their
submitted work was excluded (failed checks with ``on_fail: exclude``); assignments gain the
``excluded`` status (a string column: no schema change).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.add_column(sa.Column("checks_answered", sa.Integer))
        batch.add_column(sa.Column("checks_passed", sa.Integer))
        batch.add_column(sa.Column("check_verdict", sa.String(20)))
        batch.add_column(sa.Column("excluded_at", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("excluded_at")
        batch.drop_column("check_verdict")
        batch.drop_column("checks_passed")
        batch.drop_column("checks_answered")
