"""systemd units for the stack: ``crowdpref service install``.

One unit per long-running service of the profile, taken from the stack's own
:class:`~services.process.ServiceSpec` list (:func:`services.units.unit_specs`: PostgreSQL in
the public profile, Redis, the Argilla server and worker, the Prefect server, the portal, the
Prefect worker, Caddy: the participants' one origin, HTTPS at the public URL or, on the laptop
stack, plain HTTP on ``HOST:SITE_PORT``), so a unit runs the argv ``crowdpref up`` would.
Each unit ``crowdpref-<service>.service``:

- ``Restart=on-failure`` (after ``RestartSec=2``) and ``WantedBy=multi-user.target`` (started at
  boot once enabled);
- ``After=`` and ``Requires=`` on the units of the services it needs (the Argilla server on
  Redis, the Prefect worker on the Prefect server, ...);
- its environment in an ``EnvironmentFile=`` in ``<state>/secrets/systemd/<service>.env``
  (mode 0600, folder 0700, read by systemd as root before the service starts): no value of it,
  secret or not, is written into the unit itself; the Prefect server's is trimmed to Prefect's
  own variables (:func:`unit_environment`: it runs no flow, so it gets no token);
- its output appended to ``<state>/logs/<service>.log``, where ``crowdpref up`` writes it too
  (systemd opens the file as root, so the service's own user needs no write access there);
- the Argilla server's database migration and owner account as ``ExecStartPre=`` steps (what
  ``up`` does before starting it).

Least privilege (:data:`USERS`, :func:`confinement`; issue 32, item 5):

- **One unprivileged system user per service**: ``crowdpref-redis``, ``crowdpref-argilla`` (the
  Argilla server and its worker: one program, one home folder, one database), ``crowdpref-prefect``
  (the Prefect server), ``crowdpref-portal``, ``crowdpref-caddy`` (which gets
  ``CAP_NET_BIND_SERVICE`` and nothing else when a port it listens on is below 1024: 80 and 443
  in the public profile, ``SITE_PORT`` on the laptop stack only if set that low; otherwise no
  capability, as every other unit); PostgreSQL runs as Debian's
  ``postgres`` (its prepare and provision steps run as root, ``+`` prefix, as ``up`` runs them).
  The exception is the **Prefect worker** (``crowdpref-worker``): it runs the flows, which read
  and write what the ``crowdpref`` command does as root (run folders the command made, the store,
  backups of the whole secrets folder, the Hub token and LLM key of the settings file), so it
  keeps ``CAP_DAC_OVERRIDE``/``CAP_FOWNER``/``CAP_CHOWN`` (ambient, and its only capabilities):
  it can read and write any file, as root could, but cannot bind a low port, change user, load a
  module, trace another process or mount anything. Treat it as trusted as the operator. ``crowdpref service install`` (as root,
  into /etc/systemd/system) runs :func:`account_commands`: it creates the missing users
  (``useradd --system``) and gives each its folders (``chown -R``, 0700); with ``--dir`` it
  prints those commands instead.
- **Each unit reads only its own secrets.** The files of ``<state>/secrets`` stay root's (0600).
  A unit that needs some gets them with ``LoadCredential=`` (systemd, as root, copies each into
  the unit's private credentials folder ``%d``, readable by the unit's user only) and that
  folder bind-mounted read-only over ``<state>/secrets`` (``BindReadOnlyPaths=%d:<state>/secrets``),
  so the library reads them where it always does and sees no other file there: the portal gets
  Argilla's token-signing key (it signs participants' Argilla sessions with it, for the
  embedded Argilla and one at ``CROWDPREF_ARGILLA_URL`` alike, and, for the embedded one, the
  owner sessions it manages participants' accounts and datasets with, never the owner's API
  key), the key of participants' account passwords
  and, in the public profile, the store's PostgreSQL
  password - not the PostgreSQL superuser's or Argilla's role password, nor the Hub token or
  LLM key (they are in the settings file, hidden too, and the worker's environment file only).
  The Argilla server gets the owner's credentials (its ``ensure-owner`` step); every other unit
  but the worker gets none: ``InaccessiblePaths=<state>/secrets``.
- **Hardening** (:func:`hardening`): ``NoNewPrivileges``, ``ProtectSystem=strict`` with
  ``ReadWritePaths=`` only the service's own folders, ``ProtectHome=yes`` (``read-only`` when the
  state folder or the code is under /home; under /root no service user can reach it:
  ``install`` refuses), ``PrivateTmp``, ``PrivateDevices``, the kernel, clock, hostname, control
  group and /proc protections, ``RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6``, no
  namespaces, realtime, SUID or personality changes, ``MemoryDenyWriteExecute`` (not for
  PostgreSQL, whose JIT needs it), ``SystemCallFilter=@system-service`` minus ``@privileged`` and
  ``@resources`` (failing with EPERM), an empty capability set, ``UMask=0077`` (the worker's
  ``0027``: the portal's group reads what it writes) and, for the
  services only this host talks to (PostgreSQL, Redis, the Argilla units, the Prefect server),
  ``IPAddressAllow=localhost``. ``systemd-analyze security --offline=yes`` rates the portal,
  the Argilla units, Caddy and Redis 2.5 or lower and every unit 5.0 or lower (a test holds it).

The state folder: the services' users pass through it (``o+x``, no listing); the laptop
profile's SQLite store is a file in its root, so there the folder's group is
``crowdpref-portal`` with write access (the public profile's store is PostgreSQL: the portal
writes nothing in the state folder); Caddy writes its access log itself, so the logs folder's
group is ``crowdpref-caddy``. The run folders (``<state>/studies``) belong
to ``crowdpref-portal``'s group (setgid folders, no access for others): the portal reads the
stage outputs the flows write (questions, pairs), never a run folder's ``private/``.

``crowdpref up`` run as root starts the services as these same users, from the same
confinements, where no systemd does it (services/privileges.py).

:func:`verify` runs ``systemd-analyze verify`` on the written units where that program exists.
It needs no running systemd (it works in a container whose PID 1 is not systemd): it parses
each unit, checks that every ``ExecStart`` program exists and is executable and that every unit
named in ``Requires=`` can be found (in the same folder or systemd's own), and reports unknown
keys and values it cannot parse. Any message about one of our units fails the check.
:func:`exposure` runs ``systemd-analyze security --offline=yes`` on unit files.

The units are not enabled or started here: ``systemctl daemon-reload`` then ``systemctl enable
--now crowdpref-<service>`` (the command prints the line). Under systemd the keepers
(services/keeper.py) are not needed, and ``crowdpref status`` does not see the units'
processes (they have no pid record): ``systemctl status 'crowdpref-*'`` does.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crowdpref import account_passwords
from crowdpref.errors import ConfigError, ServiceError
from crowdpref.runfolder import write_text
from crowdpref.settings import DEFAULT_SETTINGS_FILE, Settings
from services import postgres
from services.process import ServiceSpec

SYSTEM_DIR = Path("/etc/systemd/system")
PREFIX = "crowdpref-"
ROOT = "root"
# the account each service runs as (a service the stack adds later: crowdpref-<service>)
USERS = {
    postgres.NAME: postgres.SERVER_USER,  # Debian's package makes it
    "redis": "crowdpref-redis",
    "argilla-server": "crowdpref-argilla",
    "argilla-worker": "crowdpref-argilla",
    "prefect-server": "crowdpref-prefect",
    "portal": "crowdpref-portal",
    "caddy": "crowdpref-caddy",
    "prefect-worker": "crowdpref-worker",  # runs the flows: with capabilities to reach the operator's files (above)
}
# services only this host talks to: IPAddressAllow=localhost (and the stack's own address)
LOCAL_ONLY = frozenset({postgres.NAME, "redis", "argilla-server", "argilla-worker", "prefect-server"})
# the environment a unit gets where the spec's is wider than the service needs (see unit_environment)
BASIC_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "SSL_CERT_FILE",
             "SSL_CERT_DIR")
WORKER_CAPS = ("CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_CHOWN")
NOLOGIN = "/usr/sbin/nologin"


@dataclass
class Confinement:
    """What one unit may do (see the module docstring)."""

    user: str
    writes: list[Path] = field(default_factory=list)  # ReadWritePaths=
    owned: list[Path] = field(default_factory=list)  # folders chowned (recursively) to the user, 0700
    group_writable: list[Path] = field(default_factory=list)  # folders whose group is the user's, g+rwx
    group_readable: list[Path] = field(default_factory=list)  # folders whose group is the user's, g+rX (setgid)
    credentials: list[str] = field(default_factory=list)  # file names in <state>/secrets (LoadCredential=)
    capabilities: tuple[str, ...] = ()
    local_only: bool = False
    write_execute: bool = False  # True: no MemoryDenyWriteExecute (a JIT)
    proc_subset: bool = False  # ProcSubset=pid: tried with this service (it reads no /proc/meminfo etc.)
    all_secrets: bool = False  # the worker: reads the secrets folder itself


@dataclass
class Unit:
    service: str
    text: str  # the unit file
    environment: dict[str, str]  # what goes in its EnvironmentFile (0600)
    env_file: Path
    confinement: Confinement | None = None

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


def exec_line(argv: list[str] | tuple[str, ...], prefix: str = "") -> str:
    """An ``Exec*=`` value; ``prefix``: systemd's ``+`` (run with full privileges, unconfined)."""
    if not argv or not os.path.isabs(argv[0]):
        raise ConfigError(f"{argv[:1]}: a systemd unit needs the program's absolute path")
    return prefix + " ".join(quote_arg(str(a)) for a in argv)


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


