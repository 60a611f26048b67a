"""The participant portal (FastAPI): where a person arriving from Prolific (or with an invite
link) gets an Argilla account and work from the pool, and their completion code at the end.

Routes (``<study>`` is the study config's name, ``<key>`` ``study1`` or ``study2``):

- ``GET  /s/<study>/<key>?invite=..``: an invitation link (``participants: invite``): the link is
  checked (signature, age, not revoked) and a page with one button is shown (or, once its person
  completed, "you are done"); NOTHING is claimed, so a mail or chat previewer that fetches the
  link takes no place. The button posts to
- ``POST /s/<study>/<key>?invite=..``: the entry below, on the person's press.
- ``GET  /s/<study>/<key>?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..`` (an invitation: its POST): check
  the ids (with Prolific: the submission must name this person and this study), refuse the
  excluded, claim the work in the store (the same work when they come back; their workspace in
  Argilla is prepared off the request, :mod:`crowdpref.portal.prepare`), set a signed cookie and send
  them to the welcome page (or the onboarding) - a clean URL, so their ids leave the address bar
  after one hop; someone who already completed gets the "you are done" page (with their code).
- ``GET  /s/<study>/<key>/onboarding`` (when the study has an ``onboarding:`` section and the
  person has claimed nothing yet; the cookie then holds their key hash, never the raw id): the
  step they are at - the introduction with worked examples, a practice question, the quiz, the
  screened-out page - so someone who comes back resumes there. ``POST .../onboarding/next``
  goes on from the introduction or the practice; ``POST .../onboarding/practice`` answers one
  practice question (feedback at once, never counted); ``POST .../onboarding/quiz`` is one quiz
  attempt: a pass claims their work and goes on to the welcome page, a fail says what was wrong
  (try again) or, on the last attempt, screens them out (on Prolific: the screen-out code).
- ``GET  /s/<study>/<key>/welcome``: the guidelines and what to expect; *Start* posts to
- ``POST /s/<study>/<key>/start`` (and ``GET``, where the waiting page reloads): while their
  workspace in Argilla is not ready (waited for at most ``START_WAIT_S``), a page that says so
  and reloads itself (a meta refresh; 200); then a page that stores an Argilla session minted
  for them on the origin the portal and Argilla share (no password, no bcrypt; the token is in
  this POST's answer, never in a URL) and goes on to the work frame
  (:mod:`crowdpref.portal.argilla_session`); once they completed, 303 to the finish page.
- ``GET  /s/<study>/<key>/work``: the work frame: the portal's bar (their progress, the way to
  the finish page) over Argilla in a frame, which opens their first item (no-store); once they
  completed, 303 to the finish page; while their workspace is not ready, 303 to ``/start`` (the
  waiting page).
- ``GET  /s/<study>/<key>/progress``: what the bar shows, as JSON (``submitted``, ``total``,
  ``done``, ``given_back``): from the store, which Argilla's webhooks keep current; without
  them, read from Argilla at most once per 10 s per person.
- ``GET  /s/<study>/<key>/done``: checks with Argilla that every item is submitted (at most
  ``FINISH_WAIT_S``; then, or on an Argilla error, a 503 page that reloads itself); then, on
  Prolific, the completion code and the way back; with an invitation, thanks and what happens
  next (no code: it would be of no use); else how many are left.
- ``POST /hooks/prolific``: Prolific's webhooks (signed over the raw body or its documented
  ``json.dumps`` form; de-duplicated on ``X-Event-ID`` and on the signed content), answered at once; a
  RETURNED, TIMED-OUT or REJECTED submission is recorded as pending and its unfinished work goes
  back to the pool right after the reply (what a portal that died left pending runs again when
  it starts).
- ``POST /hooks/argilla``: Argilla's response events (Standard Webhooks signatures, 401 when
  bad): the participant's activity - and their submitted answer - reach the store at once, and
  monitoring reads from Argilla only whom activity names (the portal registers the webhook when
  it starts and disables it when it stops, :mod:`crowdpref.portal.argilla_hooks`).
- ``GET  /guard/answer-change``: what Caddy asks before it forwards a change to an answer in
  Argilla from outside (the public profile): 204 for the Argilla session of a participant still
  working, else 403 (:mod:`crowdpref.portal.answer_guard`). Caddy never routes it from outside.
- ``GET  /healthz``; ``GET  /``: a page saying to open the study from the link given.

Nothing logs query strings: uvicorn's access log is off and :class:`PathOnlyLog` writes the
method, path and status only.

Limits: a request body over ``MAX_BODY_BYTES`` (64 KiB; ``/hooks/argilla``:
``ARGILLA_HOOK_MAX_BODY_BYTES``, 1 MiB - its events carry the record and the dataset's
settings) gets 413 before it is read - from its Content-Length, or, without one (chunked), as
soon as the bytes received pass the limit (:class:`BodyLimit`). The portal's cookie lasts
``COOKIE_MAX_AGE_S`` (24 h). The client address the entry limits count is the connection's
peer, or - when that peer is a trusted reverse proxy (``portal_trusted_proxies``; unset, in the
public profile, the stack's own Caddy on HOST: :func:`trusted_proxies`) - the last address in
X-Forwarded-For (the one the proxy added).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from crowdpref.portal import argilla_session, links, pages
from crowdpref.portal.answer_guard import GUARD_PATH
from crowdpref.portal.prepare import (
    ENTRY_WAIT_S,
    FAILING_RETRY_S,
    START_WAIT_S,
    WAITING_REFRESH_S,
    NotReady,
    failing,
    wait_ready,
)
from crowdpref.portal.service import (
    COOKIE_MAX_AGE_S,
    KEYS,
    AlreadyFinished,
    InOnboarding,
    Onboarded,
    Onboarder,
    Portal,
    Refusal,
    TokenSignIn,
)

log = logging.getLogger("crowdpref.portal")
NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}
MAX_BODY_BYTES = 64 * 1024  # any request body (Prolific's webhooks are a few hundred bytes)
ARGILLA_HOOK_MAX_BODY_BYTES = 1024 * 1024  # Argilla's response events carry the record and dataset settings
BODY_LIMITS = {"/hooks/argilla": ARGILLA_HOOK_MAX_BODY_BYTES}
FINISH_WAIT_S = 10.0  # the finish page's check with Argilla: then a page that tries again by itself


class BodyLimit:
    """ASGI middleware: a request body over its limit gets 413 without being read - refused
    from its Content-Length, or (chunked, no Content-Length) as soon as the bytes received pass
    the limit; the body the app reads is at most the limit, so memory per request is bounded."""

    def __init__(self, app: Any, default: int = MAX_BODY_BYTES, limits: dict[str, int] | None = None):
        self.app, self.default, self.limits = app, default, dict(BODY_LIMITS if limits is None else limits)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        length = headers.get(b"content-length")
        if scope["method"] in ("GET", "HEAD") and length is None and b"transfer-encoding" not in headers:
            return await self.app(scope, receive, send)
        limit = self.limits.get(scope["path"], self.default)
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return await self._refuse(scope, send, 400, "bad Content-Length")
            if declared > limit:
                return await self._refuse(scope, send, 413, f"request body over {limit} bytes")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                return await self._refuse(scope, send, 413, f"request body over {limit} bytes")
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope: dict[str, Any], send: Any, status: int, reason: str) -> None:
        log.warning("%s %s %d (%s)", scope["method"], scope["path"], status, reason)
        response = JSONResponse({"error": reason}, status_code=status, headers={"Connection": "close"})
        await response(scope, _nothing, send)


class PathOnlyLog:
    """ASGI middleware: one log line per request - method, path (never the query string),
    status and the app's time. A plain ASGI layer: no task and no response object per request
    (Starlette's ``@app.middleware("http")`` costs both on every webhook and page)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [0]

        async def noting_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            log.info("%s %s %s %.0f ms", scope["method"], scope["path"], status[0] or 500,
                     (time.perf_counter() - started) * 1000)


async def _nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def client_address(request: Request, trusted_proxies: frozenset[str] = frozenset()) -> str | None:
    """Who the entry limits count: the connection's peer, or, when the peer is one of the
    ``trusted_proxies``, the last X-Forwarded-For address (the proxy appends the peer it saw;
    earlier ones the client may have forged)."""
    peer = request.client.host if request.client else None
    if peer is not None and peer in trusted_proxies:
        forwarded = [part.strip() for part in request.headers.get("x-forwarded-for", "").split(",") if part.strip()]
        if forwarded:
            return forwarded[-1]
    return peer


def trusted_proxies(settings: Any) -> frozenset[str]:
    """The reverse proxies whose X-Forwarded-For :func:`client_address` believes: the
    ``portal_trusted_proxies`` setting; unset, in the public profile (``public_url``), the
    stack's own Caddy, which reaches the portal from HOST (127.0.0.1 and ::1 when HOST is every
    address); else none."""
    configured = getattr(settings, "portal_trusted_proxies", None)
    if configured:
        return frozenset(p.strip() for p in configured.split(",") if p.strip())
    if getattr(settings, "public_url", None):
        host = settings.host
        return frozenset({"127.0.0.1", "::1"}) if host in ("0.0.0.0", "::", "") else frozenset({host})
    return frozenset()


def cookie_name(study: str, key: str) -> str:
    return f"crowdpref-{study}-{key}"


def create_app(portal: Portal, *, argilla_webhook: bool = False, launch_pacer: bool = False) -> FastAPI:
    """The portal's web app. ``argilla_webhook``: register Argilla's response webhook when the
    app starts (in the background: Argilla may start later) and disable it when it stops (on
    SIGTERM, before the process ends), so monitoring polls while nobody receives deliveries.
    When it starts, the work of Prolific webhooks replied to but not finished (the portal died
    or stopped first) runs again; when it stops, work not begun stays pending in the store.
    ``launch_pacer``: run the launch pacer (:mod:`crowdpref.pacer`) on a thread while the app
    serves, so paced Prolific launches open their next step as their people arrive."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if argilla_webhook:
            portal.register_argilla_webhook_in_background()
        try:
            await asyncio.to_thread(portal.resume_deliveries)
        except Exception as exc:  # noqa: BLE001 - serve anyway: the Prolific sync is the backstop
            log.warning("pending webhook work not resumed (%s)", exc.__class__.__name__)
        pacer = portal.launch_pacer() if launch_pacer else None
        if pacer is not None:
            pacer.start()
        yield
        if pacer is not None:
            await asyncio.to_thread(pacer.stop)
        portal.after_reply.stop()
        portal.screen_outs.stop()
        portal.preparer.close()  # workspaces not begun: the next entry, Start or monitoring pass prepares them
        if argilla_webhook:
            await asyncio.to_thread(portal.stand_down_argilla_webhook)

    app = FastAPI(title="crowdpref portal", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.portal = portal
    secure = portal.settings.portal_public_url.startswith("https://")
    proxies = trusted_proxies(portal.settings)

    @app.exception_handler(InOnboarding)
    async def _in_onboarding(request: Request, exc: InOnboarding) -> Response:
        study, key = request.path_params.get("study", ""), request.path_params.get("key", "")
        return RedirectResponse(f"/s/{study}/{key}/onboarding", status_code=303, headers=NO_STORE)

    @app.exception_handler(Onboarded)
    async def _onboarded(request: Request, exc: Onboarded) -> Response:
        study, key = request.path_params.get("study", ""), request.path_params.get("key", "")
        return RedirectResponse(f"/s/{study}/{key}/welcome", status_code=303, headers=NO_STORE)

    def with_cookie(response: Response, study: str, key: str, cookie: str) -> Response:
        response.set_cookie(cookie_name(study, key), cookie, path=f"/s/{study}/{key}", httponly=True,
                            samesite="lax", secure=secure, max_age=COOKIE_MAX_AGE_S)
        return response

    @app.exception_handler(Refusal)
    async def _refusal(request: Request, exc: Refusal) -> HTMLResponse:
        headers = NO_STORE if exc.retry_after is None else {
            **NO_STORE, "Retry-After": str(exc.retry_after), "Refresh": str(exc.retry_after)}  # reloads itself
        return HTMLResponse(pages.message(exc.title, str(exc)), status_code=exc.status, headers=headers)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(pages.message("crowdpref", "Please open the study from the link you were given."),
                            headers=NO_STORE)

    @app.get("/s/{study}/{key}")
    async def enter(study: str, key: str, request: Request) -> Response:
        invited = await run_in_threadpool(portal.invitation, study, _key(key), dict(request.query_params))
        if invited is None:
            return await entry(study, key, request)
        title, finished = invited  # an invitation: a page; only its button (the POST below) claims
        if finished:
            return HTMLResponse(pages.already_done(None, None), headers=NO_STORE)
        return HTMLResponse(pages.invitation(title, f"/s/{study}/{key}?{request.url.query}"), headers=NO_STORE)

    @app.post("/s/{study}/{key}")
    async def accept(study: str, key: str, request: Request) -> Response:
        """The invitation page's button (any study's entry may be posted: it is the same entry)."""
        return await entry(study, key, request)

    async def entry(study: str, key: str, request: Request) -> Response:
        """Admission first: the claim is in the store when ``portal.enter`` returns; their
        workspace in Argilla is prepared off the request, and the answer waits for it at most
        ENTRY_WAIT_S (without holding a thread), ready or not."""
        entered = await run_in_threadpool(lambda: portal.enter(
            study, _key(key), dict(request.query_params), client=client_address(request, proxies),
            cookie=request.cookies.get(cookie_name(study, key))))
        if entered.preparing is not None and not portal.preparer.busy():  # a burst: no wait at all
            await wait_ready(entered.preparing, ENTRY_WAIT_S)
        if entered.finished is not None:  # they completed: "you are done" (and their code), no sign-in
            done = entered.finished
            return HTMLResponse(pages.already_done(done.code if done.completion_url else None, done.completion_url),
                                headers=NO_STORE)
        where = "onboarding" if entered.onboarding is not None else "welcome"
        return with_cookie(RedirectResponse(f"/s/{study}/{key}/{where}", status_code=303, headers=NO_STORE),
                           study, key, entered.cookie)

    def onboarding_page(study: str, key: str, ob: Onboarder) -> Response:
        """The page of the step the person is at (what a reload or a return shows)."""
        base = f"/s/{study}/{key}/onboarding"
        state, onboarding = ob.state, ob.onboarding
        title = ob.config.title or ob.config.name
        if state.status == "passed":  # passed (maybe in another tab): claim and go on to the work
            cookie = portal.onboarding_claim(study, _key(key), ob)
            return with_cookie(RedirectResponse(f"/s/{study}/{key}/welcome", status_code=303, headers=NO_STORE),
                               study, key, cookie)
        if state.status == "screened_out":
            url, paid = portal.screened_out(study, _key(key), ob)
            return HTMLResponse(pages.screened_out(url, paid), headers=NO_STORE)
        quiz = onboarding.quiz
        if state.step == "introduction":
            return HTMLResponse(pages.onboarding_intro(
                title, onboarding.introduction, onboarding.minutes, _examples(ob), len(onboarding.practice),
                (len(quiz.items), quiz.pass_mark, quiz.attempts) if quiz else None, f"{base}/next"), headers=NO_STORE)
        if state.step == "practice":
            index, total = state.practice_answered, len(onboarding.practice)
            if index < total:
                item = onboarding.practice[index]
                return HTMLResponse(pages.practice_item(title, index, total, item.prompt, list(item.options),
                                                        f"{base}/practice", quiz is not None), headers=NO_STORE)
            return HTMLResponse(pages.practice_done(title, state.practice_answered, state.practice_correct,
                                                    f"{base}/next", "Go to the quiz" if quiz else "Go to the work",
                                                    quiz is not None), headers=NO_STORE)
        assert quiz is not None  # step quiz
        return HTMLResponse(pages.quiz(title, [(i.prompt, list(i.options)) for i in quiz.items], quiz.pass_mark,
                                       state.attempts_used + 1, quiz.attempts, f"{base}/quiz",
                                       bool(onboarding.practice)), headers=NO_STORE)

    @app.get("/s/{study}/{key}/onboarding")
    def onboarding(study: str, key: str, request: Request) -> Response:
        return onboarding_page(study, key, portal.onboarder(study, _key(key), request.cookies.get(cookie_name(study, key))))

    @app.post("/s/{study}/{key}/onboarding/next")
    def onboarding_next(study: str, key: str, request: Request) -> Response:
        portal.onboarding_next(study, _key(key), request.cookies.get(cookie_name(study, key)))
        return RedirectResponse(f"/s/{study}/{key}/onboarding", status_code=303, headers=NO_STORE)

    @app.post("/s/{study}/{key}/onboarding/practice")
    async def onboarding_practice(study: str, key: str, request: Request) -> Response:
        form = _form(await request.body())
        cookie = request.cookies.get(cookie_name(study, key))
        ob, answer = await run_in_threadpool(portal.onboarding_practice, study, _key(key), cookie,
                                             _int(form.get("index")) or 0, _int(form.get("choice")))
        item = ob.onboarding.practice[answer.index]
        base = f"/s/{study}/{key}/onboarding"
        if answer.index + 1 < len(ob.onboarding.practice):  # the onboarding page shows the next question now
            action, label, method = base, "Next practice question", "get"
        else:
            action, label, method = f"{base}/next", "Go to the quiz" if ob.onboarding.quiz else "Go to the work", "post"
        return HTMLResponse(pages.practice_feedback(
            ob.config.title or ob.config.name, answer.index, len(ob.onboarding.practice), item.prompt,
            list(item.options), answer.choice, item.answer, item.explanation, action, label,
            ob.onboarding.quiz is not None, method), headers=NO_STORE)

    @app.post("/s/{study}/{key}/onboarding/quiz")
    async def onboarding_quiz(study: str, key: str, request: Request) -> Response:
        form = _form(await request.body())
        cookie = request.cookies.get(cookie_name(study, key))
        answers = [_int(form.get(f"q{i}")) for i in range(64)]
        while answers and answers[-1] is None:
            answers.pop()
        ob, result = await run_in_threadpool(portal.onboarding_quiz, study, _key(key), cookie, answers)
        if result is None or result.passed or ob.state.status == "screened_out":
            return await run_in_threadpool(onboarding_page, study, key, ob)
        quiz = ob.onboarding.quiz
        assert quiz is not None
        wrong = [quiz.items[i].prompt for i in result.graded.wrong]
        return HTMLResponse(pages.quiz_failed(ob.config.title or ob.config.name, result.graded.score,
                                              result.graded.total, quiz.pass_mark, wrong,
                                              quiz.attempts - ob.state.attempts_used,
                                              f"/s/{study}/{key}/onboarding"), headers=NO_STORE)

    @app.get("/s/{study}/{key}/welcome")
    def welcome(study: str, key: str, request: Request) -> HTMLResponse:
        config, participant = portal.welcome(study, _key(key), request.cookies.get(cookie_name(study, key)))
        from crowdpref.study1 import GUIDELINES as STUDY1
        from crowdpref.study2 import GUIDELINES as STUDY2

        is1 = key == "study1"
        prolific = config.prolific.study1 if is1 else config.prolific.study2
        minutes = prolific.estimated_completion_minutes  # the study's estimate, invitations included
        what = "answer in writing (and rate each question)" if is1 else "compare two answers each"
        invited = config.participants == "invite"
        guidelines = STUDY1 if is1 else STUDY2
        if invited:  # an invited participant has no Prolific ID
            guidelines = guidelines.replace("without your name or Prolific ID", "without your name")
        section = config.study1 if is1 else config.study2
        body = pages.welcome(config.title or config.name, what, len(participant.assignments), minutes,
                             guidelines, f"/s/{study}/{key}/start", links.finish_url(portal.settings, study, key),
                             inactive_minutes=section.inactive_after_minutes, invited=invited)
        return HTMLResponse(body, headers=NO_STORE)

    @app.post("/s/{study}/{key}/start")
    async def start(study: str, key: str, request: Request) -> Response:
        return await start_or_wait(study, key, request)

    @app.get("/s/{study}/{key}/start")
    async def waiting(study: str, key: str, request: Request) -> Response:
        """The waiting page's own address (it reloads itself here until the work is ready)."""
        return await start_or_wait(study, key, request)

    async def start_or_wait(study: str, key: str, request: Request) -> Response:
        """*Start*: once their workspace in Argilla is ready (waited for at most START_WAIT_S,
        without holding a thread), signed in; else a page that says their work is being prepared
        and reloads itself (a meta refresh, no script needed; every FAILING_RETRY_S while Argilla
        fails) - a 200 either way: their place is kept, nothing is wrong on their side, and no
        5xx reaches a browser because Argilla is busy. No request hangs on a busy Argilla."""
        cookie = request.cookies.get(cookie_name(study, key))
        try:
            preparation = await run_in_threadpool(portal.preparation, study, _key(key), cookie)
        except AlreadyFinished:  # their credentials expired when they completed: the finish page
            return RedirectResponse(f"/s/{study}/{key}/done", status_code=303, headers=NO_STORE)
        if not await wait_ready(preparation, START_WAIT_S):
            here = f"/s/{study}/{key}/start"
            if failing(preparation):
                return HTMLResponse(pages.preparing(here, FAILING_RETRY_S, failing=True), headers=NO_STORE)
            return HTMLResponse(pages.preparing(here, WAITING_REFRESH_S), headers=NO_STORE)
        return await run_in_threadpool(sign_in, study, key, cookie)

    def sign_in(study: str, key: str, cookie: str | None) -> Response:
        try:
            signed = portal.sign_in(study, _key(key), cookie)
        except AlreadyFinished:  # their credentials expired when they completed: the finish page
            signed = f"/s/{study}/{key}/done"
        if isinstance(signed, TokenSignIn):  # the session in the body (one origin with Argilla), never a URL
            return HTMLResponse(pages.argilla_session(signed.token, signed.expires, signed.target,
                                                      argilla_session.TOKEN_KEY, argilla_session.EXPIRATION_KEY),
                                headers=NO_STORE)
        return RedirectResponse(signed, status_code=303, headers=NO_STORE)  # their code

    @app.get("/s/{study}/{key}/work")
    def work(study: str, key: str, request: Request) -> Response:
        """The bar (progress, Finish) over the participant's Argilla, in a frame."""
        try:
            frame = portal.work(study, _key(key), request.cookies.get(cookie_name(study, key)))
        except AlreadyFinished:
            return RedirectResponse(f"/s/{study}/{key}/done", status_code=303, headers=NO_STORE)
        except NotReady:  # their workspace is still being prepared: the page that waits for it
            return RedirectResponse(f"/s/{study}/{key}/start", status_code=303, headers=NO_STORE)
        config, _ = portal.config(study, _key(key))
        base = f"/s/{study}/{key}"
        return HTMLResponse(pages.work_frame(config.title or config.name, frame.target, frame.submitted, frame.total,
                                             frame.submitted >= frame.total > 0, f"{base}/done", f"{base}/progress",
                                             invited=config.participants == "invite"), headers=NO_STORE)

    @app.get("/s/{study}/{key}/progress")
    def progress(study: str, key: str, request: Request) -> JSONResponse:
        done = portal.progress(study, _key(key), request.cookies.get(cookie_name(study, key)))
        return JSONResponse({"submitted": done.submitted, "total": done.total, "done": done.done,
                             "given_back": done.given_back}, headers=NO_STORE)

    @app.get("/s/{study}/{key}/done")
    async def done(study: str, key: str, request: Request) -> Response:
        try:  # the check with Argilla, bounded: a stalled Argilla gets a page that tries again
            finish = await asyncio.wait_for(run_in_threadpool(
                portal.finish, study, _key(key), request.cookies.get(cookie_name(study, key))), FINISH_WAIT_S)
        except TimeoutError:
            log.warning("503: Argilla did not answer the finish page's check within %.0f s", FINISH_WAIT_S)
            raise Refusal(503, "Please wait a moment", "We cannot check your answers right now: the annotation "
                          "server is busy. Your answers are kept; this page tries again by itself.",
                          retry_after=FAILING_RETRY_S) from None
        if finish.done:
            return HTMLResponse(pages.finished(finish.code, finish.completion_url), headers=NO_STORE)
        return HTMLResponse(pages.not_finished(finish.submitted, finish.total, finish.argilla_url,
                                               f"/s/{study}/{key}/start"), headers=NO_STORE)

    @app.post("/hooks/prolific")
    async def prolific_hook(request: Request) -> JSONResponse:
        body = await request.body()
        status, reply = await run_in_threadpool(portal.prolific_webhook, dict(request.headers), body)
        return JSONResponse(reply, status_code=status)

    @app.post("/hooks/argilla")
    async def argilla_hook(request: Request) -> JSONResponse:
        body = await request.body()
        status, reply = await run_in_threadpool(portal.argilla_webhook, dict(request.headers), body)
        return JSONResponse(reply, status_code=status)

    @app.get(GUARD_PATH)
    def answer_change(request: Request) -> Response:
        return Response(status_code=portal.answer_change_allowed(request.headers), headers=NO_STORE)

    app.add_middleware(PathOnlyLog)
    app.add_middleware(BodyLimit)  # added last: the outermost layer, before anything reads a body
    return app


