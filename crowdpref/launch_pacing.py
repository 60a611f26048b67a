"""Paced places: how many places a published Prolific study should have open now, so that the
people who take them arrive no faster than the server serves them.

A study's ``prolific.studyN.launch`` (:class:`~crowdpref.config.launch.LaunchConfig`) and the
server's measured capacity (the arrivals per second it takes at p95 < 1 s, which the pre-flight's
dress rehearsal writes to ``<state>/capacity.json``; :data:`DEFAULT_ARRIVALS_PER_S` without one)
give a :class:`Pace` (:func:`resolve_pace`): a step of places and the least time between two
steps. :func:`places_now` then decides, from what Prolific and the study store say now
(:class:`PlacesNow`), what the study's total places should be:

- never less than what is open (Prolific's places only go up), never past ``max_places``, never
  past the places the work needs;
- paced: at most ``step`` places *in flight* at once - open places nobody took yet, plus people
  who took a place in the last :data:`ARRIVING_FOR_S` seconds and have not reached the portal,
  plus people the portal admitted whose work is not in Argilla yet -
  and at least ``step_seconds`` between two raises. So the next step opens as the last one's
  people arrive and claim their work, and never faster than ``step`` per ``step_seconds``.

Everything here is pure (no I/O, no clock): the caller (the portal's launch pacer,
:mod:`crowdpref.pacer`, every few seconds; :func:`crowdpref.recruitment.sync_prolific` at each
collection run; :func:`~crowdpref.recruitment.ensure_prolific_study` at the publish) reads Prolific's current total and the
store's event log on every run - never a counter kept in memory - so a restart picks up where the
last run left off.

Prolific's oddity: a study whose open places reach zero may flip to AWAITING REVIEW for a
moment (Mephisto's notes), and the published API document says raising the places of a completed
study makes it active again. :func:`may_raise` lets the pace raise a study that is full (the
flip, or the end of a step) but never one a person stopped with places still open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: Assumed without a measurement: about one arrival a second at p95 < 1 s on a 2-core server
#: (the same figure as :data:`crowdpref.preflight.host.DEFAULT_CAPACITY_PER_S`, which a test
#: keeps equal; not imported from there: the pre-flight imports recruitment, which imports this).
DEFAULT_ARRIVALS_PER_S = 1.0
#: A person who took a place this recently and has not reached the portal yet counts as arriving
#: (in flight). Someone who took a place longer ago and never came is no burst: Prolific frees
#: their place when they return or time out.
ARRIVING_FOR_S = 120.0
#: Study statuses whose places the pace raises. AWAITING REVIEW is the zero-open-places flip:
#: raising the places makes the study active again. COMPLETED only when full (see :func:`may_raise`).
RAISABLE = ("UNPUBLISHED", "SCHEDULED", "ACTIVE", "PAUSED", "AWAITING REVIEW")
#: The store's events: every raise, and the publish (the first step).
RAISE_EVENT, PUBLISH_EVENT = "places_raised", "platform_study_published"
#: The store's meta key of the last decision (what ``crowdpref progress`` shows).
PACING_META = "prolific-pacing:{cid}"


@dataclass(frozen=True)
class Pace:
    """A study's launch, resolved against the server's capacity."""

    mode: Literal["paced", "all"]
    step: int  # places per step (paced)
    step_seconds: float  # least seconds between two raises (paced)
    arrivals_per_s: float  # the capacity the step comes from
    measured: bool  # the capacity is this server's measurement (else the default)
    step_from_config: bool = False  # prolific.studyN.launch.step was set

    @property
    def paced(self) -> bool:
        return self.mode == "paced"

    @property
    def rate_per_s(self) -> float:
        """The most arrivals per second the pace lets in: one step per ``step_seconds``."""
        return self.step / self.step_seconds

    def describe(self) -> str:
        if not self.paced:
            return "all places at once"
        source = "measured" if self.measured else "default, not measured"
        return (f"paced: {self.step} places per step, at least {self.step_seconds:g} s apart "
                f"(capacity {self.arrivals_per_s:g} arrival/s, {source})")


UNPACED = Pace("all", step=1, step_seconds=1.0, arrivals_per_s=DEFAULT_ARRIVALS_PER_S, measured=False)
"""Every place at once: what a caller that passes no pace gets (the library's direct callers -
the dress rehearsal, the benchmark, tests - drive arrivals themselves)."""


def capacity_per_s(capacity: Mapping[str, Any] | None) -> tuple[float, bool]:
    """(arrivals per second, measured) from ``<state>/capacity.json``'s mapping
    (:func:`crowdpref.preflight.host.read_capacity`); the default when there is none or it is
    not a positive number."""
    try:
        value = float((capacity or {})["arrivals_per_s"])
    except (KeyError, TypeError, ValueError):
        return DEFAULT_ARRIVALS_PER_S, False
    if not math.isfinite(value) or value <= 0:
        return DEFAULT_ARRIVALS_PER_S, False
    return value, True


def resolve_pace(launch: Any, capacity: Mapping[str, Any] | None) -> Pace:
    """The :class:`Pace` of a ``prolific.studyN.launch`` section on a server with ``capacity``:
    its ``step``, else capacity x ``step_seconds`` (at least 1 place)."""
    per_s, measured = capacity_per_s(capacity)
    seconds = float(launch.step_seconds)
    step = int(launch.step) if launch.step is not None else max(1, math.floor(per_s * seconds + 1e-9))
    return Pace(launch.mode, step, seconds, per_s, measured, step_from_config=launch.step is not None)


def study_pace(config: Any, key: str, capacity: Mapping[str, Any] | None) -> Pace:
    """The pace of study ``key`` (``study1`` / ``study2``) of a study config."""
    part = config.prolific.study1 if key == "study1" else config.prolific.study2
    return resolve_pace(part.launch, capacity)


def pace_warnings(key: str, launch: Any, capacity: Mapping[str, Any] | None, *, first_places: int | None = None,
                  pool_size: int | None = None) -> list[str]:
    """What ``crowdpref validate`` says about a study's pace on this server (empty when nothing):
    a step set above what the capacity takes in ``step_seconds``; ``mode: all`` opening more
    places at once than one step would (``first_places``); a step above the warm account pool
    (``pool_size``)."""
    pace = resolve_pace(launch, capacity)
    where = "measured" if pace.measured else "not measured: the default"
    allowed = max(1, math.floor(pace.arrivals_per_s * pace.step_seconds + 1e-9))
    found = []
    if pace.paced and pace.step_from_config and pace.step > allowed:
        found.append(f"prolific.{key}.launch.step: {pace.step} places per {pace.step_seconds:g} s is "
                     f"{pace.rate_per_s:g} arrivals/s, above this server's capacity {pace.arrivals_per_s:g}/s "
                     f"({where}): set step to {allowed} or less, or leave it out (it follows the capacity)")
    if not pace.paced and first_places is not None and first_places > allowed:
        found.append(f"prolific.{key}.launch.mode: all opens {first_places} places at once, more than this "
                     f"server takes in {pace.step_seconds:g} s ({allowed} at {pace.arrivals_per_s:g}/s, {where}): "
                     "a burst of arrivals may queue; use mode: paced")
    if pace.paced and pool_size and pace.step > pool_size:
        found.append(f"prolific.{key}.launch: a step of {pace.step} places is more than {key}.pool_size "
                     f"({pool_size} warm accounts): the arrivals beyond the pool wait for an account to be "
                     f"made; raise {key}.pool_size to {pace.step} or set a smaller step")
    return found


def launch_report(config: Any, capacity: Mapping[str, Any] | None) -> tuple[list[tuple[str, str]], list[str]]:
    """What ``crowdpref validate`` prints about the launch of a study that recruits on Prolific
    (:func:`crowdpref.recruitment.recruits_on_prolific`, the caller's to ask): a row per study
    (its pace on this server, its first places) and the warnings of :func:`pace_warnings`."""
    n = config.questions.expected_questions
    plan = config.plan(n) if n else None
    rows: list[tuple[str, str]] = []
    warnings: list[str] = []
    for key in ("study1", "study2"):
        part = config.prolific.study1 if key == "study1" else config.prolific.study2
        section = config.study1 if key == "study1" else config.study2
        planned = None
        if plan is not None:
            planned = part.initial_places((plan.study1 if key == "study1" else plan.study2).participants)
        pace = resolve_pace(part.launch, capacity)
        text = pace.describe()
        if planned is not None:
            text += (f"; opens {first_places(planned, part.places_cap(planned), pace)} of its first {planned} places"
                     if pace.paced else f"; opens {planned} places")
        rows.append((f"Launch, study {key[-1]}", text))
        # the warm pool against a step: for real people (a simulated crowd arrives a visit at a time)
        pool = section.pool_size if config.participants == "prolific" else None
        warnings += pace_warnings(key, part.launch, capacity, first_places=planned, pool_size=pool)
    return rows, warnings


@dataclass(frozen=True)
class PlacesNow:
    """What the pace decides from: Prolific's study and the store, read this run."""

    needed: int  # places the work needs in all now (people holding places + people for the work nobody holds)
    cap: int  # the budget cap (prolific.studyN.max_places)
    open: int  # the study's total places on Prolific now
    taken: int  # submissions holding a place (not returned, timed out, rejected or screened out)
    arriving: int = 0  # of them: took a place in the last ARRIVING_FOR_S s, not in the portal yet
    since_last_raise_s: float | None = None  # since the last raise (or the publish); None: never


@dataclass(frozen=True)
class PlacesDecision:
    """What :func:`places_now` decided: the study's total places now (``total`` > ``open``: raise)."""

    total: int
    open: int
    target: int  # where the steps go: the places needed, within the cap (never below what is open)
    needed: int
    cap: int
    in_flight: int  # open places nobody took + people arriving
    reason: str  # why this total, in words
    next_step: str  # what happens next, in words

    @property
    def raise_to(self) -> int | None:
        """The new total, or None when nothing is to be sent."""
        return self.total if self.total > self.open else None

    @property
    def short(self) -> int:
        """Places the work needs beyond the cap (0 when the cap does not bind)."""
        return max(0, self.needed - max(self.cap, self.open))


def places_now(now: PlacesNow, pace: Pace) -> PlacesDecision:
    """The total places the study should have open now. Pure.

    The target is the places needed, within the cap, never below what is open. ``mode: all``
    opens the target at once. Paced: with ``in flight`` = open places nobody took + people
    arriving, the total rises by ``step - in flight`` (so at most one step is in flight), only
    once ``step_seconds`` have passed since the last raise, and never past the target."""
    target = max(now.open, min(now.needed, now.cap))
    in_flight = max(0, now.open - now.taken) + max(0, now.arriving)

    def decided(total: int, reason: str, next_step: str) -> PlacesDecision:
        return PlacesDecision(total, now.open, target, now.needed, now.cap, in_flight, reason, next_step)

    if target <= now.open:
        if now.needed > max(now.cap, now.open):
            return decided(now.open, f"at the budget cap {now.cap}",
                           f"none: {now.needed - max(now.cap, now.open)} more would be needed (raise max_places)")
        return decided(now.open, "the open places cover the work", "when work waits that nobody can take")
    if not pace.paced:
        return decided(target, "all needed places at once (launch.mode: all)", "when work waits that nobody can take")
    room = pace.step - in_flight
    if room <= 0:
        return decided(now.open, f"{in_flight} places in flight (a step is {pace.step})",
                       f"as they are taken and claimed: +{min(pace.step, target - now.open)} once fewer than "
                       f"{pace.step} are in flight")
    if now.since_last_raise_s is not None and now.since_last_raise_s < pace.step_seconds:
        wait = pace.step_seconds - now.since_last_raise_s
        return decided(now.open, f"the last step was {now.since_last_raise_s:.0f} s ago",
                       f"+{min(room, target - now.open)} in {math.ceil(wait)} s (at the pacer's next look after that)")
    total = min(target, now.open + room)
    left = target - total
    return decided(total, f"a step: {in_flight} places in flight of {pace.step}",
                   f"+{min(pace.step, left)} as these are claimed ({left} to go to {target})" if left
                   else f"none: all {target} places needed are open")


def may_raise(status: str, open_places: int, taken: int) -> bool:
    """Whether crowdpref raises the places of a Prolific study in ``status``: the raisable
    statuses (:data:`RAISABLE`; AWAITING REVIEW is the zero-places flip), and COMPLETED only
    when no place is open (the step filled and Prolific closed the study: raising reopens it, as
    the API document says). A COMPLETED study with places still open was stopped by a person:
    it stays stopped."""
    status = status.upper()
    if status in RAISABLE:
        return True
    return status == "COMPLETED" and taken >= open_places


def first_places(planned: int, cap: int, pace: Pace) -> int:
    """The places the first publish opens: the planned first places (within the cap), paced to
    one step."""
    return places_now(PlacesNow(needed=planned, cap=cap, open=0, taken=0), pace).total or 1