def unit_environment(settings: Settings, spec: ServiceSpec) -> dict[str, str]:
    """The unit's environment: the spec's, except the Prefect server's, which ``up`` gives the
    whole environment of the command (tokens included): it keeps Prefect's own variables and
    :data:`BASIC_ENV`, with ``HOME`` in its own folder (it runs no flow)."""
    env = dict(spec.env)
    if spec.name == "prefect-server":
        env = {k: v for k, v in env.items() if k.startswith("PREFECT_") or k in BASIC_ENV}
        env["HOME"] = str(settings.prefect_home)
    return env


def _store_folder(settings: Settings) -> Path | None:
    """The folder of the study store when it is an SQLite file (the portal writes it), else None."""
    url = settings.database_url.get_secret_value() if settings.database_url is not None else None
    if url is None:
        return None if settings.public else settings.state_dir
    if url.startswith("sqlite") and ":///" in url:
        return Path(url.split(":///", 1)[1].split("?", 1)[0]).parent
    return None


def caddy_ports(settings: Settings) -> tuple[int, ...]:
    """The ports Caddy listens on: HTTP and HTTPS in the public profile; the laptop stack's one
    plain-HTTP site (``site_port``) otherwise (``auto_https off``: no port 80 there)."""
    return (settings.http_port, settings.https_port) if settings.public else (settings.site_port,)


