"""The study store's tables (SQLAlchemy Core). The Alembic migrations in
``crowdpref/store/migrations`` create exactly these; a test compares the two, so a change here
without a migration fails. The values of the state and status columns are the members of
:mod:`crowdpref.store.statuses`.

- ``collections``  one per (study, key): study 1 or study 2 of a study config; R, Q, seed.
- ``items``        the work items of a collection (questions, answer pairs).
- ``accounts``     Argilla annotator accounts (user + workspace + dataset). ``creating`` ->
                   ``ready`` (the warm pool) -> ``bound`` (to a participant at their claim).
- ``participants`` people who claimed work: salted hash of their key (never the raw
                   external id), source (simulated / prolific / invite), status, activity,
                   the hash of their platform session (the submission webhooks name), the
                   activity Argilla's webhooks reported and the last read from Argilla.
- ``assignments``  participant x item: held -> submitted (-> excluded when they failed the
                   checks), or held -> released; for study 2 the display order of that one
                   rating (``swapped``). A batch's quality checks are assignments too (their
                   item ids are not items of the collection).
- ``item_counts``  per item of a collection, how many of its assignments are in each status
                   and how many take one of its R copies (``taken`` = held + submitted),
                   kept in step with ``assignments`` in the same transactions
                   (:mod:`crowdpref.store.counts`); ``rank``, a hash of the item id, orders
                   a claim's reading. A claim reads the open items in (taken, rank) order
                   from its index, so it never counts or sorts the whole collection.
- ``releases``     a release in progress or done (two-phase, so a kill mid-release is
                   finished by the next run).
- ``events``       the append-only log: account_created, claimed, records_logged,
                   submitted, completed, drop_requested, release_started, released,
                   reallocated, refused ...
- ``platform_studies`` the Prolific study each collection was published as (never two).
- ``webhook_deliveries`` webhook events received (de-duplicated on their event id, and on a hash of
                   the signed content that catches a replay under a new id): ``done``,
                   or ``pending`` - replied to, their work (a release) not finished yet, which
                   the portal runs after the reply and again when it starts.
- ``onboarding``   one row per person (collection, salted key hash) who began a study's
                   onboarding, before any claim: their step, practice answered (each item
                   once), quiz attempts and scores, status in_progress -> passed |
                   screened_out, and the time spent.
- ``meta``         store-wide values and secrets (the key salt, the portal's signing key, the
                   Prolific webhook secret).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

collections = Table(
    "collections",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study", String(200), nullable=False),
    Column("key", String(20), nullable=False),
    Column("copies", Integer, nullable=False),
    Column("per_participant", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("counterbalance", Boolean, nullable=False, default=False),
    Column("username_prefix", String(100), nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("study", "key", name="uq_collections_study_key"),
)

items = Table(
    "items",
    metadata,
    Column("collection_id", Integer, ForeignKey("collections.id"), primary_key=True),
    Column("item_id", String(100), primary_key=True),
    Column("ordinal", Integer, nullable=False),
)

accounts = Table(
    "accounts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("collection_id", Integer, ForeignKey("collections.id"), nullable=False),
    Column("username", String(150), nullable=False),
    Column("state", String(20), nullable=False),  # creating | ready | bound
    Column("created_at", Float, nullable=False),
    Column("ready_at", Float),
    Column("lease_until", Float),  # a provisioner working on a 'creating' account ...
    Column("lease_owner", String(100)),  # ... and which process it is (host:pid)
    Column("dataset_id", String(64)),  # the account's Argilla dataset, once provisioned
    UniqueConstraint("collection_id", "username", name="uq_accounts_username"),
    Index("ix_accounts_state", "collection_id", "state"),
    Index("ix_accounts_dataset", "dataset_id"),  # the account a webhook names by its dataset
)

participants = Table(
    "participants",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("collection_id", Integer, ForeignKey("collections.id"), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("source", String(20), nullable=False),  # simulated | prolific | invite
    Column("account_id", Integer, ForeignKey("accounts.id"), nullable=False),
    Column("status", String(20), nullable=False),  # active | releasing | complete | released
    Column("claimed_at", Float, nullable=False),
    Column("last_activity_at", Float, nullable=False),
    Column("records_logged", Boolean, nullable=False, default=False),
    Column("drop_requested", Boolean, nullable=False, default=False),
    Column("completed_at", Float),
    Column("released_at", Float),
    Column("release_reason", String(200)),
    Column("session_hash", String(64)),  # salted hash of the platform session (Prolific SESSION_ID)
    Column("checks_answered", Integer),  # quality checks graded ...
    Column("checks_passed", Integer),  # ... and passed
    Column("check_verdict", String(20)),  # passed | failed | unanswered
    Column("excluded_at", Float),  # their submitted work taken out of the count (failed checks)
    Column("withdrawn_at", Float),  # they withdrew: none of their work counts or is published
    # activity Argilla's webhooks reported (a counter), how much of it the last read from Argilla
    # covered, and when that read was: monitoring reads only whom activity or the backstop names
    Column("activity_seq", Integer, nullable=False, default=0, server_default="0"),
    Column("read_seq", Integer, nullable=False, default=0, server_default="0"),
    Column("read_at", Float),
    UniqueConstraint("collection_id", "key_hash", name="uq_participants_key"),
    UniqueConstraint("account_id", name="uq_participants_account"),
    Index("ix_participants_status", "collection_id", "status"),
    Index("ix_participants_session", "session_hash"),
)

assignments = Table(
    "assignments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("collection_id", Integer, ForeignKey("collections.id"), nullable=False),
    Column("participant_id", Integer, ForeignKey("participants.id"), nullable=False),
    Column("item_id", String(100), nullable=False),
    Column("position", Integer, nullable=False),
    Column("status", String(20), nullable=False),  # held | submitted | released | excluded | reopened | withdrawn
    Column("swapped", Boolean),  # study 2: this rating's display order (None in study 1)
    Column("assigned_at", Float, nullable=False),
    Column("submitted_at", Float),
    Column("released_at", Float),
    UniqueConstraint("participant_id", "item_id", name="uq_assignments_participant_item"),
    Index("ix_assignments_item", "collection_id", "item_id", "status"),
)

item_counts = Table(
    "item_counts",
    metadata,
    Column("collection_id", Integer, ForeignKey("collections.id"), primary_key=True),
    Column("item_id", String(100), primary_key=True),
    Column("rank", Integer, nullable=False),  # a hash of the item id (0 .. 2**31 - 1): a claim's reading order
    Column("taken", Integer, nullable=False, server_default="0"),  # held + submitted: copies in flight or done
    Column("held", Integer, nullable=False, server_default="0"),
    Column("submitted", Integer, nullable=False, server_default="0"),
    Column("released", Integer, nullable=False, server_default="0"),
    Column("excluded", Integer, nullable=False, server_default="0"),
    Column("reopened", Integer, nullable=False, server_default="0"),
    Column("withdrawn", Integer, nullable=False, server_default="0"),
    Index("ix_item_counts_open", "collection_id", "taken", "rank", "item_id"),
)

releases = Table(
    "releases",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("participant_id", Integer, ForeignKey("participants.id"), nullable=False),
    Column("reason", String(200), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("items_released", Integer),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("collection_id", Integer, ForeignKey("collections.id"), nullable=False),
    Column("at", Float, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("participant_id", Integer),
    Column("item_id", String(100)),
    Column("detail", Text),
    Index("ix_events_collection_kind", "collection_id", "kind"),
)

meta = Table(
    "meta",
    metadata,
    Column("name", String(50), primary_key=True),
    Column("value", Text, nullable=False),  # any length (migration 0014: the pacing's last decision)
)

platform_studies = Table(
    "platform_studies",
    metadata,
    Column("collection_id", Integer, ForeignKey("collections.id"), primary_key=True),
    Column("platform", String(20), nullable=False),  # prolific
    Column("external_id", String(64), nullable=False),  # the Prolific study id
    Column("state", String(20), nullable=False),  # draft | published | paused | stopped
    Column("group_id", String(64)),  # study 1: the participant group its completers join
    Column("places", Integer),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("event_id", String(100), primary_key=True),
    Column("source", String(20), nullable=False),  # prolific | argilla
    Column("kind", String(60), nullable=False),
    Column("received_at", Float, nullable=False),
    Column("outcome", String(200), nullable=False),
    # pending: replied to, the work below not done yet (the portal runs it after the reply, and
    # at its next start when it died first); done: handled
    Column("state", String(20), nullable=False, default="done", server_default="done"),
    Column("collection_id", Integer),  # the participant a pending delivery acts on
    Column("participant_id", Integer),
    Column("platform_status", String(30)),  # RETURNED, TIMED-OUT, REJECTED
    # sha256 of what the sender signed (timestamp + raw body): the same signed content under a new
    # event id (the id is not signed) is a replay, refused as a duplicate
    Column("signed_hash", String(64)),
    Index("ix_webhook_deliveries_signed_hash", "signed_hash", unique=True),
)

onboarding = Table(
    "onboarding",
    metadata,
    Column("collection_id", Integer, ForeignKey("collections.id"), primary_key=True),
    Column("key_hash", String(64), primary_key=True),  # salted hash of their key, never the key
    Column("source", String(20), nullable=False),  # simulated | prolific | invite
    Column("status", String(20), nullable=False),  # in_progress | passed | screened_out
    Column("step", String(20), nullable=False),  # introduction | practice | quiz | done
    Column("practice_done", Text, nullable=False),  # practice item indexes answered, "0,2"
    Column("practice_answered", Integer, nullable=False, server_default="0"),
    Column("practice_correct", Integer, nullable=False, server_default="0"),
    Column("attempts_used", Integer, nullable=False, server_default="0"),
    Column("last_score", Integer),
    Column("best_score", Integer),
    Column("started_at", Float, nullable=False),
    Column("seen_at", Float, nullable=False),  # their last step: the time spent counts from it
    Column("finished_at", Float),
    Column("seconds_spent", Float, nullable=False, server_default="0"),
    Column("session_hash", String(64)),  # salted hash of the platform session (Prolific SESSION_ID)
    Index("ix_onboarding_status", "collection_id", "status"),
)

invites = Table(
    "invites",
    metadata,
    # the id the signed link carries (random, 12 hex digits): a link is revoked by it, or its label
    Column("id", String(32), primary_key=True),
    Column("study", String(200), nullable=False),  # the study config's name
    Column("key", String(20), nullable=False),  # study1 | study2
    Column("label", String(200)),  # the operator's note of whom the link went to (optional)
    Column("issued_at", Float, nullable=False),
    Column("revoked_at", Float),  # set: the link opens nothing any more
    Index("ix_invites_label", "study", "label"),
)
