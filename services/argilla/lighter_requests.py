"""The one patch crowdpref still applies to argilla-server's request handling: a record's webhook
event is built only when an enabled webhook wants it. Runs INSIDE the argilla-server virtualenv;
``launch.py`` applies it wherever it starts the server (``start`` and ``launch:app``), and only on
the argilla-server version it was written for (:data:`SUPPORTED_VERSION`, read with
``importlib.metadata``): on any other, ``make setup`` and the server's start stop with one
``crowdpref:`` line (:func:`version_problem`).

**Why.** For every record written, updated or deleted, argilla-server 2.8 builds a webhook event
(``webhooks/v1/records.py``, ``notify_record_event`` -> ``build_record_event``: a query for the
dataset with five eager loads, then the record validated into the event's schema) and only then
(``webhooks/v1/event.py``, ``Event.notify``) looks for an enabled webhook that lists it.
crowdpref's portal subscribes to ``response.*`` events only, so every event was built and thrown
away - about half of the bulk write of a participant's records, the largest request of an
arrival (docs/performance.md, "Argilla as shipped"). Patched, the event is built only when an
enabled webhook lists that record event; the enabled webhooks are read once per database session
(one per request) instead of once per record. A webhook that does list ``record.created``
(``updated``, ``deleted``, ``completed``) gets exactly what the stock server sends it
(tests/integration/test_argilla_lighter_requests.py).

**Upstream.** The fix belongs in argilla-server: ``notify_record_event`` (and the deleted-records
path in ``contexts/records.py``, which calls ``build_record_event`` itself) should ask
``list_enabled_webhooks`` - once per request - whether any webhook lists the event before
building it. Not sent yet (this work had no access to GitHub): the issue to open at
argilla-io/argilla carries the measurement in docs/performance.md ("Argilla as shipped") and this
function as the proposed change. Once a release has the fix, raise the pin in
services/argilla/requirements.txt and delete this module.

Issue 34 removed the two other patches this module held (settings adapters built once, a
workspace membership read once per request): they paid only for the metadata that participants'
records no longer carry.
"""

from __future__ import annotations

import sys
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

SUPPORTED_VERSION = "2.8.0"
"""The argilla-server release this patch was written and tested against (services/argilla/requirements.txt pins it)."""
PATCHED = "_crowdpref_record_events_when_wanted"  # set on argilla_server.webhooks.v1.records once applied
WANTED_KEY = "crowdpref_wanted_record_events"  # a session's ``info`` entry: the events webhooks want


class PatchProblem(Exception):
    """The installed argilla-server is not the release the patch was written for."""


def installed_version() -> str | None:
    try:
        return version("argilla-server")
    except PackageNotFoundError:
        return None


def version_problem(found: str | None = None) -> str | None:
    """Why the patch cannot be applied to the installed argilla-server (``found``: the version to
    judge instead), in one line; None when it is :data:`SUPPORTED_VERSION`."""
    found = installed_version() if found is None else found
    if found == SUPPORTED_VERSION:
        return None
    return (f"argilla-server {found or '(not installed)'} is installed, but crowdpref's patches of it "
            f"(services/argilla/launch.py, lighter_requests.py) are for argilla-server {SUPPORTED_VERSION} only: "
            "run `make setup` to install the version in services/argilla/requirements.txt, or port the patches "
            "to this version and raise SUPPORTED_VERSION in services/argilla/lighter_requests.py")


def record_events_only_when_wanted() -> None:
    """Build a record's webhook event only when an enabled webhook wants that event (see the
    module's docstring). Idempotent; :class:`PatchProblem` (one line) on another argilla-server
    version, before anything is changed."""
    problem = version_problem()
    if problem:
        raise PatchProblem(problem)
    from argilla_server.contexts import records as records_context
    from argilla_server.contexts import webhooks
    from argilla_server.webhooks.v1 import event as event_module
    from argilla_server.webhooks.v1 import records as record_events

    if getattr(record_events, PATCHED, False):
        return
    stock_build, list_enabled = record_events.build_record_event, webhooks.list_enabled_webhooks

    class Unwanted(event_module.Event):
        """An event no enabled webhook wants: nothing to send (the stock ``notify`` would look the
        webhooks up again and send nothing)."""

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
    setattr(record_events, PATCHED, True)


def main(argv: list[str]) -> int:
    """``python lighter_requests.py --check`` (``make setup``, in the Argilla venv): exit 1 with one
    ``crowdpref:`` line when the installed argilla-server is not the one the patch is for."""
    if argv != ["--check"]:
        print("usage: lighter_requests.py --check", file=sys.stderr)
        return 2
    problem = version_problem()
    if problem:
        print(f"crowdpref: {problem}", file=sys.stderr)
        return 1
    print(f"argilla-server {SUPPORTED_VERSION}: the launcher's patch applies")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
