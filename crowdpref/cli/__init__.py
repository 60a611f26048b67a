"""The ``crowdpref`` command line.

Errors the user can fix (config, settings, a taken port, a missing venv, a service that is not
running, a damaged state file) print one line with the fix and exit non-zero - 2 for usage and
config problems, 1 for failures; they never show a traceback. A flow that fails for such a
reason shows the same one line and the link to its run, whose log in the Prefect UI keeps the
full traceback. Anything else is a bug and keeps its traceback.

The commands live by group in the modules of this package (each registers its commands on the one
typer :data:`app` of :mod:`crowdpref.cli.common`; they are imported here in the order ``crowdpref
--help`` lists them, the ``service`` group last):

- :mod:`~crowdpref.cli.services`: ``up``, ``deploy``, ``down``, ``status``, ``service install``;
- :mod:`~crowdpref.cli.studies`: ``validate``, ``new-study``;
- :mod:`~crowdpref.cli.runs`: ``smoke``, ``run``, ``demo``, ``simulate``;
- :mod:`~crowdpref.cli.work`: ``drop``, ``reopen``, ``progress``;
- :mod:`~crowdpref.cli.recruitment`: ``prolific-webhooks``, ``invite``, ``revoke-invite``;
- :mod:`~crowdpref.cli.participants`: ``password``, ``withdraw``;
- :mod:`~crowdpref.cli.release`: ``privacy-review``;
- :mod:`~crowdpref.cli.backup`: ``backup``, ``restore``;
- :mod:`~crowdpref.cli.preflight`: ``preflight``.
"""

from __future__ import annotations

# each module registers its commands on `app` when imported: this is the order of `crowdpref --help`
from crowdpref.cli import services, studies, runs, work, recruitment, participants, release, backup, preflight  # noqa: F401
from crowdpref.cli.common import app, console, err_console, explain, friendly_errors

__all__ = ["app", "console", "err_console", "explain", "friendly_errors", "main"]


def main() -> None:  # pragma: no cover - console entry point
    app()
