"""The study store's states and statuses, each defined once as a :class:`enum.StrEnum`.

A member is the very string the database holds (``ParticipantStatus.ACTIVE == "active"``), so
stored values never change and callers comparing with plain strings keep working. The
module-level names (``ACTIVE``, ``HELD``, ...) are the members callers import from
:mod:`crowdpref.store`.
"""

from __future__ import annotations

from enum import StrEnum


class AccountState(StrEnum):
    """``accounts.state``: an Argilla annotator account's way into the warm pool and out."""

    CREATING = "creating"  # a row exists; a provisioner builds the account in Argilla
    READY = "ready"  # Argilla holds it, unbound: the warm pool
    BOUND = "bound"  # bound to a participant at their claim


class ParticipantStatus(StrEnum):
    """``participants.status``. A withdrawal is not a status: it is ``withdrawn_at`` on a
    finished (complete or released) participant."""

    ACTIVE = "active"  # holds work
    RELEASING = "releasing"  # a release began: their unsubmitted records are leaving Argilla
    COMPLETE = "complete"  # submitted everything they held
    RELEASED = "released"  # their place was given back (dropped out, timed out, dropped)


class AssignmentStatus(StrEnum):
    """``assignments.status``: one participant x item (or quality check)."""

    HELD = "held"  # in flight
    SUBMITTED = "submitted"  # answered: counts
    RELEASED = "released"  # given back unanswered: the slot returned to the pool
    EXCLUDED = "excluded"  # submitted, then taken out of the count (the participant failed the checks)
    REOPENED = "reopened"  # counted, then taken out of the count on its own (unusable or lost answer): collected again
    WITHDRAWN = "withdrawn"  # the participant withdrew: their answer never counts again, nor is it published
    RETIRED = "retired"  # held when its item was retired (a study-1 writer in the pair withdrew): never answered


class CheckVerdict(StrEnum):
    """``participants.check_verdict`` (None: the collection has no checks, or none graded yet)."""

    PASSED = "passed"
    FAILED = "failed"
    UNANSWERED = "unanswered"


class DeliveryState(StrEnum):
    """``webhook_deliveries.state``."""

    PENDING = "pending"  # replied to; its work (a release) runs after the reply, or at the portal's next start
    DONE = "done"  # handled


# account states
CREATING, READY, BOUND = AccountState.CREATING, AccountState.READY, AccountState.BOUND
# participant statuses
ACTIVE, RELEASING = ParticipantStatus.ACTIVE, ParticipantStatus.RELEASING
COMPLETE, RELEASED = ParticipantStatus.COMPLETE, ParticipantStatus.RELEASED  # RELEASED == AssignmentStatus.RELEASED
# assignment statuses (and RELEASED)
HELD, SUBMITTED = AssignmentStatus.HELD, AssignmentStatus.SUBMITTED
EXCLUDED, REOPENED, WITHDRAWN = AssignmentStatus.EXCLUDED, AssignmentStatus.REOPENED, AssignmentStatus.WITHDRAWN
RETIRED = AssignmentStatus.RETIRED
IN_FLIGHT_OR_DONE = (AssignmentStatus.HELD, AssignmentStatus.SUBMITTED)
"""The assignments that take one of an item's R copies."""
FINISHED = (ParticipantStatus.COMPLETE, ParticipantStatus.RELEASED)
"""The participants who finished: only their work can be excluded or withdrawn."""
# check verdicts
PASSED, FAILED, UNANSWERED = CheckVerdict.PASSED, CheckVerdict.FAILED, CheckVerdict.UNANSWERED
