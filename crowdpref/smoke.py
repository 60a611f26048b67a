"""A quick end-to-end check that a configured Argilla accepts what crowdpref will do:
create a workspace and a dataset, log a record by id twice (no duplicate), read it back,
delete the dataset. Used by `make demo` until the full study flow exists."""

from __future__ import annotations

import time
from dataclasses import dataclass

import argilla as rg
import httpx

SMOKE_WORKSPACE = "crowdpref-smoke"


@dataclass(frozen=True)
class SmokeResult:
    argilla_version: str
    records_after_two_logs: int
    seconds: float


def check_argilla(api_url: str, api_key: str, timeout_s: float = 30.0) -> SmokeResult:
    started = time.perf_counter()
    client = rg.Argilla(api_url=api_url, api_key=api_key, timeout=int(timeout_s))
    workspace = client.workspaces(SMOKE_WORKSPACE) or rg.Workspace(name=SMOKE_WORKSPACE, client=client).create()
    name = f"smoke-{int(time.time())}"
    settings = rg.Settings(
        fields=[rg.TextField(name="question")],
        questions=[rg.TextQuestion(name="response", required=True)],
    )
    dataset = rg.Dataset(name=name, workspace=workspace, settings=settings, client=client).create()
    try:
        record = rg.Record(id="smoke-1", fields={"question": "Is the server answering?"})
        dataset.records.log([record])
        dataset.records.log([record])
        count = len(list(dataset.records))
    finally:
        dataset.delete()
    return SmokeResult(
        argilla_version=httpx.get(f"{api_url}/api/v1/version", timeout=timeout_s).json().get("version", "?"),
        records_after_two_logs=count,
        seconds=time.perf_counter() - started,
    )
