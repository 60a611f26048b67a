"""Claims that do not slow down as the study grows: ``item_counts`` holds, per item of each
collection, how many of its assignments are in each status and how many take one of its R
copies (``taken`` = held + submitted), with ``rank`` (a hash of the item id) and the index
``(collection_id, taken, rank, item_id)`` a claim reads in order. Built here from the existing
rows (items and assignments); from now on every write keeps it in step
(:mod:`crowdpref.store.counts`).

The migration runs in the transaction that holds the store's write lock, so a process killed
during it leaves the store at 0008 and the next open runs it again; a table left by a run that
did not roll back (DDL outside a transaction) is dropped and built anew.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

STATUSES = ("held", "submitted", "released", "excluded", "reopened", "withdrawn")
TAKEN = ("held", "submitted")  # the statuses that take one of an item's R copies


def _rank(item_id: str) -> int:  # crowdpref.store.counts.rank(item_id), frozen here
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16) >> 1


def upgrade() -> None:
    bind = op.get_bind()
    if sa.inspect(bind).has_table("item_counts"):  # left by an earlier run that did not roll back
        op.drop_table("item_counts")
    table = op.create_table(
        "item_counts",
        sa.Column("collection_id", sa.Integer, sa.ForeignKey("collections.id"), primary_key=True),
        sa.Column("item_id", sa.String(100), primary_key=True),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("taken", sa.Integer, nullable=False, server_default="0"),
        *(sa.Column(status, sa.Integer, nullable=False, server_default="0") for status in STATUSES),
    )
    op.create_index("ix_item_counts_open", "item_counts", ["collection_id", "taken", "rank", "item_id"])
    counts: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    for cid, item, status, n in bind.execute(sa.text(
            "SELECT collection_id, item_id, status, count(*) FROM assignments GROUP BY collection_id, item_id, status")):
        counts[(cid, item)][status] = n
    rows = []
    for cid, item in bind.execute(sa.text("SELECT collection_id, item_id FROM items")):
        have = counts.get((cid, item), {})
        rows.append({"collection_id": cid, "item_id": item, "rank": _rank(item),
                     "taken": sum(have.get(status, 0) for status in TAKEN),
                     **{status: have.get(status, 0) for status in STATUSES}})
    rows.sort(key=lambda row: (row["collection_id"], row["rank"]))  # a claim's run of ranks shares pages
    for start in range(0, len(rows), 5000):
        op.bulk_insert(table, rows[start:start + 5000])


def downgrade() -> None:
    op.drop_table("item_counts")