def confinement(settings: Settings, spec: ServiceSpec, user: str | None = None) -> Confinement:
    """The user, folders, secrets and limits of the service's unit (``user``: one account for
    every unit but PostgreSQL's, instead of :data:`USERS`)."""
    name = spec.name
    account = USERS.get(name, f"{PREFIX}{name}")
    if user and name != postgres.NAME:
        account = user
    conf = Confinement(account, local_only=name in LOCAL_ONLY)
    if name == postgres.NAME:
        folder = Path(spec.cwd or postgres.data_folder(settings))
        conf.writes = [folder]  # its own folder: `prepare` (run as root) chowns it
        conf.write_execute = True  # PostgreSQL's JIT (jit=on by default)
    elif name == "redis":
        conf.writes = conf.owned = [settings.redis_dir]
        conf.proc_subset = True
    elif name in ("argilla-server", "argilla-worker"):
        conf.writes = conf.owned = [settings.argilla_home]
    elif name == "prefect-server":
        conf.writes = conf.owned = [settings.prefect_home]
    elif name == "portal":
        conf.proc_subset = True
        conf.group_readable = [settings.runs_dir]  # the stage outputs it serves (questions, pairs)
        store = _store_folder(settings)
        if store is not None:  # SQLite: the database and its -wal/-shm files beside it
            conf.writes = conf.group_writable = [store]
        conf.credentials.append(account_passwords.KEY_FILE)  # participants' account passwords (derived)
        # it signs participants' Argilla sessions (any Argilla's: an external one's key is put there by
        # hand, crowdpref.portal.argilla_session.check_signing_key) and, for the embedded Argilla, its own
        # as the owner (never the owner's API key: services/portal.py)
        conf.credentials.append("argilla-auth-secret")
        if settings.public and settings.database_url is None:
            from crowdpref.store.engine import public_password_file

            conf.credentials.append(public_password_file(settings.secrets_dir).name)
    elif name == "caddy":
        folder = Path(spec.cwd or settings.state_dir / "caddy")
        conf.writes = [folder, settings.logs_dir]  # its data and config; its access log
        conf.owned = [folder]
        conf.proc_subset = True
        conf.group_writable = [settings.logs_dir]
        if min(caddy_ports(settings)) < 1024:  # (a port under 1024 needs it: 80 and 443, or a low SITE_PORT)
            conf.capabilities = ("CAP_NET_BIND_SERVICE",)
    elif name == "prefect-worker":
        conf.writes = [settings.state_dir]
        conf.capabilities = WORKER_CAPS
        conf.all_secrets = True
    # a file of the secrets folder its command (or a start step) names: Redis's config file
    # (requirepass), the owner's credentials of Argilla's ensure-owner step
    for argv in (spec.argv, *(step for _prefix, step in _pre_start(settings, spec))):
        for word in map(str, argv):
            if os.path.isabs(word) and Path(word).parent == settings.secrets_dir and \
                    Path(word).name not in conf.credentials and not conf.all_secrets and account != ROOT:
                conf.credentials.append(Path(word).name)
    return conf


