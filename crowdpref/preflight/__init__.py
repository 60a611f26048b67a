"""The pre-flight: before anyone is paid, check on this server, as a whole, what a real study
needs - and say, one line per check, OK, WARN or FAIL and the fix (``crowdpref preflight
STUDY.yaml``; docs/how-to/preflight.md lists every check).

- :mod:`~crowdpref.preflight.report`: :class:`Check`, :class:`Report` (JSON, Markdown, the run
  folder's ``preflight.json``);
- :mod:`~crowdpref.preflight.stack`: services healthy and doing their job (the portal's key to
  Argilla's sessions, Argilla's worker, the Prefect worker, the portal's webhooks);
- :mod:`~crowdpref.preflight.public`: the public address (DNS, certificate, redirect, closed routes);
- :mod:`~crowdpref.preflight.prolific`: Prolific (token, workspace, webhooks, the study, balance);
- :mod:`~crowdpref.preflight.host`: the Hub, backups, disk, clock, the config against capacity;
- :mod:`~crowdpref.preflight.gate`: publishing on Prolific waits for a passed pre-flight.

:func:`run_preflight` runs them all with :class:`Probes`, the readers of the running stack
(``crowdpref.cli.preflight`` makes the real ones; a test gives broken ones). A probe that raises
becomes the FAIL line of its check, never a traceback: the report always comes out whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crowdpref.errors import first_line
from crowdpref.preflight import host, prolific, public, stack
from crowdpref.preflight.report import (
    FAIL,
    OK,
    REPORT_FILE,
    SKIP,
    WARN,
    Check,
    Report,
    fail,
    read_report,
    report_path,
    skip,
    write_report,
)

__all__ = ["FAIL", "OK", "REPORT_FILE", "SKIP", "WARN", "Check", "Probes", "Report", "read_report", "report_path",
           "run_preflight", "write_report"]


@dataclass
class Probes:
    """How the pre-flight reads the running stack: one callable per thing read. Each may raise;
    its check then FAILs with the error's first line."""

    services: Callable[[], Sequence[tuple[str, bool]]]
    rq_workers: Callable[[], stack.RqWorkers]
    prefect: Callable[[], tuple[Sequence[Mapping[str, Any]], int, int]]  # workers, runs picked up, late runs
    store: Callable[[], Any]  # an open study store (closed after)
    portal_log: Callable[[], Sequence[str]]
    prolific_client: Callable[[Any], Any]  # config -> a ProlificClient (a context manager)
    hub_whoami: Callable[[], Mapping[str, Any]] | None
    backups: Callable[[], host.BackupState]
    disk_free: Callable[[Path], int]
    clock_offset: Callable[[], tuple[float | None, str]]
    http_client: Callable[[], Any]  # an httpx.Client for the public address (verifying its certificate)
    tls_context: Callable[[], Any]  # the ssl.SSLContext that verifies it
    resolver: Callable[[str], list[str]] = public.resolve
    local_addresses: Callable[[], set[str]] = public.local_addresses
    pool: str = "crowdpref"


def _guarded(name: str, fix: str, run: Callable[[], Check | list[Check]]) -> list[Check]:
    try:
        result = run()
    except Exception as exc:  # noqa: BLE001 - a probe that breaks is a FAIL line, never a traceback
        return [fail(name, f"could not be checked: {first_line(exc, 200, with_type=True)}", fix)]
    return result if isinstance(result, list) else [result]


