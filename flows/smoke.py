"""Smoke-check flow: the embedded (or configured) Argilla accepts what a study will do, and
the run shows up in the Prefect UI. `crowdpref smoke` runs it; tests/integration/test_services_cli.py
checks that the run completes and is recorded by the Prefect server."""

from __future__ import annotations

from prefect import flow

from crowdpref.settings import load_settings
from tasks.smoke import argilla_smoke_check


@flow(name="smoke-check", log_prints=True)
def smoke_check() -> int:
    """Create a dataset on Argilla, log a record twice by id, read it back, delete it."""
    settings = load_settings()
    result = argilla_smoke_check(settings.argilla_api_url, settings.resolved_argilla_api_key())
    if result.records_after_two_logs != 1:
        raise RuntimeError(f"logging one record twice left {result.records_after_two_logs} records (expected 1)")
    print(f"Argilla {result.argilla_version} at {settings.argilla_api_url}: OK in {result.seconds:.1f} s")
    return result.records_after_two_logs
