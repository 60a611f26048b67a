"""Cheap work-quality signals, computed from what the study already holds (no network, no
model): time on task per participant (both studies) and flags on study-1 answers.

Time on task. Argilla records only when a response was last written (its ``updated_at``,
stored as :attr:`crowdpref.store.Assignment.submitted_at`), not when a participant opened a
record, so the time spent on an item is not known. What is known is the time BETWEEN
submissions: here an item's time is the gap since the participant's previous submission, the
first counted from their claim (:attr:`~crowdpref.store.ParticipantState.claimed_at`). A
participant who fills in several items and submits them in one bulk action has gaps of about
0 s for all but the first of them, so a low median is a reason to look, not a verdict.

Answer flags. Per study-1 answer: empty of content (no real words), copied (the same text as
another answer, after normalisation) and near-duplicate (another participant's answer to the
same question with a few edits). Flags are for the study team to review; nothing is dropped.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from rapidfuzz import fuzz
from rapidfuzz.process import cdist

from crowdpref.contracts import ANSWER_FLAGS
from crowdpref.errors import CrowdprefError
from crowdpref.store import EXCLUDED, SUBMITTED, ParticipantState

# --- time on task ------------------------------------------------------------------------------
TIME_ON_TASK = ["username", "source", "status", "items_submitted", "median_seconds_per_item", "min_seconds",
                "too_fast"]
"""Columns of :func:`time_on_task`: items_submitted counts study items (never checks);
median_seconds_per_item and min_seconds are over those items (NaN when none was submitted);
too_fast is True when the median is below the study's threshold."""


def _never_a_check(_item_id: str) -> bool:
    return False


def item_seconds(participant: ParticipantState,
                 is_check: Callable[[str], bool] = _never_a_check) -> list[float]:
    """Seconds per submitted study item (an answer excluded later for failed checks was
    submitted too), in submission order: the gap since the previous
    submission (a check's submission included, so the time spent on a check is not counted
    for the item after it), the first counted from the claim. Check items get no time of
    their own. A submission before the claim (Argilla's clock behind the store's) counts as
    0 s and the next gap still starts from the claim. Submitted items without a submission
    time are left out."""
    done = sorted((a.submitted_at, a.item_id) for a in participant.assignments
                  if a.status in (SUBMITTED, EXCLUDED) and a.submitted_at is not None)
    seconds: list[float] = []
    previous = participant.claimed_at
    for at, item_id in done:
        if not is_check(item_id):
            seconds.append(max(0.0, at - previous))
        previous = max(previous, at)
    return seconds


def time_on_task(participants: Sequence[ParticipantState], too_fast_seconds: float,
                 is_check: Callable[[str], bool] = _never_a_check) -> pd.DataFrame:
    """One row per participant (columns :data:`TIME_ON_TASK`, by ``username``, which the
    caller must replace with a pseudonymous key before showing it anywhere), sorted by
    username. ``too_fast`` is ``median_seconds_per_item < too_fast_seconds``; False when
    nothing was submitted, and never with a threshold of 0 (the flag is off)."""
    if not math.isfinite(too_fast_seconds) or too_fast_seconds < 0:
        raise CrowdprefError(f"too_fast_seconds must be a number >= 0 (got {too_fast_seconds!r}): "
                             f"set study1/study2 too_fast_seconds in the study config")
    rows = []
    for p in sorted(participants, key=lambda p: p.username):
        seconds = item_seconds(p, is_check)
        median = statistics.median(seconds) if seconds else math.nan
        rows.append({
            "username": p.username,
            "source": p.source,
            "status": p.status,
            "items_submitted": sum(1 for a in p.assignments
                                   if a.status in (SUBMITTED, EXCLUDED) and not is_check(a.item_id)),
            "median_seconds_per_item": median,
            "min_seconds": min(seconds) if seconds else math.nan,
            "too_fast": bool(seconds) and median < too_fast_seconds,
        })
    frame = pd.DataFrame(rows, columns=TIME_ON_TASK)
    return frame.astype({"items_submitted": "int64", "median_seconds_per_item": "float64",
                         "min_seconds": "float64", "too_fast": "bool"})


def time_on_task_rows(frame: pd.DataFrame, key_of: Callable[[str], str]) -> list[dict[str, object]]:
    """:func:`time_on_task` as table rows for an artifact: ``participant_key`` (``key_of``
    of the username) instead of the username, seconds rounded to 0.1 s (None when nothing was
    submitted); too-fast participants first, then by key."""
    rows: list[dict[str, object]] = [
        {"participant_key": key_of(r.username), "source": r.source, "status": r.status,
         "items_submitted": int(r.items_submitted),
         "median_seconds_per_item": _seconds(r.median_seconds_per_item),
         "min_seconds": _seconds(r.min_seconds), "too_fast": bool(r.too_fast)}
        for r in frame.itertuples(index=False)
    ]
    return sorted(rows, key=lambda r: (not r["too_fast"], str(r["participant_key"])))


def _seconds(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 1)