def _settings_files(settings: Settings) -> list[Path]:
    """Settings files that may hold the Hub token or the LLM key: hidden from every unit but the
    worker's (the portal reads an empty one of its own, see services/portal.py)."""
    from crowdpref.project import project_root

    files = {project_root() / DEFAULT_SETTINGS_FILE, Path.cwd() / DEFAULT_SETTINGS_FILE}
    if os.environ.get("CROWDPREF_SETTINGS"):
        files.add(Path(os.environ["CROWDPREF_SETTINGS"]).expanduser().resolve())
    return sorted(files)


def _under(path: Path, folder: str) -> bool:
    return Path(path).resolve().is_relative_to(folder)


def code_paths(settings: Settings, specs: list[ServiceSpec]) -> list[Path]:
    """What the units run or read besides the state folder: the checkout and each program."""
    from crowdpref.project import project_root

    return [project_root(), *(Path(spec.argv[0]) for spec in specs)]


def protect_home(settings: Settings, specs: list[ServiceSpec]) -> str:
    """``ProtectHome=`` for these units: ``yes``, or ``read-only`` when the state folder or
    the code is under /home (their folders stay reachable; ``ReadWritePaths=`` still apply)."""
    paths = [settings.state_dir, *code_paths(settings, specs)]
    return "read-only" if any(_under(p, "/home") for p in paths) else "yes"


def _ip_allow(settings: Settings) -> str | None:
    """``IPAddressAllow=`` of a local-only service: localhost and the stack's own address;
    None (no limit) when the stack listens on every address (0.0.0.0, ::) or a host name."""
    try:
        address = ipaddress.ip_address(settings.host)
    except ValueError:
        return None
    if address.is_loopback:
        return "localhost"
    if address.is_unspecified:
        return None
    return f"localhost {address}"


