"""The study's questions: gathered from their sources, cleaned, de-duplicated and capped.

Sources, in priority order (of two duplicates the one from the earlier source is kept):

``bank``
    The curated, hand-written bank shipped in ``crowdpref/data/question_bank.jsonl``,
    filtered to the study's categories.
``file:<name>``
    Each file in ``questions.files``: CSV or JSONL with the columns ``question`` and
    ``category``; any other column is kept in the question's ``metadata``.
``llm:<model>``
    With ``questions.llm.enabled``, new questions written by an OpenAI-compatible endpoint
    (``openai_base_url`` / ``openai_api_key`` / ``openai_model`` settings), asked per category.

Every question is normalised (:func:`normalise_question`), validated (:func:`question_problem`)
and compared with those already kept: identical text (case-insensitive) or a similarity at or
above ``questions.near_duplicate_threshold`` (0-100: the higher of rapidfuzz's ``ratio`` and
``token_sort_ratio`` on lower-cased text without punctuation) makes it a duplicate.
With ``questions.per_category`` set, categories are topped up by the LLM (when enabled) and
sampled down to the target (seeded by the study's ``seed``).

Entry point: :func:`build_questions` -> :class:`QuestionSet`. Every problem with an input is a
one-line :class:`~crowdpref.errors.CrowdprefError` naming the file (or endpoint) and the fix.
This module has no Prefect dependency; ``tasks/questions.py`` wraps it.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import openai
import pandas as pd
from rapidfuzz import fuzz, process
from rapidfuzz.utils import default_process

from crowdpref.config import DEFAULT_CATEGORIES, Category, LLMExpansion, StudyConfig, slugify
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.ids import stable_id
from crowdpref.settings import Settings

__all__ = [
    "BANK_SOURCE",
    "QUESTION_COLUMNS",
    "REJECTED_COLUMNS",
    "Candidate",
    "LLMQuestionWriter",
    "QuestionPool",
    "QuestionSet",
    "build_messages",
    "build_questions",
    "expand_with_llm",
    "extract_questions",
    "llm_needs",
    "load_bank",
    "normalise_question",
    "open_llm_writer",
    "question_id",
    "question_problem",
    "read_question_file",
]

#: Columns of ``questions.parquet`` (all strings; ``metadata`` is a JSON object as text).
QUESTION_COLUMNS = ("question_id", "question", "category", "source", "metadata")
#: Columns of :attr:`QuestionSet.rejected`: what was dropped, from where, and why.
REJECTED_COLUMNS = ("question", "category", "source", "where", "kind", "reason")
REQUIRED_COLUMNS = ("question", "category")

BANK_SOURCE = "bank"
BANK_RESOURCE = "data/question_bank.jsonl"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
MIN_WORDS = 4
#: Most questions asked of the LLM in one request (larger lists get repetitive).
MAX_QUESTIONS_PER_REQUEST = 20
#: Existing questions shown to the LLM as examples not to repeat.
MAX_EXAMPLES_IN_PROMPT = 10
PROMPT_VERSION = "questions-v1"


# --- text ------------------------------------------------------------------------------------
_STRAIGHT_QUOTES = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u00ab": '"', "\u00bb": '"',
})
_TRAILING_QUESTION_MARKS = re.compile(r"\s*\?[\s?]*$")


def normalise_question(text: str) -> str:
    """The canonical form of a question: Unicode NFKC (full-width letters and ``？`` become
    plain), invisible format characters removed, curly quotes straightened, whitespace
    collapsed to single spaces, wrapping quotes removed, and ``"why ??"`` -> ``"why?"``."""
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = unicodedata.normalize("NFKC", text)
    text = " ".join(text.translate(_STRAIGHT_QUOTES).split())
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return _TRAILING_QUESTION_MARKS.sub("?", text)


def question_key(text: str) -> str:
    """What identity is based on: the normalised text, case-folded."""
    return normalise_question(text).casefold()


def question_id(text: str) -> str:
    """Stable id of a question: the same text (up to case and normalisation) -> the same id."""
    return stable_id("q_", question_key(text))


def question_problem(text: str, min_chars: int, max_chars: int) -> tuple[str, str] | None:
    """Why a normalised question cannot be used, as ``(kind, reason)``; None when it can.
    A real question ends with ``?`` and has at least four words."""
    if not text:
        return "empty", "empty question"
    if len(text) < min_chars:
        return "too-short", f"too short ({len(text)} < min_chars {min_chars} characters)"
    if len(text) > max_chars:
        return "too-long", f"too long ({len(text)} > max_chars {max_chars} characters)"
    if not text.endswith("?"):
        return "not-a-question", "not a question (does not end with '?')"
    if len(text.split()) < MIN_WORDS:
        return "too-few-words", f"not a real question (fewer than {MIN_WORDS} words)"
    return None


def _comparable(text: str) -> str:
    """Text as compared for near-duplicates: lower case, punctuation removed."""
    return default_process(text)


# --- candidates, the pool and the result ------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A question as a source offers it, before cleaning."""

    text: str
    category: str
    source: str
    where: str = ""
    """Where in the source it came from (``line 4``, ``request 2``); for messages."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KeptQuestion:
    """A question that passed validation and de-duplication."""

    question_id: str
    question: str
    category: str
    source: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Rejection:
    candidate: Candidate
    kind: str
    """Short code: empty, too-short, too-long, not-a-question, too-few-words, duplicate,
    near-duplicate, other-category, sampled-out."""
    reason: str

    def as_row(self) -> dict[str, str]:
        c = self.candidate
        return {"question": c.text, "category": c.category, "source": c.source,
                "where": c.where, "kind": self.kind, "reason": self.reason}


class QuestionPool:
    """Accepted questions in arrival order; :meth:`offer` decides on each new candidate."""

    def __init__(self, categories: Sequence[str], min_chars: int, max_chars: int,
                 near_duplicate_threshold: float):
        self.categories = list(categories)
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.threshold = near_duplicate_threshold
        self.kept: list[KeptQuestion] = []
        self.rejections: list[Rejection] = []
        self.offered: Counter[str] = Counter()
        self._id_by_key: dict[str, str] = {}
        self._comparable_texts: list[str] = []

    def offer(self, candidate: Candidate) -> KeptQuestion | None:
        """Keep ``candidate`` if it is valid, in the study and new; else record why not."""
        self.offered[candidate.source] += 1
        text = normalise_question(candidate.text)
        problem = self._problem(candidate, text)
        if problem is not None:
            self.rejections.append(Rejection(candidate, *problem))
            return None
        kept = KeptQuestion(question_id(text), text, candidate.category, candidate.source,
                            candidate.metadata)
        self.kept.append(kept)
        self._id_by_key[question_key(text)] = kept.question_id
        self._comparable_texts.append(_comparable(text))
        return kept

    def in_category(self, category: str) -> list[KeptQuestion]:
        return [q for q in self.kept if q.category == category]

    def _problem(self, candidate: Candidate, text: str) -> tuple[str, str] | None:
        if candidate.category not in self.categories:
            return ("other-category",
                    f"category {candidate.category!r} is not one of this study's categories")
        problem = question_problem(text, self.min_chars, self.max_chars)
        if problem is not None:
            return problem
        same = self._id_by_key.get(question_key(text))
        if same is not None:
            return "duplicate", f"duplicate of {same} (same text)"
        return self._near_duplicate(text)

    def _near_duplicate(self, text: str) -> tuple[str, str] | None:
        """The first kept question at or above the threshold by rapidfuzz's ``ratio`` (catches
        typos and small edits) or ``token_sort_ratio`` (catches reordered clauses), on
        lower-cased text without punctuation; 100 means the same words. ``token_set_ratio`` is
        not used: it scores any question whose words are a subset of a longer one as 100."""
        query = _comparable(text)
        for scorer in (fuzz.ratio, fuzz.token_sort_ratio):
            match = process.extractOne(query, self._comparable_texts, scorer=scorer,
                                       processor=None, score_cutoff=self.threshold)
            if match is not None:
                _, score, index = match
                other = self.kept[index]
                return ("near-duplicate",
                        f"near-duplicate of {other.question_id} (similarity {score:.0f} >= "
                        f"{self.threshold:g}): {other.question!r}")
        return None


@dataclass
class QuestionSet:
    """The result of :func:`build_questions`."""

    questions: pd.DataFrame
    """One row per question, columns :data:`QUESTION_COLUMNS` (the ``questions.parquet``)."""
    rejected: pd.DataFrame
    """Every candidate not used, columns :data:`REJECTED_COLUMNS`."""
    source_counts: pd.DataFrame
    """Per source: offered, rejected (invalid or duplicate), sampled_out, kept."""
    warnings: list[str] = field(default_factory=list)
    """Things a person should know (LLM shortfalls, categories under target)."""

    def per_category(self) -> dict[str, int]:
        """Questions per category (in the order the questions are listed)."""
        return {str(k): int(v) for k, v in self.questions["category"].value_counts(sort=False).items()}

    def summary(self) -> str:
        sources = ", ".join(f"{r.source}: {r.kept}" for r in self.source_counts.itertuples())
        return (f"{len(self.questions)} questions in {self.questions['category'].nunique()} "
                f"categories ({sources}); {len(self.rejected)} not used")


# --- the bank and question files ----------------------------------------------------------------
def load_bank(categories: Iterable[str] | None = None) -> list[Candidate]:
    """The shipped bank's questions, in file order; only ``categories`` when given."""
    wanted = None if categories is None else set(categories)
    resource = resources.files("crowdpref").joinpath(BANK_RESOURCE)
    rows = _jsonl_rows(resource.read_text(encoding="utf-8"), f"crowdpref/{BANK_RESOURCE}")
    return [
        Candidate(row["question"], row["category"], BANK_SOURCE, where)
        for where, row in rows
        if wanted is None or row["category"] in wanted
    ]


