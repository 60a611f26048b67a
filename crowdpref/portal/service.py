"""What the portal does, without the web framework: check who arrives, claim their work, say
where to go, recognise them when they are done, and act on Prolific's and Argilla's webhooks.

Every refusal is a :class:`Refusal` (HTTP status, title, a plain sentence for the person) and
is decided BEFORE anything is allocated. Prolific ids, session ids and passwords never appear
in a message, a log line or an event; the store keeps salted hashes only.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from crowdpref.collection import Collection
from crowdpref.config import StudyConfig, load_study
from crowdpref.errors import CrowdprefError
from crowdpref.pacing import wait_for_quiet
from crowdpref import study_paths
from crowdpref.portal import argilla_hooks, argilla_session, links
from crowdpref.recruitment import (FREEING, WEBHOOK_SECRET_META as WEBHOOK_SECRET, ProlificTarget, prolific_target,
                                   recruits_on_prolific, released_by_crowdpref)
from crowdpref.onboarding import Graded, OnboardingConfig, grade, onboarding_of, passes
from crowdpref.store import ACTIVE, COMPLETE, RELEASING, Claimed, Full, ParticipantState, Refused, Store
from crowdpref.store.engine import StoreError
from crowdpref.store.onboarding import PASSED, SCREENED_OUT
from crowdpref.store.results import OnboardingState

Key = Literal["study1", "study2"]
KEYS: tuple[Key, ...] = ("study1", "study2")
PROLIFIC_ID = re.compile(r"^[0-9a-fA-F]{24}$")
# Prolific statuses under which the person may (still) work or see their code
WORKING = ("RESERVED", "ACTIVE")
FINISHED = ("AWAITING REVIEW", "APPROVED")
RETURN_WORDING = ("Please return your submission on Prolific (click \u201cReturn study\u201d in the Prolific app) "
                  "so that it does not count against you.")
SECRET_READ_S = 30.0  # Prolific's webhook secret, read from the store at most this often (and on a mismatch)
PROGRESS_READ_S = 10.0  # the work frame's bar without Argilla's webhooks: one Argilla read per person per 10 s
ENTRIES_PER_WINDOW, ENTRY_WINDOW_S = 10, 10.0  # per person (Prolific id or invitation)
# per client address (not a loopback one: the simulated crowd, or a proxy whose X-Forwarded-For
# is not trusted, would make every participant one address): entries, and entries Prolific
# did not confirm (a forged id, someone else's session, another study) - the latter stop an
# address for a while before any further Prolific call
ADDRESS_ENTRIES, ADDRESS_WINDOW_S = 60, 60.0
ADDRESS_FAILURES, FAILURE_WINDOW_S = 5, 600.0
# the whole portal: entries, and entries Prolific did not confirm (forgers on many addresses)
GLOBAL_ENTRIES, GLOBAL_WINDOW_S = 600, 60.0
GLOBAL_FAILURES = 20  # per GLOBAL_WINDOW_S
LIMITER_MAX_KEYS = 10_000  # ids / addresses each limiter remembers at most (oldest forgotten first)
COOKIE_MAX_AGE_S = 24 * 3600  # the portal's signed cookie: then "please start from your study link"
RESCAN_INTERVAL_S = 2.0  # an unknown study name re-reads the studies folder at most this often
AFTER_REPLY_WORKERS = 4  # threads that release work after a webhook's reply (the request threads stay free)
AFTER_REPLY_QUIET_S, AFTER_REPLY_PATIENCE_S = 0.5, 10.0
"""Work after a reply yields to the deliveries still arriving: it starts once none came for
``AFTER_REPLY_QUIET_S``, or after ``AFTER_REPLY_PATIENCE_S`` at the latest (a burst of 150
deliveries is answered first, then released; the releases no longer share the portal's CPU
with the replies)."""
log = logging.getLogger("crowdpref.portal")
_HEX_ID = re.compile(r"[0-9a-fA-F]{24}")


class RateLimiter:
    """At most ``limit`` events per ``window_s`` seconds for each key, in memory that cannot
    grow without bound: each key keeps at most ``limit`` times, keys idle for a window are
    dropped as new ones come, and past ``max_keys`` the least recently seen key is forgotten.
    Not thread-safe on its own (the portal holds its lock)."""

    def __init__(self, limit: int, window_s: float, max_keys: int = LIMITER_MAX_KEYS):
        self.limit, self.window_s, self.max_keys = limit, window_s, max_keys
        self._hits: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._hits)

    def full(self, key: str, now: float) -> bool:
        """Whether ``key`` used its ``limit`` within the window (records nothing)."""
        hits = self._hits.get(key)
        if hits is None:
            return False
        while hits and hits[0] <= now - self.window_s:
            hits.popleft()
        return len(hits) >= self.limit

    def add(self, key: str, now: float) -> None:
        self._prune(now)
        hits = self._hits.get(key)
        if hits is None:
            while len(self._hits) >= self.max_keys:
                self._hits.popitem(last=False)
            hits = self._hits[key] = deque(maxlen=self.limit)
        else:
            self._hits.move_to_end(key)
        hits.append(now)

    def take(self, key: str, now: float) -> bool:
        """Record one event for ``key`` unless it is over its limit (then False)."""
        if self.full(key, now):
            return False
        self.add(key, now)
        return True

    def _prune(self, now: float, most: int = 8) -> None:
        """Forget up to ``most`` keys idle for a whole window (least recently seen first: the
        order of the dict is the order of their last event)."""
        for _ in range(most):
            oldest = next(iter(self._hits.values()), None)
            if oldest is None or (oldest and oldest[-1] > now - self.window_s):
                return
            self._hits.popitem(last=False)


def first_item_path(dataset_id: str) -> str:
    """Argilla's page of a dataset's first pending record (annotation mode), on Argilla's origin."""
    return f"/dataset/{dataset_id}/annotation-mode"


def work_path(study: str, key: str) -> str:
    """The work frame's address on the portal (the portal's bar over Argilla)."""
    return f"/s/{study}/{key}/work"


def _one_line(exc: BaseException) -> str:
    """An exception as one log line with no Prolific id in it (24-hex ids are masked)."""
    text = (str(exc).splitlines() or [""])[0][:200]
    return _HEX_ID.sub("<id>", f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__)


def _unavailable(cause: str, message: str, title: str = "Please try again") -> Refusal:
    """A 503 whose cause the portal log names, in one line (never a secret: ``cause`` holds
    class names, config problems and masked messages only); the person sees ``message``."""
    log.warning("503: %s", cause)
    return Refusal(503, title, message)


class Refusal(CrowdprefError):
    """A request the portal turns down: ``status`` is the HTTP status, ``title`` and ``str()``
    the page a person sees (no ids in it)."""

    def __init__(self, status: int, title: str, message: str):
        super().__init__(message)
        self.status = status
        self.title = title


@dataclass(frozen=True)
class Visitor:
    """Who arrives, as the portal verified them. ``key`` is the claim key (a Prolific id or an
    invite key): secret, never logged."""

    key: str
    source: str  # prolific | invite | simulated
    session_id: str | None = None
    prolific_study_id: str | None = None

    def __repr__(self) -> str:
        return f"Visitor(source={self.source!r})"