def hardening(settings: Settings, conf: Confinement, home: str) -> list[str]:
    """The ``[Service]`` lines that confine a unit (scored by ``systemd-analyze security``)."""
    root = conf.user == ROOT
    lines = [
        "NoNewPrivileges=yes",
        f"ProtectSystem={'full' if root else 'strict'}",
        f"ProtectHome={'tmpfs' if root and home == 'yes' else home}",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "DevicePolicy=closed",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "ProtectProc=invisible",
        *(["ProcSubset=pid"] if conf.proc_subset else []),
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "RemoveIPC=yes",
        "KeyringMode=private",
        *([] if conf.write_execute else ["MemoryDenyWriteExecute=yes"]),
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        # (the worker keeps @chown, which its capabilities allow)
        "SystemCallFilter=~@privileged @resources" if not root and not conf.all_secrets else
        "SystemCallFilter=~@resources @mount @swap @reboot @module @raw-io @clock @cpu-emulation @debug @obsolete",
        "SystemCallErrorNumber=EPERM",
        f"CapabilityBoundingSet={' '.join(conf.capabilities)}",
        f"AmbientCapabilities={' '.join(conf.capabilities) if not root else ''}",
        # (the worker's files: read by the portal's group where it reads them, see account_commands)
        f"UMask={'0027' if conf.all_secrets else '0077'}",
    ]
    if not root and not conf.capabilities:
        lines.append("PrivateUsers=yes")  # (not Caddy: a capability in a user namespace binds no port)
    allow = _ip_allow(settings) if conf.local_only else None
    if allow:
        lines += ["IPAddressDeny=any", f"IPAddressAllow={allow}"]
    lines += [f"ReadWritePaths={quote_arg(str(path))}" for path in conf.writes]
    secrets_dir = quote_arg(str(settings.secrets_dir))
    if conf.credentials:
        lines += [f"LoadCredential={name}:{quote_arg(str(settings.secrets_dir / name))}" for name in conf.credentials]
        lines.append(f"BindReadOnlyPaths=%d:{secrets_dir}")  # its own secrets, where the library reads them
    elif not conf.all_secrets:
        lines.append(f"InaccessiblePaths=-{secrets_dir}")
    if not conf.all_secrets:
        lines += [f"InaccessiblePaths=-{quote_arg(str(path))}" for path in _settings_files(settings)]
    return lines


def _pre_start(settings: Settings, spec: ServiceSpec) -> list[tuple[str, list[str]]]:
    """What ``crowdpref up`` does before starting a service, as ``ExecStartPre=`` steps
    (prefix, argv): PostgreSQL's as root (``+``), as ``up`` runs it."""
    from services.argilla import service as argilla

    if spec.name == argilla.SERVER:
        python, launcher = str(argilla.server_python(settings)), str(argilla.LAUNCHER)
        return [("", [python, launcher, "database", "migrate"]),
                ("", [python, launcher, "ensure-owner", str(settings.owner_credentials_file)])]
    if spec.name == postgres.NAME:
        return [("+", postgres.unit_steps(settings)[0])]  # the folder and, on first use, the cluster
    return []


def _post_start(settings: Settings, spec: ServiceSpec) -> list[tuple[str, list[str]]]:
    """What ``crowdpref up`` does once a service runs, as ``ExecStartPost=`` steps: PostgreSQL's
    roles and databases (the units that need it start after this step), as root."""
    if spec.name == postgres.NAME:
        return [("+", postgres.unit_steps(settings)[1])]
    return []


def _start_argv(spec: ServiceSpec) -> list[str]:
    """The spec's argv without ``runuser -u USER --`` or ``setpriv ... --`` (``up`` as root runs
    PostgreSQL so; the unit's ``User=`` does it)."""
    argv = [str(a) for a in spec.argv]
    if os.path.basename(argv[0]) in ("runuser", "setpriv") and "--" in argv:
        return argv[argv.index("--") + 1:]
    return argv


