"""Study 1, written responses: what is specific to it on top of :mod:`crowdpref.collection`
(the dataset participants see, the record for a question, the export)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import argilla as rg
import pandas as pd

from crowdpref.argilla_client import SubmittedAnswer
from crowdpref import checks
from crowdpref.collection import Collection
from crowdpref.contracts import RESPONSES
from crowdpref import study_paths
from crowdpref.store import ParticipantState, Store, open_store
from crowdpref.config import StudyConfig
from crowdpref.errors import CrowdprefError
from crowdpref.filters import preregister
from crowdpref.participants import participants_frame, write_participants
from crowdpref.pseudonyms import Pseudonyms
from crowdpref.reopen import reopen_unusable
from crowdpref.runfolder import write_json, write_parquet

GUIDELINES = """\
## Thank you for taking part

You will see a series of questions about everyday social situations. For each one, **write the
answer you would give a friend who asked you**, then rate how good the question itself is.

### How to write your answer
- **Be respectful, honest and authentic.** Write what you really think, in your own words.
  Do not copy text from elsewhere or from an AI assistant.
- **Show empathy and be inclusive.** Think about everyone involved in the situation and how
  they might feel; avoid assumptions about people's background, identity or abilities.
- **Stay neutral.** Avoid loaded or judgemental language and one-sided framing; where
  reasonable people disagree, say so.
- **Explain your reasoning.** Say *why* you would act or think this way, not only *what*.
  A few sentences are usually enough.

### Rating the question
After answering, rate from 1 (poor) to 5 (excellent) **how well the question captures a
realistic social situation**: is it clear, plausible, and does it call for social reasoning?

