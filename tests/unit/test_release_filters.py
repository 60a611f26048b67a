"""Raw and filtered releases: the aggregate-ratings tasks apply the preregistered filters to a
planted run (tests/unit/test_publish.py's ``write_study_run``: the first writer failed their
checks, the first rater was too fast, the last rater returned the study), and the release keeps
every rating in ``ratings_raw``, builds the default configuration from the kept ratings only,
publishes the participants anonymously, and its card states each rule's numbers exactly as the
filter report (and the raw files) give them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from prefect.logging import disable_run_logger

from crowdpref.config import FiltersConfig, StudyConfig
from crowdpref.errors import CrowdprefError
from crowdpref.filters import FILTERED_BY, RULES, preregister
from crowdpref.release import build_release, release_subsets
from crowdpref.store import Store
from tasks.aggregation import read_inputs, run_aggregation, write_outputs
from tests.unit.test_publish import PlantedRun, card_of, load, small_config, write_study_run

T0 = 1_767_607_200.0  # 2026-01-05 10:00:00 UTC


def with_filters(config: StudyConfig, **rules: object) -> StudyConfig:
    return config.model_copy(update={"filters": FiltersConfig(**rules)})


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("CROWDPREF_HOME", str(home))
    return home


def store_of(state: Path) -> Store:
    state.mkdir(parents=True, exist_ok=True)
    return Store(f"sqlite:///{state / 'store.sqlite'}", clock=lambda: T0)


def aggregate_run(planted: PlantedRun, config: StudyConfig | None = None) -> None:
    """What the aggregate-ratings flow does: read, filter + aggregate, write."""
    with disable_run_logger():
        inputs = read_inputs.fn(planted.run)
        result = run_aggregation.fn(config or planted.config, inputs)
        write_outputs.fn(result, planted.run)


def build(planted: PlantedRun) -> Path:
    run = planted.run
    return build_release(run, planted.config,
                         aggregation=json.loads(run.file("aggregation.json").read_text()),
                         collection=planted.collection, forbidden=planted.forbidden)


def published(folder: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(folder / f"data/{name}/train-00000-of-00001.parquet")


@pytest.fixture()
def planted(tmp_path: Path, state: Path) -> PlantedRun:
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config())
    aggregate_run(planted)  # default rules: failed_checks and too_fast
    return planted


def test_raw_configuration_has_every_rating_and_the_default_only_kept_ones(
        planted: PlantedRun, tmp_path: Path) -> None:
    run = planted.run
    folder = build(planted)
    collected = pd.read_parquet(run.ratings)
    raw = published(folder, "ratings_raw")
    assert len(raw) == len(collected) == 18
    assert sorted(raw["rating_id"]) == sorted(collected["rating_id"])
    report = json.loads(run.file("filters.json").read_text())
    removed = raw.loc[raw[FILTERED_BY] != "", "rating_id"]
    assert 0 < len(removed) < len(raw) and len(removed) == report["total"]["ratings"]

    kept = published(folder, "ratings")
    assert sorted(kept["rating_id"]) == sorted(raw.loc[raw[FILTERED_BY] == "", "rating_id"])
    assert FILTERED_BY not in kept.columns
    # the default configuration: built from the kept ratings only
    prefs = published(folder, "default")
    per_pair = kept.groupby("pair_id").size()
    assert len(prefs) > 0 and set(prefs["pair_id"]) <= set(per_pair.index)
    assert all(per_pair[p] == n for p, n in zip(prefs["pair_id"], prefs["n_ratings"]))
    removed_answers = set(published(folder, "responses_raw").query(f"{FILTERED_BY} != ''")["response_id"])
    assert removed_answers and removed_answers.isdisjoint(
        {*prefs["chosen_response_id"], *prefs["rejected_response_id"]})
    assert removed_answers.isdisjoint(published(folder, "responses")["response_id"])
    assert len(published(folder, "responses_raw")) == len(pd.read_parquet(run.responses)) == 6
    # what datasets reads back, with the documented columns
    subsets = {s.name: s for s in release_subsets(planted.config, filtered=True)}
    for name in ("ratings_raw", "responses_raw", "participants"):
        ds = load(folder, name, tmp_path)
        assert ds.column_names == [c.name for c in subsets[name].columns]
    assert load(folder, "ratings_raw", tmp_path).num_rows == 18
    # rater reliability was fitted over every rating: the removed (too fast) rater is in it
    assert len(pd.read_parquet(run.file("raters.parquet"))) == collected["rater_key"].nunique() == 6


def card_table(body: str) -> dict[str, tuple[int, int, int, int, int]]:
    """The card's filter table: rule -> (participants, study 1, study 2, answers, ratings)."""
    section = body.split("## Filters (preregistered)", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for match in re.finditer(r"^\| (`(\w+)`|\*\*Any rule\*\*[^|]*) \|[^|]*\|[^|]*\| (\d+) \((\d+) / "
                             r"(\d+)\) \| (\d+) \| (\d+) \|$", section, re.M):
        rows[match.group(2) or "total"] = tuple(int(match.group(i)) for i in range(3, 8))
    return rows


def test_card_numbers_match_the_filter_report(planted: PlantedRun) -> None:
    folder = build(planted)
    _, body = card_of(folder)
    report = json.loads(planted.run.file("filters.json").read_text())
    table = card_table(body)
    assert set(table) == {*RULES, "total"}
    for row in [*report["per_rule"], {**report["total"], "rule": "total"}]:
        assert table[row["rule"]] == (row["participants"], row["participants_study1"],
                                      row["participants_study2"], row["answers"], row["ratings"])
    assert table["failed_checks"][:4] == (1, 1, 0, 2)  # the first writer, both answers
    assert table["too_fast"][:4] == (1, 0, 1, 0)  # the first rater
    assert table["incomplete"] == (0, 0, 0, 0, 0)  # off
    raw = published(folder, "ratings_raw")
    assert table["total"][4] == int((raw[FILTERED_BY] != "").sum())
    assert table["too_fast"][4] == int(raw[FILTERED_BY].str.contains("too_fast").sum())
    assert (f"Ratings: 18 collected, {18 - table['total'][4]} kept" in body
            and "Answers: 6 collected, 4 kept." in body)
    assert "| `too_fast` | participants flagged too fast" in body and "| on |" in body
    assert "**These rules were not recorded before collection began**" in body
    header, _ = card_of(folder)
    assert {c["config_name"] for c in header["configs"]} == {
        "default", "responses", "ratings", "responses_raw", "ratings_raw", "participants",
        "raters", "questions", "screening"}
    for subset in release_subsets(planted.config, ["toxicity", "insult"], filtered=True):
        for column in subset.columns:
            assert f"| `{column.name}` | {column.dtype} |" in body, (subset.name, column.name)


def test_preregistered_rules_are_stated_and_changed_rules_refused(tmp_path: Path,
                                                                  state: Path) -> None:
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config())
    store = store_of(state)
    preregister(store, planted.config.name, planted.config.filters)
    store.close()
    aggregate_run(planted)
    _, body = card_of(build(planted))
    assert ("The rules were recorded in the study's store on 2026-01-05 10:00:00 UTC, when "
            "collection began") in body
    assert "not recorded before collection began" not in body
    changed = with_filters(planted.config, incomplete=True)
    with pytest.raises(CrowdprefError, match=r"^study pub-test: filters changed after collection "
                                             r"began \(recorded 2026-01-05 10:00:00 UTC: "
                                             r"incomplete=false; now incomplete=true\)"):
        aggregate_run(planted, changed)


