"""The launcher's record-event patch (services/argilla/lighter_requests.py) changes what
argilla-server costs, never what it stores, answers or sends; and it is applied to the
argilla-server release it was written for only.

One script runs argilla-server's own HTTP API in-process (its ASGI app with its lifespan, on a
real migrated SQLite database, in the Argilla venv), first stock, then patched, and does what a
study does to a dataset: records written in bulk (a question field, no metadata, as the studies
write them since issue 34), one rewritten, one deleted. It counts the record webhook events
argilla-server builds and the webhook jobs it enqueues (``notify_event_job.delay`` recorded
instead of sent to Redis). First with one webhook on ``response.created`` only (crowdpref's portal
subscribes to response events), then with one on ``record.created``/``updated``/``deleted``.

- Patched, the first phase builds no record event; stock builds one per record. Both answer the
  same and enqueue the same jobs (none, then the same events, records and payloads).
- On another argilla-server version (the installed version read as 2.9.0) the patch refuses,
  naming both versions, before changing anything, and ``start`` exits 1 with one ``crowdpref:``
  line. ``lighter_requests.py --check`` (what ``make setup`` runs) passes on the installed 2.8.0.
  (``launch:app``, as uvicorn's workers load it, applies the patches:
  tests/integration/test_argilla_bcrypt.py.)
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.integration.test_argilla_bcrypt import ARGILLA_PYTHON, LAUNCH_DIR, _argilla_env

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not ARGILLA_PYTHON.exists(), reason="no Argilla venv (.venv-argilla): run make setup")]

RECORDS = 10
SCRIPT = r"""
import asyncio, contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import launch, lighter_requests
import httpx
from argilla_server import app, _app
from argilla_server.jobs import webhook_jobs
from argilla_server.webhooks.v1 import records as record_events

_app.configure_redis = lambda: None  # its lifespan pings Redis; the jobs below never reach it
N = int(sys.argv[3])
counts = {"built": 0}
jobs = []

class Delay:  # notify_event_job.delay, recorded instead of queued in Redis
    @staticmethod
    def delay(webhook_id, event, timestamp, data):
        jobs.append({"event": str(event), "external_id": data.get("external_id"), "keys": sorted(data)})
        return None
webhook_jobs.notify_event_job = Delay

stock_validate = record_events.RecordEventSchema.model_validate
def counted_validate(obj, *args, **kwargs):  # what building a record event costs: its schema
    counts["built"] += 1
    return stock_validate(obj, *args, **kwargs)
record_events.RecordEventSchema.model_validate = counted_validate

async def phase(variant, key):
    out = {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://argilla",
                                 headers={"X-Argilla-Api-Key": key}) as c:
        async def call(method, path, expect, **kw):
            r = await c.request(method, "/api/v1" + path, **kw)
            assert r.status_code == expect, (method, path, r.status_code, r.text)
            return r.json() if r.content else None
        ws = await call("POST", "/workspaces", 201, json={"name": "w-" + variant})
        ds = await call("POST", "/datasets", 201, json={"name": "d", "workspace_id": ws["id"]})
        d = "/datasets/" + ds["id"]
        await call("POST", d + "/fields", 201, json={"name": "text", "title": "Text", "settings": {"type": "text"}})
        await call("POST", d + "/questions", 201, json={"name": "q", "title": "Q", "required": True, "settings": {
            "type": "rating", "options": [{"value": 1}, {"value": 2}]}})
        await call("PUT", d + "/publish", 200)
        hook = await call("POST", "/webhooks", 201, json={"url": "http://127.0.0.1:9/h", "events": ["response.created"]})

        def items(prefix):
            return {"items": [{"external_id": f"{prefix}{i}", "fields": {"text": f"question {i}"}} for i in range(N)]}
        jobs.clear(); counts.update(built=0)
        written = await call("PUT", d + "/records/bulk", 200, json=items("r"))
        out["response_only"] = {**counts, "jobs": list(jobs), "answer": sorted(
            (r["external_id"], r["fields"]["text"], r["status"]) for r in written["items"])}
        await call("DELETE", "/webhooks/" + hook["id"], 200)
        hook = await call("POST", "/webhooks", 201, json={"url": "http://127.0.0.1:9/h", "events": [
            "record.created", "record.updated", "record.deleted"]})
        jobs.clear(); counts.update(built=0)
        await call("PUT", d + "/records/bulk", 200, json=items("s"))
        await call("PUT", d + "/records/bulk", 200, json={"items": [
            {"external_id": "s0", "fields": {"text": "rewritten"}}]})
        listed = await call("GET", d + "/records", 200, params={"limit": 100})
        gone = next(r["id"] for r in listed["items"] if r["external_id"] == "s1")
        await call("DELETE", d + "/records", 204, params={"ids": gone})
        out["record_hook"] = {"built": counts["built"], "jobs": list(jobs)}
        await call("DELETE", "/webhooks/" + hook["id"], 200)
    return out