def run_preflight(settings: Any, study_path: Path, probes: Probes, *, now: Callable[[], float] = time.time) -> Report:
    """Every check, in order (the config, the services, the public address, Prolific, the Hub,
    backups, disk, clock); the :class:`Report`. Nothing is written (see :func:`write_report`)."""
    capacity = host.read_capacity(settings.state_dir)
    config_check, config = host.config_valid(Path(study_path), _load_study, capacity,
                                             lambda config: _launch_rates(config, capacity))
    name = config.name if config is not None else Path(study_path).stem
    report = Report(name, "public" if settings.public else "laptop", now(), [config_check])
    up = "start the stack with `crowdpref up`"

    report.add(*_guarded("services healthy", up, lambda: stack.services_healthy(probes.services())))
    report.add(*_guarded(stack.SIGNING_KEY, "put that Argilla's ARGILLA_AUTH_SECRET_KEY in "
                         f"{settings.secrets_dir}/argilla-auth-secret", lambda: stack.argilla_signing_key(settings)))
    worker_state: list[stack.RqWorkers] = []

    def argilla_worker() -> Check:
        try:
            worker_state.append(probes.rq_workers())
        except Exception as exc:  # noqa: BLE001
            return stack.argilla_worker(None, why_unread=first_line(exc, 160, with_type=True))
        return stack.argilla_worker(worker_state[0], f"{settings.logs_dir}/argilla-worker.log")

    report.add(*_guarded("Argilla worker does its jobs", up, argilla_worker))

    def prefect_worker() -> Check:
        try:
            workers, picked, late = probes.prefect()
        except Exception as exc:  # noqa: BLE001
            return stack.prefect_worker(None, None, 0, probes.pool, now(), why_unread=first_line(exc, 160))
        return stack.prefect_worker(workers, picked, late, probes.pool, now())

    report.add(*_guarded("Prefect worker picks runs up", up, prefect_worker))
    report.add(*_guarded("portal hears webhooks", up, lambda: _webhooks(config, probes)))
    report.add(*_public(settings, probes))
    report.add(*_prolific(config, settings, probes))
    report.add(*_guarded("Hub token can write to the repository", "export HF_TOKEN=<a write token>",
                         lambda: host.hub(_repo_id(config, settings), settings.hf_token is not None, probes.hub_whoami)))

    def backups() -> Check:
        try:
            state = probes.backups()
        except Exception as exc:  # noqa: BLE001
            return host.backups(None, now(), why_unread=first_line(exc, 200))
        return host.backups(state, now())

    report.add(*_guarded("backup recent and readable", "take one with `crowdpref backup`", backups))
    participants = _participants(config)
    report.add(*_guarded("disk space for the study", "free space on the state folder's disk",
                         lambda: host.disk(settings.state_dir, probes.disk_free(settings.state_dir), participants)))
    report.add(*_guarded("clock in time", "synchronise the clock (NTP)", lambda: host.clock(*probes.clock_offset())))
    return report


def _launch_rates(config: Any, capacity: Any) -> list[tuple[str, float]]:
    """The arrivals per second each study's paced launch opens places for (crowdpref/launch_pacing.py),
    for a study that recruits on Prolific; none otherwise (``mode: all`` plans no rate)."""
    from crowdpref.launch_pacing import study_pace
    from crowdpref.recruitment import recruits_on_prolific

    if not recruits_on_prolific(config):
        return []
    paces = [(key, study_pace(config, key, capacity)) for key in ("study1", "study2")]
    return [(f"prolific.{key}.launch", pace.rate_per_s) for key, pace in paces if pace.paced]


def _load_study(path: Path) -> Any:
    from crowdpref.config import load_study

    return load_study(path)


def _repo_id(config: Any, settings: Any) -> str | None:
    return settings.hf_repo_id or (getattr(config.publish, "repo_id", None) if config is not None else None)


def _participants(config: Any) -> int:
    if config is None:
        return 0
    try:
        n = config.questions.expected_questions
        plan = config.plan(n) if n else None
    except Exception:  # noqa: BLE001 - a plan that cannot be made: no estimate
        return 0
    return int(plan.study1.participants + plan.study2.participants) if plan is not None else 0


def _webhooks(config: Any, probes: Probes) -> list[Check]:
    from crowdpref.portal import argilla_hooks
    from crowdpref.recruitment import (
        WEBHOOK_SECRET_META,
        WEBHOOK_SUBSCRIPTION_META,
        recruits_on_prolific,
    )

    store = probes.store()
    try:
        delivered = len(store.deliveries("prolific"))
        subscribed = bool(store.get_meta(WEBHOOK_SECRET_META)) and bool(store.get_meta(WEBHOOK_SUBSCRIPTION_META))
        registered = bool(store.get_meta(argilla_hooks.SECRET_META))
        answers = _answers_submitted(store)
    finally:
        store.close()
    statuses = stack.portal_hook_statuses(probes.portal_log())
    prolific_hooks, argilla = statuses.get("/hooks/prolific", {}), statuses.get("/hooks/argilla", {})
    recruits = config is not None and recruits_on_prolific(config) and config.participants == "prolific"
    return [stack.prolific_webhooks_heard(recruits, subscribed, delivered,
                                          sum(n for s, n in prolific_hooks.items() if s >= 400)),
            stack.argilla_webhooks_heard(registered, sum(n for s, n in argilla.items() if s < 300),
                                         sum(n for s, n in argilla.items() if s >= 400), answers)]


def _answers_submitted(store: Any) -> int:
    from sqlalchemy import func, select

    from crowdpref.store import schema

    with store._read() as conn:
        a = schema.assignments.c
        return int(conn.execute(select(func.count()).select_from(schema.assignments)
                                .where(a.status == "submitted")).scalar_one())


