"""A simulated crowd: participants who arrive over time, claim their work through the same
:meth:`~crowdpref.collection.Collection.claim` the participant portal calls, and work through
the annotator API a person's browser uses (token login, the pending queue, bulk responses), so
the whole pipeline can run - and be tested - without recruiting anyone. It only works on studies
that say ``participants: simulated`` (:func:`check_may_play`), and every participant it brings
is recorded with the source ``simulated``.

Behaviour is deterministic for a seed and a participant key, so a participant who "dropped out"
stays gone across visits, and a rerun answers exactly what is still pending:

- a share ``never_start_rate`` claim their batch and never open it;

- a share ``dropout_rate`` of participants answer only some of their items, then go quiet;
- a share ``low_effort_rate`` of answers are careless one-liners;
- a share ``offensive_rate`` of answers are rude (so screening has something to find);
- every answer gets a **hidden quality** in [0, 1], kept in a private truth file, that study 2's
  simulated raters use and that aggregation is checked against. Nothing of it is shown to
  Argilla or published;
- the crowd is never told which records are quality checks or their answers: it reads what
  Argilla shows. Careful participants follow an instruction they read in a question (study 1:
  :func:`read_instruction`) and judge answers they did not write by reading them
  (:func:`perceived_quality`: gold pairs); a share ``careless_rate`` of writers never read
  instructions, and ``random_clicker_rate`` of raters click at random, so they fail checks by
  chance. A rater's view of a pair is stable: seeing the same two answers again (a repeated
  pair, in the other order) gives the same judgement plus a little noise.
- onboarding (:mod:`crowdpref.onboarding`): the same people are careless there. Someone who
  never reads instructions (a careless writer, a random clicker) guesses among each practice
  and quiz item's options; a careful one reads and answers right, except in a moment of low
  effort (``low_effort_rate``), when they guess too (:func:`quiz_answers`,
  :func:`practice_answers`, :func:`walk_onboarding`). Their pass rate follows from that and from
  the quiz (options, pass mark, attempts); no pass rate is handed to them.

Offline, answers come from phrase banks below (our own wording); with ``crowd.llm`` and an
OpenAI-compatible endpoint configured, an LLM writes them instead.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from crowdpref.argilla_client import AnnotatorSession
from crowdpref.checks import is_check
from crowdpref.collection import Collection
from crowdpref.config import CrowdConfig, StudyConfig
from crowdpref.onboarding import ChoiceItem, OnboardingConfig, grade, onboarding_of, passes
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.runfolder import write_parquet
from crowdpref.settings import Settings
from crowdpref.simulation.arrivals import Arrival, DirectDoor, Door, ScreenedOut
from crowdpref.store import ParticipantState

TRUTH_COLUMNS = ["username", "item_id", "kind", "hidden_quality", "text"]

# --- phrase banks: parts of a considered answer ------------------------------------------
ACKNOWLEDGE = [
    "This sounds like a genuinely uncomfortable spot to be in.",
    "I can see why this situation would feel confusing.",
    "It makes sense that this would be on your mind.",
    "Situations like this are harder than they look from the outside.",
    "Both sides probably feel they are being reasonable here.",
]
ACTION = [
    "I would start by talking to the person privately and calmly, without blaming them.",
    "I would first ask a few open questions to understand how they see it.",
    "I would take a moment before reacting, then say honestly how it affected me.",
    "I would look for a small, concrete step both of us could agree on.",
    "I would acknowledge my own part in it before raising theirs.",
]
REASON = [
    "because people tend to get defensive when they feel accused, and then nobody listens.",
    "because understanding their reasons usually changes what the best response is.",
    "since being honest early tends to prevent resentment from building up.",
    "because a shared solution is more likely to last than one imposed by one side.",
    "since showing that I can admit mistakes makes it easier for them to do the same.",
]
PERSPECTIVE = [
    "It also helps to remember that their background might lead them to see this differently.",
    "Cultural expectations can differ a lot here, so I would not assume bad intent.",
    "If it still does not work, it is fine to set a boundary kindly and clearly.",
    "Whatever happens, treating them with respect keeps the relationship open.",
]
LOW_EFFORT = [
    "idk, just ignore it.",
    "Depends.",
    "Just tell them.",
    "not sure, whatever works",
    "Do what feels right.",
]
RUDE = [
    "Honestly, people who act like that are stupid idiots and you should tell them to shut up.",
    "Who cares, they are a bunch of losers. Damn them and move on.",
    "That person sounds like a pathetic jerk, I would just insult them back.",
]
RATING_SPREAD = 6.0  # scale points per unit of hidden-quality difference
QUALITY_RATING_WEIGHTS = {1: 0.02, 2: 0.05, 3: 0.13, 4: 0.45, 5: 0.35}  # mean ~4.06, median 4
VIEW_NOISE = 0.25  # share of rater_noise that is new at each viewing of the same pair

_INSTRUCTION_WORD = re.compile(r"write only the word\W+([a-z]+)", re.IGNORECASE)
_INSTRUCTION_RATING = re.compile(r"rate this item (\d+)", re.IGNORECASE)
_REASONING = ("because", "since", "instead of", "more likely", "so that", "which")
_RUDE_WORDS = ("idiot", "stupid", "shut up", "pathetic", "loser", "jerk", "clueless", "damn")


def read_instruction(text: str) -> tuple[str | None, int | None]:
    """What a careful reader takes from an instruction inside a question: the word it asks
    them to write and the rating it asks for (None where it asks for nothing)."""
    word = _INSTRUCTION_WORD.search(text)
    rating = _INSTRUCTION_RATING.search(text)
    return (word.group(1) if word else None), (int(rating.group(1)) if rating else None)


def perceived_quality(text: str) -> float:
    """How good a simulated rater finds an answer it did not write (no hidden quality: a
    real person's answer, a gold pair's), from reading it: a considered answer says what the
    writer would do and why, at some length; rudeness and one-word replies count against."""
    lowered = text.lower()
    words = len(text.split())
    score = 0.2
    score += 0.3 * ("i would" in lowered or "i'd" in lowered)
    score += 0.3 * (words >= 25)
    score += 0.2 * any(marker in lowered for marker in _REASONING)
    score -= 0.5 * any(rude in lowered for rude in _RUDE_WORDS)
    return min(1.0, max(0.0, score))


@dataclass(frozen=True)
class ParticipantProfile:
    """How a simulated person goes through onboarding, from the crowd's behaviour: ``careless``
    (never reads instructions: a careless writer in study 1, a random clicker in study 2) and
    ``lapse_rate``, the share of moments a careful person puts in low effort (the crowd's
    ``low_effort_rate``)."""

    careless: bool
    lapse_rate: float


@dataclass(frozen=True)
class OnboardingRun:
    """What a simulated person did in onboarding: their practice answers, their quiz attempts
    (1-based option numbers; they stop at the first pass or when the attempts are used up),
    and whether they passed (True as well when the onboarding has no quiz)."""

    practice: list[int]
    attempts: list[list[int]]
    passed: bool


def _choose(profile: ParticipantProfile, item: ChoiceItem, rng: random.Random) -> int:
    """One answer: someone who does not read (careless, or in a lapse) guesses among the
    options; a careful reader answers what the onboarding taught."""
    if profile.careless or rng.random() < profile.lapse_rate:
        return rng.randint(1, len(item.options))
    return item.answer


def quiz_answers(profile: ParticipantProfile, items: Sequence[ChoiceItem], rng: random.Random) -> list[int]:
    """A simulated person's answers to the quiz ``items`` (1-based option numbers)."""
    return [_choose(profile, item, rng) for item in items]