@dataclass(frozen=True)
class Entered:
    study: str
    key: Key
    participant: ParticipantState | None  # None while they are in onboarding (nothing claimed yet)
    cookie: str  # signed: collection id + username; in onboarding: collection id + key hash + source
    finished: Finish | None = None  # they are done already: show this, no cookie, no sign-in
    onboarding: OnboardingState | None = None  # set: they go through onboarding first, nothing claimed


@dataclass(frozen=True)
class Onboarder:
    """A person in a study's onboarding, as the portal's cookie names them: their key hash
    (never the raw id), where they came from, and where they stand."""

    collection: Collection
    config: StudyConfig
    onboarding: OnboardingConfig
    key_hash: str
    source: str
    state: OnboardingState
    # the Prolific submission they entered with (SESSION_ID, verified at the entry; from the signed
    # cookie): where a screen-out is paid. None: not on Prolific, or an older cookie (the sync pays)
    session_id: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Onboarder(source={self.source!r}, status={self.state.status!r}, step={self.state.step!r})"


@dataclass(frozen=True)
class PracticeAnswer:
    index: int
    choice: int | None
    correct: bool


@dataclass(frozen=True)
class QuizResult:
    graded: Graded
    passed: bool
    state: OnboardingState


@dataclass(frozen=True)
class TokenSignIn:
    """A minted Argilla session for the browser: ``token`` (secret: never logged, never in a
    URL), its expiry ``expires`` (Unix seconds) and the Argilla page to open with it."""

    token: str
    expires: int
    target: str

    def __repr__(self) -> str:
        return f"TokenSignIn(expires={self.expires}, target={self.target!r})"


class InOnboarding(CrowdprefError):
    """The cookie names a person still in onboarding (no work claimed): their onboarding page."""


class Onboarded(CrowdprefError):
    """The cookie names a participant who claimed already: the welcome page is theirs."""


class AlreadyFinished(CrowdprefError):
    """A participant who completed asks to be signed in again: their credentials have expired;
    the finish page (their code) is where they belong."""


@dataclass(frozen=True)
class WorkFrame:
    """The portal's page around Argilla (:meth:`Portal.work`): the Argilla page its frame opens
    (``target``; on the laptop stack the one-hop password sign-in, so never logged) and how far
    the participant is."""

    target: str
    submitted: int
    total: int

    def __repr__(self) -> str:  # the target may carry a password
        return f"WorkFrame(submitted={self.submitted}, total={self.total})"


@dataclass(frozen=True)
class Progress:
    """How many of their items a participant has submitted, as the work frame shows it."""

    submitted: int
    total: int
    done: bool
    given_back: bool = False  # released (returned, timed out, dropped) or withdrawn: nothing more to do here


@dataclass(frozen=True)
class Finish:
    """The finish page: ``code`` when every item is submitted, else how many are left."""

    done: bool
    submitted: int
    total: int
    code: str | None = None
    completion_url: str | None = None
    argilla_url: str | None = None