def test_a_report_that_does_not_match_the_raw_files_is_refused(planted: PlantedRun) -> None:
    path = planted.run.file("filters.json")
    report = json.loads(path.read_text())
    report["per_rule"][1]["ratings"] += 1
    path.write_text(json.dumps(report))
    with pytest.raises(CrowdprefError, match=r"filters\.json: too_fast\.ratings is \d+ but "
                                             r"responses_raw\.parquet/ratings_raw\.parquet show") as info:
        build(planted)
    assert "\n" not in str(info.value)


def test_participants_are_published_anonymously(planted: PlantedRun) -> None:
    folder = build(planted)
    people = published(folder, "participants")
    assert len(people) == 9 and set(people["study"]) == {"study1", "study2"}
    writers = set(published(folder, "responses_raw")["participant_id"])
    raters = set(published(folder, "ratings_raw")["rater_id"])
    assert set(people.loc[people["study"] == "study1", "participant_id"]) == writers
    assert set(people.loc[people["study"] == "study2", "participant_id"]) == raters
    assert not set(people["participant_id"]) & set(planted.participant_keys)
    assert people.loc[people["checks_verdict"] == "failed", "participant_id"].tolist() == [
        published(folder, "responses_raw").query("filtered_by == 'failed_checks'")["participant_id"].iloc[0]]


