"""A study's progress (crowdpref/progress.py, ``crowdpref progress``): the numbers read from a
store driven through claims, submissions, a release, checks, an exclusion, a withdrawal, a
reopened answer and the sync's approvals; a study that has not started (no store is created);
reading while another connection holds the store's write lock; Prolific asked through the fake
Prolific, and the line when it cannot be reached; the CLI's table, JSON and one-line errors.

:func:`drive` and :func:`check_driven` are shared with tests/integration/test_progress_postgres.py,
which runs the same on PostgreSQL."""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crowdpref.cli import app
from crowdpref.config import StudyConfig, parse_study
from crowdpref.progress import open_for_reading, study_progress
from crowdpref.store import COMPLETE, Store, default_url
from tests.conftest import CONNECTION_ENV, isolated_settings

NAME = "progress-test"
QUESTIONS = [f"q-{i}" for i in range(6)]


def study_data(**overrides: Any) -> dict[str, Any]:
    """6 questions (3 categories x 2), R = 2 answers per question, Q = 3 per participant:
    12 answers needed from 4 batches; study 2: 6 x 1 pair, R = 3 ratings, 6 per participant."""
    data: dict[str, Any] = {
        "name": NAME, "participants": "prolific",
        "questions": {"categories": ["empathy", "ethics", "humour"], "per_category": 2},
        "study1": {"responses_per_question": 2, "questions_per_participant": 3, "too_fast_seconds": 20},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 6, "pairs": 1},
        "prolific": {"enabled": True, "fee_rate": 0.2, "study1": {"reward": 500}, "study2": {"reward": 300}},
    }
    data.update(overrides)
    return data


def simulated() -> dict[str, Any]:
    """The same study with the simulated crowd arriving through the fake Prolific."""
    data = study_data(participants="simulated", crowd={"arrive_via": "prolific"})
    data["prolific"] = {**data["prolific"], "enabled": False}
    return data


def _clock() -> Any:
    ticks = itertools.count(1_000_000)
    return lambda: float(next(ticks))


def drive(store: Store, config: StudyConfig) -> dict[str, int]:
    """Participants through study 1 of ``config`` (6 questions, R = 2, Q = 3); returns their ids.

    - fast: claims, submits all 3 one second apart (too fast), passes the checks; approved
      (twice: the sync's read-back repeats the event)
    - quitter: claims, submits 1, is released (2 slots go back)
    - holder: claims 3 and submits nothing (active)
    - cheat: claims, submits 3, fails the checks, their 3 answers are excluded; rejected
    - leaver: claims, submits 3, then withdraws (3 answers withdrawn)
    - waiting: claims, submits 3 (complete, not decided by the sync yet); one of their answers
      is reopened
    """
    info = store.collection(config.name, "study1", QUESTIONS, copies=2, per_participant=3, seed=0,
                            username_prefix=f"{config.name}-s1")
    ids: dict[str, int] = {}

    def claim(name: str) -> Any:
        result = store.claim(info, f"PID-{name}", "prolific")
        ids[name] = result.participant.id
        return result.participant

    def submit(participant: Any, items: list[str], gap: float) -> None:
        start = participant.claimed_at
        store.record_progress(info.id, participant.id, {item: start + gap * (n + 1) for n, item in enumerate(items)},
                              None)

    fast = claim("fast")
    submit(fast, fast.items, 1.0)
    store.record_checks(info.id, fast.id, {"check-i-a": True}, "passed")
    quitter = claim("quitter")
    submit(quitter, quitter.items[:1], 100.0)
    assert store.begin_release(info.id, quitter.id, "returned")
    assert len(store.finish_release(info.id, quitter.id)) == 2
    claim("holder")
    cheat = claim("cheat")
    submit(cheat, cheat.items, 100.0)
    store.record_checks(info.id, cheat.id, {"check-i-b": False}, "failed")
    assert len(store.exclude(info.id, cheat.id, cheat.items, "failed checks")) == 3
    leaver = claim("leaver")
    submit(leaver, leaver.items, 100.0)
    assert store.withdraw(info.id, leaver.id, "asked to withdraw") is not None
    waiting = claim("waiting")
    submit(waiting, waiting.items, 100.0)
    store.reopen(info.id, waiting.items[0], "lost answer", usernames=[waiting.username])
    store.log_event(info.id, "approved", fast.id)
    store.log_event(info.id, "approved", fast.id, read_back=True)
    store.log_event(info.id, "rejected", cheat.id, reason="failed the quality checks")
    store.save_platform_study(info.id, "prolific", "6578prolificstudyid0001", "active", places=4)
    assert store.participant(info.id, waiting.username).status == COMPLETE
    return ids