def _form(body: bytes) -> dict[str, str]:
    """An urlencoded form (the onboarding pages' radio buttons): the first value of each field."""
    from urllib.parse import parse_qs

    try:
        return {k: v[0] for k, v in parse_qs(body.decode("utf-8"), max_num_fields=100).items()}
    except (UnicodeDecodeError, ValueError):
        raise Refusal(400, "Form not readable", "Please go back and send the form again.") from None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _examples(ob: Onboarder) -> list[str]:
    from crowdpref.onboarding import AnswerExample

    out = []
    points = ob.config.study2.scale_points
    labels = ob.config.study2.scale_labels
    for n, ex in enumerate(ob.onboarding.examples, start=1):
        if isinstance(ex, AnswerExample):
            out.append(pages.answer_example(n, ex.question, ex.strong, ex.strong_why, ex.weak, ex.weak_why))
        else:
            label = labels[ex.rating - 1] if 1 <= ex.rating <= len(labels) else ""
            out.append(pages.pair_example(n, ex.question, ex.answer_a, ex.answer_b, ex.rating, label, points, ex.why))
    return out


def _key(key: str) -> Any:
    if key not in KEYS:
        raise Refusal(404, "Page not found", "This address does not belong to a study. Please check the link.")
    return key


def build_app(settings: Any | None = None) -> FastAPI:
    """The app for the configured deployment (settings from the environment by default)."""
    from crowdpref.settings import load_settings
    from crowdpref.store import open_store

    settings = settings or load_settings()
    argilla_session.check_one_origin(settings)  # one line, before anything opens: no other way into Argilla
    portal = Portal(settings, open_store(settings))
    return create_app(portal, argilla_webhook=True, launch_pacer=True)  # Argilla reports responses to /hooks/argilla
