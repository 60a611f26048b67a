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
    if op.get_bind().dialect.name == "sqlite":  # no length is enforced there: nothing to change (no table rebuild)
        return
    op.alter_column("meta", "value", type_=sa.Text(), existing_type=sa.String(200), existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.execute("DELETE FROM meta WHERE length(value) > 200")  # what no longer fits: the pacing's last decision
    op.alter_column("meta", "value", type_=sa.String(200), existing_type=sa.Text(), existing_nullable=False)
