"""The pure parts of ``benchmarks/portal.py --profile public`` (issue 19): the private settings
of the public profile, the targets per burst shape, reading the Argilla session from the
portal's Start page, and the ``--bcrypt-on-loop`` server that puts argilla-server's stock bcrypt
back on the event loop."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.argilla_venv import ARGILLA_PYTHON, Snippet, run_forked

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("portal_bench", REPO / "benchmarks" / "portal.py")
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("portal_bench", bench)
SPEC.loader.exec_module(bench)


def test_public_settings_put_portal_and_argilla_behind_caddy_on_one_https_origin_with_free_ports(tmp_path, monkeypatch):
    monkeypatch.setenv("CROWDPREF_PUBLIC_TLS", "acme")  # a developer's environment does not leak in
    settings = bench.private_settings(tmp_path, public=True)
    assert settings.public and settings.public_tls == "internal"
    assert settings.public_url == f"https://localhost:{settings.https_port}"
    assert settings.portal_public_url == settings.argilla_participant_url == settings.public_url
    ports = [settings.https_port, settings.http_port, settings.postgres_port, settings.argilla_port,
             settings.portal_port, settings.fake_prolific_port]
    assert len(set(ports)) == len(ports) and 443 not in ports and 6932 not in ports
    assert settings.argilla_worker_count == 2
    assert bench.private_settings(tmp_path, public=True, argilla_workers=1).argilla_worker_count == 1


def test_the_embedded_profile_stays_embedded_where_the_environment_names_a_public_url(tmp_path, monkeypatch):
    monkeypatch.setenv("CROWDPREF_PUBLIC_URL", "https://study.example.org")
    settings = bench.private_settings(tmp_path)
    assert not settings.public and settings.argilla_worker_count == 1
    assert settings.portal_public_url.startswith("http://")


@pytest.mark.parametrize(("arrivals", "window", "target"), [(200, 10.0, 1.0), (100, 60.0, 0.5), (200, 1.0, None),
                                                             (40, 10.0, 1.0), (20, 1.0, 1.0)])
def test_public_targets_follow_the_issue_per_burst_shape(arrivals, window, target):
    assert bench.public_target(arrivals, window) == target


def test_bcrypt_on_loop_runs_the_benchmark_app_with_the_stack_workers_host_and_port(tmp_path, monkeypatch):
    from services.argilla import service as argilla_service

    monkeypatch.setattr(argilla_service, "server_argv", argilla_service.server_argv)  # restored afterwards
    settings = bench.private_settings(tmp_path, public=True, argilla_workers=3)
    stock = argilla_service.server_argv(settings)
    bench.bcrypt_on_the_loop()
    argv = list(argilla_service.server_argv(settings))  # what server_spec (the stack) runs
    assert argv != list(stock)
    assert argv[argv.index("-m") + 1:argv.index("-m") + 3] == ["uvicorn", "argilla_bcrypt_on_loop:app"]
    assert argv[argv.index("--app-dir") + 1] == str(REPO / "benchmarks")
    assert argv[argv.index("--workers") + 1] == "3"
    assert argv[argv.index("--port") + 1] == str(settings.argilla_port)
    assert "--no-access-log" in argv


PROBE = """
import sys
sys.path.insert(0, {folder!r})
import {module} as served
from argilla_server.contexts import accounts
app = getattr(served, "app", None)  # the launcher patches on this first access
print(accounts.authenticate_user.__module__, app is not None)
"""


@pytest.mark.skipif(not ARGILLA_PYTHON.exists(), reason="no Argilla venv (make setup)")
def test_the_bcrypt_on_loop_app_keeps_argilla_servers_stock_login_and_the_launcher_replaces_it():
    # each probe in a process of its own, both for one import of argilla-server (tests/argilla_venv.py:
    # the probes import argilla_server.contexts.accounts first, through the module they load)
    on_loop_run, launcher_run = run_forked(
        [Snippet(PROBE.format(folder=str(folder), module=module)) for folder, module in
         [(REPO / "benchmarks", "argilla_bcrypt_on_loop"), (REPO / "services" / "argilla", "launch")]],
        preload="argilla_server.contexts.accounts", cwd=REPO, timeout=120)

    def served(done) -> list[str]:
        assert done.returncode == 0, done.stderr[-800:]
        return done.stdout.split()[-2:]

    on_loop = served(on_loop_run)
    assert on_loop == ["argilla_server.contexts.accounts", "True"]
    launcher = served(launcher_run)
    if launcher[0] == "argilla_server.contexts.accounts":
        pytest.skip("this checkout's launcher does not move bcrypt off the loop")
    assert launcher[0] != "argilla_server.contexts.accounts"