def read_question_file(path: Path, categories: Sequence[str]) -> list[Candidate]:
    """Questions of a CSV or JSONL file with ``question`` and ``category`` columns; other
    columns go into each question's metadata. Categories may be written as slugs or titles;
    one of the 19 default categories that the study does not use is passed on (and later
    rejected as ``other-category``), anything else is an error listing ``categories``."""
    path = Path(path)
    source = f"file:{path.name}"
    text = _read_utf8(path)
    if not text.strip():
        raise CrowdprefError(f"{path}: (file): the file is empty: "
                             f"{_format_hint(path)}")
    rows = _jsonl_rows(text, str(path)) if path.suffix.lower() == ".jsonl" else _csv_rows(text, path)
    if not rows:
        raise CrowdprefError(f"{path}: (file): has column names but no questions: "
                             f"add one question per {'line' if path.suffix.lower() == '.jsonl' else 'row'}")
    candidates = []
    for where, row in rows:
        category = _category_slug(row["category"], categories, path, where)
        metadata = {k: v for k, v in row.items() if k not in REQUIRED_COLUMNS and v not in (None, "")}
        candidates.append(Candidate(row["question"], category, source, where, metadata))
    return candidates


def _format_hint(path: Path) -> str:
    if path.suffix.lower() == ".jsonl":
        return 'write one JSON object per line, e.g. {"question": "...?", "category": "empathy"}'
    return "write a header line 'question,category' and then one question per row"


