"""What every command of the ``crowdpref`` command line shares: the typer ``app`` they are
registered on, the consoles, the settings, and the one-line errors (:func:`friendly_errors`,
:func:`explain`, which service is down and how to start it)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from crowdpref.errors import CrowdprefError, ServiceError, StateFileError
from crowdpref.settings import Settings, load_settings

app = typer.Typer(
    name="crowdpref",
    help="Run a human-preference (RLHF) data study end to end: Argilla + Prolific + Prefect.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)


def friendly_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn :class:`CrowdprefError` - and the few other exceptions :func:`explain` can say
    something true about - into its one-line message and exit code. Anything else propagates
    with its traceback: it is a bug."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised below unless explained
            explained = explain(exc)
            if explained is None:
                raise
            err_console.print(f"[bold red]error:[/] {explained}", highlight=False, soft_wrap=True)
            raise typer.Exit(explained.exit_code) from None

    return wrapper


_SETTINGS: Settings | None = None


def _settings() -> Settings:
    global _SETTINGS
    _SETTINGS = load_settings()
    return _SETTINGS


def explain(exc: BaseException) -> CrowdprefError | None:
    """A one-line error for ``exc`` when one can be said truthfully: a :class:`CrowdprefError`
    itself, a connection to a service that failed (which service, how to start it), a state
    file the OS refuses to read. None for anything else (a bug: keep its traceback)."""
    import click
    import httpx

    if isinstance(exc, (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort)):
        return None  # typer/click's own exits and usage errors (an inner command already reported)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:  # the exception and what caused it
        seen.add(id(current))
        if isinstance(current, CrowdprefError):
            return current
        if isinstance(current, (httpx.ConnectError, httpx.ConnectTimeout)):
            try:
                url = str(current.request.url)
            except RuntimeError:  # raised without a request
                url = ""
            return ServiceError(_unreachable(url, current.__class__.__name__))
        if isinstance(current, httpx.TimeoutException):  # it took the connection but did not answer in time
            try:
                url = str(current.request.url)
            except RuntimeError:
                url = ""
            origin = "/".join(url.split("/", 3)[:3]) or "a server"
            return ServiceError(f"{origin} did not answer in time ({current.__class__.__name__}): it is busy or stuck - "
                                "see `crowdpref status` and its log under the state folder's logs/, then run the "
                                "command again")
        if isinstance(current, (PermissionError, IsADirectoryError, NotADirectoryError)) and current.filename:
            return StateFileError(f"{current.filename}: cannot be used ({current.strerror}): fix the path or its "
                                  "permissions (crowdpref must read and write its state folder, CROWDPREF_HOME)")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


def _quiet_explained_tracebacks() -> None:
    """Prefect logs a failing task's or flow's exception with its traceback to the run's log
    (the UI keeps it) and to the console. On this process's console, leave out the traceback
    of an exception the CLI explains in one line; a bug's traceback stays."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not getattr(handler, "_crowdpref_quiet", False):
            handler.format = _without_explained_traceback(handler.format)  # type: ignore[method-assign]
            handler._crowdpref_quiet = True  # type: ignore[attr-defined]


def _without_explained_traceback(format_record: Callable[[logging.LogRecord], str]) -> Callable[[logging.LogRecord], str]:
    def format_without(record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or explain(exc) is None:
            return format_record(record)
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None  # for this handler only
        try:
            return format_record(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved

    return format_without


def _unreachable(url: str, why: str) -> str:
    """Which service ``url`` belongs to, and how to get it running."""
    settings = _SETTINGS
    if settings is not None:
        if url.startswith(settings.prefect_url):
            return _prefect_down(settings, why)
        if url.startswith(settings.argilla_api_url):
            return _argilla_down(settings, why)
        if url.startswith(settings.portal_public_url):
            return (f"the participant portal at {settings.portal_public_url} is not reachable ({why}): start it with "
                    "`crowdpref up` (or set CROWDPREF_PORTAL_URL)")
    origin = url.split("/", 3)[:3]
    return f"{'/'.join(origin) or 'a server'} is not reachable ({why}): is it running? (`crowdpref status` shows the embedded services)"


def _prefect_down(settings: Settings, why: str) -> str:
    if settings.embedded_prefect:
        return (f"the Prefect server at {settings.prefect_ui_url} is not reachable ({why}): start it with "
                "`crowdpref up` (or set PREFECT_API_URL)")
    return f"the Prefect API at {settings.prefect_url} is not reachable ({why}): check PREFECT_API_URL"


def _argilla_down(settings: Settings, why: str) -> str:
    if settings.embedded_argilla:
        return (f"the Argilla server at {settings.argilla_api_url} is not reachable ({why}): start it with "
                "`crowdpref up` (or set CROWDPREF_ARGILLA_URL)")
    return f"Argilla at {settings.argilla_api_url} is not reachable ({why}): check CROWDPREF_ARGILLA_URL"


def _reachable(url: str, embedded: bool) -> str | None:
    """None when ``url`` answers (the embedded services: with 200), else why not."""
    import httpx

    from crowdpref.tls import shared_context

    try:
        response = httpx.get(url, timeout=5.0, verify=shared_context())
    except httpx.HTTPError as exc:
        return exc.__class__.__name__
    if embedded and response.status_code != 200:
        return f"HTTP {response.status_code}"
    return None


def _require_argilla(settings: Settings) -> None:
    """Fail in one line, before anything starts, when Argilla does not answer."""
    why = _reachable(f"{settings.argilla_api_url}/api/v1/status", settings.embedded_argilla)
    if why is not None:
        raise ServiceError(_argilla_down(settings, why))


def _use_prefect(settings: Settings) -> None:
    """Point Prefect (imported after this) at the configured server with the offline settings;
    fail in one line, before Prefect is imported, when the server does not answer."""
    os.environ.update(settings.prefect_env())
    why = _reachable(f"{settings.prefect_url}/health", settings.embedded_prefect)
    if why is not None:
        raise ServiceError(_prefect_down(settings, why))
    try:
        settings.prefect_home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StateFileError(f"{settings.prefect_home}: cannot create the Prefect home ({exc.strerror}): fix "
                             "CROWDPREF_HOME or its permissions") from None


def trust_stack_ca(settings: Settings) -> Path | None:
    """Public profile with Caddy's internal CA: add its root to the process's TLS context
    (crowdpref.tls.shared_context, which every client of the simulated participants uses), so
    the pre-flight's rehearsal and ``crowdpref demo`` verify the stack's certificate without
    SSL_CERT_FILE. Returns the root used."""
    if not (settings.public and settings.public_tls == "internal"):
        return None
    from crowdpref.project import use_project
    from crowdpref.tls import shared_context

    use_project()
    from services import caddy

    root = caddy.internal_root(settings)
    if not root.exists():
        return None
    shared_context().load_verify_locations(cafile=str(root))
    return root
