"""Pre-flight checks of the running stack: every service healthy, and each doing its job - the
portal holding the key it signs participants' Argilla sessions with, Argilla's worker completing jobs and failing none, the Prefect worker picking runs up, the portal
hearing the webhooks of Prolific and Argilla.

Each check takes what it reads as plain values (the rq workers' counters, the Prefect worker's
last heartbeat, the deliveries the store recorded, the portal's log lines), so a test can give
it a broken one; :mod:`crowdpref.cli.preflight` reads them from the running stack."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crowdpref.preflight.report import Check, fail, ok, warn

REHEARSE_FIX = ("run the study's first steps (or `crowdpref demo` on a copy of the stack) so that something is "
                "sent, then run the pre-flight again")


def services_healthy(rows: Sequence[tuple[str, bool]]) -> Check:
    """``rows``: (service name, healthy) as ``crowdpref status`` lists them."""
    name = "services healthy"
    down = [service for service, healthy in rows if not healthy]
    if not rows:
        return fail(name, "no service of this state folder runs", "start the stack with `crowdpref up`")
    if down:
        return fail(name, f"not healthy: {', '.join(down)}",
                    "`crowdpref status` shows which; their logs are in <state>/logs; start them with `crowdpref up`")
    return ok(name, f"{len(rows)} healthy: {', '.join(s for s, _ in rows)}")


SIGNING_KEY = "portal can sign Argilla sessions"


def argilla_signing_key(settings: Any) -> Check:
    """The portal can sign the Argilla sessions it hands participants at Start: with an Argilla
    crowdpref did not start (``argilla_url`` set), that Argilla's token-signing key is in
    ``<state>/secrets/argilla-auth-secret`` (put there by hand; without it Start answers 503 to
    everyone): FAIL naming the file and the fix. The embedded Argilla's key is made by
    ``crowdpref up``: OK, said so."""
    from crowdpref.portal.argilla_session import SECRET_FILE, signing_key_problem

    if settings.embedded_argilla:
        return ok(SIGNING_KEY, "the embedded Argilla: `crowdpref up` makes its key and gives it to the portal")
    found = signing_key_problem(settings)
    if found is not None:
        return fail(SIGNING_KEY, *found)
    return ok(SIGNING_KEY, f"the key of the Argilla at CROWDPREF_ARGILLA_URL is in {settings.secrets_dir / SECRET_FILE}")


# --- Argilla's worker (rq) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RqWorkers:
    """What Redis holds about Argilla's rq workers since Redis started: each live worker's
    counters (``rq:worker:<name>`` hashes: ``successful_job_count``, ``failed_job_count``) and
    the failed-job registries (``rq:failed:<queue>``)."""

    workers: tuple[Mapping[str, Any], ...]
    failed_in_registry: int = 0


def read_rq_workers(redis_client: Any) -> RqWorkers:
    """Read :class:`RqWorkers` from a redis-py client (``decode_responses`` either way)."""
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    workers = []
    for key in sorted(text(k) for k in redis_client.smembers("rq:workers")):
        fields = {text(k): text(v) for k, v in (redis_client.hgetall(key) or {}).items()}
        if fields:
            workers.append({"name": key.rsplit(":", 1)[-1], **fields})
    failed = sum(int(redis_client.zcard(text(key))) for key in redis_client.scan_iter(match="rq:failed:*"))
    return RqWorkers(tuple(workers), failed)


def argilla_worker(state: RqWorkers | None, log_hint: str = "<state>/logs/argilla-worker.log",
                   why_unread: str | None = None) -> Check:
    """Argilla's worker completed a job since it started, and failed none. No job yet: WARN
    (nothing was sent to it yet). A failed job: FAIL - Argilla's webhooks to the portal (and its
    other background jobs) are not done."""
    name = "Argilla worker does its jobs"
    if state is None:
        return fail(name, f"its queue in Redis cannot be read ({why_unread or 'unknown'})",
                    "start the stack with `crowdpref up` (Redis and Argilla's worker)")
    if not state.workers:
        return fail(name, "no rq worker is registered in Redis: Argilla's background jobs (webhooks) are not run",
                    f"restart it with `crowdpref up`; see {log_hint}")
    done = sum(_count(w, "successful_job_count") for w in state.workers)
    failed = max(sum(_count(w, "failed_job_count") for w in state.workers), state.failed_in_registry)
    if failed:
        return fail(name, f"{failed} failed job(s), {done} completed, since Redis started",
                    f"read the tracebacks in {log_hint} (ERROR:rq.worker lines); on PostgreSQL a known cause is "
                    "asyncpg connections shared between jobs' event loops; fix it, then `crowdpref down` and "
                    "`crowdpref up` (Redis starts empty) and run the pre-flight again")
    if not done:
        return warn(name, f"{len(state.workers)} worker(s) registered, no job completed yet since Redis started",
                    REHEARSE_FIX)
    return ok(name, f"{done} job(s) completed, none failed, {len(state.workers)} worker(s)")


def _count(worker: Mapping[str, Any], field: str) -> int:
    try:
        return int(worker.get(field) or 0)
    except (TypeError, ValueError):
        return 0


# --- the Prefect worker ----------------------------------------------------------------------------------
def prefect_worker(workers: Sequence[Mapping[str, Any]] | None, runs_picked_up: int | None, late_runs: int,
                   pool: str, now: float, why_unread: str | None = None, heartbeat_s: float = 90.0) -> Check:
    """The Prefect worker of ``pool`` is online (a heartbeat within ``heartbeat_s``), has picked
    up a run of a deployment, and leaves no run late. ``workers``: the pool's workers as the API
    lists them, with ``last_heartbeat_time`` in epoch seconds; ``runs_picked_up``: deployment
    runs that ever left the scheduled state; ``late_runs``: runs Prefect marked Late."""
    name = "Prefect worker picks runs up"
    if workers is None:
        return fail(name, f"the Prefect API cannot be read ({why_unread or 'unknown'})",
                    "start the stack with `crowdpref up` and the deployments with `crowdpref deploy`")
    alive = [w for w in workers if now - float(w.get("last_heartbeat_time") or 0) <= heartbeat_s]
    if not alive:
        seen = f"last heartbeat {now - max(float(w.get('last_heartbeat_time') or 0) for w in workers):.0f} s ago" \
            if workers else "no worker ever joined"
        return fail(name, f"no worker of the work pool '{pool}' is online ({seen})",
                    "start it with `crowdpref up` then `crowdpref deploy`; its log is <state>/logs/prefect-worker.log")
    if late_runs:
        return fail(name, f"{late_runs} scheduled run(s) are Late: the worker does not pick them up",
                    "read <state>/logs/prefect-worker.log; restart it with `crowdpref down` and `crowdpref up`")
    if not runs_picked_up:
        return warn(name, f"{len(alive)} worker(s) online in '{pool}', no deployment run picked up yet",
                    "start one, e.g. `crowdpref run study STUDY.yaml` through the deployment or wait for the "
                    "schedule, then run the pre-flight again")
    return ok(name, f"{len(alive)} worker(s) online in '{pool}'; {runs_picked_up} deployment run(s) picked up")


# --- the portal's webhooks ------------------------------------------------------------------------------
_PORTAL_HOOK = re.compile(r"POST (/hooks/(?:prolific|argilla)) (\d{3}) ")


def portal_hook_statuses(lines: Iterable[str]) -> dict[str, dict[int, int]]:
    """Count the portal log's replies to webhooks: {path: {HTTP status: count}} (the portal logs
    ``METHOD PATH STATUS ms`` for every request; see crowdpref.portal.app)."""
    counts: dict[str, dict[int, int]] = {}
    for line in lines:
        found = _PORTAL_HOOK.search(line)
        if found:
            by_status = counts.setdefault(found.group(1), {})
            by_status[int(found.group(2))] = by_status.get(int(found.group(2)), 0) + 1
    return counts


def prolific_webhooks_heard(recruits: bool, subscribed: bool, delivered: int, refused: int) -> Check:
    """The portal heard a signed Prolific webhook. ``delivered``: deliveries the store recorded
    (recorded only once the signature verified); ``refused``: the portal's 4xx/5xx replies to
    ``/hooks/prolific`` in its log."""
    name = "portal hears Prolific's webhooks"
    if not recruits:
        return ok(name, "not needed: the study does not recruit on the real Prolific")
    if not subscribed:
        return fail(name, "no webhook subscription is recorded: Prolific does not tell the portal about returns "
                    "and time-outs", "run `crowdpref prolific-webhooks STUDY.yaml`")
    if refused and not delivered:
        return fail(name, f"the portal refused {refused} Prolific webhook(s) and accepted none (bad signature, "
                    "stale timestamp or no secret)",
                    "renew the secret and subscription with `crowdpref prolific-webhooks STUDY.yaml --force`; "
                    "check the clock (see the clock line)")
    if not delivered:
        return warn(name, "subscribed, but no signed webhook was heard yet", REHEARSE_FIX)
    return ok(name, f"{delivered} signed webhook(s) recorded" + (f"; {refused} refused" if refused else ""))


def argilla_webhooks_heard(registered: bool, heard: int, refused: int, answers: int) -> Check:
    """The portal heard a signed Argilla webhook: ``heard`` accepted ``/hooks/argilla``
    deliveries in its log. Answers were submitted in Argilla (``answers``: what the store
    counts as submitted) and the portal heard none: FAIL - it then learns of answers only by
    reading Argilla itself, slowly."""
    name = "portal hears Argilla's webhooks"
    if not registered:
        return fail(name, "no Argilla webhook is registered for this portal",
                    "restart the portal with `crowdpref up` (it registers the webhook when it starts; its log says "
                    "why it could not)")
    if refused and not heard:
        return fail(name, f"the portal refused {refused} Argilla webhook(s) and accepted none (signature)",
                    "restart the portal with `crowdpref up` (it registers the webhook again and keeps its new secret)")
    if not heard and answers:
        return fail(name, f"none heard, though {answers} answer(s) were submitted in Argilla",
                    "Argilla's deliveries do not reach the portal: read <state>/logs/argilla-worker.log for the "
                    "webhook jobs and <state>/logs/portal.log; restart with `crowdpref up`")
    if not heard:
        return warn(name, "registered, none heard yet (no answer was given in Argilla yet)", REHEARSE_FIX)
    return ok(name, f"{heard} webhook(s) heard" + (f"; {refused} refused" if refused else ""))