def check_driven(progress: Any) -> None:
    """The numbers :func:`drive` must give, counted by hand."""
    s1, s2 = progress.parts
    assert progress.started and s1.started and not s2.started
    # counted: fast 3 + quitter 1 + waiting 2 (one reopened) = 6; held: holder 3; 12 needed
    assert (s1.needed, s1.submitted, s1.held, s1.unclaimed) == (12, 6, 3, 3)
    assert s1.percent == 50.0 and not s1.complete
    assert (s1.excluded, s1.reopened, s1.withdrawn) == (3, 1, 3)
    assert s1.items == 6 and s1.copies == 2
    assert s1.participants == {"active": 1, "releasing": 0, "complete": 4, "released": 1}
    assert s1.withdrawn_participants == 1
    checks = s1.checks
    assert (checks.graded, checks.passed, checks.failed, checks.unanswered) == (2, 1, 1, 0)
    assert (checks.excluded_participants, checks.excluded_answers) == (1, 3)
    assert checks.too_fast == 1 and checks.too_fast_seconds == 20
    assert s1.platform is not None and (s1.platform.state, s1.platform.places) == ("active", 4)
    spend = s1.spend
    # approved: fast (once, though the event is there twice); rejected: cheat; awaiting: waiting
    # (leaver withdrew, holder and quitter are not complete)
    assert (spend.approved, spend.awaiting, spend.rejected) == (1, 1, 1)
    assert spend.paid == 6.0 and spend.at_most == 12.0  # 500 minor units x 1.2
    assert spend.planned_places == 4 and spend.planned == 24.0
    # study 2 has not started: the plan from study 1's questions in the store (6 pairs x 3)
    assert (s2.items, s2.needed, s2.submitted, s2.percent) == (6, 18, 0, 0.0)
    assert s2.spend.planned_places == 3 and s2.spend.planned == pytest.approx(10.8)


def items_done(store: Store, config: StudyConfig) -> int:
    info = store.find_collection(config.name, "study1")
    counts = store.item_counts(info.id)
    return sum(counts.submitted[i] >= 2 for i in QUESTIONS)


@pytest.fixture()
def settings(tmp_path: Path):
    return isolated_settings(tmp_path / "home")


@pytest.fixture()
def store(settings) -> Iterator[Store]:
    store = Store(default_url(settings.state_dir), clock=_clock())
    yield store
    store.close()


def test_a_driven_store_gives_the_counts_by_hand(settings, store: Store) -> None:
    config = parse_study(study_data())
    drive(store, config)
    progress = study_progress(config, settings)  # opens the settings' store itself, to read
    check_driven(progress)
    assert progress.parts[0].items_done == items_done(store, config)
    assert progress.prolific_note is None  # Prolific not asked


def test_json_has_the_derived_numbers_and_no_ids(settings, store: Store) -> None:
    config = parse_study(study_data())
    drive(store, config)
    data = study_progress(config, settings).to_json()
    text = json.dumps(data)
    assert data["parts"][0]["percent"] == 50.0 and data["parts"][0]["spend"]["paid"] == 6.0
    assert data["started"] is True and data["parts"][1]["complete"] is False
    for secret in ("PID-", "6578prolificstudyid0001", f"{NAME}-s1-0001", "key_hash"):
        assert secret not in text


