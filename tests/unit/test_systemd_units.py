"""``crowdpref service install`` (services/systemd.py): one unit per service of the profile,
taken from the stack's ServiceSpecs, with restart on failure, start at boot, ordered
dependencies, the spec's argv and environment (the environment only in 0600 files, no value
inline), checked by ``systemd-analyze verify`` - which a broken unit fails. Least privilege: each
service its own system user and only its own secrets, and ``systemd-analyze security`` rates
every unit within the issue's targets."""

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
from services import systemd
from services.process import ServiceSpec
from services.units import unit_specs
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


def test_units_for_every_service_of_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CROWDPREF_HF_TOKEN", "hf_env_token_789")  # the command's own environment
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-012")
    settings = _settings(tmp_path)
    specs = unit_specs(settings)
    paths = systemd.install(settings, tmp_path / "units")

    by_service = {spec.name: spec for spec, _ in specs}
    assert [p.name for p in paths] == [f"crowdpref-{n}.service" for n in
                                       ("redis", "argilla-server", "argilla-worker", "prefect-server", "portal",
                                        "prefect-worker", "caddy")]  # caddy: the participants' one origin
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
        if service == "prefect-server":  # it runs no flow: Prefect's own variables only, no token
            env = _env_file(env_file)
            assert env == systemd.unit_environment(settings, spec) and env["HOME"] == str(settings.prefect_home)
            assert not {"CROWDPREF_HF_TOKEN", "OPENAI_API_KEY"} & set(env) and "PREFECT_HOME" in env
        else:
            assert _env_file(env_file) == dict(spec.env)  # the spec's environment, every variable
        assert not _field(text, "Environment"), "no variable inline in the unit"
        for secret in secrets:
            assert secret not in text, f"a secret is inline in {path.name}"
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert _env_file(settings.secrets_dir / "systemd" / "prefect-worker.env")["CROWDPREF_HF_TOKEN"] == "hf_env_token_789"
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
    # Caddy, in front of both (the laptop stack's plain-HTTP origin), starts once they run
    assert set(needs("caddy")[1]) == {"crowdpref-portal.service", "crowdpref-argilla-server.service"}
    # the Argilla server's start-up steps, as `up` runs them before it
    server = (tmp_path / "units" / "crowdpref-argilla-server.service").read_text()
    assert [_unquote(s)[2:4] for s in _field(server, "ExecStartPre")] == [["database", "migrate"],
                                                                        ["ensure-owner", str(settings.owner_credentials_file)]]


