"""Three patches that make the requests of a participant's arrival cheaper for argilla-server,
without changing what it stores, answers or sends. Runs INSIDE the argilla-server virtualenv;
``launch.py`` applies them wherever it applies the bcrypt patch (``start`` and ``launch:app``).

Why: in a launch burst, argilla-server's CPU was most of the machine's, and each arrival makes
three requests of it: the portal writes the participant's records (one bulk upsert), then their
browser lists their datasets and searches their pending records. py-spy on ``benchmarks/portal.py
--profile public --arrivals 200 --window 10`` (2026-11-26) found the bulk write at about three
quarters of argilla-server's busy samples; ``benchmarks/argilla_requests.py`` (each request's CPU,
in-process) then found the rest. Three stock costs, none needed:

1. **Record events nobody subscribed to** (:func:`_record_events_only_when_wanted`). For every
   record written, updated or deleted, argilla-server builds a webhook event - a query for the
   dataset with five eager loads, the record validated into the event's schema - and only then
   looks for a webhook that wants it. crowdpref's portal subscribes to ``response.*`` events
   only, so each event was built and thrown away: 45% of the bulk write. Patched, the event is
   built only when an enabled webhook lists that record event; the enabled webhooks are read
   once per database session (one per request) instead of once per record. A webhook that does
   list ``record.created`` (or ``updated``, ``deleted``, ``completed``) gets exactly what the stock
   server sends it.
2. **A pydantic schema built per value** (:func:`_settings_adapters_built_once`).
   ``MetadataProperty.parsed_settings`` and ``Question.parsed_settings`` built a new
   ``TypeAdapter`` (a core schema for a discriminated union) on every call - per record and
   metadata value when records are validated, per question when a response is: 24% of the bulk
   write. Patched, each builds its adapter once; the parse is the same.
3. **A membership query per record and metadata value** (:func:`_membership_read_once`). An
   annotator's records search filters each record's metadata by the annotator's rights, and each
   check asked the database whether the annotator belongs to the dataset's workspace: 20 queries
   for 10 records with two metadata values, about half the search's CPU. Patched, a membership
   found is remembered for the rest of the request (in its database session); a non-member is
   still asked about every time, so nothing is allowed that the stock server refuses.

If argilla-server's internals are not the ones these were written against (2.8), applying them
raises :class:`PatchProblem` naming what changed (and applies none), and ``launch.py`` refuses to
start with one ``crowdpref:`` line, as for the bcrypt patch.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Any, Callable

PATCHED = "_crowdpref_lighter_requests"  # set on argilla_server.models.database once all three are on
WANTED_KEY = "crowdpref_wanted_record_events"  # a session's ``info`` entry: the events webhooks want
MEMBER_KEY = "crowdpref_memberships"  # a session's ``info`` entry: (user id, workspace id) found members


class PatchProblem(Exception):
    """argilla-server's internals are not the ones a patch was written for."""


def signature_problems(module: Any, expected: dict[str, list[str]]) -> list[str]:
    """What differs between ``module``'s functions and ``expected`` (name -> parameters, in order)."""
    problems = []
    for name, params in expected.items():
        function = getattr(module, name, None)
        if not callable(function):
            problems.append(f"{module.__name__}.{name} missing")
        elif list(inspect.signature(function).parameters) != params:
            problems.append(f"{module.__name__}.{name}{inspect.signature(function)} is not "
                            f"{name}({', '.join(params)})")
    return problems


