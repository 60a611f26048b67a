"""The ``crowdpref`` command line.

Errors the user can fix (config, settings, a taken port, a missing venv, a service that is not
running, a damaged state file) print one line with the fix and exit non-zero - 2 for usage and
config problems, 1 for failures; they never show a traceback. A flow that fails for such a
reason shows the same one line and the link to its run, whose log in the Prefect UI keeps the
full traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from crowdpref.errors import ConfigError, CrowdprefError, ServiceError, StateFileError
from crowdpref.project import use_project
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
        if isinstance(current, (PermissionError, IsADirectoryError, NotADirectoryError)) and current.filename:
            return StateFileError(f"{current.filename}: cannot be used ({current.strerror}): fix the path or its "
                                  "permissions (crowdpref must read and write its state folder, CROWDPREF_HOME)")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


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

    try:
        response = httpx.get(url, timeout=5.0)
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


@app.command()
@friendly_errors
def up(
    only: list[str] = typer.Option(
        None, "--only",
        help="Start only these components: argilla, prefect, portal, worker (the Prefect worker on pool "
             "'crowdpref'), caddy (HTTPS, public profile only) (default: all)."
    ),
    reset_owner: bool = typer.Option(
        False, "--reset-owner",
        help="Give the embedded Argilla's owner a new password and API key (when its credentials file "
             "was lost or damaged); the stack must be down."),
    supervise: bool = typer.Option(
        None, "--supervise/--no-supervise", show_default=False,
        help="Also start the supervisor, which starts again any of these services that dies (checks every "
             "2 s); default: on in the public profile (CROWDPREF_PUBLIC_URL), off otherwise."),
) -> None:
    """Start the embedded services that are not running yet and print the UI URLs.

    The services include the Prefect worker on the 'crowdpref' pool (not while a
    deployments/serve.py process runs the flows), so deployed flows run when started."""
    use_project()
    from services import stack
    from services.argilla.service import ensure_owner_credentials, masked

    settings = _settings()
    components = only or list(stack.COMPONENTS)
    if reset_owner:
        _reset_owner(settings)
    if "argilla" in components and settings.embedded_argilla:
        from services.argilla.service import env as argilla_env

        ensure_owner_credentials(settings)  # damaged secrets: one line before anything starts
        argilla_env(settings)
    notes: list[str] = []
    with console.status("starting services...") as spinner:
        rows = stack.up(settings, components, on_step=lambda step: spinner.update(f"starting {step}..."),
                        on_note=notes.append, supervise=supervise)
    _print_status(rows)
    for note in notes:
        console.print(note, highlight=False)
    if "argilla" in components and settings.embedded_argilla:
        creds = ensure_owner_credentials(settings)
        console.print(
            f"Argilla UI:  {settings.argilla_api_url}  (owner [bold]{creds['username']}[/], "
            f"API key {masked(creds['api_key'])}; full credentials in {settings.owner_credentials_file})",
            highlight=False,
        )
    if "portal" in components:
        console.print(f"Portal:      {settings.portal_public_url}  (participants' study links start here)",
                      highlight=False)
    if "prefect" in components:
        console.print(f"Prefect UI:  {settings.prefect_ui_url}", highlight=False)
        console.print(f"For flows in this shell: export PREFECT_API_URL={settings.prefect_url}", highlight=False)


def _reset_owner(settings: Any) -> None:
    """``up --reset-owner``: only for the embedded Argilla, only while no service runs (each
    holds the old key)."""
    use_project()
    from services import stack
    from services.argilla.service import reset_owner

    if not settings.embedded_argilla:
        raise ConfigError(f"--reset-owner is for the embedded Argilla; this one is {settings.argilla_url}: "
                          "set CROWDPREF_ARGILLA_API_KEY to a key of that server instead")
    running = [row.name for row in stack.status(settings) if row.pid is not None]
    if running:
        raise ConfigError(f"--reset-owner needs the stack down ({', '.join(running)} running, holding the old "
                          "key): run `crowdpref down` first")
    with console.status("giving the Argilla owner a new password and API key..."):
        reset_owner(settings)
    console.print(f"Argilla owner: new password and API key in {settings.owner_credentials_file}", highlight=False)


@app.command()
@friendly_errors
def deploy(
    worker: bool = typer.Option(
        True, help="Also start a process worker on the 'crowdpref' pool (unless one runs: `crowdpref up` starts it)."),
) -> None:
    """Register every deployment of prefect.yaml with the Prefect server (and start a worker).

    Afterwards flows can be started from the Prefect UI; schedules are registered inactive -
    resume them in the UI. A worker that runs already (`crowdpref up` starts one) is kept,
    never a second one; `crowdpref down` stops it."""
    use_project()
    from deployments.deploy import WORKER_NAME, deploy_all, start_worker
    from services.process import ProcessManager

    settings = _settings()
    _use_prefect(settings)
    with console.status("registering deployments..."):
        names = deploy_all(settings)
    console.print(f"registered {len(names)} deployments: {', '.join(sorted(names))}", highlight=False)
    if worker:
        already = ProcessManager(settings.state_dir).running(WORKER_NAME) is not None
        with console.status("starting a worker on pool 'crowdpref'..."):
            running = start_worker(settings)  # one that already runs is kept: never a second worker
        console.print(f"worker {'already ' if already else ''}running (pid {running.pid}); "
                      f"deployments: {settings.prefect_ui_url}/deployments", highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def down() -> None:
    """Stop every embedded service crowdpref started (by recorded PID, whole process groups)."""
    use_project()
    from services import stack

    stopped = stack.down(_settings())
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
@friendly_errors
def supervise(
    only: list[str] = typer.Option(
        None, "--only", help="Watch only these components: argilla, prefect, portal, worker, caddy (default: all)."),
    interval: float = typer.Option(2.0, min=0.5, help="Seconds between checks."),
) -> None:
    """Run the supervisor in the foreground: every INTERVAL seconds, start again (and wait until
    healthy) any service of the stack whose process died. `crowdpref up --supervise` (the
    default in the public profile) runs it in the background instead. Ctrl-C stops it."""
    use_project()
    from services import stack
    from services.supervisor import supervise as loop

    settings = _settings()
    components = only or list(stack.COMPONENTS)
    unknown = sorted(set(components) - set(stack.COMPONENTS))
    if unknown:
        raise ConfigError(f"--only {', '.join(unknown)}: unknown component; choose from {', '.join(stack.COMPONENTS)}")
    try:
        loop(settings, components, interval, log=lambda line: console.print(line, highlight=False))
    except KeyboardInterrupt:
        console.print("supervisor stopped")


service_app = typer.Typer(help="Run the stack under systemd instead of `crowdpref up`.", no_args_is_help=True)
app.add_typer(service_app, name="service")


@service_app.command("install")
@friendly_errors
def service_install(
    folder: Path = typer.Option(None, "--dir", help="Where to write the units (default: /etc/systemd/system, as root)."),
    user: str = typer.Option(None, "--user", help="The account the services run as (User=; default: root's default)."),
    check: bool = typer.Option(True, "--check/--no-check", help="Check the units with `systemd-analyze verify`."),
) -> None:
    """Write a systemd unit for every service of this profile (restart on failure, start at
    boot, ordered dependencies; the environment in 0600 files in the secrets folder) and check
    them with `systemd-analyze verify` where it exists. Exit 1 if the check finds a problem."""
    use_project()
    from services import systemd

    settings = _settings()
    target = folder if folder is not None else systemd.default_dir()
    paths = systemd.install(settings, target, user)
    console.print(f"wrote {len(paths)} units in {target}: {', '.join(p.name for p in paths)}", highlight=False,
                  soft_wrap=True)
    console.print(f"environment files (0600): {systemd.env_folder(settings)}", highlight=False)
    if check:
        checked = systemd.verify(paths)
        console.print("systemd-analyze verify: no problem found" if checked
                      else "systemd-analyze not found: the units were not checked", highlight=False)
    names = " ".join(p.name for p in paths)
    console.print(f"then: systemctl daemon-reload && systemctl enable --now {names}", highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def status(
    study: Path = typer.Option(None, "--study", help="Show this study's progress instead: the same as "
                               "`crowdpref progress --study` (which also has --json).", show_default=False),
) -> None:
    """What runs, where, and whether it is healthy. Exit 1 if something is down."""
    if study is not None:
        _show_progress(study, as_json=False, ask_prolific=True)
        return
    use_project()
    from services import stack

    settings = _settings()
    rows = stack.status(settings)
    _print_status(rows)
    if settings.public:
        _print_public(settings)
    if not all(row.healthy for row in rows):
        raise typer.Exit(1)


def _print_public(settings: Any) -> None:
    """The public profile's addresses and the served certificate's expiry (read over TLS)."""
    from services import caddy

    url = settings.public_url
    console.print(f"Public URL:  {url}  (Argilla; the portal under /s/, /hooks/, /healthz)", highlight=False)
    console.print(f"Study links: {url}/s/<study>/study1 and /study2   Prolific webhooks: {url}/hooks/prolific",
                  highlight=False)
    console.print(f"TLS ({settings.public_tls}): {caddy.certificate(settings).describe()}", highlight=False)


def _print_status(rows: list[Any]) -> None:
    table = Table(title="crowdpref services")
    table.add_column("service")
    table.add_column("pid", justify="right")
    table.add_column("where")
    table.add_column("health")
    for row in rows:
        health = "[green]healthy[/]" if row.healthy else ("[red]unhealthy[/]" if row.pid else "[dim]stopped[/]")
        table.add_row(row.name, str(row.pid or "-"), row.url, health)
    console.print(table)


@app.command()
@friendly_errors
def validate(study: Path = typer.Argument(..., help="A study config, e.g. studies/demo.yaml.")) -> None:
    """Check a study config and print what it will do. Exit 2 with one line if it is invalid."""
    _validate(study)


def _validate(study: Path) -> None:
    from crowdpref.config import load_study
    from crowdpref.config.explain import dropout_warnings, validation_rows

    config = load_study(study)
    table = Table(title=f"{study}: valid")
    table.add_column("setting")
    table.add_column("value")
    for label, value in validation_rows(config):
        table.add_row(label, str(value))
    console.print(table)
    for line in dropout_warnings(config):  # a warning, not an error: the config is valid
        print(line, file=sys.stderr)


@app.command("new-study")
@friendly_errors
def new_study(
    name: str = typer.Argument(..., help="The study's name, e.g. my-pilot (its config file is NAME.yaml)."),
    participants: str = typer.Option(..., "--participants", help="invite (links you hand out) or prolific."),
    out: Path | None = typer.Option(None, "--out", help="Where to write it (a file or a folder); default: the "
                                    "portal's studies folder (setting portal_studies), where the portal serves it."),
) -> None:
    """Write a config for a study with real people - a drop-out window of 45 minutes, onboarding
    on, no simulated crowd - refusing to overwrite a file, then validate it."""
    from crowdpref.config.templates import write_new_study

    folder = out if out is not None else Path(_settings().portal_studies).expanduser()
    path = write_new_study(name, participants, folder)
    print(f"wrote {path}")
    _validate(path)


@app.command()
@friendly_errors
def smoke() -> None:
    """Run the smoke-check flow against the configured Argilla and Prefect.

    `make demo` uses it until the study flow exists."""
    settings = _settings()
    _use_prefect(settings)
    _require_argilla(settings)
    use_project()
    from flows.smoke import smoke_check

    _call_flow(smoke_check, settings, "smoke")
    console.print(f"Prefect UI (flow runs): {settings.prefect_ui_url}/runs", highlight=False)


FLOWS = {
    "study": ("flows.study", "study"),
    "generate-questions": ("flows.generate_questions", "generate_questions"),
    "collect-responses": ("flows.collect_responses", "collect_responses"),
    "collect-ratings": ("flows.collect_ratings", "collect_ratings"),
    "simulate-crowd": ("flows.simulate_crowd", "simulate_crowd"),
    "screen-responses": ("flows.screen_responses", "screen_responses"),
    "aggregate-ratings": ("flows.aggregate_ratings", "aggregate_ratings"),
    "publish-dataset": ("flows.publish_dataset", "publish_dataset"),
    "recruit": ("flows.recruit", "recruit"),
    "sync-prolific": ("flows.sync_prolific", "sync_prolific"),
}


@app.command("run")
@friendly_errors
def run_flow(
    flow_name: str = typer.Argument(..., help=f"One of: {', '.join(FLOWS)}."),
    study: Path = typer.Argument(..., help="The study config, e.g. studies/demo.yaml."),
) -> None:
    """Run one stage flow now, recorded by the configured Prefect server."""
    import importlib

    from crowdpref.config import load_study

    if flow_name not in FLOWS:
        raise typer.BadParameter(f"unknown flow '{flow_name}': choose one of {', '.join(FLOWS)}")
    config = load_study(study)  # one-line error before Prefect starts
    settings = _settings()
    _use_prefect(settings)
    if _needs_argilla(flow_name, config, settings):
        _require_argilla(settings)
    module, attribute = FLOWS[flow_name]
    use_project()
    result, _ = _call_flow(getattr(importlib.import_module(module), attribute), settings, flow_name, study=str(study))
    console.print(f"{flow_name}: {result}")


ARGILLA_FLOWS = {"study": "ratings.parquet", "collect-responses": "responses.parquet",
                 "collect-ratings": "ratings.parquet", "simulate-crowd": None, "recruit": None, "sync-prolific": None}
"""Flows that talk to Argilla, and the output after which they no longer need it (None: always)."""


def _needs_argilla(flow_name: str, config: Any, settings: Settings) -> bool:
    if flow_name not in ARGILLA_FLOWS:
        return False
    done = ARGILLA_FLOWS[flow_name]
    return done is None or not (settings.runs_dir / config.name / done).exists()


def _call_flow(flow: Any, settings: Settings, name: str, **parameters: Any) -> tuple[Any, str]:
    """Run a flow; return its result and the link to its run. When it fails for a reason :func:`explain` can put in
    one line, raise that line with the run's link (the run's log in the UI keeps the
    traceback; the console shows none); any other failure re-raises its exception."""
    _quiet_explained_tracebacks()
    state = flow(**parameters, return_state=True)
    result = state.result(raise_on_failure=False)
    run_url = f"{settings.prefect_ui_url}/runs/flow-run/{state.state_details.flow_run_id}"
    if state.is_completed():
        return result, run_url
    if isinstance(result, BaseException):
        explained = explain(result)
        if explained is None:
            raise result  # a bug: its traceback
        failed = CrowdprefError(f"{name} failed: {explained} (run: {run_url})")
        failed.exit_code = explained.exit_code
        raise failed
    raise CrowdprefError(f"the {name} flow ended {state.name}: {state.message} (run: {run_url})")


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


@app.command()
@friendly_errors
def demo(
    study: Path = typer.Argument(Path("studies/demo.yaml"), help="The study config to run."),
    max_wait_s: float = typer.Option(120.0, help="How long to wait for quiet participants to be released."),
    compare_onboarding: bool = typer.Option(
        False, "--compare-onboarding", help="Then run the same study with the same crowd and no onboarding "
        "(as NAME-no-onboarding) and print both runs' onboarding and check figures side by side."),
) -> None:
    """Run the whole study with the simulated crowd and print where to look.

    Uses the running services (`crowdpref up`); stages already done are skipped."""
    import time

    from crowdpref.config import load_study
    from crowdpref.runfolder import RunFolder

    config = load_study(study)
    settings = _settings()
    _use_prefect(settings)
    _require_argilla(settings)
    use_project()
    from flows.study import study as study_flow

    started = time.perf_counter()
    if config.crowd.arrive_via == "prolific":
        _start_fake_prolific(config, settings)
    result, run_url = _call_flow(study_flow, settings, "study", study=str(study), simulate=True, max_wait_s=max_wait_s)
    if not isinstance(result, dict):
        raise CrowdprefError(f"the study flow returned {type(result).__name__}, not its stage table (run: {run_url})")
    table = Table(title=f"{config.name}: {result['status']} in {time.perf_counter() - started:.0f} s")
    for column in ("stage", "status", "seconds"):
        table.add_column(column)
    for stage in result["stages"]:
        table.add_row(stage["stage"], stage["status"], f"{stage['seconds']:.1f}")
    console.print(table)
    run = RunFolder.for_study(settings.runs_dir, config.name)
    console.print(f"Prefect UI, this run:   {run_url}", highlight=False, soft_wrap=True)
    from crowdpref.store import open_store

    _print_onboarding(config, settings)
    store = open_store(settings)
    study1 = store.find_collection(config.name, "study1")
    participants = store.participants(study1.id) if study1 is not None else []
    if participants:
        console.print(
            f"Argilla UI:             {settings.argilla_api_url}  - log in as [bold]{participants[0].username}[/] "
            f"(a simulated participant); `crowdpref password {participants[0].username} --study {study}` "
            "prints the password",
            highlight=False,
            soft_wrap=True,
        )
    store.close()
    release = run.file("release")
    if release.exists():
        console.print(f"Published dataset:      {release}  (load it with datasets.load_dataset('{release}'))",
                      highlight=False, soft_wrap=True)
    if compare_onboarding:
        plain = without_onboarding(study, settings)
        _call_flow(study_flow, settings, "study", study=str(plain), simulate=True, max_wait_s=max_wait_s)
        console.print(onboarding_comparison(config, load_study(plain), settings))


def without_onboarding(study: Path, settings: Settings) -> Path:
    """A copy of the config ``study`` named ``<name>-no-onboarding``, with no onboarding in either
    study and everything else - the seed, the crowd, the checks - as it is: the same simulated
    people, with nothing before the work. Written to ``<state>/studies/``; returns its path."""
    import yaml

    from crowdpref.runfolder import write_text

    data = yaml.safe_load(Path(study).read_text(encoding="utf-8"))
    data["name"] = f"{data['name']}-no-onboarding"
    for key in ("study1", "study2"):
        if isinstance(data.get(key), dict):
            data[key].pop("onboarding", None)
    path = settings.state_dir / "studies" / f"{data['name']}.yaml"
    write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), path)
    return path


def onboarding_comparison(with_config: Any, without_config: Any, settings: Settings) -> Table:
    """Both runs of ``demo --compare-onboarding`` per study: who the onboarding held out of the
    work, and how much work the checks later excluded (and others redid)."""
    from crowdpref.progress import study_progress

    table = Table(title="the same crowd with and without onboarding")
    for column in ("study", "run", "people who claimed work", "screened out before the work",
                   "participants the checks excluded", "work the checks excluded (redone)"):
        table.add_column(column)
    runs = [("with onboarding", study_progress(with_config, settings)),
            ("without", study_progress(without_config, settings))]
    for key in ("study1", "study2"):
        for label, progress in runs:
            part = next(p for p in progress.parts if p.key == key)
            claimed = sum(part.participants.values())
            screened = part.onboarding.screened_out if part.onboarding else 0
            checks = part.checks
            table.add_row(key, label, str(claimed), str(screened),
                          str(checks.excluded_participants) if checks else "-", f"{part.excluded} {part.unit}")
    return table


def _print_onboarding(config: Any, settings: Settings) -> None:
    """The demo's onboarding figures per study: who the quiz screened out (held out of the
    work, each of whom would otherwise have claimed a batch) and whose work the checks later
    excluded and gave to others (redone)."""
    from crowdpref.progress import study_progress

    for part in study_progress(config, settings).parts:
        section = config.study1 if part.key == "study1" else config.study2
        per = section.questions_per_participant if part.key == "study1" else section.pairs_per_participant
        redone = f"the checks later excluded {part.excluded} {part.unit} (redone by others)"
        if part.onboarding is None:
            console.print(f"{part.key}: no onboarding; {redone}", highlight=False)
            continue
        o = part.onboarding
        console.print(f"{part.key} onboarding: {o.describe()}; held out of the work: {o.screened_out} people "
                      f"(up to {o.screened_out * per} {part.item}s they would otherwise have claimed); {redone}",
                      highlight=False)


@app.command()
@friendly_errors
def simulate(study: Path = typer.Argument(..., help="The study config, e.g. studies/demo.yaml.")) -> None:
    """Let the simulated crowd answer what is pending (the simulate-crowd flow)."""
    run_flow("simulate-crowd", study)


@app.command()
@friendly_errors
def drop(
    username: str = typer.Argument(..., help="The participant's Argilla username."),
    study: Path = typer.Option(..., "--study", help="The study config the participant belongs to."),
) -> None:
    """Mark a participant as dropped (the next collect run releases their items to the pool).

    Their submitted answers stay; their unanswered items leave their dataset and return to the
    pool, where the next participant's claim takes them."""
    from crowdpref.config import load_study
    from crowdpref.studies import open_collection

    config = load_study(study)
    key = "study2" if username.startswith(f"{config.study2.username_prefix}-") else "study1"
    collection = open_collection(study, key)  # type: ignore[arg-type]
    collection.request_drop(username)
    console.print(f"{username}: marked dropped; the next collect run releases their unanswered items to the pool")


