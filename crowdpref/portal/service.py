"""What the portal does, without the web framework: check who arrives, claim their work, say
where to go, recognise them when they are done, and act on Prolific's and Argilla's webhooks.

:class:`Portal` is the facade the app and the tests use; each of its ideas lives in a module of
its own, composed into it:

- :mod:`~crowdpref.portal.refusal`: :class:`Refusal`, how a request is turned down;
- :mod:`~crowdpref.portal.limits`: the rate limiter and the entry limits (:meth:`Portal.throttle`);
- :mod:`~crowdpref.portal.studies`: the study registry, configs, collections, Prolific clients;
- :mod:`~crowdpref.portal.entry`: arrivals verified and claimed, the signed cookie;
- :mod:`~crowdpref.portal.onboarding`: the onboarding steps, the claim after it, the screen-out;
- :mod:`~crowdpref.portal.session`: the Argilla sign-in (a minted session, :class:`TokenSignIn`);
- :mod:`~crowdpref.portal.work`: the work frame, its progress bar and the finish page;
- :mod:`~crowdpref.portal.webhooks`: Prolific's and Argilla's webhooks;
- :mod:`~crowdpref.portal.after_reply`: the pool that runs a webhook's work after its reply.

Every refusal is a :class:`Refusal` (HTTP status, title, a plain sentence for the person) and
is decided BEFORE anything is allocated. Prolific ids, session ids and passwords never appear
in a message, a log line or an event; the store keeps salted hashes only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from itsdangerous import URLSafeTimedSerializer

from crowdpref.collection import Collection
from crowdpref.config import StudyConfig
from crowdpref.portal.after_reply import AFTER_REPLY_WORKERS, AfterReply
from crowdpref.portal.answer_guard import AnswerGuard
from crowdpref.portal.entry import COOKIE_MAX_AGE_S, Entered, Entry, Visitor
from crowdpref.portal.limits import (
    ADDRESS_FAILURES,
    ENTRIES_PER_WINDOW,
    GLOBAL_FAILURES,
    EntryLimits,
    RateLimiter,
    SubmissionLists,
    entry_limiters,
)
from crowdpref.portal.onboarding import (
    InOnboarding,
    Onboarded,
    Onboarder,
    Onboarding,
    PracticeAnswer,
    QuizResult,
)
from crowdpref.portal.prepare import PREPARE_WORKERS, Preparer
from crowdpref.portal.refusal import Refusal
from crowdpref.portal.session import AlreadyFinished, Sessions, TokenSignIn
from crowdpref.portal.studies import (
    KEYS,
    Key,
    Studies,
    StudyRegistry,
    open_study_collection,
    prolific_client,
)
from crowdpref.portal.webhooks import WEBHOOK_SECRET, ArgillaWebhooks, ProlificWebhooks
from crowdpref.portal.work import PROGRESS_READ_S, Finish, Progress, Work, WorkFrame
from crowdpref.recruitment import ProlificTarget
from crowdpref.store import Store

__all__ = [
    "ADDRESS_FAILURES", "COOKIE_MAX_AGE_S", "ENTRIES_PER_WINDOW", "GLOBAL_FAILURES", "KEYS", "PROGRESS_READ_S",
    "WEBHOOK_SECRET", "AfterReply", "AlreadyFinished", "Entered", "Finish", "InOnboarding", "Key", "Onboarded",
    "Onboarder", "Portal", "PracticeAnswer", "Progress", "QuizResult", "RateLimiter", "Refusal", "TokenSignIn",
    "Visitor", "WorkFrame",
]


class Portal(Studies, EntryLimits, Entry, Onboarding, Sessions, Work, ProlificWebhooks, ArgillaWebhooks,
             AnswerGuard):
    """The portal's logic for one deployment (settings + store). ``after_reply_workers``: the
    threads that release work after a webhook's reply (0: none - the work stays pending in the
    store until a portal with some starts, :meth:`resume_deliveries`)."""

    def __init__(self, settings: Any, store: Store, *, open_collection: Callable[[Path, Key], Collection] | None = None,
                 prolific_factory: Callable[[ProlificTarget], Any] | None = None,
                 clock: Callable[[], float] = time.time, after_reply_workers: int = AFTER_REPLY_WORKERS,
                 prepare_workers: int = PREPARE_WORKERS):
        self.settings = settings
        self.store = store
        self.registry = StudyRegistry(Path(settings.portal_studies))
        self.clock = clock
        self._open_collection = open_collection or (lambda path, key: open_study_collection(path, key, settings))
        self._prolific_factory = prolific_factory or prolific_client
        # per (study, key): the collection, opened for one version (mtime) of the study config
        self._collections: dict[tuple[str, str], tuple[int, Collection]] = {}
        self._configs: dict[Path, tuple[int, StudyConfig]] = {}
        self._known_paths: dict[str, tuple[float, Path | None]] = {}  # study name -> (looked up, path)
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        # two tabs of one person claim one after the other: a fixed set of locks (by hash), so
        # the memory does not grow with the people (or forgers) who arrive
        self._person_locks = [threading.Lock() for _ in range(64)]
        self.limits = entry_limiters()
        self.submission_lists = SubmissionLists()  # past the budget of look-ups: arrivals checked here
        self._prolific_studies: dict[tuple[str, int], str] = {}  # (study, collection id) -> its Prolific study
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
        # claimed participants' workspaces in Argilla, prepared off the request (admission first)
        self.preparer = Preparer(prepare_workers)

    def launch_pacer(self) -> Any:
        """The launch pacer (:class:`crowdpref.pacer.Pacer`) over the studies this portal serves:
        their configs and collections as the portal has them, its Prolific clients."""
        from crowdpref.pacer import Pacer

        return Pacer(self.store, self.settings, config_of=lambda study, key: self.config(study, key)[0],
                     collection_of=self.collection, client_of=self.prolific)
