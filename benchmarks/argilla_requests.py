"""What one participant's arrival costs argilla-server, request by request, for variants of the
launcher's patch (services/argilla/lighter_requests.py) and of the records' shape, in the same run.

argilla-server's own HTTP API runs in-process (its ASGI app with its lifespan, in the Argilla venv,
on a fresh migrated SQLite database, no uvicorn and no network), so the CPU each request costs is
read exactly with ``time.process_time`` around it. Each simulated arrival makes the requests an
arrival makes through the public profile:

1. the portal writes the participant's records into their dataset (``PUT .../records/bulk``: Q
   records shaped like study 1's - a question field; with ``/meta``, the two metadata values the
   studies wrote before issue 34, ``category`` shown to annotators and ``question_id`` hidden);
2. the browser, signed in as the participant, lists their datasets (``GET /api/v1/me/datasets``);
3. and searches their pending records (``POST /api/v1/me/datasets/<id>/records/search``).

``--arrivals`` arrivals per variant, each variant's server in its own process on its own copy of
the same freshly migrated database (each arrival its own annotator, workspace and dataset, made
beforehand and not timed). One webhook subscribed to ``response.*`` events is enabled throughout,
as the portal's is. A variant is ``stock`` or patches joined by ``+`` (``events``: the record-event
patch, the one the launcher applies; ``adapters`` and ``membership``: the two patches issue 34
removed, measurable only with a lighter_requests.py that still has them), optionally followed by
``/meta``. The first variant is the one the others are compared with.

    .venv/bin/python benchmarks/argilla_requests.py [--arrivals 40] [--records 10]
                                                    [--variants stock events stock/meta ...]

Target: none of its own; the figures explain the burst's CPU (docs/performance.md#argillas-share-of-an-arrival-profiled-and-made-lighter).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
ARGILLA_PYTHON = REPO / ".venv-argilla" / "bin" / "python"
LAUNCH_DIR = REPO / "services" / "argilla"

INNER = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[1])
import launch, lighter_requests
import httpx
from argilla_server import app, _app

_app.configure_redis = lambda: None  # the lifespan pings Redis; no job is sent (no webhook wants record events)
ARRIVALS, RECORDS, VARIANT = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
PATCHES, _, SHAPE = VARIANT.partition("/")
METADATA = SHAPE == "meta"
OLD = {"adapters": "_settings_adapters_built_once", "membership": "_membership_read_once"}  # before issue 34
for patch in ([] if PATCHES == "stock" else PATCHES.split("+")):
    if patch == "events":
        lighter_requests.record_events_only_when_wanted()
        continue
    function = getattr(lighter_requests, OLD.get(patch, "?"), None)
    if function is None:
        sys.exit(f"no patch '{patch}' in this services/argilla/lighter_requests.py")
    problems, apply = function()
    assert not problems, problems
    apply()

async def main():
    problem = await launch._set_owner(__import__("pathlib").Path(sys.argv[2]), replace=False)
    assert not problem, problem
    key = json.load(open(sys.argv[2]))["api_key"]
    out = {}
    async with app.router.lifespan_context(app):
        owner = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://argilla",
                                  headers={"X-Argilla-Api-Key": key}, timeout=60)
        async def call(client, method, path, expect, **kw):
            r = await client.request(method, "/api/v1" + path, **kw)
            assert r.status_code == expect, (method, path, r.status_code, r.text[:300])
            return r.json() if r.content else None
        await call(owner, "POST", "/webhooks", 201, json={"url": "http://127.0.0.1:9/h", "events": [
            "response.created", "response.updated", "response.deleted"]})
        people = []
        for i in range(ARRIVALS + 1):  # provisioned beforehand, like the warm pool (not timed)
            name = f"{VARIANT}-{i:03d}"
            ws = await call(owner, "POST", "/workspaces", 201, json={"name": name})
            user = await call(owner, "POST", "/users", 201, json={
                "first_name": name, "username": name, "role": "annotator", "password": "p" * 16})
            await call(owner, "POST", f"/workspaces/{ws['id']}/users", 201, json={"user_id": user["id"]})
            ds = await call(owner, "POST", "/datasets", 201, json={
                "name": "study1", "workspace_id": ws["id"],
                "distribution": {"strategy": "overlap", "min_submitted": 1}})
            d = "/datasets/" + ds["id"]
            await call(owner, "POST", d + "/fields", 201, json={"name": "question", "title": "Question",
                                                                 "settings": {"type": "text"}})
            await call(owner, "POST", d + "/questions", 201, json={
                "name": "response", "title": "Your answer", "required": True, "settings": {"type": "text"}})
            await call(owner, "POST", d + "/questions", 201, json={
                "name": "quality", "title": "Quality", "required": True,
                "settings": {"type": "rating", "options": [{"value": v} for v in range(1, 6)]}})
            for meta in ("category", "question_id") if METADATA else ():  # the question id hidden from annotators
                await call(owner, "POST", d + "/metadata-properties", 201, json={
                    "name": meta, "title": meta, "settings": {"type": "terms"},
                    "visible_for_annotators": meta == "category"})
            await call(owner, "PUT", d + "/publish", 200)
            people.append((ds["id"], user["api_key"]))
        costs = {"records written (bulk)": [], "my datasets": [], "pending records (search)": []}
        search = {"filters": {"and": [{"type": "terms", "scope": {"entity": "response", "property": "status"},
                                       "values": ["pending"]}]}}
        for i, (dataset_id, api_key) in enumerate(people):
            me = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://argilla",
                                   headers={"X-Argilla-Api-Key": api_key}, timeout=60)
            items = [{"external_id": f"q{i}-{j}", "fields": {"question": f"Question {j} for arrival {i}?"},
                      **({"metadata": {"category": f"category-{j % 19}", "question_id": f"q{i}-{j}"}}
                         if METADATA else {})}
                     for j in range(RECORDS)]
            steps = [("records written (bulk)", lambda: call(owner, "PUT", f"/datasets/{dataset_id}/records/bulk",
                                                             200, json={"items": items})),
                     ("my datasets", lambda: call(me, "GET", "/me/datasets", 200)),
                     ("pending records (search)", lambda: call(me, "POST",
                      f"/me/datasets/{dataset_id}/records/search", 200, json=search, params={"limit": 50}))]
            for name, step in steps:
                started = time.process_time()
                result = await step()
                if i:  # the first arrival warms caches: not counted
                    costs[name].append(time.process_time() - started)
                if name.startswith("pending"):
                    assert len(result["items"]) == RECORDS, len(result["items"])
            await me.aclose()
        out[VARIANT] = costs
    print(json.dumps(out))

asyncio.run(main())
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrivals", type=int, default=40, help="arrivals per variant (default 40)")
    parser.add_argument("--records", type=int, default=10, help="records per arrival (default 10, study 1's Q)")
    parser.add_argument("--variants", nargs="+", default=["stock", "events"],
                        help="stock or patches joined by + (events, adapters, membership), optionally /meta "
                             "(records with two metadata values); the first is the reference (default: stock events)")
    args = parser.parse_args(argv)
    if not ARGILLA_PYTHON.exists():
        print("argilla_requests.py: no Argilla venv (.venv-argilla): run make setup", file=sys.stderr)
        return 2
    console = Console() if sys.stdout.isatty() else Console(width=220)
    with tempfile.TemporaryDirectory(prefix="crowdpref-argilla-writes-") as home:
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "ARGILLA_HOME_PATH": home, "HF_HUB_OFFLINE": "1",
               "ARGILLA_DATABASE_URL": f"sqlite+aiosqlite:///{home}/argilla.db", "DO_NOT_TRACK": "1",
               "ARGILLA_SEARCH_ENGINE": "crowdpref-sql"}
        with console.status("migrating a fresh Argilla database"):
            migrate = subprocess.run([str(ARGILLA_PYTHON), str(LAUNCH_DIR / "launch.py"), "database", "migrate"],
                                     env=env, capture_output=True, text=True, timeout=600)
        if migrate.returncode != 0:
            print(f"argilla_requests.py: migrating Argilla's database failed: {migrate.stderr.strip()[-300:]}",
                  file=sys.stderr)
            return 1
        creds = Path(home) / "owner.json"
        creds.write_text(json.dumps({"username": "owner", "password": "owner-password-1234",
                                     "api_key": "bench-0123456789abcdef0123"}))
        costs = {}
        for n, variant in enumerate(args.variants):
            folder = Path(home) / f"variant-{n}"
            folder.mkdir()
            shutil.copy2(Path(home) / "argilla.db", folder / "argilla.db")
            with console.status(f"{args.arrivals} arrivals, {variant} (provisioning each annotator: bcrypt)"):
                run = subprocess.run([str(ARGILLA_PYTHON), "-c", INNER, str(LAUNCH_DIR), str(creds), str(args.arrivals),
                                      str(args.records), variant], capture_output=True, text=True, timeout=3600,
                                     cwd=folder, env={**env, "ARGILLA_HOME_PATH": str(folder),
                                                      "ARGILLA_DATABASE_URL": f"sqlite+aiosqlite:///{folder}/argilla.db"})
            if run.returncode != 0:
                print(f"argilla_requests.py: the in-process server ({variant}) failed: {run.stderr.strip()[-500:]}",
                      file=sys.stderr)
                return 1
            costs[n] = json.loads(run.stdout.strip().splitlines()[-1])[variant]
    table = Table(title=f"argilla-server CPU per request, median of {args.arrivals} arrivals "
                        f"({args.records} records each; in-process, SQLite)")
    reference = args.variants[0]
    table.add_column("request", justify="right")
    for n, variant in enumerate(args.variants):
        table.add_column(variant, justify="right")
        if n:
            table.add_column(f"/ {reference}", justify="right")
    totals = dict.fromkeys(range(len(args.variants)), 0.0)
    for name in costs[0]:
        cells = [name]
        for n in range(len(args.variants)):
            value = statistics.median(costs[n][name])
            totals[n] += value
            cells.append(f"{value * 1000:.1f} ms")
            if n:
                cells.append(f"{value / statistics.median(costs[0][name]):.2f}x")
        table.add_row(*cells)
    cells = ["one arrival"]
    for n in range(len(args.variants)):
        cells.append(f"{totals[n] * 1000:.1f} ms")
        if n:
            cells.append(f"{totals[n] / totals[0]:.2f}x")
    table.add_row(*cells)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
