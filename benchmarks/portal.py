"""Benchmark: a burst of participants arriving at the portal from (fake) Prolific, then a burst
of signed Prolific webhooks.

Runs by hand (not a test). It starts its OWN stack in a private state folder on free ports -
the embedded Argilla (server + SQL search plug-in, Redis, rq worker), the fake Prolific
(``crowdpref/simulation/prolific_server.py``) and the portal as its own process (``services.portal.spec``
through the ProcessManager, exactly as ``crowdpref up`` starts it) - and stops every process it
started at the end, also on an error, Ctrl-C or SIGTERM. The study store is the state folder's
SQLite file, shared by this process and the portal, as in a deployment.

1. Set-up (not timed, durations printed): a ``participants: simulated`` study-1 config (R=4,
   Q=4: one batch per participant) in its own studies folder (the ``portal_studies`` setting),
   its questions.parquet in the run folder, a WARM pool of one ready account per participant
   (``Collection.refill_pool``, with a progress bar; the config's ``pool_size`` K is the burst's
   size, so the portal starts its background refill once fewer than K/2 ready accounts are
   left - half-way through the burst -, as it would in a deployment), the Prolific study
   created and published on the fake through ``ProlificClient`` (external study URL: the
   portal's entry link) and recorded in the store, the webhook secret in the store, one
   Prolific place taken per participant (``POST /_fake/studies/{id}/arrive``).
2. Baseline, in the same run: a warm-up arrival (the portal opens the collection), then
   ``BASELINE`` arrivals one after another on the idle portal, and ``BARE`` bare
   ``Collection.claim`` calls in this process (the claim without HTTP, Prolific or login).
3. Burst: ``--arrivals`` participants whose entry requests are scheduled evenly over
   ``--window`` seconds (default 200 in 10 s; by default one thread per participant, so a slow
   arrival never delays the next one's start). Each, like a browser: entry link (the portal
   checks the submission at Prolific, claims, logs the records) -> welcome page -> POST Start
   -> the Argilla sign-in URL with their credentials -> ``POST /api/v1/token`` with them ->
   ``/api/v1/me/datasets`` -> their dataset's pending records, until their Q records are
   listed. Seconds from the entry request to that moment: p50 / p95 / max, per step, and the
   ratio to the baseline. An error is retried as a person reloads (the entry link again after a
   portal error - the same person gets the same work -, the Argilla call again after a 5xx),
   after 1, 2, 4, 8 s; whoever has no records after ``GIVE_UP_S`` gives up and counts as
   "never" (slowest) in the percentiles. The portal's own log gives its server-side time per
   route, so queueing in front of the portal shows as the difference; the CPU seconds of each
   process (from /proc) show which one is saturated.
4. Checks right after the burst: no item over R copies (``store.check``), every participant
   one account and every account one participant, each Prolific id mapped to the account it
   was handed, each dataset listing exactly the participant's items.
5. Webhooks (after the portal's background refill finished, ``--no-settle`` skips the wait):
   one signed RETURNED ``submission.status.change`` per burst participant, every second one
   delivered twice with the same ``X-Event-ID`` (the two copies side by side in the queue, so
   they are handled concurrently), from ``--hook-workers`` threads; a delivery not answered 200
   is sent again after 1 s, as Prolific retries. Handled per second; the portal replies at once
   and releases after the reply, so the benchmark then waits until no delivery is ``pending``
   (how long that took is printed); then every distinct event recorded exactly once
   (``store.deliveries``), every participant released exactly once.

Targets (the issue): p95 entry -> logged-in workspace with records < 3 s; 0 double
allocations; 0 lost webhooks; webhook reply p95 < 1 s (issue 19: ``--arrivals 100
--hook-workers 150`` sends 150 deliveries at once). Each is printed MET or MISSED; the exit
status is 1 when one is missed.

    .venv/bin/python benchmarks/portal.py [--arrivals 200] [--window 10] [--quick]
                                          [--workers N] [--hook-workers 50] [--no-settle] [--home DIR]
                                          [--compare potato] [--profile public]
                                          [--argilla-workers N] [--sign-in password]
                                          [--bcrypt-on-loop] [--json PATH]

``--profile public`` (issue 19): the same on the public profile - Caddy (``tls internal``) on
``https://localhost:<free port>`` in front of the portal and Argilla (one origin; free HTTPS, HTTP
and PostgreSQL ports), Argilla with ``--argilla-workers`` uvicorn workers (default 2) on the
stack's PostgreSQL, the study store on it too; no supervisor (nothing restarts what the benchmark
stops). The participants' and the webhook sender's clients go through Caddy and trust only
Caddy's internal root (``caddy.internal_root``). *Start* answers the page holding the Argilla
session the portal minted: the benchmark takes the token from it (what the page's script stores
for Argilla's frontend) and goes on with it - no ``POST /api/v1/token``. The warm pool is
provisioned by 4 collections at once (not timed). Targets (instead of p95 < 3 s): p95 < 1 s (200
in 10 s), < 0.5 s over 60 s or more (100 in 60 s), none at more than 50 a second (200 in 1 s);
everyone in; 0 HTTP errors seen by participants. As root, the PostgreSQL folder the profile puts
in /var/lib/crowdpref is removed at the end. The levers alone: ``--sign-in password`` (each
arrival logs in with its password from the store, one bcrypt check, as before the minted
session), ``--bcrypt-on-loop`` (benchmarks/argilla_bcrypt_on_loop.py: argilla-server's stock
bcrypt on the event loop), ``--argilla-workers 1``; ``benchmarks/public_levers.py`` runs them
one after another. ``--json PATH`` writes the burst's figures.

``--compare potato``: before the stack starts, potato 2.12.1 is pip-installed into a temporary
virtualenv and gets the same burst and a burst with more arrivals than places
(``benchmarks/potato_peer.py``; without the package index: one line, exit status 2). Right after
crowdpref's burst checks, crowdpref gets that crowded burst too: max(3 x the places left, arrivals
/ 4) arrivals at the burst's rate, for the places its study has left (8); whoever finds none is
turned away (409 "Study full"), and what either system hands out twice counts as a double
allocation. A table then puts potato's p50 / p95, errors and double allocations beside crowdpref's
p95, errors and double allocations, with the ratio of the p95s, per burst.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import re
import secrets
import shutil
import signal
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import httpx
import pandas as pd
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.percentiles import fmt, pct  # noqa: E402
from crowdpref.argilla_client import SEARCH_PAGE_MAX  # noqa: E402
from crowdpref.checks import is_check  # noqa: E402
from crowdpref.collection import Collection  # noqa: E402
from crowdpref.config import load_study  # noqa: E402
from crowdpref.portal import argilla_session, pages  # noqa: E402
from crowdpref.prolific import ProlificClient, sign_webhook  # noqa: E402
from crowdpref.recruitment import FAKE_PROLIFIC_TOKEN, WEBHOOK_SECRET_META, ensure_prolific_study  # noqa: E402
from crowdpref.runfolder import write_parquet  # noqa: E402
from crowdpref.settings import Settings, load_settings  # noqa: E402
from crowdpref.store import CREATING, READY, RELEASED, Claimed  # noqa: E402
from crowdpref.studies import open_collection  # noqa: E402
from tests.ports import free_port  # noqa: E402

R, Q = 4, 4  # copies per question, questions per participant: one batch per participant
NAME = "portal-bench"
TARGET_P95_S = 3.0
TARGET_HOOK_P95_S = 1.0  # a webhook's reply (sent -> 200), the release runs after it
BASELINE = 5  # arrivals one after another on the idle portal
BARE = 3  # bare Collection.claim calls in this process
POOL_PROVISIONERS = 4  # the public profile's warm pool: accounts provisioned at once (not timed)
GIVE_UP_S = 300.0  # a participant without their records after this long gives up
POLL_S = 0.05  # a participant whose records are not listed yet looks again after this
PAUSE_FIRST_S, PAUSE_MAX_S = 1.0, 8.0  # a person reloading after an error: 1, 2, 4, 8 s
SETTLE_MAX_S = 600.0  # the longest wait for the portal's background refill before the webhooks
SETTLE_STALL_S = 20.0  # ... and the longest with no account becoming ready
STEPS = ("entry", "welcome", "start", "preparing", "work", "login", "datasets", "records", "pauses after errors")
FORM = re.compile(r'<form method="post" action="([^"]+)"')
PORTAL_LOG = re.compile(r"crowdpref\.portal (GET|POST) (\S+) (\d{3}) (\d+) ms")
EXCEPTION_LINE = re.compile(r"^(Exception in thread|[\w.]+(Error|Exception)\b)")
ARGILLA_ERROR = re.compile(r"ERROR +ERROR:argilla:(.*?)\s+\S+\.py:\d+")  # rich-wrapped: the first words

console = Console()
if not console.is_terminal:  # piped or logged: wide enough for the tables
    console = Console(width=180)
STOP = threading.Event()  # Ctrl-C / SIGTERM: waiting threads stop waiting


# --- the private stack ------------------------------------------------------------------------
def private_settings(home: Path, public: bool = False, argilla_workers: int | None = None) -> Settings:
    """Own state folder, free ports, its own studies folder; nothing external (a developer's
    CROWDPREF_* / ARGILLA_* environment cannot point the benchmark at a real server, store or
    Prolific). Caddy serves the portal and Argilla on one origin: plain HTTP on a free port, or with
    ``public``, the public profile on ``https://localhost:<free port>`` (Caddy with
    ``tls internal``, free HTTP and PostgreSQL ports; Argilla and the study store on that
    PostgreSQL, ``argilla_workers`` uvicorn workers, default the profile's 2)."""
    extra: dict[str, Any] = {}
    if public:
        https = free_port()
        extra = {"public_url": f"https://localhost:{https}", "public_tls": "internal", "https_port": https,
                 "http_port": free_port(), "postgres_port": free_port(), "argilla_workers": argilla_workers,
                 "portal_trusted_proxies": None}
    else:  # the embedded profile even where CROWDPREF_PUBLIC_URL is set
        extra = {"public_url": None, "argilla_workers": argilla_workers, "site_port": free_port()}  # Caddy, HTTP
    return load_settings(**extra,
        home=home, argilla_port=free_port(), prefect_port=free_port(), redis_port=free_port(),
        portal_port=free_port(), fake_prolific_port=free_port(), portal_studies=home / "portal-studies",
        argilla_venv=REPO / ".venv-argilla", argilla_url=None, argilla_api_key=None, argilla_public_url=None,
        prefect_api_url=None, database_url=None, portal_url=None, prolific_token=None,
    )


