"""Accounts remember their Argilla dataset id once provisioned, so a claim logs its records
with one call instead of looking the dataset up by workspace and name first (several listing
calls that grow with the study).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("dataset_id", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("dataset_id")
