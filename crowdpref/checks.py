"""Quality checks that count: items mixed into every participant's batch and graded
automatically, so a paid study knows whose work to keep.

- **Study 1, instructed-response items** (``study1.checks``): the text tells the participant
  exactly what to write (one word) and which rating to give; passed when the answer holds that
  word and the rating is the one asked for. The word and the rating are drawn per participant
  from :data:`INSTRUCTED_WORDS`, so participants cannot pass answers around.
- **Study 2, gold pairs** (``study2.checks.gold_pairs``): a question with one clearly good and
  one clearly bad answer (off-topic, rude, or empty of reasoning) from the curated
  :data:`GOLD_PAIRS`; passed when the rating prefers the good answer (any strength).
- **Study 2, repeated pairs** (``study2.checks.repeated_pairs``): one of the rater's own pairs
  shown again in the opposite A/B order; passed when the two ratings, turned to the same
  orientation, differ by at most ``repeat_tolerance`` points.

A check is an item of the participant's batch in the study store (held until answered, so
the participant finishes only once it is answered; deleted by a release), with an id that
starts with :data:`CHECK_PREFIX` and is never an item of the collection: it never counts
towards R and never reaches responses.parquet or ratings.parquet. What a check asks is derived
from its id alone (a hash), so grading needs nothing but the id and the answer; the id itself
says nothing a participant could use (``check-i-<hash>``, ``check-g-<hash>``,
``check-r-<pair id>``).

The verdict (:func:`verdict`): ``passed`` once enough checks are passed, ``failed`` once too
many are failed for that to happen, else ``unanswered``. Argilla shows every participant
their queue in its own shuffled order, so checks sit at a random place among the items.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdpref.aggregation import unswap
from crowdpref.store import FAILED, PASSED, UNANSWERED, ParticipantState

CHECK_PREFIX = "check-"
INSTRUCTED, GOLD, REPEAT = "i", "g", "r"

INSTRUCTED_WORDS = (
    "lantern", "harbour", "violet", "pebble", "orchard", "compass", "meadow", "saffron",
    "walnut", "glacier", "ribbon", "thistle", "canyon", "marble", "juniper", "falcon",
)
"""The words an instructed-response item asks for (common, unambiguous, not social-reasoning
vocabulary, so a real answer to a question does not contain one by chance)."""

INSTRUCTED_TEXT = (
    "This item checks that the instructions are being read; it is not a question to answer. "
    "In the answer box, write only the word \"{word}\". Then rate this item {rating}."
)


@dataclass(frozen=True)
class GoldPair:
    """A question with a clearly better and a clearly worse answer."""

    question: str
    category: str
    good: str
    bad: str
    bad_kind: str  # off-topic | rude | no-reasoning


GOLD_PAIRS: tuple[GoldPair, ...] = (
    GoldPair(
        "My friend cancelled our plans at the last minute for the third time. How should I bring it up?",
        "conflict-resolution",
        "I would tell them calmly that I was disappointed, without accusing them, and ask whether "
        "something is going on for them. Saying how it felt and listening to their side gives us "
        "a chance to fix the pattern instead of letting resentment grow.",
        "The weather in the mountains changes quickly, so always pack a rain jacket and check the "
        "forecast before you leave.",
        "off-topic",
    ),
    GoldPair(
        "A new colleague keeps interrupting me in meetings. What would you do?",
        "communication-skills",
        "I would talk to them privately, mention a specific moment, and say I would like to finish "
        "my points. They may not notice they do it, so raising it kindly and early is more likely "
        "to change things than staying quiet or snapping in the meeting.",
        "Tell that idiot to shut up in front of everyone. People like that are pathetic and deserve "
        "to be humiliated.",
        "rude",
    ),
    GoldPair(
        "My neighbour's dog barks all night and I cannot sleep. How should I handle it?",
        "social-norms",
        "I would knock on their door at a reasonable hour and explain that the barking keeps me "
        "awake, since they may be out or asleep and simply not know. Most people want to be good "
        "neighbours, and a friendly first conversation leaves room for other steps later.",
        "Whatever.",
        "no-reasoning",
    ),
    GoldPair(
        "A close friend told me a joke that I found hurtful. Should I say something?",
        "empathy",
        "Yes, gently. I would tell them the joke stung and why, assuming they did not mean harm. "
        "Friends usually want to know when they hurt us, and saying it honestly protects the "
        "friendship better than quietly pulling away.",
        "Bananas are a good source of potassium and are easy to carry as a snack.",
        "off-topic",
    ),
    GoldPair(
        "My sister and I disagree about how to care for our ageing parents. How can we decide together?",
        "negotiation-strategies",
        "I would suggest we each list what matters most to us and to our parents, include our "
        "parents in the conversation, and look for a plan we can try for a few months and revisit. "
        "Focusing on shared goals makes it less of a contest about who is right.",
        "Just do what you want, her opinion does not matter, she is clueless anyway.",
        "rude",
    ),
    GoldPair(
        "Someone at work took credit for my idea in front of our manager. What should I do?",
        "ethics",
        "I would speak to the colleague first and say I noticed the idea was presented as theirs, "
        "then follow up with the manager by sharing my earlier notes. Staying factual and calm "
        "protects my work without turning it into a public fight.",
        "ok",
        "no-reasoning",
    ),
    # the good answer SHORTER than the bad one: a rater who picks the longer answer fails these,
    # so the gold anchor can tell length from quality (issue 21)
    GoldPair(
        "My flatmate keeps eating my food from the fridge. How do I raise it?",
        "conflict-resolution",
        "I would mention it calmly and suggest labelled shelves, since they may not realise.",
        "Honestly, your flatmate is a selfish idiot and a complete loser, and there is no point in "
        "talking to someone that pathetic. Hide all your food, put a lock on the fridge, leave "
        "angry notes everywhere and make their life as unpleasant as possible until they finally "
        "get the message and move out for good.",
        "rude",
    ),
    GoldPair(
        "A friend forgot my birthday. Should I tell them I was hurt?",
        "empathy",
        "I would say so lightly, because it lets them make it up without guilt.",
        "Absolutely not, and stop wasting your time on people like that. Anyone who forgets a "
        "birthday is a selfish jerk, so tell everyone you know how pathetic they are, cut them off "
        "completely and make sure they regret it for a very long time, because they clearly never "
        "cared about you at all.",
        "rude",
    ),
    GoldPair(
        "How do I politely leave a conversation at a party?",
        "social-norms",
        "I would thank them for the chat and say I am off to find a friend, which is kind and clear.",
        "Just tell them to shut up and walk away, nobody owes anyone politeness at a party. If they "
        "are boring, they are boring, and it is their own stupid fault for not being interesting "
        "enough to keep your attention, so there is no reason to pretend or waste another minute "
        "of your evening on them.",
        "rude",
    ),
    GoldPair(
        "My teenager rolls their eyes whenever I give advice. What can I do?",
        "communication-skills",
        "I would ask questions and listen more, since they open up when they feel heard.",
        "Teenagers are all lazy, ungrateful and clueless, and they never listen to anyone, so there "
        "is really no point in trying to talk to them at all. Just take their phone away, shout "
        "until they do what they are told and remind them every day what a damn disappointment "
        "they are to the whole family.",
        "rude",
    ),
)
"""The curated gold pairs shipped with crowdpref (our own wording). In some the good answer is
the longer one, in the others the shorter: a rater who prefers longer answers fails about a
third of them, so gold says something about a rater beyond agreement."""


def is_check(item_id: str) -> bool:
    """True for a quality-check item (never an item of the collection)."""
    return item_id.startswith(CHECK_PREFIX)


def check_kind(item_id: str) -> str:
    """``i`` (instructed), ``g`` (gold) or ``r`` (repeated pair)."""
    return item_id[len(CHECK_PREFIX)]


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()


def _number(item_id: str, what: str) -> int:
    return int(_digest(item_id, what)[:12], 16)


# --- study 1: instructed-response items ------------------------------------------------------------
@dataclass(frozen=True)
class Instruction:
    word: str
    rating: int

    def text(self) -> str:
        return INSTRUCTED_TEXT.format(word=self.word, rating=self.rating)


def _draw(kind: str, parts: tuple[object, ...], count: int, feature: Callable[[str], object],
          distinct: int) -> list[str]:
    """``count`` check ids of ``kind`` drawn from a hash of ``parts``, whose ``feature`` (the
    word, the gold question) differs while ``distinct`` values last."""
    ids: list[str] = []
    seen: set[object] = set()
    n = 0
    while len(ids) < count:
        item = f"{CHECK_PREFIX}{kind}-{_digest(*parts, n)[:16]}"
        n += 1
        value = feature(item)
        if value not in seen or len(seen) >= distinct:
            seen.add(value)
            ids.append(item)
    return ids


def instructed_ids(seed: int, key_hash: str, count: int) -> list[str]:
    """The ids of a participant's ``count`` instructed-response items (distinct words)."""
    return _draw(INSTRUCTED, (seed, key_hash), count, lambda item: instruction(item, 1, 5).word,
                 len(INSTRUCTED_WORDS))


