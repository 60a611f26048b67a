"""A stuck item goes back to the pool and is collected again, on the real embedded Argilla.

Two questions, R = 2, Q = 2: two participants answer both through the annotator API (the path
the web UI and the simulated crowd take). One answer is whitespace-only; another is counted and
then discarded in Argilla. The store says complete, so before this change the export refused on
every run. Now the operator's ``crowdpref reopen ITEM --study`` (the real CLI) finds and reopens
the whitespace-only answer from Argilla, the collection run's export reopens the discarded one
by itself and the run ends "waiting" with one line saying so, newcomers' claims take exactly
those slots, and the next run exports every question with its R answers."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crowdpref.account_passwords import AccountPasswords
from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner
from crowdpref.config import load_study
from crowdpref.runfolder import write_parquet
from crowdpref.store import REOPENED, Claimed, Full, Store
from crowdpref.study1 import study1_collection
from tests.answer_edits import change_as_author
from tests.conftest import REPO
from tests.integration.test_study1_collection import _questions

pytestmark = pytest.mark.integration


def _write_study(folder: Path, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "seed": 3,
        "participants": "simulated",
        "study1": {"responses_per_question": 2, "questions_per_participant": 2, "inactive_after_minutes": 600,
                   "pool_size": 1},
        "study2": {"pairs_per_participant": 1},
        "crowd": {"dropout_rate": 0, "low_effort_rate": 0, "offensive_rate": 0, "never_start_rate": 0},
    }))
    return path


def _answer(api_url: str, claimed: Claimed, dataset_name: str, text_for: dict[str, str], password: str,
            status: str = "submitted") -> None:
    session = AnnotatorSession(api_url, claimed.participant.username, password)
    try:
        dataset = next(d for d in session.datasets() if d["name"] == dataset_name)
        records = {r["external_id"]: r["id"] for r in session.pending_records(dataset["id"])}
        session.submit([(records[item], {"response": text, "quality": 4}) for item, text in text_for.items()],
                       status=status)
    finally:
        session.close()


def _discard(api_url: str, owner_api_key: str, claimed: Claimed, owner: ArgillaOwner, dataset_name: str,
             item: str) -> None:
    """The participant turns their submitted answer into a discarded one. They finished, so their
    account left its workspace; Argilla still lets an answer's author change it
    (tests/answer_edits.py) - from outside, the public profile's Caddy would refuse it."""
    record_id = owner.record_ids(owner.find_dataset(dataset_name, claimed.participant.username))[item]
    change_as_author(api_url, owner_api_key, record_id, claimed.participant.username,
                     owner.passwords(claimed.participant.username), {"response": "changed my mind", "quality": 4})