def public_target(arrivals: int, window: float) -> float | None:
    """The public profile's p95 target for a burst (issue 19): spread over a minute or more
    (100 in 60 s) 0.5 s; a launch burst of 200 in 1 s none (everyone in, p95 reported); else
    (200 in 10 s) 1 s."""
    if window >= 60:
        return 0.5
    if arrivals / max(window, 1e-9) > 50:
        return None
    return 1.0


def study_size(participants: int) -> int:
    """Questions of the benchmark's study for ``participants`` people: one batch each plus 8
    spare (8 x R / Q more places)."""
    return math.ceil(participants * Q / R) + 8


def write_study(settings: Settings, participants: int, pool: int, places: int | None = None) -> Path:
    """The study config (in the portal's studies folder) and its questions (in the run folder):
    one batch per participant plus a few spare; the pool's target K is ``pool`` (the burst's
    size: the portal refills in the background once fewer than K/2 ready accounts are left)."""
    folder = Path(settings.portal_studies)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump({
        "name": NAME, "seed": 1, "participants": "simulated",
        "study1": {"responses_per_question": R, "questions_per_participant": Q, "pool_size": pool,
                   "inactive_after_minutes": 600},
        "study2": {"pairs_per_participant": 4},
        "crowd": {"arrive_via": "prolific"},
        "prolific": {"study1": {"places": places or participants}},
    }))
    n_questions = study_size(participants)
    questions = pd.DataFrame([{"question_id": f"q{i:05d}", "category": "empathy",
                               "question": f"Question {i}: how would you handle situation number {i} with a friend?"}
                              for i in range(n_questions)])
    write_parquet(questions, settings.runs_dir / NAME / "questions.parquet")
    return path


def bcrypt_on_the_loop() -> None:
    """``--bcrypt-on-loop``: the stack's Argilla server runs benchmarks/argilla_bcrypt_on_loop.py
    (the launcher's app with argilla-server's stock bcrypt on the event loop) under uvicorn with
    the same workers, host and port (this process's copy of ``server_argv`` is replaced; the
    stack itself is unchanged)."""
    from services.argilla import service as argilla_service

    def argv(settings: Settings, *, prepare: bool = False) -> list[str]:  # (public: prepared first, never here)
        return [str(argilla_service.server_python(settings)), "-m", "uvicorn", "argilla_bcrypt_on_loop:app",
                "--app-dir", str(Path(__file__).resolve().parent), "--workers", str(settings.argilla_worker_count),
                "--host", settings.host, "--port", str(settings.argilla_port), "--no-access-log"]

    argilla_service.server_argv = argv


# --- one participant ------------------------------------------------------------------------------
class Transient(Exception):
    """An answer a person retries (5xx, 429, no connection)."""


class Fatal(Exception):
    """An answer a person cannot get past (a refusal, a wrong password)."""


@dataclass
class Visit:
    """One participant's arrival: their Prolific place and their browser (made before timing)."""

    index: int
    pid: str
    session_id: str
    url: str
    browser: httpx.Client  # the portal tab: keeps the portal's cookie
    argilla: httpx.Client  # the Argilla tab
    scheduled: float = math.nan  # seconds after the burst's start when the entry request was due
    started: float = math.nan  # ... when it was sent
    ok: bool = False
    total: float = math.nan  # entry request -> their records listed (retries and pauses included)
    portal: float = math.nan  # entry request -> the sign-in link (entry, welcome, start)
    steps: dict[str, float] = field(default_factory=dict)
    reloads: int = 0  # portal errors: the entry link opened again
    argilla_errors: int = 0  # Argilla 5xx / unreachable: the call repeated
    polls: int = 0  # record searches until all Q were listed
    error: str | None = None
    usernames: set[str] = field(default_factory=set)  # every account the portal handed them (1 expected)
    record_ids: set[str] = field(default_factory=set)  # what their dataset listed
    password: Callable[[str], str] | None = None  # --sign-in password: their password from the store, by pid

    def close(self) -> None:
        self.browser.close()
        self.argilla.close()


def _check(response: httpx.Response, expected: int | tuple[int, ...], what: str) -> None:
    if response.status_code in ((expected,) if isinstance(expected, int) else expected):
        return
    message = f"{what} answered {response.status_code}"
    if response.status_code >= 500 or response.status_code == 429:
        raise Transient(message)
    raise Fatal(f"{message}: {response.text[:160]!r}")


def _absolute(base: str, location: str) -> str:
    if location.startswith("http"):
        return location
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}{location}"