def test_a_service_the_profile_adds_gets_its_unit(tmp_path: Path):
    """The unit list follows the stack's specs: a service added there (PostgreSQL in the public
    profile) gets a unit and its dependants require it; a dependency that is absent from the
    profile is left out."""
    settings = _settings(tmp_path)
    extra = ServiceSpec(name="postgres", argv=["/bin/sleep", "1000"], env={"PGDATA": "/x"}, health=lambda: True)
    specs = [(extra, ()), *unit_specs(settings)]
    specs = [(spec, (*needs, "postgres", "absent") if spec.name == "portal" else needs) for spec, needs in specs]
    units = {u.service: u for u in systemd.render(settings, user="crowdpref", specs=specs)}
    assert "postgres" in units and "absent" not in units
    portal = units["portal"].text
    assert "crowdpref-postgres.service" in _field(portal, "Requires")[0]
    assert "absent" not in portal
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
    portal.write_text(re.sub(r"^ExecStart=\S+", "ExecStart=/nonexistent/python", good, flags=re.MULTILINE))
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
                            env=env, cwd=REPO, check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "wrote 7 units" in result.stdout and "no problem found" in result.stdout
    assert "systemd-analyze security (exposure, 0 safest .. 10): crowdpref-redis 1." in result.stdout
    # --dir: the accounts' commands are printed, not run
    assert "then, as root, make the services' system users" in result.stdout
    assert f"chown -R crowdpref-redis:crowdpref-redis {tmp_path / 'home' / 'redis'}" in result.stdout
    assert "prolific-secret-token-123" not in result.stdout + result.stderr
    assert len(list((tmp_path / "u").glob("crowdpref-*.service"))) == 7
    # --no-check: the units are written, nothing runs systemd-analyze
    result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "service", "install", "--dir", str(tmp_path / "u"),
                             "--no-check"], env=env, cwd=REPO, check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "systemd-analyze" not in result.stdout, result.stdout
    if os.geteuid() != 0:  # only root may write /etc/systemd/system: one line, exit 2
        result = subprocess.run([sys.executable, "-m", "crowdpref.cli", "service", "install"], env=env, cwd=REPO, check=False,
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
    assert next(iter(units)) == "postgres"
    for dependant in ("argilla-server", "argilla-worker", "portal", "prefect-worker"):
        assert "crowdpref-postgres.service" in _field(units[dependant].text, "Requires")[0].split(), dependant
        assert "crowdpref-postgres.service" in _field(units[dependant].text, "After")[0].split(), dependant
    text = units["postgres"].text
    (pre,), (post,) = _field(text, "ExecStartPre"), _field(text, "ExecStartPost")
    assert pre.startswith("+/") and post.startswith("+/")  # as root (it chowns the folder to postgres)
    assert _unquote(pre)[-3:] == ["-m", "services.postgres", "prepare"]
    assert _unquote(post)[-3:] == ["-m", "services.postgres", "provision"]
    assert _field(text, "User") == ["postgres"] and "runuser" not in _field(text, "ExecStart")[0]
    for secret_file in settings.secrets_dir.glob("postgres-*"):
        assert secret_file.read_text().strip() not in text  # passwords stay in the secrets folder
    if ANALYZE is not None:  # the whole public profile's units, Caddy's included, pass the check
        assert systemd.verify(systemd.install(settings, tmp_path / "units")) is True

    # the steps as systemd would run them: prepare, start the unit's command, provision
    pre = pre.removeprefix("+")  # systemd's "run as root, unconfined": as `up` runs it
    assert subprocess.run(_unquote(pre), check=False, cwd="/", timeout=120).returncode == 0
    manager = ProcessManager(settings.state_dir)
    spec = next(spec for spec, _ in unit_specs(settings) if spec.name == "postgres")
    try:
        manager.start(spec, settings.host)
        assert subprocess.run(_unquote(post.removeprefix("+")), check=False, cwd="/", timeout=120).returncode == 0
        with postgres._connect(settings, postgres.ARGILLA_ROLE, postgres.ARGILLA_ROLE) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("argilla",)
    finally:
        postgres.stop_service(settings, manager)
        folder = postgres.data_folder(settings)
        if folder.is_relative_to(postgres.SYSTEM_ROOT):  # as root from a private folder: not in tmp_path
            shutil.rmtree(folder, ignore_errors=True)


def _public_settings(tmp_path: Path):
    """The public profile's settings (PostgreSQL and Caddy units), or a skip naming what is missing."""
    from services import postgres
    from tests.conftest import free_port

    reason = postgres.unavailable_reason()
    if reason or shutil.which("caddy") is None:
        pytest.skip(f"!!! the public profile's units need PostgreSQL and Caddy here: {reason or 'no caddy'} !!!")
    return _settings(tmp_path / "public", public_url="https://study.example.org", public_tls="internal",
                     postgres_port=free_port())


def _confinement(units: dict[str, systemd.Unit], service: str) -> systemd.Confinement:
    conf = units[service].confinement
    assert conf is not None
    return conf


def test_each_service_runs_as_its_own_user_with_only_its_own_secrets(tmp_path: Path):
    """Redis, Argilla, the Prefect server, the portal and Caddy each run as their own system
    user; the worker (it runs the flows) too, with the three capabilities that reach the operator's
    files as its only ones (never uid 0). A unit that needs secret files gets
    them with LoadCredential=, that folder bound over the secrets folder; the others see no
    secrets folder and no settings file (the Hub token, the LLM key). The portal never gets the
    PostgreSQL superuser's or Argilla's role password."""
    settings = _settings(tmp_path / "laptop")
    units = {u.service: u for u in systemd.render(settings)}
    users = {name: _field(u.text, "User") for name, u in units.items()}
    assert users == {"redis": ["crowdpref-redis"], "argilla-server": ["crowdpref-argilla"],
                     "argilla-worker": ["crowdpref-argilla"], "prefect-server": ["crowdpref-prefect"],
                     "portal": ["crowdpref-portal"], "prefect-worker": ["crowdpref-worker"],
                     "caddy": ["crowdpref-caddy"]}
    secrets = str(settings.secrets_dir)
    given = {name: {line.split(":", 1)[0] for line in _field(u.text, "LoadCredential")} for name, u in units.items()}
    assert given == {"redis": {"redis.conf"}, "argilla-server": {"argilla-owner.json"}, "argilla-worker": set(),
                     "prefect-server": set(), "prefect-worker": set(), "caddy": set(),
                     "portal": {"argilla-account-key", "argilla-auth-secret"}}  # no owner key: it mints
    for name, unit in units.items():
        binds, hidden = _field(unit.text, "BindReadOnlyPaths"), _field(unit.text, "InaccessiblePaths")
        if name == "prefect-worker":  # it reads the secrets folder and the settings file itself
            assert not binds and not hidden and _field(unit.text, "CapabilityBoundingSet") == _field(
                unit.text, "AmbientCapabilities") == ["CAP_DAC_OVERRIDE CAP_FOWNER CAP_CHOWN"]
            continue
        assert (binds == [f"%d:{secrets}"]) if given[name] else (f"-{secrets}" in hidden), name
        assert f"-{REPO / 'crowdpref.settings.yaml'}" in hidden, name
        assert _field(unit.text, "CapabilityBoundingSet") == [""] and _field(unit.text, "NoNewPrivileges") == ["yes"]
        for folder in map(Path, _field(unit.text, "ReadWritePaths")):  # its own folders only
            assert folder != settings.secrets_dir and not folder.is_relative_to(settings.secrets_dir), name
    assert _field(units["redis"].text, "ReadWritePaths") == [str(settings.redis_dir)]
    assert _field(units["redis"].text, "IPAddressAllow") == ["localhost"]
    assert _field(units["portal"].text, "ReadWritePaths") == [str(settings.state_dir)]  # its SQLite store
    # the laptop stack's Caddy (plain HTTP on SITE_PORT, above 1024): its own folder and the logs, no
    # capability at all (the default HTTP_PORT 80 is not a port it listens on there); SITE_PORT 80 needs one
    assert _field(units["caddy"].text, "ReadWritePaths") == [str(settings.state_dir / "caddy"), str(settings.logs_dir)]
    assert _field(units["caddy"].text, "PrivateUsers") == ["yes"] and settings.http_port == 80
    low = {u.service: u for u in systemd.render(_settings(tmp_path / "low", site_port=80))}["caddy"].text
    assert _field(low, "AmbientCapabilities") == _field(low, "CapabilityBoundingSet") == ["CAP_NET_BIND_SERVICE"]
    # an Argilla crowdpref did not start: the portal still gets the signing key it signs sessions with
    external = _settings(tmp_path / "external", argilla_url="https://argilla.example.org", argilla_api_key="k")
    external.secrets_dir.mkdir(parents=True)
    (external.secrets_dir / "argilla-auth-secret").write_text("that-argillas-key")
    portal = next(u for u in systemd.render(external) if u.service == "portal")
    assert {line.split(":", 1)[0] for line in _field(portal.text, "LoadCredential")} == {
        "argilla-account-key", "argilla-auth-secret"}

    public = _public_settings(tmp_path)
    units = {u.service: u for u in systemd.render(public)}
    assert _confinement(units, "portal").credentials == ["argilla-account-key", "argilla-auth-secret",
                                                         "postgres-crowdpref"]
    assert not _field(units["portal"].text, "ReadWritePaths")  # its store is PostgreSQL
    caddy = units["caddy"].text
    assert _field(caddy, "User") == ["crowdpref-caddy"]
    assert _field(caddy, "AmbientCapabilities") == _field(caddy, "CapabilityBoundingSet") == ["CAP_NET_BIND_SERVICE"]
    assert f"-{public.secrets_dir}" in _field(caddy, "InaccessiblePaths")


def test_account_commands_make_the_users_and_give_each_its_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    settings = _settings(tmp_path)
    monkeypatch.setattr(systemd, "_user_exists", lambda name: name == "crowdpref-redis")
    commands = systemd.account_commands(settings, systemd.render(settings))
    made = [argv[-1] for argv in commands if argv[0] == "useradd"]
    assert made == ["crowdpref-argilla", "crowdpref-caddy", "crowdpref-portal", "crowdpref-prefect",
                    "crowdpref-worker"]  # not the existing one
    assert all(argv[:5] == ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir"] and
               argv[-2:-1] == ["/usr/sbin/nologin"] for argv in commands if argv[0] == "useradd")
    assert ["chown", "-R", "crowdpref-redis:crowdpref-redis", str(settings.redis_dir)] in commands
    assert ["chown", "-R", "crowdpref-argilla:crowdpref-argilla", str(settings.argilla_home)] in commands
    assert ["chgrp", "crowdpref-portal", str(settings.state_dir)] in commands  # the SQLite store beside it
    assert ["chgrp", "crowdpref-caddy", str(settings.logs_dir)] in commands  # Caddy writes its access log
    assert ["chown", "-R", "crowdpref-caddy:crowdpref-caddy", str(settings.state_dir / "caddy")] in commands
    assert ["chmod", "o+x", str(settings.state_dir)] in commands
    touched = [Path(argv[-1]) for argv in commands if argv[0] in ("chown", "chgrp", "chmod")]
    assert not any(p.is_relative_to(settings.secrets_dir) for p in touched)  # secrets stay root's


def test_unreachable_names_what_a_service_user_cannot_reach(tmp_path: Path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    settings = _settings(private)  # under /tmp (PrivateTmp hides it) and below a 0700 folder
    problems = systemd.unreachable(settings, systemd.render(settings))
    assert any("PrivateTmp=yes" in p and "CROWDPREF_HOME" in p for p in problems)
    closed = next(p for p in reversed(settings.state_dir.parents) if not p.stat().st_mode & 0o001)  # private, or above
    assert any(p.startswith(f"{closed}: ") and f"and {settings.state_dir} is below it" in p for p in problems)
    os.chmod(private, 0o711)
    assert not any(p.startswith(f"{private}: ") for p in systemd.unreachable(settings, systemd.render(settings)))


# the ratings on the systemd they were measured with (252, Debian 12; docs/how-to/server.md):
# there a unit that loses a hardening line (most are worth 0.1 or more) fails, not only one
# that passes a target (other versions weigh the lines differently: the targets alone)
MEASURED_ON = "systemd 252 "
MEASURED = {"redis": 1.1, "argilla-server": 1.1, "argilla-worker": 1.1, "prefect-server": 1.1, "portal": 1.2,
            "prefect-worker": 2.0, "postgres": 1.1, "caddy": 1.6,
            "caddy (laptop)": 1.2}  # no capability (SITE_PORT above 1024): PrivateUsers too


@needs_analyze
def test_systemd_analyze_security_rates_every_unit_within_the_targets(tmp_path: Path):
    """Issue 32's targets on systemd's own scale (``systemd-analyze security --offline=yes``,
    0 safest .. 10): the portal, the Argilla server and worker, Caddy and Redis 2.5 or lower;
    every unit (the Prefect worker, which runs the flows, included) 5.0 or lower. Before these
    units were hardened, every one was rated 9.6."""
    version = subprocess.run([ANALYZE, "--version"], check=False, capture_output=True, text=True).stdout
    same_systemd = version.startswith(MEASURED_ON)
    laptop = _settings(tmp_path / "laptop")
    paths = systemd.install(laptop, tmp_path / "laptop-units")
    try:
        public = _public_settings(tmp_path)
    except pytest.skip.Exception:
        public = None
    if public is not None:
        public_paths = systemd.install(public, tmp_path / "public-units")
        assert systemd.verify(public_paths) is True
    assert "crowdpref-caddy.service" in {p.name for p in paths}  # the laptop stack's one origin, rated too
    for profile, units in (("laptop", paths), ("public", public_paths if public is not None else [])):
        if not units:
            continue
        scores = {name.removeprefix("crowdpref-").removesuffix(".service"): score
                  for name, score in systemd.exposure(units).items()}
        assert len(scores) == len(units)
        for service, score in scores.items():
            limit = 2.5 if service in ("portal", "argilla-server", "argilla-worker", "caddy", "redis") else 5.0
            assert score <= limit, f"{service}: exposure {score} > {limit}"
            measured = MEASURED["caddy (laptop)" if (profile, service) == ("laptop", "caddy") else service]
            if same_systemd:
                assert score <= measured, f"{service} ({profile}): exposure {score} > {measured} (measured)"
    if public is None:
        pytest.skip("!!! only the laptop profile's units were rated: no PostgreSQL or Caddy here !!!")
