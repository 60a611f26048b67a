"""The pre-flight's readers against the session's real embedded stack (Redis, Argilla's rq
worker): the key names and fields the unit tests' fake Redis assumes are rq's own."""

from __future__ import annotations

from crowdpref.preflight import FAIL, stack


def test_preflight_reads_the_real_argilla_worker(argilla_server) -> None:
    from crowdpref.cli.preflight import _rq_workers, _services

    settings = argilla_server.settings
    state = _rq_workers(settings)
    assert state.workers, "no rq worker found under rq:workers"
    assert all("birth" in worker for worker in state.workers)  # rq's worker hash, read whole
    check = stack.argilla_worker(state, str(settings.logs_dir / "argilla-worker.log"))
    assert check.status != FAIL, check.line()  # the laptop stack's jobs succeed (SQLite)
    services = dict(_services(settings))
    assert services.get("argilla-worker") is True and services.get("redis") is True