def practice_answers(profile: ParticipantProfile, items: Sequence[ChoiceItem], rng: random.Random) -> list[int]:
    """A simulated person's answers to the practice ``items`` (1-based option numbers): the same
    behaviour as in the quiz (practice never counts)."""
    return [_choose(profile, item, rng) for item in items]


def walk_onboarding(profile: ParticipantProfile, onboarding: OnboardingConfig,
                    rng: Callable[[str], random.Random]) -> OnboardingRun:
    """A simulated person's whole onboarding, pure: the practice, then quiz attempts until one
    passes or the attempts are used up. ``rng(part)`` gives the random source of each part
    (``practice``, ``quiz-1``, ``quiz-2`` ...), so a person answers the same way on every run."""
    practice = practice_answers(profile, onboarding.practice, rng("practice"))
    quiz = onboarding.quiz
    if quiz is None:
        return OnboardingRun(practice, [], True)
    attempts: list[list[int]] = []
    for n in range(1, quiz.attempts + 1):
        answers = quiz_answers(profile, quiz.items, rng(f"quiz-{n}"))
        attempts.append(answers)
        if passes(quiz, grade(quiz.items, answers)):
            return OnboardingRun(practice, attempts, True)
    return OnboardingRun(practice, attempts, False)


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(frozen=True)
class WrittenAnswer:
    text: str
    kind: str  # "considered" | "low_effort" | "offensive"
    hidden_quality: float