def test_a_study_that_has_not_started_is_the_plan_and_creates_no_store(settings) -> None:
    config = parse_study(study_data())
    progress = study_progress(config, settings)
    assert not progress.started
    assert not (settings.state_dir / "store.sqlite").exists() and not settings.state_dir.exists()
    s1, s2 = progress.parts
    assert (s1.items, s1.needed, s1.submitted, s1.unclaimed) == (6, 12, 0, 12)
    assert (s2.items, s2.needed) == (6, 18)
    assert s1.spend.planned_places == 4 and s1.participants == {"active": 0, "releasing": 0, "complete": 0,
                                                               "released": 0}


def test_a_store_of_other_studies_is_not_this_studys_start(settings, store: Store) -> None:
    drive(store, parse_study(study_data(name="another-study")))
    progress = study_progress(parse_study(study_data()), settings)
    assert not progress.started and progress.parts[0].submitted == 0


def test_a_complete_collection_is_100_percent(settings, store: Store) -> None:
    config = parse_study(study_data())
    info = store.collection(config.name, "study1", QUESTIONS, copies=2, per_participant=3, seed=0,
                            username_prefix=f"{NAME}-s1")
    for n in range(4):
        p = store.claim(info, f"P{n}", "prolific").participant
        store.record_progress(info.id, p.id, {item: p.claimed_at + 60 * (k + 1) for k, item in enumerate(p.items)},
                              None)
    s1 = study_progress(config, settings).parts[0]
    assert (s1.submitted, s1.needed, s1.percent, s1.items_done, s1.complete) == (12, 12, 100.0, 6, True)
    assert s1.participants["complete"] == 4 and s1.checks.too_fast == 0 and s1.checks.per_batch == 0


def test_invite_studies_have_no_spend(settings, store: Store) -> None:
    config = parse_study(study_data(participants="invite", prolific={"enabled": False, "verify": False}))
    progress = study_progress(config, settings, ask_prolific=True)
    assert all(p.spend is None for p in progress.parts) and progress.prolific_note is None


def test_reading_takes_no_write_lock(settings, store: Store) -> None:
    """The portal holds the write lock (a claim in progress): progress still answers, from the
    last committed state, and the lock holder's commit is not held up."""
    config = parse_study(study_data())
    drive(store, config)
    writer = sqlite3.connect(settings.state_dir / "store.sqlite", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE participants SET status = 'complete' WHERE status = 'active'")
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.update(result=study_progress(config, settings)), daemon=True)
    try:
        thread.start()
        thread.join(timeout=30)  # waiting for the lock would take the store's 60 s busy timeout
        assert not thread.is_alive(), "progress waited for the write lock"
    finally:
        writer.execute("COMMIT")
        writer.close()
        thread.join()
    assert done["result"].parts[0].participants["active"] == 1  # the uncommitted change is not seen


def test_open_for_reading_creates_nothing(settings) -> None:
    assert open_for_reading(settings) is None and not settings.state_dir.exists()


# --- Prolific ------------------------------------------------------------------------------------------------------
@pytest.fixture()
def fake() -> Iterator[Any]:
    from crowdpref.simulation.prolific_server import FakeProlific

    with FakeProlific(page_size=2, retry_delay_s=0.05) as fake:
        yield fake


def _publish_on_fake(fake: Any, store: Store, config: StudyConfig) -> str:
    """Study 1 of ``config`` created and published on the fake Prolific with 4 places, recorded in
    the store; two participants arrive and one of them returns the study."""
    from crowdpref.prolific import ProlificClient
    from crowdpref.recruitment import study_payload

    info = store.collection(config.name, "study1", QUESTIONS, copies=2, per_participant=3, seed=0,
                            username_prefix=f"{config.name}-s1")
    settings = isolated_settings(Path("/nonexistent"), portal_url="https://portal.example.org")
    with ProlificClient(fake.base_url, fake.token) as client:
        study = client.create_study(study_payload(config, "study1", settings, store.completion_code(info.id), places=4))
        client.publish_study(study.id)
    store.save_platform_study(info.id, "prolific", study.id, "active", places=4)
    fake.arrive(study.id)
    fake.return_submission(fake.arrive(study.id)["session_id"])
    return study.id


