"""systemd units for the stack: ``crowdpref service install``.

One unit per long-running service of the profile, taken from the stack's own
:class:`~services.process.ServiceSpec` list (:func:`services.stack.unit_specs`: Redis, the
Argilla server and worker, the Prefect server, the portal, the Prefect worker, and whatever
service the profile adds there), so a unit runs exactly the argv and environment ``crowdpref up``
would. Each unit ``crowdpref-<service>.service``:

- ``Restart=on-failure`` (after ``RestartSec=2``) and ``WantedBy=multi-user.target`` (started at
  boot once enabled);
- ``After=`` and ``Requires=`` on the units of the services it needs (the Argilla server on
  Redis, the Prefect worker on the Prefect server, ...);
- its environment in an ``EnvironmentFile=`` in ``<state>/secrets/systemd/<service>.env``
  (mode 0600, folder 0700): no value of it, secret or not, is written into the unit itself;
- its output appended to ``<state>/logs/<service>.log``, where ``crowdpref up`` writes it too;
- the Argilla server's database migration and owner account as ``ExecStartPre=`` steps (what
  ``up`` does before starting it).

:func:`verify` runs ``systemd-analyze verify`` on the written units where that program exists.
It needs no running systemd (it works in a container whose PID 1 is not systemd): it parses
each unit, checks that every ``ExecStart`` program exists and is executable and that every unit
named in ``Requires=`` can be found (in the same folder or systemd's own), and reports unknown
keys and values it cannot parse. Any message about one of our units fails the check.

The units are not enabled or started here: ``systemctl daemon-reload`` then ``systemctl enable
--now crowdpref-<service>`` (the command prints the line). Under systemd the supervisor
(services/supervisor.py) is not needed, and ``crowdpref status`` does not see the units'
processes (they have no pid record): ``systemctl status 'crowdpref-*'`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from crowdpref.errors import ConfigError, ServiceError
from crowdpref.runfolder import write_text
from crowdpref.settings import Settings
from services import postgres
from services.process import ServiceSpec

SYSTEM_DIR = Path("/etc/systemd/system")
PREFIX = "crowdpref-"


@dataclass
class Unit:
    service: str
    text: str  # the unit file
    environment: dict[str, str]  # what goes in its EnvironmentFile (0600)
    env_file: Path

    @property
    def file_name(self) -> str:
        return unit_name(self.service)


def unit_name(service: str) -> str:
    return f"{PREFIX}{service}.service"


def env_folder(settings: Settings) -> Path:
    return settings.secrets_dir / "systemd"


def quote_arg(arg: str) -> str:
    """One word of an ``Exec*=`` line: ``%`` and ``$`` escaped (no specifier or variable is
    expanded), quoted when it holds a space, a quote or a backslash."""
    if "\n" in arg or "\r" in arg:
        raise ConfigError(f"a command word holds a line break ({arg[:40]!r}...): a systemd unit cannot carry it")
    word = arg.replace("%", "%%").replace("$", "$$")
    if not word or any(c in word for c in " \t\"'\\;"):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def exec_line(argv: list[str] | tuple[str, ...]) -> str:
    if not argv or not os.path.isabs(argv[0]):
        raise ConfigError(f"{argv[:1]}: a systemd unit needs the program's absolute path")
    return " ".join(quote_arg(str(a)) for a in argv)


def env_file_text(environment: dict[str, str]) -> str:
    """``KEY="value"`` lines as systemd's EnvironmentFile reads them (backslash and double
    quote escaped); a value with a line break is refused."""
    lines = []
    for key, value in sorted(environment.items()):
        if not key.replace("_", "a").isalnum() or key[0].isdigit():
            continue  # not a name systemd accepts (nor a shell); such a variable is nobody's setting
        if "\n" in value or "\r" in value:
            raise ConfigError(f"environment variable {key} holds a line break: unset it or fix its value "
                              "before writing systemd units")
        lines.append(f'{key}="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "\n".join(lines) + "\n"


def _pre_start(settings: Settings, spec: ServiceSpec) -> list[list[str]]:
    """What ``crowdpref up`` does before starting a service, as ``ExecStartPre=`` steps."""
    from services.argilla import service as argilla

    if spec.name == argilla.SERVER:
        python, launcher = str(argilla.server_python(settings)), str(argilla.LAUNCHER)
        return [[python, launcher, "database", "migrate"],
                [python, launcher, "ensure-owner", str(settings.owner_credentials_file)]]
    if spec.name == postgres.NAME:
        return [postgres.unit_steps(settings)[0]]  # the folder and, on first use, the cluster
    return []


def _post_start(settings: Settings, spec: ServiceSpec) -> list[list[str]]:
    """What ``crowdpref up`` does once a service runs, as ``ExecStartPost=`` steps: PostgreSQL's
    roles and databases (the units that need it start after this step)."""
    if spec.name == postgres.NAME:
        return [postgres.unit_steps(settings)[1]]
    return []


def render(settings: Settings, user: str | None = None,
           specs: list[tuple[ServiceSpec, tuple[str, ...]]] | None = None) -> list[Unit]:
    """The units of this profile (``specs``: default :func:`services.stack.unit_specs`);
    ``user``: the account the services run as (``User=``; none: systemd's default, root)."""
    if specs is None:
        from services import stack

        specs = stack.unit_specs(settings)
    present = {spec.name for spec, _needs in specs}
    units = []
    for spec, needs in specs:
        deps = " ".join(unit_name(n) for n in needs if n in present)
        env_file = env_folder(settings) / f"{spec.name}.env"
        log = settings.logs_dir / f"{spec.name}.log"
        lines = [
            "# written by `crowdpref service install`: edit the settings and run it again instead",
            "[Unit]",
            f"Description=crowdpref {spec.name} (state folder {settings.state_dir})",
            f"After=network-online.target {deps}".rstrip(),
            "Wants=network-online.target",
        ]
        if deps:
            lines.append(f"Requires={deps}")
        lines += ["", "[Service]", "Type=simple"]
        if user:
            lines.append(f"User={user}")
        lines += [
            f"WorkingDirectory={quote_arg(str(spec.cwd or settings.state_dir))}",
            f"EnvironmentFile={quote_arg(str(env_file))}",
        ]
        lines += [f"ExecStartPre={exec_line(step)}" for step in _pre_start(settings, spec)]
        lines += [
            f"ExecStart={exec_line(list(spec.argv))}",
            *(f"ExecStartPost={exec_line(step)}" for step in _post_start(settings, spec)),
            "Restart=on-failure",
            "RestartSec=2",
            f"TimeoutStartSec={int(spec.start_timeout_s) + 60}",
            "TimeoutStopSec=30",
            f"StandardOutput=append:{log}",
            "StandardError=inherit",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
        units.append(Unit(spec.name, "\n".join(lines), dict(spec.env), env_file))
    return units


def default_dir() -> Path:
    """/etc/systemd/system when run as root; otherwise the caller must name a folder."""
    if os.geteuid() != 0:
        raise ConfigError("crowdpref service install: only root can write /etc/systemd/system: run it as root, "
                          "or pass --dir FOLDER and copy the units there yourself")
    return SYSTEM_DIR


def install(settings: Settings, folder: Path, user: str | None = None,
            specs: list[tuple[ServiceSpec, tuple[str, ...]]] | None = None) -> list[Path]:
    """Write the units into ``folder`` and their environment files (0600) into the secrets
    folder; returns the unit files' paths."""
    units = render(settings, user, specs)
    folder.mkdir(parents=True, exist_ok=True)
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for unit in units:
        write_text(env_file_text(unit.environment), unit.env_file, private=True)
        path = folder / unit.file_name
        write_text(unit.text, path)
        os.chmod(path, 0o644)
        paths.append(path)
    return paths


def analyzer() -> str | None:
    return shutil.which("systemd-analyze")


def verify(paths: list[Path], program: str | None = None) -> bool:
    """Check the unit files with ``systemd-analyze verify``. False when the program is missing
    (nothing checked); raises :class:`ServiceError` naming the first problem found."""
    program = program or analyzer()
    if program is None:
        return False
    result = subprocess.run([program, "verify", "--man=no", *map(str, paths)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""})
    ours = {p.name for p in paths} | {str(p) for p in paths}
    problems = [line.strip() for line in (result.stdout + result.stderr).splitlines()
                if line.strip() and any(name in line for name in ours)]
    if result.returncode != 0 or problems:
        first = problems[0] if problems else (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
        raise ServiceError(f"systemd-analyze verify found a problem in the units: {first[:400]} "
                           f"(fix it, or the settings it comes from, and install again)")
    return True
