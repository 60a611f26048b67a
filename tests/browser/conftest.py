"""Shared set-up for real-browser tests: Debian's headless Chromium driven by Playwright
(no browser download: Playwright is pointed at /usr/bin/chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture()
def browser_page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            yield page
        finally:
            browser.close()


