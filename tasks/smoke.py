"""Prefect task over :mod:`crowdpref.smoke`."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact

from crowdpref.smoke import SmokeResult, check_argilla


@task(name="argilla-smoke-check", retries=2, retry_delay_seconds=3)
def argilla_smoke_check(api_url: str, api_key: str) -> SmokeResult:
    result = check_argilla(api_url, api_key)
    create_markdown_artifact(
        key="argilla-smoke-check",
        markdown=(
            f"# Argilla smoke check\n\n- server: {api_url} (argilla-server {result.argilla_version})\n"
            f"- records after logging one record twice: **{result.records_after_two_logs}** (expected 1)\n"
            f"- took {result.seconds:.1f} s\n"
        ),
        description="Create a dataset, log a record twice by id, read back, delete.",
    )
    return result
