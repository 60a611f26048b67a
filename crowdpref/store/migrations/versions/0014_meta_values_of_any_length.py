"""``meta.value`` holds text of any length (it was ``VARCHAR(200)``): the paced launch keeps its
last decision there (``prolific-pacing:<collection>``, about 330 characters), which PostgreSQL
refused ("value too long for type character varying(200)") while SQLite, which enforces no
length, took it - so the public profile's demo failed at its first publish.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch: SQLite (which enforces no length, but whose schema should say what the metadata says)
    # rebuilds the small table; PostgreSQL alters the column in place
    with op.batch_alter_table("meta") as batch:
        batch.alter_column("value", type_=sa.Text(), existing_type=sa.String(200), existing_nullable=False)


def downgrade() -> None:
    op.execute("DELETE FROM meta WHERE length(value) > 200")  # what no longer fits: the pacing's last decision
    with op.batch_alter_table("meta") as batch:
        batch.alter_column("value", type_=sa.String(200), existing_type=sa.Text(), existing_nullable=False)
