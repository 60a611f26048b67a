"""Personal details found by Presidio's recognisers (crowdpref.release.recognisers) and the review
that decides each flagged answer before publication (crowdpref.release.review): every kind found,
ordinary numbers left alone, nothing asks the network, names and places found with a spaCy model
when there is one and the absence said loudly when there is none; a flagged row blocks the build
until decided, and keep / mask / drop each do what they say; the card counts, never quotes."""

from __future__ import annotations

import json
import re
import socket
import stat
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from crowdpref.config import load_study, parse_study
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.release import PRIVACY_FILE, PrivacyError, build_release
from crowdpref.release.recognisers import KINDS, NO_NER_WARNING, Recognisers, load_recognisers
from crowdpref.release.review import REVIEW_FILE, decide, read_review
from crowdpref.runfolder import write_parquet
from tests.unit.test_privacy import _plant_in_answer as _plant
from tests.unit.test_publish import PlantedRun, build, card_of, small_config, write_study_run

PHONE = "+44 20 7946 0958"
CARD = "4111 1111 1111 1111"  # passes the Luhn check
FOUND = {
    "phone": PHONE,
    "payment-card": CARD,
    "iban": "GB82 WEST 1234 5698 7654 32",
    "ip-address": "192.168.1.20",
    "url": "https://example.org/path?x=1",
}


@pytest.fixture(scope="module")
def recognisers() -> Recognisers:
    return load_recognisers()


@pytest.mark.parametrize(("kind", "value"), FOUND.items())
def test_each_kind_is_found_where_it_is(recognisers: Recognisers, kind: str, value: str) -> None:
    text = f"Honestly, here it is: {value} - use it well."
    findings = recognisers.find(text)
    assert [(f.kind, text[f.start:f.end]) for f in findings] == [(kind, value)]


@pytest.mark.parametrize("text", [
    "I was born in 1987 and paid 1500 pounds in 2024.",
    "We met 3 times; it cost 25.50 and took 45 minutes, a score of 7/10.",
    "It happened on 12/03/2021 at 10:30, room 101, chapter 3.2.",
    "4111 1111 1111 1112 fails the Luhn check, so it is no card.",
    "Kindness matters: listen first, then say what you noticed - and mean it!",
])
def test_ordinary_numbers_and_years_are_left_alone(recognisers: Recognisers, text: str) -> None:
    assert recognisers.find(text) == []


def test_nothing_asks_the_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Loading and scanning, e-mail addresses and URLs included, with every connection and name
    lookup refused and recorded: tldextract's suffix list (Presidio's e-mail recogniser) and
    spaCy's model download are never tried."""
    monkeypatch.setenv("TLDEXTRACT_CACHE", str(tmp_path / "tld-cache"))  # an empty cache: a miss would fetch
    tried: list[object] = []
    here = threading.get_ident()  # other tests' background threads (a Prefect client) may connect

    def refusing(original: Any) -> Any:
        def refuse(*args: object, **kwargs: object) -> Any:
            if threading.get_ident() != here:
                return original(*args, **kwargs)
            tried.append(args[1:] or kwargs)
            raise OSError("network blocked by the test")
        return refuse

    for owner, name in ((socket.socket, "connect"), (socket.socket, "connect_ex"),
                        (socket, "getaddrinfo"), (socket, "create_connection")):
        monkeypatch.setattr(owner, name, refusing(getattr(owner, name)))
    found = load_recognisers().find(f"mail jane.doe@example.org, see www.example.com, call {PHONE}")
    assert tried == []
    assert {f.kind for f in found} == {"url", "phone"}