@app.command()
@friendly_errors
def reopen(
    item: str = typer.Argument(..., help="A question id (study 1) or pair id (study 2), e.g. from the export's message."),
    study: Path = typer.Option(..., "--study", help="The study config the item belongs to."),
    participant: list[str] = typer.Option(
        None, "--participant", help="Reopen this participant's answer (their Argilla username; repeatable). "
        "Default: the item's counted answers that cannot be used (read from Argilla)."),
    reason: str = typer.Option("reopened by the operator", "--reason", help="Recorded in the event log."),
) -> None:
    """Send an item back to the pool: its counted answer stops counting (it stays in Argilla,
    an event records why) and the next participant's claim takes the slot. Use it for an answer
    you judge unusable; the exports reopen answers that are empty or discarded by themselves."""
    from crowdpref.config import load_study
    from crowdpref.reopen import reopen_item
    from crowdpref.store import open_store

    config = load_study(study)
    settings = _settings()
    if not participant:
        participant = _unusable_answerers(study, config, settings, item)
    store = open_store(settings)
    try:
        key, reopened = reopen_item(store, config.name, item, reason, usernames=participant)
    finally:
        store.close()
    flow = "collect-responses" if key == "study1" else "collect-ratings"
    console.print(f"{item} ({key}): the answer of {', '.join(reopened)} no longer counts; the slot is back in the "
                  f"pool - the next claim takes it (`crowdpref run {flow} {study}` advances the collection)",
                  highlight=False, soft_wrap=True)


