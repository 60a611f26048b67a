"""The portal's entry without Argilla or a network: the limits that come before any Prolific
call or allocation (1,000 forged entries), bounded limiter memory, cookies and invitation links
that expire, the "you are done" page for a participant who completed, a lowered R reaching the
next claim, request bodies over the limit (413 before they are read), and every 503 naming its
cause in the log without a secret.

The collection is the real one (store, specs, claims) over an Argilla stand-in that records
what it was asked; Prolific is a counting stand-in."""

from __future__ import annotations

import json
import secrets
import socket
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import itsdangerous
import pytest
import yaml
from fastapi.testclient import TestClient

from crowdpref.account_passwords import AccountPasswords
from crowdpref.config import load_study
from crowdpref.portal import limits, service
from crowdpref.portal.app import MAX_BODY_BYTES, create_app
from crowdpref.portal.links import finish_url
from crowdpref.portal.service import Portal
from crowdpref.store import COMPLETE, Store
from crowdpref.study1 import study1_collection
from tests.conftest import free_port, isolated_settings
from tests.integration.test_study1_collection import _questions
from tests.portal_server import PortalThread

STUDY_ID = "64b0c0ffee0000000000beef"
TOKEN = "prolific-token-" + "x" * 20


class NullOwner:
    """Argilla's owner side, remembered instead of done."""

    api_url = "http://argilla.invalid"

    def __init__(self) -> None:
        self.passwords = AccountPasswords.ephemeral()  # the real derivation, a key of this test
        self.created: list[str] = []  # the accounts ensure_annotator made
        self.revoked: dict[str, int] = {}  # username -> revoke_access calls
        self.logged = 0

    def ensure_workspace(self, name: str) -> Any:
        return SimpleNamespace(name=name)

    def ensure_annotator(self, username: str, workspace: Any) -> Any:
        self.created.append(username)

    def ensure_dataset(self, name: str, workspace: Any, settings: Any) -> Any:
        return SimpleNamespace(id=f"ds-{workspace.name}", name=name)

    def log_records(self, dataset: Any, records: list[Any]) -> None:
        self.logged += len(records)

    def revoke_access(self, username: str, dataset_id: str | None = None) -> int:
        self.revoked[username] = self.revoked.get(username, 0) + 1
        return int(self.revoked[username] == 1)

    def find_dataset(self, name: str, workspace: str) -> None:
        return None

    def user_id(self, username: str) -> str:
        return f"id-{username}"

    def answers(self, dataset: Any) -> list[Any]:
        return []


class CountingProlific:
    """get_submission: NOT FOUND for every session except those in ``known`` (session -> pid)."""

    def __init__(self) -> None:
        self.calls = 0
        self.list_reads = 0
        self.known: dict[str, str] = {}
        self.completed: list[tuple[str, str]] = []
        self.fail_with: Exception | None = None

    def get_submission(self, session_id: str) -> Any:
        from crowdpref.prolific import ProlificNotFound

        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        if session_id not in self.known:
            raise ProlificNotFound(f"submission {session_id} not found")
        return SimpleNamespace(participant_id=self.known[session_id], study_id=STUDY_ID, status="ACTIVE")

    def list_submissions(self, study_id: str) -> list[Any]:
        """The study's submission list (one call, whatever its length): those in ``known``."""
        self.calls += 1
        self.list_reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        return [SimpleNamespace(id=session, participant_id=pid, study_id=STUDY_ID, status="ACTIVE")
                for session, pid in self.known.items()]

    def complete_submission(self, session_id: str, code: str) -> Any:
        """The researcher's COMPLETE with a code (a screen-out): recorded in ``completed``."""
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        self.completed.append((session_id, code))
        return SimpleNamespace(status="SCREENED OUT")


