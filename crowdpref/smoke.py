"""A quick end-to-end check that a configured Argilla accepts what crowdpref will do:
create a workspace and a dataset, log a record by id twice (no duplicate), read it back,
delete the dataset. `crowdpref smoke` runs it (the CLI round-trip test,
tests/integration/test_services_cli.py, checks that its run completes)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import argilla as rg
import httpx

from crowdpref.argilla_client import ArgillaOwner
from crowdpref.tls import shared_context

SMOKE_WORKSPACE = "crowdpref-smoke"


@dataclass(frozen=True)
class SmokeResult:
    argilla_version: str
    records_after_two_logs: int
    seconds: float


def check_argilla(api_url: str, api_key: str, timeout_s: float = 30.0) -> SmokeResult:
    """Through :class:`~crowdpref.argilla_client.ArgillaOwner`, the client every stage uses
    (so an unreachable server or a wrong key is its one-line error)."""
    started = time.perf_counter()
    owner = ArgillaOwner(api_url, api_key, timeout_s=timeout_s)
    workspace = owner.ensure_workspace(SMOKE_WORKSPACE)
    settings = rg.Settings(
        fields=[rg.TextField(name="question")],
        questions=[rg.TextQuestion(name="response", required=True)],
    )
    dataset = owner.ensure_dataset(f"smoke-{int(time.time())}", workspace, settings)
    try:
        record = rg.Record(id="smoke-1", fields={"question": "Is the server answering?"})
        owner.log_records(dataset, [record])
        owner.log_records(dataset, [record])
        count = len(owner.record_ids(dataset))
    finally:
        dataset.delete()
        owner.close()
    return SmokeResult(
        argilla_version=httpx.get(f"{api_url}/api/v1/version", timeout=timeout_s, verify=shared_context()).json().get("version", "?"),
        records_after_two_logs=count,
        seconds=time.perf_counter() - started,
    )
