"""Study 2, pairwise ratings: what is specific to it on top of :mod:`crowdpref.collection`
(the dataset raters see, the record for a pair, the export). Claims, the warm pool, monitoring and drop-out release are the same mechanism as study 1;
what differs is that each rating's A/B order is chosen at the claim, counterbalanced."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import argilla as rg
import pandas as pd

from crowdpref.argilla_client import SubmittedAnswer
from crowdpref import checks
from crowdpref.collection import Collection
from crowdpref.config import Batches, StudyConfig
from crowdpref.contracts import RATINGS
from crowdpref.errors import CrowdprefError
from crowdpref.runfolder import RunFolder, read_parquet, write_json, write_parquet
from crowdpref.participants import participants_frame, write_participants
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.reopen import reopen_unusable
from crowdpref import study_paths
from crowdpref.store import ParticipantState, Store, open_store

GUIDELINES = """\
## Thank you for taking part

Each task shows a question about a social situation and **two answers** written by other
people, labelled A and B. Read both, then say **which answer is better, and how strongly**.
There is no "equal" option: if they seem equally good, pick the one you lean towards with the
weakest level of preference.

### What makes an answer better
Weigh these together - a weakness in one can be outweighed by strengths in others:
1. **Respectful** - it treats everyone in the situation with dignity.
2. **Honest** - it does not mislead, and admits uncertainty where there is some.
3. **Authentic** - it reads like a genuine, thoughtful person, not a formula.
4. **Empathetic** - it considers how the people involved feel.
5. **Diverse and inclusive** - it avoids assumptions about people's background or identity.
6. **Neutral, bias-free language** - no loaded, judgemental or stereotyping wording.
7. **Reasoned** - it explains *why*, not only *what*.

Judge the answers, not whether you agree with the question. Some answers may contain offensive
language; rate them like any other answer (offensive wording usually makes an answer worse).