def test_rules_off_keep_everything_and_say_so(tmp_path: Path, state: Path) -> None:
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config(), participants=False)
    off = with_filters(planted.config, failed_checks=False, too_fast=False)
    aggregate_run(planted, off)
    planted.config = off
    folder = build(planted)
    assert len(published(folder, "ratings")) == len(published(folder, "ratings_raw")) == 18
    assert len(published(folder, "default")) == 6
    assert not (folder / "data" / "participants").exists()  # no participants.parquet
    _, body = card_of(folder)
    assert card_table(body)["total"] == (0, 0, 0, 0, 0)
    assert "The participants file was not available" in body


def test_a_run_without_filters_publishes_everything_as_before(tmp_path: Path, state: Path) -> None:
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config())
    folder = build(planted)  # aggregated before the filters existed: no filters.json
    assert not (folder / "data" / "ratings_raw").exists()
    assert len(published(folder, "ratings")) == 18
    _, body = card_of(folder)
    assert "No preregistered filters were applied to this release" in body


def test_missing_participants_file_with_rules_on_stops_the_aggregation(tmp_path: Path,
                                                                        state: Path) -> None:
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config(), participants=False)
    with pytest.raises(CrowdprefError, match=r"^participants\.parquet not found, but "
                                             r"filters\.failed_checks, filters\.too_fast need it"):
        aggregate_run(planted)


def test_work_excluded_during_collection_is_in_the_raw_configurations_only(tmp_path: Path, state: Path) -> None:
    """Ratings and answers whose authors failed the checks under ``on_fail: exclude`` never
    count (the exports keep them apart); the raw configurations still hold them, marked."""
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config())
    run = planted.run
    ratings = pd.read_parquet(run.ratings)
    excluded_ratings = ratings.head(2).assign(rating_id=["excl-1", "excl-2"], rater_key="p_excluded00")
    excluded_responses = pd.read_parquet(run.responses).head(1).assign(response_id="r_excluded", text="x")
    excluded_ratings.to_parquet(run.file("ratings_excluded.parquet"))
    excluded_responses.to_parquet(run.file("responses_excluded.parquet"))
    aggregate_run(planted)
    report = json.loads(run.file("filters.json").read_text())
    assert (report["excluded_answers"], report["excluded_ratings"]) == (1, 2)
    assert report["ratings_before"] == len(ratings)  # the rules' numbers are unchanged
    folder = build(planted)
    raw = published(folder, "ratings_raw")
    assert len(raw) == len(ratings) + 2
    assert sorted(raw.loc[raw[FILTERED_BY] == "excluded", "rating_id"]) == ["excl-1", "excl-2"]
    assert "excl-1" not in set(published(folder, "ratings")["rating_id"])
    assert published(folder, "responses_raw")[FILTERED_BY].eq("excluded").sum() == 1
    _, body = card_of(folder)
    assert "1 answers and 2 ratings were taken out of the count during collection" in body
    # a report that does not match the raw files is refused
    report["excluded_ratings"] = 3
    run.file("filters.json").write_text(json.dumps(report))
    with pytest.raises(CrowdprefError, match="excluded_ratings is 3 but"):
        build(planted)
