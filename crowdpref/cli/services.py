"""Commands that run the services: ``up``, ``deploy``, ``down``, ``service install`` and
``status``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from crowdpref.cli.common import _settings, _use_prefect, app, console, friendly_errors
from crowdpref.errors import ConfigError
from crowdpref.project import use_project


@app.command()
@friendly_errors
def up(
    only: list[str] = typer.Option(
        None, "--only",
        help="Start only these components: argilla, prefect, portal, worker (the Prefect worker on pool "
             "'crowdpref'), caddy (the portal and Argilla on one origin: HTTPS in the public profile, plain HTTP "
             "on this host otherwise) (default: all)."
    ),
    reset_owner: bool = typer.Option(
        False, "--reset-owner",
        help="Give the embedded Argilla's owner a new password and API key (when its credentials file "
             "was lost or damaged); the stack must be down."),
    supervise: bool = typer.Option(
        None, "--supervise/--no-supervise", show_default=False,
        help="Run each service under a keeper (as the service's own user) that starts it again when it dies; "
             "default: on in the public profile (CROWDPREF_PUBLIC_URL), off otherwise."),
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
        from services.argilla.service import check_secrets

        ensure_owner_credentials(settings)  # damaged secrets: one line before anything starts
        check_secrets(settings)
    notes: list[str] = []
    with console.status("starting services...") as spinner:
        rows = stack.up(settings, components, on_step=lambda step: spinner.update(f"starting {step}..."),
                        on_note=notes.append, supervise=supervise)
    _print_status(rows)
    for note in notes:
        console.print(note, highlight=False)
    if "argilla" in components and settings.embedded_argilla:
        creds = ensure_owner_credentials(settings)
        where = settings.argilla_api_url
        if settings.argilla_participant_url != settings.argilla_api_url:
            where = (f"{settings.argilla_participant_url}  (on this host: {settings.argilla_api_url})" if settings.public
                     else f"{settings.argilla_api_url}  (participants: {settings.argilla_participant_url})")  # the laptop: you use it directly
        console.print(
            f"Argilla UI:  {where}  (owner [bold]{creds['username']}[/], "
            f"API key {masked(creds['api_key'])}; full credentials in {settings.owner_credentials_file})",
            highlight=False,
        )
    if "portal" in components:
        console.print(f"Portal:      {settings.portal_public_url}  (participants' study links start here; "
                      "Argilla's pages for participants on the same origin)", highlight=False)
    if "prefect" in components:
        console.print(f"Prefect UI:  {settings.prefect_ui_url}", highlight=False)
        auth = (f'; export PREFECT_API_AUTH_STRING="$(cat {settings.prefect_auth_string_file})"'
                if settings.prefect_requires_auth else "")
        console.print(f"For flows in this shell: export PREFECT_API_URL={settings.prefect_url}{auth}", highlight=False)


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
    from services import privileges
    from services.process import ProcessManager

    settings = _settings()
    _use_prefect(settings)
    with console.status("registering deployments..."):
        names = deploy_all(settings)
    console.print(f"registered {len(names)} deployments: {', '.join(sorted(names))}", highlight=False)
    if worker:
        already = ProcessManager(settings.state_dir).running(WORKER_NAME) is not None
        with console.status("starting a worker on pool 'crowdpref'..."):
            # one that already runs is kept: never a second worker; as root, as its own user (as `up` starts it)
            running = start_worker(settings, privileges.manager(settings))
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


service_app = typer.Typer(help="Run the stack under systemd instead of `crowdpref up`.", no_args_is_help=True)
app.add_typer(service_app, name="service")


@service_app.command("install")
@friendly_errors
def service_install(
    folder: Path = typer.Option(None, "--dir", help="Where to write the units (default: /etc/systemd/system, as root: "
                                "then the services' system users are made and given their folders too)."),
    user: str = typer.Option(None, "--user", help="One account for every service (User=) instead of one system "
                             "user per service (crowdpref-redis, crowdpref-portal, ...)."),
    check: bool = typer.Option(True, "--check/--no-check", help="Check the units with `systemd-analyze verify`."),
) -> None:
    """Write a hardened systemd unit for every service of this profile (its own system user,
    only its own secrets, restart on failure, start at boot, ordered dependencies; the
    environment in 0600 files in the secrets folder) and check them with `systemd-analyze
    verify` where it exists. As root into /etc/systemd/system it also makes the missing system
    users and gives each its folders; with --dir it prints those commands. Exit 1 if the check
    finds a problem, 2 if a service's user could not reach what it runs."""
    use_project()
    from services import systemd

    settings = _settings()
    system = folder is None
    target = systemd.default_dir() if system else folder
    units = systemd.render(settings, user)
    problems = systemd.unreachable(settings, units)
    if problems and system:  # before anything is written
        raise ConfigError(f"crowdpref service install: {problems[0]}")
    paths = systemd.install(settings, target, user)
    console.print(f"wrote {len(paths)} units in {target}: {', '.join(p.name for p in paths)}", highlight=False,
                  soft_wrap=True)
    console.print(f"environment files (0600): {systemd.env_folder(settings)}", highlight=False)
    for problem in problems:
        console.print(f"warning: {problem}", highlight=False, soft_wrap=True)
    commands = systemd.account_commands(settings, units)
    if system:
        console.print("system users and their folders:", highlight=False)
        systemd.run_commands(commands, log=lambda line: console.print(f"  {line}", highlight=False, soft_wrap=True))
    else:
        console.print("then, as root, make the services' system users and give them their folders:", highlight=False)
        for argv in commands:
            console.print(f"  {shlex.join(argv)}", highlight=False, soft_wrap=True)
    if check:
        checked = systemd.verify(paths)
        console.print("systemd-analyze verify: no problem found" if checked
                      else "systemd-analyze not found: the units were not checked", highlight=False)
        if checked:
            scores = systemd.exposure(paths)
            console.print("systemd-analyze security (exposure, 0 safest .. 10): " +
                          ", ".join(f"{name.removesuffix('.service')} {score:.1f}" for name, score in scores.items()),
                          highlight=False, soft_wrap=True)
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
        from crowdpref.cli.work import _show_progress

        _show_progress(study, as_json=False, ask_prolific=True)
        return
    use_project()
    from services import stack

    settings = _settings()
    rows = stack.status(settings)
    _print_status(rows)
    if settings.public:
        _print_public(settings)
    else:
        console.print(f"One origin:  {settings.site_url}  (the portal under /s/, /hooks/, /healthz; Argilla for "
                      f"participants; the owner and the pipeline use Argilla at {settings.argilla_api_url})",
                      highlight=False)
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
