"""Register the deployments of ``prefect.yaml`` with the configured Prefect server, and run
what executes them in the background: a ``serve`` process (one machine) or a worker on the
``crowdpref`` process pool.

- :func:`deploy_all`: the pool exists (created if missing), then ``prefect deploy --all
  --no-prompt`` from the repository root; returns ``flow/deployment`` names.
- :func:`serve_in_background` / :func:`stop_serve`: ``deployments/serve.py`` as the background
  service ``prefect-serve`` (pid record, log in ``<state>/logs/prefect-serve.log``).
- :func:`start_worker` / :func:`stop_worker`: ``prefect worker start --pool crowdpref`` as
  ``prefect-worker`` (a worker needs a second SIGTERM to exit; :func:`stop_worker` sends it).
  ``crowdpref up`` starts it as a service of the stack (services/stack.py); ``crowdpref
  deploy`` starts it too unless it runs.

Prefect is only run as a subprocess or talked to over HTTP here, so the calling process's own
Prefect settings never matter.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

from crowdpref.errors import CrowdprefError, ServiceError
from crowdpref.settings import Settings
from crowdpref.tls import shared_context
from deployments.definitions import PREFECT_YAML, REPO, WORK_POOL, WORK_POOL_TYPE, DeploymentDef, load_definitions
from services.process import ProcessManager, RunningService, ServiceSpec

SERVE_NAME = "prefect-serve"
WORKER_NAME = "prefect-worker"
DEPLOY_TIMEOUT_S = 600.0


def _env(settings: Settings) -> dict[str, str]:
    return {**os.environ, **settings.prefect_env(), "PREFECT_CLI_PROMPT": "false"}


class _RetryingClient(httpx.Client):
    """Retries what a busy Prefect server answers while it is busy (SQLite locked -> 503,
    429, 502, 504) with a short backoff, as Prefect's own client does; and a read (GET, or a
    POST to a ``/filter`` or ``/count`` route: they change nothing) that timed out - a busy
    server on a loaded machine, seen failing `crowdpref deploy`."""

    RETRY_STATUS = frozenset({429, 502, 503, 504})
    DELAYS_S = (0.5, 1.0, 2.0, 4.0, 4.0)

    def request(self, method: str, url: httpx.URL | str, *args, **kwargs) -> httpx.Response:  # type: ignore[override]
        path = str(url).split("?", 1)[0].rstrip("/")
        read = method.upper() in ("GET", "HEAD") or path.endswith(("/filter", "/count"))
        for delay in self.DELAYS_S:
            try:
                response = super().request(method, url, *args, **kwargs)
            except httpx.TimeoutException:
                if not read:
                    raise
            else:
                if response.status_code not in self.RETRY_STATUS:
                    return response
            time.sleep(delay)
        return super().request(method, url, *args, **kwargs)


def prefect_api(url: str, local: bool, auth_string: str | None = None) -> httpx.Client:
    """An HTTP client for the Prefect API at ``url`` (``.../api``); ``local``: never through
    a proxy from the environment. It authenticates as Prefect's own client does: with the auth
    string (``auth_string``, else ``$PREFECT_API_AUTH_STRING``) as HTTP basic authentication,
    else with ``$PREFECT_API_KEY`` as a bearer token."""
    auth_string = auth_string or os.environ.get("PREFECT_API_AUTH_STRING")
    key = os.environ.get("PREFECT_API_KEY")
    if auth_string:
        headers = {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()}
    else:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
    return _RetryingClient(base_url=url.rstrip("/") + "/", headers=headers, timeout=15.0, trust_env=not local,
                           verify=shared_context())


def _client(settings: Settings) -> httpx.Client:
    return prefect_api(settings.prefect_url, local=settings.embedded_prefect, auth_string=settings.prefect_auth_string())


def _require_server(client: httpx.Client, settings: Settings) -> None:
    try:
        client.get("health").raise_for_status()
    except httpx.HTTPError as exc:
        hint = "run `crowdpref up`" if settings.embedded_prefect else "check PREFECT_API_URL"
        raise ServiceError(
            f"Prefect API at {settings.prefect_url} is not reachable ({exc.__class__.__name__}): {hint}"
        ) from None


def _run_cli(args: list[str], settings: Settings, log_name: str, timeout_s: float) -> subprocess.CompletedProcess:
    """Run ``prefect ARGS`` from the repository root; its output goes to ``<state>/logs/LOG_NAME``."""
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log = settings.logs_dir / log_name
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "prefect", *args],
            cwd=REPO, env=_env(settings), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise CrowdprefError(f"`prefect {' '.join(args)}` did not finish within {timeout_s:.0f} s") from None
    log.write_text(f"$ prefect {' '.join(args)}\n{proc.stdout}\n{proc.stderr}", encoding="utf-8")
    return proc


def _reason(proc: subprocess.CompletedProcess) -> str:
    """The most telling line of a failed Prefect CLI call (rich boxes stripped)."""
    lines = [ln.strip(" │╭╮╰╯─\t") for ln in (proc.stderr + "\n" + proc.stdout).splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in reversed(lines):
        if any(word in ln for word in ("Error", "error", "failed", "Failed", "not found")):
            return ln[:300]
    return lines[-1][:300] if lines else f"exit code {proc.returncode}"


def ensure_work_pool(settings: Settings, name: str = WORK_POOL) -> bool:
    """Create the ``process`` work pool ``name`` unless it exists. Returns True if created."""
    with _client(settings) as client:
        _require_server(client, settings)
        response = client.get(f"work_pools/{name}")
        if response.status_code == 200:
            pool_type = response.json().get("type")
            if pool_type != WORK_POOL_TYPE:
                raise CrowdprefError(
                    f"work pool '{name}' exists with type '{pool_type}', expected '{WORK_POOL_TYPE}': "
                    f"delete it (`prefect work-pool delete {name}`) and deploy again"
                )
            return False
    proc = _run_cli(["work-pool", "create", name, "--type", WORK_POOL_TYPE], settings,
                    "prefect-work-pool.log", timeout_s=120)
    if proc.returncode != 0:
        raise CrowdprefError(f"creating work pool '{name}' failed: {_reason(proc)} (see {settings.logs_dir / 'prefect-work-pool.log'})")
    return True


def deploy_all(settings: Settings, prefect_file: Path = PREFECT_YAML) -> list[str]:
    """Register every deployment of ``prefect_file`` (default: the repository's prefect.yaml)
    with the configured Prefect server; returns their ``flow/deployment`` names in file order.
    Raises a one-line :class:`CrowdprefError` when anything fails."""
    definitions = load_definitions(prefect_file)
    if not definitions:
        raise CrowdprefError(f"{prefect_file}: no deployments defined")
    ensure_work_pool(settings)
    log = settings.logs_dir / "prefect-deploy.log"
    proc = _run_cli(["deploy", "--all", "--no-prompt", "--prefect-file", str(prefect_file)],
                    settings, log.name, timeout_s=DEPLOY_TIMEOUT_S)
    if proc.returncode != 0:
        raise CrowdprefError(f"prefect deploy --all failed: {_reason(proc)} (full output: {log})")

    names = [d.name for d in definitions]
    with _client(settings) as client:
        response = client.post("deployments/filter", json={"deployments": {"name": {"any_": names}}})
        response.raise_for_status()
        registered = response.json()
        flow_ids = sorted({d["flow_id"] for d in registered})
        flows = client.post("flows/filter", json={"flows": {"id": {"any_": flow_ids}}}).json() if flow_ids else []
    flow_names = {f["id"]: f["name"] for f in flows}
    wanted = {d.name: d for d in definitions}
    by_name: dict[str, str] = {}
    for d in registered:  # the same name may exist for other flows: match the entrypoint and pool too
        definition = wanted[d["name"]]
        if d.get("entrypoint") == definition.entrypoint and d.get("work_pool_name") == definition.work_pool:
            by_name[d["name"]] = f"{flow_names.get(d['flow_id'], '?')}/{d['name']}"
    missing = [n for n in names if n not in by_name]
    if missing:
        raise CrowdprefError(
            f"prefect deploy --all did not register {', '.join(missing)} on pool '{WORK_POOL}' (full output: {log})"
        )
    return [by_name[n] for n in names]


def _registered(client: httpx.Client, definition: DeploymentDef) -> dict:
    response = client.post("deployments/filter", json={"deployments": {"name": {"any_": [definition.name]}}})
    response.raise_for_status()
    for deployment in response.json():
        if deployment.get("entrypoint") == definition.entrypoint:
            return deployment
    raise CrowdprefError(
        f"deployment '{definition.name}' is not registered with {client.base_url}: "
        "run `crowdpref deploy` (or deployments/serve.py) first"
    )


def set_schedules_active(
    settings: Settings, name: str, active: bool, slug: str | None = None, prefect_file: Path = PREFECT_YAML
) -> list[str]:
    """Turn the schedules of deployment ``name`` (all, or the one called ``slug``) on or off;
    returns the slugs changed. Sends the schedule's parameters from ``prefect_file`` along:
    Prefect 3.8.8's server resets a schedule's parameter overrides to ``{}`` on every
    activate/pause that leaves them out (as `prefect deployment schedule resume|pause` does)."""
    definitions = {d.name: d for d in load_definitions(prefect_file)}
    if name not in definitions:
        raise CrowdprefError(f"{prefect_file.name} has no deployment '{name}': choose from {', '.join(definitions)}")
    definition = definitions[name]
    wanted = {s.slug: s for s in definition.schedules if slug is None or s.slug == slug}
    if not wanted:
        raise CrowdprefError(
            f"deployment '{name}' has no schedule {slug!r}: it has {[s.slug for s in definition.schedules] or 'none'}"
        )
    changed = []
    with _client(settings) as client:
        _require_server(client, settings)
        deployment = _registered(client, definition)
        for schedule in deployment.get("schedules") or []:
            if schedule.get("slug") not in wanted:
                continue
            body = {"active": active, "parameters": dict(wanted[schedule["slug"]].parameters)}
            client.patch(f"deployments/{deployment['id']}/schedules/{schedule['id']}", json=body).raise_for_status()
            changed.append(schedule["slug"])
    missing = sorted(set(wanted) - set(changed))
    if missing:
        raise CrowdprefError(f"deployment '{name}' on the server lacks schedules {missing}: deploy again")
    return changed


# --- background processes ---------------------------------------------------------------


def _serve_ready_file(settings: Settings) -> Path:
    return settings.pids_dir / f"{SERVE_NAME}.ready"


def serve_healthy(settings: Settings) -> bool:
    """The serve process has registered its deployments and is still running."""
    running = ProcessManager(settings.state_dir).running(SERVE_NAME)
    return running is not None and _serve_ready_file(settings).exists()


def serve_spec(settings: Settings, only: list[str] | None = None, activate: list[str] | None = None) -> ServiceSpec:
    ready = _serve_ready_file(settings)
    argv = [sys.executable, str(REPO / "deployments" / "serve.py"), "--ready-file", str(ready)]
    for name in only or []:
        argv += ["--only", name]
    for name in activate or []:
        argv += ["--activate", name]
    return ServiceSpec(
        name=SERVE_NAME,
        argv=argv,
        # the flows it runs read crowdpref's settings again: same state folder as ours
        env={**os.environ, **settings.prefect_env(), "CROWDPREF_HOME": str(settings.state_dir)},
        health=ready.exists,
        cwd=REPO,
        start_timeout_s=180,
    )


def serve_in_background(
    settings: Settings, only: list[str] | None = None, activate: list[str] | None = None
) -> RunningService:
    """Start ``deployments/serve.py`` as the background service ``prefect-serve`` (unless it
    already runs) and wait until its deployments are registered."""
    manager = ProcessManager(settings.state_dir)
    if manager.running(SERVE_NAME) is None:
        _serve_ready_file(settings).unlink(missing_ok=True)
    with _client(settings) as client:
        _require_server(client, settings)
    return manager.start(serve_spec(settings, only, activate), settings.host)


def stop_serve(settings: Settings) -> bool:
    """Stop the serve process (one SIGTERM; schedules are paused on the way out)."""
    stopped = ProcessManager(settings.state_dir).stop(SERVE_NAME, timeout_s=30)
    _serve_ready_file(settings).unlink(missing_ok=True)
    return stopped


def _worker_name() -> str:
    return f"crowdpref-{socket.gethostname()}"


def worker_healthy(
    settings: Settings, name: str | None = None, max_age_s: float = 120.0, since: float | None = None
) -> bool:
    """A worker called ``name`` sent a heartbeat to the ``crowdpref`` pool in the last
    ``max_age_s`` seconds (and, with ``since``, after that Unix time)."""
    name = name or _worker_name()
    try:
        with _client(settings) as client:
            response = client.post(f"work_pools/{WORK_POOL}/workers/filter", json={})
            if response.status_code != 200:
                return False
            workers = response.json()
    except (httpx.HTTPError, CrowdprefError):  # CrowdprefError: no readable auth string (public profile)
        return False
    now = datetime.now(timezone.utc)
    for worker in workers:
        beat = worker.get("last_heartbeat_time")
        if worker.get("name") == name and beat:
            when = datetime.fromisoformat(beat.replace("Z", "+00:00"))
            if now - when < timedelta(seconds=max_age_s) and (since is None or when.timestamp() >= since):
                return True
    return False


def worker_spec(settings: Settings) -> ServiceSpec:
    name = _worker_name()
    since = time.time() - 1.0  # a heartbeat of an earlier worker with this name does not count
    argv = [sys.executable, "-m", "prefect", "worker", "start",
            "--pool", WORK_POOL, "--type", WORK_POOL_TYPE, "--name", name]
    return ServiceSpec(
        name=WORKER_NAME,
        argv=argv,
        env={**_env(settings), "CROWDPREF_HOME": str(settings.state_dir)},
        health=lambda: worker_healthy(settings, name, since=since),
        cwd=REPO,
        start_timeout_s=120,
        term_signals=2,  # a Prefect worker exits only on the second SIGTERM
    )


def start_worker(settings: Settings, manager: ProcessManager | None = None) -> RunningService:
    """Start a process worker on the ``crowdpref`` pool as the background service
    ``prefect-worker`` (the pool is created if missing); wait for its first heartbeat. One that
    already runs (``crowdpref up`` starts it as a service of the stack) is returned as it is:
    never a second worker. ``manager``: the one ``up`` starts the stack with (as its own user
    where it runs as root: services/privileges.py); default: as the caller's user."""
    ensure_work_pool(settings)
    return (manager or ProcessManager(settings.state_dir)).start(worker_spec(settings), settings.host)


def stop_worker(settings: Settings, timeout_s: float = 30.0) -> bool:
    """Stop the worker (its pid record says it needs two SIGTERMs; the manager sends them)."""
    return ProcessManager(settings.state_dir).stop(WORKER_NAME, timeout_s=timeout_s)
