"""Personal details found by their form (crowdpref.release.privacy) and what the release does with them:
masked in participant text and reported (card, privacy.json) without the value; a stop, naming
column and pattern, when one is in a column crowdpref writes itself; published timestamps
coarsened (``publish.timestamp_precision``, default the day)."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path

import pandas as pd
import pytest

from crowdpref.config import parse_study
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.release.privacy import PATTERNS, find, first_hit, mask, mask_all
from crowdpref.release import PRIVACY_FILE, PrivacyError, build_release, release_subsets
from crowdpref.runfolder import write_parquet
from tests.unit.test_publish import PlantedRun, build, card_of, small_config, write_study_run

RNG = random.Random(12)
URLSAFE = string.ascii_letters + string.digits + "-_"


def _urlsafe(n: int) -> str:
    return "".join(RNG.choice(URLSAFE) for _ in range(n - 3)) + "aZ7"


# one value per form the scan must catch (fixed: no test depends on what a random draw holds)
CAUGHT = {
    "prolific-id": ["5f1d2a3b4c5d6e7f8a9b0c1d", "60A1B2C3D4E5F60718293A4B"],
    "email": ["jane.doe@example.org", "j.smith+study@mail.uni-example.ac.uk"],
    "hf-token": ["hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
                 "api_org_AbCdEfGhIjKlMnOpQrStUvWxYz0123"],
    "openai-key": ["sk-" + "Ab3" * 16, "sk-proj-" + _urlsafe(64), "sk-svcacct-" + _urlsafe(40)],
    "argilla-key": [_urlsafe(107),  # argilla-server's secrets.token_urlsafe(80)
                    "argilla.apikey", "owner.apikey", "crowdpref.apikey." + _urlsafe(32)],
    "bearer-token": ["Bearer " + _urlsafe(40), "Token kNz81xQpWm3Lr7Yt5Vb2Hc9Jd4Fg6Sa0"],
    "jwt": ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU"],
}


@pytest.mark.parametrize(("pattern", "value"),
                         [(p, v) for p, values in CAUGHT.items() for v in values],
                         ids=[f"{p}-{i}" for p, values in CAUGHT.items() for i in range(len(values))])
def test_each_form_is_caught_and_masked(pattern: str, value: str) -> None:
    text = f"Honestly, here it is ({value}), use it well."
    assert [h.pattern for h in find(text)] == [pattern]
    masked, counts = mask(text)
    placeholder = next(p.placeholder for p in PATTERNS if p.name == pattern)
    assert value not in masked and masked == f"Honestly, here it is ({placeholder}), use it well."
    assert counts == {pattern: 1}


def test_every_pattern_has_a_case() -> None:
    assert set(CAUGHT) == {p.name for p in PATTERNS}


@pytest.mark.parametrize("text", [
    "I painted the fence #ff00aa and the door #123ABC, 42 times, in 2024 at 3:45pm.",
    "Call it 1234567890 or 12345678901234567890123 (23 digits) - numbers are fine.",
    "A commit like 3f786850e387550fdab836ed7e6dc881de23001b, a hash like "
    "d41d8cd98f00b204e9800998ecf8427e, is not a Prolific id.",
    "As a token of thanks, ask a task-force; skills: sk-learn, sk-8. Bearer of bad news.",
    "Reply @john or write to the office; the site is https://example.org/path?x=1.",
    "Ids r_0123456789abcdef, pr_0123456789abcdef and q_fedcba9876543210 are ours.",
    "Kindness matters: listen first, then say what you noticed - and mean it!",
])
def test_ordinary_answers_are_left_alone(text: str) -> None:
    assert find(text) == [] and mask(text) == (text, {})


def test_column_helpers() -> None:
    values = ["fine", None, "mail me: a.b@example.com", 3, "mail me: a.b@example.com",
              "id 5f1d2a3b4c5d6e7f8a9b0c1d and x@y.io"]
    masked, counts = mask_all(values)
    assert masked == ["fine", None, "mail me: [email removed]", 3, "mail me: [email removed]",
                      "id [prolific-id removed] and [email removed]"]
    assert counts == {"email": 3, "prolific-id": 1}
    assert first_hit(values) == (2, "email")
    assert first_hit(["a", "b", None]) is None
    assert mask_all(["a", None]) == (["a", None], {})


# --- in the release --------------------------------------------------------------------------------
EMAIL = "writer.one@example.org"
PID = "5f1d2a3b4c5d6e7f8a9b0c1d"
HF = "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432"


def _plant_in_answer(planted: PlantedRun, row: int, text: str) -> str:
    """Replace answer ``row`` by ``text`` in responses.parquet and the preference rows that
    quote it, as the pipeline would have written them; returns its response_id."""
    run = planted.run
    responses = pd.read_parquet(run.responses)
    old, response_id = responses.loc[row, "text"], responses.loc[row, "response_id"]
    responses.loc[row, "text"] = text
    write_parquet(responses, run.responses)
    prefs = pd.read_parquet(run.preferences)
    for column in ("chosen", "rejected"):
        prefs.loc[prefs[column] == old, column] = text
    write_parquet(prefs, run.preferences)
    return str(response_id)


@pytest.fixture()
def planted(tmp_path: Path) -> PlantedRun:
    return write_study_run(tmp_path / "runs" / "pub-test", small_config())


def test_personal_details_in_answers_are_masked_and_reported_without_the_value(
        planted: PlantedRun) -> None:
    _plant_in_answer(planted, 0, f"Write to me at {EMAIL}, my Prolific id is {PID}.")
    _plant_in_answer(planted, 1, f"My token {HF} - and again {EMAIL}.")
    folder = build(planted)

    blob = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
    for value in (EMAIL, PID, HF):
        assert value.encode() not in blob
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert answers[0] == "Write to me at [email removed], my Prolific id is [prolific-id removed]."
    assert answers[1] == "My token [hf-token removed] - and again [email removed]."
    prefs = pd.read_parquet(folder / "data/default/train-00000-of-00001.parquet")
    quoted = pd.concat([prefs["chosen"], prefs["rejected"]])
    assert quoted.str.contains(r"\[email removed\]").sum() > 0  # the same answers, masked alike

    _, body = card_of(folder)
    privacy = body.split("## Privacy", 1)[1].split("\n## ", 1)[0]
    assert "| e-mail address | `[email removed]` | " in privacy
    email_row = next(line for line in privacy.splitlines() if line.startswith("| e-mail address"))
    assert "responses.text (2)" in email_row
    assert "| Prolific-style participant id (24 hex digits) | `[prolific-id removed]` | " in privacy
    assert "| Hugging Face token | `[hf-token removed]` | " in privacy
    assert "were found and replaced by a placeholder" in privacy

    report = json.loads(planted.run.file(PRIVACY_FILE).read_text())
    assert report["masked"]["email"]["responses.text"] == 2
    assert report["masked"]["prolific-id"]["responses.text"] == 1
    assert report["timestamp_precision"] == "day"
    for value in (EMAIL, PID, HF):
        assert value not in json.dumps(report)


def test_a_clean_release_says_none_was_found(planted: PlantedRun) -> None:
    _, body = card_of(build(planted))
    privacy = body.split("## Privacy", 1)[1].split("\n## ", 1)[0]
    assert "None was found." in privacy and "[email removed]" not in privacy
    assert json.loads(planted.run.file(PRIVACY_FILE).read_text())["total"] == 0


def test_a_known_secret_in_an_answer_still_refuses_the_build(planted: PlantedRun) -> None:
    """Our own OpenAI key typed into an answer has the form the masking would hide: a key of
    ours in the data is a leak to stop, not to paper over."""
    key = planted.api_keys[2]
    assert key.startswith("sk-")
    _plant_in_answer(planted, 2, f"use my key {key} if you like")
    with pytest.raises(CrowdprefError, match="refusing to publish") as info:
        build(planted)
    message = str(info.value)
    assert key not in message and "\n" not in message and "forbidden string" in message
    assert re.search(r"data/(default|responses)/train-00000-of-00001.parquet: column "
                     r"'(text|chosen|rejected)' row \d+", message)


@pytest.mark.parametrize(("source", "column", "value", "pattern"), [
    ("questions.parquet", "metadata", json.dumps({"author": "q.writer@example.org"}), "email"),
    ("questions.parquet", "source", "file:5f1d2a3b4c5d6e7f8a9b0c1d", "prolific-id"),
    ("ratings.parquet", "rating_id", "rt_" + "0" * 5 + " hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "hf-token"),
])
def test_a_hit_in_crowdprefs_own_columns_stops_the_build(planted: PlantedRun, source: str,
                                                         column: str, value: str,
                                                         pattern: str) -> None:
    good = build(planted)
    before = {p: p.read_bytes() for p in good.rglob("*") if p.is_file()}
    path = planted.run.file(source)
    frame = pd.read_parquet(path)
    frame.loc[1, column] = value
    write_parquet(frame, path)
    with pytest.raises(PrivacyError) as info:
        build(planted)
    message = str(info.value)
    assert "\n" not in message and f"column '{column}' row 1" in message
    assert f"({pattern})" in message and value not in message
    secret = value.split()[-1] if pattern == "hf-token" else value
    assert secret not in message
    assert {p: p.read_bytes() for p in good.rglob("*") if p.is_file()} == before  # untouched


def test_every_text_column_is_either_participant_text_or_checked(planted: PlantedRun) -> None:
    """The columns masked are exactly the texts people (or the question sources) wrote."""
    free = {(s.name, c.name) for s in release_subsets(planted.config, filtered=True)
            for c in s.columns if c.free_text}
    assert free == {("default", "prompt"), ("default", "chosen"), ("default", "rejected"),
                    ("responses", "text"), ("responses_raw", "text"), ("questions", "question")}


# --- timestamps ------------------------------------------------------------------------------------
def test_timestamps_are_published_to_the_day_by_default(planted: PlantedRun) -> None:
    folder = build(planted)
    source = pd.read_parquet(planted.run.responses)["submitted_at"]
    assert (source != source.dt.floor("D")).any()  # the run folder keeps minutes
    for name in ("responses", "ratings"):
        published = pd.read_parquet(folder / f"data/{name}/train-00000-of-00001.parquet")["submitted_at"]
        assert len(published) and (published == published.dt.floor("D")).all()
        assert str(published.dt.tz) == "UTC"
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["submitted_at"]
    assert list(answers) == list(source.dt.floor("D"))
    _, body = card_of(folder)
    assert "Timestamps (`submitted_at`) are published to the day" in body
    assert "| `submitted_at` | timestamp[us, tz=UTC] | UTC date (the time is always 00:00" in body


@pytest.mark.parametrize("precision", ["hour", "minute", "second", "microsecond"])
def test_timestamp_precision_is_configurable(tmp_path: Path, precision: str) -> None:
    planted = write_study_run(tmp_path / "runs" / "pub-test",
                              small_config(timestamp_precision=precision))
    ratings = pd.read_parquet(planted.run.ratings)
    ratings["submitted_at"] = ratings["submitted_at"] + pd.Timedelta(seconds=7, microseconds=123)
    write_parquet(ratings, planted.run.ratings)
    folder = build(planted)
    published = pd.read_parquet(folder / "data/ratings/train-00000-of-00001.parquet")["submitted_at"]
    unit = {"hour": "h", "minute": "min", "second": "s", "microsecond": "us"}[precision]
    assert list(published) == list(ratings["submitted_at"].dt.floor(unit))
    _, body = card_of(folder)
    expected = ("as recorded, to the microsecond" if precision == "microsecond"
                else f"published to the {precision}: truncated in UTC")
    assert expected in body


def test_a_bad_timestamp_precision_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        small_config(timestamp_precision="week")
    message = str(info.value)
    assert "\n" not in message and "publish.timestamp_precision" in message
    assert "'week'" in message and "day" in message
    assert parse_study({
        "name": "x", "title": "t", "questions": {"categories": ["empathy", "humour"]},
    }).publish.timestamp_precision == "day"


def test_build_release_without_forbidden_list_still_masks(planted: PlantedRun) -> None:
    _plant_in_answer(planted, 0, f"mail {EMAIL}")
    folder = build_release(planted.run, planted.config)
    texts = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert texts[0] == "mail [email removed]"


# --- the card's own text --------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["description", "citation"])
@pytest.mark.parametrize("value,kind", [(HF, "Hugging Face token"), ("5f1e2d3c4b5a69788796a5b4", "Prolific-style")])
def test_a_credential_or_prolific_id_in_the_cards_own_text_stops_the_build(
        tmp_path: Path, field: str, value: str, kind: str) -> None:
    data = {"name": "pub-test", "title": "Publish test study",
            "questions": {"categories": ["empathy", "humour"], "per_category": 1},
            "study1": {"responses_per_question": 3, "questions_per_participant": 2},
            "study2": {"ratings_per_pair": 3, "pairs_per_participant": 3, "scale_points": 8},
            "publish": {"license": "mit", "citation": "@misc{pubtest, title={Publish test}}"}}
    clean = write_study_run(tmp_path / "runs" / "pub-test", parse_study(data, source="studies/pub-test.yaml"))
    good = build(clean)
    before = {p: p.read_bytes() for p in good.rglob("*") if p.is_file()}
    if field == "description":
        data["description"] = f"Contact us; our upload key was {value} by mistake."
    else:
        data["publish"]["citation"] = f"@misc{{pubtest, note={{{value}}}}}"
    planted = PlantedRun(clean.run, parse_study(data, source="studies/pub-test.yaml"), api_keys=clean.api_keys)
    with pytest.raises(PrivacyError) as info:
        build(planted)
    message = str(info.value)
    assert "\n" not in message and value not in message
    assert "README.md line" in message and kind in message and "studies/pub-test.yaml" in message
    assert {p: p.read_bytes() for p in good.rglob("*") if p.is_file()} == before  # untouched


def test_the_teams_contact_address_may_stay_in_the_card(tmp_path: Path) -> None:
    data = {"name": "pub-test", "title": "Publish test study", "description": "Questions: team@example.org",
            "questions": {"categories": ["empathy", "humour"], "per_category": 1},
            "study1": {"responses_per_question": 3, "questions_per_participant": 2},
            "study2": {"ratings_per_pair": 3, "pairs_per_participant": 3, "scale_points": 8}}
    folder = build(write_study_run(tmp_path / "runs" / "pub-test", parse_study(data)))
    assert "team@example.org" in (folder / "README.md").read_text()
