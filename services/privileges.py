"""Each service as its own unprivileged user when ``crowdpref up`` runs as root.

Under systemd the units do it (services/systemd.py, ``crowdpref service install``). Without
systemd, ``crowdpref up`` would start every service as root. So when it runs as root and the setting ``service_users`` says so (``auto``,
the default: in the public profile; ``per-service``: on any profile; ``off``: never), it drops
privileges the way the units do (:func:`manager` gives the :class:`ProcessManager` that does it):

- **The same accounts**: :data:`services.systemd.USERS` (``crowdpref-redis``,
  ``crowdpref-argilla``, ``crowdpref-prefect``, ``crowdpref-portal``, ``crowdpref-caddy``,
  ``crowdpref-worker``; PostgreSQL runs as ``postgres`` already), made and given their folders
  by the same commands (:func:`services.systemd.account_commands`: ``useradd --system`` for a
  missing one, ``chown``/``chmod`` of its folders), run at every ``up`` (they change nothing the
  second time).
- **Started through ``setpriv``** (util-linux): the service's user and group and that user's
  groups, ``--no-new-privs``, and a capability bounding set of what its unit gets and nothing
  else, raised as ambient capabilities: Caddy ``CAP_NET_BIND_SERVICE`` when a port is below 1024;
  the Prefect worker ``CAP_DAC_OVERRIDE``, ``CAP_FOWNER`` and ``CAP_CHOWN`` (it runs the flows,
  which read and write the operator's files: see services/systemd.py); every other service none.
  No service can become root again.
- **Its own secrets only.** The files of the secrets folder its unit gets with
  ``LoadCredential=`` are copied into ``<state>/run/credentials/<service>/`` (a folder of its
  user, 0500; the copies 0400), rewritten at each start; the service reads its secrets there
  (``CROWDPREF_SECRETS_DIR``, and a path of the secrets folder in its command points at the
  copy). The secrets folder itself stays root's (0700). The portal thus reads Argilla's signing
  key, the key of participants' account passwords and (public profile) the store's PostgreSQL
  password - not the owner's API key, the PostgreSQL superuser's password, the Hub token or the
  LLM key.
- **The environment of its unit** (:func:`services.systemd.unit_environment`: the Prefect
  server's without tokens), with ``HOME`` in the service's own folder.

What the units do that this cannot: systemd's sandbox (``ProtectSystem``, private ``/tmp``, the
system call filter, ``IPAddressAllow``) needs systemd's namespaces: on a host with systemd,
prefer ``crowdpref service install``. ``crowdpref up`` itself runs as root, like systemd's PID
1: it makes the accounts, runs PostgreSQL's preparation (as root, then the server as
``postgres``), copies each service's secrets and starts the services as their users - then it
ends. What starts a dead service again is its keeper (services/keeper.py), which ``up`` starts
through the same drop: it runs as the service's user with the service's capabilities only, so
no crowdpref process stays root.

Every folder from ``/`` to the checkout, its interpreters and the state folder must let others
pass (``o+x``): a venv made from a Python under ``/root`` cannot run as another user. ``up``
checks that first (:func:`services.systemd.unreachable`) and stops with one line naming the folder
and the fix.
"""

from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import replace
from pathlib import Path

from crowdpref.errors import ConfigError
from crowdpref.settings import Settings
from services import postgres, systemd
from services.process import ProcessManager, ServiceSpec, as_user

SECRETS_ENV = "CROWDPREF_SECRETS_DIR"
SETPRIV = "setpriv"


def active(settings: Settings) -> bool:
    """Whether ``up`` starts each service as its own user: run as root, and ``service_users`` is
    ``per-service``, or ``auto`` in the public profile."""
    if os.geteuid() != 0 or settings.service_users == "off":
        return False
    return settings.service_users == "per-service" or settings.public


def credentials_folder(settings: Settings, service: str) -> Path:
    return settings.pids_dir / "credentials" / service


