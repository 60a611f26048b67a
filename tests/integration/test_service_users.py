"""``crowdpref up`` as root starts each service as its own user (services/privileges.py).

These tests start real processes as the services' system users (made by the same account
commands ``up`` runs), so they need root; they keep their state folder in a folder of /tmp that
others may pass through (pytest's own temp folder is 0700), and run only programs outside the
checkout (Debian's redis-server, /bin/sleep, /bin/cat), so they pass wherever the checkout lives.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from crowdpref.errors import ConfigError
from crowdpref.runfolder import write_parquet, write_text
from crowdpref.settings import Settings
from services import privileges, redis, systemd
from services.process import ProcessManager, ServiceSpec
from tests.conftest import isolated_settings

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="!!! needs root and setpriv (util-linux): services run as their own users !!!")
NET_BIND_SERVICE = 1 << 10


@pytest.fixture
def open_state():
    """A state folder the services' users can reach (o+x on the way), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="crowdpref-users-", dir="/tmp"))
    os.chmod(folder, 0o711)
    try:
        yield folder / "state"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _settings(state: Path, **extra) -> Settings:
    return isolated_settings(state, service_users="per-service", **extra)


def _status(pid: int, program: str) -> dict[str, str]:
    """/proc/PID/status once ``program`` runs there (setpriv execs it after dropping)."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/comm").read_text().strip() != program and time.monotonic() < deadline:
        time.sleep(0.02)
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def _prepared(settings: Settings, names: tuple[str, ...]) -> privileges.Privileges:
    """What ``privileges.prepare`` does, for these services only (the others' programs are the
    checkout's, which may sit in a private folder)."""
    units = [unit for unit in systemd.render(settings) if unit.service in names]
    systemd.run_commands(systemd.account_commands(settings, units))
    return privileges.Privileges(settings, {unit.service: unit.confinement for unit in units})


def _as(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv],
                          capture_output=True, text=True, errors="replace", timeout=30, check=False,
                          cwd="/")


def test_active_only_as_root_and_by_the_setting(tmp_path: Path):
    laptop, public = isolated_settings(tmp_path), isolated_settings(tmp_path, public_url="https://study.example.org")
    for settings, expected in ((laptop, False), (public, True)):
        assert privileges.active(settings.model_copy(update={"service_users": "auto"})) is expected
        assert privileges.active(settings.model_copy(update={"service_users": "off"})) is False
        assert privileges.active(settings.model_copy(update={"service_users": "per-service"})) is True


def test_redis_runs_as_its_user_with_no_capability_and_only_its_own_secret(open_state: Path):
    settings = _settings(open_state)
    write_text('{"username": "owner", "password": "owner-secret-password", "api_key": "owner.apikey"}',
               settings.owner_credentials_file,
               private=True)
    manager = ProcessManager(settings.state_dir, launch_as=_prepared(settings, ("redis",)).launch_as)
    try:
        started = manager.start(redis.spec(settings), settings.host)
        status = _status(started.pid, "redis-server")
        account = pwd.getpwnam("crowdpref-redis")
        assert status["Uid"].split() == [str(account.pw_uid)] * 4 and status["Gid"].split()[0] == str(account.pw_gid)
        assert int(status["CapEff"], 16) == int(status["CapBnd"], 16) == int(status["CapAmb"], 16) == 0
        assert status["NoNewPrivs"] == "1"
        assert redis.healthy(settings)  # it read its password (requirepass) from its own copy of redis.conf

        copy = privileges.credentials_folder(settings, "redis")
        assert sorted(p.name for p in copy.iterdir()) == ["redis.conf"]
        assert copy.stat().st_uid == account.pw_uid and stat.S_IMODE(copy.stat().st_mode) == 0o500
        assert stat.S_IMODE((copy / "redis.conf").stat().st_mode) == 0o400
        # the secrets folder stays root's: the service's user reads nothing there
        assert settings.secrets_dir.stat().st_uid == 0 and stat.S_IMODE(settings.secrets_dir.stat().st_mode) == 0o700
        refused = _as("crowdpref-redis", "/bin/cat", str(settings.owner_credentials_file))
        assert refused.returncode != 0 and "Permission denied" in refused.stderr
        assert "owner-secret-password" not in refused.stdout
    finally:
        manager.stop("redis")