def _write(studies: Path, name: str, participants: str = "prolific", copies: int = 2, per: int = 3,
           **extra: Any) -> Path:
    data: dict[str, Any] = {
        "name": name, "seed": 3, "participants": participants,
        "study1": {"responses_per_question": copies, "questions_per_participant": per, "pool_size": 0},
        "study2": {"pairs_per_participant": 6},
    }
    if participants == "prolific":
        data["prolific"] = {"enabled": True}
    data.update(extra)
    path = studies / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture()
def rig(tmp_path: Path) -> Any:
    """A portal over a real store and the real study-1 collection (opened from the config file
    each time the portal opens it), Prolific counted."""
    studies = tmp_path / "studies"
    studies.mkdir()
    settings = isolated_settings(tmp_path / "home", portal_studies=studies, prolific_token=TOKEN,
                                 prolific_api_url="http://prolific.invalid/api/v1/")
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    owner, prolific, opened = NullOwner(), CountingProlific(), []

    def open_collection(path: Path, key: str) -> Any:
        config = load_study(path)
        collection = study1_collection(config, _questions().head(6), owner, tmp_path / "run", store,
                                       finish_url(settings, config.name, key))
        collection.spec.dataset_settings = lambda: SimpleNamespace(guidelines="")  # type: ignore[method-assign]
        collection.spec.record = lambda item, swapped=None: item  # type: ignore[method-assign]
        opened.append(collection)
        return collection

    portal = Portal(settings, store, open_collection=open_collection, prolific_factory=lambda target: prolific)
    rig = SimpleNamespace(portal=portal, store=store, owner=owner, prolific=prolific, studies=studies,
                          settings=settings, opened=opened)
    yield rig
    store.close()


def _ids() -> dict[str, str]:
    return {"PROLIFIC_PID": secrets.token_hex(12), "SESSION_ID": secrets.token_hex(12), "STUDY_ID": STUDY_ID}


def _published(rig: Any, name: str) -> Any:
    collection = rig.portal.collection(name, "study1")
    rig.store.save_platform_study(collection.info.id, "prolific", STUDY_ID, "ACTIVE")
    return collection


def _prolific_entry(rig: Any, name: str) -> tuple[TestClient, str, dict[str, str]]:
    """Study ``name`` published on the stand-in Prolific, a browser, the entry URL of a new
    participant Prolific knows, and their ids."""
    _published(rig, name)
    ids = _ids()
    rig.prolific.known[ids["SESSION_ID"]] = ids["PROLIFIC_PID"]
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    return client, f"/s/{name}/study1?" + "&".join(f"{k}={v}" for k, v in ids.items()), ids


def _claimed(rig: Any, name: str) -> tuple[Any, TestClient, str, dict[str, str], Any]:
    """A Prolific study ``name`` (written and published) and one verified arrival who claimed
    its work: (collection, their browser, their entry URL, their ids, the participant)."""
    _write(rig.studies, name)
    client, url, ids = _prolific_entry(rig, name)
    assert client.get(url, follow_redirects=False).status_code == 303
    collection = rig.portal.collection(name, "study1")
    [participant] = rig.store.participants(collection.info.id)
    return collection, client, url, ids, participant


def _allocated(store: Store, cid: int) -> tuple[int, int]:
    """(participants, accounts bound to someone) in the store."""
    return len(store.participants(cid)), sum(a.state == "bound" for a in store.accounts(cid))


