"""The participant portal and Prolific: a participant's platform session (salted hash of the
Prolific SESSION_ID, the submission id webhooks name), the platform study each collection was
published as (so ``recruit`` never creates two), and the webhook deliveries already handled
(de-duplication on the event id).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.add_column(sa.Column("session_hash", sa.String(64)))
        batch.create_index("ix_participants_session", ["session_hash"])
    op.create_table(
        "platform_studies",
        sa.Column("collection_id", sa.Integer, sa.ForeignKey("collections.id"), primary_key=True),
        sa.Column("platform", sa.String(20), nullable=False),
        sa.Column("external_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("group_id", sa.String(64)),
        sa.Column("places", sa.Integer),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("event_id", sa.String(100), primary_key=True),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("kind", sa.String(60), nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("outcome", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("platform_studies")
    with op.batch_alter_table("participants") as batch:
        batch.drop_index("ix_participants_session")
        batch.drop_column("session_hash")
