"""The dataset release (crowdpref.release): Hub layout that ``datasets.load_dataset`` reads back,
a card documenting every column and telling the truth about where the data came from
(``source``) and how the A/B order was balanced, anonymous stable ids, the secrets scan, and the
push through the REAL ``huggingface_hub.HfApi`` to a local fake Hub.

``write_study_run`` builds a small, consistent run folder (questions, responses, ratings shown
in counterbalanced orders, preferences computed from the ratings with the contract's formula,
screening, stats, ledgers and private files holding planted usernames/passwords); the flow test
reuses it."""

from __future__ import annotations

import itertools
import json
import secrets
import stat
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import datasets
import pandas as pd
import pytest

from crowdpref import contracts
from crowdpref.participants import NO_ONBOARDING
from crowdpref.aggregation.reliability import RATER_COLUMNS
from crowdpref.aggregation import aggregate, order_balance
from crowdpref.config import StudyConfig, parse_study
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.ids import stable_id
from crowdpref.release.ids import ID_ALPHABET
from crowdpref.release import (
    ID_LENGTH,
    PUBLISHED_IDS_FILE,
    PushError,
    build_release,
    collection_stats,
    display_order_text,
    forbidden_strings,
    provenance_text,
    push_release,
    release_subsets,
    release_summary,
    scan_for_secrets,
    validate_repo_id,
)
from crowdpref.store import Store
from crowdpref.runfolder import RunFolder, write_json, write_parquet
from tests.fakes.hub_server import GITATTRIBUTES, FakeHubServer

UTC = "UTC"


@dataclass
class PlantedRun:
    run: RunFolder
    config: StudyConfig
    usernames: list[str] = field(default_factory=list)
    passwords: list[str] = field(default_factory=list)
    participant_keys: list[str] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    accounts: list[tuple[str, str]] = field(default_factory=list)  # (username, password), as in the store
    collection: dict | None = None  # collection_stats from the study store

    @property
    def forbidden(self) -> list[str]:
        return forbidden_strings(self.run, self.api_keys, self.accounts)

    @property
    def everything_secret(self) -> list[str]:
        return [*self.usernames, *self.passwords, *self.participant_keys, *self.api_keys]


def small_config(name: str = "pub-test", **publish: object) -> StudyConfig:
    return parse_study({
        "name": name,
        "title": "Publish test study",
        "questions": {"categories": ["empathy", "humour"], "per_category": 1},
        "study1": {"responses_per_question": 3, "questions_per_participant": 2},
        "study2": {"ratings_per_pair": 3, "pairs_per_participant": 3, "scale_points": 8},
        "publish": {"license": "mit", "citation": "@misc{pubtest, title={Publish test}}", **publish},
    })