# --- 5: limits before any Prolific call, bounded memory ---------------------------------------------
def test_a_thousand_forged_entries_make_a_handful_of_prolific_calls_and_allocate_nothing(rig):
    name = "forged"
    _write(rig.studies, name)
    collection = _published(rig, name)
    statuses: dict[int, int] = {}

    def enter(params: dict[str, str], client: str) -> None:
        try:
            rig.portal.enter(name, "study1", params, client=client)
            statuses[303] = statuses.get(303, 0) + 1
        except service.Refusal as refusal:
            statuses[refusal.status] = statuses.get(refusal.status, 0) + 1

    started = time.monotonic()
    for _ in range(1000):  # one address, the study's real STUDY_ID, made-up person and session
        enter(_ids(), "203.0.113.7")
    assert rig.prolific.calls <= service.ADDRESS_FAILURES, rig.prolific.calls
    assert statuses[429] >= 990 and 303 not in statuses, statuses
    for n in range(1000):  # many addresses (a botnet): the portal-wide budget of look-ups, then the list
        enter(_ids(), f"198.51.{n // 250}.{n % 250}")
    reads = 1 + (time.monotonic() - started) / limits.LIST_REFRESH_S  # the list, read at most this often
    assert rig.prolific.list_reads <= reads, rig.prolific.list_reads
    assert rig.prolific.calls <= service.GLOBAL_FAILURES + rig.prolific.list_reads, rig.prolific.calls
    calls = rig.prolific.calls
    for _ in range(1000):  # made-up STUDY_IDs too: refused without any Prolific call
        enter({**_ids(), "STUDY_ID": secrets.token_hex(12)}, "192.0.2.55")
    assert rig.prolific.calls == calls
    assert _allocated(rig.store, collection.info.id) == (0, 0)
    assert rig.store.events(collection.info.id, kinds=["claimed"]) == []
    assert rig.owner.logged == 0 and rig.owner.created == []
    for limiter in rig.portal.limits.values():
        assert len(limiter) <= limiter.max_keys


def test_the_limiters_memory_stays_flat(rig):
    name = "flat"
    _write(rig.studies, name)
    _published(rig, name)
    now = [1_000_000.0]
    rig.portal.clock = lambda: now[0]
    for limiter in rig.portal.limits.values():
        limiter.max_keys = min(limiter.max_keys, 200)

    def burst(n: int) -> None:
        for i in range(n):
            now[0] += 0.5  # slow enough for the global limits: only the per-id memory grows
            try:
                rig.portal.enter(name, "study1", _ids(), client=f"10.{i % 200}.{i // 200 % 250}.1")
            except service.Refusal:
                pass

    tracemalloc.start()
    try:
        burst(1000)
        before = tracemalloc.take_snapshot()
        burst(3000)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename")
                if Path(stat.traceback[0].filename).parent == Path(service.__file__).parent)  # any portal module
    assert grown < 64 * 1024, grown  # 3,000 more distinct ids and addresses: nothing kept for them
    assert len(rig.portal.limits["person"]) <= 200 and len(rig.portal.limits["address"]) <= 200


def test_one_person_is_throttled_before_prolific_is_asked(rig):
    name = "burst"
    _write(rig.studies, name)
    _published(rig, name)
    ids = _ids()
    rig.prolific.known[ids["SESSION_ID"]] = ids["PROLIFIC_PID"]
    codes = []
    for _ in range(service.ENTRIES_PER_WINDOW + 5):
        try:
            rig.portal.enter(name, "study1", ids, client="203.0.113.8")
            codes.append(303)
        except service.Refusal as refusal:
            codes.append(refusal.status)
    assert codes[:service.ENTRIES_PER_WINDOW] == [303] * service.ENTRIES_PER_WINDOW and set(codes[-5:]) == {429}
    assert rig.prolific.calls == service.ENTRIES_PER_WINDOW  # the refused ones never reached Prolific


def test_an_unverified_pilot_works_and_says_so_once(rig, caplog):
    name = "pilot"
    _write(rig.studies, name, prolific={"enabled": False, "verify": False})
    with caplog.at_level("WARNING", logger="crowdpref.portal"):
        for _ in range(3):
            entered = rig.portal.enter(name, "study1", _ids(), client="203.0.113.9")
            assert entered.cookie and entered.finished is None
    assert caplog.text.count("UNVERIFIED pilot") == 1 and rig.prolific.calls == 0
    assert len(rig.store.participants(rig.portal.collection(name, "study1").info.id)) == 3


# --- 5: cookies and invitation links expire; a finished participant is done -------------------------
def _later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(itsdangerous.timed.TimestampSigner, "get_timestamp", lambda self: int(real() + seconds))


