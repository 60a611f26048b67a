"""The participant portal (FastAPI): where a person arriving from Prolific (or with an invite
link) gets an Argilla account and work from the pool, and their completion code at the end.

Routes (``<study>`` is the study config's name, ``<key>`` ``study1`` or ``study2``):

- ``GET  /s/<study>/<key>?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..`` (or ``?invite=..``): check
  the ids (with Prolific: the submission must name this person and this study), refuse the
  excluded, claim the work (the same work when they come back), set a signed cookie and send
  them to the welcome page - a clean URL, so their ids leave the address bar after one hop.
- ``GET  /s/<study>/<key>/welcome``: the guidelines and what to expect; *Start* posts to
- ``POST /s/<study>/<key>/start``: 303 to Argilla's sign-in page with their credentials (the
  one hop that carries them; no-store, no referrer), which logs them in.
- ``GET  /s/<study>/<key>/done``: checks with Argilla that every item is submitted; then the
  completion code and the way back to Prolific, else how many are left.
- ``POST /hooks/prolific``: Prolific's webhooks (signed, de-duplicated); a RETURNED, TIMED-OUT or
  REJECTED submission gives its unfinished work back to the pool at once.
- ``POST /hooks/argilla``: Argilla's response events (Standard Webhooks signatures, 401 when
  bad): the participant's activity - and their submitted answer - reach the store at once, and
  monitoring reads from Argilla only whom activity names (the portal registers the webhook when
  it starts and disables it when it stops, :mod:`crowdpref.portal.argilla_hooks`).
- ``GET  /healthz``.

Nothing logs query strings: uvicorn's access log is off and :class:`_PathOnlyLog` writes the
method, path and status only.
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

from crowdpref.portal import links, pages
from crowdpref.portal.service import KEYS, Portal, Refusal

log = logging.getLogger("crowdpref.portal")
NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}


def cookie_name(study: str, key: str) -> str:
    return f"crowdpref-{study}-{key}"


def create_app(portal: Portal, *, argilla_webhook: bool = False) -> FastAPI:
    """The portal's web app. ``argilla_webhook``: register Argilla's response webhook when the
    app starts (in the background: Argilla may start later) and disable it when it stops (on
    SIGTERM, before the process ends), so monitoring polls while nobody receives deliveries."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if argilla_webhook:
            portal.register_argilla_webhook_in_background()
        yield
        if argilla_webhook:
            await asyncio.to_thread(portal.stand_down_argilla_webhook)

    app = FastAPI(title="crowdpref portal", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.portal = portal
    secure = portal.settings.portal_public_url.startswith("https://")

    @app.middleware("http")
    async def _path_only_log(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        log.info("%s %s %s %.0f ms", request.method, request.url.path, response.status_code,
                 (time.perf_counter() - started) * 1000)
        return response

    @app.exception_handler(Refusal)
    async def _refusal(request: Request, exc: Refusal) -> HTMLResponse:
        return HTMLResponse(pages.message(exc.title, str(exc)), status_code=exc.status, headers=NO_STORE)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(pages.message("crowdpref", "Please open the study from the link you were given."),
                            headers=NO_STORE)

    @app.get("/s/{study}/{key}")
    def enter(study: str, key: str, request: Request) -> Response:
        entered = portal.enter(study, _key(key), dict(request.query_params))
        response = RedirectResponse(f"/s/{study}/{key}/welcome", status_code=303, headers=NO_STORE)
        response.set_cookie(cookie_name(study, key), entered.cookie, path=f"/s/{study}/{key}", httponly=True,
                            samesite="lax", secure=secure, max_age=7 * 24 * 3600)
        return response

    @app.get("/s/{study}/{key}/welcome")
    def welcome(study: str, key: str, request: Request) -> HTMLResponse:
        config, participant = portal.welcome(study, _key(key), request.cookies.get(cookie_name(study, key)))
        from crowdpref.study1 import GUIDELINES as STUDY1
        from crowdpref.study2 import GUIDELINES as STUDY2

        is1 = key == "study1"
        prolific = config.prolific.study1 if is1 else config.prolific.study2
        minutes = prolific.estimated_completion_minutes if config.participants != "invite" else None
        what = "answer in writing (and rate each question)" if is1 else "compare two answers each"
        body = pages.welcome(config.title or config.name, what, len(participant.assignments), minutes,
                             STUDY1 if is1 else STUDY2, f"/s/{study}/{key}/start",
                             links.finish_url(portal.settings, study, key))
        return HTMLResponse(body, headers=NO_STORE)

    @app.post("/s/{study}/{key}/start")
    def start(study: str, key: str, request: Request) -> Response:
        url = portal.sign_in_url(study, _key(key), request.cookies.get(cookie_name(study, key)))
        return RedirectResponse(url, status_code=303, headers=NO_STORE)

    @app.get("/s/{study}/{key}/done")
    def done(study: str, key: str, request: Request) -> Response:
        finish = portal.finish(study, _key(key), request.cookies.get(cookie_name(study, key)))
        if finish.done:
            return HTMLResponse(pages.finished(finish.code or "", finish.completion_url), headers=NO_STORE)
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

    return app


def _key(key: str) -> Any:
    if key not in KEYS:
        raise Refusal(404, "Page not found", "This address does not belong to a study. Please check the link.")
    return key


def build_app(settings: Any | None = None) -> FastAPI:
    """The app for the configured deployment (settings from the environment by default)."""
    from crowdpref.settings import load_settings
    from crowdpref.store import open_store

    settings = settings or load_settings()
    portal = Portal(settings, open_store(settings))
    return create_app(portal, argilla_webhook=True)  # Argilla reports responses to /hooks/argilla