def template_answer(rng: random.Random, crowd: CrowdConfig) -> WrittenAnswer:
    """An answer from the phrase banks; a fuller, reasoned answer gets a higher hidden quality."""
    roll = rng.random()
    if roll < crowd.offensive_rate:
        return WrittenAnswer(rng.choice(RUDE), "offensive", round(rng.uniform(0.0, 0.1), 3))
    if roll < crowd.offensive_rate + crowd.low_effort_rate:
        return WrittenAnswer(rng.choice(LOW_EFFORT), "low_effort", round(rng.uniform(0.05, 0.25), 3))
    parts = [rng.choice(ACTION)]
    quality = 0.35
    if rng.random() < 0.75:
        parts[0] = parts[0].rstrip(".") + " " + rng.choice(REASON)
        quality += 0.25
    if rng.random() < 0.6:
        parts.insert(0, rng.choice(ACKNOWLEDGE))
        quality += 0.15
    if rng.random() < 0.5:
        parts.append(rng.choice(PERSPECTIVE))
        quality += 0.15
    quality += rng.uniform(-0.05, 0.1)
    return WrittenAnswer(" ".join(parts), "considered", round(min(quality, 1.0), 3))


AnswerWriter = Callable[[str, str, random.Random], WrittenAnswer]


def open_answer_writer(crowd: CrowdConfig, settings: Settings, timeout_s: float = 60.0) -> AnswerWriter | None:
    """The LLM writer when the study asks for one (``crowd.llm``), else None (phrase banks).
    Needs an OpenAI-compatible endpoint in the settings; says so in one line when missing."""
    if not crowd.llm:
        return None
    if not settings.openai_base_url or not settings.openai_model:
        raise ConfigError(
            "crowd.llm is true but no LLM endpoint is configured: set OPENAI_BASE_URL and OPENAI_MODEL "
            "(and OPENAI_API_KEY), or set crowd.llm: false"
        )
    import openai

    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "not-set"
    client = openai.OpenAI(base_url=settings.openai_base_url, api_key=key, timeout=timeout_s, max_retries=2)
    return llm_answer_writer(client, settings.openai_model, crowd, base_url=settings.openai_base_url)