def test_the_cookie_expires_after_its_max_age(rig, monkeypatch):
    name = "cookie"
    _write(rig.studies, name, participants="invite")
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    link = rig.portal.invite_link(name, "study1", "inv-1").split(rig.settings.portal_public_url, 1)[1]
    entry = client.post(link, follow_redirects=False)
    assert entry.status_code == 303 and f"Max-Age={service.COOKIE_MAX_AGE_S}" in entry.headers["set-cookie"]
    assert client.get(f"/s/{name}/study1/welcome").status_code == 200
    _later(monkeypatch, service.COOKIE_MAX_AGE_S + 60)
    expired = client.get(f"/s/{name}/study1/welcome")
    assert expired.status_code == 401 and "Please start from your study link" in expired.text
    assert client.post(f"/s/{name}/study1/start", follow_redirects=False).status_code == 401


def test_invitation_links_expire_and_a_finished_participant_is_only_told_they_are_done(rig, monkeypatch):
    name = "invited"
    _write(rig.studies, name, participants="invite", invites={"lifetime_days": 2})
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    link = rig.portal.invite_link(name, "study1", "inv-2").split(rig.settings.portal_public_url, 1)[1]
    assert client.post(link, follow_redirects=False).status_code == 303
    collection = rig.portal.collection(name, "study1")
    participant = rig.store.participants(collection.info.id)[0]
    # finished: the link says so, sets no cookie and signs nobody in
    rig.store.record_progress(collection.info.id, participant.id, {i: time.time() for i in participant.held}, None)
    assert rig.store.participant(collection.info.id, participant.username).status == COMPLETE
    fresh = TestClient(create_app(rig.portal), base_url="http://portal.test")
    done = fresh.get(link, follow_redirects=False)  # the link's page (and its button alike)
    assert fresh.post(link, follow_redirects=False).text == done.text
    assert done.status_code == 200 and "You are done" in done.text and "set-cookie" not in done.headers
    assert "sign-in" not in done.text and rig.store.completion_code(collection.info.id) not in done.text
    # the browser that still has the cookie: Start leads to the finish page, not to Argilla
    start = client.post(f"/s/{name}/study1/start", follow_redirects=False)
    assert start.status_code == 303 and start.headers["location"] == f"/s/{name}/study1/done"
    # a link older than invites.lifetime_days has expired
    unused = rig.portal.invite_link(name, "study1", "inv-3").split(rig.settings.portal_public_url, 1)[1]
    _later(monkeypatch, 2 * 86400 + 60)
    expired = fresh.get(unused, follow_redirects=False)
    assert expired.status_code == 410 and "expired" in expired.text
    assert len(rig.store.participants(collection.info.id)) == 1


def test_a_prolific_participant_who_finished_sees_their_code_not_argilla(rig):
    name = "again"
    collection, client, url, _, participant = _claimed(rig, name)
    rig.store.record_progress(collection.info.id, participant.id, {i: time.time() for i in participant.held}, None)
    again = client.get(url, follow_redirects=False)
    code = rig.store.completion_code(collection.info.id)
    assert again.status_code == 200 and "You are done" in again.text and code in again.text
    assert "submissions/complete?cc=" + code in again.text and "sign-in" not in again.text