def render(settings: Settings, user: str | None = None,
           specs: list[tuple[ServiceSpec, tuple[str, ...]]] | None = None) -> list[Unit]:
    """The units of this profile (``specs``: default :func:`services.units.unit_specs`);
    ``user``: one account every service runs as (``User=``; PostgreSQL's stays ``postgres``)
    instead of one account per service (:data:`USERS`)."""
    if specs is None:
        from services import units

        specs = units.unit_specs(settings)
    present = {spec.name for spec, _needs in specs}
    home = protect_home(settings, [spec for spec, _ in specs])
    units = []
    for spec, needs in specs:
        deps = " ".join(unit_name(n) for n in needs if n in present)
        env_file = env_folder(settings) / f"{spec.name}.env"
        log = settings.logs_dir / f"{spec.name}.log"
        conf = confinement(settings, spec, user)
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
        if conf.user != ROOT:
            lines.append(f"User={conf.user}")
        lines += [
            f"WorkingDirectory={quote_arg(str(spec.cwd or settings.state_dir))}",
            f"EnvironmentFile={quote_arg(str(env_file))}",
        ]
        lines += [f"ExecStartPre={exec_line(step, prefix)}" for prefix, step in _pre_start(settings, spec)]
        lines += [
            f"ExecStart={exec_line(_start_argv(spec))}",
            *(f"ExecStartPost={exec_line(step, prefix)}" for prefix, step in _post_start(settings, spec)),
            "Restart=on-failure",
            "RestartSec=2",
            f"TimeoutStartSec={int(spec.start_timeout_s) + 60}",
            "TimeoutStopSec=30",
            f"StandardOutput=append:{log}",
            "StandardError=inherit",
            *hardening(settings, conf, home),
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
        units.append(Unit(spec.name, "\n".join(lines), unit_environment(settings, spec), env_file, conf))
    return units


def default_dir() -> Path:
    """/etc/systemd/system when run as root; otherwise the caller must name a folder."""
    if os.geteuid() != 0:
        raise ConfigError("crowdpref service install: only root can write /etc/systemd/system: run it as root, "
                          "or pass --dir FOLDER and copy the units there yourself")
    return SYSTEM_DIR


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def account_commands(settings: Settings, units: list[Unit]) -> list[list[str]]:
    """The commands that make the units' accounts and give each its folders: ``useradd
    --system`` for a missing user (its own group, no home, no login), then ``chown``/``chmod``
    (see the module docstring). Idempotent: running them again changes nothing."""
    commands: list[list[str]] = []
    users = sorted({u.confinement.user for u in units if u.confinement and u.confinement.user != ROOT})
    for name in users:
        if not _user_exists(name):
            commands.append(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                             "--shell", NOLOGIN, name])
    state = str(settings.state_dir)
    commands.append(["chmod", "o+x", state])  # the services' users pass through, list nothing
    done: set[Path] = set()
    for unit in units:
        conf = unit.confinement
        if conf is None or conf.user in (ROOT, postgres.SERVER_USER):
            continue
        for folder in conf.owned:
            if folder not in done:
                done.add(folder)
                commands += [["mkdir", "-p", str(folder)], ["chown", "-R", f"{conf.user}:{conf.user}", str(folder)],
                             ["chmod", "0700", str(folder)]]
        own_settings = unit.environment.get("CROWDPREF_SETTINGS")  # the portal's own (empty) settings file
        if own_settings and Path(own_settings).is_relative_to(settings.state_dir):
            commands.append(["chown", f"{conf.user}:{conf.user}", own_settings])
        for folder in conf.group_writable:
            commands += [["mkdir", "-p", str(folder)], ["chgrp", conf.user, str(folder)],
                         ["chmod", "g+rwx,o+x", str(folder)]]
        for folder in conf.group_readable:
            # the group reads what is there and, through the setgid folders, what is written later
            # (files get a plain open's mode, 0644 less the umask); never a `private` folder (0700: key
            # salts, participants' key mappings), and nobody else enters (o-rwx)
            commands += [["mkdir", "-p", str(folder)], ["chgrp", "-R", conf.user, str(folder)],
                         ["chmod", "o-rwx", str(folder)],
                         ["find", str(folder), "-name", "private", "-prune", "-o", "-type", "d", "-exec", "chmod",
                          "g+rxs", "{}", "+"],
                         ["find", str(folder), "-name", "private", "-prune", "-o", "-type", "f", "-exec", "chmod",
                          "g+r", "{}", "+"]]
    return commands


def run_commands(commands: list[list[str]], log: Callable[[str], None] = lambda line: None) -> None:
    """Run :func:`account_commands` (as root); the first failure raises one line."""
    for argv in commands:
        log(shlex.join(argv))
        try:
            result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
        except OSError as exc:
            raise ServiceError(f"{shlex.join(argv)}: {exc.strerror or exc}: install {argv[0]} (passwd, coreutils)") from None
        if result.returncode != 0:
            reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
            raise ServiceError(f"{shlex.join(argv)} failed: {reason[:300]}")