class Privileges:
    """How this profile's services are started as their users (see the module docstring)."""

    def __init__(self, settings: Settings, confinements: dict[str, systemd.Confinement]):
        self.settings = settings
        self.confinements = confinements

    def _copy_credentials(self, name: str, conf: systemd.Confinement, account: pwd.struct_passwd) -> Path:
        """The service's secrets, copied into its own folder (0500, files 0400), as its unit gets them."""
        folder = credentials_folder(self.settings, name)
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(folder.parent, 0o711)  # the users pass through to their own folder, list nothing
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chown(folder, 0, 0)
        os.chmod(folder, 0o700)
        source = self.settings.state_dir / "secrets"
        for old in folder.iterdir():  # a secret it may no longer read, or a copy a killed start left
            if old.name not in conf.credentials:
                old.unlink()
        for file_name in conf.credentials:
            try:
                data = (source / file_name).read_bytes()
            except FileNotFoundError:
                raise ConfigError(f"{source / file_name}: missing, and {name} needs it: restore it from your backup "
                                  "or run `crowdpref up` again to make it") from None
            partial = folder / f".{file_name}.tmp"
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            os.chown(partial, account.pw_uid, account.pw_gid)
            os.replace(partial, folder / file_name)
        os.chown(folder, account.pw_uid, account.pw_gid)
        os.chmod(folder, 0o500)
        return folder

    def launch_as(self, spec: ServiceSpec) -> ServiceSpec:
        """``spec`` started as its service's user (unchanged for PostgreSQL, which ``up`` already
        runs as ``postgres``, and for a service that is not one of the stack's)."""
        conf = self.confinements.get(spec.name)
        if conf is None or conf.user in (systemd.ROOT, postgres.SERVER_USER):
            return spec
        try:
            account = pwd.getpwnam(conf.user)
        except KeyError:
            raise ConfigError(f"{spec.name}: its user {conf.user} does not exist: run `crowdpref up` as root again "
                              "(it makes it), or set CROWDPREF_SERVICE_USERS=off") from None
        env = systemd.unit_environment(self.settings, spec)
        if conf.owned:
            env["HOME"] = str(conf.owned[0])
        argv = [str(word) for word in spec.argv]
        if conf.credentials:
            folder = self._copy_credentials(spec.name, conf, account)
            env[SECRETS_ENV] = str(folder)
            secrets = self.settings.state_dir / "secrets"
            argv = [str(folder / Path(word).name) if os.path.isabs(word) and Path(word).parent == secrets else word
                    for word in argv]
        return replace(spec, argv=as_user(argv, account.pw_uid, account.pw_gid, conf.capabilities), env=env)


def prepare(settings: Settings, log=lambda line: None) -> Privileges | None:
    """For an ``up`` that drops privileges (:func:`active`): check that the services' users can
    reach what they run, make the accounts and give them their folders; None otherwise."""
    if not active(settings):
        return None
    if shutil.which(SETPRIV) is None:
        raise ConfigError("crowdpref up as root starts each service as its own user with setpriv, which is missing: "
                          "apt-get install util-linux (or set CROWDPREF_SERVICE_USERS=off to run them as root)")
    units = systemd.render(settings)
    problems = systemd.unreachable(settings, units, private_tmp=False)
    if problems:
        raise ConfigError(f"{problems[0]} (crowdpref up as root runs each service as its own user; "
                          "CROWDPREF_SERVICE_USERS=off runs them as root instead)")
    systemd.run_commands(systemd.account_commands(settings, units), log)
    return Privileges(settings, {unit.service: unit.confinement for unit in units if unit.confinement})


def manager(settings: Settings, privileges: Privileges | None = None, keep: bool = False) -> ProcessManager:
    """The process manager ``up`` starts services with: as their users where :func:`active`;
    ``keep``: each under its keeper, which starts it again when it dies (services/keeper.py)."""
    if privileges is None:
        privileges = prepare(settings)
    return ProcessManager(settings.state_dir, launch_as=privileges.launch_as if privileges else None, keep=keep)