# --- 7: a lowered R reaches the next claim -------------------------------------------------------------
def test_lowering_r_in_the_config_while_the_portal_runs_reaches_the_next_claim(rig):
    name = "lower"
    path = _write(rig.studies, name, participants="invite", copies=3, per=6)  # 6 questions x R=3
    first = rig.portal.enter(name, "study1", {"invite": rig.portal.invites.dumps(
        {"study": name, "key": "study1", "id": "a"})}, client="203.0.113.10")
    assert len(first.participant.assignments) == 6
    collection = rig.portal.collection(name, "study1")
    assert collection.info.copies == 3
    data = yaml.safe_load(path.read_text())
    data["study1"]["responses_per_question"] = 2  # R 3 -> 2 while the portal runs
    path.write_text(yaml.safe_dump(data))
    later = path.stat().st_mtime_ns + 5_000_000_000
    import os

    os.utime(path, ns=(later, later))  # a distinct modification time, however coarse the clock
    second = rig.portal.enter(name, "study1", {"invite": rig.portal.invites.dumps(
        {"study": name, "key": "study1", "id": "b"})}, client="203.0.113.10")
    assert len(second.participant.assignments) == 6
    with pytest.raises(service.Refusal) as full:  # with R = 3 a third person would get work
        rig.portal.enter(name, "study1", {"invite": rig.portal.invites.dumps(
            {"study": name, "key": "study1", "id": "c"})}, client="203.0.113.10")
    assert full.value.status == 409  # R = 2 is met: the study is full, nothing over-allocated
    cid = collection.info.id
    assert rig.store.find_collection(name, "study1").copies == 2
    assert len(rig.store.participants(cid)) == 2 and rig.store.check(cid) == []


