"""Invitation links recorded (issue 32): the ``invites`` table, one row per link ``crowdpref
invite`` issues - its id (the one the signed link carries), study, key, optional label, when it
was issued and when it was revoked - so that one link can be revoked alone.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("invites"):  # left by an earlier run that did not roll back
        op.drop_table("invites")
    op.create_table(
        "invites",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("study", sa.String(200), nullable=False),
        sa.Column("key", sa.String(20), nullable=False),
        sa.Column("label", sa.String(200)),
        sa.Column("issued_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float),
    )
    op.create_index("ix_invites_label", "invites", ["study", "label"])


def downgrade() -> None:
    op.drop_index("ix_invites_label", table_name="invites")
    op.drop_table("invites")
