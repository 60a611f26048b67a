"""``crowdpref preflight``: check, on this server and its running stack, what a real study needs
(crowdpref.preflight), print one line per check with OK / WARN / FAIL / SKIP and the fix, write
the report into the study's run folder (``preflight.json``) and, when Prefect answers, as an
artifact. Exit 1 on any FAIL (publishing on Prolific then refuses), 0 otherwise, 2 for a usage
error.

This module makes the real :class:`~crowdpref.preflight.Probes`: the readers of Redis, Prefect,
the study store, the portal's log, restic, the Hub and the public address."""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import typer

from crowdpref.cli.common import _settings, app, console, err_console, friendly_errors, trust_stack_ca
from crowdpref.settings import Settings

STATUS_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


@app.command()
@friendly_errors
def preflight(
    study: Path = typer.Argument(..., help="The study config to check the server for, e.g. studies/my-study.yaml."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of lines."),
    rehearse: int = typer.Option(0, "--rehearse", min=0, max=500, metavar="N", help="Then a dress rehearsal: N "
                                 "simulated participants through the participant address (entry, onboarding, "
                                 "Argilla, Finish) on a copy of the study recruited on the FAKE Prolific; reports "
                                 "the time to the first item, webhooks, worker jobs and the capacity "
                                 "(<state>/capacity.json), then removes the copy."),
) -> None:
    """Check the running stack (laptop or public profile) for a real study: services doing their
    job, the public address, Prolific, the Hub, backups, disk, clock, the config. One line per
    check with the fix; exit 1 on any FAIL. The report goes to <state>/studies/<name>/preflight.json;
    publishing on Prolific refuses while it has a FAIL or is older than a day."""
    from crowdpref.preflight import run_preflight, write_report

    if not study.is_file():
        from crowdpref.errors import ConfigError

        raise ConfigError(f"{study}: no such study config: give the path of its YAML file")
    settings = _settings()
    probes = real_probes(settings)
    # the rehearsal first, so that the checks see the work it sent (jobs, webhooks, the capacity);
    # its lines come after theirs
    rehearsed = _rehearse(settings, study, rehearse, probes) if rehearse else []
    report = run_preflight(settings, study, probes)
    report.add(*rehearsed)
    path = write_report(report, settings.runs_dir)
    artifact = _artifact(settings, report)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for check in report.checks:
            style = STATUS_STYLE[check.status]
            fix = f"\n      fix: {check.fix}" if check.fix and check.status in ("FAIL", "WARN") else ""
            console.print(f"[{style}]{check.status:<4}[/]  {check.name}: {check.detail}{fix}", highlight=False,
                          soft_wrap=True, markup=True)
        console.print(f"{report.verdict()}; report: {path}" + (f"; {artifact}" if artifact else ""),
                      highlight=False, soft_wrap=True)
    if report.failed:
        raise typer.Exit(1)


def _rehearse(settings: Settings, study: Path, participants: int, probes: Any) -> list[Any]:
    """The dress rehearsal (crowdpref.preflight.rehearsal) on the running stack: the fake Prolific
    started as ``crowdpref demo`` starts it, the stack's own CA trusted (public profile, internal
    TLS) by this process's TLS context. Its lines; the portal not answering is one FAIL line."""
    from crowdpref.preflight.rehearsal import Readers, rehearse
    from crowdpref.preflight.report import fail
    from crowdpref.project import use_project

    use_project()
    from services import portal, stack

    trust_stack_ca(settings)
    if not portal.healthy(settings):
        return [fail("rehearsal: participants through the stack", f"the participant portal does not answer at "
                     f"{settings.portal_public_url}", "start the stack with `crowdpref up`")]
    with console.status("starting the fake Prolific..."):
        stack.start_fake_prolific(settings)
    outcome = rehearse(settings, study, participants, Readers(probes.portal_log, probes.rq_workers),
                       say=lambda line: err_console.print(line, highlight=False, soft_wrap=True))
    return outcome.checks


def _artifact(settings: Settings, report: Any) -> str | None:
    """The report as a Prefect artifact when the Prefect server answers (never fails the command)."""
    from crowdpref.cli.common import _reachable
    from crowdpref.project import use_project

    if _reachable(f"{settings.prefect_url}/health", settings.embedded_prefect) is not None:
        return None
    import os

    os.environ.update(settings.prefect_env())
    try:
        use_project()
        from tasks.preflight import preflight_artifact

        preflight_artifact(report)
    except Exception as exc:  # noqa: BLE001 - the file is the record; the artifact is a view of it
        err_console.print(f"(the Prefect artifact was not made: {exc.__class__.__name__})", highlight=False)
        return None
    return f"artifact {report.study}-preflight in the Prefect UI"


# --- the real probes ---------------------------------------------------------------------------------------
def real_probes(settings: Settings) -> Any:
    from crowdpref.preflight import Probes

    return Probes(
        services=lambda: _services(settings),
        rq_workers=lambda: _rq_workers(settings),
        prefect=lambda: _prefect(settings),
        store=lambda: _store(settings),
        portal_log=lambda: _log_lines(settings.logs_dir / "portal.log"),
        prolific_client=lambda config: _prolific_client(config, settings),
        hub_whoami=_whoami(settings),
        backups=lambda: _backups(settings),
        disk_free=lambda path: shutil.disk_usage(_existing(path)).free,
        clock_offset=lambda: _clock(settings),
        http_client=lambda: _http_client(settings),
        tls_context=lambda: _tls_context(settings),
    )


def _services(settings: Settings) -> list[tuple[str, bool]]:
    from crowdpref.project import use_project

    use_project()
    from services import stack

    return [(row.name, bool(row.healthy)) for row in stack.status(settings)]


def _rq_workers(settings: Settings) -> Any:
    import redis

    from crowdpref.preflight.stack import read_rq_workers
    from crowdpref.project import use_project

    use_project()
    from services import redis as redis_service

    client = redis.Redis(host=settings.host if settings.host not in ("0.0.0.0", "::", "") else "127.0.0.1",
                         port=settings.redis_port, password=redis_service.password(settings, create=False),
                         socket_timeout=5, socket_connect_timeout=3)
    try:
        return read_rq_workers(client)
    finally:
        client.close()


def _prefect(settings: Settings) -> tuple[list[dict[str, Any]], int, int]:
    import httpx

    from crowdpref.tls import shared_context

    auth_string = settings.prefect_auth_string()
    auth = tuple(auth_string.split(":", 1)) if auth_string else None
    base = settings.prefect_url
    with httpx.Client(timeout=10.0, verify=shared_context(), auth=auth) as client:  # type: ignore[arg-type]
        found = client.post(f"{base}/work_pools/crowdpref/workers/filter", json={})
        if found.status_code == 404:
            raise RuntimeError("the work pool 'crowdpref' does not exist: run `crowdpref deploy`")
        found.raise_for_status()
        workers = [{**w, "last_heartbeat_time": _epoch(w.get("last_heartbeat_time"))} for w in found.json()]
        started = ["RUNNING", "COMPLETED", "FAILED", "CRASHED", "CANCELLED", "CANCELLING"]
        picked = client.post(f"{base}/flow_runs/count", json={"flow_runs": {
            "deployment_id": {"is_null_": False}, "state": {"type": {"any_": started}}}})
        picked.raise_for_status()
        late = client.post(f"{base}/flow_runs/count", json={"flow_runs": {"state": {"name": {"any_": ["Late"]}}}})
        late.raise_for_status()
    return workers, int(picked.json()), int(late.json())


def _epoch(value: Any) -> float:
    from datetime import datetime

    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return 0.0


def _store(settings: Settings) -> Any:
    from crowdpref.store import open_store

    return open_store(settings)


def _log_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


def _prolific_client(config: Any, settings: Settings) -> Any:
    from crowdpref.recruitment import prolific_client

    return prolific_client(config, settings, max_attempts=2, timeout_s=10.0)


def _whoami(settings: Settings) -> Any:
    if settings.hf_token is None:
        return None

    def whoami() -> dict[str, Any]:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=settings.hf_endpoint, token=settings.hf_token.get_secret_value())  # type: ignore[union-attr]
        return api.whoami()

    return whoami