def visit(v: Visit, argilla_url: str, dataset_name: str, expected: int) -> None:
    """What a participant's browser does, from the entry request to their records listed."""
    begun = time.perf_counter()
    deadline = begun + GIVE_UP_S
    pauses = 0
    jitter = random.Random(v.pid)

    def step(name: str, call: Callable[[], httpx.Response]) -> httpx.Response:
        started = time.perf_counter()
        try:
            return call()
        finally:
            v.steps[name] = v.steps.get(name, 0.0) + time.perf_counter() - started

    def pause(exc: Exception) -> None:
        nonlocal pauses
        v.error = f"{exc.__class__.__name__}: {str(exc)[:200]}"
        if time.perf_counter() > deadline or STOP.is_set():
            raise Fatal(f"gave up after {GIVE_UP_S:g} s; last error {v.error}")
        seconds = min(PAUSE_MAX_S, PAUSE_FIRST_S * 2 ** pauses) * jitter.uniform(0.75, 1.25)
        STOP.wait(seconds)
        v.steps["pauses after errors"] = v.steps.get("pauses after errors", 0.0) + seconds
        pauses += 1

    try:
        while True:  # the portal: entry -> welcome -> Start (the entry link again after an error)
            try:
                entry = step("entry", lambda: v.browser.get(v.url))
                _check(entry, 303, "entry")
                welcome_url = _absolute(v.url, entry.headers["location"])
                welcome = step("welcome", lambda: v.browser.get(welcome_url))
                _check(welcome, 200, "welcome")
                form = FORM.search(welcome.text)
                if form is None:
                    raise Fatal("the welcome page has no Start form")
                start = step("start", lambda: v.browser.post(_absolute(v.url, form.group(1))))
                _check(start, 200, "start")  # the page that stores the minted Argilla session
                while (refresh := pages.preparing_refresh(start.text)) is not None:  # admission first: the
                    if time.perf_counter() > deadline or STOP.is_set():  # "being prepared" page reloads
                        raise Fatal(f"still 'being prepared' after {GIVE_UP_S:g} s")  # itself, as a browser does
                    waited = time.perf_counter()
                    STOP.wait(refresh[0])
                    v.steps["preparing"] = v.steps.get("preparing", 0.0) + time.perf_counter() - waited
                    again = _absolute(v.url, refresh[1])
                    start = step("preparing", lambda: v.browser.get(again))  # noqa: B023 - called at once
                    _check(start, 200, "start (reloaded)")
                break
            except (Transient, httpx.TransportError) as exc:
                v.reloads += 1
                pause(exc)
        # then the page that stores an Argilla session the portal minted (no bcrypt), on the origin
        # the portal and Argilla share, and the work frame (the portal's bar over Argilla)
        session = pages.read_argilla_session(start.text) if start.status_code == 200 else None
        if session is None:
            raise Fatal(f"the Start page ({start.status_code}) holds no Argilla session")
        minted, work_path = session
        work_url = _absolute(v.url, work_path)
        while True:
            try:
                work = step("work", lambda: v.browser.get(work_url))
                _check(work, 200, "work frame")
                break
            except (Transient, httpx.TransportError) as exc:
                v.reloads += 1
                pause(exc)
        v.portal = time.perf_counter() - begun
        if pages.frame_target(work.text) is None:
            raise Fatal("the work frame opens no Argilla page")
        password, username = None, argilla_session.username_of(minted)
        v.usernames.add(username)
        if v.password is None:
            token = minted  # what the page's script writes where Argilla's frontend keeps its session
        while v.password is not None:  # --sign-in password: Argilla's sign-in posts the credentials (bcrypt)
            if password is None:
                password = v.password(v.pid)  # --sign-in password: the login the minted session replaced
            try:
                login = step("login", lambda: v.argilla.post(f"{argilla_url}/api/v1/token",
                                                             data={"username": username, "password": password}))
                _check(login, (200, 201), "Argilla login")
                token = login.json()["access_token"]
                break
            except (Transient, httpx.TransportError) as exc:
                v.argilla_errors += 1
                pause(exc)
        headers = {"Authorization": f"Bearer {token}"}
        search = {"filters": {"and": [{"type": "terms", "scope": {"entity": "response", "property": "status"},
                                       "values": ["pending"]}]}}
        dataset_id = None
        while True:  # their datasets, then their queue, until it holds their records
            try:
                if dataset_id is None:
                    listed = step("datasets", lambda: v.argilla.get(f"{argilla_url}/api/v1/me/datasets",
                                                                    headers=headers))
                    _check(listed, 200, "Argilla datasets")
                    dataset_id = next((d["id"] for d in listed.json()["items"] if d["name"] == dataset_name), None)
                if dataset_id is not None:
                    found = step("records", lambda: v.argilla.post(
                        f"{argilla_url}/api/v1/me/datasets/{dataset_id}/records/search", json=search,
                        params={"limit": SEARCH_PAGE_MAX}, headers=headers))
                    _check(found, 200, "Argilla records search")
                    v.polls += 1
                    records = [item["record"] for item in found.json()["items"]]
                    if len(records) >= expected:
                        v.record_ids = {r.get("external_id") for r in records if not is_check(str(r.get("external_id")))}
                        break
                if time.perf_counter() > deadline:
                    raise Fatal(f"records not listed after {GIVE_UP_S:g} s")
                waited = time.perf_counter()
                STOP.wait(POLL_S)
                name = "records" if dataset_id else "datasets"
                v.steps[name] = v.steps.get(name, 0.0) + time.perf_counter() - waited
            except (Transient, httpx.TransportError) as exc:
                v.argilla_errors += 1
                pause(exc)
        v.total = time.perf_counter() - begun
        v.ok = True
    except Fatal as exc:
        v.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - anything else: shown, and counts as never
        v.error = f"{exc.__class__.__name__}: {str(exc)[:200]}"