async def main():  # one process: the stock server first, then the same server patched
    problem = await launch._set_owner(__import__("pathlib").Path(sys.argv[2]), replace=False)
    assert not problem, problem
    key = json.load(open(sys.argv[2]))["api_key"]
    async with app.router.lifespan_context(app):
        stock = await phase("stock", key)
        # another argilla-server release: refused before anything changes, and start says so in one line
        installed = lighter_requests.installed_version
        lighter_requests.installed_version = lambda: "2.9.0"
        try:
            lighter_requests.record_events_only_when_wanted()
            refusal = "applied"
        except lighter_requests.PatchProblem as exc:
            refusal = str(exc)
        untouched = not getattr(record_events, lighter_requests.PATCHED, False)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                launch._patched_or_exit()
                code = 0
            except SystemExit as exc:
                code = exc.code
        lighter_requests.installed_version = installed
        lighter_requests.record_events_only_when_wanted()
        patched = await phase("patched", key)
    print(json.dumps({"stock": stock, "patched": patched, "refusal": refusal, "untouched": untouched,
                      "start": {"code": code, "stderr": err.getvalue()}}))

asyncio.run(main())
"""


def _run(tmp_path) -> dict:
    """The script's figures: each phase's ("stock", "patched"), the refusal on another version and
    the launcher's exit then ("start")."""
    migrate = subprocess.run([str(ARGILLA_PYTHON), str(LAUNCH_DIR / "launch.py"), "database", "migrate"],
                             env=_argilla_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    creds = tmp_path / "owner.json"
    creds.write_text(json.dumps({"username": "owner", "password": "owner-password-1234",
                                 "api_key": "key-0123456789abcdef0123"}))
    env = {**_argilla_env(tmp_path), "ARGILLA_SEARCH_ENGINE": "crowdpref-sql"}
    run = subprocess.run([str(ARGILLA_PYTHON), "-c", SCRIPT, str(LAUNCH_DIR), str(creds), str(RECORDS)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("argilla-in-process"))


def test_record_writes_build_no_unwanted_event_but_answer_and_send_the_same(figures):
    stock, patched = figures["stock"], figures["patched"]
    # what the study's write costs: stock builds an event per record, patched none
    assert stock["response_only"]["built"] == RECORDS
    assert patched["response_only"]["built"] == 0
    # ... and what it does is the same
    assert stock["response_only"]["jobs"] == patched["response_only"]["jobs"] == []
    assert stock["response_only"]["answer"] == patched["response_only"]["answer"]
    assert [r[0] for r in patched["response_only"]["answer"]] == sorted(f"r{i}" for i in range(RECORDS))
    # a webhook that wants record events gets every one, with the stock payload
    sent = patched["record_hook"]["jobs"]
    assert sent == stock["record_hook"]["jobs"]
    assert patched["record_hook"]["built"] == stock["record_hook"]["built"] == RECORDS + 2
    assert [(j["event"], j["external_id"]) for j in sent] == (
        [("record.created", f"s{i}") for i in range(RECORDS)] + [("record.updated", "s0"), ("record.deleted", "s1")])
    assert all({"id", "external_id", "fields", "metadata", "dataset"} <= set(j["keys"]) for j in sent)


def test_the_patch_refuses_another_argilla_server_version(figures):
    refusal = figures["refusal"]
    assert "argilla-server 2.9.0 is installed" in refusal and "2.8.0 only" in refusal, refusal
    assert figures["untouched"]  # refused before changing anything
    # and the launcher's start turns it into one line and exit status 1
    lines = figures["start"]["stderr"].strip().splitlines()
    assert figures["start"]["code"] == 1
    assert len(lines) == 1 and lines[0].startswith("crowdpref: ") and "2.9.0" in lines[0], lines


def test_make_setup_checks_the_installed_version():
    """``lighter_requests.py --check``, as services/bootstrap.sh runs it after installing the
    Argilla venv: the installed release passes (exit 0; the refusal itself is tested above)."""
    run = subprocess.run([str(ARGILLA_PYTHON), str(LAUNCH_DIR / "lighter_requests.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "argilla-server 2.8.0" in run.stdout