class StudyRegistry:
    """Study configs by name from the portal's studies folder (re-read when a name is unknown,
    so a new study needs no restart)."""

    def __init__(self, folder: Path, clock: Callable[[], float] = time.monotonic):
        self.folder = folder
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._scanned: tuple[float, int] | None = None  # when, and the folder's mtime then

    def path(self, name: str) -> Path | None:
        with self._lock:
            if name not in self._paths:  # an unknown name (maybe made up) re-reads the folder only when a
                now = self._clock()  # file was added, or at most every RESCAN_INTERVAL_S
                try:
                    mtime = self.folder.stat().st_mtime_ns
                except OSError:
                    mtime = -1
                if self._scanned is None or self._scanned[1] != mtime or now - self._scanned[0] >= RESCAN_INTERVAL_S:
                    self._scanned = (now, mtime)
                    self._scan()
            return self._paths.get(name)

    def _scan(self) -> None:
        for file in sorted(self.folder.glob("*.y*ml")):
            try:
                data = yaml.safe_load(file.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and isinstance(data.get("name"), str):
                self._paths.setdefault(data["name"], file)


class AfterReply:
    """The work a webhook delivery left pending in the store, run after its reply on a few
    threads of its own (so a burst of deliveries never takes the threads that serve requests).
    A delivery is run at most once at a time here; whether it still has work to do is the
    store's to say (:meth:`Portal.run_delivery`), so running it again is harmless.
    ``workers=0`` records and runs nothing: what a portal that died right after replying left."""

    def __init__(self, run: Callable[[str], Any], workers: int = AFTER_REPLY_WORKERS,
                 quiet_s: float = AFTER_REPLY_QUIET_S, patience_s: float = AFTER_REPLY_PATIENCE_S):
        self._run, self.workers = run, workers
        self.quiet_s, self.patience_s = quiet_s, patience_s
        self._last_submit = 0.0  # time.monotonic() of the latest delivery handed in
        self._pool: ThreadPoolExecutor | None = None
        self._running: set[str] = set()
        self._futures: set[Future[None]] = set()
        self._lock = threading.Lock()

    def submit(self, event_id: str) -> bool:
        """Run the delivery's work soon; False when it runs already (or ``workers=0``)."""
        if self.workers <= 0:
            return False
        with self._lock:
            if event_id in self._running:
                return False
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="after-reply")
            self._running.add(event_id)
            self._last_submit = time.monotonic()
            future = self._pool.submit(self._one, event_id)
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return True

    def _one(self, event_id: str) -> None:
        self._yield_to_deliveries()
        try:
            self._run(event_id)
        except Exception as exc:  # noqa: BLE001 - it stays pending: the next start (or the Prolific sync) repeats it
            log.warning("webhook work not done (%s): it stays pending; the portal's next start or the Prolific "
                        "sync repeats it", _one_line(exc))
        finally:
            with self._lock:
                self._running.discard(event_id)

    def _yield_to_deliveries(self) -> None:
        """Wait until no delivery was handed in for :attr:`quiet_s` (at most :attr:`patience_s`)."""
        def idle() -> float:
            with self._lock:
                return time.monotonic() - self._last_submit

        wait_for_quiet(idle, self.quiet_s, self.patience_s)

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the work submitted so far is done (tests, benchmarks); False on timeout."""
        with self._lock:
            futures = set(self._futures)
        return not wait_for(futures, timeout=timeout_s).not_done

    def stop(self) -> None:
        """The portal stops: work not started stays pending in the store (the next start runs it)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class Portal:
    """The portal's logic for one deployment (settings + store). ``after_reply_workers``: the
    threads that release work after a webhook's reply (0: none - the work stays pending in the
    store until a portal with some starts, :meth:`resume_deliveries`)."""

    def __init__(self, settings: Any, store: Store, *, open_collection: Callable[[Path, Key], Collection] | None = None,
                 prolific_factory: Callable[[ProlificTarget], Any] | None = None,
                 clock: Callable[[], float] = time.time, after_reply_workers: int = AFTER_REPLY_WORKERS):
        self.settings = settings
        self.store = store
        self.registry = StudyRegistry(Path(settings.portal_studies))
        self.clock = clock
        self._open_collection = open_collection or (lambda path, key: _open_collection(path, key, settings))
        self._prolific_factory = prolific_factory or _prolific_client
        # per (study, key): the collection, opened for one version (mtime) of the study config
        self._collections: dict[tuple[str, str], tuple[int, Collection]] = {}
        self._configs: dict[Path, tuple[int, StudyConfig]] = {}
        self._known_paths: dict[str, tuple[float, Path | None]] = {}  # study name -> (looked up, path)
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        # two tabs of one person claim one after the other: a fixed set of locks (by hash), so
        # the memory does not grow with the people (or forgers) who arrive
        self._person_locks = [threading.Lock() for _ in range(64)]
        self.limits = {
            "person": RateLimiter(ENTRIES_PER_WINDOW, ENTRY_WINDOW_S),
            "address": RateLimiter(ADDRESS_ENTRIES, ADDRESS_WINDOW_S),
            "address_failures": RateLimiter(ADDRESS_FAILURES, FAILURE_WINDOW_S),
            "global": RateLimiter(GLOBAL_ENTRIES, GLOBAL_WINDOW_S, max_keys=1),
            "global_failures": RateLimiter(GLOBAL_FAILURES, GLOBAL_WINDOW_S, max_keys=1),
        }
        self._unverified_logged: set[str] = set()
        self.after_reply = AfterReply(self.run_delivery, after_reply_workers)
        # screen-out payments after the screened-out page's reply (one thread; none with 0 workers:
        # the Prolific sync pays them)
        self._screen_out_jobs: dict[str, tuple[StudyConfig, int, str, str]] = {}
        self.screen_outs = AfterReply(self.pay_screen_out, min(1, after_reply_workers), quiet_s=0.0, patience_s=0.0)
        self.cookies = URLSafeTimedSerializer(store.secret("portal_cookie_key"), salt="crowdpref-portal-session")
        self.invites = URLSafeTimedSerializer(store.secret("portal_invite_key"), salt="crowdpref-invite")
        self._argilla_secret: str | None = None  # Argilla's token-signing key, read when first needed
        self._secret_read: tuple[float, str | None] | None = None  # (when, Prolific's webhook secret)
        self._progress_lock = threading.Lock()
        self._progress_reads = RateLimiter(1, PROGRESS_READ_S)  # the bar's Argilla reads, per username

    # studies and collections -------------------------------------------------------------------
    def study_path(self, study: str) -> Path | None:
        """The config of study ``study``: the path the store recorded when its collection was
        opened or its links handed out (:mod:`crowdpref.study_paths`), wherever it lives; else a
        config of that name in the studies folder. Looked up again at most every
        ``RESCAN_INTERVAL_S`` per name (an unknown name costs no store read per request)."""
        now = time.monotonic()
        with self._lock:
            cached = self._known_paths.get(study)
        if cached is None or now - cached[0] >= RESCAN_INTERVAL_S:
            try:
                found = study_paths.known(self.store, study)
            except Exception:  # noqa: BLE001 - the store unreadable: the folder still serves
                found = None
            cached = (now, found)
            with self._lock:
                self._known_paths[study] = cached
                if len(self._known_paths) > LIMITER_MAX_KEYS:  # made-up names must not grow it forever
                    self._known_paths.clear()
        return cached[1] or self.registry.path(study)

    def config(self, study: str, key: str) -> tuple[StudyConfig, Path]:
        if key not in KEYS:
            raise Refusal(404, "Page not found", "This address does not belong to a study. Please check the link.")
        path = self.study_path(study)
        if path is None:
            raise Refusal(404, "Study not found",
                          "We could not find this study. Please check the link, or contact the researchers.")
        try:
            mtime = path.stat().st_mtime_ns
            with self._lock:
                cached = self._configs.get(path)
            if cached is None or cached[0] != mtime:  # parsed once per version of the file
                cached = (mtime, load_study(path))
                with self._lock:
                    self._configs[path] = cached
        except (OSError, CrowdprefError) as exc:  # the config broke while the study runs
            raise _unavailable(f"study config broken: {_one_line(exc)}", "This study cannot be opened right now. "
                               "Please try again in a few minutes, or contact the researchers.",
                               "Study unavailable") from exc
        return cached[1], path

    def collection(self, study: str, key: Key) -> Collection:
        """The study's collection, opened again when its config file changed: opening it
        writes the config's R, Q and settings to the store's collection row, which every
        claim reads (so lowering R in the config takes effect at the next claim)."""
        config, path = self.config(study, key)
        version = self._configs[path][0]
        with self._lock:
            cached = self._collections.get((study, key))
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            collection = self._open_collection(path, key)
            collection.info  # noqa: B018 - the store's collection row follows this config version now
        except CrowdprefError as exc:  # e.g. study 2 before its pairs exist
            raise Refusal(409, "Not open yet",
                          "This part of the study is not open yet. " + RETURN_WORDING) from exc
        with self._lock:
            current = self._collections.get((study, key))
            if current is None or current[0] != version:
                self._collections[(study, key)] = current = (version, collection)
            return current[1]

    def prolific(self, config: StudyConfig) -> Any | None:
        target = prolific_target(config, self.settings)
        if target is None:
            return None
        if not target.token:
            raise _unavailable("PROLIFIC_TOKEN not set: arrivals cannot be verified with Prolific",
                               "This study cannot be opened right now. Please try again in a few minutes.")
        with self._lock:
            if target.api_url not in self._clients:
                self._clients[target.api_url] = self._prolific_factory(target)
            return self._clients[target.api_url]

    # arrival --------------------------------------------------------------------------------------
    def visitor(self, study: str, key: Key, params: Mapping[str, str], client: str | None = None) -> Visitor:
        """Check the entry parameters (and, with Prolific, the submission they name). Nothing is
        allocated here. ``client``: the visitor's address (entries Prolific does not confirm
        count against it, see :meth:`throttle`)."""
        config, _ = self.config(study, key)
        if config.participants == "invite":
            token = params.get("invite", "")
            try:
                invite = self.invites.loads(token, max_age=config.invites.lifetime_days * 86400)
            except SignatureExpired:
                raise Refusal(410, "Link expired", "This invitation link has expired. Please ask the researchers "
                              "for a new one.") from None
            except BadSignature:
                raise Refusal(403, "Link not valid",
                              "This invitation link is not valid. Please use the exact link you were sent.") from None
            if not isinstance(invite, dict) or invite.get("study") != study or invite.get("key") != key:
                raise Refusal(403, "Link not valid", "This invitation link belongs to another study.")
            return Visitor(f"invite:{invite['id']}", "invite")
        pid, study_id, session_id = _prolific_ids(params)
        source = "simulated" if config.participants == "simulated" else "prolific"
        client_api = self.prolific(config)
        if client_api is None:  # an unverified pilot (prolific.verify: false): the ids are all we check
            if config.participants == "prolific" and config.prolific.verify:  # (the config refuses this)
                raise _unavailable(f"study '{study}' cannot verify arrivals: Prolific is not enabled",
                                   "This study cannot be opened right now. Please contact the researchers.")
            if study not in self._unverified_logged:
                self._unverified_logged.add(study)
                log.warning("study '%s' is an UNVERIFIED pilot (prolific.verify: false): arrivals are not checked "
                            "with Prolific, anyone who forms a link gets work", study)
            return Visitor(pid, source, session_id, study_id)
        collection = self.collection(study, key)
        platform = self.store.platform_study(collection.info.id)
        if platform is None:
            raise Refusal(409, "Not open yet", "This study is not open yet. " + RETURN_WORDING)
        if platform.external_id != study_id:
            self._failed(client)
            raise Refusal(403, "Wrong study", "This link belongs to another Prolific study. " + RETURN_WORDING)
        from crowdpref.prolific import ProlificError, ProlificNotFound

        try:
            submission = client_api.get_submission(session_id)
        except ProlificNotFound:
            self._failed(client)
            raise Refusal(403, "Submission not found",
                          "Prolific does not know this session. Please open the study from Prolific again.") from None
        except ProlificError as exc:
            raise _unavailable(f"Prolific unreachable: {_one_line(exc)}", "We cannot reach Prolific right now. "
                               "Please wait a minute and open the link again.") from None
        if submission.participant_id.lower() != pid or submission.study_id.lower() != study_id:
            self._failed(client)
            raise Refusal(403, "Not your session",
                          "This session belongs to someone else. Please open the study from your own Prolific account.")
        if submission.status not in WORKING + FINISHED:
            raise Refusal(409, "Submission closed",
                          f"Prolific says your submission is {submission.status.lower()}, so it cannot continue.")
        return Visitor(pid, source, session_id, study_id)

    def enter(self, study: str, key: Key, params: Mapping[str, str], client: str | None = None) -> Entered:
        """Throttle, verify the visitor, claim their work (the same work when they come back)
        and make it visible in their Argilla dataset. ``client``: the visitor's address (the
        app passes it; None: not limited per address). A participant who already completed
        gets ``finished`` (the "you are done" page), never a sign-in."""
        self.throttle(study, key, params, client)
        visitor = self.visitor(study, key, params, client)
        collection = self.collection(study, key)
        person = self.store.key_hash(visitor.key)
        known = self.store.participant_by_key(collection.info.id, visitor.key)
        if known is not None and known.status == COMPLETE:  # an old link: "you are done", no sign-in
            return Entered(study, key, known, "", self._finished(study, key, collection, known))
        config, _ = self.config(study, key)
        onboarding = onboarding_of(config, key)
        if known is None and onboarding is not None:
            self._refuse_excluded(collection, visitor.key)  # before they spend time on onboarding
            state = self.store.onboarding_state(collection.info.id, person)
            if state is None or state.status != PASSED:  # onboarding first: nothing is claimed
                if state is None:
                    state = self.store.onboarding_start(collection.info.id, person, visitor.source, visitor.session_id)
                data = {"c": collection.info.id, "h": person, "src": visitor.source}
                if visitor.session_id:  # their own submission id: where a screen-out is paid (signed)
                    data["s"] = visitor.session_id
                cookie = self.cookies.dumps(data)
                return Entered(study, key, None, cookie, onboarding=state)
        with self._person_locks[int(person[:8], 16) % len(self._person_locks)]:  # two tabs: one claim
            result = self._claim(collection, visitor.key, visitor.source)
        participant = self._claimed(result)
        if participant.status == COMPLETE:  # finished between the look-up and the claim
            return Entered(study, key, participant, "", self._finished(study, key, collection, participant))
        if visitor.session_id and participant.session_hash != self.store.key_hash(visitor.session_id):
            self.store.record_session(collection.info.id, participant.id, visitor.session_id)
        self.store.log_event(collection.info.id, "entered", participant.id, source=visitor.source,
                             new=isinstance(result, Claimed) and result.new)
        cookie = self.cookies.dumps({"c": collection.info.id, "u": participant.username})
        return Entered(study, key, participant, cookie)

    def _claim(self, collection: Collection, key: str, source: str, key_hash: str | None = None) -> Any:
        try:
            return collection.claim(key, source, refill=True, key_hash=key_hash)
        except Refusal:
            raise
        except (CrowdprefError, httpx.TransportError) as exc:  # Argilla down, or dropped the connection
            raise _unavailable(f"claim failed: {_one_line(exc)}", "Something went wrong while preparing your "
                               "work. Please wait a minute and open the link again.") from exc

    def _refuse_excluded(self, collection: Collection, key: str) -> None:
        """Study 2 refuses who took part in study 1: said before onboarding, not after it."""
        if collection.spec.exclude_from is None:
            return
        other = self.store.find_collection(collection.spec.study_name, collection.spec.exclude_from)
        if other is not None and self.store.participant_by_key(other.id, key) is not None:
            raise Refusal(403, "Not eligible", "You took part in the first part of this project, so you cannot "
                          "take part in this one. " + RETURN_WORDING)

    def _claimed(self, result: Any) -> ParticipantState:
        """The participant a claim gave work to, or the Refusal that says why not."""
        if isinstance(result, Full):
            raise Refusal(409, "Study full", "Sorry: all the work in this study is taken right now. " + RETURN_WORDING)
        if isinstance(result, Refused):
            if result.reason == "excluded":
                raise Refusal(403, "Not eligible", "You took part in the first part of this project, so you cannot "
                              "take part in this one. " + RETURN_WORDING)
            raise Refusal(410, "Place given back", "Your place in this study was given back (the study was returned, "
                          "timed out, or inactive for too long), so it cannot continue. " + RETURN_WORDING)
        assert isinstance(result, Claimed)
        return result.participant

    def throttle(self, study: str, key: str, params: Mapping[str, str], client: str | None = None) -> None:
        """The entry limits, checked BEFORE any Prolific call, study look-up or allocation:
        the whole portal (``GLOBAL_ENTRIES`` per ``GLOBAL_WINDOW_S``, and ``GLOBAL_FAILURES``
        entries Prolific did not confirm), the client address (``ADDRESS_ENTRIES`` per
        ``ADDRESS_WINDOW_S``; ``ADDRESS_FAILURES`` unconfirmed per ``FAILURE_WINDOW_S``; not
        for a loopback address) and the person (``ENTRIES_PER_WINDOW`` per ``ENTRY_WINDOW_S``
        for one Prolific id or invitation). 429 when one is used up. Memory: each limiter
        keeps at most ``LIMITER_MAX_KEYS`` keys."""
        now = self.clock()
        ident = params.get("PROLIFIC_PID") or params.get("invite") or ""
        person = hashlib.sha256(f"{study}\x1f{key}\x1f{ident.lower()}".encode()).hexdigest()[:32]
        address = _limited_address(client)
        with self._lock:
            if self.limits["global_failures"].full("*", now) or (
                    address is not None and self.limits["address_failures"].full(address, now)):
                raise Refusal(429, "Too many requests", "Too many links that Prolific does not confirm were opened "
                              "from here. Please wait a few minutes, then open the study from Prolific again.")
            if self.limits["global"].full("*", now) or (
                    address is not None and self.limits["address"].full(address, now)):
                raise Refusal(429, "Too many requests", "The study is very busy right now. Please wait a minute, "
                              "then open the link again.")
            if not self.limits["person"].take(person, now):
                raise Refusal(429, "Too many requests", "You opened this link many times in a few seconds. "
                              "Please wait a moment, then open it once.")
            self.limits["global"].add("*", now)
            if address is not None:
                self.limits["address"].add(address, now)

    def _failed(self, client: str | None) -> None:
        """An entry Prolific did not confirm: it counts against the address and the portal."""
        now = self.clock()
        address = _limited_address(client)
        with self._lock:
            self.limits["global_failures"].add("*", now)
            if address is not None:
                self.limits["address_failures"].add(address, now)

    # returning visitors (the signed cookie) --------------------------------------------------------
    def _cookie(self, collection: Collection, cookie: str | None, kept: str) -> dict[str, Any]:
        """The portal's signed cookie for ``collection``, or 401 (not ours, expired - a
        SignatureExpired is a BadSignature after COOKIE_MAX_AGE_S -, or another study's)."""
        try:
            data = self.cookies.loads(cookie or "", max_age=COOKIE_MAX_AGE_S)
        except BadSignature:
            raise Refusal(401, "Please start from your study link",
                          "We do not recognise this browser. Please open the study from Prolific (or your "
                          f"invitation) again: {kept}.") from None
        if not isinstance(data, dict) or data.get("c") != collection.info.id:
            raise Refusal(401, "Please start from your study link",
                          "This browser belongs to another study. Please open the study from its link again.")
        return data

    def participant(self, study: str, key: Key, cookie: str | None) -> tuple[Collection, ParticipantState]:
        collection = self.collection(study, key)
        data = self._cookie(collection, cookie, "your work is kept")
        if "u" not in data:  # still in onboarding: nothing claimed yet
            raise InOnboarding("the cookie names a person in onboarding")
        return collection, self.store.participant(collection.info.id, str(data["u"]))

    # onboarding (before the claim; the cookie holds the key hash, never the raw id) ---------------
    def onboarder(self, study: str, key: Key, cookie: str | None) -> Onboarder:
        """The person in onboarding the cookie names. :class:`Onboarded` when the cookie is a
        participant's (they claimed already: the welcome page is theirs)."""
        collection = self.collection(study, key)
        data = self._cookie(collection, cookie, "where you were is kept")
        if "u" in data:
            raise Onboarded("the cookie names a participant who claimed their work")
        config, _ = self.config(study, key)
        onboarding = onboarding_of(config, key)
        if onboarding is None:  # switched off meanwhile: the entry link claims as before
            raise Refusal(409, "Please start from your study link",
                          "Please open the study from its link again to get your work.")
        person, source = str(data["h"]), str(data.get("src", ""))
        state = self.store.onboarding_state(collection.info.id, person)
        if state is None:
            state = self.store.onboarding_start(collection.info.id, person, source)
        session = data.get("s")
        if not (isinstance(session, str) and state.session_hash == self.store.key_hash(session)):
            session = None  # only the session the entry verified (and the store recorded, hashed)
        return Onboarder(collection, config, onboarding, person, source, state, session)

    def onboarding_next(self, study: str, key: Key, cookie: str | None) -> Onboarder:
        """The person goes on from the step they are at (introduction -> practice -> quiz; the
        last step without a quiz passes them)."""
        ob = self.onboarder(study, key, cookie)
        state = ob.state
        if state.status != "in_progress":
            return ob
        after = {"introduction": ["practice", "quiz", "done"], "practice": ["quiz", "done"]}.get(state.step, [])
        if state.step == "practice" and state.practice_answered < len(ob.onboarding.practice):
            return ob  # practice first (each question once)
        has = {"practice": bool(ob.onboarding.practice), "quiz": ob.onboarding.quiz is not None, "done": True}
        following = next((step for step in after if has[step]), None)
        if following is None:
            return ob
        state = self.store.onboarding_step(ob.collection.info.id, ob.key_hash, following)
        return replace(ob, state=state)

    def onboarding_practice(self, study: str, key: Key, cookie: str | None, index: int,
                            choice: int | None) -> tuple[Onboarder, PracticeAnswer]:
        """One practice answer, graded at once and recorded (never counted towards the study)."""
        ob = self.onboarder(study, key, cookie)
        items = ob.onboarding.practice
        if not 0 <= index < len(items):
            raise Refusal(400, "Question not found", "This practice question does not exist. Please go back and "
                          "answer the question shown.")
        correct = choice == items[index].answer
        state = ob.state
        if state.status == "in_progress":
            state = self.store.onboarding_practice(ob.collection.info.id, ob.key_hash, index, correct)
        return replace(ob, state=state), PracticeAnswer(index, choice, correct)

    def onboarding_quiz(self, study: str, key: Key, cookie: str | None,
                        answers: list[int | None]) -> tuple[Onboarder, QuizResult | None]:
        """Grade one quiz attempt and record it (one transaction: two tabs cannot use more
        attempts than the study allows). None: no attempt counted (they already passed, were
        screened out, or have no quiz); the Onboarder's state says where they are."""
        ob = self.onboarder(study, key, cookie)
        quiz = ob.onboarding.quiz
        if quiz is None or ob.state.status != "in_progress" or ob.state.step != "quiz":
            return ob, None
        graded = grade(quiz.items, answers[: len(quiz.items)])
        passed = passes(quiz, graded)
        try:
            state = self.store.onboarding_attempt(ob.collection.info.id, ob.key_hash, graded.score, passed,
                                                  quiz.attempts)
        except StoreError:  # used up, or passed, in another tab meanwhile
            state = self.store.onboarding_state(ob.collection.info.id, ob.key_hash) or ob.state
            return replace(ob, state=state), None
        return replace(ob, state=state), QuizResult(graded, passed, state)

    def onboarding_claim(self, study: str, key: Key, ob: Onboarder) -> str:
        """Someone who passed claims their work by their key hash (as at the entry); returns
        the participant's cookie. Refused (nothing claimed) unless they passed."""
        if ob.state.status != PASSED:
            raise Refusal(403, "Onboarding not finished", "Please finish the introduction and the quiz first.")
        collection = ob.collection
        with self._person_locks[int(ob.key_hash[:8], 16) % len(self._person_locks)]:
            result = self._claim(collection, "", ob.source, key_hash=ob.key_hash)
        participant = self._claimed(result)
        if isinstance(result, Claimed) and result.new:
            if ob.state.session_hash and participant.session_hash != ob.state.session_hash:
                # the Prolific session they entered with: webhooks name it (resource_id)
                self.store.record_session(collection.info.id, participant.id, session_hash=ob.state.session_hash)
            self.store.log_event(collection.info.id, "entered", participant.id, source=ob.source, new=True,
                                 onboarding=True)
        return self.cookies.dumps({"c": collection.info.id, "u": participant.username})

    def screened_out(self, study: str, key: Key, ob: Onboarder) -> tuple[str | None, bool]:
        """The screened-out page's way back to Prolific (None with an invitation) and whether
        crowdpref pays the screen-out itself. No code is ever shown: on a Prolific study crowdpref
        recruits on, their submission gets the researcher-actor screen-out code through the API
        (:func:`~crowdpref.recruitment.pay_screen_out`) after this reply, on :attr:`screen_outs`;
        a failure is logged and the Prolific sync pays it instead (it gives the code to every
        submission the store recorded as screened out, the backstop for an older cookie too).
        Without API access (an unverified pilot) nothing is paid automatically."""
        if ob.state.status != SCREENED_OUT or ob.config.participants == "invite":
            return None, False
        target = prolific_target(ob.config, self.settings)
        automatic = target is not None and recruits_on_prolific(ob.config)
        if automatic and ob.session_id:
            job = f"{ob.collection.info.id}:{ob.key_hash}"
            with self._lock:
                self._screen_out_jobs[job] = (ob.config, ob.collection.info.id, ob.key_hash, ob.session_id)
            self.screen_outs.submit(job)
        return (target.app_url if target else self.settings.prolific_app_url).rstrip("/") + "/", automatic

    def pay_screen_out(self, job: str) -> bool:
        """Run one screen-out payment :meth:`screened_out` queued (once per person: not again when
        the store records it paid). Never raises: a failure is logged (no ids) and left to the
        sync. True when it was paid now."""
        from crowdpref.recruitment import SCREEN_OUT_PAID, pay_screen_out

        with self._lock:
            queued = self._screen_out_jobs.pop(job, None)
        if queued is None:
            return False
        config, cid, person, session = queued
        try:
            if any(json.loads(e["detail"] or "{}").get("person") == person
                   for e in self.store.events(cid, kinds=[SCREEN_OUT_PAID])):
                return False
            client = self.prolific(config)
            if client is None:
                return False
            pay_screen_out(self.store, cid, client, session, person, via="portal")
            return True
        except Exception as exc:  # noqa: BLE001 - the sync pays it; the person's page is already shown
            log.warning("screen-out payment not made now (%s): the Prolific sync makes it", type(exc).__name__)
            return False

    @property
    def token_sign_in(self) -> bool:
        """Whether *Start* hands the browser a minted Argilla session (:meth:`sign_in`): the
        portal and Argilla share an origin (the public profile), so a portal page can write
        Argilla's session storage. Else (the laptop stack's two ports) the password sign-in."""
        return argilla_session.same_origin(self.settings.portal_public_url, self.settings.argilla_participant_url)

    def _signing_in(self, study: str, key: Key, cookie: str | None) -> tuple[Collection, ParticipantState]:
        collection, participant = self.participant(study, key, cookie)
        if participant.status == COMPLETE:
            raise AlreadyFinished("the participant completed: no more sign-ins")
        if participant.status not in (ACTIVE, COMPLETE):
            raise Refusal(410, "Place given back", "Your place in this study was given back, so it cannot continue. "
                          + RETURN_WORDING)
        return collection, participant

    def sign_in(self, study: str, key: Key, cookie: str | None) -> str | TokenSignIn:
        """Where *Start* sends the participant: with :attr:`token_sign_in`, a :class:`TokenSignIn`
        (an Argilla session token minted with Argilla's signing key - no bcrypt, no password in
        any URL) that opens the work frame; else the work frame's address, whose frame signs in
        with the password (:meth:`work`). :class:`AlreadyFinished` once they completed."""
        if not self.token_sign_in:
            self._signing_in(study, key, cookie)
            return work_path(study, key)
        _, participant = self._signing_in(study, key, cookie)
        token, expires = self._mint(participant)
        return TokenSignIn(token, expires, work_path(study, key))

    def _mint(self, participant: ParticipantState) -> tuple[str, int]:
        """An Argilla session for the participant, signed with Argilla's key (read once)."""
        if self._argilla_secret is None:
            try:
                self._argilla_secret = argilla_session.load_secret(self.settings.secrets_dir)
            except CrowdprefError as exc:
                raise _unavailable(str(exc), "We cannot open your work right now. Please wait a minute and try "
                                   "again.") from None
        return argilla_session.mint_token(self._argilla_secret, participant.username, now=self.clock())

    def _first_item_url(self, participant: ParticipantState) -> str:
        """Argilla's page of the participant's first pending item (their dataset's annotation
        mode, :func:`first_item_path`), or Argilla's home when no dataset is known yet."""
        base = self.settings.argilla_participant_url
        return f"{base}{first_item_path(participant.dataset_id)}" if participant.dataset_id else f"{base}/"

    def work(self, study: str, key: Key, cookie: str | None) -> WorkFrame:
        """The work frame: the portal's bar (progress, the way to the finish page) over Argilla.
        Its frame opens the participant's first item: where the browser holds the session
        :meth:`sign_in` minted (one origin: the public profile), directly; on two origins (the
        laptop stack) through Argilla's session hand-over page with a session minted here
        (:func:`~crowdpref.portal.argilla_session.handover_url`), where Argilla serves it
        (``settings.argilla_serves_handover``); else the one-hop password sign-in
        (:meth:`_password_sign_in`), which lands on Argilla's home. :class:`AlreadyFinished` once
        they completed."""
        collection, participant = self._signing_in(study, key, cookie)
        if self.token_sign_in:
            target = self._first_item_url(participant)
        elif self.settings.argilla_serves_handover and participant.dataset_id:
            token, expires = self._mint(participant)
            target = argilla_session.handover_url(self.settings.argilla_participant_url, token, expires,
                                                  first_item_path(participant.dataset_id))
        else:
            target = self._password_sign_in(collection, participant)
        return WorkFrame(target, len(participant.submitted), len(participant.assignments))

    def progress(self, study: str, key: Key, cookie: str | None) -> Progress:
        """What the work frame's bar shows. From the store, which Argilla's response webhooks
        keep current; where this portal receives none (no webhook registered with the Argilla it
        uses), read from Argilla, at most once per :data:`PROGRESS_READ_S` per participant."""
        collection, participant = self.participant(study, key, cookie)
        if participant.status == ACTIVE and not collection.webhooks_active():
            with self._progress_lock:
                due = self._progress_reads.take(participant.username, time.monotonic())
            if due:
                try:
                    participant = collection.refresh(participant)
                except (CrowdprefError, httpx.TransportError) as exc:  # the bar keeps what the store knows
                    log.warning("Argilla read for the work frame failed: %s", _one_line(exc))
        return Progress(len(participant.submitted), len(participant.assignments), participant.status == COMPLETE,
                        given_back=participant.status not in (ACTIVE, COMPLETE))

    def _password_sign_in(self, collection: Collection, participant: ParticipantState) -> str:
        """Argilla's sign-in page with the participant's credentials (the laptop stack's work
        frame opens it; never logged)."""
        password = collection.store.password(participant.account_id)
        auth = base64.b64encode(f"{participant.username}:{password}".encode()).decode()
        return f"{self.settings.argilla_participant_url}/sign-in?auth={auth}"

    def finish(self, study: str, key: Key, cookie: str | None) -> Finish:
        """Check with Argilla that every item is submitted; then the completion code."""
        collection, participant = self.participant(study, key, cookie)
        if participant.status not in (ACTIVE, COMPLETE):
            if released_by_crowdpref(participant) and participant.withdrawn_at is None:
                # our own release (inactivity, the operator's drop): nothing they did wrong
                raise Refusal(410, "Please return the study", "Your work in this study was given to someone else "
                              "(after a long time without activity, or by the researchers), so it cannot be completed "
                              "any more. This is not held against you and the study will not be rejected. "
                              + RETURN_WORDING)
            raise Refusal(410, "Place given back", "Your place in this study was given back, so it cannot be "
                          "completed. " + RETURN_WORDING)
        try:
            participant = collection.refresh(participant)
        except (CrowdprefError, httpx.TransportError) as exc:
            raise _unavailable(f"Argilla read failed on the finish page: {_one_line(exc)}",
                               "We cannot check your answers right now. Please wait a minute and reload this page.") from exc
        total = len(participant.assignments)
        submitted = len(participant.submitted)
        if participant.status != COMPLETE:
            return Finish(False, submitted, total, argilla_url=self._first_item_url(participant))
        return self._finished(study, key, collection, participant)

    def _finished(self, study: str, key: Key, collection: Collection, participant: ParticipantState) -> Finish:
        """The page of a participant who completed: their completion code and the way back to
        Prolific (an invite study: no way back)."""
        total, submitted = len(participant.assignments), len(participant.submitted)
        config, _ = self.config(study, key)
        code: str | None = self.store.completion_code(collection.info.id)
        completion = None
        if config.participants == "invite":  # an invitation needs no code: thanks, and what happens next
            code = None
        else:
            target = prolific_target(config, self.settings)
            completion = links.completion_url(self.settings, code, target.app_url if target else None)
        if not any(e["participant_id"] == participant.id for e in
                   self.store.events(collection.info.id, kinds=["completion_shown"])):
            self.store.log_event(collection.info.id, "completion_shown", participant.id)
        return Finish(True, submitted, total, code=code, completion_url=completion)

    def welcome(self, study: str, key: Key, cookie: str | None) -> tuple[StudyConfig, ParticipantState]:
        _, participant = self.participant(study, key, cookie)
        config, _ = self.config(study, key)
        return config, participant

    def invite_link(self, study: str, key: Key, invite_id: str) -> str:
        """A signed invitation link for one participant (``participants: invite`` studies)."""
        token = self.invites.dumps({"study": study, "key": key, "id": invite_id})
        return f"{links.entry_url(self.settings, study, key)}?invite={token}"

    # Prolific webhooks -------------------------------------------------------------------------------
    def prolific_webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify, de-duplicate and record one Prolific webhook; returns (HTTP status, reply) at
        once. De-duplicated on its ``X-Event-ID`` and on the hash of what it signed
        (:func:`~crowdpref.prolific.verify_webhook`): a retry, or a replay of the same signed
        body under a new id, is answered ``duplicate`` and changes nothing. A status that frees
        the participant's place (RETURNED, TIMED-OUT, REJECTED) is recorded as ``pending`` with
        the participant, in the same row that de-duplicates the
        delivery, and their work is released after the reply (:meth:`run_delivery`, on
        :attr:`after_reply`); a portal that dies first runs it when it starts again
        (:meth:`resume_deliveries`). One store transaction (:meth:`Store.record_status_delivery`:
        the participant found, the delivery and its event written), no Argilla call."""
        from crowdpref.prolific import WebhookRejected, verify_webhook

        secret = self._webhook_secret()
        if secret is None:
            log.warning("503: Prolific webhook refused: no webhook secret configured (run `crowdpref prolific-webhooks`)")
            return 503, {"error": "no webhook secret configured: run `crowdpref prolific-webhooks`"}
        try:
            try:
                verified = verify_webhook(secret, headers, body, now=self.clock())
            except WebhookRejected as exc:
                fresh = self._webhook_secret(again=True)  # a secret replaced since it was read
                if exc.status != 401 or fresh in (None, secret):
                    raise
                verified = verify_webhook(fresh, headers, body, now=self.clock())
        except WebhookRejected as exc:
            return exc.status, {"error": exc.reason}
        event_id, signed = verified.event_id, verified.signed_hash
        if verified.id_missing:
            log.warning("Prolific webhook without an X-Event-ID: de-duplicated on a hash of its timestamp and body")
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            return 400, {"error": "body is not a JSON object"}
        kind = str(payload.get("event_type") or "submission.status.change")
        if kind != "submission.status.change":
            if not self.store.record_delivery(event_id, "prolific", kind, "ignored", signed_hash=signed):
                return 200, {"duplicate": True}
            return 200, {"outcome": "ignored"}
        session, person = payload.get("resource_id"), payload.get("participant_id")
        recorded = self.store.record_status_delivery(
            event_id, "prolific", kind, str(payload.get("status", "")).upper(), freeing=FREEING,
            session_id=session if isinstance(session, str) and session else None,
            key=person if isinstance(person, str) else None, signed_hash=signed)
        if recorded is None:  # recorded before (by its event id, or its signed content under another
            return 200, {"duplicate": True}  # id), or by a concurrent request
        if recorded.pending:
            self.after_reply.submit(event_id)
        return 200, {"outcome": recorded.outcome}

    def _webhook_secret(self, again: bool = False) -> str | None:
        """Prolific's webhook secret from the store, read once per :data:`SECRET_READ_S` (``again``:
        now - a signature that fails with the secret held may be signed with a new one)."""
        now = time.monotonic()
        held = self._secret_read
        if again or held is None or held[1] is None or now - held[0] >= SECRET_READ_S:  # none yet: ask again
            held = self._secret_read = (now, self.store.get_meta(WEBHOOK_SECRET))
        return held[1]

    def run_delivery(self, event_id: str) -> str | None:
        """Do the work a pending delivery asks for - release the participant's unsubmitted work
        (or withdraw them when they had completed) - and mark it done; None when it was done
        already. A release that began and did not finish (the participant left ``releasing``)
        is finished."""
        pending = self.store.pending_delivery(event_id)
        if pending is None:
            return None
        info, participant, status = pending
        outcome = self._free(info, participant, status)
        self.store.finish_delivery(event_id, outcome)
        log.info("Prolific webhook handled after its reply: %s", outcome)
        return outcome

    def resume_deliveries(self) -> int:
        """At start-up: run again the work of every delivery a portal replied to and did not
        finish (it died, or was stopped). Returns how many were submitted."""
        pending = self.store.pending_deliveries("prolific")
        if pending:
            log.info("%d Prolific webhook(s) replied to before the portal stopped: finishing their work", len(pending))
        return sum(self.after_reply.submit(event_id) for event_id in pending)

    def _free(self, info: Any, participant: ParticipantState, status: str) -> str:
        if participant.status == COMPLETE:  # finished, then returned / rejected / timed out: they withdrew
            from crowdpref.withdrawals import withdraw_on_platform

            try:
                target: Any = self.collection(info.study, info.key)
            except Refusal:
                target = self.store  # (their records stay in Argilla: `crowdpref withdraw` deletes them)
            try:
                done = withdraw_on_platform(target, participant, status, info, via=" (webhook)")
            except CrowdprefError:
                return f"{status}: withdrawal failed; `crowdpref withdraw` or the next sync repeats it"
            return f"{status}: {'withdrawn' if done and done.now else 'already withdrawn'}"
        if participant.status not in (ACTIVE, RELEASING):
            return f"{status}: nothing held"
        try:
            collection = self.collection(info.study, info.key)
        except Refusal:
            if participant.status == RELEASING:
                return f"{status}: release begun, the next monitoring pass finishes it"
            self.store.request_drop(info.id, participant.username)
            return f"{status}: drop requested (study config not found here)"
        try:
            if participant.status == RELEASING:  # begun by a portal that died mid-release: finish it
                collection.finish_release(participant)
                return f"{status}: work released"
            released = collection.release(participant, f"{status} on Prolific")
        except CrowdprefError:
            return f"{status}: release begun, the next monitoring pass finishes it"
        return f"{status}: work released" if released else f"{status}: nothing held"

    # Argilla webhooks ---------------------------------------------------------------------------------
    def register_argilla_webhook(self, owner: Any | None = None) -> str:
        """Make Argilla report participants' responses to this portal (``/hooks/argilla``): the
        webhook is found or created on the configured Argilla, its secret kept in the store.
        Idempotent; returns the webhook id."""
        if owner is None:
            from crowdpref.argilla_client import ArgillaOwner

            owner = ArgillaOwner(self.settings.argilla_api_url, self.settings.resolved_argilla_api_key(), timeout_s=10.0)
        return argilla_hooks.register(owner, self.store, argilla_hooks.hook_url(self.settings))

    def stand_down_argilla_webhook(self) -> None:
        """When the portal stops: :func:`argilla_hooks.stand_down` on the configured Argilla.
        Never raises (Argilla may be down already: monitoring polls either way)."""
        from crowdpref.argilla_client import ArgillaOwner

        def disable(webhook_id: str) -> None:
            owner = ArgillaOwner(self.settings.argilla_api_url, self.settings.resolved_argilla_api_key(), timeout_s=5.0)
            try:
                owner.disable_webhook(webhook_id)
            finally:
                owner.close()

        try:
            if argilla_hooks.stand_down(self.store, self.settings.argilla_api_url, disable):
                log.info("Argilla webhook disabled: monitoring polls until the portal starts again")
        except Exception as exc:  # noqa: BLE001 - stopping must not fail
            reason = (str(exc).splitlines() or [exc.__class__.__name__])[0][:200]
            log.warning("Argilla webhook not disabled (%s): monitoring polls anyway", reason)

    def register_argilla_webhook_in_background(self, retry_s: float = 10.0) -> threading.Thread:
        """:meth:`register_argilla_webhook` from a daemon thread, retried until Argilla answers
        (the portal may start before it). Until then monitoring polls, as without webhooks."""
        def run() -> None:
            while True:
                try:
                    self.register_argilla_webhook()
                    log.info("Argilla webhook registered: responses are reported to %s", argilla_hooks.PATH)
                    return
                except CrowdprefError as exc:
                    reason = (str(exc).splitlines() or [exc.__class__.__name__])[0][:200]
                except Exception as exc:  # noqa: BLE001 - keep trying; the portal serves meanwhile
                    reason = exc.__class__.__name__
                log.warning("Argilla webhook not registered yet (%s); retrying in %g s", reason, retry_s)
                time.sleep(retry_s)

        thread = threading.Thread(target=run, name="argilla-webhook", daemon=True)
        thread.start()
        return thread

    def argilla_webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify one of Argilla's response events and record it: the participant is marked as
        having activity (the next monitoring pass reads them from Argilla) and, when it is their
        own submitted answer to an item they hold, the submission counts now. Store writes only,
        no Argilla call. Returns (HTTP status, reply); the reply names no participant."""
        secret = self.store.get_meta(argilla_hooks.SECRET_META)
        if secret is None:
            log.warning("503: Argilla webhook refused: no Argilla webhook is registered for this portal yet")
            return 503, {"error": "no Argilla webhook is registered for this portal"}
        try:
            argilla_hooks.verify(secret, headers, body)
        except argilla_hooks.WebhookRejected as exc:
            return 401, {"error": str(exc)}
        try:
            payload = json.loads(body)
        except ValueError:
            return 400, {"error": "body is not JSON"}
        event = argilla_hooks.parse(payload)
        if event is None:
            return 200, {"outcome": "ignored"}
        named = self.store.note_activity(event.dataset_id, event.workspace)
        if not named:
            return 200, {"outcome": "not a participant's dataset"}
        counted = 0
        for info, participant in named:
            if event.kind == "response.deleted" or participant.status != ACTIVE or event.username != participant.username:
                continue  # someone else's answer in their workspace never counts (the read decides)
            submitted = {}
            if event.status == "submitted" and event.record_external_id in participant.held:
                submitted[event.record_external_id] = event.updated_at or self.clock()
            counted += self.store.record_progress(info.id, participant.id, submitted, event.updated_at)
        return 200, {"outcome": "activity recorded", "counted": counted}


