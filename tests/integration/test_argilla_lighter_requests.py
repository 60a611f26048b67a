"""The launcher's patches for an arrival's requests (services/argilla/lighter_requests.py) change
what argilla-server costs, never what it stores, answers or sends.

One script runs argilla-server's own HTTP API in-process (its ASGI app with its lifespan, on a
real migrated SQLite database, in the Argilla venv), first stock, then patched, and does what a
study does to a dataset: records written in bulk (each with a metadata value the dataset
declares, and one it hides from annotators, as study 1's question id), one rewritten, one
deleted, one refused for a metadata value outside the property's terms; an annotator who belongs
to the workspace searches their pending records, and one who does not is refused. It counts the
record webhook events argilla-server builds, the ``TypeAdapter`` objects its models construct,
the workspace-membership queries, and the webhook jobs it enqueues (``notify_event_job.delay``
recorded instead of sent to Redis). First with one webhook on ``response.created`` only
(crowdpref's portal subscribes to response events), then with one on
``record.created``/``updated``/``deleted``.

- Patched, the first phase builds no record event and no adapter; stock builds one event per
  record and one adapter per metadata value. Patched, the search asks about the annotator's
  membership once; stock once per record.
- Both variants answer the same (the records, the metadata an annotator may see, the refusals),
  enqueue the same jobs (events, records, payloads), and refuse the bad metadata with the same
  message.
- An argilla-server whose internals changed is refused, naming what changed, and ``start`` then
  exits 1 with one ``crowdpref:`` line. (``launch:app``, as uvicorn's workers load it, applies the
  patches: tests/integration/test_argilla_bcrypt.py.)
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
from argilla_server.models import database
from argilla_server.webhooks.v1 import records as record_events

_app.configure_redis = lambda: None  # its lifespan pings Redis; the jobs below never reach it
N = int(sys.argv[3])
counts = {"built": 0, "adapters": 0, "memberships": 0}
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

stock_get_by = database.WorkspaceUser.get_by
async def counted_get_by(db, **kwargs):  # what User.is_member asks the database
    counts["memberships"] += 1
    return await stock_get_by(db, **kwargs)
database.WorkspaceUser.get_by = counted_get_by

class CountedAdapter(database.TypeAdapter):
    def __init__(self, *args, **kwargs):
        counts["adapters"] += 1
        super().__init__(*args, **kwargs)
database.TypeAdapter = CountedAdapter

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
        await call("POST", d + "/metadata-properties", 201, json={"name": "category", "title": "Category", "settings": {
            "type": "terms", "values": ["a", "b"]}})
        await call("POST", d + "/metadata-properties", 201, json={"name": "question_id", "title": "Id", "settings": {
            "type": "terms"}, "visible_for_annotators": False})  # as study 1's
        await call("PUT", d + "/publish", 200)
        hook = await call("POST", "/webhooks", 201, json={"url": "http://127.0.0.1:9/h", "events": ["response.created"]})

        def items(prefix, category="a"):
            return {"items": [{"external_id": f"{prefix}{i}", "fields": {"text": f"question {i}"},
                               "metadata": {"category": category, "question_id": f"{prefix}{i}"}} for i in range(N)]}
        jobs.clear(); counts.update(built=0, adapters=0)
        written = await call("PUT", d + "/records/bulk", 200, json=items("r"))
        out["response_only"] = {**counts, "jobs": list(jobs), "answer": sorted(
            (r["external_id"], r["metadata"]["category"], r["status"]) for r in written["items"])}
        # the participant's search: a member of the workspace, then someone who is not
        found = {}
        for name, member in (("member", True), ("outsider", False)):
            user = await call("POST", "/users", 201, json={"first_name": name, "username": f"{name}-{variant}",
                                                          "role": "annotator", "password": "p" * 16})
            if member:
                await call("POST", f"/workspaces/{ws['id']}/users", 201, json={"user_id": user["id"]})
            counts["memberships"] = 0
            r = await c.post(f"/api/v1/me/datasets/{ds['id']}/records/search", params={"limit": 50},
                             headers={"X-Argilla-Api-Key": user["api_key"]}, json={"filters": {"and": [{
                                 "type": "terms", "scope": {"entity": "response", "property": "status"},
                                 "values": ["pending"]}]}})
            found[name] = {"status": r.status_code, "memberships": counts["memberships"], "records": sorted(
                [item["record"]["external_id"], item["record"]["metadata"]]
                for item in r.json()["items"]) if r.status_code == 200 else r.json()}
        out["search"] = found
        bad = await c.put("/api/v1" + d + "/records/bulk", json=items("x", category="z"))
        out["bad_metadata"] = [bad.status_code, bad.json()]
        await call("DELETE", "/webhooks/" + hook["id"], 200)
        hook = await call("POST", "/webhooks", 201, json={"url": "http://127.0.0.1:9/h", "events": [
            "record.created", "record.updated", "record.deleted"]})
        jobs.clear(); counts.update(built=0, adapters=0)
        await call("PUT", d + "/records/bulk", 200, json=items("s"))
        await call("PUT", d + "/records/bulk", 200, json={"items": [
            {"external_id": "s0", "fields": {"text": "rewritten"}, "metadata": {"category": "b"}}]})
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
        refusals, changes = [], json.loads(sys.argv[4])  # internals changed (each undone after): refused by name
        for change in changes:
            names = {}
            exec(change, names)
            try:
                lighter_requests.lighter_requests()
                refusals.append("applied")
            except lighter_requests.PatchProblem as exc:
                refusals.append(str(exc))
            if change == changes[0]:  # and the launcher says so in one line, exit status 1
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    try:
                        launch._patched_or_exit()
                        code = 0
                    except SystemExit as exc:
                        code = exc.code
                start = {"code": code, "stderr": err.getvalue()}
            setattr(*names["undo"])
        lighter_requests.lighter_requests()
        patched = await phase("patched", key)
    print(json.dumps({"stock": stock, "patched": patched, "refusals": refusals, "start": start}))

asyncio.run(main())
"""