def _backups(settings: Settings) -> Any:
    from crowdpref.preflight.host import BackupState
    from crowdpref.project import use_project

    use_project()
    from services import backup

    if settings.backup_repository is None and not backup.password_file(settings).exists():
        return BackupState(None)  # no backup was ever taken here (the first one makes the password file)
    mine = [s for s in backup.snapshots(settings) if s.mine]
    if not mine:
        return BackupState(None)
    latest = mine[-1]
    at = _epoch(re.sub(r"\.\d+", "", latest.time))  # restic's nanoseconds: not for fromisoformat
    return BackupState(at, latest.short_id, *_readable(settings, latest))


def _readable(settings: Settings, snapshot: Any) -> tuple[bool, str | None]:
    """The snapshot reads back as a restore would read it: its description decrypts and names
    databases that are in it, and then the whole snapshot is read from the repository itself
    (``restic --no-cache dump SNAPSHOT /`` to nowhere: every pack it uses fetched, decrypted and
    checked; the local cache, which keeps the folder trees, would hide a damaged repository)."""
    from services import backup

    restic = backup._Restic(settings)
    try:
        listed = restic.run(["ls", snapshot.id], "restic ls").stdout
        # where the description sits in the snapshot: at its root (crowdpref backs up "." of its staging
        # folder, and restic 0.14 stores that as the root), or under the folder's path (other versions)
        found = [line.strip() for line in listed.splitlines() if line.strip().endswith(f"/{backup.DESCRIPTION}")]
        inside = min(found, key=lambda path: path.count("/"), default=None)  # the top one
        if inside is None:
            return False, f"no {backup.DESCRIPTION} in the snapshot: not a crowdpref backup"
        description = json.loads(restic.run(["dump", snapshot.id, inside], "restic dump").stdout)
    except Exception as exc:  # noqa: BLE001 - the finding
        return False, f"{exc.__class__.__name__}: {str(exc)[:160]}"
    if not isinstance(description, dict) or description.get("format") != backup.FORMAT:
        return False, f"{backup.DESCRIPTION} does not describe a crowdpref backup"
    for part, entry in (description.get("databases") or {}).items():
        member = (entry or {}).get("member")
        if isinstance(member, str) and f"/{member}" not in listed:
            return False, f"the {part} database it describes is missing"
    try:
        restic.run(["--no-cache", "dump", snapshot.id, "/"], "restic dump (the whole snapshot)", timeout=3600,
                   keep_output=False)
    except backup.BackupError as exc:
        return False, f"it does not read back: {str(exc)[:200]}"
    return True, None