def test_prolific_is_asked_for_places_and_submissions(tmp_path: Path, fake: Any) -> None:
    config = parse_study(simulated())
    settings = isolated_settings(tmp_path / "home", fake_prolific_port=fake.port)
    with _store(settings) as store:
        study_id = _publish_on_fake(fake, store, config)
    progress = study_progress(config, settings, ask_prolific=True)
    s1, s2 = progress.parts
    assert s1.live is not None and s1.live.error is None
    assert (s1.live.status, s1.live.places, s1.live.places_taken) == ("ACTIVE", 4, 1)
    assert s1.live.submissions == {"ACTIVE": 1, "RETURNED": 1}
    assert s2.live is None  # study 2 is not on Prolific
    assert s1.spend is not None and s1.spend.simulated
    assert study_id not in json.dumps(progress.to_json())


def test_prolific_out_of_reach_is_one_line_and_the_store_still_counts(tmp_path: Path, fake: Any) -> None:
    config = parse_study(simulated())
    settings = isolated_settings(tmp_path / "home", fake_prolific_port=fake.port)
    with _store(settings) as store:
        study_id = _publish_on_fake(fake, store, config)
    fake.stop()
    s1 = study_progress(config, settings, ask_prolific=True, prolific_timeout_s=2).parts[0]
    assert s1.live is not None and s1.live.error == "Prolific did not answer (Unavailable)"
    assert study_id not in s1.live.error and s1.platform.places == 4 and s1.needed == 12


def test_prolific_answering_an_error_says_so(tmp_path: Path, fake: Any) -> None:
    config = parse_study(simulated())
    settings = isolated_settings(tmp_path / "home", fake_prolific_port=fake.port)
    with _store(settings) as store:
        _publish_on_fake(fake, store, config)
    fake.add_faults(status=503, count=2)
    s1 = study_progress(config, settings, ask_prolific=True).parts[0]
    assert s1.live.error == "Prolific did not answer (Unavailable, HTTP 503)"  # one try: no retry


def test_without_a_token_prolific_is_not_asked(settings, store: Store) -> None:
    config = parse_study(study_data())
    drive(store, config)
    progress = study_progress(config, settings, ask_prolific=True)
    assert progress.prolific_note == "Prolific not asked: PROLIFIC_TOKEN is not set"
    assert all(p.live is None for p in progress.parts)


class _store:
    """A Store for ``settings`` as a context manager."""

    def __init__(self, settings: Any) -> None:
        self.store = Store(default_url(settings.state_dir))

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


# --- the CLI -------------------------------------------------------------------------------------------------------
@pytest.fixture()
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from crowdpref.cli import common

    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(common, "_SETTINGS", None)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study_data()))
    return tmp_path


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_cli_shows_the_table_and_the_json(cli_home: Path) -> None:
    config = parse_study(study_data())
    with _store(isolated_settings(cli_home / "home")) as store:
        ids = drive(store, config)
        usernames = [store.participants(store.find_collection(NAME, "study1").id)[0].username]
    table = _run("progress", "--study", "study.yaml")
    assert table.exit_code == 0, table.output
    for expected in ("submitted / needed", "6/12 (50%)", "0/18 (0%)", "participants active", "1 (< 20 s per item)",
                     "1 / 1 / 1", "6.00", "12.00", "24.00 (4 places)", "active, 4 places",
                     "3 / 1 / 3", "Prolific not asked: PROLIFIC_TOKEN is not set",
                     "money: in the Prolific workspace's currency, Prolific's fee (20.0%"):
        assert expected in table.output, expected
    assert "has not started" not in table.output
    for secret in (*usernames, "6578prolificstudyid0001", "PID-fast", *map(str, ids.values())):
        if not secret.isdigit():
            assert secret not in table.output
    raw = _run("progress", "--study", "study.yaml", "--json", "--no-prolific")
    assert raw.exit_code == 0, raw.output
    data = json.loads(raw.output)
    assert data["parts"][0]["submitted"] == 6 and data["parts"][0]["needed"] == 12
    assert data["prolific_note"] is None  # --no-prolific: not asked at all