Your ratings may be published in an open dataset without your name or Prolific ID.
"""

EXCLUDED_RATINGS = "ratings_excluded.parquet"
"""Ratings given by raters who failed the checks under ``on_fail: exclude``: not counted, kept
for the raw release."""

PREFERENCE_TITLE = "Which answer is better, and how strongly?"


def preference_description(labels: Sequence[str]) -> str:
    """The scale explained point by point (1 = strongest preference for A ... N = for B)."""
    points = "; ".join(f"{i} = {label.lower()}" for i, label in enumerate(labels, start=1))
    return f"Pick one point: {points}. There is no neutral point."


@dataclass
class Study2Spec:
    """The study-2 :class:`~crowdpref.collection.CollectionSpec`: items are answer pairs."""

    config: StudyConfig
    pairs: pd.DataFrame  # pairs.parquet
    responses: pd.DataFrame  # responses.parquet
    questions: pd.DataFrame  # questions.parquet
    retired_pairs: int = 0  # pairs retired by withdrawals (no longer in pairs.parquet): the plan still counts them

    key = "study2"

    def __post_init__(self) -> None:
        s2 = self.config.study2
        if self.pairs.empty:
            raise CrowdprefError("pairs.parquet is empty: no question has 2 or more usable answers")
        self.batches: Batches = self.config.check_pair_count(len(self.pairs) + self.retired_pairs)
        self.study_name = self.config.name
        self.username_prefix = str(s2.username_prefix)
        self.copies = s2.ratings_per_pair
        self.per_participant = s2.pairs_per_participant
        self.seed = self.config.seed
        self.remainder = s2.remainder
        self.inactive_after_s = s2.inactive_after_minutes * 60
        self.backstop_s = s2.backstop_minutes * 60  # monitoring: read anyway after this long unread
        self.pool_size = s2.pool_size
        self.counterbalance = True  # display order per rating, balanced within each pair
        self.exclude_from = "study1" if s2.exclude_study1_participants else None
        self.checks_needed = s2.checks.needed
        self.on_fail = s2.checks.on_fail
        self._pairs = self.pairs.set_index("pair_id")
        self._text = self.responses.set_index("response_id")["text"]
        self._question = self.questions.set_index("question_id")["question"]

    def item_ids(self) -> list[str]:
        return list(self.pairs["pair_id"])

    def dataset_settings(self) -> rg.Settings:
        s2 = self.config.study2
        return rg.Settings(
            guidelines=GUIDELINES,
            fields=[
                rg.TextField(name="question", title="Question", use_markdown=False),
                rg.TextField(name="response_a", title="Answer A", use_markdown=False),
                rg.TextField(name="response_b", title="Answer B", use_markdown=False),
            ],
            questions=[
                rg.RatingQuestion(
                    name="preference",
                    title=PREFERENCE_TITLE,
                    description=preference_description(s2.scale_labels),
                    values=list(range(1, s2.scale_points + 1)),
                    required=True,
                )
            ],
            distribution=rg.TaskDistribution(min_submitted=1),
        )

    def record(self, item_id: str, swapped: bool | None = None) -> rg.Record:
        """The pair as this rater sees it: ``swapped`` (chosen per rating by the store, balanced
        across the pair's raters) shows the second answer as A. A gold pair shows its curated
        question and answers; a repeated pair is the pair again, in the order ``swapped`` says
        (the opposite of the rater's first sight of it). Nothing visible tells a check apart."""
        if checks.is_check(item_id) and checks.check_kind(item_id) == checks.GOLD:
            gold = checks.GOLD_PAIRS[checks.gold_index(item_id)]
            a, b = (gold.good, gold.bad) if checks.gold_good_is_a(item_id) else (gold.bad, gold.good)
            return rg.Record(id=item_id, fields={"question": gold.question, "response_a": a, "response_b": b})
        pair_id = checks.repeated_pair(item_id) if checks.is_check(item_id) else item_id
        pair = self._pairs.loc[pair_id]
        a, b = self.display(pair_id, swapped)
        return rg.Record(
            id=item_id,
            fields={
                "question": self._question[pair["question_id"]],
                "response_a": self._text[a],
                "response_b": self._text[b],
            },
        )

    def display(self, item_id: str, swapped: bool | None) -> tuple[str, str]:
        """(response shown as A, response shown as B); None: the pair's own seeded order."""
        pair = self._pairs.loc[item_id]
        if swapped is None:
            return pair["response_a_id"], pair["response_b_id"]
        first, second = pair["first_response_id"], pair["second_response_id"]
        return (second, first) if swapped else (first, second)

    def check_items(self, items: Sequence[str], orders: Mapping[str, bool], key_hash: str) -> list[tuple[str, bool | None]]:
        """``gold_pairs`` gold pairs and ``repeated_pairs`` of the rater's own pairs again, each
        in the opposite order of the rater's first sight of it."""
        c = self.config.study2.checks
        out: list[tuple[str, bool | None]] = [(item, None) for item in checks.gold_ids(self.seed, key_hash, c.gold_pairs)]
        for pair_id in checks.repeat_choice(self.seed, key_hash, items, c.repeated_pairs):
            first = orders.get(pair_id)
            first = bool(self._pairs.loc[pair_id, "swapped"]) if first is None else first
            out.append((checks.repeat_id(pair_id), not first))
        return out

    def grade_check(self, item_id: str, values: Mapping[str, Any],
                    answers: Mapping[str, tuple[Mapping[str, Any], bool | None]]) -> bool | None:
        s2 = self.config.study2
        rating = values.get("preference")
        if checks.check_kind(item_id) == checks.GOLD:
            return checks.grade_gold(item_id, rating, s2.scale_points)
        pair_id = checks.repeated_pair(item_id)
        if pair_id not in answers:
            return None  # the first rating of that pair is not in yet
        first_values, first_swapped = answers[pair_id]
        _, again_swapped = answers[item_id]
        return checks.grade_repeat(first_values.get("preference"), bool(first_swapped), rating,
                                   bool(again_swapped), s2.scale_points, s2.checks.repeat_tolerance)


def study2_collection(config: StudyConfig, pairs: pd.DataFrame, responses: pd.DataFrame, questions: pd.DataFrame,
                      owner: Any, run_folder: Path, store: Store, finish_url: str | None = None) -> Collection:
    info = store.find_collection(config.name, "study2")
    retired = len(store.retired_items(info.id)) if info is not None else 0
    return Collection(Study2Spec(config, pairs, responses, questions, retired), owner, run_folder / "study2", store,
                      finish_url)


def study1_complete(run: RunFolder) -> pd.DataFrame:
    """The study-1 export, or a clear error when study 1 is not finished."""
    responses = read_parquet(run.responses, needed_by="run collect-responses until study 1 is complete first")
    report_file = run.file("study1/validation.json")
    if report_file.exists() and not json.loads(report_file.read_text()).get("valid", False):
        raise CrowdprefError(f"{report_file}: study 1 did not validate: finish study 1 before pairing")
    return responses


def open_collection(config: StudyConfig, settings: Any, store: Store | None = None) -> Collection:
    """The study-2 collection on the configured Argilla (reads pairs/responses/questions)."""
    from crowdpref.account_passwords import AccountPasswords
    from crowdpref.argilla_client import owner_for
    from crowdpref.portal.links import finish_url

    run = RunFolder.for_study(settings.runs_dir, config.name)
    pairs = read_parquet(run.pairs, needed_by="run the collect-ratings flow (it builds pairs first)")
    responses = study1_complete(run)
    questions = read_parquet(run.questions, needed_by="run generate-questions first")
    owner = owner_for(settings, passwords=AccountPasswords.from_secrets(settings.secrets_dir))
    store = store or open_store(settings)
    study_paths.remember(store, config)  # the portal finds the config here, wherever it lives
    return study2_collection(config, pairs, responses, questions, owner, run.path, store,
                             finish_url(settings, config.name, "study2"))


def rating_problem(scale_points: int) -> Callable[[Mapping[str, Any]], str | None]:
    """Why a study-2 rating cannot be used (not a point of the 1..K scale), or None."""

    def problem(values: Mapping[str, Any]) -> str | None:
        value = values.get("preference")
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= scale_points:
            return f"rating {value!r} is outside 1..{scale_points}"
        return None

    return problem


def ratings_frame(
    spec: Study2Spec, answers: Sequence[tuple[ParticipantState, SubmittedAnswer]], ids: Pseudonyms
) -> tuple[pd.DataFrame, list[str]]:
    """``ratings.parquet`` rows, and the rejected ones (a rating outside 1..K is rejected and
    reported, never clamped)."""
    k = spec.config.study2.scale_points
    off_scale = rating_problem(k)
    rows, rejected = [], []
    for participant, answer in answers:
        pair_id = answer.record_external_id
        value = answer.values.get("preference")
        if off_scale(answer.values) is not None:
            rejected.append(
                f"rating {value!r} of {ids.participant_key(participant.username)} on {pair_id} is outside 1..{k}"
            )
            continue
        pair = spec._pairs.loc[pair_id]
        swapped = participant.swapped.get(pair_id)
        shown_a, shown_b = spec.display(pair_id, swapped)
        rows.append({
            "rating_id": ids.rating_id(pair_id, participant.username),
            "pair_id": pair_id,
            "question_id": pair["question_id"],
            "response_a_id": shown_a,
            "response_b_id": shown_b,
            "swapped": bool(shown_a == pair["second_response_id"]),
            "rater_key": ids.participant_key(participant.username),
            "source": participant.source,
            "rating": value,
            "submitted_at": pd.Timestamp(participant.answered_at[pair_id], unit="s", tz="UTC"),
        })
    frame = pd.DataFrame(rows, columns=RATINGS).sort_values(["pair_id", "rating_id"]).reset_index(drop=True)
    return frame, rejected


def study1_overlap(collection: Collection) -> int:
    """How many study-2 raters took part in study 1 - the same person by their key (Prolific
    id, invite key), compared as salted hashes in the store. 0 when study 1 is not in the store."""
    spec = collection.spec
    study1 = collection.store.find_collection(spec.study_name, "study1")
    if study1 is None:
        return 0
    return len(collection.store.key_hashes(study1.id) & collection.store.key_hashes(collection.info.id))


def export_ratings(collection: Collection, run_folder: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """ratings.parquet + the validation report (study2/validation.json): every pair has its R
    ratings, no rater rated a pair twice, no study-1 participant rated (when excluded)."""
    submitted = collection.submitted_answers()
    # a counted rating discarded in Argilla or outside the scale can never be exported: it stops
    # counting (an event says why), its pair goes back to the pool (ItemsReopened; the next run
    # collects it again)
    reopen_unusable(collection.store, collection.info.id, collection.participants(), submitted,
                    rating_problem(collection.spec.config.study2.scale_points),  # type: ignore[attr-defined]
                    "study 2", "collect-ratings")
    answers = collection.collected_answers(submitted)
    report = collection.validation_report(answers)
    overlap = study1_overlap(collection)
    report["study1_participants_who_rated"] = overlap
    report["checks"] = checks.checks_report(collection.participants(),
                                            Pseudonyms(run_folder / "private").participant_key)
    if overlap and collection.spec.exclude_from is not None:
        report["anomalies"].append(f"{overlap} study-1 participants are study-2 raters")
    frame, rejected = ratings_frame(collection.spec, answers, Pseudonyms(run_folder / "private"))  # type: ignore[arg-type]
    report["rejected_ratings"] = rejected
    report["anomalies"] += rejected
    report["valid"] = not report["anomalies"]
    write_json(report, collection.folder / "validation.json")
    if not report["valid"]:
        raise CrowdprefError(
            f"study 2 export refused: {len(report['anomalies'])} anomalies (see "
            f"{collection.folder / 'validation.json'}), first: {report['anomalies'][0]}"
        )
    excluded = [(p, a) for p, a in submitted if a.record_external_id in p.excluded]
    excluded_frame, _ = ratings_frame(collection.spec, excluded, Pseudonyms(run_folder / "private"))  # type: ignore[arg-type]
    write_parquet(excluded_frame, run_folder / EXCLUDED_RATINGS)
    s2 = collection.spec.config.study2  # type: ignore[attr-defined]
    write_participants(run_folder, "study2", participants_frame(
        "study2", collection.participants(), Pseudonyms(run_folder / "private").participant_key,
        s2.too_fast_seconds, s2.checks.count > 0, collection.store.onboarding_records(collection.info.id),
        collection.store.key_hash_of(collection.info.id)))
    write_parquet(frame, run_folder / "ratings.parquet")
    return frame, report


def gold_outcomes(store: Store, study: str, private_dir: Path) -> pd.DataFrame:
    """Study 2's graded gold pairs as the gold anchor reads them (``rater_key``, ``passed``;
    :func:`crowdpref.checks.gold_frame`), from the store's ``check_graded`` events, each rater
    keyed as ratings.parquet keys them (the run's salted pseudonym, ``private_dir``); empty when
    the study has no gold pairs or no study-2 collection yet."""
    info = store.find_collection(study, "study2")
    if info is None:
        return checks.gold_frame([])
    key = Pseudonyms(private_dir).participant_key
    names = {p.id: p.username for p in store.participants(info.id)}
    graded = []
    for event in store.events(info.id, kinds=["check_graded"]):
        if event["participant_id"] in names and event["item_id"]:
            passed = json.loads(event["detail"] or "{}").get("passed")
            if passed is not None:
                graded.append((key(names[event["participant_id"]]), event["item_id"], bool(passed)))
    return checks.gold_frame(graded)