@pytest.fixture()
def tiny_ner(tmp_path: Path) -> Path:
    """A spaCy pipeline that knows one name and one city (an EntityRuler), saved like any model."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "PERSON", "pattern": "Maria Lopez"},
                                              {"label": "GPE", "pattern": "Leeds"}])
    nlp.to_disk(tmp_path / "tiny-ner")
    return tmp_path / "tiny-ner"


def test_names_and_places_with_a_spacy_model(tiny_ner: Path) -> None:
    loaded = load_recognisers(str(tiny_ner))
    assert loaded.warning is None and loaded.ner_model == str(tiny_ner)
    text = f"Ask Maria Lopez in Leeds, on {PHONE}."
    assert [(f.kind, text[f.start:f.end]) for f in loaded.find(text)] == [
        ("person", "Maria Lopez"), ("place", "Leeds"), ("phone", PHONE)]


def test_without_a_model_names_and_places_are_not_looked_for_loudly(
        recognisers: Recognisers, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        loaded = load_recognisers()
    assert loaded.ner_model is None and loaded.warning == NO_NER_WARNING
    assert NO_NER_WARNING in caplog.text
    assert {k.name for k in loaded.kinds} == {k.name for k in KINDS if not k.needs_ner}
    assert loaded.find("Ask Maria Lopez in Leeds.") == []


def test_a_configured_model_that_is_not_there_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(CrowdprefError, match=r"publish.ner_model: 'en_core_web_xx' is neither") as info:
        load_recognisers("en_core_web_xx")
    assert "\n" not in str(info.value)
    import spacy

    spacy.blank("en").to_disk(tmp_path / "no-ner")
    with pytest.raises(CrowdprefError, match="labels no names or places"):
        load_recognisers(str(tmp_path / "no-ner"))


# --- in the release --------------------------------------------------------------------------------
@pytest.fixture()
def planted(tmp_path: Path) -> PlantedRun:
    return write_study_run(tmp_path / "runs" / "pub-test", small_config())


def _decide_in_file(planted: PlantedRun, decision: str) -> None:
    path = planted.run.private_dir / REVIEW_FILE
    data = json.loads(path.read_text())
    for row in data["rows"]:
        row["decision"] = decision
    path.write_text(json.dumps(data))


def _blob(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def _privacy_section(folder: Path) -> str:
    return card_of(folder)[1].split("## Privacy", 1)[1].split("\n## ", 1)[0]


ANSWER = f"Call my sister on {PHONE} and tell her I said sorry."


def test_an_undecided_flag_blocks_the_build(planted: PlantedRun, recognisers: Recognisers) -> None:
    good = build(planted, recognisers=recognisers)
    before = _blob(good)
    response_id = _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError) as info:
        build(planted, recognisers=recognisers)
    message = str(info.value)
    path = planted.run.private_dir / REVIEW_FILE
    assert "\n" not in message and str(path) in message and "1 of 1 flagged row(s)" in message
    assert "undecided" in message and "keep, mask or drop" in message and "privacy-review" in message
    assert PHONE not in message and "sister" not in message
    assert _blob(good) == before  # the previous release is untouched

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    rows = read_review(path)
    row = rows[f"answer:{response_id}"]
    assert row["decision"] is None and row["text"] == ANSWER
    assert row["findings"] == [{"kind": "phone", "start": 18, "end": 18 + len(PHONE), "value": PHONE}]


def test_masked_everywhere_it_is_published_and_counted_not_quoted(
        planted: PlantedRun, recognisers: Recognisers) -> None:
    _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError):
        build(planted, recognisers=recognisers)
    _decide_in_file(planted, "mask")
    folder = build(planted, recognisers=recognisers)
    assert PHONE.encode() not in _blob(folder)
    masked = "Call my sister on [phone removed] and tell her I said sorry."
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert answers[0] == masked
    prefs = pd.read_parquet(folder / "data/default/train-00000-of-00001.parquet")
    assert (pd.concat([prefs["chosen"], prefs["rejected"]]) == masked).sum() > 0
    assert not pd.concat([prefs["chosen"], prefs["rejected"]]).str.contains("sister on \\+", regex=True).any()

    privacy = _privacy_section(folder)
    assert "| What | Found | Kept as written | Masked | Dropped |" in privacy
    assert "| phone number | 1 | 0 | 1 | 0 |" in privacy
    assert "1 answer(s) or question(s) held one" in privacy and "sister" not in privacy
    report = json.loads(planted.run.file(PRIVACY_FILE).read_text())
    assert report["flagged"] == {"phone": {"mask": 1}} and report["flagged_rows"] == {"mask": 1}
    assert PHONE not in json.dumps(report) and "sister" not in json.dumps(report)


def test_kept_as_written(planted: PlantedRun, recognisers: Recognisers) -> None:
    _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError):
        build(planted, recognisers=recognisers)
    _decide_in_file(planted, "keep")
    folder = build(planted, recognisers=recognisers)
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert answers[0] == ANSWER
    assert "| phone number | 1 | 1 | 0 | 0 |" in _privacy_section(folder)


def test_dropped_with_the_pairs_and_ratings_that_hold_it(planted: PlantedRun,
                                                         recognisers: Recognisers) -> None:
    response_id = _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError):
        build(planted, recognisers=recognisers)
    changed, left = decide(planted.run.private_dir / REVIEW_FILE, "drop")
    assert (changed, left) == (1, 0)
    folder = build(planted, recognisers=recognisers)
    assert PHONE.encode() not in _blob(folder) and b"sister" not in _blob(folder)

    def data(name: str) -> pd.DataFrame:
        return pd.read_parquet(folder / f"data/{name}/train-00000-of-00001.parquet")

    assert response_id not in set(data("responses")["response_id"])
    prefs = data("default")
    assert not prefs[["chosen_response_id", "rejected_response_id"]].isin([response_id]).any().any()
    ratings = data("ratings")
    assert not ratings[["response_a_id", "response_b_id"]].isin([response_id]).any().any()
    assert len(ratings) > 0 and len(prefs) > 0  # only what held it went
    privacy = _privacy_section(folder)
    assert "| phone number | 1 | 0 | 0 | 1 |" in privacy and "Dropped: 1 answer(s)" in privacy


def test_a_decision_lasts_while_the_text_is_unchanged(planted: PlantedRun,
                                                      recognisers: Recognisers) -> None:
    _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError):
        build(planted, recognisers=recognisers)
    _decide_in_file(planted, "mask")
    build(planted, recognisers=recognisers)
    build(planted, recognisers=recognisers)  # decided: builds again
    responses = pd.read_parquet(planted.run.responses)
    _plant(planted, 0, ANSWER.replace("sister", "brother"))
    with pytest.raises(PrivacyError, match="1 of 1 flagged row"):
        build(planted, recognisers=recognisers)
    assert len(responses) == len(pd.read_parquet(planted.run.responses))


def test_a_bad_decision_in_the_file_is_a_one_line_error(planted: PlantedRun,
                                                        recognisers: Recognisers) -> None:
    response_id = _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError):
        build(planted, recognisers=recognisers)
    with pytest.raises(CrowdprefError, match="no row 'answer:nope'"):
        decide(planted.run.private_dir / REVIEW_FILE, "mask", ["answer:nope"])
    _decide_in_file(planted, "delete")
    with pytest.raises(CrowdprefError, match=rf"row answer:{response_id}: \"decision\" is 'delete'") as info:
        build(planted, recognisers=recognisers)
    assert "\n" not in str(info.value)


def test_the_card_says_loudly_that_names_were_not_looked_for(planted: PlantedRun,
                                                             recognisers: Recognisers) -> None:
    folder = build(planted, recognisers=recognisers)
    privacy = _privacy_section(folder)
    assert f"> **WARNING:** {NO_NER_WARNING}" in privacy
    assert "phone number, payment card number, IBAN" in privacy and "None was found." in privacy
    report = json.loads(planted.run.file(PRIVACY_FILE).read_text())
    assert report["warnings"] == [NO_NER_WARNING] and report["ner_model"] is None


def test_names_found_by_the_configured_model_are_reviewed(tmp_path: Path, tiny_ner: Path) -> None:
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config(ner_model=str(tiny_ner)))
    _plant(planted, 0, "I would ask Maria Lopez first.")
    with pytest.raises(PrivacyError, match="found: person 1"):
        build(planted)  # the build loads publish.ner_model itself
    _decide_in_file(planted, "mask")
    folder = build(planted)
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert answers[0] == "I would ask [name removed] first."
    privacy = _privacy_section(folder)
    assert "WARNING" not in privacy and f"spaCy model `{tiny_ner}`" in privacy


def _simulated(**publish: object) -> dict:
    return {"name": "pub-sim", "participants": "simulated",
            "questions": {"categories": ["empathy", "humour"], "per_category": 1},
            "study1": {"responses_per_question": 3, "questions_per_participant": 2},
            "study2": {"ratings_per_pair": 3, "pairs_per_participant": 3, "scale_points": 8},
            "publish": publish}


def test_only_a_simulated_study_may_leave_the_review_to_its_config(tmp_path: Path,
                                                                   recognisers: Recognisers) -> None:
    with pytest.raises(ConfigError, match="publish.privacy_undecided") as info:
        small_config(privacy_undecided="mask")
    assert "\n" not in str(info.value)
    config = parse_study(_simulated(privacy_undecided="mask"))
    planted = write_study_run(tmp_path / "runs" / "pub-sim", config)
    _plant(planted, 0, ANSWER)
    folder = build(planted, recognisers=recognisers)
    assert PHONE.encode() not in _blob(folder)
    assert read_review(planted.run.private_dir / REVIEW_FILE).popitem()[1]["decided_by"] == "config"
    privacy = _privacy_section(folder)
    assert "1 of them by the study config's `publish.privacy_undecided: mask`" in privacy
    with pytest.raises(PrivacyError):  # without the field a simulated study is reviewed too
        planted2 = write_study_run(tmp_path / "runs2" / "pub-sim2", parse_study(_simulated()))
        _plant(planted2, 0, ANSWER)
        build(planted2, recognisers=recognisers)


def test_an_email_address_is_masked_without_review(planted: PlantedRun,
                                                   recognisers: Recognisers) -> None:
    """Presidio's URL recogniser sees 'example.org' inside an e-mail address; the address is
    crowdpref's own pattern's, always masked, so nothing waits for a decision."""
    _plant(planted, 0, "Write to jane.doe@example.org any time.")
    folder = build(planted, recognisers=recognisers)
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert answers[0] == "Write to [email removed] any time."
    assert not (planted.run.private_dir / REVIEW_FILE).exists()


def test_the_cli_lists_without_the_text_and_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    recognisers: Recognisers) -> None:
    from typer.testing import CliRunner

    from crowdpref.cli import app
    from crowdpref.settings import load_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    study = tmp_path / "pub-test.yaml"
    study.write_text("name: pub-test\nquestions: {categories: [empathy, humour], per_category: 1}\n"
                     "study1: {responses_per_question: 3, questions_per_participant: 2}\n"
                     "study2: {ratings_per_pair: 3, pairs_per_participant: 3, scale_points: 8}\n")
    planted = write_study_run(load_settings().runs_dir / "pub-test", small_config())
    response_id = _plant(planted, 0, ANSWER)
    with pytest.raises(PrivacyError, match=re.escape("`crowdpref privacy-review STUDY --decide keep|mask|drop`")):
        build(planted, recognisers=recognisers)  # a config from a file names it
    with pytest.raises(PrivacyError, match=f"`crowdpref privacy-review {study} --decide"):
        build_release(planted.run, load_study(study), recognisers=recognisers)

    def run(*args: str) -> object:
        return CliRunner().invoke(app, ["privacy-review", str(study), *args], env={"COLUMNS": "250"})

    listed = run()
    assert listed.exit_code == 0, listed.output
    assert f"answer:{response_id}" in listed.output and "phone 1" in listed.output
    assert "UNDECIDED" in listed.output and PHONE not in listed.output and "sister" not in listed.output
    wrong = run("--decide", "erase")
    assert wrong.exit_code != 0 and "use keep, mask or drop" in wrong.output
    decided = run("--decide", "mask", "--row", f"answer:{response_id}")
    assert decided.exit_code == 0 and "1 row(s) set to mask; 0 undecided" in decided.output
    folder = build(planted, recognisers=recognisers)
    assert PHONE.encode() not in _blob(folder)


def test_the_demo_publishes_without_a_person(recognisers: Recognisers) -> None:
    """The simulated crowd's templated answers and the question bank flag nothing (without an NER
    model), and the demo's config masks anything an NER model or an LLM-written answer would
    flag, as studies/demo.yaml says."""
    import itertools
    from importlib import resources

    from crowdpref.simulation import crowd

    answers = [" ".join(p for p in (a, action.rstrip(".") + " " + reason if reason else action, view) if p)
               for a, action, reason, view in itertools.product(
                   [None, *crowd.ACKNOWLEDGE], crowd.ACTION, [None, *crowd.REASON], [None, *crowd.PERSPECTIVE])]
    answers += [*crowd.LOW_EFFORT, *crowd.RUDE]
    bank = resources.files("crowdpref") / "data/question_bank.jsonl"
    questions = [json.loads(line)["question"] for line in bank.read_text().splitlines() if line.strip()]
    assert len(answers) > 900 and len(questions) > 200
    assert [t for t in answers + questions if recognisers.find(t)] == []
    assert load_study(Path(__file__).parents[2] / "studies/demo.yaml").publish.privacy_undecided == "mask"


def test_a_dropped_question_takes_its_answers_pairs_ratings_and_screening(
        planted: PlantedRun, recognisers: Recognisers) -> None:
    run = planted.run
    questions = pd.read_parquet(run.questions)
    question_id, old = str(questions.loc[0, "question_id"]), questions.loc[0, "question"]
    questions.loc[0, "question"] = "Should I trust what www.example.com says about my neighbour?"
    write_parquet(questions, run.questions)
    prefs = pd.read_parquet(run.preferences)
    prefs.loc[prefs["prompt"] == old, "prompt"] = questions.loc[0, "question"]
    write_parquet(prefs, run.preferences)
    answers = set(pd.read_parquet(run.responses).query("question_id == @question_id")["response_id"])
    assert answers

    with pytest.raises(PrivacyError, match="found: url 1"):
        build(planted, recognisers=recognisers)
    assert decide(run.private_dir / REVIEW_FILE, "drop", [f"question:{question_id}"]) == (1, 0)
    folder = build(planted, recognisers=recognisers)

    def data(name: str) -> pd.DataFrame:
        return pd.read_parquet(folder / f"data/{name}/train-00000-of-00001.parquet")

    for name in ("questions", "responses", "default", "ratings"):
        assert question_id not in set(data(name)["question_id"]), name
        assert len(data(name)) > 0, name  # the other question stays
    assert not set(data("screening")["response_id"]) & answers
    assert b"www.example.com" not in _blob(folder)
    assert "Dropped: 1 question(s)" in _privacy_section(folder)