def unreachable(settings: Settings, units: list[Unit], private_tmp: bool = True) -> list[str]:
    """Why the units' own users could not run them, one line each (empty: nothing found): the
    state folder under /tmp (each unit gets a private one: ``PrivateTmp=yes``; ``private_tmp``
    False: not asked, ``crowdpref up`` gives its services none), or a folder
    on the way to the state folder, the checkout or a program they run that others cannot pass
    through (no ``o+x``: /root, a pyenv interpreter under /root, a 0700 home)."""
    from crowdpref.project import project_root

    problems = []
    state = settings.state_dir
    for tmp in ("/tmp", "/var/tmp") if private_tmp else ():
        if state.is_relative_to(tmp):
            problems.append(f"{state}: the state folder is under {tmp}, which every unit sees as its own empty "
                            "folder (PrivateTmp=yes): move it (CROWDPREF_HOME=/srv/crowdpref)")
    paths = [state, project_root()]
    for unit in units:
        for line in unit.text.splitlines():
            key, _, value = line.partition("=")
            if key in ("ExecStart", "ExecStartPre", "ExecStartPost") and not value.startswith("+"):
                paths.append(Path(shlex.split(value)[0]))
    seen: set[Path] = set()
    for path in paths:
        resolved = Path(path).resolve()
        for parent in reversed(resolved.parents):
            if parent in seen:
                continue
            seen.add(parent)
            if parent.exists() and not parent.stat().st_mode & 0o001:
                shown = str(path) if resolved == Path(path) else f"{path} (-> {resolved})"
                problems.append(f"{parent}: the services' own users cannot pass through it (no o+x), and {shown} "
                                f"is below it: move that (e.g. to /srv or /opt) or run `chmod o+x {parent}`")
                break
    return problems


def install(settings: Settings, folder: Path, user: str | None = None,
            specs: list[tuple[ServiceSpec, tuple[str, ...]]] | None = None) -> list[Path]:
    """Write the units into ``folder`` and their environment files (0600) into the secrets
    folder; returns the unit files' paths. The accounts are :func:`account_commands`' job."""
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


def _analyze_env() -> dict[str, str]:
    return {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}


def verify(paths: list[Path], program: str | None = None) -> bool:
    """Check the unit files with ``systemd-analyze verify``. False when the program is missing
    (nothing checked); raises :class:`ServiceError` naming the first problem found."""
    program = program or analyzer()
    if program is None:
        return False
    result = subprocess.run([program, "verify", "--man=no", *map(str, paths)], check=False, capture_output=True, text=True,
                            timeout=120, env=_analyze_env())
    ours = {p.name for p in paths} | {str(p) for p in paths}
    problems = [line.strip() for line in (result.stdout + result.stderr).splitlines()
                if line.strip() and any(name in line for name in ours)]
    if result.returncode != 0 or problems:
        first = problems[0] if problems else (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
        raise ServiceError(f"systemd-analyze verify found a problem in the units: {first[:400]} "
                           f"(fix it, or the settings it comes from, and install again)")
    return True


def exposure(paths: list[Path], program: str | None = None) -> dict[str, float]:
    """``systemd-analyze security --offline=yes``'s overall exposure of each unit file (0.0
    safest, 10.0 least safe), by file name, in one call. Raises :class:`ServiceError` when a
    file gets no rating."""
    program = program or analyzer()
    if program is None:
        raise ServiceError("systemd-analyze is not installed: install Debian's systemd package")
    result = subprocess.run([program, "security", "--offline=yes", "--no-pager", *map(str, paths)], check=False,
                            capture_output=True, text=True, timeout=120, env=_analyze_env())
    scores = {}
    for line in result.stdout.splitlines():
        if "Overall exposure level for " in line:
            name, _, rest = line.split("Overall exposure level for ", 1)[1].partition(": ")
            scores[name] = float(rest.split()[0])
    missing = [p.name for p in paths if p.name not in scores]
    if missing:
        reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
        raise ServiceError(f"systemd-analyze security rated no exposure for {missing[0]}: {reason[:300]}")
    return scores