def _unusable_answerers(study: Path, config: Any, settings: Settings, item: str) -> list[str]:
    """Who gave a counted answer to ``item`` that cannot be used, read from Argilla; a one-line
    refusal naming the counted answers when every one of them can be used."""
    from crowdpref.reopen import item_collection, unusable_answers
    from crowdpref.store import open_store
    from crowdpref.studies import open_collection
    from crowdpref.study1 import answer_problem
    from crowdpref.study2 import rating_problem

    store = open_store(settings)
    try:
        key, _ = item_collection(store, config.name, item)
    finally:
        store.close()
    _require_argilla(settings)
    collection = open_collection(study, key, settings)  # type: ignore[arg-type]
    holders = [p for p in collection.participants() if item in p.submitted]
    submitted = [(p, answer) for p in holders for answer in collection._own_answers(p) if answer.status == "submitted"]
    problem = answer_problem if key == "study1" else rating_problem(config.study2.scale_points)
    found = [u.username for u in unusable_answers(holders, submitted, problem) if u.item_id == item]
    if not found:
        raise CrowdprefError(f"every counted answer to {item} can be used (by {', '.join(p.username for p in holders) or 'nobody'}): "
                             "name the one to reopen with --participant USERNAME")
    return found


@app.command()
@friendly_errors
def progress(
    study: Path = typer.Option(..., "--study", help="The study config, e.g. studies/demo.yaml."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (for scripts) instead of a table."),
    ask_prolific: bool = typer.Option(True, "--prolific/--no-prolific",
                                      help="Ask Prolific for the status, places and submissions of the study's "
                                           "Prolific studies (one try, 5 s timeout; needs PROLIFIC_TOKEN)."),
) -> None:
    """A study's progress: answers (study 1) and ratings (study 2) submitted of those needed,
    participants by status, quality checks, places on Prolific and the spend so far.

    It only reads the study store (never creating it, taking no write lock), so it is safe
    while the study runs; a study that has not started says so."""
    _show_progress(study, as_json, ask_prolific)


def _show_progress(study: Path, as_json: bool, ask_prolific: bool) -> None:
    from crowdpref.config import load_study
    from crowdpref.progress import study_progress

    config = load_study(study)
    result = study_progress(config, _settings(), ask_prolific=ask_prolific)
    if as_json:
        import json

        print(json.dumps(result.to_json(), indent=2))
        return
    _print_progress(result)


def _print_progress(result: Any) -> None:
    """The table of ``crowdpref progress``: one column per study, one row per number."""
    from crowdpref.progress import describe_percent

    s1, s2 = result.parts
    if not result.started:
        console.print(f"study '{result.study}' has not started: nothing is in the study store yet "
                      "(the numbers below are the plan)", highlight=False)
    table = Table(title=f"{result.study}: {result.title}")
    table.add_column("")
    for part in result.parts:
        table.add_column(f"study {part.key[-1]} ({part.unit})", justify="right")

    def row(label: str, value: Callable[[Any], object]) -> None:
        table.add_row(label, *(str(value(p)) for p in (s1, s2)))

    row("submitted / needed", describe_percent)
    row("items with all R", lambda p: f"{p.items_done}/{'?' if p.items is None else p.items} {p.item}s "
                                      f"(R = {p.copies})")
    row("held by participants", lambda p: p.held)
    row("not claimed yet", lambda p: p.unclaimed)
    row("excluded / reopened / withdrawn", lambda p: f"{p.excluded} / {p.reopened} / {p.withdrawn}")
    table.add_section()
    for status in s1.participants:
        row(f"participants {status}", lambda p, status=status: p.participants.get(status, 0))
    row("  of them withdrawn", lambda p: p.withdrawn_participants)
    table.add_section()
    row("onboarding", lambda p: p.onboarding.describe() if p.onboarding is not None else "none")
    row("checks per batch", lambda p: p.checks.per_batch or "none")
    row("checks passed / failed / open", lambda p: f"{p.checks.passed} / {p.checks.failed} / {p.checks.unanswered}")
    row("excluded (people / answers)", lambda p: f"{p.checks.excluded_participants} / {p.checks.excluded_answers}")
    row("too fast", lambda p: "flag off" if p.checks.too_fast is None
        else f"{p.checks.too_fast} (< {p.checks.too_fast_seconds:g} s per item)")
    if any(p.spend is not None for p in result.parts):
        table.add_section()
        row("Prolific study (store)", lambda p: "not created" if p.platform is None
            else f"{p.platform.state}, {p.platform.places if p.platform.places is not None else '?'} places")
        if any(p.live is not None for p in result.parts):
            row("Prolific now", _live_text)
        row("approved / awaiting / rejected", lambda p: "-" if p.spend is None
            else f"{p.spend.approved} / {p.spend.awaiting} / {p.spend.rejected}")
        row("paid so far (+ fee)", lambda p: "-" if p.spend is None else f"{p.spend.paid:,.2f}")
        row("at most, if awaiting approved", lambda p: "-" if p.spend is None else f"{p.spend.at_most:,.2f}")
        row("planned (first places)", lambda p: "-" if p.spend is None or p.spend.planned is None
            else f"{p.spend.planned:,.2f} ({p.spend.planned_places} places)")
    console.print(table)
    spend = next((p.spend for p in result.parts if p.spend is not None), None)
    if spend is not None:
        console.print(f"money: in the Prolific workspace's currency, Prolific's fee ({spend.fee_rate:.1%}, "
                      "prolific.fee_rate) included" + ("; a simulation on the fake Prolific: not real money"
                                                       if spend.simulated else ""), highlight=False)
    if result.prolific_note:
        console.print(result.prolific_note, highlight=False)
    for part in result.parts:
        if part.live is not None and part.live.error:
            console.print(f"study {part.key[-1]}: {part.live.error}; the store's numbers above still hold",
                          highlight=False)


def _live_text(part: Any) -> str:
    live = part.live
    if live is None:
        return "-"
    if live.error:
        return "not reachable"
    taken = "?" if live.places_taken is None else live.places_taken
    submissions = ", ".join(f"{n} {status.lower()}" for status, n in sorted(live.submissions.items()))
    return f"{live.status.lower() if live.status else '?'}, {taken}/{live.places} places taken" + (
        f"; {submissions}" if submissions else "")


@app.command("prolific-webhooks")
@friendly_errors
def prolific_webhooks(
    study: Path = typer.Option(..., "--study", help="The study config (it must recruit on Prolific)."),
    force: bool = typer.Option(False, help="Create a new secret and subscription even if one is recorded."),
) -> None:
    """Subscribe the portal to Prolific's submission webhooks: create the workspace's webhook
    secret (kept in the owner-only study store), subscribe the portal's /hooks/prolific and
    confirm it. The portal must be reachable from Prolific (CROWDPREF_PORTAL_URL, HTTPS)."""
    from crowdpref.config import load_study
    from crowdpref.portal.links import webhook_url
    from crowdpref.recruitment import prolific_client, setup_webhooks
    from crowdpref.store import open_store

    config = load_study(study)
    settings = _settings()
    store = open_store(settings)
    try:
        with prolific_client(config, settings) as client:
            recorded = store.get_meta("prolific_webhook_subscription")
            subscription = setup_webhooks(settings, store, client, settings.prolific_workspace_id, force=force)
    finally:
        store.close()
    if recorded and not force:
        console.print(f"already subscribed ({subscription}); --force makes a new secret and subscription")
    else:
        console.print(f"subscribed {webhook_url(settings)} to submission.status.change ({subscription})", highlight=False)


@app.command()
@friendly_errors
def invite(
    study: Path = typer.Argument(..., help="A study config with participants: invite."),
    key: str = typer.Option("study1", "--key", help="study1 or study2."),
    count: int = typer.Option(1, "-n", "--count", min=1, max=10000, help="How many links (one per person)."),
) -> None:
    """Print signed invitation links for a study without Prolific (pilots, an own panel): one
    per participant; each claims one batch of work in the portal."""
    import secrets

    from crowdpref.config import load_study
    from crowdpref.errors import ConfigError
    from crowdpref.portal.service import Portal
    from crowdpref.store import open_store

    config = load_study(study)
    if config.participants != "invite":
        raise ConfigError(f"{study}: participants is '{config.participants}': invitation links are for "
                          "participants: invite")
    if key not in ("study1", "study2"):
        raise ConfigError(f"--key must be study1 or study2 (got {key!r})")
    settings = _settings()
    store = open_store(settings)
    try:
        portal = Portal(settings, store)
        _refuse_unservable(study, config.name, portal, settings)
        for _ in range(count):
            print(portal.invite_link(config.name, key, secrets.token_hex(6)))  # type: ignore[arg-type]
    finally:
        store.close()


def _refuse_unservable(study: Path, name: str, portal: Any, settings: Settings) -> None:
    """Make sure the portal serves this config for study ``name``: it finds a study's config by
    the path recorded in the store (:mod:`crowdpref.study_paths`), so a config anywhere is
    recorded here; ConfigError (one line) when the portal already serves ANOTHER file under
    that name (two configs with one ``name:`` would share a study)."""
    from crowdpref import study_paths
    from crowdpref.config import load_study
    from crowdpref.errors import ConfigError

    served = portal.study_path(name)
    if served is not None and Path(served).resolve() != study.resolve():
        raise ConfigError(f"{study}: the portal serves study '{name}' from {served}, not from this file: give every "
                          "study its own name:, or invite with that file")
    study_paths.remember(portal.store, load_study(study))


@app.command()
@friendly_errors
def password(
    username: str = typer.Argument(..., help="A participant's Argilla username."),
    study: Path = typer.Option(..., "--study", help="The study config the participant belongs to."),
) -> None:
    """Print one participant account's password (from the study store; for the study owner)."""
    from crowdpref.config import load_study
    from crowdpref.store import open_store

    config = load_study(study)
    store = open_store(_settings())
    for key in ("study1", "study2"):
        info = store.find_collection(config.name, key)
        account = next((a for a in store.accounts(info.id) if a.username == username), None) if info else None
        if account is not None:
            print(account.password)
            return
    raise CrowdprefError(f"no account '{username}' in study '{config.name}': check the username (crowdpref demo prints one)")


@app.command()
@friendly_errors
def withdraw(
    prolific_id: str = typer.Argument(None, help="The participant's Prolific id (or invite key). It is never "
                                      "printed; the store compares it with its salted hashes.", show_default=False),
    study: Path = typer.Option(..., "--study", help="The study config the participant took part in."),
    username: str = typer.Option(None, "--username", help="Name them by their Argilla username instead "
                                 "(e.g. an invite participant).", show_default=False),
    reason: str = typer.Option("asked to withdraw", "--reason", help="Recorded in the event log (no ids)."),
) -> None:
    """Withdraw a participant who asked for it (by message): their work stops counting (the slots go
    back to the pool), their records leave their Argilla dataset, a writer's study-2 pairs are
    retired (unrated ones leave the raters' datasets), the run folder's exports are rewritten
    without their rows, and the next aggregation and release leave their answers and ratings out. An active participant's unanswered work is released first. Running it
    again changes nothing and says so."""
    from dataclasses import replace

    from crowdpref.config import load_study
    from crowdpref.store import ACTIVE, RELEASING, open_store
    from crowdpref.studies import open_collection
    from crowdpref.withdrawals import participations
    from crowdpref.withdrawals import withdraw as withdraw_participant

    if (prolific_id is None) == (username is None):
        raise ConfigError("name the participant by their Prolific id (the argument) or by --username, one of them")
    config = load_study(study)
    settings = _settings()
    store = open_store(settings)
    try:
        found = participations(store, config.name, key=prolific_id, username=username)
        if not found:
            who = "with that id" if prolific_id is not None else f"'{username}'"
            raise CrowdprefError(f"no participant {who} in study '{config.name}' (the store keeps ids only as "
                                 "salted hashes): check the id, or name them with --username")
        argilla_down = _reachable(f"{settings.argilla_api_url}/api/v1/status", settings.embedded_argilla)
        if argilla_down is not None and any(p.status in (ACTIVE, RELEASING) for _, p in found):
            raise ServiceError(_argilla_down(settings, argilla_down) + " - an active participant's work must "
                               "leave Argilla before they are withdrawn")
        for info, participant in found:
            if argilla_down is None:
                result = withdraw_participant(open_collection(study, info.key, settings),  # type: ignore[arg-type]
                                              participant, reason)
            else:  # finished participants: the store alone; their records stay until Argilla answers
                result = replace(withdraw_participant(store, participant, reason, info,
                                                      run_folder=settings.runs_dir / config.name),
                                 argilla="Argilla is not reachable")
            console.print(result.message, highlight=False, soft_wrap=True)
    finally:
        store.close()


@app.command("privacy-review")
@friendly_errors
def privacy_review(
    study: Path = typer.Argument(..., help="The study config, e.g. studies/my-study.yaml."),
    decide: str = typer.Option(None, "--decide", help="keep, mask or drop: set this decision on the rows "
                               "named by --row, or on every undecided row.", show_default=False),
    row: list[str] = typer.Option([], "--row", help="A row id of the review file (answer:<id> or "
                                  "question:<id>); repeat for several.", show_default=False),
) -> None:
    """List the privacy review's flagged answers and questions (ids, kinds found, decisions), or
    decide them. The texts stay in the review file (<run>/private/privacy-review.json, owner-only):
    read them there before deciding; publish-dataset publishes once every row is decided."""
    from crowdpref.config import load_study
    from crowdpref.release.review import decide as set_decision
    from crowdpref.release.review import read_review, review_file
    from crowdpref.runfolder import RunFolder

    config = load_study(study)
    path = review_file(RunFolder.for_study(_settings().runs_dir, config.name))
    if row and not decide:
        raise CrowdprefError("--row needs --decide keep|mask|drop")
    if decide:
        changed, left = set_decision(path, decide, row)
        console.print(f"{path}: {changed} row(s) set to {decide}; {left} undecided", highlight=False)
        return
    rows = read_review(path)
    if not rows:
        console.print(f"{path}: no flagged answer or question (the last build found none)", highlight=False)
        return
    table = Table(title=str(path))
    for column in ("id", "found", "decision"):
        table.add_column(column)
    for row_id, item in rows.items():
        kinds = item.get("kinds") if isinstance(item.get("kinds"), dict) else {}
        table.add_row(row_id, ", ".join(f"{k} {n}" for k, n in kinds.items()),
                      str(item.get("decision") or "UNDECIDED"))
    console.print(table)


@app.command()
@friendly_errors
def backup(
    to: Path = typer.Option(None, "--to", help="Write the archive here instead of "
                            "<state>/backups/crowdpref-YYYYmmddTHHMMSSZ.tar.gz.", show_default=False),
) -> None:
    """Write one backup archive while the stack runs: the study store, the embedded Argilla's
    database, the secrets and the study run folders, with a manifest of sizes and sha256.

    The archive holds passwords and keys: it is written owner-only (mode 0600); keep it private.
    Then the archives of <state>/backups/ older than backup_retention_days (30) are deleted."""
    use_project()
    from services import backup as backups

    settings = _settings()
    with _byte_progress() as (progress, on_progress):
        result = backups.create(settings, to, progress=on_progress)
        progress.stop()
    deleted = backups.prune(settings)
    held = ", ".join(f"{part} ({kind})" for part, kind in result.databases.items())
    console.print(f"backup written: {result.path} ({result.size / 1e6:.1f} MB, {result.files} files; databases: "
                  f"{held}; mode 0600) in {result.seconds:.1f} s; {len(deleted)} archive(s) older than "
                  f"{settings.backup_retention_days:g} days deleted", highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def restore(
    archive: Path = typer.Argument(..., help="An archive `crowdpref backup` wrote."),
) -> None:
    """Restore a backup archive with the stack down (`crowdpref down` first).

    The manifest and every file's sha256 are checked in a temporary folder before anything is
    replaced: a damaged archive changes nothing. Then `crowdpref up` starts the restored state."""
    use_project()
    from services import backup as backups

    settings = _settings()
    with _byte_progress() as (progress, on_progress):
        result = backups.restore(settings, archive, progress=on_progress)
        progress.stop()
    console.print(f"restored {result.archive} (taken {result.created_at}; {result.files} files) into "
                  f"{settings.state_dir} in {result.seconds:.1f} s: run `crowdpref up`", highlight=False,
                  soft_wrap=True)


@contextlib.contextmanager
def _byte_progress() -> Any:
    """A rich progress bar and the ``progress(what, done, total)`` callback that moves it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as progress:
        task = progress.add_task("starting", total=1)

        def on_progress(what: str, done: int, total: int) -> None:
            progress.update(task, description=what, completed=done, total=max(total, 1))

        yield progress, on_progress


def _start_fake_prolific(config: Any, settings: Settings) -> None:
    """The demo's participants come through the FAKE Prolific and the portal: start the fake,
    check the portal runs, and subscribe the portal to the fake's webhooks (a fresh fake knows no
    subscription, so this is done on every demo run)."""
    from crowdpref.errors import ServiceError
    from crowdpref.recruitment import prolific_client, setup_webhooks
    from crowdpref.store import open_store

    use_project()
    from services import portal, stack

    if not portal.healthy(settings):
        raise ServiceError(f"the participant portal is not running at {settings.portal_public_url}: run `crowdpref up`")
    with console.status("starting the fake Prolific..."):
        stack.start_fake_prolific(settings)
    store = open_store(settings)
    try:
        with prolific_client(config, settings) as client:
            setup_webhooks(settings, store, client, workspace_id="demo-workspace", force=True)
    finally:
        store.close()
    console.print(f"Fake Prolific:          http://{settings.host}:{settings.fake_prolific_port}  "
                  "(simulated participants arrive through it and the portal)", highlight=False)


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


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
