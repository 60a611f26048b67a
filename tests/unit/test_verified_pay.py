"""Pay only verified work, and never repeat a money call blindly (crowdpref.recruitment against
the fake Prolific over HTTP, the real client, a real SQLite store; no Argilla).

- The completion code never approves: whoever reports it waits on Prolific until the sync
  approves what crowdpref verified; the code without the work (never claimed, stopped half-way,
  released, withdrawn, failed checks) is never approved. Only rule violations get a proposed
  rejection from Prolific's categories, each citing its rule (never claimed: NO_DATA; failed
  checks: FAILED_CHECK, rejected automatically only with ``prolific.auto_reject``; too fast);
  half-way work and withdrawals are listed with no proposal; work crowdpref released itself is
  asked to return the study, never proposed for rejection.
- A creation whose reply was lost is found again (the study by its internal name, the group by
  its name): one of each on Prolific. A bulk approval whose reply was lost is not sent again
  (not by the client, not by a task retry, not by the next sync): the next sync reads it back.
- The budget guard: places rise at most to ``prolific.studyN.max_places``, and the sync and
  the monitoring say so in words.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml

from crowdpref.prolific import ProlificAmbiguous, ProlificError
from crowdpref.recruitment import (
    CAP_META,
    GROUP_META,
    ensure_prolific_study,
    group_name,
    internal_name,
    prolific_state,
    review_decision,
    sync_prolific,
)
from crowdpref.store import COMPLETE, PASSED
from tasks.retries import is_transient, retry_transient
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

CONTRACT = Path(__file__).resolve().parents[2] / "crowdpref" / "simulation" / "prolific-openapi.yml"
BULK = ("POST", "/api/v1/submissions/bulk-approve/")


def _categories() -> set[str]:
    """The rejection categories Prolific's published document allows."""
    doc = yaml.safe_load(CONTRACT.read_text())
    return set(doc["components"]["schemas"]["SubmissionTransitionRejectionCategory"]["enum"])


def _bulk_bodies(client: Any) -> list[list[str]]:
    """Every bulk approval the client actually sends (the bytes on the wire), kept in order."""
    sent: list[list[str]] = []

    def hook(request: httpx.Request) -> None:
        if request.url.path.endswith("/submissions/bulk-approve/"):
            sent.append(json.loads(request.content)["submission_ids"])

    client._http.event_hooks["request"].append(hook)
    return sent


def _transitions(fake: Any) -> list[str]:
    """The submissions that got a single transition (approve / reject) request."""
    return [path.split("/")[4] for method, path in fake.requests
            if method == "POST" and path.startswith("/api/v1/submissions/") and path.endswith("/transition/")]


def _crowd(settings, store, fake, client, tmp_path, **prolific: Any):
    """Study 1 on the fake Prolific (R = 4: 24 slots, 8 batches of 3); two honest completers,
    and five who report the code without verified work: one who learned the code and never
    claimed through the portal, one who stopped half-way, one who failed the checks, one whose
    work was released, one who withdrew."""
    config = _config(**prolific)
    config.study1.responses_per_question = 4
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    study_id, cid = platform.external_id, collection.info.id
    people: dict[str, Any] = {}
    for name in ("honest1", "honest2", "halfway", "failed", "released", "withdrawn"):
        arrival, claimed = _arrive_and_claim(fake, collection, study_id)
        people[name] = (arrival, claimed)
    for name in ("honest1", "honest2", "failed", "withdrawn"):
        _submit(collection, people[name][1])
    _submit(collection, people["halfway"][1], 1)
    _submit(collection, people["released"][1], 1)
    store.record_checks(cid, people["failed"][1].participant.id, {"check-i-x": False}, "failed")
    assert collection.release(store.participant(cid, people["released"][1].participant.username), "idle")
    store.withdraw(cid, people["withdrawn"][1].participant.id, "asked to withdraw")
    people["stranger"] = (fake.arrive(study_id), None)  # learned the code, never came to the portal
    code = store.completion_code(cid)
    for arrival, _ in people.values():
        fake.complete(arrival["session_id"], code)
    return config, collection, platform, people


def _status(fake: Any, people: dict[str, Any], name: str) -> str:
    return fake.submissions[people[name][0]["session_id"]]["status"]