def describe_time_on_task(frame: pd.DataFrame, too_fast_seconds: float) -> str:
    """One line for a study team, e.g. "3 of 12 participants with submissions below 20 s per
    item (median)"."""
    timed = frame["median_seconds_per_item"].notna()
    n_timed, n_all = int(timed.sum()), len(frame)
    waiting = f"; {n_all - n_timed} without submissions yet" if n_all > n_timed else ""
    if too_fast_seconds <= 0:
        return f"{n_timed} participants with submissions; too-fast flag off (too_fast_seconds: 0){waiting}"
    return (f"{int(frame['too_fast'].sum())} of {n_timed} participants with submissions below "
            f"{too_fast_seconds:g} s per item (median){waiting}")


# --- study-1 answer flags ------------------------------------------------------------------------
MIN_SHARED_WORDS = 5
"""Answers of other participants are compared (copies, near-duplicates) only when both have at
least this many content words: short answers such as "I would apologise." coincide by chance.
A participant's own answers to different questions are compared at any length."""

NEAR_DUPLICATE_SCORE = 90.0
"""Two answers to the same question are near-duplicates at or above this similarity (0-100):
the higher of rapidfuzz's ``ratio`` (small edits) and ``token_sort_ratio`` (reordered words)
on the normalised texts. ``token_set_ratio`` is not used: it scores an answer whose words are
a subset of a longer one as 100."""

FILLER_WORDS = frozenset({
    "idk", "dunno", "asdf", "qwerty", "lol", "blah", "hmm", "hm", "um", "uh", "na", "nil", "test",
    "testing", "lorem", "ipsum",
})
"""Words that carry no answer on their own (an answer made only of these is empty of content)."""

NON_ANSWERS = frozenset({
    "i don t know", "i dont know", "i do not know", "don t know", "dont know", "no idea", "no comment",
    "not sure", "no answer", "nothing to say", "pass", "skip",
})
"""Whole answers (after normalisation) that decline to answer: empty of content."""

_KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")

_NEEDED = ("response_id", "question_id", "participant_key", "text")