def _existing(path: Path) -> Path:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _clock(settings: Settings) -> tuple[float | None, str]:
    """Our clock against Prolific's (its replies' Date header) for the real Prolific; else what
    NTP says (timedatectl)."""
    import httpx

    from crowdpref.preflight.host import http_date_offset

    if settings.prolific_token is not None:
        sent = time.time()
        try:
            response = httpx.head(settings.prolific_api_url, timeout=5.0)
        except httpx.HTTPError:
            response = None
        received = time.time()
        offset = http_date_offset(response.headers.get("date") if response is not None else None, sent, received)
        if offset is not None:
            return offset, f"{settings.prolific_api_url} (its Date header, 1 s resolution)"
    return _ntp_synchronised()


def _ntp_synchronised() -> tuple[float | None, str]:
    try:
        out = subprocess.run(["timedatectl", "show", "-p", "NTPSynchronized", "--value"], check=False,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, "no outside server configured, and timedatectl is not available to say whether NTP runs"
    if out == "yes":
        return 0.0, "NTP (timedatectl: synchronised)"
    return None, f"no outside server configured, and timedatectl says NTP synchronised: {out or 'unknown'}"


def _tls_context(settings: Settings) -> ssl.SSLContext:
    from crowdpref.project import use_project

    use_project()
    from services import caddy

    context = ssl.create_default_context()
    if settings.public and settings.public_tls == "internal":
        root = caddy.internal_root(settings)
        if root.exists():
            context.load_verify_locations(cafile=str(root))
    return context


def _http_client(settings: Settings) -> Any:
    import httpx

    return httpx.Client(timeout=5.0, verify=_tls_context(settings), follow_redirects=False)
