"""Start again what died, where no systemd does it: each service under its own keeper.

``crowdpref up`` in the public profile (``settings.public``), or ``crowdpref up --supervise`` on
any profile, starts every long-running service of the stack under a **keeper**: a small bash
loop (services/keeper.sh, given to ``bash -p -c``, so it needs no file the service's user may
not read, and reads no ``$BASH_ENV``) that runs the service as its child and starts it again when it dies. The keeper is
started exactly as the service would be (:class:`services.process.ProcessManager` with
``keep=True``): where ``up`` runs as root, through the same ``setpriv`` drop
(services/privileges.py), so it runs as the service's own user, with the service's capabilities
and nothing else (Caddy's keeper holds only ``CAP_NET_BIND_SERVICE``, as an ambient capability
its child inherits; PostgreSQL's runs as ``postgres``). Nothing stays root: what needs root
(the accounts, PostgreSQL's folders, each service's copies of its secrets) is done by ``up``,
which then ends. A restart runs the same command with the same environment and the same copies
of the secrets as the first start; Argilla's database migration and owner step, done before
its first start, are not run again.

How it behaves:

- The child runs in its own session (``setsid``), so killing the service's process group (a
  uvicorn parent and its workers) leaves the keeper; ``setpriv --pdeathsig TERM`` ends the
  child if its keeper is killed, so no service outlives its keeper unseen.
- Until ``up`` has seen the service healthy (it then sends the keeper ``SIGUSR1``), a child that
  ends ends the keeper with its exit code: a service that cannot start fails ``up`` at once, with
  its log, as without a keeper.
- After that, a child that dies is started again after 1 s, then 2, 4, ... up to 30 s while it
  keeps dying; a child that ran 60 s or more starts from 1 s again. Each death and start is one
  line in the service's own log (``<state>/logs/<service>.log``): ``<time> crowdpref-keeper:
  portal died (killed by SIGKILL) after 35 s: starting it again in 1 s``.
- The pid record (``<state>/run/<service>.json``) holds the keeper (``"kept": true``);
  ``crowdpref status`` reports the child (the service's own pid) and the service as down while
  it is being started again. ``crowdpref down`` sends the keeper ``SIGTERM``: it stops starting
  anything, passes the service its ``SIGTERM`` (two for the Prefect worker), waits for it and
  exits; after the stop timeout both process groups are killed. So nothing comes back while
  the stack goes down. PostgreSQL is stopped by ``pg_ctl stop -m fast`` first: ``down``
  releases its keeper before (``SIGUSR2``), which then lets it end and exits.

How fast: a SIGKILLed service is started again within about a second, then takes its own start
until healthy. tests/integration/test_supervisor.py holds the public profile's portal to 60 s
and its Argilla server to 180 s (both processes killed; measured figures are in
docs/how-to/server.md, "Restarts and systemd").

It restarts services whose process died; it does not judge a live process that answers badly.
Under systemd, use ``crowdpref service install`` instead (services/systemd.py): systemd restarts
the units itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

SCRIPT = Path(__file__).with_name("keeper.sh")
# (signal, what the keeper then says in the log): what up sends once the service is healthy, from
# then on started again; and before the service is stopped another way (pg_ctl stop), let it end
ARM = ("SIGUSR1", "is up: started again if it dies")
RELEASE = ("SIGUSR2", "is being stopped: not started again")


def wrap(argv: Sequence[str], name: str, term_signals: int) -> list[str]:
    """``argv`` run under a keeper. Where ``argv`` drops privileges through ``setpriv ... --``
    (services/process.py's :func:`~services.process.as_user`), the keeper goes after the drop, so
    it runs as the service's user with its capabilities only."""
    argv = [str(word) for word in argv]
    script = "".join(line for line in SCRIPT.read_text().splitlines(keepends=True) if not line.startswith("#"))
    # -p: no $BASH_ENV or functions taken from the service's environment
    keeper = [shutil.which("bash") or "/bin/bash", "-p", "-c", script, "crowdpref-keeper", name,
              str(term_signals), shutil.which("setsid") or "setsid", shutil.which("setpriv") or "setpriv", "--"]
    if Path(argv[0]).name == "setpriv" and "--" in argv:
        cut = argv.index("--") + 1
        return [*argv[:cut], *keeper, *argv[cut:]]
    return [*keeper, *argv]