def write_study_run(run_path: Path, config: StudyConfig, *, screening: bool = True,
                    stats: bool = True, source: str | Sequence[str] = "simulated",
                    order: Literal["counterbalanced", "pair"] = "counterbalanced",
                    participants: bool = True) -> PlantedRun:
    """2 questions (one per category), 3 writers x 2 answers, 3 pairs per question, 3 ratings
    per pair by 6 raters; one answer flagged; ratings chosen so no pair ties. ``source``: every
    participant's source (a sequence is cycled over writers, then over raters). ``order``: each
    pair's raters see balanced A/B orders (2 and 1, as study 2 does it) or all the pair's default
    order (the old way). ``participants``: write participants.parquet (the study exports do):
    the first writer failed their checks, the first rater was too fast, the last rater returned
    the study."""
    run = RunFolder(run_path)
    planted = PlantedRun(run, config, api_keys=[
        "hf_" + secrets.token_hex(16), "argilla.apikey." + secrets.token_hex(12),
        "sk-" + secrets.token_hex(20), "prolific-" + secrets.token_hex(16)])
    cats = [c.slug for c in config.questions.categories][:2]
    texts = ["How could you comfort a friend who failed an exam they studied hard for?",
             "When is it kind to laugh at your own mistake in front of colleagues?"]
    questions = pd.DataFrame({
        "question_id": [stable_id("q_", t) for t in texts], "question": texts,
        "category": cats, "source": ["bank", "llm:fake-model"],
        "metadata": ["{}", json.dumps({"note": "widened"})]})
    write_parquet(questions[contracts.QUESTIONS], run.questions)

    s1 = config.study1.username_prefix
    s2 = config.study2.username_prefix
    writers = [f"{s1}-{i:04d}" for i in range(1, 4)]
    raters = [f"{s2}-{i:04d}" for i in range(1, 7)]
    salt = secrets.token_hex(16)
    keys = {u: stable_id("p_", salt, u, length=12) for u in writers + raters}
    cycle = [source] if isinstance(source, str) else list(source)
    origin = {u: cycle[i % len(cycle)] for group in (writers, raters) for i, u in enumerate(group)}
    planted.usernames = writers + raters
    planted.participant_keys = list(keys.values())
    planted.accounts = [(u, secrets.token_urlsafe(20)) for u in writers + raters]
    planted.passwords = [password for _, password in planted.accounts]
    write_json({"salt": salt}, run.private_dir / "participant-key-salt.json", private=True)
    prolific_ids = [secrets.token_hex(12) for _ in writers]
    write_json({u: pid for u, pid in zip(writers, prolific_ids)},
               run.private_dir / "prolific-participants.json", private=True)
    planted.usernames += prolific_ids  # Prolific ids: never published either

    t0 = pd.Timestamp("2026-01-05 10:00", tz=UTC)
    rows = []
    for qi, q in questions.iterrows():
        for wi, user in enumerate(writers):
            text = f"Answer {wi + 1} to question {qi + 1}: listen first, then say what you noticed."
            if qi == 1 and wi == 2:
                text = "Honestly, only an idiot would laugh at themselves; grow up."
            rows.append({"response_id": stable_id("r_", q.question_id, user),
                         "question_id": q.question_id, "category": q.category,
                         "participant_key": keys[user], "source": origin[user], "text": text,
                         "quality": 3 + wi % 3,
                         "submitted_at": t0 + pd.Timedelta(minutes=10 * qi + wi)})
    responses = pd.DataFrame(rows)[contracts.RESPONSES]
    write_parquet(responses, run.responses)

    k = config.study2.scale_points
    mid = (k + 1) / 2
    pairs, ratings, prefs = [], [], []
    rater_cycle = itertools.cycle(raters)
    score_sets = [(1, 2, 6), (7, 8, 8), (2, 3, 1), (8, 5, 6), (1, 1, 2), (4, 6, 2)]
    by_q = responses.sort_values("response_id").groupby("question_id", sort=True)
    pair_no = 0
    flagged_ids = {responses.loc[(responses["text"].str.contains("idiot")), "response_id"].iloc[0]}
    for question_id, group in by_q:
        for first, second in itertools.combinations(group["response_id"].tolist(), 2):
            pair_id = stable_id("pr_", first, second)
            swapped = pair_no % 2 == 1
            a, b = (second, first) if swapped else (first, second)
            pairs.append({"pair_id": pair_id, "question_id": question_id,
                          "category": group["category"].iloc[0], "first_response_id": first,
                          "second_response_id": second, "response_a_id": a, "response_b_id": b,
                          "swapped": swapped})
            given = score_sets[pair_no % len(score_sets)]
            fixed = []
            for j, r in enumerate(given):
                rater = next(rater_cycle)
                shown = swapped != (order == "counterbalanced" and j % 2 == 1)
                ratings.append({"rating_id": stable_id("rt_", pair_id, rater), "pair_id": pair_id,
                                "question_id": question_id,
                                "response_a_id": second if shown else first,
                                "response_b_id": first if shown else second, "swapped": shown,
                                "rater_key": keys[rater], "source": origin[rater], "rating": r,
                                "submitted_at": t0 + pd.Timedelta(hours=1, minutes=pair_no * 3 + j)})
                fixed.append(k + 1 - r if shown else r)
            mean = sum(fixed) / len(fixed)
            assert mean != mid
            chosen, rejected = (first, second) if mean < mid else (second, first)
            chosen_mean = mean if mean < mid else k + 1 - mean
            side = [x < mid for x in fixed]
            text = responses.set_index("response_id")["text"]
            prefs.append({
                "pair_id": pair_id, "question_id": question_id,
                "category": group["category"].iloc[0],
                "prompt": questions.set_index("question_id").loc[question_id, "question"],
                "chosen": text[chosen], "rejected": text[rejected],
                "chosen_response_id": chosen, "rejected_response_id": rejected,
                "mean_rating": chosen_mean, "margin": abs(mean - mid) / (mid - 1),
                "n_ratings": len(fixed),
                "agreement": max(sum(side), len(side) - sum(side)) / len(side),
                "rating_spread": float(pd.Series(fixed).std(ddof=0)),
                "chosen_flagged": chosen in flagged_ids, "rejected_flagged": rejected in flagged_ids,
                "p_chosen": 1.0 if all(side) or not any(side) else 0.75,
                "mean_rating_low": max(1.0, chosen_mean - 0.5),
                "mean_rating_high": min(float(k), chosen_mean + 0.5)})
            pair_no += 1
    write_parquet(pd.DataFrame(pairs)[contracts.PAIRS], run.pairs)
    write_parquet(pd.DataFrame(ratings)[contracts.RATINGS], run.ratings)
    if participants:
        people = []
        for study, users in (("study1", writers), ("study2", raters)):
            for i, user in enumerate(users):
                failed = study == "study1" and i == 0
                fast = study == "study2" and i == 0
                people.append({
                    "participant_key": keys[user], "study": study, "source": origin[user],
                    "status": "released" if study == "study2" and i == len(users) - 1 else "complete",
                    "items_assigned": 2 if study == "study1" else 3,
                    "items_submitted": 2 if study == "study1" else 3, "checks_answered": 1,
                    "checks_passed": 0 if failed else 1,
                    "checks_verdict": "failed" if failed else "passed",
                    "median_seconds_per_item": 2.0 if fast else 45.0, "too_fast": fast, **NO_ONBOARDING})
        write_parquet(pd.DataFrame(people)[contracts.PARTICIPANTS], run.file("participants.parquet"))
        write_parquet(pd.DataFrame({  # what aggregation writes: the rater reliability model's fit
            "rater_key": [keys[u] for u in raters], "n_ratings": [3] * len(raters),
            "reliability": [0.05, 0.7, 0.8, 0.75, 0.6, 0.9], "noise_sd": [2.3, 1.0, 0.9, 1.0, 1.2, 0.8],
            "slope": [0.1, 1.0, 1.1, 1.0, 0.9, 1.1], "bias": [0.0, 0.2, -0.1, 0.0, 0.3, 0.1]}),
            run.file("raters.parquet"))
    write_parquet(pd.DataFrame(prefs)[contracts.PREFERENCES], run.preferences)

    if screening:
        scr = pd.DataFrame({
            "response_id": responses["response_id"], "model": "original",
            "flagged": responses["response_id"].isin(flagged_ids),
            "flagged_labels": ["toxicity,insult" if r in flagged_ids else ""
                               for r in responses["response_id"]],
            "toxicity": [0.91 if r in flagged_ids else 0.01 for r in responses["response_id"]],
            "insult": [0.77 if r in flagged_ids else 0.02 for r in responses["response_id"]]})
        write_parquet(scr, run.screening)
        write_json({"enabled": True, "model": "detoxify:original", "description": "BERT, Jigsaw",
                    "device": "cpu", "labels": ["toxicity", "insult"],
                    "thresholds": {"toxicity": 0.5, "insult": 0.5}, "policy": "flag",
                    "n_responses": len(scr), "n_flagged": 1,
                    "flagged_per_label": {"toxicity": 1, "insult": 1}, "fallback_used": False,
                    "warnings": [], "limitations": "Trained on talk-page comments; misses sarcasm."},
                   run.file("screening.json"))  # as crowdpref.screening writes it
    if stats:
        rated = pd.DataFrame(ratings)
        balance = order_balance(pd.factorize(rated["pair_id"])[0], rated["swapped"].to_numpy(),
                                len(pairs))
        write_json({"scale_points": 8, "pairs": len(pairs), "rated_pairs": len(pairs),
                    "unrated_pairs": 0, "excluded_pairs": 0, "incomplete_pairs": 0,
                    "incomplete_dropped": 0, "ties": 0, "kept": len(prefs), "alpha": 0.4321,
                    "mean_agreement": 0.83, "mean_spread": 1.1,
                    "position_bias": {"raw_shift": -0.12, "raw_share_a": 0.55},
                    "order_balance": asdict(balance),
                    "answer_sources": responses["source"].value_counts().to_dict(),
                    "rating_sources": rated["source"].value_counts().to_dict(),
                    "per_category": [{"category": c, "pairs": 3, "kept": 3, "mean_agreement": 0.8}
                                     for c in cats]},
                   run.file("aggregation.json"))  # keys as crowdpref.aggregation writes them
        # the collection as the study store records it: each study's first participant drops
        # out, the released slots are claimed by a later participant
        store = Store(f"sqlite:///{run.path.parent / 'store.sqlite'}")
        for study, users, items in (("study1", writers, questions["question_id"].tolist()),
                                    ("study2", raters, [p["pair_id"] for p in pairs])):
            info = store.collection(config.name, study, items, copies=3, per_participant=2, seed=0,
                                    username_prefix=f"{config.name}-{study}")
            claims = [store.claim(info, user, "simulated") for user in users]
            first = claims[0].participant
            store.record_progress(info.id, first.id, {first.items[0]: 1.0}, None)
            store.begin_release(info.id, first.id, "no activity")
            store.finish_release(info.id, first.id)
            store.claim(info, f"{users[0]}-x", "simulated")
        planted.collection = collection_stats(store, config.name)
        store.close()
    return planted