def test_cli_on_a_study_that_has_not_started(cli_home: Path) -> None:
    result = _run("progress", "--study", "study.yaml")
    assert result.exit_code == 0, result.output
    assert "study 'progress-test' has not started" in result.output and "0/12 (0%)" in result.output
    assert not (cli_home / "home" / "store.sqlite").exists()


@pytest.mark.parametrize("content, expected", [
    (None, "missing.yaml: (file): study file not found"),
    ("name: [unclosed", "bad.yaml: line"),
    ("name: ok\nstudy1: {responses_per_question: 1}\n", "bad.yaml: study1.responses_per_question"),
])
def test_cli_bad_config_is_one_line_and_exit_2(cli_home: Path, content: str | None, expected: str) -> None:
    name = "missing.yaml" if content is None else "bad.yaml"
    if content is not None:
        (cli_home / name).write_text(content)
    result = _run("progress", "--study", name)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.output
    assert "Traceback" not in result.output


def test_cli_status_with_a_study_is_its_progress(cli_home: Path) -> None:
    with _store(isolated_settings(cli_home / "home")) as store:
        drive(store, parse_study(study_data()))
    status = _run("status", "--study", "study.yaml")
    progress = _run("progress", "--study", "study.yaml")
    assert status.exit_code == 0 and "6/12 (50%)" in status.output
    assert status.output == progress.output
    assert "crowdpref services" not in status.output


def test_study_2s_plan_follows_the_questions_study_1_has(settings, store: Store) -> None:
    """The config expects 6 questions; study 1 was opened with the 9 questions actually loaded:
    study 2's plan is 9 pairs (1 per question) x 3 ratings."""
    config = parse_study(study_data())
    store.collection(NAME, "study1", [f"q-{i}" for i in range(9)], copies=2, per_participant=3, seed=0,
                     username_prefix=f"{NAME}-s1")
    s1, s2 = study_progress(config, settings).parts
    assert (s1.items, s1.needed) == (9, 18) and (s2.items, s2.needed) == (9, 27)
    assert s2.spend.planned_places == 5  # ceil(27 / 6)


def test_a_store_of_an_older_crowdpref_is_upgraded_and_read(settings) -> None:
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy import create_engine, text

    import crowdpref.store

    settings.state_dir.mkdir(parents=True)
    url = default_url(settings.state_dir)
    config = Config()
    config.set_main_option("script_location", str(Path(crowdpref.store.__file__).parent / "migrations"))
    engine = create_engine(url)
    with engine.begin() as conn:  # what crowdpref at revision 0008 wrote: a study 1 of 6 questions
        config.attributes["connection"] = conn
        command.upgrade(config, "0008")
        conn.execute(text("INSERT INTO collections (study, key, copies, per_participant, seed, counterbalance, "
                          f"username_prefix, created_at) VALUES ('{NAME}', 'study1', 2, 3, 0, 0, 'p-s1', 0)"))
        for n, item in enumerate(QUESTIONS):
            conn.execute(text(f"INSERT INTO items (collection_id, item_id, ordinal) VALUES (1, '{item}', {n})"))
    s1 = study_progress(parse_study(study_data()), settings).parts[0]
    assert s1.started and (s1.items, s1.needed, s1.unclaimed) == (6, 12, 12)
    with engine.connect() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    engine.dispose()
    assert version == ScriptDirectory.from_config(config).get_current_head()


