"""Typed errors. Each carries a one-line, user-facing message that names the file or service,
the field and the fix; the CLI prints it and exits non-zero without a traceback."""

from __future__ import annotations


class CrowdprefError(Exception):
    """Base class: ``str(err)`` is the one-line message shown to the user. ``transient``
    marks a failure worth retrying (a server unreachable or erroring), not one to fix."""

    exit_code = 1

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class ConfigError(CrowdprefError):
    """A study config or settings problem (exit code 2, like a usage error)."""

    exit_code = 2


class ServiceError(CrowdprefError):
    """An embedded service could not be started, stopped or reached."""

    exit_code = 1