@pytest.fixture()
def planted(tmp_path: Path) -> PlantedRun:
    return write_study_run(tmp_path / "runs" / "pub-test", small_config())


def build(planted: PlantedRun, **kwargs: object) -> Path:
    run = planted.run
    return build_release(
        run, planted.config,
        aggregation=json.loads(run.file("aggregation.json").read_text()),
        screening=json.loads(run.file("screening.json").read_text()),
        collection=planted.collection, forbidden=planted.forbidden, **kwargs)


def load(folder: Path, name: str | None, tmp_path: Path) -> datasets.Dataset:
    return datasets.load_dataset(str(folder), name, split="train",
                                 cache_dir=str(tmp_path / "hf-cache"))


# --- layout and loading ------------------------------------------------------------------------
def test_release_loads_back_with_datasets(planted: PlantedRun, tmp_path: Path) -> None:
    folder = build(planted)
    assert folder == planted.run.path / "release"
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == ["README.md", *(f"data/{n}/train-00000-of-00001.parquet"
                                    for n in ("default", "participants", "questions", "raters", "ratings",
                                              "responses", "screening"))]
    prefs = load(folder, None, tmp_path)
    assert prefs.column_names[:4] == ["prompt", "chosen", "rejected", "margin"]
    source = pd.read_parquet(planted.run.preferences)
    assert len(prefs) == len(source) == 6
    assert sorted(prefs["chosen"]) == sorted(source["chosen"])
    assert all(0 < m <= 1 for m in prefs["margin"])
    subsets = {s.name: s for s in release_subsets(planted.config, ["toxicity", "insult"])}
    for name in ("responses", "ratings", "participants", "raters", "questions", "screening"):
        ds = load(folder, name, tmp_path)
        assert ds.column_names == [c.name for c in subsets[name].columns]
        assert len(ds) == len(pd.read_parquet(planted.run.file(subsets[name].source_file)))
        assert {c: f.dtype for c, f in ds.features.items()} == {
            c.name: c.dtype for c in subsets[name].columns}
    # a rater's reliability row and their ratings carry the same anonymous id
    assert set(load(folder, "raters", tmp_path)["rater_id"]) == set(load(folder, "ratings", tmp_path)["rater_id"])
    default_file = "data/default/train-00000-of-00001.parquet"
    assert release_summary(folder)[0] == {"config": "default", "file": default_file, "rows": 6,
                                         "bytes": (folder / default_file).stat().st_size}


