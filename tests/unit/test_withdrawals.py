"""Withdrawals without Argilla (crowdpref/store/lifecycle.py ``Store.withdraw``, crowdpref/withdrawals.py,
``crowdpref withdraw``): one transaction takes a finished participant's work out of the count,
its slots return to the pool, an event records the reason (no ids), a second withdrawal changes
nothing; the aggregation and the release build of a planted run leave the withdrawn writer's
answers (and the pairs built from them, with their ratings) and the withdrawn rater's ratings
out, and the card counts them; the CLI prints one line and never the Prolific id. The real
Argilla, portal and Hub: tests/integration/test_withdrawals.py."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from crowdpref import cli
from crowdpref.release import build_release
from crowdpref.store import COMPLETE, SUBMITTED, WITHDRAWN, Claimed, CollectionInfo, Full, Refused, Store, StoreError
from crowdpref.withdrawals import Withdrawn, leave_out_all, withdraw, withdraw_on_platform, withdrawn_in
from tests.unit.test_publish import card_of, small_config, write_study_run
from tests.unit.test_reopen import store  # noqa: F401 - the same store, on a ticking clock
from tests.unit.test_release_filters import aggregate_run, published




def _claim_and_submit(store: Store, info: CollectionInfo, key: str, source: str = "prolific") -> Claimed:
    claimed = store.claim(info, key, source)
    assert isinstance(claimed, Claimed)
    store.record_progress(info.id, claimed.participant.id, {i: 1_000.0 for i in claimed.participant.items}, None)
    return claimed


def _full(store: Store, study: str = "s", prefix: str = "s-s1") -> tuple[CollectionInfo, list[Claimed]]:
    """3 questions x R=2, Q=3: two participants answer everything; the collection is full."""
    info = store.collection(study, "study1", [f"q{i}" for i in range(3)], copies=2, per_participant=3, seed=1,
                            username_prefix=prefix)
    done = [_claim_and_submit(store, info, key) for key in ("a" * 24, "b" * 24)]
    assert isinstance(store.claim(info, "c" * 24, "prolific"), Full)
    return info, done


# --- the store -------------------------------------------------------------------------------------
def test_a_withdrawal_takes_the_work_out_of_the_count_and_the_next_arrival_claims_the_slots(store: Store) -> None:
    info, (a, b) = _full(store)
    assert sorted(store.withdraw(info.id, a.participant.id, "asked by message")) == ["q0", "q1", "q2"]
    state = store.participant(info.id, a.participant.username)
    assert state.withdrawn_at is not None and state.status == COMPLETE
    assert {x.status for x in state.assignments} == {WITHDRAWN} and state.visible == []
    counts = store.item_counts(info.id)
    assert counts.submitted == {"q0": 1, "q1": 1, "q2": 1} and counts.withdrawn == {"q0": 1, "q1": 1, "q2": 1}
    nxt = store.claim(info, "c" * 24, "prolific")  # the freed slots go to the next arrival
    assert isinstance(nxt, Claimed) and sorted(nxt.participant.items) == ["q0", "q1", "q2"]
    assert len(store.events(info.id, kinds=["reallocated"])) == 3
    assert store.check(info.id) == []
    assert isinstance(store.claim(info, "a" * 24, "prolific"), Refused)  # they cannot come back for more
    assert store.withdrawn_usernames(info.id) == [a.participant.username]


def test_a_withdrawal_is_one_event_with_the_reason_and_no_ids_and_a_second_one_changes_nothing(store: Store) -> None:
    info, (a, _) = _full(store)
    store.withdraw(info.id, a.participant.id, "RETURNED on Prolific after completion")
    events = store.events(info.id, kinds=["withdrawn"])
    assert len(events) == 1 and events[0]["participant_id"] == a.participant.id
    assert json.loads(events[0]["detail"]) == {"items": 3, "reason": "RETURNED on Prolific after completion"}
    assert "a" * 24 not in json.dumps(events, default=str) and store.key_hash("a" * 24) not in json.dumps(
        events, default=str)
    before = store.participant(info.id, a.participant.username)
    assert store.withdraw(info.id, a.participant.id, "again") is None
    assert store.participant(info.id, a.participant.username) == before
    assert len(store.events(info.id, kinds=["withdrawn"])) == 1


def test_an_active_participant_is_not_withdrawn_by_the_store_alone(store: Store) -> None:
    info = store.collection("s", "study1", ["q0", "q1"], copies=1, per_participant=2, seed=1, username_prefix="s-s1")
    claimed = store.claim(info, "a" * 24, "prolific")
    assert isinstance(claimed, Claimed)
    with pytest.raises(StoreError, match="active"):
        store.withdraw(info.id, claimed.participant.id, "x")
    with pytest.raises(StoreError, match="released first"):
        withdraw(store, claimed.participant, "x", info)
    assert store.participant(info.id, claimed.participant.username).withdrawn_at is None
    assert {x.status for x in store.participant(info.id, claimed.participant.username).assignments} == {"held"}


def test_only_a_freeing_status_after_completion_withdraws(store: Store) -> None:
    info, (a, b) = _full(store)
    assert withdraw_on_platform(store, a.participant, "APPROVED", info) is None
    assert withdraw_on_platform(store, store.participant(info.id, a.participant.username), "TIMED-OUT", info).now
    again = withdraw_on_platform(store, store.participant(info.id, a.participant.username), "RETURNED", info)
    assert again is not None and not again.now and "already withdrawn" in again.message
    assert {x.status for x in store.participant(info.id, b.participant.username).assignments} == {SUBMITTED}


# --- leaving their rows out: aggregation and release of a planted run ------------------------------
@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    home.mkdir()
    monkeypatch.setenv("CROWDPREF_HOME", str(home))
    return home


def _participants(store: Store, study: str, key: str, prefix: str, n: int) -> list[Claimed]:
    """n complete participants ``prefix-0001``... in the store (the planted run's usernames)."""
    info = store.collection(study, key, ["x"], copies=n, per_participant=1, seed=1, username_prefix=prefix)
    return [_claim_and_submit(store, info, f"{key}-{i}", "simulated") for i in range(n)]


def test_a_withdrawal_after_publication_leaves_their_rows_out_of_the_next_aggregation_and_release(
        tmp_path: Path, state: Path) -> None:
    config = small_config()
    planted = write_study_run(tmp_path / "runs" / config.name, config)
    run = planted.run
    aggregate_run(planted)
    store = Store(f"sqlite:///{state / 'store.sqlite'}")
    writers = _participants(store, config.name, "study1", config.study1.username_prefix, 1)
    raters = _participants(store, config.name, "study2", config.study2.username_prefix, 2)
    build_release(run, config, aggregation=json.loads(run.file("aggregation.json").read_text()),
                  forbidden=planted.forbidden, withdrawn=withdrawn_in(store, config.name, run.private_dir))
    first = published(run.release, "responses_raw")
    writer_key, rater_key = planted.participant_keys[0], planted.participant_keys[3 + 1]  # writer 1, rater 2

    s1, s2 = (store.find_collection(config.name, k) for k in ("study1", "study2"))
    withdraw(store, writers[0].participant, "asked by message", s1)
    withdraw(store, raters[1].participant, "RETURNED on Prolific after completion", s2)
    gone = withdrawn_in(store, config.name, run.private_dir)
    assert gone.keys == {writer_key, rater_key}
    with pytest.raises(Exception, match="withdrew.*rerun the aggregate-ratings flow"):  # stale preferences
        build_release(run, config, aggregation=json.loads(run.file("aggregation.json").read_text()),
                      forbidden=planted.forbidden, withdrawn=gone)

    aggregate_run(planted)  # what publish-dataset does first when someone withdrew since
    stats = json.loads(run.file("aggregation.json").read_text())
    assert stats["withdrawn_participants"] == 2
    folder = build_release(run, config, aggregation=stats, forbidden=planted.forbidden, withdrawn=gone)
    responses = pd.read_parquet(run.responses)
    theirs = set(responses.loc[responses["participant_key"] == writer_key, "response_id"])
    assert len(theirs) == 2 and theirs <= set(first["response_id"])
    ratings = pd.read_parquet(run.ratings)
    their_pairs = set(pd.read_parquet(run.pairs).pipe(
        lambda p: p.loc[p["first_response_id"].isin(theirs) | p["second_response_id"].isin(theirs), "pair_id"]))
    assert their_pairs
    for name in ("responses", "responses_raw"):
        frame = published(folder, name)
        assert not set(frame["response_id"]) & theirs and len(frame)
    for name in ("ratings", "ratings_raw"):
        frame = published(folder, name)
        assert not set(frame["pair_id"]) & their_pairs
        assert not set(frame["response_a_id"]) & theirs and not set(frame["response_b_id"]) & theirs
    kept_raw = published(folder, "ratings_raw")
    expected = ratings[~ratings["pair_id"].isin(their_pairs) & (ratings["rater_key"] != rater_key)]
    assert sorted(kept_raw["rating_id"]) == sorted(expected["rating_id"])  # the rater's ratings are gone too
    prefs = published(folder, "default")
    assert not set(prefs["pair_id"]) & their_pairs
    assert not (set(prefs["chosen_response_id"]) | set(prefs["rejected_response_id"])) & theirs
    assert len(published(folder, "participants")) == 9 - 2
    assert set(published(folder, "raters")["rater_id"]) == set(kept_raw["rater_id"])
    for path in folder.rglob("*.parquet"):
        text = pd.read_parquet(path).astype(str).to_csv()
        assert writer_key not in text and rater_key not in text
    _, card = card_of(folder)
    assert "2 participants withdrew; their answers and ratings are not in this release" in card
    assert writer_key not in card and rater_key not in card


def test_leave_out_is_one_rule_over_every_frame() -> None:
    responses = pd.DataFrame({"response_id": ["r1", "r2", "r3"], "participant_key": ["p_w", "p_x", "p_x"]})
    pairs = pd.DataFrame({"pair_id": ["pr1", "pr2"], "first_response_id": ["r1", "r2"],
                          "second_response_id": ["r2", "r3"]})
    ratings = pd.DataFrame({"rating_id": ["t1", "t2", "t3"], "pair_id": ["pr1", "pr2", "pr2"],
                            "response_a_id": ["r1", "r2", "r3"], "response_b_id": ["r2", "r3", "r2"],
                            "rater_key": ["p_a", "p_b", "p_gone"]})
    out = leave_out_all({"responses": responses, "pairs": pairs, "ratings": ratings, "none": None},
                        Withdrawn(frozenset({"p_w", "p_gone"})))
    assert list(out["responses"]["response_id"]) == ["r2", "r3"]
    assert list(out["pairs"]["pair_id"]) == ["pr2"]
    assert list(out["ratings"]["rating_id"]) == ["t2"] and out["none"] is None
    assert leave_out_all({"responses": responses}, Withdrawn())["responses"] is responses  # nobody withdrew


# --- the CLI ---------------------------------------------------------------------------------------
@pytest.fixture()
def cli_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Store, str, Claimed]:
    for name in ("CROWDPREF_SETTINGS", "CROWDPREF_ARGILLA_URL", "ARGILLA_API_URL", "CROWDPREF_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "state"
    home.mkdir()
    monkeypatch.setenv("CROWDPREF_HOME", str(home))
    monkeypatch.setenv("CROWDPREF_ARGILLA_PORT", "9")  # nothing answers: the store-only withdrawal
    study = tmp_path / "cli-test.yaml"
    study.write_text(yaml.safe_dump({
        "name": "cli-test", "title": "CLI test", "participants": "simulated",
        "questions": {"categories": ["empathy", "humour"], "per_category": 1},
        "study1": {"responses_per_question": 2, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 1},
    }))
    store = Store(f"sqlite:///{home / 'store.sqlite'}")
    prolific_id = secrets.token_hex(12)
    info = store.collection("cli-test", "study1", ["q0", "q1", "q2"], copies=2, per_participant=3, seed=1,
                            username_prefix="cli-test-s1")
    claimed = _claim_and_submit(store, info, prolific_id)
    yield study, store, prolific_id, claimed
    store.close()


def _run(*args: str) -> Any:
    return CliRunner().invoke(cli.app, ["withdraw", *args])


def test_cli_withdraws_by_prolific_id_in_one_line_without_printing_the_id(cli_study) -> None:
    study, store, prolific_id, claimed = cli_study
    result = _run(prolific_id, "--study", str(study))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and prolific_id not in result.output
    assert lines[0].startswith(f"{claimed.participant.username} (study1): withdrawn;")
    assert "3 counted answers no longer count" in lines[0] and "Argilla is not reachable" in lines[0]
    info = store.find_collection("cli-test", "study1")
    assert store.participant(info.id, claimed.participant.username).withdrawn_at is not None
    again = _run(prolific_id, "--study", str(study))
    assert again.exit_code == 0 and prolific_id not in again.output
    assert again.output.strip().splitlines()[0].startswith(
        f"{claimed.participant.username} (study1): already withdrawn; nothing changed")
    assert len(store.events(info.id, kinds=["withdrawn"])) == 1


def test_cli_withdraws_by_username(cli_study) -> None:
    study, store, _, claimed = cli_study
    result = _run("--username", claimed.participant.username, "--study", str(study), "--reason", "invite: asked")
    assert result.exit_code == 0, result.output
    info = store.find_collection("cli-test", "study1")
    assert json.loads(store.events(info.id, kinds=["withdrawn"])[0]["detail"])["reason"] == "invite: asked"


def test_cli_refusals_are_one_line_and_never_echo_the_id(cli_study) -> None:
    study, store, _, _ = cli_study
    unknown = secrets.token_hex(12)
    result = _run(unknown, "--study", str(study))
    assert result.exit_code == 1 and unknown not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "no participant with that id" in result.output
    neither = _run("--study", str(study))
    assert neither.exit_code == 2 and "one of them" in neither.output
    both = _run(unknown, "--username", "x", "--study", str(study))
    assert both.exit_code == 2 and unknown not in both.output


# --- the sync: the backstop for a lost webhook -----------------------------------------------------
def test_the_sync_withdraws_a_participant_whose_completed_submission_was_rejected(tmp_path: Path, store: Store) -> None:
    from crowdpref.prolific import ProlificClient
    from crowdpref.recruitment import ensure_prolific_study, sync_prolific
    from crowdpref.simulation.prolific_server import FakeProlific
    from crowdpref.study1 import study1_collection
    from tests.conftest import isolated_settings
    from tests.unit.test_recruitment import NoArgilla, _config, _questions, _submit

    config = _config()
    settings = isolated_settings(tmp_path / "home", portal_url="https://portal.example.org",
                                 prolific_workspace_id="ws-1")
    collection = study1_collection(config, _questions(), NoArgilla(), tmp_path / "run", store)
    with FakeProlific(page_size=2, retry_delay_s=0.05) as fake, ProlificClient(
            fake.base_url, fake.token, backoff_s=0.0, sleep=lambda _s: None) as client:
        platform = ensure_prolific_study(collection, config, settings, client)
        arrivals = [fake.arrive(platform.external_id) for _ in range(2)]
        claims = [store.claim(collection.info, a["participant_id"], "prolific") for a in arrivals]
        for arrival, claimed in zip(arrivals, claims):
            assert isinstance(claimed, Claimed)
            _submit(collection, claimed)
            fake.complete(arrival["session_id"], store.completion_code(collection.info.id))
        client.reject_submission(arrivals[0]["session_id"], "x" * 100, "LOW_EFFORT")
        assert sync_prolific(collection, config, client).withdrawn_now == 1
        gone, kept = (store.participant(collection.info.id, c.participant.username) for c in claims)
        assert gone.withdrawn_at is not None and gone.submitted == {} and kept.withdrawn_at is None
        [event] = store.events(collection.info.id, kinds=["withdrawn"])
        assert json.loads(event["detail"])["reason"] == "REJECTED on Prolific after completion (sync)"
        assert arrivals[0]["participant_id"] not in json.dumps(store.events(collection.info.id), default=str)
        # the next sync sees the same status: nothing more
        assert sync_prolific(collection, config, client).withdrawn_now == 0
        assert len(store.events(collection.info.id, kinds=["withdrawn"])) == 1
        assert collection.progress().submitted == 3  # only the other one's work counts; their slots are free
