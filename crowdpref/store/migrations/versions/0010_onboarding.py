"""Onboarding (issue 20): the ``onboarding`` table, one row per person (collection, salted key
hash) who began a study's onboarding - their step, the practice items they answered, their quiz
attempts and scores, passed or screened out, and the time spent. Rows exist before any claim;
the raw key is never stored.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("onboarding"):  # left by an earlier run that did not roll back
        op.drop_table("onboarding")
    op.create_table(
        "onboarding",
        sa.Column("collection_id", sa.Integer, sa.ForeignKey("collections.id"), primary_key=True),
        sa.Column("key_hash", sa.String(64), primary_key=True),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("step", sa.String(20), nullable=False),
        sa.Column("practice_done", sa.Text, nullable=False),
        sa.Column("practice_answered", sa.Integer, nullable=False, server_default="0"),
        sa.Column("practice_correct", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempts_used", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_score", sa.Integer),
        sa.Column("best_score", sa.Integer),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("seen_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
        sa.Column("seconds_spent", sa.Float, nullable=False, server_default="0"),
        sa.Column("session_hash", sa.String(64)),
    )
    op.create_index("ix_onboarding_status", "onboarding", ["collection_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_onboarding_status", table_name="onboarding")
    op.drop_table("onboarding")
