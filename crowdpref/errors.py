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


class StateFileError(CrowdprefError):
    """A file crowdpref keeps in its state folder (credentials, a salt, the store) is
    unreadable or damaged. The message names the file and the safe way back."""

    exit_code = 1


def state_file_error(path: object, what: str, exc: BaseException, fix: str) -> StateFileError:
    """The one-line error for state file ``path`` (``what`` it holds) that could not be read:
    why (its OS error, or that its content is damaged) and ``fix``. The file's content is never
    quoted (it may hold secrets)."""
    if isinstance(exc, OSError):
        why = exc.strerror or exc.__class__.__name__
    elif isinstance(exc, (KeyError, TypeError)):
        why = "damaged: fields missing"
    else:  # ValueError: json.JSONDecodeError, UnicodeDecodeError
        why = "damaged: not valid JSON"
    return StateFileError(f"{path}: {what} cannot be read ({why}): {fix}")


def first_line(exc: BaseException, limit: int | None = 200, *, with_type: bool = False) -> str:
    """``exc``'s message as one short line, for an error or a log line: its first non-blank line,
    cut to ``limit`` characters (``None``: not cut); the class name when it has no text. With
    ``with_type``: ``"ClassName: first line"`` (just ``"ClassName"`` when it has no text)."""
    lines = str(exc).strip().splitlines()
    text = lines[0][:limit] if lines else ""
    if with_type:
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text or type(exc).__name__