def _read_utf8(path: Path) -> str:
    if not path.is_file():
        raise CrowdprefError(f"{path}: (file): question file not found: fix the path in "
                             "questions.files (relative paths start at the study YAML's folder)")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CrowdprefError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset "
            f"{exc.start}): save the file as UTF-8"
        ) from None


def _missing_columns_error(path: Path, found: Iterable[str]) -> CrowdprefError:
    found_names = [name for name in found if name] or ["(none)"]
    missing = [c for c in REQUIRED_COLUMNS if c not in found_names]
    return CrowdprefError(
        f"{path}: (columns): missing required column(s) {', '.join(missing)}: the required "
        f"columns are {', '.join(REQUIRED_COLUMNS)}; found: {', '.join(found_names)}: "
        "rename or add the columns"
    )


def _csv_rows(text: str, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(where, row)`` per data row; header names are stripped, required ones lower-cased."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        names = [_column_name(name) for name in header]
        if not set(REQUIRED_COLUMNS) <= set(names):
            raise _missing_columns_error(path, names)
        rows = []
        for cells in reader:
            where = f"line {reader.line_num}"
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) > len(names):
                raise CrowdprefError(f"{path}: {where}: {len(cells)} cells but the header has "
                                     f"{len(names)} columns: quote cells that contain commas")
            row = {name: cell.strip() for name, cell in zip(names, cells)}
            rows.append((where, {**{c: "" for c in REQUIRED_COLUMNS}, **row}))
    except csv.Error as exc:
        raise CrowdprefError(f"{path}: line {reader.line_num}: not valid CSV ({exc}): "
                             "fix the quoting there") from None
    return rows