# --- pay only verified work -------------------------------------------------------------------------------
def test_the_code_without_the_work_is_never_approved(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, people = _crowd(settings, store, fake, client, tmp_path, auto_approve=True)
    bad = ("stranger", "halfway", "failed", "released", "withdrawn")
    # the code asked only for review: everyone waits on Prolific until the sync runs
    assert {_status(fake, people, n) for n in people} == {"AWAITING REVIEW"}
    bodies = _bulk_bodies(client)

    report = sync_prolific(collection, config, client, private_dir=tmp_path / "private")
    assert [_status(fake, people, n) for n in ("honest1", "honest2")] == ["APPROVED", "APPROVED"]
    assert [_status(fake, people, n) for n in bad] == ["AWAITING REVIEW"] * len(bad)
    honest = {people[n][0]["session_id"] for n in ("honest1", "honest2")}
    assert [sorted(b) for b in bodies] == [sorted(honest)]  # one bulk approval, of the honest two only
    assert _transitions(fake) == []  # nobody approved or rejected one by one
    assert (report.approved_now, report.rejected_now, report.awaiting_review) == (2, 0, 5)

    reasons = dict(report.review or [])
    by_name = {claimed.participant.username: n for n, (_, claimed) in people.items() if claimed is not None}
    shown = {by_name.get(user, "stranger"): reason for user, reason in reasons.items()}
    assert "(proposed rejection: NO_DATA; rule: the study's instruction:" in shown["stranger"]
    assert "1 of 3 items submitted" in shown["halfway"] and "proposed rejection" not in shown["halfway"]
    assert "(proposed rejection: FAILED_CHECK; rule: study1.checks: pass all" in shown["failed"]
    assert shown["released"].startswith("work released by crowdpref (idle): asked to return the study")
    assert "proposed rejection" not in shown["released"] and "(return request: sent)" in shown["released"]
    assert fake.submissions[people["released"][0]["session_id"]]["return_requested"]
    assert shown["withdrawn"].startswith("withdrew") and "proposed rejection" not in shown["withdrawn"]
    listed = json.loads((tmp_path / "private" / "prolific-review-study1.json").read_text())
    assert len(listed) == 5
    for entry in listed:
        if "proposed_category" in entry:
            assert entry["proposed_category"] in _categories()  # Prolific's own categories
            assert len(entry["proposed_message"]) >= 100  # Prolific's rule for a rejection message
            assert entry["rule"]  # the rule it relies on

    # a second sync approves nobody more, and nothing twice
    again = sync_prolific(collection, config, client)
    assert again.approved_now == 0 and again.approved == 2 and len(bodies) == 1 and _transitions(fake) == []
    assert [_status(fake, people, n) for n in bad] == ["AWAITING REVIEW"] * len(bad)


def test_auto_reject_rejects_only_failed_checks(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, people = _crowd(settings, store, fake, client, tmp_path, auto_approve=True,
                                                  auto_reject=True)
    report = sync_prolific(collection, config, client)
    assert _status(fake, people, "failed") == "REJECTED" and report.rejected_now == 1
    for name in ("stranger", "halfway", "released", "withdrawn"):
        assert _status(fake, people, name) == "AWAITING REVIEW", name
    assert _transitions(fake) == [people["failed"][0]["session_id"]]


def test_without_auto_approve_nothing_is_approved(settings, store, fake, client, tmp_path) -> None:
    config, collection, platform, people = _crowd(settings, store, fake, client, tmp_path)
    report = sync_prolific(collection, config, client)
    assert report.approved_now == 0 and {_status(fake, people, n) for n in people} == {"AWAITING REVIEW"}
    assert BULK not in fake.requests and _transitions(fake) == []


def _participant(**fields: Any) -> SimpleNamespace:
    base = dict(status=COMPLETE, withdrawn_at=None, excluded_at=None, check_verdict=None, checks_answered=0,
                checks_passed=0, assignments=(), submitted={}, release_reason=None)
    return SimpleNamespace(**{**base, **fields})


def test_review_decision_approves_nothing_but_verified_work() -> None:
    config = _config()
    check = SimpleNamespace(item_id="check-i-1")
    for participant in (
        None,
        _participant(status="active"), _participant(status="releasing"), _participant(status="released"),
        _participant(status="withdrawn"), _participant(status="something new"),
        _participant(withdrawn_at=1.0),  # withdrew after completing: the status stays complete
        _participant(excluded_at=1.0),
        _participant(assignments=(check,)),  # a batch with checks not graded yet
        _participant(assignments=(check,), check_verdict="unanswered"),
        _participant(check_verdict="failed"),
    ):
        decision = review_decision(participant, config, "study1", auto_approve=True)
        assert decision.action != "approve", participant
        assert decision.action in ("review", "return") or decision.category == "FAILED_CHECK"
        if decision.category is not None:
            assert decision.category in _categories() and len(str(decision.message)) >= 100


# --- ambiguous creations are reconciled -------------------------------------------------------------------------
def _lose_reply(fake: Any, obj: Any, method: str, disconnect: str = "after") -> None:
    """The next call of ``obj.method`` reaches the fake, which (``after``) acts and never answers."""
    real = getattr(obj, method)

    def lossy(*args: Any, **kwargs: Any) -> Any:
        fake.add_faults(disconnect=disconnect)
        setattr(obj, method, real)
        return real(*args, **kwargs)

    setattr(obj, method, lossy)


def test_a_study_create_whose_reply_was_lost_is_adopted(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    _lose_reply(fake, client, "create_study")
    platform = ensure_prolific_study(collection, config, settings, client)
    assert len(fake.studies) == 1 and platform.external_id in fake.studies and platform.state == "active"
    assert [r for r in fake.requests if r == ("POST", "/api/v1/studies/")] == [("POST", "/api/v1/studies/")]
    adopted = store.events(collection.info.id, kinds=["platform_study_adopted"])
    assert len(adopted) == 1 and not store.events(collection.info.id, kinds=["platform_study_created"])
    assert ensure_prolific_study(collection, config, settings, client).external_id == platform.external_id
    assert len(fake.studies) == 1


def test_a_study_create_lost_before_prolific_acted_fails_in_one_line_and_the_rerun_creates_it(
        settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    _lose_reply(fake, client, "create_study", disconnect="before")
    with pytest.raises(ProlificError) as exc:
        ensure_prolific_study(collection, config, settings, client)
    assert not is_transient(exc.value) and "run again" in str(exc.value) and "\n" not in str(exc.value)
    assert internal_name(config.name, "study1") in str(exc.value)
    assert fake.studies == {} and store.platform_study(collection.info.id) is None
    platform = ensure_prolific_study(collection, config, settings, client)
    assert list(fake.studies) == [platform.external_id]


def test_a_group_create_whose_reply_was_lost_makes_one_group(settings, store, fake, client, tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    _lose_reply(fake, client, "create_participant_group")
    platform = ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1
    [group] = fake.groups
    assert store.get_meta(GROUP_META.format(study=config.name)) == group == platform.group_id
    assert fake.groups[group]["name"] == group_name(config)
    ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1


def test_a_lost_group_reply_the_run_cannot_check_is_found_by_the_next_run(settings, store, fake, client,
                                                                           tmp_path) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    real_list = client.list_participant_groups

    def down(*args: Any, **kwargs: Any) -> Any:  # Prolific cannot be read right after the lost reply
        raise ProlificError("Prolific GET /participant-groups/: 503", 503, transient=True)

    _lose_reply(fake, client, "create_participant_group")
    client.list_participant_groups = down  # type: ignore[method-assign]
    with pytest.raises(ProlificError):
        ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1 and store.get_meta(GROUP_META.format(study=config.name)) is None
    client.list_participant_groups = real_list  # type: ignore[method-assign]
    platform = ensure_prolific_study(collection, config, settings, client)  # the second run
    assert len(fake.groups) == 1 and platform.group_id == next(iter(fake.groups))
    assert len([r for r in fake.requests if r == ("POST", "/api/v1/participant-groups/")]) == 1


def test_a_run_killed_after_the_group_was_made_finds_it_by_name(settings, store, fake, client, tmp_path,
                                                                monkeypatch) -> None:
    config = _config()
    collection = _study1(config, store, tmp_path)
    real_set = store.set_meta

    def killed(name: str, value: str) -> None:
        if name == GROUP_META.format(study=config.name):
            raise KeyboardInterrupt("killed between creating the group and keeping its id")
        real_set(name, value)

    with monkeypatch.context() as patch:
        patch.setattr(store, "set_meta", killed)
        with pytest.raises(KeyboardInterrupt):
            ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1
    ensure_prolific_study(collection, config, settings, client)
    assert len(fake.groups) == 1 and store.get_meta(GROUP_META.format(study=config.name)) in fake.groups


# --- money calls are never repeated blindly ------------------------------------------------------------------
def _one_honest(settings, store, fake, client, tmp_path):
    config = _config(auto_approve=True)
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    arrival, claimed = _arrive_and_claim(fake, collection, platform.external_id)
    _submit(collection, claimed)
    fake.complete(arrival["session_id"], store.completion_code(collection.info.id))
    return config, collection, arrival, claimed


def test_a_bulk_approval_whose_reply_was_lost_is_sent_once_and_read_back(settings, store, fake, client,
                                                                           tmp_path) -> None:
    config, collection, arrival, claimed = _one_honest(settings, store, fake, client, tmp_path)
    _lose_reply(fake, client, "bulk_approve")
    report = sync_prolific(collection, config, client)  # no exception: the rest of the sync goes on
    assert fake.requests.count(BULK) == 1  # the client did not repeat it
    assert fake.submissions[arrival["session_id"]]["status"] == "APPROVED"  # Prolific had done it
    assert report.approvals_unconfirmed == 1 and report.approved_now == 0
    assert report.row()["approvals unconfirmed"] == 1
    cid, pid = collection.info.id, claimed.participant.id
    assert [e["participant_id"] for e in store.events(cid, kinds=["approve_sent"])] == [pid]
    assert store.events(cid, kinds=["approved"]) == []

    again = sync_prolific(collection, config, client)  # reads it back: approved, counted, nothing sent
    assert fake.requests.count(BULK) == 1 and _transitions(fake) == []
    assert (again.approved, again.approved_now, again.approvals_unconfirmed) == (1, 0, 0)
    assert [e["participant_id"] for e in store.events(cid, kinds=["approved"])] == [pid]
    sync_prolific(collection, config, client)
    assert fake.requests.count(BULK) == 1 and len(store.events(cid, kinds=["approved"])) == 1


def test_a_bulk_approval_prolific_never_got_is_approved_once_by_the_next_sync(settings, store, fake, client,
                                                                               tmp_path) -> None:
    config, collection, arrival, claimed = _one_honest(settings, store, fake, client, tmp_path)
    _lose_reply(fake, client, "bulk_approve", disconnect="before")
    assert sync_prolific(collection, config, client).approvals_unconfirmed == 1
    assert fake.submissions[arrival["session_id"]]["status"] == "AWAITING REVIEW"
    again = sync_prolific(collection, config, client)  # read back: still waiting -> one approve of it
    assert fake.requests.count(BULK) == 1 and _transitions(fake) == [arrival["session_id"]]
    assert again.approved_now == 1 and fake.submissions[arrival["session_id"]]["status"] == "APPROVED"
    sync_prolific(collection, config, client)
    assert fake.requests.count(BULK) == 1 and len(_transitions(fake)) == 1


def test_ambiguous_money_calls_are_never_transient_for_a_task_retry(settings, store, fake, client,
                                                                     tmp_path) -> None:
    from prefect.states import Failed

    _, _, arrival, _ = _one_honest(settings, store, fake, client, tmp_path)
    _lose_reply(fake, client, "bulk_approve")
    with pytest.raises(ProlificAmbiguous) as exc:
        client.bulk_approve([arrival["session_id"]])
    assert fake.requests.count(BULK) == 1 and fake.submissions[arrival["session_id"]]["status"] == "APPROVED"
    assert not is_transient(exc.value)
    state = Failed(data=exc.value)
    assert retry_transient(None, None, state) is False
    # whatever flag it carries, an ambiguous call is never worth a blind retry
    forced = ProlificAmbiguous("Prolific POST /bulk-bonus-payments/x/pay/: lost")
    forced.transient = True
    assert not is_transient(forced)
    unreachable = ProlificError("Prolific GET /studies/: 503", 503, transient=True)
    assert is_transient(unreachable) and retry_transient(None, None, Failed(data=unreachable)) is True


# --- the budget guard -------------------------------------------------------------------------------------------
def test_places_rise_at_most_to_the_budget_cap_and_the_sync_says_so(settings, store, fake, client,
                                                                     tmp_path) -> None:
    config = _config(study1={"places": 2, "max_places": 3})
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    arrival, _ = _arrive_and_claim(fake, collection, platform.external_id)
    fake.return_submission(arrival["session_id"])
    report = sync_prolific(collection, config, client)
    # 12 slots wait, 3 per person: 4 places needed; the cap is 3
    assert fake.studies[platform.external_id]["total_available_places"] == 3
    assert (report.places_raised_to, report.places, report.places_capped_at, report.places_short) == (3, 3, 3, 1)
    note = ("places are at the budget cap 3 (prolific.study1.max_places): 1 more would be needed; raise the cap "
            "or let the pool wait")
    assert report.budget_note() == note
    assert (report.row()["places capped at"], report.row()["places short"]) == (3, 1)
    state = prolific_state(config, settings, store, collection.info.id, client=client)
    assert state is not None and state.describe().endswith(f"; {note}")  # the collection's monitoring
    again = sync_prolific(collection, config, client)
    assert again.places_raised_to is None and again.places_capped_at == 3 and again.places_short == 1
    assert fake.studies[platform.external_id]["total_available_places"] == 3
    assert len([r for r in fake.requests if r[0] == "PATCH"]) == 1
    # the cap raised in the config: the next sync raises the places and the note goes away
    config.prolific.study1.max_places = 10
    lifted = sync_prolific(collection, config, client)
    assert lifted.places_raised_to == 4 and lifted.budget_note() is None
    assert store.get_meta(CAP_META.format(cid=collection.info.id)) == ""
    assert "budget cap" not in prolific_state(config, settings, store, collection.info.id, client=client).describe()


def test_the_default_cap_is_twice_the_first_places(settings, store, fake, client, tmp_path) -> None:
    config = _config(study1={"places": 1})
    collection = _study1(config, store, tmp_path)
    platform = ensure_prolific_study(collection, config, settings, client)
    report = sync_prolific(collection, config, client)  # 12 slots, nobody yet: 4 wanted, 2 allowed
    assert fake.studies[platform.external_id]["total_available_places"] == 2
    assert (report.places_capped_at, report.places_short) == (2, 2)
    assert "budget cap 2 (prolific.study1.max_places): 2 more" in str(report.budget_note())


def test_a_read_back_approval_prolific_refuses_is_listed_not_raised(settings, store, fake, client, tmp_path) -> None:
    config, collection, arrival, claimed = _one_honest(settings, store, fake, client, tmp_path)
    _lose_reply(fake, client, "bulk_approve", disconnect="before")
    sync_prolific(collection, config, client)
    real = client.approve_submission

    def refused(submission_id: str) -> Any:
        raise ProlificError(f"Prolific POST /submissions/{submission_id}/transition/: 400 (refused)", 400)

    client.approve_submission = refused  # type: ignore[method-assign]
    report = sync_prolific(collection, config, client)
    assert report.review == [(claimed.participant.username,
                              "verified, but Prolific refused the approval (400): a person decides")]
    assert arrival["session_id"] not in json.dumps(report.row()) + repr(report.review)
    client.approve_submission = real  # type: ignore[method-assign]
    assert sync_prolific(collection, config, client).approved_now == 1


def test_auto_reject_is_for_finished_work_that_failed_the_checks_only() -> None:
    config = _config(auto_reject=True)
    finished = review_decision(_participant(check_verdict="failed"), config, "study1", auto_approve=True)
    assert (finished.action, finished.category) == ("reject", "FAILED_CHECK")
    released = review_decision(_participant(status="released", check_verdict="failed",
                                            release_reason="RETURNED on Prolific"), config, "study1", auto_approve=True)
    assert (released.action, released.category) == ("review", "FAILED_CHECK")
    # released by crowdpref itself (inactivity): asked to return, never proposed for rejection
    ours = review_decision(_participant(status="released", check_verdict="failed",
                                        release_reason="no activity for 60 min"), config, "study1", auto_approve=True)
    assert (ours.action, ours.category, ours.rule) == ("return", None, None)
    for participant in (None, _participant(status="active"), _participant(status="released",
                                                                          release_reason="TIMED-OUT on Prolific"),
                        _participant(withdrawn_at=1.0, check_verdict="failed")):
        assert review_decision(participant, config, "study1", auto_approve=True).action == "review"