def _public(settings: Any, probes: Probes) -> list[Check]:
    names = ("DNS resolves to this host", "certificate valid for the name", "HTTP redirects to HTTPS",
             "only participant routes answer from outside")
    if not settings.public:
        return [skip(n, "laptop profile: no public address (set CROWDPREF_PUBLIC_URL for the public profile)")
                for n in names]
    from urllib.parse import urlsplit

    hostname = (urlsplit(settings.public_url).hostname or "").lower()
    mine = probes.local_addresses()
    checks = _guarded(names[0], "fix the DNS record", lambda: public.dns(hostname, mine, probes.resolver))
    try:
        resolved = probes.resolver(hostname)
    except OSError:
        resolved = []
    connect_to = next((a for a in resolved if a in mine), None) or "127.0.0.1"
    checks += _guarded(names[1], public.CADDY_FIX, lambda: public.certificate(
        hostname, public.served_certificate(hostname, settings.https_port, connect_to, probes.tls_context()),
        tls=settings.public_tls))
    client = probes.http_client()
    try:
        http_port = "" if settings.http_port == 80 else f":{settings.http_port}"
        checks += _guarded(names[2], public.CADDY_FIX, lambda: public.https_redirect(
            f"http://{connect_to if ':' not in connect_to else f'[{connect_to}]'}{http_port}/", hostname, client))
        outside = public.outside_address(resolved, mine)
        if outside is None:
            checks.append(Check(names[3], WARN, "this machine has no address but loopback, and Caddy lets this "
                                "machine through: the closed routes cannot be tried from here",
                                "run the pre-flight where the server has a network address, or try "
                                f"`curl -X POST https://{hostname}/api/v1/token` from another machine (403 expected)"))
        else:
            port = "" if settings.https_port == 443 else f":{settings.https_port}"
            checks += _guarded(names[3], public.CADDY_FIX, lambda: public.closed_routes(
                f"https://{outside}{port}", hostname, public.closed_probes(settings.embedded_argilla), client,
                extensions={"sni_hostname": hostname}))
    finally:
        client.close()
    return checks


def _prolific(config: Any, settings: Any, probes: Probes) -> list[Check]:
    from crowdpref.recruitment import (
        WEBHOOK_SECRET_META,
        WEBHOOK_SUBSCRIPTION_META,
        prolific_target,
        recruits_on_prolific,
    )

    names = ("Prolific token valid", "Prolific workspace exists", "Prolific webhook subscription",
             "Prolific study matches the config", "Prolific balance covers the cost")
    if config is None or not recruits_on_prolific(config) or config.participants != "prolific":
        why = "the study config is invalid" if config is None else \
            f"the study does not recruit on Prolific (participants: {config.participants}" + (
                "; its simulated crowd arrives through the fake Prolific `crowdpref demo` starts)"
                if config.participants == "simulated" else ")")
        return [skip(n, why) for n in names]
    target = prolific_target(config, settings)
    fake = bool(target is not None and target.fake)  # (never for participants: prolific; kept for a rehearsal)
    try:
        client = probes.prolific_client(config)
    except Exception as exc:  # noqa: BLE001 - no token: the token line says so
        return [fail(names[0], first_line(exc, 200), prolific.TOKEN_FIX)] + [
            skip(n, "no Prolific client (see the token line)") for n in names[1:]]
    with client:
        checks = [prolific.token(client)]
        if checks[0].status == FAIL:
            return checks + [skip(n, "the token is not valid (see the line above)") for n in names[1:]]
        workspace_id = settings.prolific_workspace_id
        checks.append(prolific.workspace(client, workspace_id, fake))
        store = probes.store()
        try:
            from crowdpref.portal.links import webhook_url

            checks.append(prolific.webhooks(client, workspace_id, fake, bool(store.get_meta(WEBHOOK_SECRET_META)),
                                            store.get_meta(WEBHOOK_SUBSCRIPTION_META), webhook_url(settings)))
            on_prolific = []
            for key in ("study1", "study2"):
                info = store.find_collection(config.name, key)
                platform = store.platform_study(info.id) if info is not None else None
                if platform is not None and platform.platform == "prolific":
                    on_prolific.append((key, platform.external_id, store.completion_code(info.id)))
        finally:
            store.close()
        checks.append(prolific.study_terms(config, on_prolific, client))
        n = config.questions.expected_questions
        checks.append(prolific.balance(client, workspace_id, fake, config.prolific_cost(n)) if n else
                      skip(names[4], "the number of questions is not known before they are generated: no cost yet"))
    return checks