def _column_name(name: str) -> str:
    name = name.strip()
    return name.lower() if name.lower() in REQUIRED_COLUMNS else name


def _jsonl_rows(text: str, shown: str) -> list[tuple[str, dict[str, Any]]]:
    """``(where, object)`` per non-blank line; every object needs text in both required keys."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CrowdprefError(f"{shown}: {where}: not valid JSON ({exc.msg}, column "
                                 f"{exc.colno}): write one JSON object per line") from None
        if not isinstance(obj, dict):
            raise CrowdprefError(f"{shown}: {where}: expected a JSON object, got "
                                 f"{type(obj).__name__}: write {{\"question\": ..., \"category\": ...}}")
        obj = {_column_name(k): v for k, v in obj.items()}
        rows.append((where, obj))
    found = list(dict.fromkeys(k for _, obj in rows for k in obj))
    if rows and not set(REQUIRED_COLUMNS) <= set(found):
        raise _missing_columns_error(Path(shown), found)
    for where, obj in rows:
        for key in REQUIRED_COLUMNS:
            if not isinstance(obj.get(key), str):
                problem = "missing" if key not in obj else f"not text ({obj[key]!r})"
                raise CrowdprefError(f"{shown}: {where}: {key!r} is {problem}: give every line "
                                     "a question and a category as text")
    return rows


def _category_slug(value: str, categories: Sequence[str], path: Path, where: str) -> str:
    """A file's category cell as a slug (titles are accepted); unknown ones are errors."""
    slug = slugify(value)
    if slug in categories or slug in _DEFAULT_SLUGS:
        return slug
    allowed = ", ".join(categories)
    close = difflib.get_close_matches(slug, list(categories), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    shown = repr(value) if value.strip() else "(empty)"
    raise CrowdprefError(f"{path}: {where}: unknown category {shown}{hint}: use one of the "
                         f"study's categories: {allowed}")


_DEFAULT_SLUGS = frozenset(slug for slug, _, _ in DEFAULT_CATEGORIES)


# --- the LLM -----------------------------------------------------------------------------------
SYSTEM_PROMPT = """\
You write questions for a study of social reasoning. Members of the public answer each \
question in a few sentences, and other people then compare their answers.

A good question:
- describes a realistic everyday situation (home, work, school, friends, neighbours, online, \
public places);
- is open: it asks how, why or what, and cannot be answered with yes or no;
- is one or two sentences long and ends with a question mark;
- needs no expert knowledge, names no real people, and is respectful to every group.

Reply with one JSON object and nothing else, in this form: {"questions": ["...", "..."]}"""

USER_PROMPT = """\
Category: {title}{about}

Write {count} new questions for this category. Each must be clearly different from the \
others and from these existing questions:
{examples}

Reply with JSON only: {{"questions": [...]}} holding exactly {count} questions."""


def build_messages(category: Category, count: int, examples: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages asking for ``count`` new questions in ``category``."""
    about = f" ({category.description})" if category.description else ""
    shown = "\n".join(f"- {q}" for q in examples) or "- (none yet)"
    user = USER_PROMPT.format(title=category.title, about=about, count=count, examples=shown)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCED_BLOCK = re.compile(r"```[A-Za-z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_QUOTED_QUESTION = re.compile(r'"((?:[^"\\\n]|\\.){3,}?\?)\s*"')
_LISTED_QUESTION = re.compile(r"^\s*(?:\d{1,3}[.):]|[-*\u2022])\s+(.+\?)[\"']?\s*$", re.MULTILINE)


def extract_questions(reply: str) -> list[str]:
    """The questions in an LLM reply, tolerating what models do: the JSON object alone, in a
    fenced code block or amid prose; a bare JSON array (of strings or ``{"question": ...}``
    objects); broken JSON (the quoted strings ending in ``?`` are salvaged); a numbered or
    bulleted list. A refusal or apology gives ``[]``."""
    for snippet in _json_snippets(reply):
        try:
            data = json.loads(snippet)
        except ValueError:
            continue
        found = _questions_in_json(data)
        if found is not None:
            return found
    quoted = [_unescape(q) for q in _QUOTED_QUESTION.findall(reply)]
    if quoted:
        return quoted
    return [q.strip().strip("\"'") for q in _LISTED_QUESTION.findall(reply)]


def _json_snippets(text: str) -> Iterator[str]:
    yield text.strip()
    for block in _FENCED_BLOCK.findall(text):
        yield block.strip()
    for opening, closing in ("{}", "[]"):
        start, end = text.find(opening), text.rfind(closing)
        if 0 <= start < end:
            yield text[start : end + 1]


def _questions_in_json(data: Any) -> list[str] | None:
    if isinstance(data, dict):
        data = data.get("questions", next((v for v in data.values() if isinstance(v, list)), None))
    if not isinstance(data, list):
        return None
    found = []
    for item in data:
        if isinstance(item, dict):
            item = item.get("question")
        if isinstance(item, str):
            found.append(item)
    return found


def _unescape(json_string_body: str) -> str:
    try:
        return json.loads(f'"{json_string_body}"')
    except ValueError:
        return json_string_body


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class LLMReply:
    questions: list[str]
    raw: str


class LLMQuestionWriter:
    """Asks an OpenAI-compatible chat endpoint for questions, one category at a time. API
    failures (after the client's own retries) become one-line :class:`CrowdprefError`s that
    name the endpoint and the setting to fix, and never contain the API key."""

    def __init__(self, client: Any, model: str, base_url: str, llm: LLMExpansion, api_key: str = ""):
        self.client = client
        self.model = model
        self.base_url = base_url
        self.llm = llm
        self._api_key = api_key
        self.requests = 0

    @property
    def source(self) -> str:
        return f"llm:{self.model}"

    def ask(self, category: Category, count: int, examples: Sequence[str]) -> LLMReply:
        """One request for ``count`` new questions."""
        raw = self._complete(build_messages(category, count, examples))
        return LLMReply(extract_questions(raw), raw)

    def _complete(self, messages: list[dict[str, str]]) -> str:
        self.requests += 1
        try:
            completion = self.client.chat.completions.create(
                model=self.model, messages=messages, temperature=self.llm.temperature)
        except openai.APIError as exc:
            raise CrowdprefError(self._redact(self._explain(exc))) from None
        choices = getattr(completion, "choices", None) or []
        if not choices:
            return ""
        message = choices[0].message
        return message.content or getattr(message, "refusal", None) or ""

    def _explain(self, exc: openai.APIError) -> str:
        where = f"LLM endpoint {self.base_url}"
        tries = f"{self.llm.max_retries + 1} attempt(s)"
        if isinstance(exc, openai.APITimeoutError):
            return (f"{where}: no answer within {self.llm.timeout_s:g} s ({tries}): raise "
                    "questions.llm.timeout_s in the study YAML, or check the openai_base_url "
                    "setting and that the server is not overloaded")
        if isinstance(exc, openai.APIConnectionError):
            cause = _one_line(exc.__cause__ or exc, 100)
            return (f"{where}: cannot connect ({cause}): check the openai_base_url setting "
                    "(CROWDPREF_OPENAI_BASE_URL or OPENAI_BASE_URL) and that the server is running")
        if isinstance(exc, openai.AuthenticationError):
            return (f"{where}: the API key was refused (HTTP 401): set the openai_api_key setting "
                    "(CROWDPREF_OPENAI_API_KEY or OPENAI_API_KEY) to a valid key for this endpoint")
        if isinstance(exc, openai.PermissionDeniedError):
            return (f"{where}: the API key may not use model {self.model!r} (HTTP 403): use a key "
                    "with access (openai_api_key) or another model (questions.llm.model)")
        if isinstance(exc, openai.NotFoundError):
            return (f"{where}: model {self.model!r} or the chat completions route was not found "
                    "(HTTP 404): set questions.llm.model (or the openai_model setting) to a model "
                    "the server offers, and check that openai_base_url ends with /v1")
        if isinstance(exc, openai.RateLimitError):
            return (f"{where}: rate limit or quota exceeded (HTTP 429, {tries}): wait and run "
                    "again, or raise questions.llm.max_retries")
        if isinstance(exc, openai.APIStatusError):
            detail = _one_line(re.sub(r"^Error code: \d+ - ", "", exc.message))
            return (f"{where}: HTTP {exc.status_code} ({detail}) after {tries}: "
                    "check the server's logs, then run again")
        return f"{where}: unreadable answer ({_one_line(exc)}): check that it is OpenAI-compatible"

    def close(self) -> None:
        """Close the client's connections (when it has a ``close``)."""
        close = getattr(self.client, "close", None)
        if callable(close):
            close()

    def _redact(self, message: str) -> str:
        return message.replace(self._api_key, "***") if self._api_key else message


ClientFactory = Callable[..., Any]


def open_llm_writer(cfg: StudyConfig, settings: Settings,
                    client_factory: ClientFactory | None = None) -> LLMQuestionWriter:
    """An :class:`LLMQuestionWriter` for the study's LLM settings. ``client_factory`` is called
    like ``openai.OpenAI(base_url=, api_key=, timeout=, max_retries=)`` (the default)."""
    llm = cfg.questions.llm
    model = llm.model or settings.openai_model
    if not model:
        raise ConfigError(f"{cfg.source or cfg.name}: questions.llm.model: no LLM model named: set "
                          "questions.llm.model in the study YAML or the openai_model setting "
                          "(CROWDPREF_OPENAI_MODEL or OPENAI_MODEL)")
    base_url = (settings.openai_base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")
    if settings.openai_api_key is not None:
        api_key = settings.openai_api_key.get_secret_value()
    elif settings.openai_base_url:
        api_key = "not-set"  # local OpenAI-compatible servers often need no key
    else:
        raise ConfigError(f"{cfg.source or cfg.name}: questions.llm.enabled: the LLM is enabled "
                          f"but no API key is set for {base_url}: set the openai_api_key setting "
                          "(CROWDPREF_OPENAI_API_KEY or OPENAI_API_KEY), or openai_base_url for a "
                          "local server")
    factory = client_factory or openai.OpenAI
    client = factory(base_url=base_url, api_key=api_key, timeout=llm.timeout_s,
                     max_retries=llm.max_retries)
    return LLMQuestionWriter(client, model, base_url, llm, api_key=api_key)


def llm_needs(cfg: StudyConfig, pool: QuestionPool) -> dict[str, int]:
    """New questions to ask the LLM for, per category: ``llm.per_category`` when set, else
    what ``per_category`` still lacks after the bank and files."""
    q = cfg.questions
    if not q.llm.enabled:
        return {}
    if q.llm.per_category is not None:
        return {slug: q.llm.per_category for slug in q.category_slugs}
    assert q.per_category is not None  # the config requires one of the two
    return {slug: max(0, q.per_category - len(pool.in_category(slug))) for slug in q.category_slugs}


def expand_with_llm(pool: QuestionPool, categories: Sequence[Category], needs: dict[str, int],
                    writer: LLMQuestionWriter) -> list[str]:
    """Ask ``writer`` for ``needs[slug]`` new questions per category and offer them to the
    pool (so duplicates of earlier sources are dropped). Large needs are split into requests
    of at most :data:`MAX_QUESTIONS_PER_REQUEST`, with one spare request for shortfalls. A
    reply without questions (a refusal) ends that category with a warning. Returns warnings."""
    warnings = []
    for category in categories:
        need = needs.get(category.slug, 0)
        if need > 0:
            warnings.extend(_expand_category(pool, category, need, writer))
    return warnings


def _expand_category(pool: QuestionPool, category: Category, need: int,
                     writer: LLMQuestionWriter) -> list[str]:
    remaining = need
    requests_allowed = math.ceil(need / MAX_QUESTIONS_PER_REQUEST) + 1
    for _ in range(requests_allowed):
        count = min(remaining, MAX_QUESTIONS_PER_REQUEST)
        examples = [q.question for q in pool.in_category(category.slug)][-MAX_EXAMPLES_IN_PROMPT:]
        reply = writer.ask(category, count, examples)
        if not reply.questions:
            return [f"{category.slug}: the LLM ({writer.model}) gave no usable questions "
                    f"(reply began: {_one_line(reply.raw, 80)!r}); kept {need - remaining} of "
                    f"{need} requested"]
        remaining -= _offer_reply(pool, category, reply, count, writer)
        if remaining == 0:
            return []
    return [f"{category.slug}: the LLM ({writer.model}) wrote {need - remaining} of {need} "
            f"usable new questions in {requests_allowed} requests"]


def _offer_reply(pool: QuestionPool, category: Category, reply: LLMReply, count: int,
                 writer: LLMQuestionWriter) -> int:
    """Offer the reply's questions until ``count`` are kept; returns how many were kept."""
    kept = 0
    metadata = {"prompt_version": PROMPT_VERSION, "temperature": writer.llm.temperature}
    for text in reply.questions:
        if kept == count:
            break
        candidate = Candidate(text, category.slug, writer.source, f"request {writer.requests}",
                              metadata)
        kept += pool.offer(candidate) is not None
    return kept


# --- putting it together ------------------------------------------------------------------------
def build_questions(cfg: StudyConfig, settings: Settings,
                    llm_client_factory: ClientFactory | None = None) -> QuestionSet:
    """Gather the study's questions from the bank, its files and the LLM (in that priority),
    drop invalid and duplicate ones, cap each category at ``questions.per_category``
    (seeded sample), and report what was dropped and why."""
    q = cfg.questions
    pool = QuestionPool(q.category_slugs, q.min_chars, q.max_chars, q.near_duplicate_threshold)
    warnings: list[str] = []
    if q.bank:
        for candidate in load_bank(q.category_slugs):
            pool.offer(candidate)
        warnings.extend(f"{slug}: the bank has no questions in this category"
                        for slug in q.category_slugs if not pool.in_category(slug))
    for path in q.files:
        _offer_file(pool, path)
    needs = {slug: n for slug, n in llm_needs(cfg, pool).items() if n > 0}
    if needs:
        writer = open_llm_writer(cfg, settings, llm_client_factory)
        try:
            warnings.extend(expand_with_llm(pool, q.categories, needs, writer))
        finally:
            writer.close()
    kept, sampled_out = _cap_per_category(pool.kept, q.per_category, cfg.seed)
    if not kept:
        raise CrowdprefError(f"{cfg.source or cfg.name}: questions: no usable questions from any "
                             "source: enable the bank, add files, or check the LLM warnings")
    if q.per_category is not None:
        warnings.extend(_shortfalls(kept, q.category_slugs, q.per_category))
    rejections = pool.rejections + sampled_out
    return QuestionSet(
        questions=_questions_frame(kept, q.category_slugs),
        rejected=pd.DataFrame([r.as_row() for r in rejections], columns=list(REJECTED_COLUMNS)),
        source_counts=_source_counts(pool, kept, sampled_out),
        warnings=warnings,
    )


def _offer_file(pool: QuestionPool, path: Path) -> None:
    """Offer a file's questions; a file that contributes nothing at all is an error."""
    candidates = read_question_file(path, pool.categories)
    first_rejection = len(pool.rejections)
    kept = sum(pool.offer(c) is not None for c in candidates)
    if kept:
        return
    rejections = pool.rejections[first_rejection:]
    kinds = Counter(r.kind for r in rejections)
    if set(kinds) <= {"duplicate", "near-duplicate"}:
        raise CrowdprefError(
            f"{path}: (file): all {len(candidates)} questions duplicate questions already "
            "loaded (from the bank, an earlier file or earlier rows): add new questions or "
            "remove the file from questions.files")
    summary = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    first = next(r for r in rejections if r.kind not in {"duplicate", "near-duplicate"})
    raise CrowdprefError(f"{path}: (file): none of its {len(candidates)} questions can be used "
                         f"({summary}; first: {first.candidate.where}: {first.reason}): fix them")


def _cap_per_category(kept: list[KeptQuestion], per_category: int | None,
                      seed: int) -> tuple[list[KeptQuestion], list[Rejection]]:
    """Sample each category down to ``per_category``: a seeded draw per category (over
    question ids, so it does not depend on arrival order), kept in arrival order."""
    if per_category is None:
        return kept, []
    chosen: set[str] = set()
    for category in dict.fromkeys(k.category for k in kept):
        ids = sorted(k.question_id for k in kept if k.category == category)
        rng = random.Random(f"{seed}:{category}")
        chosen.update(ids if len(ids) <= per_category else rng.sample(ids, per_category))
    reason = f"not sampled (per_category {per_category}, seed {seed})"
    sampled_out = [
        Rejection(Candidate(k.question, k.category, k.source, metadata=k.metadata), "sampled-out", reason)
        for k in kept if k.question_id not in chosen
    ]
    return [k for k in kept if k.question_id in chosen], sampled_out


def _shortfalls(kept: list[KeptQuestion], categories: Sequence[str], target: int) -> list[str]:
    counts = Counter(k.category for k in kept)
    return [f"{slug}: {counts[slug]} of {target} questions (per_category)"
            for slug in categories if counts[slug] < target]


def _questions_frame(kept: list[KeptQuestion], categories: Sequence[str]) -> pd.DataFrame:
    order = {slug: i for i, slug in enumerate(categories)}
    rows = sorted(enumerate(kept), key=lambda item: (order[item[1].category], item[0]))
    frame = pd.DataFrame(
        [
            {"question_id": k.question_id, "question": k.question, "category": k.category,
             "source": k.source,
             "metadata": json.dumps(k.metadata, sort_keys=True, ensure_ascii=False, default=str)}
            for _, k in rows
        ],
        columns=list(QUESTION_COLUMNS),
    )
    return frame.astype(dict.fromkeys(QUESTION_COLUMNS, "str"))


def _source_counts(pool: QuestionPool, kept: list[KeptQuestion],
                   sampled_out: list[Rejection]) -> pd.DataFrame:
    rejected = Counter(r.candidate.source for r in pool.rejections)
    capped = Counter(r.candidate.source for r in sampled_out)
    final = Counter(k.source for k in kept)
    rows = [
        {"source": source, "offered": offered, "rejected": rejected[source],
         "sampled_out": capped[source], "kept": final[source]}
        for source, offered in pool.offered.items()
    ]
    return pd.DataFrame(rows, columns=["source", "offered", "rejected", "sampled_out", "kept"])
