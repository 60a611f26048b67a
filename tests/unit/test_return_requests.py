"""No rejection for what crowdpref did (issue 30, item 2), against the contract-checked fake
Prolific over HTTP with the real client and a real SQLite store (no Argilla).

- A participant whose work crowdpref released itself (no activity for ``inactive_after_minutes``,
  or dropped by the operator) while Prolific still counts their submission (ACTIVE or AWAITING
  REVIEW) is asked to return the study through Prolific's request-return, with a message;
  recorded before it is sent, never sent twice (not after a lost reply either), and never
  proposed for rejection - not even with failed checks or ``auto_reject``.
- The study's maximum allowed time is its ``inactive_after_minutes`` (the payload sets it; the
  fake refuses one below the document's least), so a real study never releases someone whom
  Prolific still gives time; the config refuses a shorter window (tests/unit/test_new_study.py).
- The portal's finish page tells such a person to return the study, and that it will not be
  rejected.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from crowdpref.prolific import ProlificError
from crowdpref.recruitment import (
    RETURN_REASON_DROPPED,
    RETURN_REASONS,
    ensure_prolific_study,
    released_by_crowdpref,
    return_reasons,
    study_payload,
    sync_prolific,
)
from tests.unit.test_portal_entry import _claimed, rig  # noqa: F401 - the portal rig
from tests.unit.test_recruitment import (  # noqa: F401 - fixtures
    _arrive_and_claim,
    _config,
    _study1,
    _submit,
    client,
    fake,
    settings,
    store,
)

RETURN_PATH = "/request-return/"


def _return_requests(fake: Any) -> list[str]:
    """The submissions a request-return was sent for, in order."""
    return [path.split("/")[4] for method, path in fake.requests if method == "POST" and path.endswith(RETURN_PATH)]


def _released_scene(settings, store, fake, client, tmp_path, **prolific: Any):
    """Study 1: one person crowdpref released for inactivity (one item of three submitted), still
    ACTIVE on Prolific; one who returned on Prolific (released through the Prolific status)."""
    config = _config(**prolific)
    collection = _study1(config, store, tmp_path)
    collection.progress = lambda *a, **k: type("P", (), {"complete": True, "unclaimed": 0})()
    platform = ensure_prolific_study(collection, config, settings, client)
    idle, idle_claim = _arrive_and_claim(fake, collection, platform.external_id)
    _submit(collection, idle_claim, 1)
    cid = collection.info.id
    assert collection.release(store.participant(cid, idle_claim.participant.username), "no activity for 62 min")
    returned, returned_claim = _arrive_and_claim(fake, collection, platform.external_id)
    fake.return_submission(returned["session_id"])
    assert collection.release(store.participant(cid, returned_claim.participant.username), "RETURNED on Prolific")
    return config, collection, platform, (idle, idle_claim), returned


def test_a_participant_crowdpref_released_is_asked_to_return_once_never_proposed_for_rejection(
        settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, (idle, idle_claim), returned = _released_scene(
        settings, store, fake, client, tmp_path, auto_approve=True, auto_reject=True)
    cid, sid = collection.info.id, idle["session_id"]
    store.record_checks(cid, idle_claim.participant.id, {"check-i-x": False}, "failed")  # even so
    sent: list[dict[str, Any]] = []
    client._http.event_hooks["request"].append(
        lambda r: sent.append(json.loads(r.content)) if r.url.path.endswith(RETURN_PATH) else None)

    report = sync_prolific(collection, config, client, private_dir=tmp_path / "private")
    assert report.returns_requested_now == 1 and _return_requests(fake) == [sid]  # not the one who returned
    assert fake.submissions[sid]["return_requested"] and fake.submissions[sid]["status"] == "ACTIVE"
    minutes = config.study1.inactive_after_minutes
    assert sent == [{"request_return_reasons": [RETURN_REASONS[0], RETURN_REASONS[1].format(minutes=minutes)]}]
    assert "will not be rejected" in sent[0]["request_return_reasons"][1]
    events = store.events(cid, kinds=["return_requested"])
    assert [(e["participant_id"], json.loads(e["detail"])["reason"]) for e in events] == [
        (idle_claim.participant.id, "no activity for 62 min")]

    # they report the completion code anyway: listed for review, no proposal, not rejected, not asked again
    fake.complete(sid, store.completion_code(cid))
    again = sync_prolific(collection, config, client, private_dir=tmp_path / "private")
    assert again.returns_requested_now == 0 and again.rejected_now == 0 and _return_requests(fake) == [sid]
    assert fake.submissions[sid]["status"] == "AWAITING REVIEW"
    assert again.review == [(idle_claim.participant.username,
                             "work released by crowdpref (no activity for 62 min): asked to return the study, never "
                             "rejected (return request: sent before)")]
    listed = json.loads((tmp_path / "private" / "prolific-review-study1.json").read_text())
    assert [e["submission_id"] for e in listed] == [sid] and "proposed_category" not in listed[0]
    assert len(store.events(cid, kinds=["return_requested"])) == 1


def test_a_return_request_whose_reply_was_lost_is_not_sent_again(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, (idle, _), _returned = _released_scene(settings, store, fake, client, tmp_path)
    real = client.request_return

    def lossy(*args: Any, **kwargs: Any) -> Any:
        fake.add_faults(disconnect="after")  # Prolific sends the message; the reply never comes
        return real(*args, **kwargs)

    client.request_return = lossy  # type: ignore[method-assign]
    report = sync_prolific(collection, config, client)
    assert report.returns_requested_now == 0 and _return_requests(fake) == [idle["session_id"]]
    assert [e["kind"] for e in store.events(collection.info.id, kinds=["return_requested",
                                                                       "return_request_unconfirmed"])] == [
        "return_requested", "return_request_unconfirmed"]
    client.request_return = real  # type: ignore[method-assign]
    sync_prolific(collection, config, client)
    assert _return_requests(fake) == [idle["session_id"]]  # once, whatever happened to the reply


def test_the_studys_maximum_time_is_its_dropout_window_and_the_fake_refuses_less_than_prolifics_least(
        settings, fake, client) -> None:
    config = _config()  # study 1: 25 estimated minutes -> at least 2 + 50 + 10 = 62 minutes
    assert config.study1.inactive_after_minutes == 62  # left out: raised to Prolific's least
    body = study_payload(config, "study1", settings, "C1234567", places=4)
    assert body["maximum_allowed_time"] == 62 == body["estimated_completion_time"] * 2 + 12
    client.create_study(body)
    body["maximum_allowed_time"] = 61
    with pytest.raises(ProlificError, match="maximum_allowed_time 61 is below the least"):
        client.create_study(body)
    assert len(fake.studies) == 1


def test_the_finish_page_tells_someone_crowdpref_released_to_return_the_study(rig) -> None:
    name = "released-done"
    collection, browser, _, _, participant = _claimed(rig, name)
    assert collection.release(participant, "no activity for 73 min")
    done = browser.get(f"/s/{name}/study1/done")
    assert done.status_code == 410 and "Please return the study" in done.text
    assert "will not be rejected" in done.text and "Return study" in done.text
    assert "reject" not in done.text.replace("will not be rejected", "")


def test_whose_release_is_ours_and_what_they_are_asked() -> None:
    def person(status: str = "released", reason: str | None = "no activity for 62 min", withdrawn: float | None = None):
        return SimpleNamespace(status=status, release_reason=reason, withdrawn_at=withdrawn)

    assert released_by_crowdpref(person()) and released_by_crowdpref(person("releasing"))
    assert released_by_crowdpref(person(reason="dropped by the operator"))
    assert not released_by_crowdpref(person(reason="RETURNED on Prolific (sync)"))  # Prolific's status
    assert not released_by_crowdpref(person(withdrawn=1.0, reason="asked to withdraw"))  # a withdrawal
    assert not released_by_crowdpref(person("active", None)) and not released_by_crowdpref(None)
    assert return_reasons(person(), 62) == [RETURN_REASONS[0], RETURN_REASONS[1].format(minutes=62)]
    assert "62 minutes without activity" in return_reasons(person(), 62)[1]
    assert return_reasons(person(reason="dropped by the operator"), 62) == [RETURN_REASONS[0], RETURN_REASON_DROPPED]
