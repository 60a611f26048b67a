"""Shared set-up for real-browser tests: Debian's headless Chromium driven by Playwright
(no browser download: Playwright is pointed at /usr/bin/chromium)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium's own connections (updates, sync, QUIC...)
# get refused by the closed network and slow everything down.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000  # 2 slow cores: the first Nuxt page load can take 10-20 s

BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"!!! BROWSER TEST SKIPPED: {CHROMIUM} is missing - install Debian's 'chromium' package !!!",
    ),
]


class _Chromium:
    """This test process's one Chromium (and Playwright driver), launched for the first test that
    asks for a browser and kept for the next ones: each test gets contexts of its own (cookies,
    storage, cache, viewport: nothing of another test's), not a Chromium of its own (seconds of
    start-up each).

    Playwright's sync API marks its event loop as this thread's running one after every call, so
    that its own calls work; left so between tests, any later test of this process that runs an
    event loop (``asyncio.run``: Prefect, anyio) would be refused. :meth:`lend` sets that mark for
    one test and clears it afterwards, as Playwright does when it stops."""

    def __init__(self) -> None:
        self._manager: object = None
        self._browser: Browser | None = None

    def _launch(self) -> Browser:
        from playwright.sync_api import sync_playwright

        self.close()
        self._manager = sync_playwright()
        playwright = self._manager.start()
        self._browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        return self._browser

    @contextmanager
    def lend(self) -> Iterator[Browser]:
        """The browser for one test (launched again if the last one died), its contexts closed after it."""
        if self._browser is not None:
            asyncio._set_running_loop(self._manager._loop)  # as after Playwright's own calls
        browser = self._browser if self._browser is not None and self._browser.is_connected() else self._launch()
        try:
            yield browser
        finally:
            try:
                if browser.is_connected():
                    for context in browser.contexts:
                        context.close()
            finally:
                asyncio._set_running_loop(None)

    def close(self) -> None:
        manager, browser, self._manager, self._browser = self._manager, self._browser, None, None
        if manager is None:
            return
        asyncio._set_running_loop(manager._loop)
        try:
            if browser is not None and browser.is_connected():
                browser.close()
        finally:
            manager.__exit__(None, None, None)  # stops the driver (which clears the mark)


@pytest.fixture(scope="session")
def _chromium() -> Iterator[_Chromium]:
    chromium = _Chromium()
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture()
def browser(_chromium: _Chromium) -> Iterator[Browser]:
    """Headless Chromium for this test, shared with the test process's other browser tests: make
    a context of your own (``browser.new_context(...)``); every context is closed after the test."""
    with _chromium.lend() as shared:
        yield shared


@pytest.fixture()
def browser_page(browser: Browser) -> Page:
    """A page in a fresh context (no cookies or storage of another test) at 1400x1000."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    return page