def test_caddy_gets_the_port_capability_and_nothing_else(open_state: Path):
    """Ports 80/443 need CAP_NET_BIND_SERVICE: Caddy gets it (ambient), as crowdpref-caddy, and
    cannot gain any other; a service with no such port gets none (the portal here)."""
    settings = _settings(open_state, public_url="https://study.example.org", public_tls="internal", http_port=80, https_port=443)
    launch = _prepared(settings, ("caddy",)).launch_as
    manager = ProcessManager(settings.state_dir, launch_as=launch)
    try:
        started = manager.start(ServiceSpec("caddy", ["/bin/sleep", "60"], {"PATH": "/usr/bin:/bin"}, lambda: True),
                                settings.host)
        status = _status(started.pid, "sleep")
        assert status["Uid"].split()[0] == str(pwd.getpwnam("crowdpref-caddy").pw_uid)
        assert int(status["CapAmb"], 16) == int(status["CapEff"], 16) == int(status["CapBnd"], 16) == NET_BIND_SERVICE
        assert status["NoNewPrivs"] == "1"
    finally:
        manager.stop("caddy")
    high = _settings(open_state, public_url="https://study.example.org", public_tls="internal", http_port=8080, https_port=8443)
    assert "--ambient-caps=-all" in _prepared(high, ("caddy",)).launch_as(
        ServiceSpec("caddy", ["/bin/sleep", "1"], {}, lambda: True)).argv
    # the laptop stack's Caddy (plain HTTP on SITE_PORT, above 1024; HTTP_PORT keeps its default 80, which it
    # does not listen on there): as crowdpref-caddy too, never root, with no capability
    laptop = _settings(open_state)
    assert laptop.http_port == 80 and laptop.site_port > 1024
    argv = _prepared(laptop, ("caddy",)).launch_as(ServiceSpec("caddy", ["/bin/sleep", "1"], {}, lambda: True)).argv
    assert f"--reuid={pwd.getpwnam('crowdpref-caddy').pw_uid}" in argv and "--ambient-caps=-all" in argv


def test_the_portal_reads_the_stage_outputs_but_no_private_folder(open_state: Path):
    """Stage outputs written by root (the CLI) or the worker, before or after ``up``, are readable
    by the portal's group; a run folder's ``private/`` (key salts, participants' key mappings) is not,
    and no other service's user enters the run folders."""
    settings = _settings(open_state)
    run = settings.runs_dir / "demo"
    before = write_parquet(pd.DataFrame({"question_id": ["q1"]}), run / "questions.parquet")
    secret = write_text("salt", run / "private" / "participant-key-salt.json", private=True)
    _prepared(settings, ("portal", "redis"))
    mask = os.umask(0o027)  # as the worker's unit writes (UMask=0027): nothing for others, so the group must be right
    try:
        after = write_parquet(pd.DataFrame({"pair_id": ["p1"]}), run / "study2" / "pairs.parquet")
    finally:
        os.umask(mask)
    for path in (before, after):
        assert _as("crowdpref-portal", "/bin/cat", str(path)).returncode == 0, path
    for argv in (["/bin/cat", str(secret)], ["/bin/ls", str(secret.parent)]):
        refused = _as("crowdpref-portal", *argv)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, argv
    assert _as("crowdpref-redis", "/bin/cat", str(before)).returncode != 0


def test_up_refuses_a_state_folder_the_services_users_cannot_reach(tmp_path: Path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    settings = isolated_settings(closed / "state", public_url="https://study.example.org", public_tls="internal",
                                 service_users="auto")
    with pytest.raises(ConfigError) as error:
        privileges.prepare(settings)
    message = str(error.value)
    assert "\n" not in message and "CROWDPREF_SERVICE_USERS=off" in message
    first_closed = next(p for p in reversed((closed / "state").parents) if not p.stat().st_mode & 0o001)
    assert message.startswith(f"{first_closed}: ") and "no o+x" in message


def test_the_prefect_server_copies_its_ui_into_a_folder_its_user_owns(open_state: Path):
    """By default Prefect's server writes its UI's files into its own package (the venv), which its
    own user cannot: it then serves no UI (seen as "Failed to create V1 UI static directory")."""
    from services.prefect import service as prefect

    settings = _settings(open_state)
    spec = prefect.spec(settings)
    ui = Path(privileges.Privileges(settings, {"prefect-server": systemd.confinement(settings, spec)})
              .launch_as(spec).env["PREFECT_UI_STATIC_DIRECTORY"])
    assert ui.is_relative_to(systemd.confinement(settings, spec).owned[0])
