"""``crowdpref service install`` (services/systemd.py): one unit per service of the profile,
taken from the stack's ServiceSpecs, with restart on failure, start at boot, ordered
dependencies, the spec's argv and environment (the environment only in 0600 files, no value
inline), checked by ``systemd-analyze verify`` - which a broken unit fails."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from crowdpref.errors import ServiceError
from services import stack, systemd
from services.process import ServiceSpec
from tests.conftest import REPO, cli_environment, isolated_settings

ANALYZE = systemd.analyzer()
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (Debian's systemd)")


def _settings(tmp_path: Path, **overrides: object):
    return isolated_settings(tmp_path / "home", prolific_token="prolific-secret-token-123",
                             hf_token="hf_secret_token_456", **overrides)


def _field(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def _unquote(line: str) -> list[str]:
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line)]


def _env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        key, value = line.split("=", 1)
        env[key] = shlex.split(value)[0]  # "..." with \\ and \" escapes, as systemd reads it
    return env


def test_units_for_every_service_of_the_profile(tmp_path: Path):
    settings = _settings(tmp_path)
    specs = stack.unit_specs(settings)
    paths = systemd.install(settings, tmp_path / "units")

    by_service = {spec.name: spec for spec, _ in specs}
    assert [p.name for p in paths] == [f"crowdpref-{n}.service" for n in
                                       ("redis", "argilla-server", "argilla-worker", "prefect-server", "portal",
                                        "prefect-worker")]
    secrets = {"prolific-secret-token-123", "hf_secret_token_456", settings.resolved_argilla_api_key()}
    from services.argilla.service import auth_secret

    secrets.add(auth_secret(settings))
    for path in paths:
        text = path.read_text()
        service = path.name.removeprefix("crowdpref-").removesuffix(".service")
        spec = by_service[service]
        assert _field(text, "Restart") == ["on-failure"]
        assert _field(text, "WantedBy") == ["multi-user.target"]
        assert _unquote(_field(text, "ExecStart")[0]) == list(spec.argv)  # the spec's argv, word for word
        env_file = Path(_unquote(_field(text, "EnvironmentFile")[0])[0])
        assert env_file.parent == settings.secrets_dir / "systemd"
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(env_file.parent.stat().st_mode) == 0o700
        assert _env_file(env_file) == dict(spec.env)  # the spec's environment, every variable
        assert not _field(text, "Environment"), "no variable inline in the unit"
        for secret in secrets:
            assert secret not in text, f"a secret is inline in {path.name}"
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # the portal's environment file holds its secrets (that is where they go)
    assert _env_file(settings.secrets_dir / "systemd" / "portal.env")["CROWDPREF_PROLIFIC_TOKEN"] == \
        "prolific-secret-token-123"

    # ordered dependencies
    def needs(service: str) -> tuple[list[str], list[str]]:
        text = (tmp_path / "units" / f"crowdpref-{service}.service").read_text()
        return _field(text, "After")[0].split(), " ".join(_field(text, "Requires")).split()

    assert needs("argilla-server") == (["network-online.target", "crowdpref-redis.service"], ["crowdpref-redis.service"])
    assert set(needs("argilla-worker")[1]) == {"crowdpref-redis.service", "crowdpref-argilla-server.service"}
    assert needs("prefect-worker")[1] == ["crowdpref-prefect-server.service"]
    assert needs("portal")[1] == ["crowdpref-argilla-server.service"]
    assert needs("redis")[1] == [] and needs("prefect-server")[1] == []
    # the Argilla server's start-up steps, as `up` runs them before it
    server = (tmp_path / "units" / "crowdpref-argilla-server.service").read_text()
    assert [_unquote(s)[2:4] for s in _field(server, "ExecStartPre")] == [["database", "migrate"],
                                                                        ["ensure-owner", str(settings.owner_credentials_file)]]


def test_a_service_the_profile_adds_gets_its_unit(tmp_path: Path):
    """The unit list follows the stack's specs: a service added there (PostgreSQL, Caddy in the
    public profile) gets a unit and its dependants require it; a dependency that is absent from
    the profile is left out."""
    settings = _settings(tmp_path)
    extra = ServiceSpec(name="postgres", argv=["/bin/sleep", "1000"], env={"PGDATA": "/x"}, health=lambda: True)
    specs = [(extra, ()), *stack.unit_specs(settings)]
    specs = [(spec, (*needs, "postgres", "caddy") if spec.name == "portal" else needs) for spec, needs in specs]
    units = {u.service: u for u in systemd.render(settings, user="crowdpref", specs=specs)}
    assert "postgres" in units and "caddy" not in units
    portal = units["portal"].text
    assert "crowdpref-postgres.service" in _field(portal, "Requires")[0]
    assert "caddy" not in portal
    assert _field(portal, "User") == ["crowdpref"]


def test_quoting_keeps_odd_words_whole():
    line = systemd.exec_line(["/usr/bin/x", "a b", "100%", "$HOME", 'q"uote', "back\\slash", ";"])
    assert _unquote(line) == ["/usr/bin/x", "a b", "100%", "$HOME", 'q"uote', "back\\slash", ";"]
    assert "%%" in line and "$$HOME" in line
    with pytest.raises(Exception, match="absolute path"):
        systemd.exec_line(["redis-server"])
    with pytest.raises(Exception, match="line break"):
        systemd.env_file_text({"A": "x\ny"})


@needs_analyze
def test_the_units_pass_systemd_analyze_and_a_broken_one_fails(tmp_path: Path):
    settings = _settings(tmp_path)
    paths = systemd.install(settings, tmp_path / "units")
    assert systemd.verify(paths) is True

    # a program that does not exist
    portal = tmp_path / "units" / "crowdpref-portal.service"
    good = portal.read_text()
    portal.write_text(re.sub(r"^ExecStart=\S+", "ExecStart=/nonexistent/python", good, flags=re.M))
    with pytest.raises(ServiceError, match="crowdpref-portal.service.*/nonexistent/python"):
        systemd.verify(paths)
    # a value systemd cannot parse (it only warns, and still exits 0: the check fails anyway)
    portal.write_text(good.replace("Restart=on-failure", "Restart=on-failur"))
    with pytest.raises(ServiceError, match="restart specifier"):
        systemd.verify(paths)
    # a dependency with no unit
    portal.write_text(good)
    (tmp_path / "units" / "crowdpref-argilla-server.service").unlink()
    with pytest.raises(ServiceError, match="crowdpref-argilla-server.service"):
        systemd.verify([p for p in paths if p.exists()])


@needs_analyze
def test_service_install_command(tmp_path: Path):
    env = cli_environment(tmp_path / "home")
    env["CROWDPREF_PROLIFIC_TOKEN"] = "prolific-secret-token-123"
    result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "service", "install", "--dir", str(tmp_path / "u")],
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "wrote 6 units" in result.stdout and "no problem found" in result.stdout
    assert "prolific-secret-token-123" not in result.stdout + result.stderr
    assert len(list((tmp_path / "u").glob("crowdpref-*.service"))) == 6
    # --no-check: the units are written, nothing runs systemd-analyze
    result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "service", "install", "--dir", str(tmp_path / "u"),
                             "--no-check"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "systemd-analyze" not in result.stdout, result.stdout
    if os.geteuid() != 0:  # only root may write /etc/systemd/system: one line, exit 2
        result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "service", "install"], env=env, cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "--dir" in result.stderr and "Traceback" not in result.stderr


def test_the_public_profile_gets_a_postgres_unit_that_prepares_and_provisions(tmp_path: Path):
    """In the public profile PostgreSQL is the first unit and everything that opens Argilla's
    database or the study store requires it; its ExecStartPre makes the cluster and its
    ExecStartPost the roles and databases, the same steps `crowdpref up` takes. The steps are
    run here for real against the server the unit would start."""
    from services import postgres
    from services.process import ProcessManager
    from tests.conftest import free_port

    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(f"!!! no PostgreSQL server here: {reason} !!!")
    settings = _settings(tmp_path, public_url="https://study.example.org", public_tls="internal",
                         postgres_port=free_port())
    units = {u.service: u for u in systemd.render(settings)}
    assert list(units)[0] == "postgres"
    for dependant in ("argilla-server", "argilla-worker", "portal", "prefect-worker"):
        assert "crowdpref-postgres.service" in _field(units[dependant].text, "Requires")[0].split(), dependant
        assert "crowdpref-postgres.service" in _field(units[dependant].text, "After")[0].split(), dependant
    text = units["postgres"].text
    (pre,), (post,) = _field(text, "ExecStartPre"), _field(text, "ExecStartPost")
    assert _unquote(pre)[-3:] == ["-m", "services.postgres", "prepare"]
    assert _unquote(post)[-3:] == ["-m", "services.postgres", "provision"]
    for secret_file in settings.secrets_dir.glob("postgres-*"):
        assert secret_file.read_text().strip() not in text  # passwords stay in the secrets folder
    if ANALYZE is not None:  # the whole public profile's units, Caddy's included, pass the check
        assert systemd.verify(systemd.install(settings, tmp_path / "units")) is True

    # the steps as systemd would run them: prepare, start the unit's command, provision
    assert subprocess.run(_unquote(pre), cwd="/", timeout=120).returncode == 0
    manager = ProcessManager(settings.state_dir)
    spec = next(spec for spec, _ in stack.unit_specs(settings) if spec.name == "postgres")
    try:
        manager.start(spec, settings.host)
        assert subprocess.run(_unquote(post), cwd="/", timeout=120).returncode == 0
        with postgres._connect(settings, postgres.ARGILLA_ROLE, postgres.ARGILLA_ROLE) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("argilla",)
    finally:
        postgres.stop_service(settings, manager)
        folder = postgres.data_folder(settings)
        if folder.is_relative_to(postgres.SYSTEM_ROOT):  # as root from a private folder: not in tmp_path
            shutil.rmtree(folder, ignore_errors=True)