Your answers may be published in an open dataset without your name or Prolific ID.
"""

EXCLUDED_RESPONSES = "responses_excluded.parquet"
"""Answers submitted by writers who failed the checks under ``on_fail: exclude``: not counted,
kept for the raw release."""

QUALITY_TITLE = "How well does this question capture a realistic social situation?"
QUALITY_DESCRIPTION = "1 = poorly (unclear, implausible, or not about social reasoning) ... 5 = very well."


@dataclass
class Study1Spec:
    """The study-1 :class:`~crowdpref.collection.CollectionSpec`."""

    config: StudyConfig
    questions: pd.DataFrame  # questions.parquet: question_id, question, category, ...

    key = "study1"

    def __post_init__(self) -> None:
        missing = {"question_id", "question", "category"} - set(self.questions.columns)
        if missing:
            raise CrowdprefError(f"questions.parquet lacks columns {sorted(missing)}: rerun generate-questions")
        if self.questions["question_id"].duplicated().any():
            raise CrowdprefError("questions.parquet holds duplicate question_id values: rerun generate-questions")
        # Q <= number of questions, remainder policy: one-line ConfigError before anything runs
        self.batches = self.config.check_question_count(len(self.questions)).study1
        self._by_id = self.questions.set_index("question_id")
        s1 = self.config.study1
        self.study_name = self.config.name
        self.username_prefix = str(s1.username_prefix)
        self.copies = s1.responses_per_question
        self.per_participant = s1.questions_per_participant
        self.seed = self.config.seed
        self.remainder = s1.remainder
        self.inactive_after_s = s1.inactive_after_minutes * 60
        self.backstop_s = s1.backstop_minutes * 60  # monitoring: read anyway after this long unread
        self.pool_size = s1.pool_size
        self.counterbalance = False
        self.exclude_from = None
        self.checks_needed = s1.checks.needed
        self.on_fail = s1.checks.on_fail

    def item_ids(self) -> list[str]:
        return list(self.questions["question_id"])

    def dataset_settings(self) -> rg.Settings:
        scale = self.config.study1.quality_scale
        return rg.Settings(
            guidelines=GUIDELINES,
            fields=[rg.TextField(name="question", title="Question", use_markdown=False)],
            questions=[
                rg.TextQuestion(
                    name="response",
                    title="Your answer",
                    description="Write the answer you would give, and explain your reasoning.",
                    required=True,
                ),
                rg.RatingQuestion(
                    name="quality",
                    title=QUALITY_TITLE,
                    description=QUALITY_DESCRIPTION,
                    values=list(range(scale.min, scale.max + 1)),
                    required=True,
                ),
            ],
            distribution=rg.TaskDistribution(min_submitted=1),
        )

    def record(self, item_id: str, swapped: bool | None = None) -> rg.Record:
        if checks.is_check(item_id):
            scale = self.config.study1.quality_scale
            return rg.Record(
                id=item_id,
                fields={"question": checks.instruction(item_id, scale.min, scale.max).text()},
            )
        row = self._by_id.loc[item_id]
        return rg.Record(
            id=item_id,
            fields={"question": row["question"]},
        )

    def check_items(self, items: Sequence[str], orders: Mapping[str, bool], key_hash: str) -> list[tuple[str, bool | None]]:
        """``study1.checks.count`` instructed-response items, drawn for this participant."""
        return [(item, None) for item in checks.instructed_ids(self.seed, key_hash, self.config.study1.checks.count)]

    def grade_check(self, item_id: str, values: Mapping[str, Any],
                    answers: Mapping[str, tuple[Mapping[str, Any], bool | None]]) -> bool | None:
        scale = self.config.study1.quality_scale
        return checks.grade_instructed(item_id, values.get("response"), values.get("quality"), scale.min, scale.max)


def answer_problem(values: Mapping[str, Any]) -> str | None:
    """Why a study-1 answer cannot be used (no text but whitespace, no quality rating), or None."""
    text = values.get("response")
    if not isinstance(text, str) or not text.strip():
        return "whitespace-only answer" if isinstance(text, str) else "no answer text"
    quality = values.get("quality")
    if not isinstance(quality, int) or isinstance(quality, bool):
        return "no quality rating"
    return None


def responses_frame(
    spec: Study1Spec, answers: Sequence[tuple[ParticipantState, SubmittedAnswer]], ids: Pseudonyms,
    skip_unusable: bool = False,
) -> pd.DataFrame:
    """``responses.parquet``: one row per submitted answer that counts. An answer that cannot
    be used (:func:`answer_problem`) stops it with the reopen command, or, with
    ``skip_unusable`` (the excluded answers kept for the raw release), is left out."""
    rows: list[dict[str, Any]] = []
    for participant, answer in answers:
        question_id = answer.record_external_id
        text = answer.values.get("response")
        problem = answer_problem(answer.values)
        if problem is not None:
            if skip_unusable:
                continue
            raise CrowdprefError(
                f"the answer of {ids.participant_key(participant.username)} to {question_id} cannot be used "
                f"({problem}): run `crowdpref reopen {question_id} --study STUDY.yaml` to "
                "collect it again"
            )
        rows.append(
            {
                "response_id": ids.response_id(question_id, participant.username),
                "question_id": question_id,
                "category": spec._by_id.loc[question_id, "category"],
                "participant_key": ids.participant_key(participant.username),
                "source": participant.source,
                "text": text.strip(),
                "quality": int(answer.values["quality"]),
                "submitted_at": pd.Timestamp(participant.answered_at[question_id], unit="s", tz="UTC"),
            }
        )
    frame = pd.DataFrame(rows, columns=RESPONSES)
    return frame.sort_values(["question_id", "response_id"]).reset_index(drop=True)


def study1_collection(config: StudyConfig, questions: pd.DataFrame, owner: Any, run_folder: Path,
                      store: Store, finish_url: str | None = None) -> Collection:
    return Collection(Study1Spec(config, questions), owner, run_folder / "study1", store, finish_url)


def open_collection(config: StudyConfig, settings: Any, store: Store | None = None) -> Collection:
    """The study-1 collection for a config on the configured Argilla (reads questions.parquet).
    The first opening records the study's preregistered filter rules in the store
    (:func:`crowdpref.filters.preregister`): aggregation refuses rules changed after that."""
    from crowdpref.account_passwords import AccountPasswords
    from crowdpref.argilla_client import owner_for
    from crowdpref.portal.links import finish_url
    from crowdpref.runfolder import RunFolder, read_parquet

    run = RunFolder.for_study(settings.runs_dir, config.name)
    questions = read_parquet(run.questions, needed_by="run the generate-questions flow first")
    owner = owner_for(settings, passwords=AccountPasswords.from_secrets(settings.secrets_dir))
    store = store or open_store(settings)
    study_paths.remember(store, config)  # the portal finds the config here, wherever it lives
    preregister(store, config.name, config.filters)  # the filter rules as they stand when collection starts
    return study1_collection(config, questions, owner, run.path, store, finish_url(settings, config.name, "study1"))


def export_responses(collection: Collection, run_folder: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """responses.parquet + the validation report (also saved as study1/validation.json)."""
    submitted = collection.submitted_answers()
    # a counted answer discarded in Argilla or holding only whitespace can never be exported:
    # it stops counting (an event says why), its question goes back to the pool, and the
    # collection is not complete after all (ItemsReopened; the next run collects it again)
    reopen_unusable(collection.store, collection.info.id, collection.participants(), submitted, answer_problem,
                    "study 1", "collect-responses")
    answers = collection.collected_answers(submitted)
    report = collection.validation_report(answers)
    ids = Pseudonyms(run_folder / "private")
    report["checks"] = checks.checks_report(collection.participants(), ids.participant_key)
    write_json(report, collection.folder / "validation.json")
    if not report["valid"]:
        raise CrowdprefError(
            f"study 1 export refused: {len(report['anomalies'])} anomalies (see "
            f"{collection.folder / 'validation.json'}), first: {report['anomalies'][0]}"
        )
    frame = responses_frame(collection.spec, answers, ids)  # type: ignore[arg-type]
    _key_truth_by_response(run_folder / "private", ids)
    excluded = [(p, a) for p, a in submitted if a.record_external_id in p.excluded]
    write_parquet(responses_frame(collection.spec, excluded, ids, skip_unusable=True),  # type: ignore[arg-type]
                  run_folder / EXCLUDED_RESPONSES)
    s1 = collection.spec.config.study1  # type: ignore[attr-defined]
    write_participants(run_folder, "study1", participants_frame(
        "study1", collection.participants(), ids.participant_key, s1.too_fast_seconds, s1.checks.count > 0,
        collection.store.onboarding_records(collection.info.id), collection.store.key_hash_of(collection.info.id)))
    write_parquet(frame, run_folder / "responses.parquet")
    return frame, report


def _key_truth_by_response(private_dir: Path, ids: Pseudonyms) -> None:
    """The simulated crowd's truth (by username and question) keyed by response_id, for
    study 2's simulated raters and aggregation's check against the truth. Stays private."""
    source = private_dir / "crowd-truth-study1.parquet"
    if not source.exists():
        return
    truth = pd.read_parquet(source)
    truth["response_id"] = [ids.response_id(item, user) for item, user in zip(truth["item_id"], truth["username"])]
    write_parquet(truth[["response_id", "kind", "hidden_quality"]], private_dir / "crowd-truth-responses.parquet")
