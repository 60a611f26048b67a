"""Serve every deployment of ``prefect.yaml`` from ONE process on this machine (no work pool, no
worker): the deployments are registered with the Prefect server, their schedules created, and
runs started from the UI, the CLI or a schedule execute here, each in a subprocess.

    PREFECT_API_URL=http://127.0.0.1:4200/api .venv/bin/python deployments/serve.py
    .venv/bin/python deployments/serve.py --only study --only simulate-crowd --activate study

Definitions come from ``prefect.yaml`` (:mod:`deployments.definitions`), so ``prefect deploy
--all`` and this file never disagree. Settings the environment does not set are taken from
crowdpref's settings (``Settings.prefect_env()``: API URL, Prefect home, persisted results so
a failed run can be retried from its cache). One SIGTERM (or Ctrl-C) stops it; on the way out
the schedules are paused, so nothing piles up while no one serves them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="serve only this deployment (repeatable; default: all of prefect.yaml)")
    parser.add_argument("--activate", action="append", default=[], metavar="NAME",
                        help="turn this deployment's schedules on (repeatable; prefect.yaml keeps them off)")
    parser.add_argument("--limit", type=int, default=None,
                        help="at most this many flow runs at a time (default: no limit)")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="written once every deployment is registered (used by health checks)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    # Entrypoints and the study paths in the parameters are relative to the repository root.
    os.chdir(REPO)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    from crowdpref.errors import CrowdprefError
    from crowdpref.settings import load_settings

    try:
        for key, value in load_settings().prefect_env().items():
            os.environ.setdefault(key, value)  # before Prefect is imported; explicit env wins
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
        deployments = _build(args)
    except CrowdprefError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code

    api = os.environ["PREFECT_API_URL"].rstrip("/")
    if not _api_up(api):
        print(f"error: Prefect API at {api} is not reachable: start it (`crowdpref up`) or set PREFECT_API_URL",
              file=sys.stderr)
        return 1

    import asyncio

    from prefect.runner import Runner

    runner = Runner(name="crowdpref-serve", pause_on_shutdown=True, limit=args.limit)
    for deployment in deployments:
        deployment_id = runner.add_deployment(deployment)  # registers it (and its schedules) now
        _served_from_here(api, deployment_id)
    print(f"serving {len(deployments)} deployments against {api}:", flush=True)
    for deployment in deployments:
        print(f"  {deployment.flow_name}/{deployment.name}", flush=True)
    try:
        asyncio.run(_serve(runner, args.ready_file))
    except KeyboardInterrupt:
        pass
    finally:
        if args.ready_file is not None:
            args.ready_file.unlink(missing_ok=True)
    return 0


async def _serve(runner, ready_file: Path | None) -> None:
    """Run the runner until SIGTERM/SIGINT, then stop it the awaited way, so that it pauses the
    deployments' schedules before the process exits. (Prefect's own SIGTERM handler exits from
    inside the event loop, and the pause then sometimes never happens.) ``ready_file`` is
    written once the runner polls for work."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    serving = asyncio.create_task(runner.start())
    while not runner.started:  # start() installs Prefect's handler first: replace it after
        if serving.done():
            return await serving
        await asyncio.sleep(0.05)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_file is not None:
        ready_file.parent.mkdir(parents=True, exist_ok=True)
        ready_file.write_text(str(os.getpid()))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        print("stopping: cancelling runs in progress, pausing the schedules", flush=True)
        if runner.started:
            await runner.astop()
    else:
        stopping.cancel()
    await serving


def _local(api: str) -> bool:
    from urllib.parse import urlsplit

    return urlsplit(api).hostname in ("127.0.0.1", "localhost", "::1")


def _api_up(api: str) -> bool:
    import httpx

    from deployments.deploy import prefect_api

    try:
        with prefect_api(api, local=_local(api)) as client:
            return client.get("health").status_code == 200
    except httpx.HTTPError:
        return False


def _served_from_here(api: str, deployment_id: object) -> None:
    """Make the deployment exactly what a fresh serve registration is: code in this folder, no
    pull steps, no work pool. The same deployment registered earlier by `prefect deploy` would
    keep ``path: null`` and its pool after serve's upsert (Prefect 3.8.8), and its runs then
    crash ("No such file or directory: '<cwd>/None'") or wait for a worker."""
    from deployments.deploy import prefect_api

    with prefect_api(api, local=_local(api)) as client:
        client.patch(
            f"deployments/{deployment_id}",
            json={"path": ".", "pull_steps": [], "work_pool_name": None, "work_queue_name": None},
        ).raise_for_status()


def _build(args: argparse.Namespace) -> list:
    import dataclasses

    from crowdpref.errors import ConfigError
    from deployments.definitions import load_definitions

    definitions = load_definitions()
    known = {d.name for d in definitions}
    unknown = sorted((set(args.only) | set(args.activate)) - known)
    if unknown:
        raise ConfigError(f"prefect.yaml has no deployment {', '.join(unknown)}: choose from {', '.join(sorted(known))}")
    chosen = [d for d in definitions if not args.only or d.name in args.only]
    out = []
    for definition in chosen:
        if definition.name in args.activate:
            definition = dataclasses.replace(
                definition, schedules=tuple(dataclasses.replace(s, active=True) for s in definition.schedules)
            )
        try:
            flow = definition.load_flow()
        except Exception as exc:  # noqa: BLE001 - one line, then exit
            raise ConfigError(
                f"deployment '{definition.name}': cannot import {definition.entrypoint} "
                f"({exc.__class__.__name__}: {exc}); serve the others with --only"
            ) from None
        out.append(definition.to_deployment(flow))
    return out


if __name__ == "__main__":
    sys.exit(main())