# --- threads ---------------------------------------------------------------------------------------------
def run_jobs(jobs: list[Callable[[], None]], workers: int, progress: Progress, description: str) -> float:
    """Run ``jobs`` in order on ``workers`` daemon threads with a progress bar; returns the wall
    time. Daemon threads and a short join loop: Ctrl-C reaches the main thread at once."""
    task = progress.add_task(description, total=len(jobs))
    pending: queue.Queue[Callable[[], None]] = queue.Queue()
    for job in jobs:
        pending.put(job)

    def worker() -> None:
        while not STOP.is_set():
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            try:
                job()
            finally:
                progress.advance(task)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(workers, len(jobs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    return time.perf_counter() - started


# --- statistics -------------------------------------------------------------------------------------------
def ratio(value: float, base: float) -> str:
    if math.isinf(value):
        return "never"
    if math.isnan(value) or math.isnan(base) or base <= 0:
        return "-"
    return f"{value / base:.1f}x"


def verdict(ok: bool) -> str:
    return "[green]MET[/]" if ok else "[red]MISSED[/]"


def step_values(visits: list[Visit], name: str) -> list[float]:
    """A step's seconds per participant. Totals: whoever gave up before reaching the end of it
    counts as never. A single step: everyone who reached it (its time up to giving up, for one
    who gave up in it); ``pauses after errors``: everyone (0 without errors)."""
    started = [v for v in visits if not math.isnan(v.started) or v.ok]
    if name == "total":
        return [v.total if v.ok else math.inf for v in started]
    if name == "portal":
        return [v.portal if not math.isnan(v.portal) else math.inf for v in started]
    if name == "argilla":
        return [(v.total - v.portal) if v.ok else math.inf for v in started if not math.isnan(v.portal)]
    if name == "pauses after errors":
        return [v.steps.get(name, 0.0) for v in started]
    return [v.steps[name] for v in started if name in v.steps]


def portal_log(path: Path, start: int, end: int | None = None) -> tuple[dict[str, list[float]], list[str]]:
    """The portal's own time per route (its log: method, path, status, ms) between two byte
    offsets of its log; and the lines that look like errors."""
    with open(path, "rb") as log:
        log.seek(start)
        text = log.read(None if end is None else end - start).decode(errors="replace")
    routes: dict[str, list[float]] = {}
    for method, path_, status, ms in PORTAL_LOG.findall(text):
        route = {"welcome": "welcome", "start": "start", "work": "work"}.get(path_.rsplit("/", 1)[-1], "entry")
        route = "webhook" if path_.startswith("/hooks/") else "health" if path_ == "/healthz" else route
        routes.setdefault(f"{route} ({method} {status})", []).append(int(ms) / 1000)
    problems = [line for line in text.splitlines() if EXCEPTION_LINE.match(line)]
    return routes, problems


def argilla_errors(path: Path, start: int, end: int) -> Counter[str]:
    """The Argilla server's logged errors between two byte offsets of its log, by kind."""
    if not path.exists():
        return Counter()
    with open(path, "rb") as log:
        log.seek(start)
        text = log.read(end - start).decode(errors="replace")
    names = {"QueuePool limit": "QueuePool limit (no free DB connection within 30 s)",
             "(sqlite3.Operatio": "sqlite3.OperationalError (e.g. database is locked)"}
    return Counter(names.get(m.strip(), m.strip()) for m in ARGILLA_ERROR.findall(text))


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


# --- CPU: who was busy ------------------------------------------------------------------------------------
TICK = os.sysconf("SC_CLK_TCK")
ME = "this benchmark (the participants' browsers)"


def _stat(pid: int | str) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()  # fields from the 3rd on


def cpu_seconds(settings: Settings) -> dict[str, float]:
    """CPU seconds used so far by each service's process group, by this process, and by the
    whole machine (every process, also others': the machine is shared)."""
    from services import stack
    from services.process import ProcessManager

    manager = ProcessManager(settings.state_dir)
    groups: dict[int, str] = {}
    for name in stack.SERVICE_NAMES:
        running = manager.running(name)
        if running is not None:
            groups[running.pid] = name  # each service runs in its own session: pgid = pid
    used = dict.fromkeys(groups.values(), 0.0)
    stats = {int(entry.name): stat for entry in Path("/proc").iterdir()
             if entry.name.isdigit() and (stat := _stat(entry.name)) is not None}
    for pid, stat in stats.items():
        owner, ancestor = int(stat[2]), pid  # its process group; else (PostgreSQL's backends: their
        for _ in range(8):  # own sessions) the group of the nearest ancestor in one
            if owner in groups or ancestor not in stats:
                break
            ancestor = int(stats[ancestor][1])
            owner = int(stats[ancestor][2]) if ancestor in stats else owner
        if owner in groups:
            used[groups[owner]] += (int(stat[11]) + int(stat[12])) / TICK  # utime + stime
    times = os.times()
    used[ME] = times.user + times.system
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    used["(machine: busy)"] = (sum(fields) - fields[3] - fields[4]) / TICK  # all but idle and iowait
    used["(machine: all)"] = sum(fields) / TICK
    used["(wall)"] = time.perf_counter()
    return used


def cpu_table(phases: dict[str, tuple[dict[str, float], dict[str, float]]]) -> Table:
    """CPU per process in each phase; 100% = one core busy for the whole phase."""
    table = Table(title=f"CPU per process ({os.cpu_count()} cores; 100% = one core busy for the whole phase)")
    table.add_column("process")
    for label in phases:
        table.add_column(f"{label}: CPU s", justify="right")
        table.add_column("% of one core", justify="right")
    names = [name for name in next(iter(phases.values()))[1] if not name.startswith("(")]
    for name in names:
        cells = [name]
        for before, after in phases.values():
            wall = after["(wall)"] - before["(wall)"]
            used = after.get(name, 0.0) - before.get(name, 0.0)
            cells += [f"{used:.1f}", f"{used / wall:.0%}" if wall > 0 else "-"]
        table.add_row(*cells)
    cells = ["whole machine, every process (busy / all cores)"]
    for before, after in phases.values():
        busy = after["(machine: busy)"] - before["(machine: busy)"]
        share = busy / max(1e-9, after["(machine: all)"] - before["(machine: all)"])
        cells += [f"{busy:.1f}", f"{share:.0%} of all cores"]
    table.add_row(*cells)
    return table


STACK_PROCESSES = ("argilla-server", "argilla-worker", "redis", "portal", "postgres", "caddy")
"""The stack's own processes (issue 34 item 5): Argilla (its server, its worker and their Redis),
the portal, PostgreSQL and Caddy - not the load generator (this benchmark) nor the fake Prolific."""
TARGET_STACK_CPU_S = 0.15  # CPU-s per arrival in the stack's own processes (issue 34 item 5)
TARGET_CLAIM_P95_S = 1.0  # entry request sent -> the claim committed in the store, p95 (issue 34 item 5)
CLAIM_POLL_S = 0.1  # how often the claim watcher reads the store's committed participants


def stack_cpu(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each of the stack's own processes used between two :func:`cpu_seconds`
    readings (:data:`STACK_PROCESSES`; one not running counts 0)."""
    return {name: after.get(name, 0.0) - before.get(name, 0.0) for name in STACK_PROCESSES}


class ClaimWatcher:
    """When each participant's claim became durable: a thread reads the store's committed
    participants (``store.key_hashes``: one indexed read, another connection than the portal's)
    every :data:`CLAIM_POLL_S` and notes when each Prolific id's key hash first shows. So the time
    to a durable claim is what a second process could see, not the portal's own clock; it can be
    up to one poll late (0.1 s)."""

    def __init__(self, store: Any, cid: int):
        self.store, self.cid = store, cid
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._known = set(store.key_hashes(cid))  # claimed before the watch: not timed
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(CLAIM_POLL_S):
            now = time.perf_counter()
            for digest in set(self.store.key_hashes(self.cid)) - self._known - set(self.seen):
                self.seen[digest] = now

    def seconds(self, visits: list[Visit], t0: float) -> list[float]:
        """Per burst arrival: from its first entry request to its claim seen committed; never
        seen counts as never (inf)."""
        out = []
        for v in visits:
            if math.isnan(v.started):
                continue
            seen = self.seen.get(self.store.key_hash(v.pid))
            out.append(math.inf if seen is None else max(0.0, seen - (t0 + v.started)))
        return out


# --- more arrivals than places (--compare) ----------------------------------------------------------------
def over_places_burst(crowded: list[Visit], window: float, argilla_url: str, dataset: str, expected: int,
                      store: Any, cid: str, places: int) -> tuple[Any, list[str]]:
    """``crowded`` arrivals, due evenly over ``window`` s, when the study has work for about
    ``places`` more people: each is either served (their records listed) or turned away at the
    entry (409, "Study full"). Returns crowdpref's side for the comparison and the double
    allocations: an item over R copies, an account or item set shared, a person turned away who
    holds work, or a served person whose store entry is not the account they were handed."""
    import potato_peer

    t0 = time.perf_counter() + 0.5
    for v, due in zip(crowded, potato_peer.burst_schedule(len(crowded), window)):
        v.scheduled = due

    def arrival(v: Visit) -> Callable[[], None]:
        def run() -> None:
            STOP.wait(max(0.0, t0 + v.scheduled - time.perf_counter()))
            if not STOP.is_set():
                v.started = time.perf_counter() - t0
                visit(v, argilla_url, dataset, expected)
        return run

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        run_jobs([arrival(v) for v in crowded], len(crowded), progress,
                 f"more arrivals than places: {len(crowded)} arrivals in {window:g} s for about {places} places")
    turned = [v for v in crowded if not v.ok and (v.error or "").startswith("entry answered 409")]
    turned_ids = {id(v) for v in turned}
    failed = [v for v in crowded if not v.ok and id(v) not in turned_ids]
    problems = [f"more arrivals than places: {p}" for p in store.check(cid)]
    for v in crowded:
        mine = store.participant_by_key(cid, v.pid)
        if id(v) in turned_ids and mine is not None:
            problems.append(f"arrival {v.index} was turned away but holds {mine.username}")
        if v.ok and (mine is None or {mine.username} != v.usernames):
            problems.append(f"arrival {v.index}: the store maps their Prolific id to "
                            f"{mine.username if mine else 'nobody'}, the portal handed {sorted(v.usernames)}")
    participants = store.participants(cid)
    problems += [f"account {a} bound to {k} participants"
                 for a, k in Counter(p.account_id for p in participants).items() if k > 1]
    served = [v for v in crowded if v.ok]
    console.print(f"more arrivals than places (crowdpref): {len(served)} served, {len(turned)} turned away "
                  f"(409 Study full), {len(failed)} failed otherwise; p95 of the served "
                  f"{fmt(pct([v.total for v in served], 95))}; double allocations {len(problems)}")
    side = potato_peer.CrowdprefSide(pct([v.total for v in served], 95),
                                     sum(v.reloads + v.argilla_errors for v in crowded) + len(failed),
                                     len(problems), len(turned))
    return side, problems


# --- main ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrivals", type=int, default=200, help="participants in the burst (default 200)")
    parser.add_argument("--window", type=float, default=None,
                        help="seconds over which the burst's entry requests start (default 10)")
    parser.add_argument("--quick", action="store_true", help="20 arrivals in 1 s (the full burst's rate)")
    parser.add_argument("--workers", type=int, default=0,
                        help="arrival threads (default: one per participant, so every start is on time)")
    parser.add_argument("--hook-workers", type=int, default=50, help="webhook sender threads (default 50)")
    parser.add_argument("--no-settle", action="store_true",
                        help="send the webhooks while the portal still refills its pool after the burst")
    parser.add_argument("--compare", choices=["potato"], default=None,
                        help="also run potato 2.12.1 (pip-installed into a temporary virtualenv) under the same "
                             "bursts, and a burst with more arrivals than places on both (benchmarks/potato_peer.py)")
    parser.add_argument("--profile", choices=["embedded", "public"], default="embedded",
                        help="embedded: the laptop stack (SQLite, one Argilla process, Caddy over plain HTTP in front of "
                             "portal and Argilla on one http://127.0.0.1:<port>); public: Caddy with "
                             "TLS (tls internal) in front of portal and Argilla on one https://localhost:<port>, Argilla "
                             "with N uvicorn workers on PostgreSQL, the study store on PostgreSQL (issue 19)")
    parser.add_argument("--argilla-workers", type=int, default=None,
                        help="Argilla's uvicorn workers (default: the profile's, 2 public / 1 embedded)")
    parser.add_argument("--sign-in", choices=["portal", "password"], default="portal",
                        help="portal: what Start hands (a session the portal minted, no bcrypt); "
                             "password: each arrival logs in to Argilla with its password (POST /api/v1/token, a "
                             "bcrypt check) as before the minted session - the lever measured alone")
    parser.add_argument("--bcrypt-on-loop", action="store_true",
                        help="Argilla with its stock bcrypt on the event loop (benchmarks/argilla_bcrypt_on_loop.py) "
                             "instead of the launcher's threads - the lever measured alone")
    parser.add_argument("--json", type=Path, default=None, help="also write the burst's figures to this JSON file")
    parser.add_argument("--home", type=Path, default=None,
                        help="state folder (default: a new temporary folder, removed after a clean run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.arrivals = 20
        args.window = 1.0 if args.window is None else args.window
    window = 10.0 if args.window is None else args.window
    n = args.arrivals
    workers = args.workers or n
    total_participants = 1 + BASELINE + n + BARE  # warm-up, baseline, burst, bare claims
    home = (args.home or Path(tempfile.mkdtemp(prefix="crowdpref-portal-bench-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the stack
    spare = (study_size(total_participants) * R - total_participants * Q) // Q  # places left after the burst
    over = max(3 * spare, n // 4) if args.compare else 0  # --compare: more arrivals than places, on both
    peer: list[Any] = []
    if args.compare:  # potato first, on a machine without our stack
        import potato_peer  # benchmarks/ (this script's folder) is on sys.path

        try:
            peer = potato_peer.compare_bursts(console, n, window, over, spare, Q, R)
        except potato_peer.PotatoUnavailable as exc:
            print(f"portal.py --compare potato: {exc}", file=sys.stderr)
            if args.home is None:
                shutil.rmtree(home, ignore_errors=True)
            return 2
    from services import stack
    from services.process import ProcessManager

    public = args.profile == "public"
    settings = private_settings(home, public, args.argilla_workers)
    if args.bcrypt_on_loop:
        bcrypt_on_the_loop()
    pg_folder: Path | None = None  # the public profile's PostgreSQL folder (removed at the end)
    portal_log_path = ProcessManager(settings.state_dir).log_path("portal")
    argilla_log_path = ProcessManager(settings.state_dir).log_path("argilla-server")
    bench_started = time.perf_counter()
    load_at_start = os.getloadavg()
    clean = False
    met: list[bool] = []
    visits: list[Visit] = []
    try:
        started = time.perf_counter()
        with console.status(f"starting the {args.profile} profile's Argilla and the fake Prolific") as status:
            stack.up(settings, components=["argilla"], on_step=lambda s: status.update(f"starting {s}"),
                     supervise=False)  # no supervisor: the benchmark stops what it started, nothing restarts it
            if public:
                from services import postgres

                pg_folder = postgres.data_folder(settings)
            stack.start_fake_prolific(settings)
        console.print(f"Argilla at {settings.argilla_api_url} ({settings.argilla_worker_count} worker(s), "
                      f"{'PostgreSQL' if public else 'SQLite'}, bcrypt {'on' if args.bcrypt_on_loop else 'off'} "
                      f"the event loop), fake Prolific on port {settings.fake_prolific_port}: "
                      f"up in {time.perf_counter() - started:.0f} s (state folder {home})")
        path = write_study(settings, total_participants, n, places=total_participants + over)
        config = load_study(path)
        collection: Collection = open_collection(path, "study1", settings)
        store, cid = collection.store, collection.info.id
        expected = Q + collection.spec.config.study1.checks.count  # type: ignore[attr-defined]

        # the warm pool (not timed)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task(f"warm pool: provisioning {total_participants} accounts (refill_pool)",
                                     total=total_participants)
            done: dict[str, Any] = {}

            def fill(provisioner: Collection) -> None:
                for attempt in range(3):  # a connection Argilla reset under load: again (refill_pool
                    try:  # is idempotent: the account it was making is finished by the next call)
                        made = provisioner.refill_pool(total_participants)
                        with lock:
                            done["made"] = done.get("made", 0) + made
                        return
                    except Exception as exc:  # noqa: BLE001 - reported below after the last attempt
                        if attempt == 2 or STOP.is_set():
                            done["error"] = exc
                            return
                        console.print(f"warm pool: {exc!r}, provisioning again")

            # the public profile: several provisioners at once (each its own Collection; the store's
            # leases give each account to one of them), as Argilla's workers can serve them in parallel
            provisioners = [collection] + [open_collection(path, "study1", settings)
                                           for _ in range(POOL_PROVISIONERS - 1 if public else 0)]
            lock = threading.Lock()
            started = time.perf_counter()
            fillers = [threading.Thread(target=fill, args=(c,), daemon=True) for c in provisioners]
            for filler in fillers:
                filler.start()
            while any(filler.is_alive() for filler in fillers):
                progress.update(task, completed=sum(a.state == READY for a in store.accounts(cid)))
                fillers[0].join(0.5)
            pool_s = time.perf_counter() - started
            if "error" in done:
                raise RuntimeError(f"refill_pool failed: {done['error']!r}")
            progress.update(task, completed=total_participants)
        console.print(f"warm pool: {done['made']} accounts ready in {pool_s:.0f} s "
                      f"({pool_s / max(1, done['made']):.2f} s each, {len(provisioners)} at a time; not timed)")

        # the Prolific study on the fake, the webhook secret, the portal, the places
        fake_api = f"http://{settings.host}:{settings.fake_prolific_port}"
        with ProlificClient(f"{fake_api}/api/v1/", FAKE_PROLIFIC_TOKEN) as client:
            platform = ensure_prolific_study(collection, config, settings, client)
            study = client.get_study(platform.external_id)
        secret = secrets.token_urlsafe(32)
        store.set_meta(WEBHOOK_SECRET_META, secret)
        started = time.perf_counter()
        with console.status("starting the portal and Caddy"):
            stack.up(settings, components=["portal", "caddy"], supervise=False)
        verify: Any = True
        if public:  # the participants' browsers trust Caddy's internal root (tls internal), nothing else
            from services import caddy

            verify = ssl.create_default_context(cafile=str(caddy.internal_root(settings)))
        console.print(f"portal at {settings.portal_public_url} (its own process, through Caddy) up in "
                      f"{time.perf_counter() - started:.1f} s; Prolific study {study.status} with "
                      f"{study.total_available_places} places, entry {study.external_study_url.split('?')[0]}")
        argilla_url, dataset = settings.argilla_participant_url, collection.dataset_name
        with httpx.Client(base_url=fake_api, timeout=30) as fake:
            for i in range(1 + BASELINE + n + over):
                place = fake.post(f"/_fake/studies/{platform.external_id}/arrive")
                place.raise_for_status()
                p = place.json()
                visits.append(Visit(i, p["participant_id"], p["session_id"], p["url"],
                                    httpx.Client(timeout=GIVE_UP_S, follow_redirects=False, verify=verify),
                                    httpx.Client(timeout=GIVE_UP_S, verify=verify)))
                if args.sign_in == "password":
                    visits[-1].password = lambda pid: collection.owner.passwords(store.participant_by_key(cid, pid).username)
        warmup, baseline, burst = visits[0], visits[1:1 + BASELINE], visits[1 + BASELINE:1 + BASELINE + n]
        crowded = visits[1 + BASELINE + n:]  # --compare: the burst with more arrivals than places

        # baseline: one at a time on the idle portal; the bare claim in this process
        visit(warmup, argilla_url, dataset, expected)
        for v in baseline:
            visit(v, argilla_url, dataset, expected)
        bare = []
        for k in range(BARE):
            started = time.perf_counter()
            result = collection.claim(f"bench-bare-claim-{k}", "simulated")
            bare.append(time.perf_counter() - started)
            if not isinstance(result, Claimed):
                raise RuntimeError(f"the bare claim answered {result!r}")
        failed = [v for v in [warmup, *baseline] if not v.ok]
        if failed:
            raise RuntimeError(f"a baseline arrival failed: {failed[0].error} (portal log {portal_log_path})")
        base = {name: statistics.median(values) if (values := step_values(baseline, name)) else math.nan
                for name in ("total", "portal", "argilla", *STEPS)}  # no login step with a minted session
        base["bare claim"] = statistics.median(bare)
        console.print(f"baseline: warm-up arrival {fmt(warmup.total)}; {BASELINE} arrivals one after another on "
                      f"the idle portal: median {fmt(base['total'])} (portal {fmt(base['portal'])}, Argilla "
                      f"{fmt(base['argilla'])}); bare Collection.claim in this process: median "
                      f"{fmt(base['bare claim'])}")

        # the burst
        accounts_before = Counter(a.state for a in store.accounts(cid))
        log_start, argilla_log_start = log_size(portal_log_path), log_size(argilla_log_path)
        cpu_before_burst = cpu_seconds(settings)
        t0 = time.perf_counter() + 1.0

        def arrival(v: Visit) -> Callable[[], None]:
            def run() -> None:
                v.scheduled = (v.index - 1 - BASELINE) * window / n
                STOP.wait(max(0.0, t0 + v.scheduled - time.perf_counter()))
                if STOP.is_set():
                    return
                v.started = time.perf_counter() - t0
                visit(v, argilla_url, dataset, expected)
            return run

        with ClaimWatcher(store, cid) as claims, Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=console) as progress:
            run_jobs([arrival(v) for v in burst], workers, progress,
                     f"burst: {n} arrivals starting within {window:g} s")
        burst_s = time.perf_counter() - t0
        cpu_after_burst = cpu_seconds(settings)
        claim_s = claims.seconds(burst, t0)
        load_after_burst = os.getloadavg()
        log_end, argilla_log_end = log_size(portal_log_path), log_size(argilla_log_path)
        accounts_after = Counter(a.state for a in store.accounts(cid))
        refilled_during_burst = sum(accounts_after.values()) - sum(accounts_before.values())

        # allocation checks, right after the burst
        double: list[str] = list(store.check(cid))
        participants = store.participants(cid)
        by_account = Counter(p.account_id for p in participants)
        by_username = Counter(p.username for p in participants)
        double += [f"account {a} bound to {k} participants" for a, k in by_account.items() if k > 1]
        double += [f"username {u} held by {k} participants" for u, k in by_username.items() if k > 1]
        double += [f"{p.username} holds {len(set(p.items))} distinct items of {len(p.items)} (Q={Q})"
                   for p in participants if len(set(p.items)) != Q or len(p.items) != Q]
        by_name = {p.username: p for p in participants}
        for v in [warmup, *baseline, *burst]:
            if len(v.usernames) > 1:
                double.append(f"arrival {v.index} was handed {len(v.usernames)} accounts")
            mine = store.participant_by_key(cid, v.pid)
            if v.usernames and (mine is None or {mine.username} != v.usernames):
                double.append(f"arrival {v.index}: the store maps their Prolific id to "
                              f"{mine.username if mine else 'nobody'}, the portal handed {sorted(v.usernames)}")
            if v.ok and mine is not None and v.record_ids != set(by_name[mine.username].items):
                double.append(f"arrival {v.index}: their dataset lists {len(v.record_ids)} records, "
                              f"{len(v.record_ids ^ set(by_name[mine.username].items))} differ from the store's")
        handed = Counter(u for v in visits for u in v.usernames)
        double += [f"account {u} handed to {k} arrivals" for u, k in handed.items() if k > 1]

        burst_double = len(double)  # the comparison's: at the burst, before the crowded burst and the webhooks
        if crowded:  # more arrivals than places: those without a place are turned away, none handed work twice
            over_side, over_problems = over_places_burst(crowded, window * over / n, argilla_url, dataset, expected,
                                                         store, cid, spare)
            double += over_problems

        # let the portal's background refill finish (it started when the pool fell below half)
        # (stops waiting when no account became ready for SETTLE_STALL_S: the refill ended or died)
        settle_s, settle_ready, stalled = 0.0, 0, False
        if not args.no_settle:
            started = last_change = time.perf_counter()
            ready_before = seen = sum(a.state == READY for a in store.accounts(cid))
            with console.status("waiting for the portal's background refill of the pool") as status:
                while time.perf_counter() - started < SETTLE_MAX_S and not STOP.is_set():
                    states = Counter(a.state for a in store.accounts(cid))
                    status.update(f"waiting for the portal's background refill: {states[READY]} ready, "
                                  f"{states[CREATING]} being created ({time.perf_counter() - started:.0f} s)")
                    if not states[CREATING]:
                        break
                    if states[READY] != seen:
                        seen, last_change = states[READY], time.perf_counter()
                    elif time.perf_counter() - last_change > SETTLE_STALL_S:
                        stalled = True
                        break
                    time.sleep(1.0)
            settle_s = time.perf_counter() - started
            settle_ready = sum(a.state == READY for a in store.accounts(cid)) - ready_before
        states_before_hooks = Counter(a.state for a in store.accounts(cid))
        refill_died = portal_log_path.exists() and "Exception in thread refill" in portal_log_path.read_text(
            errors="replace")

        # the webhooks: one RETURNED per burst participant, every second one twice (side by side)
        events: list[tuple[str, bytes, int]] = []
        for i, v in enumerate(burst):
            body = json.dumps({"event_type": "submission.status.change", "resource_id": v.session_id,
                               "participant_id": v.pid, "study_id": platform.external_id,
                               "status": "RETURNED"}).encode()
            event_id = f"bench-{secrets.token_hex(12)}"
            events += [(event_id, body, i)] * (2 if i % 2 else 1)
        replies: list[dict[str, Any]] = []
        lock = threading.Lock()
        hook_log_start, hook_argilla_start = log_size(portal_log_path), log_size(argilla_log_path)
        portal_url = settings.portal_public_url
        sender = httpx.Client(timeout=GIVE_UP_S, verify=verify, limits=httpx.Limits(max_connections=args.hook_workers + 10,
                                                                     max_keepalive_connections=args.hook_workers + 10))

        def send(event: tuple[str, bytes, int]) -> Callable[[], None]:
            def run() -> None:
                event_id, body, index = event
                started = time.perf_counter()
                attempts, status, reply = 0, 0, {}
                while attempts < 5 and not STOP.is_set():  # Prolific retries a failed delivery
                    attempts += 1
                    timestamp = str(int(time.time()))
                    headers = {"X-Prolific-Request-Signature": sign_webhook(secret, timestamp, body),
                               "X-Prolific-Request-Timestamp": timestamp, "X-Event-ID": event_id,
                               "Content-Type": "application/json"}
                    try:
                        response = sender.post(f"{portal_url}/hooks/prolific", content=body, headers=headers)
                        status, reply = response.status_code, response.json()
                    except (httpx.HTTPError, ValueError) as exc:
                        status, reply = 0, {"error": exc.__class__.__name__}
                    if status == 200:
                        break
                    STOP.wait(1.0)
                with lock:
                    replies.append({"event_id": event_id, "index": index, "status": status, "reply": reply,
                                    "attempts": attempts, "seconds": time.perf_counter() - started})
            return run

        cpu_before_hooks = cpu_seconds(settings)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            hooks_s = run_jobs([send(e) for e in events], args.hook_workers, progress,
                               f"webhooks: {len(events)} deliveries ({n} events) from {args.hook_workers} threads")
        sender.close()
        cpu_after_hooks = cpu_seconds(settings)
        hook_log_end, hook_argilla_end = log_size(portal_log_path), log_size(argilla_log_path)

        # the releases run after the replies: wait until no delivery is pending
        waited = time.perf_counter()
        while store.pending_deliveries("prolific") and time.perf_counter() - waited < GIVE_UP_S:
            time.sleep(0.2)
        release_after_s, still_pending = time.perf_counter() - waited, len(store.pending_deliveries("prolific"))

        # lost webhooks: every distinct event recorded once, every returned participant released once
        sent_ids = {e[0] for e in events}
        recorded = Counter(d["event_id"] for d in store.deliveries("prolific"))
        lost = sorted(sent_ids - set(recorded))
        twice = [e for e in sent_ids if recorded[e] > 1]
        unanswered = [r for r in replies if r["status"] != 200]
        participants = {p.username: p for p in store.participants(cid)}
        released_events = Counter(e["participant_id"] for e in store.events(cid, kinds=["released"]))
        returned = [participants[next(iter(v.usernames))] for v in burst if v.usernames]
        not_released = [p.username for p in returned if p.status != RELEASED]
        released_twice = [p.username for p in returned if released_events[p.id] > 1]
        acted = Counter(r["event_id"] for r in replies if r["status"] == 200 and "outcome" in r["reply"])
        acted_twice = sum(1 for k in acted.values() if k > 1)
        outcomes = Counter(str(r["reply"].get("outcome", "duplicate" if r["reply"].get("duplicate") else r["reply"]))
                           for r in replies if r["status"] == 200)
        after_release = list(store.check(cid))
        double += [f"after the webhooks: {problem}" for problem in after_release]
        missing_participants = n - len(returned)

        # --- tables -------------------------------------------------------------------------------------
        ok = [v for v in burst if v.ok]
        late = [v.started - v.scheduled for v in burst if not math.isnan(v.started)]
        last_start = max((v.started for v in burst if not math.isnan(v.started)), default=math.nan)
        table = Table(title=f"{n} arrivals, entry requests due evenly over {window:g} s (last one sent at "
                            f"{last_start:.2f} s, at most {max(late, default=math.nan):.2f} s late), warm pool, "
                            f"{os.cpu_count()}-core machine; seconds from the entry request")
        for column in ("step", "burst p50", "p95", "max", "baseline (median of "
                       f"{BASELINE})", "p50 / baseline", "p95 / baseline"):
            table.add_column(column, justify="right")
        rows = [("entry -> records listed (all)", "total"),
                ("  portal: entry -> work frame", "portal"),
                ("    entry (Prolific check, claim, records logged)", "entry"),
                ("    welcome page", "welcome"), ("    Start (sign-in link)", "start"),
                ("    'being prepared' page (its reloads and waits)", "preparing"), ("    work frame", "work"),
                ("  Argilla: login -> records listed", "argilla"),
                ("    token login (bcrypt)", "login"), ("    my datasets", "datasets"),
                ("    pending records (search)", "records"), ("  pauses after errors (reloads)", "pauses after errors")]
        for label, name in rows:
            values = step_values(burst, name)
            p50, p95 = pct(values, 50), pct(values, 95)
            table.add_row(label, fmt(p50), fmt(p95), fmt(max(values, default=math.nan)), fmt(base[name]),
                          ratio(p50, base[name]), ratio(p95, base[name]))
        table.add_row("bare Collection.claim (this process, idle)", "", "", "", fmt(base["bare claim"]), "", "")
        console.print(table)

        routes, problems = portal_log(portal_log_path, log_start, log_end)
        table = Table(title="the portal's own time per request during the burst (its log: from the request reaching "
                            "the app, waiting for a free worker thread included), against what the participants saw "
                            "(every attempt of the step, failed ones included)")
        for column in ("route", "requests", "server p50", "server p95", "server max", "client p50", "client p95"):
            table.add_column(column, justify="right")
        client_step = {"entry": "entry", "welcome": "welcome", "start": "start", "work": "work"}
        for route in sorted(routes):
            values = routes[route]
            name = client_step.get(route.split(" ")[0])
            seen = step_values(burst, name) if name else []
            table.add_row(route, str(len(values)), fmt(pct(values, 50)), fmt(pct(values, 95)), fmt(max(values)),
                          fmt(pct(seen, 50)) if "303" in route or "200" in route else "",
                          fmt(pct(seen, 95)) if "303" in route or "200" in route else "")
        console.print(table)

        table = Table(title="the burst: what happened")
        table.add_column("")
        table.add_column("value", justify="right")
        table.add_row("arrivals with their records listed", f"{len(ok)}/{n}")
        table.add_row("gave up (count as never)", str(n - len(ok) - sum(math.isnan(v.started) for v in burst)))
        table.add_row("portal errors -> entry link opened again", str(sum(v.reloads for v in burst)))
        table.add_row("Argilla 5xx / unreachable -> call repeated", str(sum(v.argilla_errors for v in burst)))
        table.add_row("record searches per participant (1 = listed at once)",
                      f"{statistics.mean([v.polls for v in ok]):.2f}" if ok else "-")
        table.add_row("burst wall time (first entry -> last records listed)", fmt(burst_s))
        table.add_row("accounts the portal began provisioning during the burst (its background refill)",
                      f"{refilled_during_burst} (pool {accounts_before[READY]} ready before, "
                      f"{accounts_after[READY]} ready / {accounts_after[CREATING]} being created after)")
        burst_errors = argilla_errors(argilla_log_path, argilla_log_start, argilla_log_end)
        table.add_row("errors the Argilla server logged during the burst (its log), by kind",
                      ", ".join(f"{k}: {v}" for k, v in burst_errors.most_common()) or "none")
        table.add_row("load average (1 min) at the start / after the burst",
                      f"{load_at_start[0]:.1f} / {load_after_burst[0]:.1f}")
        if not args.no_settle:
            table.add_row("then: waiting for the portal's refill to end" + (
                          f" (stopped: no account ready for {SETTLE_STALL_S:g} s)" if stalled else ""),
                          f"{settle_s:.0f} s ({settle_ready} more became ready; {states_before_hooks[READY]} ready, "
                          f"{states_before_hooks[CREATING]} left 'creating')")
        table.add_row("the portal's refill thread died on an error (its log: 'Exception in thread refill')",
                      "yes" if refill_died else "no")
        console.print(table)

        hook_routes, hook_problems = portal_log(portal_log_path, hook_log_start, hook_log_end)
        server = [s for route, values in hook_routes.items() for s in values if route.startswith("webhook")]
        seconds = [r["seconds"] for r in replies]
        table = Table(title=f"webhooks: {len(events)} signed RETURNED deliveries for {n} participants "
                            f"({n // 2} delivered twice with the same X-Event-ID, side by side), "
                            f"{args.hook_workers} sender threads")
        table.add_column("")
        table.add_column("value", justify="right")
        handled = sum(r["status"] == 200 for r in replies)
        table.add_row("handled per second (deliveries answered 200 / wall time)",
                      f"{handled / hooks_s:.1f} ({handled} in {hooks_s:.1f} s)")
        table.add_row("distinct events per second", f"{len(sent_ids) / hooks_s:.1f}")
        table.add_row("delivery: sent -> 200, p50 / p95 / max (retries included)",
                      f"{fmt(pct(seconds, 50))} / {fmt(pct(seconds, 95))} / {fmt(max(seconds, default=math.nan))}")
        table.add_row("the portal's own time per webhook, p50 / p95",
                      f"{fmt(pct(server, 50))} / {fmt(pct(server, 95))}")
        table.add_row("releases done after the last reply (no delivery pending) / still pending",
                      f"{release_after_s:.1f} s / {still_pending}")
        table.add_row("deliveries retried / never answered 200",
                      f"{sum(r['attempts'] > 1 for r in replies)} / {len(unanswered)}")
        table.add_row("replies", ", ".join(f"{k}: {v}" for k, v in outcomes.most_common()))
        hook_errors = argilla_errors(argilla_log_path, hook_argilla_start, hook_argilla_end)
        table.add_row("errors the Argilla server logged meanwhile, by kind",
                      ", ".join(f"{k}: {v}" for k, v in hook_errors.most_common()) or "none")
        table.add_row("events acted on by both copies (both handled before either was recorded)", str(acted_twice))
        table.add_row("distinct events recorded / sent; recorded more than once",
                      f"{len(sent_ids & set(recorded))} / {len(sent_ids)}; {len(twice)}")
        table.add_row("participants released / returned; released more than once",
                      f"{len(returned) - len(not_released)} / {len(returned)}; {len(released_twice)}")
        console.print(table)
        console.print(cpu_table({"burst": (cpu_before_burst, cpu_after_burst),
                                 "webhooks": (cpu_before_hooks, cpu_after_hooks)}))

        p95 = pct(step_values(burst, "total"), 95)
        p50 = pct(step_values(burst, "total"), 50)
        own_cpu = stack_cpu(cpu_before_burst, cpu_after_burst)
        own_per_arrival = sum(own_cpu.values()) / max(1, n)
        potato_per_arrival = (peer[0].cpu_s / max(1, peer[0].arrivals - peer[0].never)) if peer else math.nan
        claim_p50, claim_p95 = pct(claim_s, 50), pct(claim_s, 95)
        table = Table(title=f"issue 34 item 5: the burst's cost and first answers ({n} arrivals in {window:g} s, "
                            f"{os.cpu_count()} cores{', potato in the same run' if peer else ''})")
        for column in ("figure", "crowdpref", "potato 2.12.1" if peer else "potato (--compare potato)",
                       "crowdpref / potato", "target"):
            table.add_column(column, justify="right")
        table.add_row("CPU-s per arrival, the stack's own processes (Argilla server+worker+Redis, portal, "
                      "PostgreSQL, Caddy) / potato's server", f"{own_per_arrival:.3f}",
                      f"{potato_per_arrival:.3f}" if peer else "-", ratio(own_per_arrival, potato_per_arrival),
                      f"<= {TARGET_STACK_CPU_S:g}")
        for name, used in own_cpu.items():
            table.add_row(f"  {name}", f"{used / max(1, n):.3f} ({used:.1f} s)", "", "", "")
        table.add_row("time to a durable claim (entry request -> claim committed in the store), p50 / p95",
                      f"{fmt(claim_p50)} / {fmt(claim_p95)}", "-", "", f"p95 < {TARGET_CLAIM_P95_S:g} s")
        table.add_row("time to the first item (entry request -> records listed / first item's page), p95",
                      fmt(p95), fmt(peer[0].p95) if peer else "-", ratio(p95, peer[0].p95) if peer else "-", "")
        console.print(table)
        lost_total = len(lost) + len(twice) + len(not_released) + len(released_twice) + len(unanswered)
        limit = public_target(n, window) if public else TARGET_P95_S
        seen_errors = sum(v.reloads + v.argilla_errors for v in burst)
        targets = [
            (f"p95 entry request -> logged-in workspace with records < {limit:g} s" if limit else
             "p95 entry request -> logged-in workspace with records (no target for this burst: everyone in)",
             f"{fmt(p95)} (p50 {fmt(p50)}; {ratio(p95, base['total'])} the idle baseline)",
             p95 < limit if limit else True),
        ]
        if public:  # issue 19: everyone in, and no participant sees an HTTP error
            targets += [("everyone in (their records listed)", f"{len(ok)}/{n}", len(ok) == n),
                        ("HTTP errors seen by participants = 0 (5xx/429/no connection, each retried)",
                         str(seen_errors), seen_errors == 0)]
        targets += [
            ("double allocations = 0 (items over R, accounts shared or handed twice, datasets != store)",
             str(len(double)), not double),
            ("lost webhooks = 0 (events not recorded once, participants not released once, deliveries unanswered)",
             f"{lost_total} ({len(lost)} not recorded, {len(not_released)} not released, {len(unanswered)} unanswered)",
             lost_total == 0 and missing_participants == 0),
            (f"webhook reply p95 < {TARGET_HOOK_P95_S:g} s (sent -> 200, retries included)",
             fmt(pct(seconds, 95)), pct(seconds, 95) < TARGET_HOOK_P95_S),
        ]
        if args.json is not None:
            args.json.write_text(json.dumps({
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "profile": args.profile,
                "argilla_workers": settings.argilla_worker_count, "sign_in": args.sign_in,
                "bcrypt_on_loop": args.bcrypt_on_loop, "arrivals": n, "window_s": window,
                "p50_s": p50, "p95_s": p95, "max_s": max(step_values(burst, "total"), default=math.nan),
                "baseline_s": base["total"], "in": len(ok), "http_errors_seen": seen_errors,
                "double_allocations": len(double), "lost_webhooks": lost_total,
                "webhook_reply_p95_s": pct(seconds, 95), "p95_target_s": limit,
                "load_at_start": load_at_start[0], "load_after_burst": load_after_burst[0],
                "argilla_errors_logged": dict(burst_errors),
                "cpu_s": {k: cpu_after_burst.get(k, 0.0) - cpu_before_burst.get(k, 0.0)
                          for k in cpu_after_burst if not k.startswith("(")},
                "burst_wall_s": burst_s, "stack_cpu_s": own_cpu, "stack_cpu_s_per_arrival": own_per_arrival,
                "durable_claim_p50_s": claim_p50, "durable_claim_p95_s": claim_p95,
                "potato_cpu_s_per_arrival": potato_per_arrival,
                "potato_p95_s": peer[0].p95 if peer else None}, indent=1, default=str).replace("Infinity", "null").replace("NaN", "null"))
        table = Table(title="targets")
        for column in ("target", "measured", ""):
            table.add_column(column)
        for name, measured, good in targets:
            table.add_row(name, measured, verdict(good))
            met.append(good)
        console.print(table)
        for v in [v for v in burst if not v.ok][:5]:
            console.print(f"[red]arrival {v.index} did not get their records:[/] {v.error}")
        errors = Counter(v.error[:110] for v in burst if v.ok and v.error)
        for error, count in errors.most_common(5):
            console.print(f"retried, then got through ({count} participants), last error: {error}")
        for line in double[:8]:
            console.print(f"[red]double allocation:[/] {line}")
        for event_id in lost[:5]:
            console.print(f"[red]webhook not recorded:[/] {event_id}")
        for line in (problems + hook_problems)[:5]:
            console.print(f"portal log: {line[:200]}")
        if peer:
            import potato_peer

            burst_errors = sum(v.reloads + v.argilla_errors + (not v.ok) for v in burst)
            potato_peer.print_comparison(console, [
                (peer[0], potato_peer.CrowdprefSide(p95, burst_errors, burst_double)),
                (peer[1], over_side)],
                f"compared with potato {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, same run: seconds "
                "from the Prolific-style entry URL to the first item's page (potato) / to the signed-in workspace "
                "with records (crowdpref); errors: retried answers and people who never got there")
        clean = all(met) and not problems and not hook_problems
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping the stack[/]")
    finally:
        STOP.set()
        for v in visits:
            v.close()
        stopped = stack.down(settings)
        console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}; wall time "
                      f"{time.perf_counter() - bench_started:.0f} s")
        if pg_folder is not None and pg_folder.parent == postgres.SYSTEM_ROOT:
            shutil.rmtree(pg_folder, ignore_errors=True)  # as root, outside the state folder: gone with it
        if clean and args.home is None:
            shutil.rmtree(home, ignore_errors=True)
        else:
            console.print(f"state folder (logs: {home / 'logs'}) kept: {home}")
    return 0 if met and all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