def llm_answer_writer(client: object, model: str, crowd: CrowdConfig, base_url: str = "") -> AnswerWriter:
    """Answers written by an LLM through an ``openai.OpenAI`` client (kind and hidden quality
    are still drawn here, so the truth stays known)."""

    def write(question: str, category: str, rng: random.Random) -> WrittenAnswer:
        planned = template_answer(rng, crowd)
        if planned.kind != "considered":
            return planned
        style = "a careful, empathetic answer with your reasoning" if planned.hidden_quality > 0.6 else "a short, plain answer"
        import openai

        try:
            completion = client.chat.completions.create(  # type: ignore[attr-defined]
                model=model,
                temperature=0.9,
                messages=[
                    {"role": "system", "content": "You are a study participant answering questions about social situations."},
                    {"role": "user", "content": f"Question{f' ({category})' if category else ''}: {question}\n"
                                                f"Write {style}, in 2-4 sentences."},
                ],
            )
        except openai.AuthenticationError:
            raise CrowdprefError(f"the LLM at {base_url} rejected the API key: fix OPENAI_API_KEY") from None
        except openai.APIError as exc:  # connection, timeout, status errors (after the client's retries)
            raise CrowdprefError(
                f"the LLM at {base_url} failed while writing a simulated answer ({exc.__class__.__name__}): "
                "check OPENAI_BASE_URL, or set crowd.llm: false"
            ) from None
        text = (completion.choices[0].message.content or "").strip()
        return WrittenAnswer(text or planned.text, "considered", planned.hidden_quality)

    return write


@dataclass
class CrowdReport:
    arrived: int = 0  # new participants who claimed work at this visit
    finished: int = 0  # participants who got their completion code at this visit
    left: int = 0  # participants who returned the study or let it time out at this visit
    full: bool = False  # an arrival found every item's copies in flight or done
    participants_played: int = 0
    answers_submitted: int = 0
    never_started: list[str] = field(default_factory=list)
    dropouts: list[str] = field(default_factory=list)
    screened_out: int = 0  # newcomers the onboarding quiz turned away at this visit (nothing allocated)
    kinds: dict[str, int] = field(default_factory=dict)


def check_may_play(config: StudyConfig, collection: Collection, force: bool = False) -> None:
    """The guard: the simulated crowd works only on a study that takes simulated participants
    (``participants: simulated``) and whose store holds nobody from another source."""
    if force:
        return
    if config.participants != "simulated":
        raise CrowdprefError(
            f"study '{config.name}' takes real participants ({config.participants}): the simulated crowd "
            "will not log in to it; set participants: simulated in the study config for a simulation"
        )
    others = Counter(p.source for p in collection.participants() if p.source != "simulated")
    if others:
        raise CrowdprefError(
            f"study '{config.name}' already has {sum(others.values())} participants from "
            f"{', '.join(sorted(others))}: the simulated crowd will not mix in"
        )