# --- 5: request bodies over the limit -----------------------------------------------------------------
def _raw(port: int, head: bytes, chunks: list[bytes] = ()) -> tuple[bytes, int]:
    """Send ``head`` then ``chunks`` until the server answers; (its answer, bytes of body sent)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        sock.settimeout(0.05)
        answer = b""
        for chunk in chunks:
            try:
                answer = sock.recv(65536)
                if answer:
                    break
            except TimeoutError:
                pass
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        sock.settimeout(10)
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    return answer, sent


def test_bodies_over_the_limit_get_413_before_they_are_read(rig, monkeypatch):
    seen: list[int] = []
    monkeypatch.setattr(rig.portal, "prolific_webhook", lambda headers, body: (seen.append(len(body)), (200, {}))[1])
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    big = b"{" + b" " * (5 * 1024 * 1024) + b"}"
    assert client.post("/hooks/prolific", content=big).status_code == 413
    assert client.post("/hooks/argilla", content=big).status_code == 413
    assert client.post("/hooks/prolific", content=iter([b" " * 32768] * 160)).status_code == 413  # chunked
    assert client.post("/hooks/prolific", content=b"{}").status_code == 200 and seen == [2]
    port = free_port()
    with PortalThread(create_app(rig.portal), port=port):
        # a 5 MB Content-Length: 413 at once, not one byte of the body sent
        answer, _ = _raw(port, b"POST /hooks/prolific HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 5242880\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
        # chunked, no Content-Length: 413 once the limit is passed, long before the 5 MB are sent
        chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
        answer, sent = _raw(port, b"POST /hooks/prolific HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                            [chunk] * 320)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
        assert sent < 4 * MAX_BODY_BYTES, sent
    assert seen == [2]


# --- 7: every 503 names its cause in the log, never a secret -------------------------------------------
def test_every_503_names_its_cause_in_the_log_without_a_secret(rig, caplog, monkeypatch):
    from crowdpref.prolific import ProlificUnavailable

    name = "causes"
    _write(rig.studies, name)
    collection = _published(rig, name)
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    ids = _ids()
    query = "&".join(f"{k}={v}" for k, v in ids.items())
    secrets_seen = [ids["PROLIFIC_PID"], ids["SESSION_ID"], TOKEN]
    with caplog.at_level("WARNING", logger="crowdpref.portal"):
        rig.prolific.fail_with = ProlificUnavailable(f"GET submissions/{ids['SESSION_ID']}/ failed after 3 attempts")
        response = client.get(f"/s/{name}/study1?{query}", follow_redirects=False)
        assert response.status_code == 503 and "Prolific unreachable: ProlificUnavailable" in caplog.text
        rig.prolific.fail_with = None
        rig.prolific.known[ids["SESSION_ID"]] = ids["PROLIFIC_PID"]

        def broken_claim(*args: Any, **kwargs: Any) -> Any:
            from crowdpref.argilla_client import ArgillaError

            raise ArgillaError("Argilla at http://argilla.invalid answered 500 while creating a user")

        monkeypatch.setattr(collection, "claim", broken_claim)
        assert client.get(f"/s/{name}/study1?{query}", follow_redirects=False).status_code == 503
        assert "claim failed: ArgillaError: Argilla at http://argilla.invalid answered 500" in caplog.text

        def dropped_claim(*args: Any, **kwargs: Any) -> Any:  # Argilla closed the connection mid-request
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

        monkeypatch.setattr(collection, "claim", dropped_claim)
        assert client.get(f"/s/{name}/study1?{query}", follow_redirects=False).status_code == 503  # not 500
        assert "claim failed: RemoteProtocolError: Server disconnected" in caplog.text
        (rig.studies / "broken.yaml").write_text("name: broken\nstudy1: {responses_per_question: 0}\n")
        broken = client.get(f"/s/broken/study1?{query}", follow_redirects=False)
        assert broken.status_code == 503 and "study config broken: ConfigError:" in caplog.text
        tokenless = Portal(rig.settings.model_copy(update={"prolific_token": None}), rig.store,
                           open_collection=lambda path, key: collection,
                           prolific_factory=lambda target: rig.prolific)
        no_token = TestClient(create_app(tokenless), base_url="http://portal.test")
        assert no_token.get(f"/s/{name}/study1?{query}", follow_redirects=False).status_code == 503
        assert "PROLIFIC_TOKEN not set" in caplog.text
        body = json.dumps({"status": "RETURNED", "resource_id": ids["SESSION_ID"]}).encode()
        assert client.post("/hooks/prolific", content=body).status_code == 503
        assert "Prolific webhook refused: no webhook secret configured" in caplog.text
        assert client.post("/hooks/argilla", content=b"{}").status_code == 503
        assert "Argilla webhook refused: no Argilla webhook is registered" in caplog.text
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and r.getMessage().startswith("503: ")]
    assert len(warnings) == 7, [r.getMessage() for r in warnings]
    for secret in secrets_seen:
        assert secret not in caplog.text


def test_x_forwarded_for_counts_only_behind_a_trusted_proxy(rig, monkeypatch):
    seen: list[str | None] = []

    def enter(study: str, key: str, params: Any, client: str | None = None, cookie: str | None = None) -> Any:
        seen.append(client)
        raise service.Refusal(429, "Too many requests", "wait")

    monkeypatch.setattr(rig.portal, "enter", enter)
    monkeypatch.setattr(rig.portal, "invitation", lambda *args: None)  # not an invitation study
    headers = {"X-Forwarded-For": "192.0.2.1, 198.51.100.4"}
    TestClient(create_app(rig.portal)).get("/s/x/study1", headers=headers)
    trusting = Portal(rig.settings.model_copy(update={"portal_trusted_proxies": "10.0.0.1, testclient"}), rig.store)
    monkeypatch.setattr(trusting, "enter", enter)
    monkeypatch.setattr(trusting, "invitation", lambda *args: None)
    TestClient(create_app(trusting)).get("/s/x/study1", headers=headers)
    TestClient(create_app(trusting)).get("/s/x/study1")
    assert seen == ["testclient", "198.51.100.4", "testclient"]


# --- 6: access that ends ------------------------------------------------------------------------
def test_finished_participants_lose_their_argilla_access_once(rig):
    name = "expire"
    _write(rig.studies, name, participants="invite", copies=2, per=3)
    for who in ("a", "b", "c"):
        rig.portal.enter(name, "study1", {"invite": rig.portal.invites.dumps({"study": name, "key": "study1", "id": who})})
    collection = rig.portal.collection(name, "study1")
    cid = collection.info.id
    done, released, active = rig.store.participants(cid)
    rig.store.record_progress(cid, done.id, {i: time.time() for i in done.held}, None)
    rig.store.begin_release(cid, released.id, "test")
    collection.finish_release(rig.store.participant(cid, released.username))  # revoked at once
    assert rig.owner.revoked == {released.username: 1}
    assert [p.username for p in rig.store.access_to_revoke(cid)] == [done.username]
    assert collection.revoke_finished_access() == 1 and collection.revoke_finished_access() == 0
    assert rig.owner.revoked == {released.username: 1, done.username: 1}  # the active one keeps theirs
    assert len(rig.store.events(cid, kinds=["access_revoked"])) == 2
    assert not rig.store.holds_work(done.username) and not rig.store.holds_work(released.username)
    assert rig.store.holds_work(active.username) and not rig.store.holds_work("nobody")


def test_a_limiter_never_holds_more_keys_than_its_bound():
    limiter = service.RateLimiter(10, 60.0, max_keys=100)
    for n in range(10_000):  # all within one window: nothing is idle long enough to be pruned
        assert limiter.take(f"forged-{n}", 1000.0 + n * 0.001)
    assert len(limiter) == 100
    assert limiter.take("late", 1000.0 + 61 * 1.0) and len(limiter) <= 100  # idle keys pruned as new ones come


def test_the_finish_page_503_names_its_cause(rig, caplog, monkeypatch):
    from crowdpref.argilla_client import ArgillaError

    name = "finish503"
    _write(rig.studies, name, participants="invite")
    client = TestClient(create_app(rig.portal), base_url="http://portal.test")
    link = rig.portal.invite_link(name, "study1", "inv-f").split(rig.settings.portal_public_url, 1)[1]
    assert client.post(link, follow_redirects=False).status_code == 303
    collection = rig.portal.collection(name, "study1")

    def unreachable(participant: Any) -> Any:
        raise ArgillaError("Argilla is unreachable at http://argilla.invalid (ConnectError)", transient=True)

    monkeypatch.setattr(collection, "refresh", unreachable)
    with caplog.at_level("WARNING", logger="crowdpref.portal"):
        busy = client.get(f"/s/{name}/study1/done")
    assert busy.status_code == 503 and busy.headers["Retry-After"] == busy.headers["Refresh"] == "10"  # reloads itself
    assert "503: Argilla read failed on the finish page: ArgillaError: Argilla is unreachable" in caplog.text

    def dropped(participant: Any) -> Any:  # a raw transport error from Argilla: a 503 too, never a 500
        raise httpx.ReadTimeout("timed out")

    monkeypatch.setattr(collection, "refresh", dropped)
    with caplog.at_level("WARNING", logger="crowdpref.portal"):
        assert client.get(f"/s/{name}/study1/done").status_code == 503
    assert "503: Argilla read failed on the finish page: ReadTimeout: timed out" in caplog.text


def test_a_claim_reads_r_from_the_store_not_from_a_stale_collection(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    try:
        items = ["q1", "q2"]
        stale = store.collection("s", "study1", items, copies=3, per_participant=2, seed=1, username_prefix="s")
        store.collection("s", "study1", items, copies=2, per_participant=2, seed=1, username_prefix="s")  # R lowered
        assert [type(store.claim(stale, f"p{n}", "invite")).__name__ for n in range(3)] == ["Claimed", "Claimed", "Full"]
        assert store.check(stale.id) == []
    finally:
        store.close()


def test_a_monitoring_pass_revokes_whoever_finished_without_it(rig):
    """Completed by Argilla's webhook (a store write, no Argilla call) or withdrawn elsewhere: the
    next monitoring pass ends their Argilla access."""
    name = "sweep"
    _write(rig.studies, name, participants="invite", copies=2, per=3)
    rig.portal.enter(name, "study1", {"invite": rig.portal.invites.dumps({"study": name, "key": "study1", "id": "w"})})
    collection = rig.portal.collection(name, "study1")
    cid = collection.info.id
    [participant] = rig.store.participants(cid)
    rig.store.record_progress(cid, participant.id, {i: time.time() for i in participant.held}, None)  # the webhook
    assert rig.owner.revoked == {}
    collection.monitor()
    assert rig.owner.revoked == {participant.username: 1}
    assert rig.store.access_to_revoke(cid) == []
