"""No passwords in the store (issue 32): the ``credentials`` table, which held each participant
account's Argilla password in plain text, goes. Passwords are derived when needed from a key in
the secrets folder (:mod:`crowdpref.account_passwords`).

A store upgraded mid-study loses the passwords of accounts made before: their sessions (minted
by the portal) are not affected; an account still being created is refused as "exists with
another password" (delete it in Argilla, or finish the study on the version that made it).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if not sa.inspect(bind).has_table("credentials"):
        return
    if bind.dialect.name == "sqlite":  # dropped pages keep their bytes unless zeroed (on by default in Debian's build only)
        op.execute("PRAGMA secure_delete = ON")
    op.execute("DELETE FROM credentials")  # PostgreSQL: the rows die now; VACUUM reclaims their space
    op.drop_table("credentials")


def downgrade() -> None:  # the table comes back empty: the passwords are gone for good
    op.create_table(
        "credentials",
        sa.Column("account_id", sa.Integer, sa.ForeignKey("accounts.id"), primary_key=True),
        sa.Column("password", sa.String(200), nullable=False),
    )