def _prolific_ids(params: Mapping[str, str]) -> tuple[str, str, str]:
    """PROLIFIC_PID, STUDY_ID and SESSION_ID from the entry, checked for form (lower case)."""
    names = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")
    values = [params.get(name, "") for name in names]
    missing = [name for name, value in zip(names, values) if not value]
    if missing:
        raise Refusal(400, "Link incomplete",
                      f"The link is missing {', '.join(missing)}. Please open the study from Prolific again.")
    bad = [name for name, value in zip(names, values) if not PROLIFIC_ID.fullmatch(value)]
    if bad:
        raise Refusal(400, "Link not valid",
                      f"The link's {', '.join(bad)} is not a Prolific id. Please open the study from Prolific again.")
    pid, study_id, session_id = (value.lower() for value in values)
    return pid, study_id, session_id


def _limited_address(client: str | None) -> str | None:
    """The address the per-address limits count, or None: unknown, or a loopback address
    (the simulated crowd; a reverse proxy whose X-Forwarded-For is not trusted would make
    every participant one address, which the global limits cover)."""
    if not client:
        return None
    try:
        if ipaddress.ip_address(client).is_loopback:
            return None
    except ValueError:
        pass
    return client[:64]


def _open_collection(path: Path, key: Key, settings: Any) -> Collection:
    from crowdpref.studies import open_collection

    return open_collection(path, key, settings)


def _prolific_client(target: ProlificTarget) -> Any:
    from crowdpref.prolific import ProlificClient

    return ProlificClient(target.api_url, target.token, timeout_s=10.0, max_attempts=3)