def normalise(text: str) -> str:
    """Text as compared: Unicode NFKC, case-folded, every run of characters that are not
    letters or digits replaced by one space, trimmed ("I'd  SAY: no!" -> "i d say no")."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[\W_]+", " ", folded).split())


def _is_mash(word: str) -> bool:
    """A keyboard run of 3+ letters ("sdfg", "qwer") or one character repeated ("xxx")."""
    if len(word) >= 3 and (len(set(word)) == 1 or any(word in row for row in _KEYBOARD_ROWS)):
        return True
    return False


def content_words(text: str) -> int:
    """Words that can carry an answer: tokens of the normalised text with at least 2
    characters and a letter, that are neither filler (:data:`FILLER_WORDS`) nor keyboard
    mashing. 0 when the whole answer is a non-answer (:data:`NON_ANSWERS`)."""
    norm = normalise(text)
    if norm in NON_ANSWERS:
        return 0
    return sum(1 for w in norm.split()
               if len(w) >= 2 and any(c.isalpha() for c in w) and w not in FILLER_WORDS and not _is_mash(w))


def _check_responses(responses: pd.DataFrame) -> None:
    missing = [c for c in _NEEDED if c not in responses.columns]
    if missing:
        raise CrowdprefError(f"responses.parquet lacks columns {missing}: re-export study 1 (collect-responses)")
    if responses["response_id"].duplicated().any():
        dup = responses.loc[responses["response_id"].duplicated(), "response_id"].iloc[0]
        raise CrowdprefError(f"responses.parquet holds response_id {dup} twice: re-export study 1 (collect-responses)")
    not_text = ~responses["text"].map(lambda t: isinstance(t, str))
    if not_text.any():
        rid = responses.loc[not_text, "response_id"].iloc[0]
        raise CrowdprefError(f"responses.parquet: the text of {rid} is not a string: re-export study 1 "
                             f"(collect-responses)")


def answer_flags(responses: pd.DataFrame) -> pd.DataFrame:
    """Flags per study-1 answer (columns :data:`crowdpref.contracts.ANSWER_FLAGS`, one row per
    response, sorted by question_id then response_id) from ``responses.parquet``'s columns
    response_id, question_id, participant_key and text.

    - ``empty_of_content``: no content words (:func:`content_words`): "idk", "...", "n/a",
      "asdf", "I don't know". A short real answer ("Apologise.", "No") is not empty.
    - ``copied`` / ``copy_of``: another answer has the same normalised text - another
      participant's (both of at least :data:`MIN_SHARED_WORDS` content words), or the same
      participant's to another question (any length); ``copy_of`` lists those response ids,
      comma-separated, in order (a string column, missing when not copied). Answers empty of
      content are never copies.
    - ``near_duplicate_of`` / ``near_duplicate_score``: the most similar other participant's
      answer to the same question (ties: the smaller response id) when the similarity is at
      least :data:`NEAR_DUPLICATE_SCORE` and the texts are not the same (that is ``copied``);
      both of at least :data:`MIN_SHARED_WORDS` content words. None / NaN otherwise.
    - ``flagged``: any of the three.
    """
    _check_responses(responses)
    frame = responses[list(_NEEDED)].sort_values(["question_id", "response_id"]).reset_index(drop=True)
    norm = frame["text"].map(normalise)
    words = frame["text"].map(content_words).astype("int64")
    empty = words == 0
    long_enough = words >= MIN_SHARED_WORDS
    ids = frame["response_id"].tolist()
    keys = frame["participant_key"].tolist()
    questions = frame["question_id"].tolist()

    copy_of: list[str | None] = [None] * len(frame)
    candidates = frame.index[~empty]
    for _, group in norm[candidates].groupby(norm[candidates], sort=False):
        rows = group.index.tolist()
        if len(rows) < 2:
            continue
        for i in rows:
            same = [ids[j] for j in rows if j != i and (
                (keys[j] == keys[i] and questions[j] != questions[i])
                or (keys[j] != keys[i] and long_enough[i] and long_enough[j]))]
            if same:
                copy_of[i] = ",".join(sorted(same))

    near_of: list[str | None] = [None] * len(frame)
    near_score = np.full(len(frame), np.nan)
    comparable = frame.index[long_enough]
    for _, group in frame.loc[comparable].groupby("question_id", sort=False):
        rows = group.index.to_numpy()
        if len(rows) < 2:
            continue
        texts = norm[rows].tolist()
        scores = np.maximum(cdist(texts, texts, scorer=fuzz.ratio, dtype=np.float64),
                            cdist(texts, texts, scorer=fuzz.token_sort_ratio, dtype=np.float64))
        for a, i in enumerate(rows):
            best: tuple[float, str] | None = None
            for b, j in enumerate(rows):
                if keys[j] == keys[i] or texts[a] == texts[b] or scores[a, b] < NEAR_DUPLICATE_SCORE:
                    continue
                if best is None or (-scores[a, b], ids[j]) < (-best[0], best[1]):
                    best = (float(scores[a, b]), ids[j])
            if best is not None:
                near_score[i], near_of[i] = best

    out = pd.DataFrame({
        "response_id": frame["response_id"],
        "question_id": frame["question_id"],
        "participant_key": frame["participant_key"],
        "content_words": words,
        "empty_of_content": empty.astype(bool),
        "copied": pd.Series([c is not None for c in copy_of], dtype=bool),
        "copy_of": pd.Series(copy_of, dtype="string"),
        "near_duplicate_of": pd.Series(near_of, dtype="string"),
        "near_duplicate_score": near_score,
    })
    out["flagged"] = out["empty_of_content"] | out["copied"] | out["near_duplicate_of"].notna()
    return out[ANSWER_FLAGS]


def flag_counts(flags: pd.DataFrame) -> dict[str, int]:
    """Answers per flag, and in all: ``answers``, ``empty_of_content``, ``copied``,
    ``near_duplicate``, ``flagged`` (any flag)."""
    return {
        "answers": len(flags),
        "empty_of_content": int(flags["empty_of_content"].sum()),
        "copied": int(flags["copied"].sum()),
        "near_duplicate": int(flags["near_duplicate_of"].notna().sum()),
        "flagged": int(flags["flagged"].sum()),
    }


def flagged_rows(flags: pd.DataFrame, responses: pd.DataFrame, max_chars: int = 80) -> list[dict[str, object]]:
    """The flagged answers of :func:`answer_flags` as table rows for an artifact: ids, the
    flags in words, the other response ids and the answer's text cut to ``max_chars``
    characters (the study team sees the texts in Argilla anyway), in the flags' order."""
    text = dict(zip(responses["response_id"], responses["text"]))
    rows: list[dict[str, object]] = []
    for r in flags[flags["flagged"]].itertuples(index=False):
        words = [name for name, on in (("empty of content", r.empty_of_content), ("copied", r.copied),
                                       ("near-duplicate", isinstance(r.near_duplicate_of, str))) if on]
        answer = str(text.get(r.response_id, ""))
        rows.append({
            "response_id": r.response_id, "question_id": r.question_id, "participant_key": r.participant_key,
            "flags": ", ".join(words), "copy_of": r.copy_of if isinstance(r.copy_of, str) else "",
            "near_duplicate_of": r.near_duplicate_of if isinstance(r.near_duplicate_of, str) else "",
            "near_duplicate_score": None if math.isnan(r.near_duplicate_score) else round(r.near_duplicate_score, 1),
            "text": answer if len(answer) <= max_chars else answer[: max_chars - 3] + "...",
        })
    return rows


def describe_flags(counts: dict[str, int]) -> str:
    """One line from :func:`flag_counts`, e.g. "5 of 120 answers flagged: 2 empty of content,
    2 copied, 1 near-duplicate"."""
    return (f"{counts['flagged']} of {counts['answers']} answers flagged: {counts['empty_of_content']} empty of "
            f"content, {counts['copied']} copied, {counts['near_duplicate']} near-duplicate")
