"""Screening on a DaskTaskRunner (prefect-dask, a LocalCluster of worker processes) gives the
same screening.parquet as the local path, row for row and in the same order."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from flows.screen_responses import screen_responses
from tests.fakes.tiny_detoxify import TinyDetoxify, tiny_detoxify  # noqa: F401 - the session fixture
from tests.integration.test_screen_responses_flow import TEXTS, write_responses, write_study

pytestmark = pytest.mark.integration


def test_dask_runner_matches_local(crowdpref_home, tmp_path, tiny_detoxify: TinyDetoxify,  # noqa: F811
                                   monkeypatch) -> None:
    from prefect_dask import DaskTaskRunner

    entered = []
    real_enter = DaskTaskRunner.__enter__

    def spy(self):
        runner = real_enter(self)
        entered.append(len(self.client.scheduler_info()["workers"]))  # starts the cluster
        return runner

    monkeypatch.setattr(DaskTaskRunner, "__enter__", spy)
    screening = {"checkpoint": str(tiny_detoxify.checkpoint), "device": "cpu", "batch_size": 2,
                 "thresholds": {"toxicity": 0.5, "insult": 0.5, "threat": 0.5}}
    local = write_study(tmp_path, "screen-local", screening)
    dask = write_study(tmp_path, "screen-dask", {**screening, "runner": "dask", "dask_workers": 2})
    texts = TEXTS * 3
    write_responses(crowdpref_home, "screen-local", texts)
    write_responses(crowdpref_home, "screen-dask", texts)

    expected = pd.read_parquet(screen_responses(study=str(local)))
    got = pd.read_parquet(screen_responses(study=str(dask)))
    assert len(got) == len(texts)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, atol=1e-5)
    assert got["flagged"].any() and not got["flagged"].all()

    # it really ran on Dask: a screen-batches subflow, one scoring task per chunk (2 per worker)
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId

    async def batches():
        async with get_client() as client:
            runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["screen-batches"])))
            tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[r.id for r in runs])))
            return runs, tasks

    runs, tasks = asyncio.run(batches())
    assert len(runs) == 1 and runs[0].state.is_completed()
    assert entered == [2]  # the Dask runner started a LocalCluster of 2 worker processes
    assert sorted(t.name.rsplit("-", 1)[0] for t in tasks) == ["screen-answers"] * 4