CHANGES = [  # (a change to argilla-server's internals, undone after, what the refusal names)
    ("from argilla_server.webhooks.v1 import records as r; undo = (r, 'build_record_event', r.build_record_event); "
     "r.build_record_event = lambda db, event: None", "build_record_event(db, event)"),
    ("from argilla_server.contexts import records as r; undo = (r, 'build_record_event_v1', r.build_record_event_v1); "
     "r.build_record_event_v1 = None", "no longer imports build_record_event"),
    ("from argilla_server.models import database as r; undo = (r.MetadataProperty, 'parsed_settings', "
     "r.MetadataProperty.parsed_settings); r.MetadataProperty.parsed_settings = property(lambda s: s.settings)",
     "MetadataProperty.parsed_settings is no longer"),
    ("from argilla_server.models import database as r; undo = (r.User, 'is_member', r.User.is_member); "
     "r.User.is_member = lambda self, workspace_id: True", "User.is_member missing or not async"),
]


def _run(tmp_path) -> dict:
    """The script's figures: each phase's ("stock", "patched"), the refusals of ``CHANGES`` and the
    launcher's exit on the first ("start")."""
    migrate = subprocess.run([str(ARGILLA_PYTHON), str(LAUNCH_DIR / "launch.py"), "database", "migrate"],
                             env=_argilla_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    creds = tmp_path / "owner.json"
    creds.write_text(json.dumps({"username": "owner", "password": "owner-password-1234",
                                 "api_key": "key-0123456789abcdef0123"}))
    env = {**_argilla_env(tmp_path), "ARGILLA_SEARCH_ENGINE": "crowdpref-sql"}
    run = subprocess.run([str(ARGILLA_PYTHON), "-c", SCRIPT, str(LAUNCH_DIR), str(creds), str(RECORDS),
                          json.dumps([change for change, _ in CHANGES])],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("argilla-in-process"))


def test_record_writes_build_no_unwanted_event_and_no_schema_per_value_but_answer_and_send_the_same(figures):
    stock, patched = figures["stock"], figures["patched"]
    # what the study's write costs: stock builds an event per record and an adapter per value
    assert stock["response_only"]["built"] == RECORDS and stock["response_only"]["adapters"] >= RECORDS
    assert patched["response_only"]["built"] == 0 and patched["response_only"]["adapters"] == 0
    # ... and what it does is the same
    assert stock["response_only"]["jobs"] == patched["response_only"]["jobs"] == []
    assert stock["response_only"]["answer"] == patched["response_only"]["answer"]
    assert [r[0] for r in patched["response_only"]["answer"]] == sorted(f"r{i}" for i in range(RECORDS))
    assert stock["bad_metadata"] == patched["bad_metadata"] and stock["bad_metadata"][0] == 422
    assert "category" in json.dumps(patched["bad_metadata"][1])
    # a webhook that wants record events gets every one, with the stock payload
    sent = patched["record_hook"]["jobs"]
    assert sent == stock["record_hook"]["jobs"]
    assert patched["record_hook"]["built"] == stock["record_hook"]["built"] == RECORDS + 2
    assert [(j["event"], j["external_id"]) for j in sent] == (
        [("record.created", f"s{i}") for i in range(RECORDS)] + [("record.updated", "s0"), ("record.deleted", "s1")])
    assert all({"id", "external_id", "fields", "metadata", "dataset"} <= set(j["keys"]) for j in sent)


def test_an_annotators_search_reads_their_membership_once_and_shows_and_refuses_the_same(figures):
    stock, patched = figures["stock"]["search"], figures["patched"]["search"]
    # the member gets their pending records, metadata filtered for an annotator (no question_id)
    expected = sorted([f"r{i}", {"category": "a"}] for i in range(RECORDS))
    assert stock["member"]["status"] == patched["member"]["status"] == 200
    assert stock["member"]["records"] == patched["member"]["records"] == expected
    # stock asks the database once per record's visible metadata value; patched once per request
    assert stock["member"]["memberships"] >= RECORDS
    assert 1 <= patched["member"]["memberships"] <= 2
    # someone outside the workspace is refused, by both, the same way
    assert stock["outsider"]["status"] == patched["outsider"]["status"] == 403
    assert stock["outsider"]["records"] == patched["outsider"]["records"]


def test_the_patches_refuse_an_argilla_whose_internals_changed(figures):
    for refusal, (_, named) in zip(figures["refusals"], CHANGES, strict=True):
        assert named in refusal and "services/argilla/lighter_requests.py" in refusal, refusal
    # and the launcher's start turns a refusal into one line and exit status 1
    lines = figures["start"]["stderr"].strip().splitlines()
    assert figures["start"]["code"] == 1
    assert len(lines) == 1 and lines[0].startswith("crowdpref: ") and CHANGES[0][1] in lines[0], lines