class _FlowRunLog(logging.Handler):
    """The messages of the flow runs' log, as the Prefect UI shows them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += record.getMessage() + "\n"


def test_whitespace_and_discarded_answers_go_back_to_the_pool_and_are_collected_again(
        argilla_server, study_env, tmp_path, unique):
    from flows.collect_responses import collect_responses

    name = f"r{unique}"
    home = study_env  # CROWDPREF_HOME of this test (the flow and the CLI use it), Argilla: the session's
    study = _write_study(tmp_path, name)
    config = load_study(study)
    run = home / "studies" / name
    questions = _questions().head(2)
    write_parquet(questions, run / "questions.parquet")
    q0, q1 = questions["question_id"]
    api = argilla_server.api_url
    owner = ArgillaOwner(api, argilla_server.owner_api_key,  # the state folder's key, as the flow's
                         passwords=AccountPasswords.from_secrets(home / "secrets"))
    store = Store(f"sqlite:///{home / 'store.sqlite'}")  # where the CLI finds it (CROWDPREF_HOME)
    collection = study1_collection(config, questions, owner, run, store)

    a = collection.claim("person-a", "simulated")
    b = collection.claim("person-b", "simulated")
    assert isinstance(a, Claimed) and isinstance(b, Claimed)
    assert isinstance(collection.claim("person-c", "simulated"), Full)
    _answer(api, a, collection.dataset_name, {q0: "I would talk to them kindly.", q1: "   \n  "},
            owner.passwords(a.participant.username))
    _answer(api, b, collection.dataset_name, {q0: "Ask how they feel first.", q1: "Be honest but gentle."},
            owner.passwords(b.participant.username))
    assert collection.monitor().complete  # the store counted all four answers
    _discard(api, argilla_server.owner_api_key, b, owner, collection.dataset_name, q0)  # ... and then b's q0 is discarded in Argilla

    # the operator reopens the whitespace-only answer with the real CLI: it reads Argilla to find
    # which counted answer to q1 cannot be used (a's, not b's)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CROWDPREF_", "ARGILLA_", "PREFECT_"))}
    env.update(CROWDPREF_HOME=str(home), CROWDPREF_ARGILLA_URL=api,
               CROWDPREF_ARGILLA_API_KEY=argilla_server.owner_api_key, COLUMNS="300")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "crowdpref"), "reopen", q1, "--study", str(study)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    assert a.participant.username in done.stdout and b.participant.username not in done.stdout
    assert store.participant(collection.info.id, a.participant.username).reopened == [q1]
    again = subprocess.run([str(REPO / ".venv" / "bin" / "crowdpref"), "reopen", q1, "--study", str(study)],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "every counted answer to" in again.stderr  # b's answer is fine
    assert len(again.stderr.strip().splitlines()) == 1 and "Traceback" not in again.stderr

    # a newcomer's claim takes exactly the reopened slot (never a or b, who held q1); they answer
    c = collection.claim("person-c", "simulated")
    assert isinstance(c, Claimed) and c.participant.items == [q1]
    _answer(api, c, collection.dataset_name, {q1: "Say it plainly, with care."},
            owner.passwords(c.participant.username))
    assert collection.monitor().complete  # the store counts 4 again - b's discarded q0 among them

    # the collection run's export finds b's discarded q0 by itself: it reopens it, and the run
    # ends "waiting" (not failed) with one line naming it; nothing is half-written
    said = _FlowRunLog()  # Prefect's loggers do not propagate to the root logger: listen on them
    flow_runs = logging.getLogger("prefect.flow_runs")
    flow_runs.addHandler(said)
    try:
        assert collect_responses(str(study)) == "waiting"
    finally:
        flow_runs.removeHandler(said)
    assert f"1 counted answer could not be used and went back to the pool ({q0}: its answer is no longer " \
           "submitted in Argilla (discarded or deleted))" in said.text  # the flow run's log says it
    assert not (run / "responses.parquet").exists()
    reopened = [(e["item_id"], e["detail"]) for e in store.events(collection.info.id) if e["kind"] == "reopened"]
    assert [item for item, _ in reopened] == [q1, q0]
    assert "reopened by the operator" in reopened[0][1] and "discarded" in reopened[1][1]
    assert [x.status for x in store.participant(collection.info.id, b.participant.username).assignments
            if x.item_id == q0] == [REOPENED]
    assert collection.progress().unclaimed == 1  # the slot is back in the pool

    # the next newcomer takes it and answers; the next collection run exports every question
    # with its R usable answers
    d = collection.claim("person-d", "simulated")
    assert isinstance(d, Claimed) and d.participant.items == [q0]
    _answer(api, d, collection.dataset_name, {q0: "Listen before giving advice."},
            owner.passwords(d.participant.username))
    assert collect_responses(str(study)) == "complete"
    report = json.loads((run / "study1" / "validation.json").read_text())
    assert report["valid"], report["anomalies"]
    assert report["items_with_exactly_r_answers"] == 2 and report["workspaces_matching_allocation"] == 4
    responses = pd.read_parquet(run / "responses.parquet")
    assert responses.groupby("question_id").size().to_dict() == {q0: 2, q1: 2}
    assert responses["text"].str.strip().ne("").all()
    assert "changed my mind" not in set(responses["text"])
    store.close()