class SimulatedCrowd:
    """Simulated participants who arrive over time and claim their work exactly as people do
    (:meth:`Collection.claim`, what the portal calls), then work in Argilla through the
    annotator API a browser uses. Each is known by a key ``sim-<study key>-<n>``; behaviour is
    deterministic per seed and key: some never start, some go quiet part-way, most finish."""

    def __init__(
        self,
        crowd: CrowdConfig,
        seed: int,
        dropouts: Iterable[str] | None = None,
        writer: AnswerWriter | None = None,
        careless: Iterable[str] | None = None,
    ):
        self.crowd = crowd
        self.seed = seed
        self.forced_dropouts = set(dropouts) if dropouts is not None else None
        self.forced_careless = set(careless) if careless is not None else None
        self.writer = writer or (lambda question, category, rng: template_answer(rng, crowd))
        self._keys: dict[str, str] = {}  # username -> participant key, once known (:meth:`bind`)

    @staticmethod
    def key(study_key: str, n: int) -> str:
        return f"sim-{study_key}-{n:04d}"

    def never_starts(self, key: str) -> bool:
        if self.forced_dropouts is not None:
            return False
        return _rng(self.seed, "never-start", key).random() < self.crowd.never_start_rate

    def drops_out(self, key: str) -> bool:
        if self.forced_dropouts is not None:
            return key in self.forced_dropouts
        return _rng(self.seed, "dropout", key).random() < self.crowd.dropout_rate

    def bind(self, key: str, username: str) -> None:
        """Remember that the participant ``key`` works as ``username``: from then on their
        carelessness is decided by their key, so the person careless in onboarding (before they
        had an account) is the one careless in their batch."""
        self._keys[username] = key

    def is_careless(self, username: str) -> bool:
        """A participant who never reads instructions (``careless_rate``; or the ``careless``
        usernames given)."""
        if self.forced_careless is not None:
            return username in self.forced_careless
        return _rng(self.seed, "careless", self._keys.get(username, username)).random() < self.crowd.careless_rate

    def profile(self, key: str, study_key: str, careless: bool | None = None) -> ParticipantProfile:
        """How the participant ``key`` behaves in study ``study_key``'s onboarding: careless when
        they never read instructions (study 1: ``careless_rate``, study 2: ``random_clicker_rate``;
        the same draw as :meth:`is_careless` / :meth:`is_random_clicker` once :meth:`bind` links
        the key to their account); ``careless`` overrides it."""
        if careless is None:
            if study_key == "study2":
                careless = self._clicks_at_random(key)
            elif self.forced_careless is not None:
                careless = key in self.forced_careless or any(
                    k == key and u in self.forced_careless for u, k in self._keys.items())
            else:
                careless = _rng(self.seed, "careless", key).random() < self.crowd.careless_rate
        return ParticipantProfile(careless=careless, lapse_rate=self.crowd.low_effort_rate)

    def rng(self, key: str, *parts: object) -> random.Random:
        """The random source of one part of the participant ``key``'s onboarding (deterministic
        per seed, key and part)."""
        return _rng(self.seed, "onboarding", key, *parts)

    def onboarding_walker(self, config: StudyConfig, study_key: str) -> Callable[[str], OnboardingRun] | None:
        """What the door needs to walk the portal's onboarding for this crowd (key -> the
        person's :class:`OnboardingRun`); None when the study has no onboarding."""
        onboarding = onboarding_of(config, study_key)
        if onboarding is None:
            return None
        return lambda key: self.onboard(key, study_key, onboarding)

    def onboard(self, key: str, study_key: str, onboarding: OnboardingConfig) -> OnboardingRun:
        """The participant ``key``'s way through ``onboarding`` (:func:`walk_onboarding`)."""
        return walk_onboarding(self.profile(key, study_key), onboarding,
                               lambda part: self.rng(key, study_key, part))

    def answers_before_leaving(self, key: str, assigned: int) -> int:
        """How many items a drop-out answers before going quiet (1 .. assigned-1)."""
        return _rng(self.seed, "leave-after", key).randrange(1, assigned) if assigned > 1 else 0

    def visit(
        self,
        collection: Collection,
        api_url: str,
        answer: Callable[[ParticipantState, dict], dict],
        arrivals: int | None = None,
        door: Door | None = None,
    ) -> CrowdReport:
        """One visit: ``arrivals`` new participants come in through ``door`` and claim work
        (default: the config's ``arrivals_per_visit``; none once the study is full), then
        everyone who holds work comes back, logs in and answers what is pending with
        ``answer(participant, record) -> values``. Never-starters do nothing (and at their next
        visit let the study time out); drop-outs stop after their share and return the study;
        the others finish through the door (their completion code). ``door``: default, claims straight from
        the collection (:class:`~crowdpref.simulation.arrivals.DirectDoor`)."""
        report = CrowdReport()
        study_key = collection.spec.key
        door = door or DirectDoor(collection)
        try:
            known = door.known()
            new_keys = set()
            newcomers = 0  # arrivals, screened-out people included (they took a place too)
            for n in range(known + 1, known + 1 + (self.crowd.arrivals_per_visit if arrivals is None else arrivals)):
                key = self.key(study_key, n)
                arrival = door.arrive(key)
                if arrival is None:
                    report.full = True
                    break
                newcomers += 1
                if isinstance(arrival, ScreenedOut):
                    report.screened_out += 1
                    continue
                report.arrived += 1
                new_keys.add(key)
            for n in range(1, known + newcomers + 1):
                key = self.key(study_key, n)
                if self.never_starts(key):  # claimed at arrival, never opened; times out at the next visit
                    if key in new_keys:
                        report.never_started.append(key)
                    elif door.leave(key, "time-out"):
                        report.left += 1
                    continue
                arrival = door.come_back(key)  # a returning participant: same account, same work
                if arrival is None or arrival.participant.status != "active":
                    continue
                self.work(collection, api_url, answer, key, arrival, door, report)
        finally:
            door.close()
        return report

    def work(self, collection: Collection, api_url: str, answer: Callable[[ParticipantState, dict], dict], key: str,
             arrival: Arrival, door: Door, report: CrowdReport,
             on_queue: Callable[[list[dict]], None] | None = None) -> None:
        """One participant who got in (``arrival``) works: opens Argilla at ``api_url`` with what
        their browser holds, answers what is pending with ``answer`` (a drop-out only their
        share, then returns the study), and finishes through the door. ``on_queue``: called with
        their queue as soon as Argilla answered it (the dress rehearsal times it)."""
        participant = arrival.participant
        self.bind(key, participant.username)  # bookkeeping: the key's behaviour follows them
        session = AnnotatorSession(api_url, participant.username, arrival.password, token=arrival.token)
        try:
            dataset = next((d for d in session.datasets() if d["name"] == collection.dataset_name), None)
            if dataset is None:
                return
            report.participants_played += 1
            pending = session.pending_records(dataset["id"])
            if on_queue is not None:
                on_queue(pending)
            budget = len(pending)
            dropping = self.drops_out(key)
            if dropping:
                report.dropouts.append(participant.username)
                answered = len(participant.assignments) - len(pending)
                # 1 .. Q-1 answers over all their records (Q: their study items, the quality
                # checks not counted), so at least one study item stays undone whatever order
                # the queue shows (a check may be among the records answered). Simulator
                # bookkeeping only: what a check asks is never looked up.
                items = sum(not is_check(a.item_id) for a in participant.assignments)
                leave_after = self.answers_before_leaving(key, items)
                budget = max(0, leave_after - answered)
            submissions = [(record["id"], answer(participant, record)) for record in pending[:budget]]
            report.answers_submitted += session.submit(submissions) if submissions else 0
        finally:
            session.close()
        if dropping:
            report.left += int(door.leave(key, "return"))
        elif door.finish(key) is not None:
            report.finished += 1

    def study1_writer(self, truth: list[dict[str, object]],
                      kinds: Counter[str]) -> Callable[[ParticipantState, dict], dict]:
        """How this crowd's writers answer a study-1 record as Argilla shows it (the question
        text; a careful writer follows an instruction it reads there); each written answer's
        hidden quality is appended to ``truth`` and its kind counted in ``kinds``."""

        def write(participant: ParticipantState, record: dict) -> dict:
            item = record["external_id"]
            question = str(record["fields"]["question"])
            category = str((record.get("metadata") or {}).get("category", ""))
            rng = _rng(self.seed, "answer", participant.username, item)
            word, asked = read_instruction(question)
            if word is not None and not self.is_careless(participant.username):
                kinds["followed_instruction"] += 1
                return {"response": word, "quality": asked if asked is not None else 3}
            written = self.writer(question, category, rng)
            rating = rng.choices(list(QUALITY_RATING_WEIGHTS), weights=list(QUALITY_RATING_WEIGHTS.values()))[0]
            truth.append({"username": participant.username, "item_id": item, "kind": written.kind,
                          "hidden_quality": written.hidden_quality, "text": written.text})
            kinds[written.kind] += 1
            return {"response": written.text, "quality": rating}

        return write

    def play_study1(
        self,
        collection: Collection,
        api_url: str,
        questions: pd.DataFrame,
        truth_path: Path,
        arrivals: int | None = None,
        door: Door | None = None,
    ) -> CrowdReport:
        """Writers arrive, claim and answer their pending questions as Argilla shows them (the
        question text of the record; a careful writer follows an instruction it reads there);
        each answer's hidden quality goes to the truth file (``truth_path``, appended).
        ``questions`` is kept for callers; the crowd reads the records."""
        truth: list[dict[str, object]] = []
        kinds: Counter[str] = Counter()
        write = self.study1_writer(truth, kinds)
        report = self.visit(collection, api_url, write, arrivals=arrivals, door=door)
        report.kinds = dict(kinds)
        _append_truth(truth_path, truth)
        return report

    def play_study2(
        self,
        collection: Collection,
        api_url: str,
        hidden_quality: Mapping[str, float],
        scale_points: int,
        arrivals: int | None = None,
        door: Door | None = None,
    ) -> CrowdReport:
        """Raters arrive, claim and rate their pending pairs as Argilla shows them: the two
        texts shown as A and B, judged by the hidden quality of the crowd's own answers
        (``hidden_quality``: response id -> quality) and, for answers the crowd did not write
        (real people's, gold pairs'), by reading them (:func:`perceived_quality`)."""
        kinds: Counter[str] = Counter()
        texts = getattr(collection.spec, "_text", {})
        by_text = {str(texts[rid]): q for rid, q in hidden_quality.items() if rid in texts}

        def rate(participant: ParticipantState, record: dict) -> dict:
            fields = record["fields"]
            text_a, text_b = str(fields["response_a"]), str(fields["response_b"])
            kinds["random_clicker" if self.is_random_clicker(participant.username) else "rater"] += 1
            quality_a = by_text.get(text_a, perceived_quality(text_a))
            quality_b = by_text.get(text_b, perceived_quality(text_b))
            seen = hashlib.sha256("\x1f".join(sorted([text_a, text_b])).encode()).hexdigest()[:16]
            value = self.rating(participant.username, seen, quality_a, quality_b, scale_points,
                                view=record["external_id"], flipped=text_a > text_b)
            return {"preference": value}

        report = self.visit(collection, api_url, rate, arrivals=arrivals, door=door)
        report.kinds = dict(kinds)
        return report

    def is_random_clicker(self, username: str) -> bool:
        return self._clicks_at_random(self._keys.get(username, username))

    def _clicks_at_random(self, who: str) -> bool:
        return _rng(self.seed, "clicker", who).random() < self.crowd.random_clicker_rate

    def rating(self, username: str, pair_id: str, quality_a: float, quality_b: float, scale_points: int,
               view: str | None = None, flipped: bool = False) -> int:
        """A rating on the displayed A/B scale (1 = strong A ... K = strong B). It follows the
        hidden quality difference plus Gaussian noise (``rater_noise`` scale points: the
        rater's view of the pair ``pair_id``, the same at every viewing - ``flipped`` when this
        display shows the pair the other way round - plus a ``VIEW_NOISE`` share new at each
        ``view``) and the configured ``position_bias`` (negative favours A); random clickers
        pick uniformly at every viewing."""
        rng = _rng(self.seed, "rating", username, pair_id)
        if self.is_random_clicker(username):
            return _rng(self.seed, "click", username, pair_id, view).randint(1, scale_points)
        half = scale_points // 2
        noise = self.crowd.rater_noise
        z = (quality_b - quality_a) * RATING_SPREAD + (-1 if flipped else 1) * rng.gauss(0.0, noise) + self.crowd.position_bias
        if view is not None:
            z += _rng(self.seed, "view", username, view).gauss(0.0, VIEW_NOISE * noise)
        return min(scale_points, half + 1 + int(z)) if z >= 0 else max(1, half - int(-z))


def _append_truth(path: Path, rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    new = pd.DataFrame(rows, columns=TRUTH_COLUMNS)
    if path.exists():
        new = pd.concat([pd.read_parquet(path), new]).drop_duplicates(["username", "item_id"], keep="last")
    write_parquet(new.reset_index(drop=True), path)
