"""Entry that no outsider can block (issue 32, item 2), through the real portal app and the fake
Prolific over HTTP: a flood of forged entries from many addresses while genuine participants
arrive, refusals that cost nothing counted against no shared budget, a person the portal knows
(by the store, or by their cookie) never held back by their address, and IPv6 counted per /64.

The collection is the real one over an Argilla stand-in (tests/unit/test_portal_entry.py's rig);
the portal's clock is the test's, so the list reads' spacing costs no real time."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crowdpref.portal import limits, service
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.prolific import ProlificClient
from crowdpref.simulation.prolific_server import FakeProlific
from tests.unit.test_portal_entry import STUDY_ID, _ids, _published, _write, rig  # noqa: F401 - rig: a fixture
from tests.unit.test_prolific_client import _payload


@pytest.fixture()
def fake() -> Any:
    with FakeProlific(page_size=100, retry_delay_s=0.05) as fake:  # Prolific's pages hold far more than 2
        yield fake


def _portal(rig: Any, fake: FakeProlific, now: list[float]) -> tuple[Portal, TestClient, str]:
    """A portal on the rig's store and studies, asking the fake Prolific over HTTP, on the
    test's clock, behind a proxy it trusts (the test client: X-Forwarded-For names each
    client); its study ``flood`` published there. (portal, browser, Prolific study id)"""
    settings = rig.settings.model_copy(update={"portal_trusted_proxies": "testclient"})
    client_api = ProlificClient(fake.base_url, fake.token, backoff_s=0.0, sleep=lambda _s: None)
    portal = Portal(settings, rig.store, open_collection=rig.portal._open_collection,
                    prolific_factory=lambda target: client_api, clock=lambda: now[0])
    _write(rig.studies, "flood", copies=10, per=3)  # 6 questions x R=10, 3 each: 20 places
    study = client_api.publish_study(client_api.create_study(_payload(places=40)).id)
    rig.store.save_platform_study(portal.collection("flood", "study1").info.id, "prolific", study.id, "ACTIVE")
    return portal, TestClient(create_app(portal), base_url="http://portal.test"), study.id


def _url(ids: dict[str, str]) -> str:
    return "/s/flood/study1?" + "&".join(f"{k}={v}" for k, v in ids.items())


def test_a_flood_of_forged_entries_blocks_no_genuine_participant(rig, fake):
    now = [1_000_000.0]
    portal, browser, study_id = _portal(rig, fake, now)
    forged_sessions: set[str] = set()
    genuine: list[dict[str, Any]] = []  # who took a place on Prolific, as they arrive
    waiting: list[tuple[float, dict[str, Any]]] = []  # (when they open the link again, who)
    got_in, forged_statuses = [], {}

    def open_link(arrival: dict[str, Any], n: int) -> None:
        ids = {"PROLIFIC_PID": arrival["participant_id"], "STUDY_ID": study_id, "SESSION_ID": arrival["session_id"]}
        answer = TestClient(browser.app, base_url="http://portal.test").get(
            _url(ids), headers={"X-Forwarded-For": f"192.0.2.{n + 1}"}, follow_redirects=False)
        if answer.status_code == 303:
            got_in.append(arrival["participant_id"])
        else:  # the page that opens again by itself: never a refusal for good
            assert answer.status_code == 503 and answer.headers["Refresh"] == answer.headers["Retry-After"], (
                answer.status_code, answer.text)
            waiting.append((now[0] + int(answer.headers["Retry-After"]), arrival))

    for n in range(1000):  # 50 addresses, 20 forged entries each, the study's real STUDY_ID
        now[0] += 0.005
        ids = {**_ids(), "STUDY_ID": study_id}
        forged_sessions.add(ids["SESSION_ID"])
        status = browser.get(_url(ids), headers={"X-Forwarded-For": f"198.51.100.{n % 50 + 1}"},
                             follow_redirects=False).status_code
        forged_statuses[status] = forged_statuses.get(status, 0) + 1
        if n % 50 == 25:  # a genuine participant arrives every 50 forged entries
            genuine.append(fake.arrive(study_id))
            open_link(genuine[-1], len(genuine) - 1)
        for due, arrival in [w for w in waiting if w[0] <= now[0]]:
            waiting.remove((due, arrival))
            open_link(arrival, genuine.index(arrival))
    now[0] += limits.LIST_REFRESH_S
    for _, arrival in list(waiting):  # those still waiting, when their page opens again
        waiting.remove((_, arrival))
        open_link(arrival, genuine.index(arrival))
    assert len(genuine) == 20 and not waiting
    assert sorted(got_in) == sorted(a["participant_id"] for a in genuine)  # all 20 got in
    assert 303 not in forged_statuses, forged_statuses
    cid = portal.collection("flood", "study1").info.id
    assert len(rig.store.participants(cid)) == 20
    # the flood's Prolific calls: a handful of look-ups, then the list read at most every LIST_REFRESH_S
    lookups = [p for m, p in fake.requests if p.startswith("/api/v1/submissions/")]
    forged_lookups = [p for p in lookups if p.split("/")[-2] in forged_sessions]
    list_reads = [p for m, p in fake.requests if p == f"/api/v1/studies/{study_id}/submissions/"]
    assert len(forged_lookups) <= service.GLOBAL_FAILURES, len(forged_lookups)
    # the first read, one per LIST_REFRESH_S of the flood's 5 s on the test's clock, one for the last to come back
    assert len(list_reads) <= 1 + 5.0 / limits.LIST_REFRESH_S + 1, len(list_reads)
    assert len(lookups) - len(forged_lookups) <= 20  # each genuine participant: one look-up at most


def test_refusals_that_cost_nothing_count_against_no_shared_budget(rig, fake):
    now = [1_000_000.0]
    portal, browser, study_id = _portal(rig, fake, now)
    for n in range(1000):  # many addresses: another study's id, malformed ids, no ids (more than any
        params = [{**_ids(), "STUDY_ID": secrets.token_hex(12)}, {**_ids(), "SESSION_ID": "x" * 24}, {}][n % 3]
        with pytest.raises(service.Refusal) as refused:  # budget of entries per minute the portal had)
            portal.enter("flood", "study1", params, client=f"10.{n // 250}.{n % 250}.1")
        assert refused.value.status in (400, 403), refused.value.status
    assert fake.requests == [r for r in fake.requests if "submissions" not in r[1]]  # no Prolific call
    assert len(portal.limits["global_failures"]) == 0 and len(portal.limits["lookups"]) == 0
    arrival = fake.arrive(study_id)  # a genuine participant after them: asked for by their id, and in
    ids = {"PROLIFIC_PID": arrival["participant_id"], "STUDY_ID": study_id, "SESSION_ID": arrival["session_id"]}
    assert browser.get(_url(ids), headers={"X-Forwarded-For": "10.9.9.9"}, follow_redirects=False).status_code == 303
    assert fake.requests[-1] == ("GET", f"/api/v1/submissions/{arrival['session_id']}/")


def test_a_known_person_passes_their_addresses_limits(rig, fake):
    now = [1_000_000.0]
    portal, browser, study_id = _portal(rig, fake, now)
    shared = {"X-Forwarded-For": "203.0.113.50"}  # one address: a campus NAT, say
    first, second = fake.arrive(study_id), fake.arrive(study_id)
    entries = [{"PROLIFIC_PID": a["participant_id"], "STUDY_ID": study_id, "SESSION_ID": a["session_id"]}
               for a in (first, second)]
    with_cookie = TestClient(browser.app, base_url="http://portal.test")
    assert with_cookie.get(_url(entries[0]), headers=shared, follow_redirects=False).status_code == 303
    assert browser.get(_url(entries[1]), headers={"X-Forwarded-For": "192.0.2.77"},
                       follow_redirects=False).status_code == 303
    for _ in range(limits.ADDRESS_FAILURES):  # forgers behind the same address use up its budget
        browser.get(_url({**_ids(), "STUDY_ID": study_id}), headers=shared, follow_redirects=False)
    stranger = fake.arrive(study_id)
    ids = {"PROLIFIC_PID": stranger["participant_id"], "STUDY_ID": study_id, "SESSION_ID": stranger["session_id"]}
    held = TestClient(browser.app, base_url="http://portal.test").get(_url(ids), headers=shared, follow_redirects=False)
    assert held.status_code == 429  # not known: held back with the forgers
    # their cookie, or the store that knows them (a new browser): both get in from that address
    assert with_cookie.get(_url(entries[0]), headers=shared, follow_redirects=False).status_code == 303
    new_browser = TestClient(browser.app, base_url="http://portal.test")
    assert new_browser.get(_url(entries[1]), headers=shared, follow_redirects=False).status_code == 303
    # a forged cookie is not a cookie
    forged = TestClient(browser.app, base_url="http://portal.test", cookies={"crowdpref-flood-study1": "x.y.z"})
    assert forged.get(_url(ids), headers=shared, follow_redirects=False).status_code == 429


@pytest.mark.parametrize(("one", "other", "same"), [
    ("2001:db8:1:2::5", "2001:db8:1:2:ffff:ffff:ffff:ffff", True),
    ("2001:db8:1:2::5", "2001:db8:1:3::5", False),
    ("::ffff:198.51.100.7", "198.51.100.7", True),
    ("198.51.100.7", "198.51.100.8", False),
])
def test_addresses_count_per_ipv6_64_and_per_ipv4_address(one, other, same):
    assert (limits.limited_address(one) == limits.limited_address(other)) is same
    assert limits.limited_address("::1") is None and limits.limited_address("127.0.0.1") is None


def test_one_ipv6_64_is_one_address(rig, fake):
    now = [1_000_000.0]
    portal, browser, study_id = _portal(rig, fake, now)
    for n in range(limits.ADDRESS_FAILURES):  # forged entries, each from a new address in one /64
        browser.get(_url({**_ids(), "STUDY_ID": study_id}), headers={"X-Forwarded-For": f"2001:db8:7:7::{n + 1:x}"},
                    follow_redirects=False)
    again = browser.get(_url({**_ids(), "STUDY_ID": study_id}), headers={"X-Forwarded-For": "2001:db8:7:7:abcd::1"},
                        follow_redirects=False)
    assert again.status_code == 429 and "Prolific does not confirm" in again.text
    elsewhere = browser.get(_url({**_ids(), "STUDY_ID": study_id}), headers={"X-Forwarded-For": "2001:db8:7:8::1"},
                            follow_redirects=False)
    assert elsewhere.status_code == 403  # another /64: asked, and not confirmed


def test_entries_for_an_unknown_study_count_against_their_own_address_only(rig, fake):
    now = [1_000_000.0]
    portal, browser, study_id = _portal(rig, fake, now)
    here, elsewhere = {"X-Forwarded-For": "203.0.113.9"}, {"X-Forwarded-For": "203.0.113.10"}
    def url() -> str:
        return "/s/nosuchstudy/study1?PROLIFIC_PID=" + secrets.token_hex(12)

    assert {browser.get(url(), headers=here).status_code for _ in range(limits.ADDRESS_ENTRIES)} == {404}
    assert browser.get(url(), headers=here).status_code == 429  # its address used its entries
    assert browser.get(url(), headers=elsewhere).status_code == 404  # nobody else's
    arrival = fake.arrive(study_id)
    ids = {"PROLIFIC_PID": arrival["participant_id"], "STUDY_ID": study_id, "SESSION_ID": arrival["session_id"]}
    assert browser.get(_url(ids), headers=elsewhere, follow_redirects=False).status_code == 303
