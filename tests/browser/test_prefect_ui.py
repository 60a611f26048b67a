"""The embedded Prefect UI renders in a real browser and shows a flow run recorded by the
embedded server (the run is created through the API, as a flow run would)."""

from __future__ import annotations

import httpx

from tests.browser.conftest import BROWSER_MARKS, TIMEOUT_MS

pytestmark = BROWSER_MARKS


def test_prefect_ui_shows_a_flow_run(prefect_server, browser_page, output_dir, unique):
    from playwright.sync_api import expect

    api = prefect_server.prefect_url
    flow = httpx.post(f"{api}/flows/", json={"name": f"ui-check-{unique}"}, timeout=10).json()
    run = httpx.post(f"{api}/flow_runs/", json={"flow_id": flow["id"], "name": f"run-{unique}"}, timeout=10)
    assert run.status_code in (200, 201), run.text

    browser_page.goto(f"{prefect_server.prefect_ui_url}/runs")
    # expect()'s own 5 s default, not the page's: the runs list loads after the page shell, and
    # on 2 busy cores that took longer than 5 s once (a make test from a fresh clone)
    expect(browser_page.get_by_text(f"ui-check-{unique}").first).to_be_visible(timeout=TIMEOUT_MS)
    browser_page.screenshot(path=str(output_dir / "prefect-ui-runs.png"), full_page=True)
