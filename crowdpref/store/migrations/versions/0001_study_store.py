"""The study store: collections, items, accounts, credentials, participants, assignments,
releases, events, meta.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "collections",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("study", sa.String(200), nullable=False),
        sa.Column("key", sa.String(20), nullable=False),
        sa.Column("copies", sa.Integer(), nullable=False),
        sa.Column("per_participant", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("counterbalance", sa.Boolean(), nullable=False),
        sa.Column("username_prefix", sa.String(100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("study", "key", name="uq_collections_study_key"),
    )
    op.create_table(
        "items",
        sa.Column("collection_id", sa.Integer(), sa.ForeignKey("collections.id"), primary_key=True),
        sa.Column("item_id", sa.String(100), primary_key=True),
        sa.Column("ordinal", sa.Integer(), nullable=False),
    )
    op.create_table(
        "accounts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("collection_id", sa.Integer(), sa.ForeignKey("collections.id"), nullable=False),
        sa.Column("username", sa.String(150), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("ready_at", sa.Float()),
        sa.Column("lease_until", sa.Float()),
        sa.UniqueConstraint("collection_id", "username", name="uq_accounts_username"),
    )
    op.create_index("ix_accounts_state", "accounts", ["collection_id", "state"])
    op.create_table(
        "credentials",
        sa.Column("account_id", sa.Integer(), sa.ForeignKey("accounts.id"), primary_key=True),
        sa.Column("password", sa.String(200), nullable=False),
    )
    op.create_table(
        "participants",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("collection_id", sa.Integer(), sa.ForeignKey("collections.id"), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("account_id", sa.Integer(), sa.ForeignKey("accounts.id"), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("claimed_at", sa.Float(), nullable=False),
        sa.Column("last_activity_at", sa.Float(), nullable=False),
        sa.Column("records_logged", sa.Boolean(), nullable=False),
        sa.Column("drop_requested", sa.Boolean(), nullable=False),
        sa.Column("completed_at", sa.Float()),
        sa.Column("released_at", sa.Float()),
        sa.Column("release_reason", sa.String(200)),
        sa.UniqueConstraint("collection_id", "key_hash", name="uq_participants_key"),
        sa.UniqueConstraint("account_id", name="uq_participants_account"),
    )
    op.create_index("ix_participants_status", "participants", ["collection_id", "status"])
    op.create_table(
        "assignments",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("collection_id", sa.Integer(), sa.ForeignKey("collections.id"), nullable=False),
        sa.Column("participant_id", sa.Integer(), sa.ForeignKey("participants.id"), nullable=False),
        sa.Column("item_id", sa.String(100), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("swapped", sa.Boolean()),
        sa.Column("assigned_at", sa.Float(), nullable=False),
        sa.Column("submitted_at", sa.Float()),
        sa.Column("released_at", sa.Float()),
        sa.UniqueConstraint("participant_id", "item_id", name="uq_assignments_participant_item"),
    )
    op.create_index("ix_assignments_item", "assignments", ["collection_id", "item_id", "status"])
    op.create_table(
        "releases",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("participant_id", sa.Integer(), sa.ForeignKey("participants.id"), nullable=False),
        sa.Column("reason", sa.String(200), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float()),
        sa.Column("items_released", sa.Integer()),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("collection_id", sa.Integer(), sa.ForeignKey("collections.id"), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("participant_id", sa.Integer()),
        sa.Column("item_id", sa.String(100)),
        sa.Column("detail", sa.Text()),
    )
    op.create_index("ix_events_collection_kind", "events", ["collection_id", "kind"])
    op.create_table(
        "meta",
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("value", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    for table in ("meta", "events", "releases", "assignments", "participants", "credentials", "accounts",
                  "items", "collections"):
        op.drop_table(table)
