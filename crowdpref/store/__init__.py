"""The study store: who holds which work, and every event - in SQL, in transactions.

Several processes change a study's state at once (the portal, scheduled collection runs, the
operator's commands), so the state lives in one database and every change is one short
transaction (see :mod:`crowdpref.store.engine`). :class:`Store` is the one object callers use;
it is made of one part per domain:

- :mod:`~crowdpref.store.engine`      the database, migrations, transactions, the shared base;
- :mod:`~crowdpref.store.claims`      collections, their items, and claims;
- :mod:`~crowdpref.store.counts`      the per-item counts a claim reads in order, kept in step
                                      with the assignments;
- :mod:`~crowdpref.store.pool`        the warm pool of Argilla accounts, and the end of their access;
- :mod:`~crowdpref.store.lifecycle`   participants from claim to complete or released, checks,
                                      exclusion, reopening, withdrawal, releases;
- :mod:`~crowdpref.store.platform`    platform sessions and studies (Prolific), webhook
                                      deliveries, store-wide secrets;
- :mod:`~crowdpref.store.monitoring`  the event log, reported activity, whom a pass reads;
- :mod:`~crowdpref.store.onboarding`  onboarding before the claim: steps, practice, quiz
                                      attempts and scores, passed or screened out;
- :mod:`~crowdpref.store.invites`     the invitation links issued, and their revocation.

:mod:`~crowdpref.store.schema` holds the tables (the Alembic migrations in
``crowdpref/store/migrations`` create exactly these), :mod:`~crowdpref.store.statuses` the
states and statuses (``StrEnum``) and :mod:`~crowdpref.store.results` what the store hands back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from crowdpref.store.claims import CheckPlanner, ClaimsStore, Source
from crowdpref.store.engine import STORE_FILE, StoreError, default_url, settings_url, upgrade
from crowdpref.store.lifecycle import LifecycleStore
from crowdpref.store.monitoring import MonitoringStore
from crowdpref.store.invites import InvitesStore
from crowdpref.store.onboarding import OnboardingStore
from crowdpref.store.platform import PlatformStore
from crowdpref.store.pool import PoolStore
from crowdpref.store.results import (
    Account,
    Assignment,
    Claimed,
    ClaimResult,
    CollectionInfo,
    Full,
    ItemCounts,
    OnboardingState,
    ParticipantState,
    PlatformStudy,
    Refused,
    RetiredRecords,
)
from crowdpref.store.statuses import (
    ACTIVE,
    BOUND,
    COMPLETE,
    CREATING,
    EXCLUDED,
    FAILED,
    FINISHED,
    HELD,
    IN_FLIGHT_OR_DONE,
    PASSED,
    READY,
    RELEASED,
    RELEASING,
    REOPENED,
    RETIRED,
    SUBMITTED,
    UNANSWERED,
    WITHDRAWN,
    AccountState,
    AssignmentStatus,
    CheckVerdict,
    ParticipantStatus,
)

__all__ = [
    "ACTIVE", "BOUND", "COMPLETE", "CREATING", "EXCLUDED", "FAILED", "FINISHED", "HELD", "IN_FLIGHT_OR_DONE",
    "PASSED", "READY", "RELEASED", "RELEASING", "REOPENED", "RETIRED", "STORE_FILE", "SUBMITTED", "UNANSWERED", "WITHDRAWN",
    "Account", "AccountState", "Assignment", "AssignmentStatus", "CheckPlanner", "CheckVerdict", "ClaimResult",
    "Claimed", "CollectionInfo", "Full", "ItemCounts", "OnboardingState", "OnboardingStore", "ParticipantState",
    "ParticipantStatus", "PlatformStudy", "Refused", "RetiredRecords", "Source", "Store", "StoreError", "default_url", "open_store", "upgrade",
]


class Store(ClaimsStore, PoolStore, LifecycleStore, PlatformStore, MonitoringStore, OnboardingStore, InvitesStore):
    """Open (and create or upgrade) the store at ``url`` (``Store(url, clock=time.time)``)."""


def open_store(settings: Any, clock: Callable[[], float] = time.time) -> Store:
    """The store the settings name (:func:`crowdpref.store.engine.settings_url`): ``database_url``,
    else the stack's PostgreSQL in the public profile, else SQLite in the state folder."""
    return Store(settings_url(settings), clock=clock)