def instruction(item_id: str, low: int, high: int) -> Instruction:
    """What an instructed-response item asks: a word, and a rating in low..high that is not
    the scale's most common answer by habit (the middle or top), when the scale allows."""
    word = INSTRUCTED_WORDS[_number(item_id, "word") % len(INSTRUCTED_WORDS)]
    values = list(range(low, high + 1))
    unusual = [v for v in values if v not in (high, (low + high) // 2, (low + high + 1) // 2)] or values
    return Instruction(word, unusual[_number(item_id, "rating") % len(unusual)])


_WORD = re.compile(r"[a-z]+")


def grade_instructed(item_id: str, answer: str | None, rating: object, low: int, high: int) -> bool:
    """Passed when the answer contains the asked word (any case, surrounding punctuation
    ignored) in at most a few words, and the rating is the one asked for."""
    asked = instruction(item_id, low, high)
    words = _WORD.findall(str(answer or "").lower())
    return asked.word in words and len(words) <= 5 and rating == asked.rating


# --- study 2: gold and repeated pairs ------------------------------------------------------------------
def gold_ids(seed: int, key_hash: str, count: int) -> list[str]:
    """The ids of a rater's ``count`` gold pairs (distinct gold questions while they last)."""
    return _draw(GOLD, (seed, key_hash, "gold"), count, gold_index, len(GOLD_PAIRS))


def gold_index(item_id: str) -> int:
    return _number(item_id, "gold") % len(GOLD_PAIRS)


def gold_good_is_a(item_id: str) -> bool:
    """Whether the gold pair shows its good answer as A (a hash of the id: half the time)."""
    return _number(item_id, "side") % 2 == 0


def grade_gold(item_id: str, rating: object, scale_points: int) -> bool:
    """Passed when the rating (1 = A ... K = B) is on the good answer's side."""
    if not isinstance(rating, int):
        return False
    prefers_a = 2 * rating < scale_points + 1
    return prefers_a == gold_good_is_a(item_id)


def repeat_id(pair_id: str) -> str:
    return f"{CHECK_PREFIX}{REPEAT}-{pair_id}"


def repeated_pair(item_id: str) -> str:
    """The pair a repeated-pair check shows again."""
    return item_id[len(CHECK_PREFIX) + 2:]


def repeat_choice(seed: int, key_hash: str, items: Sequence[str], count: int) -> list[str]:
    """Which of the rater's pairs are shown a second time (seeded per rater)."""
    ranked = sorted(items, key=lambda item: _digest(seed, key_hash, "repeat", item))
    return ranked[:count]


def grade_repeat(first: object, first_swapped: bool, second: object, second_swapped: bool,
                 scale_points: int, tolerance: int) -> bool:
    """Passed when the two ratings of the same pair, turned to the pair's fixed orientation,
    differ by at most ``tolerance`` points."""
    if not isinstance(first, int) or not isinstance(second, int):
        return False
    u1, u2 = unswap([first, second], [first_swapped, second_swapped], scale_points)
    return bool(abs(u1 - u2) <= tolerance)


# --- the verdict ---------------------------------------------------------------------------------------
def verdict(total: int, results: Mapping[str, bool], needed: int) -> str | None:
    """``passed`` when at least ``needed`` checks are passed; ``failed`` when that can no longer
    happen (too many failed); ``unanswered`` otherwise; None when the batch has no checks."""
    if total == 0:
        return None
    passed = sum(map(bool, results.values()))
    if passed >= needed:
        return PASSED
    if passed + (total - len(results)) < needed:
        return FAILED
    return UNANSWERED


def checks_report(participants: Sequence[ParticipantState], participant_key: Callable[[str], str]) -> dict[str, Any]:
    """The checks of a collection for its validation report and artifacts: verdict counts,
    excluded participants and items, and the pseudonymous keys of those who failed."""
    graded = [p for p in participants if p.check_verdict]
    failed = [p for p in graded if p.check_verdict == FAILED]
    excluded = [p for p in participants if p.excluded_at is not None]
    return {
        "participants_graded": len(graded),
        "passed": sum(p.check_verdict == PASSED for p in graded),
        "failed": len(failed),
        "unanswered": sum(p.check_verdict == UNANSWERED for p in graded),
        "checks_answered": sum(p.checks_answered for p in participants),
        "checks_passed": sum(p.checks_passed for p in participants),
        "excluded_participants": len(excluded),
        "excluded_items": sum(len(p.excluded) for p in excluded),
        "failed_participant_keys": sorted(participant_key(p.username) for p in failed),
    }


def gold_frame(graded: Iterable[tuple[str, str, bool]]) -> pd.DataFrame:
    """The ``gold`` input of :func:`crowdpref.aggregation.reliability.fit_raters` /
    :func:`crowdpref.aggregation.aggregate` from graded checks ``(rater_key, check item id,
    passed)`` (the study store's ``check_graded`` events of study 2, keyed like
    ratings.parquet's rater_key; :func:`crowdpref.study2.gold_outcomes`): only gold pairs
    (:func:`check_kind` ``g``) are kept; instructed and repeated checks say nothing about a
    rater's sign."""
    rows = [(str(key), bool(passed)) for key, item, passed in graded
            if is_check(str(item)) and check_kind(str(item)) == GOLD]
    return pd.DataFrame(rows, columns=["rater_key", "passed"]).astype({"passed": bool})