def source_of(function: Any) -> str:
    """The function's source, or "" where there is none to read (built at run time, say)."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _record_events_only_when_wanted() -> tuple[list[str], Callable[[], None]]:
    """Build a record's webhook event only when an enabled webhook wants that event (see the
    module's docstring): the problems that stop it, and the function that applies it."""
    from argilla_server.contexts import records as records_context
    from argilla_server.contexts import webhooks
    from argilla_server.webhooks.v1 import event as event_module
    from argilla_server.webhooks.v1 import records as record_events

    problems = signature_problems(record_events, {"build_record_event": ["db", "record_event", "record"],
                                                   "notify_record_event": ["db", "record_event", "record"]})
    problems += signature_problems(webhooks, {"list_enabled_webhooks": ["db"]})
    if not problems and "build_record_event(" not in source_of(record_events.notify_record_event):
        problems.append("notify_record_event no longer calls build_record_event")
    if getattr(records_context, "build_record_event_v1", None) is not record_events.build_record_event:
        problems.append("argilla_server.contexts.records no longer imports build_record_event as build_record_event_v1")
    if not callable(getattr(getattr(event_module, "Event", None), "notify", None)):
        problems.append("argilla_server.webhooks.v1.event.Event.notify missing")

    def apply() -> None:
        stock_build, list_enabled = record_events.build_record_event, webhooks.list_enabled_webhooks

        class Unwanted(event_module.Event):
            """An event no enabled webhook wants: nothing to send (the stock ``notify`` would look
            the webhooks up again and send nothing)."""

            async def notify(self, db: Any) -> list:
                return []

        async def wanted(db: Any, record_event: Any) -> bool:
            events = db.info.get(WANTED_KEY)
            if events is None:  # once per session; argilla-server opens one per request
                events = db.info[WANTED_KEY] = [list(hook.events) for hook in await list_enabled(db)]
            return any(record_event in hook_events for hook_events in events)  # the stock test, per webhook

        async def build_record_event(db: Any, record_event: Any, record: Any) -> Any:
            if not await wanted(db, record_event):
                return Unwanted(event=record_event, timestamp=datetime.utcnow(), data={})
            return await stock_build(db, record_event, record)

        record_events.build_record_event = build_record_event  # notify_record_event calls it by this name
        records_context.build_record_event_v1 = build_record_event  # deleted records' events

    return problems, apply


def _settings_adapters_built_once() -> tuple[list[str], Callable[[], None]]:
    """``Question.parsed_settings`` and ``MetadataProperty.parsed_settings`` parse with one
    ``TypeAdapter`` each, built here, instead of a new one per call: the problems that stop it,
    and the function that applies it."""
    from argilla_server.models import database
    from pydantic import TypeAdapter

    found, problems = [], []
    for model, settings in (("Question", "QuestionSettings"), ("MetadataProperty", "MetadataPropertySettings")):
        cls, union = getattr(database, model, None), getattr(database, settings, None)
        prop = getattr(cls, "parsed_settings", None) if cls is not None else None
        if not isinstance(prop, property) or union is None:
            problems.append(f"{model}.parsed_settings or {settings} missing")
            continue
        stock = f"return TypeAdapter({settings}).validate_python(self.settings)"
        if stock not in source_of(prop.fget):
            problems.append(f"{model}.parsed_settings is no longer `{stock}`")
            continue
        found.append((cls, union))

    def apply() -> None:
        for cls, union in found:
            adapter = TypeAdapter(union)
            cls.parsed_settings = property(lambda self, adapter=adapter: adapter.validate_python(self.settings),
                                           doc="The settings parsed (crowdpref: with one TypeAdapter, built once).")

    return problems, apply


def _membership_read_once() -> tuple[list[str], Callable[[], None]]:
    """``User.is_member`` remembers, per database session, the memberships it found: the problems
    that stop it, and the function that applies it."""
    from argilla_server.models import database

    user = getattr(database, "User", None)
    stock = getattr(user, "is_member", None)
    problems = []
    if not callable(stock) or not inspect.iscoroutinefunction(stock):
        problems.append("User.is_member missing or not async")
    elif list(inspect.signature(stock).parameters) != ["self", "workspace_id"]:
        problems.append(f"User.is_member{inspect.signature(stock)} is not is_member(self, workspace_id)")
    elif not isinstance(getattr(user, "current_async_session", None), property):
        problems.append("User.current_async_session missing")

    def apply() -> None:
        async def is_member(self: Any, workspace_id: Any) -> bool:
            session = self.current_async_session
            if session is None:  # a detached user: as stock (which would fail the same way)
                return await stock(self, workspace_id)
            found = session.info.setdefault(MEMBER_KEY, set())
            if (self.id, workspace_id) in found:
                return True
            member = await stock(self, workspace_id)
            if member:  # only memberships are remembered: a refusal is asked again
                found.add((self.id, workspace_id))
            return member

        user.is_member = is_member

    return problems, apply


def lighter_requests() -> None:
    """All three patches, or none: :class:`PatchProblem` naming every change found (the launcher
    then does not start). Idempotent."""
    from argilla_server.models import database

    if getattr(database, PATCHED, False):
        return
    found = [_record_events_only_when_wanted(), _settings_adapters_built_once(), _membership_read_once()]
    problems = [problem for problems, _ in found for problem in problems]
    if problems:
        raise PatchProblem("argilla-server's internals are not the ones services/argilla/lighter_requests.py was "
                           "written for (" + "; ".join(problems) + "): update it for this argilla-server version, "
                           "or reinstall the version in services/argilla/requirements.txt")
    for _, apply in found:
        apply()
    setattr(database, PATCHED, True)