def test_card_yaml_and_every_column_documented(planted: PlantedRun) -> None:
    import yaml

    card = (build(planted) / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["license"] == "mit" and header["language"] == ["en"]
    assert {"human-feedback", "rlhf"} <= set(header["tags"])
    assert header["pretty_name"] == "Publish test study" and header["task_categories"]
    configs = {c["config_name"]: c for c in header["configs"]}
    assert configs["default"]["default"] is True
    assert set(configs) == {"default", "responses", "ratings", "participants", "raters", "questions",
                            "screening"}
    for info in header["dataset_info"]:
        split = info["splits"][0]
        assert split["name"] == "train" and split["num_bytes"] > 0 and split["num_examples"] > 0
    body = card.split("---\n", 2)[2]
    for subset in release_subsets(planted.config, ["toxicity", "insult"]):
        assert f"### `{subset.name}`" in body
        for column in subset.columns:
            assert f"| `{column.name}` | {column.dtype} |" in body, (subset.name, column.name)
    # this run's numbers, the stats, loading, licence, citation, warning
    for text in ("| Questions | 2 |", "| Written answers | 6 |", "| Ratings | 18 |",
                 "| Rated pairs | 6 |", "planned / observed) | 3 / 3 |",
                 "| Study 1 drop-outs (their unanswered work returned to the pool) | 1 |",
                 "| Study 1 released slots / claimed again by later participants | 1 / 1 |",
                 "| 0.432 |", "| 0.83 |", "left out) | 0 |", "(negative favours A) | -0.12 |",
                 "| empathy | 3 | 3 | 0.8 |", "| Answers flagged | 1 |",
                 "| Classifier | detoxify:original |", "misses sarcasm",
                 'load_dataset("path/to/release"', "RewardTrainer", "Content warning",
                 "`mit`", "@misc{pubtest"):
        assert text in body, text


def test_missing_stats_are_stated_not_invented(tmp_path: Path) -> None:
    planted = write_study_run(tmp_path / "run", small_config(content_warning=False),
                              screening=False, stats=False)
    folder = build_release(planted.run, planted.config, forbidden=planted.forbidden,
                           repo_id="me/social-rlhf")
    body = (folder / "README.md").read_text()
    assert "Krippendorff's alpha (ordinal, over all ratings) | not available |" in body
    assert "Study 2 drop-outs (their unanswered work returned to the pool) | not available |" in body
    assert "Screening results are not available" in body
    assert "Content warning" not in body
    assert 'load_dataset("me/social-rlhf"' in body
    assert not (folder / "data" / "screening").exists()


def test_fallback_screening_limitation_is_stated(planted: PlantedRun) -> None:
    scr = pd.read_parquet(planted.run.screening).assign(model="profanity-check")
    write_parquet(scr, planted.run.screening)
    body = (build_release(planted.run, planted.config) / "README.md").read_text()
    assert "misses hateful or demeaning text" in body


def test_missing_preferences_is_a_one_line_error(planted: PlantedRun) -> None:
    planted.run.preferences.unlink()
    with pytest.raises(CrowdprefError, match="aggregate-ratings") as info:
        build_release(planted.run, planted.config)
    assert "\n" not in str(info.value)


def test_subsets_cover_the_contracts(planted: PlantedRun) -> None:
    subsets = {s.name: s for s in release_subsets(planted.config)}
    for name, contract in (("default", contracts.PREFERENCES), ("responses", contracts.RESPONSES),
                           ("ratings", contracts.RATINGS), ("questions", contracts.QUESTIONS),
                           ("screening", contracts.SCREENING_BASE),
                           ("participants", contracts.PARTICIPANTS),
                           ("raters", RATER_COLUMNS)):
        sources = {c.source_name for c in subsets[name].columns}
        assert sources <= set(contract), (name, sources - set(contract))
    assert {"participant_key", "rater_key"}.isdisjoint(
        c.name for s in subsets.values() for c in s.columns)


# --- provenance: where the answers and ratings came from ----------------------------------------
def card_of(folder: Path) -> tuple[dict, str]:
    import yaml

    card = (folder / "README.md").read_text()
    return yaml.safe_load(card.split("---\n")[1]), card.split("---\n", 2)[2]


def test_source_is_published_with_its_column_documented(planted: PlantedRun) -> None:
    folder = build(planted)
    for name, source_file in (("responses", planted.run.responses), ("ratings", planted.run.ratings)):
        published = pd.read_parquet(folder / f"data/{name}/train-00000-of-00001.parquet")
        assert published["source"].tolist() == pd.read_parquet(source_file)["source"].tolist()
    _, body = card_of(folder)
    for who in ("writer", "rater"):
        row = f"| `source` | string | `simulated`, `prolific` or `invite` | Where the {who} came from: "
        assert row in body, who
    subsets = {s.name: [c.name for c in s.columns] for s in release_subsets(planted.config)}
    assert subsets["responses"].index("source") == subsets["responses"].index("participant_id") + 1
    assert subsets["ratings"].index("source") == subsets["ratings"].index("rater_id") + 1


def test_card_says_plainly_that_simulated_data_is_simulated(planted: PlantedRun) -> None:
    header, body = card_of(build(planted))
    assert ("All answers and ratings come from `simulated` participants: this data is SIMULATED."
            in body)
    assert "not written or given by people" in body
    assert body.count("## Where the data comes from") == 1
    assert "SIMULATED preference data on social reasoning: no person wrote or rated" in body
    assert "Human preference data" not in body and "MIXES" not in body
    assert "different people" not in body  # "3 different participants"
    assert header["annotations_creators"] == ["machine-generated"]
    assert "crowdsourced" not in header["language_creators"] and "synthetic" in header["tags"]


def test_card_for_prolific_participants_only(tmp_path: Path) -> None:
    planted = write_study_run(tmp_path / "run", small_config(), source="prolific")
    header, body = card_of(build(planted))
    assert ("All answers and ratings come from `prolific` participants (people recruited on "
            "Prolific).") in body
    assert "SIMULATED" not in body and "MIXES" not in body
    assert "Human preference data on social reasoning, collected with people" in body
    assert header["annotations_creators"] == ["crowdsourced"]
    assert "crowdsourced" in header["language_creators"] and "synthetic" not in header["tags"]


def test_card_marks_an_unverified_pilot_and_only_that(tmp_path: Path) -> None:
    verified = write_study_run(tmp_path / "a" / "run", small_config(), source="prolific")
    assert "Unverified participants" not in card_of(build(verified))[1]
    config = small_config().model_copy(update={"prolific": small_config().prolific.model_copy(
        update={"enabled": False, "verify": False})})
    pilot = write_study_run(tmp_path / "b" / "run", config, source="prolific")
    _, body = card_of(build(pilot))
    assert "**Unverified participants.**" in body and "`prolific.verify: false`" in body


@pytest.mark.parametrize(("sources", "expected"), [
    (("prolific", "prolific", "invite"),
     {"prolific": (4, 12), "invite": (2, 6)}),  # writers p, p, i; raters p, p, i, p, p, i
    (("simulated", "prolific"),
     {"simulated": (4, 9), "prolific": (2, 9)}),
])
def test_card_says_the_release_mixes_sources_with_counts(tmp_path: Path, sources: tuple[str, ...],
                                                         expected: dict[str, tuple[int, int]]) -> None:
    planted = write_study_run(tmp_path / "run", small_config(), source=sources)
    folder = build(planted)
    header, body = card_of(folder)
    assert "This release MIXES sources: " in body  # fails if the mix sentence is missing
    assert "All answers and ratings come from" not in body
    answers = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")["source"]
    ratings = pd.read_parquet(folder / "data/ratings/train-00000-of-00001.parquet")["source"]
    for source, (n_answers, n_ratings) in expected.items():
        assert (answers == source).sum() == n_answers and (ratings == source).sum() == n_ratings
        assert f"{n_answers} answers and {n_ratings} ratings come from `{source}` participants" in body
    simulated = "simulated" in expected
    assert ("Answers and ratings with source `simulated` are SIMULATED" in body) == simulated
    assert ("synthetic" in header["tags"]) == simulated
    assert set(header["annotations_creators"]) == (
        {"crowdsourced", "machine-generated"} if simulated else {"crowdsourced"})


def test_provenance_text_from_counts() -> None:
    assert provenance_text({"invite": 5}, {"invite": 7}) == (
        "All answers and ratings come from `invite` participants (people who joined through the "
        "study team's invite link, e.g. a pilot or an own panel).")
    mixed = provenance_text({"prolific": 5}, {"invite": 7})  # writers and raters differ
    assert mixed.startswith("This release MIXES sources: 5 answers and 0 ratings come from "
                            "`prolific` participants")
    assert "0 answers and 7 ratings come from `invite` participants" in mixed
    assert provenance_text({"simulated": 3, "prolific": 0}, {"simulated": 4}).startswith(
        "All answers and ratings come from `simulated` participants: this data is SIMULATED.")


@pytest.mark.parametrize(("name", "stage"), [("responses", "collect-responses"),
                                             ("ratings", "collect-ratings")])
def test_missing_source_column_is_the_one_line_contract_error(planted: PlantedRun, name: str,
                                                               stage: str) -> None:
    path = planted.run.file(f"{name}.parquet")
    write_parquet(pd.read_parquet(path).drop(columns="source"), path)
    with pytest.raises(CrowdprefError) as info:
        build_release(planted.run, planted.config)
    assert str(info.value) == (f"{path}: missing column(s) source: rerun the stage that writes it "
                               f"(the {stage} flow)")


@pytest.mark.parametrize("bad", ["mturk", None])
def test_source_outside_the_allowed_values_is_refused(planted: PlantedRun, bad: str | None) -> None:
    ratings = pd.read_parquet(planted.run.ratings).astype({"source": object})
    ratings.loc[3, "source"] = bad
    write_parquet(ratings, planted.run.ratings)
    with pytest.raises(CrowdprefError, match="1 ratings have a source that is missing or not one "
                                             "of simulated, prolific, invite") as info:
        build_release(planted.run, planted.config)
    assert "\n" not in str(info.value)
    assert not (planted.run.path / "release").exists()


# --- the A/B display order: counterbalanced or not ---------------------------------------------
CANCELS = "so position bias cancels within each pair"


def aggregated(planted: PlantedRun) -> dict:
    """aggregation.json as crowdpref.aggregation computes it from the run folder's files."""
    run = planted.run
    result = aggregate(pd.read_parquet(run.ratings), pd.read_parquet(run.pairs),
                       pd.read_parquet(run.responses), pd.read_parquet(run.questions))
    return json.loads(json.dumps(result.stats.to_dict()))


def one_pair_on_a_single_order(planted: PlantedRun) -> str:
    """Show the one rater of the first pair who saw the other order the pair's majority order
    instead (same judgement: the rating is mirrored), so all three saw the same order."""
    ratings = pd.read_parquet(planted.run.ratings)
    pair_id = ratings["pair_id"].iloc[0]
    rows = ratings.index[ratings["pair_id"] == pair_id]
    majority = ratings.loc[rows, "swapped"].mode().iloc[0]
    odd = rows[(ratings.loc[rows, "swapped"] != majority).to_numpy()]
    assert len(odd) == 1
    ratings.loc[odd, ["response_a_id", "response_b_id"]] = ratings.loc[
        odd, ["response_b_id", "response_a_id"]].to_numpy()
    ratings.loc[odd, "swapped"] = majority
    ratings.loc[odd, "rating"] = 9 - ratings.loc[odd, "rating"]
    write_parquet(ratings, planted.run.ratings)
    return pair_id


def test_counterbalanced_orders_give_the_cancels_within_each_pair_sentence(planted: PlantedRun) -> None:
    stats = aggregated(planted)
    assert stats["order_balance"]["unbalanced_pairs"] == 0
    _, body = card_of(build_release(planted.run, planted.config, aggregation=stats))
    assert "The A/B display order was counterbalanced per rating" in body and CANCELS in body
    assert "(position bias cancels within them) | 6 of 6 (100%) |" in body
    assert "randomised per pair" not in body and "in a randomised order" not in body
    assert "not balanced" not in body


def test_a_pair_with_every_rater_on_one_order_is_not_claimed_balanced(planted: PlantedRun) -> None:
    before = aggregated(planted)
    one_pair_on_a_single_order(planted)
    stats = aggregated(planted)
    assert stats["kept"] == before["kept"]  # the same judgements, only the display changed
    assert stats["order_balance"]["unbalanced_pairs"] == 1
    _, body = card_of(build_release(planted.run, planted.config, aggregation=stats))
    assert CANCELS not in body
    assert ("The A/B display order was not balanced for 1 of the 6 rated pairs" in body
            and "only averages out across pairs" in body)
    assert "The other 5 pairs were counterbalanced per rating" in body
    assert "(position bias cancels within them) | 5 of 6 (83%) |" in body


def test_without_aggregation_figures_the_balance_is_measured_on_the_ratings(tmp_path: Path) -> None:
    planted = write_study_run(tmp_path / "run", small_config(), order="pair", stats=False)
    _, body = card_of(build_release(planted.run, planted.config))
    assert CANCELS not in body
    assert "not balanced for any of the 6 rated pairs" in body and "50% of all ratings" in body
    assert ("(position bias cancels within them) (measured on the `ratings` configuration) | "
            "0 of 6 (0%) |") in body
    balanced = write_study_run(tmp_path / "ok", small_config(), stats=False)
    assert CANCELS in card_of(build_release(balanced.run, balanced.config))[1]


def test_display_order_text_from_figures() -> None:
    assert CANCELS in display_order_text({"rated_pairs": 36, "unbalanced_pairs": 0})
    partly = display_order_text({"rated_pairs": 36, "unbalanced_pairs": 4}, 0.5)
    assert CANCELS not in partly and "not balanced for 4 of the 36 rated pairs" in partly
    assert "The other 32 pairs" in partly and "(50% of all ratings were shown swapped)" in partly
    assert CANCELS not in display_order_text({"rated_pairs": 36, "unbalanced_pairs": 36})
    assert "not available" in display_order_text(None)
    assert "No pair was rated" in display_order_text({"rated_pairs": 0, "unbalanced_pairs": 0})


# --- privacy ------------------------------------------------------------------------------------
def test_no_secret_anywhere_in_the_release(planted: PlantedRun) -> None:
    folder = build(planted)
    assert len(planted.everything_secret) > 20
    assert scan_for_secrets(folder, planted.everything_secret) == []
    blob = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
    for value in planted.everything_secret:
        assert value.encode() not in blob
    assert not any("private" in p.parts or p.suffix == ".json" for p in folder.rglob("*"))


def test_ids_are_random_10_chars_and_stable(planted: PlantedRun, tmp_path: Path) -> None:
    folder = build(planted)
    responses = pd.read_parquet(folder / "data/responses/train-00000-of-00001.parquet")
    ratings = pd.read_parquet(folder / "data/ratings/train-00000-of-00001.parquet")
    ids = set(responses["participant_id"]) | set(ratings["rater_id"])
    assert len(ids) == 9
    assert all(len(i) == ID_LENGTH and set(i) <= set(ID_ALPHABET) for i in ids)
    mapping_file = planted.run.private_dir / PUBLISHED_IDS_FILE
    assert stat.S_IMODE(mapping_file.stat().st_mode) == 0o600
    mapping = json.loads(mapping_file.read_text())["ids"]
    assert set(mapping) == set(planted.participant_keys) and set(mapping.values()) == ids
    source = pd.read_parquet(planted.run.responses)
    assert list(responses["participant_id"]) == [mapping[k] for k in source["participant_key"]]

    again = build(planted)
    assert pd.read_parquet(again / "data/responses/train-00000-of-00001.parquet").equals(responses)
    assert (again / "README.md").read_bytes() == (folder / "README.md").read_bytes()

    other = write_study_run(tmp_path / "other", small_config())  # a fresh run: fresh ids
    fresh = build_release(other.run, other.config)
    fresh_ids = set(pd.read_parquet(fresh / "data/ratings/train-00000-of-00001.parquet")["rater_id"])
    assert fresh_ids.isdisjoint(ids)


def test_refuses_when_a_forbidden_string_is_in_a_published_column(planted: PlantedRun) -> None:
    good = build(planted)
    before = {p: p.read_bytes() for p in good.rglob("*") if p.is_file()}
    password = planted.passwords[4]
    responses = pd.read_parquet(planted.run.responses)
    responses.loc[2, "text"] = f"my login is {planted.usernames[0]} / {password}, have fun"
    write_parquet(responses, planted.run.responses)
    with pytest.raises(CrowdprefError, match="refusing to publish") as info:
        build(planted)
    message = str(info.value)
    assert "\n" not in message and password not in message and planted.usernames[0] not in message
    assert "data/responses/train-00000-of-00001.parquet: column 'text' row 2" in message
    assert {p: p.read_bytes() for p in good.rglob("*") if p.is_file()} == before  # untouched
    assert not list(planted.run.path.glob(".release-*"))


def test_refuses_an_original_participant_key_even_without_forbidden_list(planted: PlantedRun) -> None:
    questions = pd.read_parquet(planted.run.questions)
    questions.loc[0, "metadata"] = json.dumps({"writer": planted.participant_keys[0]})
    write_parquet(questions, planted.run.questions)
    with pytest.raises(CrowdprefError, match="column 'metadata' row 0"):
        build_release(planted.run, planted.config)


def test_scan_reports_files_and_never_the_secret(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("line one\nthe key is hf_abcdefgh123 here\n")
    (tmp_path / "sub").mkdir()
    pd.DataFrame({"x": ["fine", "still fine", "pw=S3cretPassw0rd!"]}).to_parquet(
        tmp_path / "sub" / "t.parquet", compression="snappy")
    hits = scan_for_secrets(tmp_path, ["hf_abcdefgh123", "S3cretPassw0rd!", "", "ab", "absent-value"])
    assert hits == ["a.txt: line 2: forbidden string #1 (14 characters)",
                    "sub/t.parquet: column 'x' row 2: forbidden string #2 (15 characters)"]


def test_forbidden_strings_gathers_private_files(planted: PlantedRun) -> None:
    forbidden = set(planted.forbidden)
    assert set(planted.usernames) <= forbidden and set(planted.passwords) <= forbidden
    assert set(planted.api_keys) <= forbidden


def test_a_prolific_review_list_forbids_who_and_which_submission_not_its_wording(planted: PlantedRun) -> None:
    """The sync's review list (``auto_approve: false``) holds usernames and submission ids, which
    must never be published, and field names and reasons, which the card itself uses: the
    release still builds, and its id values are forbidden."""
    submission = "6f1d2a3b4c5d6e7f8a9b0c1d"
    write_json([{"username": planted.usernames[0], "submission_id": submission, "reason": "complete: approve"},
                {"username": planted.usernames[1], "submission_id": "sub-0000000042",
                 "reason": "failed the quality checks", "proposed_category": "FAILED_CHECK",
                 "proposed_message": "You did not answer the attention items as instructed."}],
               planted.run.private_dir / "prolific-review-study1.json", private=True)
    forbidden = forbidden_strings(planted.run, accounts=planted.accounts)
    assert {submission, "sub-0000000042", planted.usernames[0]} <= set(forbidden)
    assert not {"username", "submission_id", "complete: approve", "FAILED_CHECK"} & set(forbidden)
    folder = build_release(planted.run, planted.config, forbidden=forbidden)
    assert "username" in (folder / "README.md").read_text()  # the card's own words publish


# --- pushing --------------------------------------------------------------------------------------
@pytest.mark.parametrize("repo_id", ["no-slash", "a/b/c", "owner/-bad", "owner/na--me",
                                     "owner/" + "x" * 97, "own er/name"])
def test_malformed_repo_id_is_a_one_line_error(planted: PlantedRun, repo_id: str) -> None:
    folder = build_release(planted.run, planted.config)
    with pytest.raises(ConfigError, match="CROWDPREF_HF_REPO_ID") as info:
        push_release(folder, repo_id, "hf_token_value_123")
    assert "\n" not in str(info.value) and "hf_token_value_123" not in str(info.value)
    assert validate_repo_id("my-org/social_reasoning.rlhf") == "my-org/social_reasoning.rlhf"


def test_no_repo_or_token_means_no_push(planted: PlantedRun) -> None:
    folder = build_release(planted.run, planted.config)
    for repo_id, token in ((None, "hf_x1234567"), ("me/data", None), (None, None)):
        result = push_release(folder, repo_id, token, endpoint="http://127.0.0.1:9")
        assert not result.pushed and str(folder) in result.message


@pytest.fixture()
def hub() -> FakeHubServer:
    with FakeHubServer() as server:
        yield server


def test_push_to_the_fake_hub(planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build(planted, repo_id="me/social-rlhf")
    result = push_release(folder, "me/social-rlhf", hub.write_token, private=True, endpoint=hub.url)
    assert result.pushed and result.url == f"{hub.url}/datasets/me/social-rlhf"
    repo = hub.dataset("me/social-rlhf")
    assert repo.private is True
    local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert repo.files == {**local, ".gitattributes": GITATTRIBUTES}  # the Hub's own file stays
    assert len(repo.commits) == 2  # the Hub's initial commit, then the release in one commit
    # pushing again is harmless: nothing changed, nothing committed
    again = push_release(folder, "me/social-rlhf", hub.write_token, private=True, endpoint=hub.url)
    assert again.pushed and len(repo.commits) == 2

    push_release(folder, "me/public-rlhf", hub.write_token, private=False, endpoint=hub.url)
    assert hub.dataset("me/public-rlhf").private is False


def test_wrong_token_is_a_one_line_error_without_the_token(planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build_release(planted.run, planted.config)
    wrong = "hf_wrongTokenValue987654321"
    with pytest.raises(PushError) as info:
        push_release(folder, "me/social-rlhf", wrong, endpoint=hub.url)
    message = str(info.value)
    assert "\n" not in message and wrong not in message
    assert "401" in message and "HF_TOKEN" in message and "me/social-rlhf" in message
    assert hub.url in message and not info.value.retryable
    assert info.value.__cause__ is None and "datasets/me" not in str(hub.repos)


def test_read_only_token_is_refused(planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build_release(planted.run, planted.config)
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    with pytest.raises(PushError, match="403") as info:
        push_release(folder, "me/social-rlhf", hub.read_token, endpoint=hub.url)
    assert hub.read_token not in str(info.value) and "\n" not in str(info.value)


def test_unreachable_endpoint_is_retryable(planted: PlantedRun) -> None:
    folder = build_release(planted.run, planted.config)
    with pytest.raises(PushError, match="cannot reach the Hub") as info:
        push_release(folder, "me/social-rlhf", "hf_tok_abcdef123", endpoint="http://127.0.0.1:9")
    assert info.value.retryable and "hf_tok_abcdef123" not in str(info.value)


def test_hf_hub_offline_env_is_a_one_line_error(planted: PlantedRun, hub: FakeHubServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_release(planted.run, planted.config)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PushError, match="HF_HUB_OFFLINE") as info:
        push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert "\n" not in str(info.value) and hub.write_token not in str(info.value)
    assert hub.requests == []


def test_offline_mode_raised_by_huggingface_hub_itself(planted: PlantedRun, hub: FakeHubServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE read at import time: the library's own OfflineModeIsEnabled is mapped too."""
    from huggingface_hub import constants

    import crowdpref.release.hub as publish

    folder = build_release(planted.run, planted.config)
    monkeypatch.setattr(publish, "_offline_now", lambda: False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PushError, match="offline mode") as info:
        push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert "\n" not in str(info.value) and not info.value.retryable
    assert hub.requests == []


def test_scan_finds_exactly_what_a_naive_search_finds(tmp_path: Path) -> None:
    """The vectorised prefilter agrees with ``needle in text`` for overlapping needles, shared
    prefixes, non-ASCII text, needles at both ends, and thousands of absent ones."""
    rng = secrets.SystemRandom()
    planted = ["demo-s1-0001", "demo-s1-00012", "abcdXYZ", "cdXYZ12", "pässwörd-ünï", "EDGE"]
    absent = [secrets.token_urlsafe(rng.randint(3, 30)) for _ in range(2000)]
    filler = " ".join(secrets.token_urlsafe(40) for _ in range(3000))
    text = ("demo-s1-00012 " + filler[:50000] + " abcdXYZ12 " + filler[50000:]
            + " pässwörd-ünï in prose EDGE")
    (tmp_path / "card.md").write_text(text, encoding="utf-8")
    forbidden = planted + absent
    expected = {i for i, s in enumerate(forbidden, start=1) if len(s) >= 4 and s in text}
    hits = scan_for_secrets(tmp_path, forbidden)
    got = {int(h.split("#")[1].split(" ")[0]) for h in hits}
    assert got == expected and {1, 2, 3, 4, 5, 6} <= got


def test_card_states_the_checks_and_how_participants_did(tmp_path: Path) -> None:
    config = small_config()
    config = config.model_copy(update={
        "study1": config.study1.model_copy(update={"checks": config.study1.checks.model_copy(
            update={"count": 1, "on_fail": "exclude"})}),
        "study2": config.study2.model_copy(update={"checks": config.study2.checks.model_copy(
            update={"gold_pairs": 1, "repeated_pairs": 1, "min_passed": 1})})})
    planted = write_study_run(tmp_path / "runs" / "pub-test", config)
    _, body = card_of(build(planted))
    section = body.split("## Quality checks, reliability and uncertainty", 1)[1].split("\n## ", 1)[0]
    assert "Study 1 mixed 1 instructed-response item(s) (the text told the participant" in section
    assert "into every batch, graded automatically" in section
    assert "passing needed all" in section and "their counted work was excluded" in section
    # the planted participants: the first writer failed; every rater passed, the last one returned
    assert "Of 3 participants, 2 passed, 1 failed and 0 left before answering them" in section
    assert "Study 2 mixed 1 gold pair(s)" in section and "passing needed at least 1" in section
    assert "Of 6 participants, 6 passed, 0 failed" in section
    assert "plain mean of its ratings" in section and "90% interval" in section
    _, plain = card_of(build(write_study_run(tmp_path / "runs2" / "pub-test", small_config())))
    assert "Study 1 had no quality checks." in plain and "Study 2 had no quality checks." in plain


def test_the_card_says_whom_onboarding_screened_out_with_counts_and_the_pass_rule():
    from pathlib import Path as _Path

    from crowdpref.config import load_study
    from crowdpref.release.card import onboarding_lines

    config = load_study(_Path(__file__).resolve().parents[2] / "studies" / "demo.yaml")
    rows = [{"participant_key": f"p_{n}", "study": "study1", "status": status, "onboarding_attempts": attempts}
            for n, (status, attempts) in enumerate([("complete", 1), ("complete", 2), ("screened_out", 2)])]
    text = " ".join(onboarding_lines(config, pd.DataFrame(rows)))
    quiz = config.study1.onboarding.quiz
    assert f"{quiz.pass_mark} right answers to pass, {quiz.attempts} attempt(s)" in text
    assert "Of 3 people who took the quiz, 2 passed and 1 was screened out." in text
    assert "p_" not in text  # counts, never ids
    without = config.model_copy(update={"study2": config.study2.model_copy(update={"onboarding": None})})
    assert "Study 2 had no onboarding" in " ".join(onboarding_lines(without, None))