def test_cli_shows_prolific_now_and_a_line_when_it_is_out_of_reach(cli_home: Path, fake: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROWDPREF_FAKE_PROLIFIC_PORT", str(fake.port))
    (cli_home / "sim.yaml").write_text(yaml.safe_dump(simulated()))
    with _store(isolated_settings(cli_home / "home")) as store:
        study_id = _publish_on_fake(fake, store, parse_study(simulated()))
    live = _run("progress", "--study", "sim.yaml")
    assert live.exit_code == 0, live.output
    assert "Prolific now" in live.output and "active, 1/4 places taken; 1 active, 1 returned" in live.output
    assert "not real money" in live.output and study_id not in live.output
    fake.stop()
    down = _run("progress", "--study", "sim.yaml")
    assert down.exit_code == 0, down.output
    assert "not reachable" in down.output
    assert "study 1: Prolific did not answer (Unavailable); the store's numbers above still hold" in down.output
    assert "0/12 (0%)" in down.output and study_id not in down.output


def test_the_how_to_shows_what_the_command_prints(cli_home: Path) -> None:
    """docs/how-to/monitor.md's sample is the table for :func:`drive`'s store, and its timeout is
    the one the command uses."""
    from crowdpref.progress import PROLIFIC_TIMEOUT_S

    doc = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "monitor.md").read_text()
    sample = doc.split("```text\n", 1)[1].split("```", 1)[0]
    with _store(isolated_settings(cli_home / "home")) as store:
        drive(store, parse_study(study_data()))
    result = CliRunner().invoke(app, ["progress", "--study", "study.yaml"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    # which questions reach R first depends on the store's random key salt (claims break ties
    # with it): that one number may differ
    import re

    def lines(text: str) -> list[str]:
        return [re.sub(r"│ \d/6 questions", "│ N/6 questions", line.strip()) for line in text.splitlines()]

    assert lines(result.output) == lines(sample)
    assert f"with a {PROLIFIC_TIMEOUT_S:g}-second timeout and no retry" in doc.replace("\n", " ")


def test_the_public_profile_reads_the_stacks_postgresql_store(tmp_path: Path) -> None:
    """With a public URL the store is the stack's PostgreSQL (as every command opens it); its
    password file missing is one line naming the file and the fix."""
    from crowdpref.progress import store_url
    from crowdpref.store import StoreError

    settings = isolated_settings(tmp_path / "home", public_url="https://study.example.org", public_tls="internal")
    with pytest.raises(StoreError, match=r"postgres-crowdpref: the study store's PostgreSQL password cannot be "
                                         r"read .*run `crowdpref up`"):
        study_progress(parse_study(study_data()), settings)
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    (settings.secrets_dir / "postgres-crowdpref").write_text("pw-of-the-store\n")
    url = store_url(settings)
    assert url.startswith("postgresql+psycopg://crowdpref:") and f":{settings.postgres_port}/crowdpref" in url


def test_onboarding_is_counted_per_study(settings, store: Store) -> None:
    import yaml

    demo = yaml.safe_load((Path(__file__).resolve().parents[2] / "studies" / "demo.yaml").read_text())
    data = study_data()
    data["study1"] = {**data["study1"], "onboarding": {**demo["study1"]["onboarding"], "screen_out_reward": 80}}
    config = parse_study(data)
    drive(store, config)
    cid = store.find_collection(NAME, "study1").id
    for person in ("h-pass", "h-out", "h-busy"):
        store.onboarding_start(cid, person, "prolific")
    store.onboarding_attempt(cid, "h-pass", 4, True, 2)
    store.onboarding_attempt(cid, "h-out", 1, False, 2)
    store.onboarding_attempt(cid, "h-out", 2, False, 2)
    s1, s2 = study_progress(config, settings).parts
    assert s1.onboarding is not None and s2.onboarding is None  # study 2 has none
    o = s1.onboarding
    assert (o.started, o.passed, o.screened_out, o.in_progress, o.attempts) == (3, 1, 1, 1, 3)
    assert "1 screened out" in o.describe()
