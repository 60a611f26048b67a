"""As root, each keeper (services/keeper.py) runs as its service's user, behind the same
``setpriv`` drop as the service: no process of the stack runs as root, Caddy's keeper and Caddy
hold ``CAP_NET_BIND_SERVICE`` only (ports 80 and 443), and a killed service comes back as its
own user. Like tests/integration/test_service_users.py, it needs root and runs only programs
outside the checkout (Debian's redis-server, /bin/sleep standing in for Caddy) in a state folder
under /tmp that others may pass through."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from services import privileges, redis, systemd
from services.process import ProcessManager, ServiceSpec, group_members
from tests.conftest import isolated_settings
from tests.integration.test_supervisor import stack_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="!!! needs root and setpriv (util-linux): services run as their own users !!!")
NET_BIND_SERVICE = 1 << 10


def test_keepers_run_as_their_services_users_and_nothing_of_the_stack_is_root():
    folder = Path(tempfile.mkdtemp(prefix="crowdpref-keepers-", dir="/tmp"))
    os.chmod(folder, 0o711)
    settings = isolated_settings(folder / "state", service_users="per-service", public_url="https://study.example.org",
                                 public_tls="internal", http_port=80, https_port=443)
    units = [unit for unit in systemd.render(settings) if unit.service in ("redis", "caddy")]
    systemd.run_commands(systemd.account_commands(settings, units))
    launch = privileges.Privileges(settings, {unit.service: unit.confinement for unit in units}).launch_as
    manager = ProcessManager(settings.state_dir, launch_as=launch, keep=True)
    try:
        first = manager.start(redis.spec(settings), settings.host)
        manager.start(ServiceSpec("caddy", ["/bin/sleep", "300"], {"PATH": "/usr/bin:/bin"}, lambda: True), settings.host)
        processes = stack_processes(manager.pids_dir)
        users = {"redis": pwd.getpwnam("crowdpref-redis").pw_uid, "caddy": pwd.getpwnam("crowdpref-caddy").pw_uid}
        assert sorted(service for service, _ in processes.values()) == ["caddy", "caddy", "redis", "redis"], processes
        for pid, (service, status) in processes.items():
            assert status["Uid"].split() == [str(users[service])] * 4, (pid, service, status["Uid"])
            assert status["NoNewPrivs"] == "1"
            caps = NET_BIND_SERVICE if service == "caddy" else 0  # the keeper holds what its service may hold
            assert int(status["CapEff"], 16) == int(status["CapBnd"], 16) == int(status["CapAmb"], 16) == caps, \
                (service, status["Name"])

        os.killpg(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while not ((again := manager.running("redis")) and again.pid != first.pid and redis.healthy(settings)):
            assert time.monotonic() < deadline, manager.log_path("redis").read_text()[-1500:]
            time.sleep(0.1)
        status = Path(f"/proc/{again.pid}/status").read_text()
        assert f"Uid:\t{users['redis']}\t" in status and "crowdpref-keeper: redis died (" in \
            manager.log_path("redis").read_text()
        pids = list(stack_processes(manager.pids_dir))
    finally:
        manager.stop("caddy")
        manager.stop("redis")
        shutil.rmtree(folder, ignore_errors=True)
    assert not [pid for pid in pids if group_members(pid)], "a keeper or service outlived stop"
