"""Benchmark: the published study at full size, end to end on the embedded stack.

Runs by hand (not a test). ``studies/social-reasoning.yaml`` - 1,007 questions (the curated
bank, widened by the LLM endpoint), 4 answers each, 10 per writer; every pair of a question's
answers (6 pairs per question), 3 ratings each, 60 per rater - with a simulated crowd that
arrives through the (fake) Prolific and the participant portal, with drop-outs and never-starters.

It starts its OWN stack in a private state folder on free ports - the embedded Argilla
(server + SQL search plug-in, Redis, rq worker), the Prefect server, the participant portal,
the fake Prolific (``crowdpref/simulation/prolific_server.py``) and the fake OpenAI-compatible endpoint
(``tests/fakes/openai_server.py``, in this process) - runs the ``study`` flow in this process
as ``crowdpref demo`` does, and stops every process it started at the end (also on an error or
Ctrl-C). The folder is removed unless ``--keep``.

The study config is a copy of social-reasoning.yaml with only what a simulation requires
overridden (printed at the start): ``participants: simulated`` and a ``crowd`` section (the
simulated crowd arrives through the fake Prolific, 10% drop out part-way, 5% never start,
``arrivals_per_visit`` = the config's pool size); ``too_fast_seconds: 0`` in both studies (the
simulated crowd submits a batch in one bulk call, so its time on task means nothing);
``screening.fallback: profanity-check`` (detoxify's 'original' weights cannot be downloaded on
an offline machine; the stage says so loudly, as in the demo); ``prolific.enabled: false`` (the real Prolific: no; the crowd arrives through the fake one) and
``prolific.auto_approve: true`` (nobody reviews the fake Prolific's submissions; as in the demo); ``evaluation.enabled: true``
(the evaluate stage runs before publishing, as in the demo). The LLM endpoint is a machine
setting, not a config field: OPENAI_BASE_URL points at the fake, which writes distinct questions
(:func:`llm_questions`). ``--questions N`` scales the question set down (``per_category`` and
the number of categories); every other size stays the config's.

Printed:

- wall time per stage (questions, study 1, screening, study 2, aggregation, publish), as the
  study flow measures it;
- where the wall time of the thread running the flow went, per stage - by SAMPLING that
  thread's stack every 10 ms: a sample taken while an HTTP request is in flight (httpx's
  sync and async transports are wrapped to record, per thread, which service the request is
  for) counts for that service - Argilla, the portal (its time includes the portal's own calls
  to Argilla and the store), the fake Prolific, the Prefect API, the LLM; otherwise the
  innermost frame that belongs either to Prefect's package or to this repository decides:
  Prefect (orchestration: flow/task engines, state bookkeeping, result persistence,
  artifacts) or crowdpref (``crowdpref/``, ``tasks/``, ``flows/`` and what they call:
  pandas, SQLAlchemy on the study store...), with the sleep waiting for drop-outs apart;
- the summed duration of every HTTP call per service from every thread (a cross-check) and the
  CPU seconds of each process (this one, Argilla server and worker, Prefect, portal, Redis,
  fake Prolific): which one is busy;
- peak memory: the RSS of this process and all its children, sampled every second with psutil;
- the validation: every question has 4 answers in responses.parquet, every pair (6 per
  question) has 3 ratings in ratings.parquet, the release exists.

Scaled-down runs also print a linear extrapolation of each stage to the full size (per answer
for study 1 and screening, per rating for study 2...); compare two scales to see what grows
faster than linearly.

    .venv/bin/python benchmarks/full_scale.py [--questions N] [--keep] [--max-wait-s 120]
                                              [--argilla-webhooks on|off] [--arrivals-per-visit N]

Target (issue 12): the whole study in under 45 minutes on this 2-core machine.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.ports import free_port

CONFIG = REPO / "studies" / "social-reasoning.yaml"
TARGET_S = 45 * 60
SAMPLE_S = 0.01  # stack samples of the flow's thread
MEMORY_S = 1.0  # RSS samples of the process tree
ID_IN_PATH = re.compile(r"/(?:[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{24}|\d+)(?=/|$)")  # uuids, Prolific ids, numbers
STAGES = {  # the study flow's stage names -> the names printed here, in order
    "generate-questions": "questions",
    "collect (study1)": "study 1",
    "screen-responses": "screening",
    "collect (study2)": "study 2",
    "aggregate-ratings": "aggregation",
    "evaluate": "evaluation",
    "publish-dataset": "publish",
}
# connection settings a developer may have in their shell: the benchmark must not pick them up
CONNECTION_ENV = (
    "CROWDPREF_SETTINGS", "CROWDPREF_ARGILLA_URL", "ARGILLA_API_URL", "CROWDPREF_ARGILLA_API_KEY",
    "ARGILLA_API_KEY", "CROWDPREF_OPENAI_BASE_URL", "OPENAI_BASE_URL", "CROWDPREF_OPENAI_API_KEY",
    "OPENAI_API_KEY", "CROWDPREF_OPENAI_MODEL", "OPENAI_MODEL", "CROWDPREF_HF_TOKEN", "HF_TOKEN",
    "CROWDPREF_HF_REPO_ID", "CROWDPREF_HF_ENDPOINT", "HF_ENDPOINT", "CROWDPREF_PROLIFIC_TOKEN",
    "PROLIFIC_TOKEN", "CROWDPREF_DATABASE_URL", "PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_HOME",
)


# --- the fake LLM's questions -------------------------------------------------------------------
PEOPLE = (
    "your flatmate", "a new colleague", "your teenage nephew", "an elderly neighbour", "your best friend",
    "a classmate", "your manager", "a shy cousin", "the parent of your child's friend", "a volunteer you coach",
    "your landlord", "a retired teacher you know", "your sister-in-law", "a stranger on the train",
    "the new intern", "your oldest school friend", "a gym regular", "your partner's brother",
    "a cafe owner you know", "a fellow committee member", "your grandmother", "a work rival",
    "the quiet student in your group", "your team captain", "a neighbour's teenager",
    "your dentist's receptionist", "a friend who just moved abroad", "a colleague from another country",
    "your uncle", "the person who sits next to you at work", "your child's teacher", "a choir member",
    "your long-distance friend", "a bus driver you see daily", "a former partner",
    "your neighbour across the hall", "a cousin who is visiting", "an acquaintance from a class",
    "a friend recovering from illness", "your new housemate",
)
SITUATIONS = (
    "keeps borrowing things without asking", "forgets every plan you make together",
    "jokes about your accent in front of others", "stopped replying to your messages weeks ago",
    "takes credit for an idea you shared", "always arrives forty minutes late", "shares your secrets with others",
    "criticises your cooking at every dinner", "asks you for money again and again",
    "cries quietly at the back of a meeting", "seems upset after you praised someone else",
    "refuses to apologise for a hurtful remark", "laughs loudly during a sad film",
    "sends long angry emails at night", "gives you a present you find ugly",
    "interrupts whenever you start to speak", "copies your homework answers", "plays loud music after midnight",
    "posts photos of you without asking", "never helps with the washing up",
    "avoids eye contact when you greet them", "talks only about their own problems",
    "leaves rude notes on the fridge", "cancels at the last minute with weak excuses",
    "makes sarcastic comments about your clothes", "tells the same story at every gathering",
    "won't admit being wrong about a fact", "gossips about a mutual friend",
    "asks very personal questions on first meeting", "seems jealous of your promotion",
    "brings their dog to your house uninvited", "declines every invitation you offer",
    "complains about everyone behind their backs", "is struggling after a bereavement",
    "says yes to everything then does nothing", "keeps comparing you to a sibling",
    "used your car and returned it with no fuel", "misunderstood a joke you made",
    "speaks for you in group decisions", "insists on paying every time you eat out",
)
ASKS = (
    "how could you raise it kindly", "what might be going on for them", "what would be a fair response",
    "how would you keep the relationship intact", "what should you say the next time it happens",
    "how could you tell whether they mean any harm", "which first step would feel least awkward",
    "how would you explain your feelings without blaming them", "what would a good friend do here",
    "when is it better to say nothing at all", "how might their culture shape what they do",
    "what boundary could you set, and how", "how could humour help rather than hurt",
    "what questions would help you understand them", "how would you apologise if you overreacted",
    "how can you show empathy while still being honest", "what would you advise a friend in your place",
    "how could you find a compromise that suits both", "why might they not notice the effect on you",
    "what would change if you were in their position",
)


def llm_questions(start: int, count: int) -> list[str]:
    """Questions ``start`` .. ``start + count - 1`` of a fixed sequence of 800 distinct ones: no
    two share both their situation and their ask, so none is a near-duplicate of another (all
    800 pass the question pool's check at threshold 90, with the bank)."""
    out = []
    for i in range(start, start + count):
        situation = i % len(SITUATIONS)
        ask = (i // len(SITUATIONS)) % len(ASKS)
        person = PEOPLE[(i * 7 + i // len(SITUATIONS)) % len(PEOPLE)]
        out.append(f"{person[0].upper()}{person[1:]} {SITUATIONS[situation]}; {ASKS[ask]}?")
    return out


class QuestionWriter:
    """The fake LLM's reply: ``{"questions": [...]}`` with as many new questions as asked for."""

    def __init__(self) -> None:
        self.served = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        import json

        asked = re.search(r"Write (\d+) new questions", body["messages"][-1]["content"])
        count = int(asked.group(1)) if asked else 5
        with self._lock:
            start, self.served = self.served, self.served + count
        return json.dumps({"questions": llm_questions(start, count)})


# --- the study config ---------------------------------------------------------------------------
def simulation_config(source: Path, questions: int | None, arrivals: int | None) -> tuple[dict, list[str]]:
    """social-reasoning.yaml with what a simulation requires overridden (and ``questions``
    scaling it down); returns the config and one line per override."""
    config = yaml.safe_load(source.read_text())
    changes: list[str] = []

    def put(path: str, value: Any, why: str) -> None:
        *parents, last = path.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        old = node.get(last, "(unset)")
        node[last] = value
        changes.append(f"{path}: {old!r} -> {value!r}  ({why})")

    put("participants", "simulated", "the simulated crowd plays only studies that say so")
    pool = config["study1"].get("pool_size", 20)
    put("crowd", {
        "arrive_via": "prolific", "dropout_rate": 0.1, "never_start_rate": 0.05, "low_effort_rate": 0.1,
        "offensive_rate": 0.05, "random_clicker_rate": 0.05, "arrivals_per_visit": arrivals or pool, "llm": False,
    }, "the simulated crowd: through the fake Prolific and the portal, 10% drop out, 5% never start")
    for key in ("study1", "study2"):
        put(f"{key}.too_fast_seconds", 0, "simulated participants submit a batch in one bulk call")
    put("screening.fallback", "profanity-check", "offline: detoxify's 'original' weights cannot be downloaded")
    put("prolific.enabled", False, "the real Prolific: no (the simulated crowd arrives through the fake one, as in the demo)")
    put("prolific.auto_approve", True, "nobody reviews the fake Prolific's submissions (as in the demo)")
    put("evaluation.enabled", True, "the evaluate stage runs before publishing, as in the demo (issue 35: "
        "its time at full size; the simulated crowd's hidden truth is in the run folder)")
    if questions is not None:
        categories = config["questions"]["categories"]
        per_category = max(1, math.ceil(questions / len(categories)))
        n_categories = min(len(categories), math.ceil(questions / per_category))
        if n_categories < len(categories):
            put("questions.categories", categories[:n_categories], f"--questions {questions}")
        put("questions.per_category", per_category,
            f"--questions {questions}: {n_categories} x {per_category} = {n_categories * per_category}")
    return config, changes


# --- measuring ----------------------------------------------------------------------------------
class HttpTimer:
    """Wraps httpx's sync and async transports: per service (by host:port), the number of
    requests and their summed duration (all threads), and per thread the service of the request
    in flight (for the sampler)."""

    def __init__(self, services: dict[tuple[str, int], str]):
        self.services = services
        self.count: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self.inflight: dict[int, str] = {}
        self.stage: Callable[[], str] = lambda: ""
        self.endpoints: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])  # (service, stage, route)
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def service(self, request: Any) -> str:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        return self.services.get((url.host, port), f"other HTTP ({url.host})")

    def _record(self, service: str, seconds: float, request: Any) -> None:
        route = f"{request.method} {ID_IN_PATH.sub('/{id}', request.url.path)}"
        with self._lock:
            self.count[service] += 1
            self.seconds[service] += seconds
            entry = self.endpoints[(service, self.stage(), route)]
            entry[0] += 1
            entry[1] += seconds

    def install(self) -> None:
        import httpx

        timer = self
        sync_original = httpx.HTTPTransport.handle_request
        async_original = httpx.AsyncHTTPTransport.handle_async_request

        def handle_request(transport: Any, request: Any) -> Any:
            service, ident = timer.service(request), threading.get_ident()
            outer = timer.inflight.get(ident)
            timer.inflight[ident] = service
            started = time.perf_counter()
            try:
                response = sync_original(transport, request)
                response.read()  # the body belongs to the call (streamed responses are read here)
                return response
            finally:
                timer._record(service, time.perf_counter() - started, request)
                if outer is None:
                    timer.inflight.pop(ident, None)
                else:
                    timer.inflight[ident] = outer

        async def handle_async_request(transport: Any, request: Any) -> Any:
            service = timer.service(request)
            started = time.perf_counter()
            try:
                return await async_original(transport, request)
            finally:
                timer._record(service, time.perf_counter() - started, request)

        httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
        httpx.AsyncHTTPTransport.handle_async_request = handle_async_request  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(httpx.HTTPTransport, "handle_request", sync_original))
        self._undo.append(lambda: setattr(httpx.AsyncHTTPTransport, "handle_async_request", async_original))

    def uninstall(self) -> None:
        for undo in self._undo:
            undo()


class StackSampler(threading.Thread):
    """Samples the stack of the thread that runs the study flow every ``SAMPLE_S`` and files the
    elapsed time under (stage, where): an HTTP service, Prefect, crowdpref, or waiting."""

    def __init__(self, http: HttpTimer):
        super().__init__(name="stack-sampler", daemon=True)
        self.http = http
        self.target = threading.main_thread().ident
        self.stage = "study flow"
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.modules: Counter[str] = Counter()  # crowdpref seconds by repository file
        self._halt = threading.Event()
        import prefect

        self.prefect_dir = str(Path(prefect.__file__).parent) + os.sep
        self.repo_dirs = tuple(str(REPO / part) + os.sep for part in ("crowdpref", "tasks", "flows", "tests"))

    def where(self, frame: Any) -> tuple[str, str | None]:
        service = self.http.inflight.get(self.target)  # type: ignore[arg-type]
        if service is not None:
            return service, None
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.prefect_dir):
                return "Prefect", None
            if name.startswith(self.repo_dirs):
                if frame.f_code.co_name == "wait_for_release":
                    return "waiting for drop-outs", None
                return "crowdpref", os.path.relpath(name, REPO)
            frame = frame.f_back
        return "other", None

    def run(self) -> None:
        last = time.perf_counter()
        while not self._halt.wait(SAMPLE_S):
            now = time.perf_counter()
            frame = sys._current_frames().get(self.target)  # type: ignore[arg-type]
            if frame is not None:
                where, module = self.where(frame)
                self.seconds[(self.stage, where)] += now - last
                if module is not None:
                    self.modules[module] += now - last
            last = now

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


class MemorySampler(threading.Thread):
    """Memory of this process and every child (recursive) each ``MEMORY_S``: the peak of the
    summed RSS and of the summed PSS (proportional set size: pages shared between processes,
    e.g. the rq worker's forked work horses, counted once), each group's peak (Argilla server,
    worker, ...; summed over its processes per sample) and each process's last CPU times."""

    def __init__(self) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak: dict[str, int] = defaultdict(int)  # group -> peak summed PSS (RSS where no PSS)
        self.names: dict[int, str] = {}
        self.cpu: dict[int, float] = {}
        self._halt = threading.Event()

    @staticmethod
    def label(cmdline: list[str]) -> str:
        text = " ".join(cmdline)
        for needle, label in (("launch.py start", "Argilla server"), ("launch.py worker", "Argilla rq worker"),
                              ("redis-server", "Redis"), ("prefect", "Prefect server"),
                              ("crowdpref.portal", "portal"), ("prolific_server", "fake Prolific")):
            if needle in text:
                return label
        return os.path.basename(cmdline[0]) if cmdline else "?"

    def sample(self) -> None:
        import psutil

        me = psutil.Process()
        rss_total = pss_total = 0
        groups: Counter[str] = Counter()
        for proc in [me, *me.children(recursive=True)]:
            try:
                with proc.oneshot():
                    if proc.pid not in self.names:
                        parent = proc.parent()
                        name = "benchmark (flows)" if proc.pid == me.pid else self.label(proc.cmdline())
                        if parent is not None and parent.pid in self.names and parent.pid != me.pid:
                            name = self.names[parent.pid]  # a fork (rq work horse) counts with its parent
                        self.names[proc.pid] = name
                    try:
                        info = proc.memory_full_info()
                        rss, pss = info.rss, getattr(info, "pss", info.rss)
                    except psutil.AccessDenied:
                        rss = pss = proc.memory_info().rss
                    times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss_total += rss
            pss_total += pss
            groups[self.names[proc.pid]] += pss
            self.cpu[proc.pid] = times.user + times.system + times.children_user + times.children_system
        self.peak_rss = max(self.peak_rss, rss_total)
        self.peak_pss = max(self.peak_pss, pss_total)
        for name, value in groups.items():
            self.peak[name] = max(self.peak[name], value)

    def run(self) -> None:
        while not self._halt.wait(MEMORY_S):
            self.sample()

    def stop(self) -> None:
        self.sample()
        self._halt.set()
        self.join(timeout=5)

    def cpu_by_label(self) -> dict[str, float]:
        cpu: dict[str, float] = defaultdict(float)
        for pid, name in self.names.items():
            cpu[name] += self.cpu.get(pid, 0.0)
        return dict(cpu)


# --- the private stack --------------------------------------------------------------------------
def settings_environment(settings: Any) -> dict[str, str]:
    """Every setting under its CROWDPREF_* name (what the flows in this process read), plus
    Prefect's offline settings for the private server."""
    return {**settings.as_environment(), **settings.prefect_env()}


def start_stack(home: Path, llm_url: str, llm_key: str, config_dir: Path) -> Any:
    from crowdpref.settings import load_settings
    from services import stack

    for name in CONNECTION_ENV:
        os.environ.pop(name, None)
    settings = load_settings(
        home=home, argilla_port=free_port(), prefect_port=free_port(), redis_port=free_port(),
        portal_port=free_port(), site_port=free_port(), fake_prolific_port=free_port(), portal_studies=config_dir,
        argilla_venv=REPO / ".venv-argilla", argilla_url=None, argilla_api_key=None, argilla_public_url=None,
        prefect_api_url=None, database_url=None, portal_url=None, prolific_token=None, hf_token=None,
        hf_repo_id=None, openai_base_url=llm_url, openai_api_key=llm_key, openai_model="fake-model",
    )
    os.environ.update(settings_environment(settings))
    # no Prefect worker: the flow runs in this process, and an idle worker would add its CPU
    stack.up(settings, [c for c in stack.COMPONENTS if c != "worker"],
             on_step=lambda step: print(f"  starting {step}...", flush=True))
    stack.start_fake_prolific(settings)
    return settings


def subscribe_webhooks(settings: Any, config_path: Path) -> None:
    """As ``crowdpref demo`` does: the portal subscribed to the fake Prolific's webhooks."""
    from crowdpref.config import load_study
    from crowdpref.recruitment import prolific_client, setup_webhooks
    from crowdpref.store import open_store

    config = load_study(config_path)
    store = open_store(settings)
    try:
        with prolific_client(config, settings) as client:
            setup_webhooks(settings, store, client, workspace_id="bench-workspace", force=True)
    finally:
        store.close()


def turn_off_argilla_webhooks(settings: Any, wait_s: float = 60.0) -> bool:
    """``--argilla-webhooks off``: once the portal has registered its Argilla webhook, stand it
    down as a stopping portal does (:func:`crowdpref.portal.argilla_hooks.stand_down`: the store
    first, so monitoring polls every active participant on every pass, as before webhooks) and
    delete it on the server. Returns whether there was one."""
    from crowdpref.account_passwords import AccountPasswords
    from crowdpref.argilla_client import ArgillaOwner
    from crowdpref.portal import argilla_hooks
    from crowdpref.store import open_store

    store = open_store(settings)
    owner = ArgillaOwner(settings.argilla_api_url, settings.resolved_argilla_api_key(),
                         passwords=AccountPasswords.from_secrets(settings.secrets_dir))
    try:
        deadline = time.monotonic() + wait_s
        while not argilla_hooks.registered_for(store, settings.argilla_api_url) and time.monotonic() < deadline:
            time.sleep(0.5)
        return argilla_hooks.stand_down(store, settings.argilla_api_url, owner.delete_webhook)
    finally:
        owner.close()
        store.close()


# --- the run ------------------------------------------------------------------------------------
def label_stages(sampler: StackSampler) -> None:
    """Wrap the stage flows the study flow calls (module globals of flows.study) so the sampler
    knows the stage, and learns which thread runs the flow."""
    import flows.study as study_module

    def labelled(stage: Callable[[Any], str] | str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            sampler.target = threading.get_ident()
            before = sampler.stage
            sampler.stage = stage(kwargs) if callable(stage) else stage
            try:
                return call(*args, **kwargs)
            finally:
                sampler.stage = before

        return run

    by_key = {"study1": "study 1: crowd", "study2": "study 2: crowd"}
    for name, stage in (("generate_questions", "questions"), ("collect_responses", "study 1"),
                        ("screen_responses", "screening"), ("collect_ratings", "study 2"),
                        ("aggregate_ratings", "aggregation"), ("publish_dataset", "publish"),
                        ("simulate_crowd", lambda kw: by_key.get(kw.get("stage"), "crowd")),
                        ("wait_for_release", lambda kw: "study 1" if kw.get("key") == "study1" else "study 2")):
        setattr(study_module, name, labelled(stage, getattr(study_module, name)))


def validate(run_dir: Path) -> tuple[bool, list[str]]:
    """Every question 4 answers, every pair 3 ratings, 6 pairs per question, a release."""
    lines, ok = [], True
    questions = pd.read_parquet(run_dir / "questions.parquet")
    responses = pd.read_parquet(run_dir / "responses.parquet")
    pairs = pd.read_parquet(run_dir / "pairs.parquet")
    ratings = pd.read_parquet(run_dir / "ratings.parquet")
    per_question = responses.groupby("question_id").size().reindex(questions["question_id"], fill_value=0)
    good = bool((per_question == 4).all())
    ok &= good
    lines.append(f"answers: {len(responses)} for {len(questions)} questions; every question 4 answers: {good} "
                 f"(counts seen {sorted(per_question.value_counts().to_dict().items())})")
    pairs_per_question = pairs.groupby("question_id").size().reindex(questions["question_id"], fill_value=0)
    good = bool((pairs_per_question == 6).all())
    ok &= good
    lines.append(f"pairs: {len(pairs)}; every question 6 pairs: {good}")
    per_pair = ratings.groupby("pair_id").size().reindex(pairs["pair_id"], fill_value=0)
    good = bool((per_pair == 3).all())
    ok &= good
    lines.append(f"ratings: {len(ratings)} for {len(pairs)} pairs; every pair 3 ratings: {good} "
                 f"(counts seen {sorted(per_pair.value_counts().to_dict().items())})")
    lines.append(f"writers with counted answers: {responses['participant_key'].nunique()}; raters with counted "
                 f"ratings: {ratings['rater_key'].nunique()}")
    for key in ("study1", "study2"):
        report = run_dir / key / "validation.json"
        if report.exists():
            import json

            valid = json.loads(report.read_text()).get("valid")
            ok &= bool(valid)
            lines.append(f"{key}/validation.json valid: {valid}")
    release = run_dir / "release" / "README.md"
    ok &= release.exists()
    lines.append(f"release card: {release.exists()}")
    return ok, lines


def fmt(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.1f} min"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=None,
                        help="scale down to about N questions (default: the config's full size)")
    parser.add_argument("--keep", action="store_true", help="keep the state folder (printed)")
    parser.add_argument("--max-wait-s", type=float, default=120.0,
                        help="how long a run may wait for quiet participants to be released")
    parser.add_argument("--argilla-webhooks", choices=("on", "off"), default="on",
                        help="off: delete the portal's Argilla webhook, so monitoring polls (to compare)")
    parser.add_argument("--arrivals-per-visit", type=int, default=None,
                        help="new simulated participants per crowd visit (default: the config's pool size)")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from tests.fakes.openai_server import FakeOpenAIServer

    console = Console(width=160) if not sys.stdout.isatty() else Console()
    root = Path(tempfile.mkdtemp(prefix="crowdpref-full-scale-"))
    config_dir, home = root / "config", root / "state"
    config_dir.mkdir()
    config, changes = simulation_config(CONFIG, args.questions, args.arrivals_per_visit)
    config_path = config_dir / f"{config['name']}.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    console.print(f"[bold]{CONFIG.relative_to(REPO)}[/] -> {config_path}; overridden:", highlight=False)
    for line in changes:
        console.print(f"  {line}", highlight=False)

    from crowdpref.config import load_study

    study = load_study(config_path)
    n_questions = len(study.questions.category_slugs) * (study.questions.per_category or 0)
    answers = n_questions * study.study1.responses_per_question
    ratings = n_questions * 6 * study.study2.ratings_per_pair
    writers = math.ceil(answers / study.study1.questions_per_participant)
    raters = math.ceil(ratings / study.study2.pairs_per_participant)
    arrivals = study.crowd.arrivals_per_visit
    # drop-outs and never-starters come on top: room for half as many again, plus the tail
    max_visits = math.ceil(1.5 * max(writers, raters) / arrivals) + 20
    console.print(f"sizes: {n_questions} questions, {answers} answers by >= {writers} writers, "
                  f"{n_questions * 6} pairs, {ratings} ratings by >= {raters} raters; crowd: {arrivals} "
                  f"arrivals per visit, at most {max_visits} visits per collection", highlight=False)

    llm = FakeOpenAIServer(reply=QuestionWriter()).start()
    settings = None
    stop_requested = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_requested.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    memory = MemorySampler()
    http: HttpTimer | None = None
    sampler: StackSampler | None = None
    status = 1
    try:
        started = time.perf_counter()
        console.print("starting the private stack (Argilla, Prefect, portal, fake Prolific)...")
        settings = start_stack(home, llm.base_url, llm.api_key or "", config_dir)
        subscribe_webhooks(settings, config_path)
        if args.argilla_webhooks == "off":
            if not turn_off_argilla_webhooks(settings):
                raise SystemExit("the portal registered no Argilla webhook within 60 s: nothing to turn off")
            console.print("Argilla webhook deleted: monitoring polls every active participant")
        setup_s = time.perf_counter() - started
        console.print(f"stack up in {setup_s:.0f} s (not counted); state folder {home}", highlight=False)
        memory.start()

        http = HttpTimer({
            (settings.host, settings.argilla_port): "Argilla",
            (settings.host, settings.portal_port): "portal",
            (settings.host, settings.fake_prolific_port): "fake Prolific",
            (settings.host, settings.prefect_port): "Prefect API",
            ("127.0.0.1", llm.port): "LLM",
        })
        http.install()
        from flows.study import study as study_flow

        sampler = StackSampler(http)
        label_stages(sampler)
        http.stage = lambda: sampler.stage
        sampler.start()
        flow_started = time.perf_counter()
        state = study_flow(str(config_path), simulate=True, max_wait_s=args.max_wait_s, max_visits=max_visits,
                           return_state=True)
        total_s = time.perf_counter() - flow_started
        sampler.stop()
        memory.stop()
        http.uninstall()
        result = state.result(raise_on_failure=False)
        if not state.is_completed() or not isinstance(result, dict):
            console.print(f"[red]the study flow ended {state.name}: {state.message}[/]")
            result = {"status": state.name, "stages": []}

        # --- per stage --------------------------------------------------------------------------
        stage_s = {STAGES.get(s["stage"], s["stage"]): s["seconds"] for s in result["stages"]}
        wheres = ["Argilla", "portal", "fake Prolific", "LLM", "Prefect", "Prefect API", "crowdpref",
                  "waiting for drop-outs", "other"]
        seen_wheres = {w for _, w in sampler.seconds}
        wheres = [w for w in wheres if w in seen_wheres] + sorted(seen_wheres - set(wheres))
        table = Table(title=f"{config['name']} ({n_questions} questions): {result['status']} in {fmt(total_s)} "
                            f"(target {fmt(TARGET_S)} at full size)")
        table.add_column("stage")
        table.add_column("wall", justify="right")
        for where in wheres:
            table.add_column(where, justify="right")
        order = ["questions", "study 1", "study 1: crowd", "screening", "study 2", "study 2: crowd", "aggregation",
                 "evaluation", "publish"]
        stage_names = list(dict.fromkeys([*order, *(s for s, _ in sampler.seconds)]))
        totals: Counter[str] = Counter()
        for stage in stage_names:
            sampled = {w: s for (st, w), s in sampler.seconds.items() if st == stage}
            if not sampled and stage not in stage_s:
                continue
            whole = sum(sampled.values()) or 1.0
            totals.update(sampled)
            wall = stage_s.get(stage)
            shown = f"{fmt(wall)}" if wall is not None else f"({fmt(sum(sampled.values()))})"
            table.add_row(stage, shown,
                          *[f"{100 * sampled.get(w, 0) / whole:.0f}%" if sampled.get(w) else "" for w in wheres])
        whole = sum(totals.values()) or 1.0
        table.add_row("[bold]whole study[/]", f"[bold]{fmt(total_s)}[/]",
                      *[f"[bold]{100 * totals.get(w, 0) / whole:.0f}%[/]" for w in wheres])
        console.print(table)
        console.print("Shares: where the flow's thread was, sampled every 10 ms (an HTTP call in flight counts for "
                      "its service; 'portal' includes the portal's own Argilla calls; 'Prefect' = Prefect's "
                      "engine and client code, 'Prefect API' its HTTP calls; 'crowdpref' = this repository's "
                      "code and the libraries it calls).", highlight=False)
        console.print("'study N' = the pipeline's collection runs (provisioning, monitoring, export); 'study N: "
                      "crowd' = the simulated participants' own actions (arriving through the portal, logging "
                      "in, submitting), which real people do in their browsers, in parallel - its seconds "
                      "(in brackets) are part of the stage's wall time above.", highlight=False)
        console.print("seconds: " + ", ".join(f"{w} {totals[w]:.0f}" for w in wheres), highlight=False)
        console.print("crowdpref's own seconds by file: " + ", ".join(
            f"{m} {s:.0f}" for m, s in sampler.modules.most_common(8)), highlight=False)
        console.print("HTTP calls from this process (all threads): " + ", ".join(
            f"{svc} {http.count[svc]} calls {http.seconds[svc]:.0f} s" for svc in sorted(http.count)), highlight=False)

        slowest = sorted(((v[1], v[0], key) for key, v in http.endpoints.items() if key[0] == "Argilla"), reverse=True)
        console.print("Argilla calls by route (from this process; seconds, calls, ms per call):")
        for seconds, calls, (_, stage, route) in slowest[:14]:
            console.print(f"  {stage:16} {route:60} {seconds:7.1f} s {calls:6d} calls {1000 * seconds / calls:6.0f} ms",
                          highlight=False)

        # --- processes --------------------------------------------------------------------------
        cpu = memory.cpu_by_label()
        console.print(f"peak memory (this process + all children, sampled each {MEMORY_S:g} s): "
                      f"PSS {memory.peak_pss / 2**30:.2f} GiB, RSS {memory.peak_rss / 2**30:.2f} GiB (RSS counts "
                      "shared pages once per process); peak PSS per service: " + ", ".join(
                          f"{name} {value / 2**20:.0f} MiB"
                          for name, value in sorted(memory.peak.items(), key=lambda x: -x[1])), highlight=False)
        console.print(f"CPU seconds during the run ({os.cpu_count()} cores, {total_s:.0f} s wall): " + ", ".join(
            f"{name} {seconds:.0f}" for name, seconds in sorted(cpu.items(), key=lambda x: -x[1])), highlight=False)
        used = sum(cpu.values()) / ((os.cpu_count() or 1) * total_s) if total_s else 0.0
        console.print(f"the run's processes used {used:.0%} of the machine's CPU; load average now "
                      f"{os.getloadavg()[0]:.1f} (other work on the machine slows every figure above)",
                      highlight=False)

        # --- extrapolation ----------------------------------------------------------------------
        full = yaml.safe_load(CONFIG.read_text())
        full_questions = len(full["questions"]["categories"]) * full["questions"]["per_category"]
        if n_questions and n_questions < full_questions:
            factor = full_questions / n_questions
            projected = {stage: seconds * factor for stage, seconds in stage_s.items()}
            console.print(f"linear extrapolation to {full_questions} questions (x{factor:.1f}): " + ", ".join(
                f"{stage} {fmt(s)}" for stage, s in projected.items()) + f"; whole study {fmt(sum(projected.values()))}",
                highlight=False)

        # --- validation -------------------------------------------------------------------------
        if result["status"] == "complete":
            run_dir = settings.runs_dir / config["name"]
            ok, lines = validate(run_dir)
            console.print(f"[bold]validation: {'PASSED' if ok else 'FAILED'}[/]")
            for line in lines:
                console.print(f"  {line}", highlight=False)
            status = 0 if ok else 1
        else:
            console.print("[red]validation: not run (the study did not complete)[/]")
        if n_questions >= full_questions:
            console.print(f"target {fmt(TARGET_S)}: {'MET' if total_s < TARGET_S else 'MISSED'} ({fmt(total_s)})")
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]")
        status = 130
    finally:
        # every process this run started is stopped, whatever failed before
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        if memory.is_alive():
            memory.stop()
        if http is not None:
            http.uninstall()
        try:
            if settings is not None:
                from services import stack

                try:  # send the run's last logs before the Prefect server stops
                    from prefect.logging.handlers import APILogHandler

                    APILogHandler.flush()
                except Exception as exc:  # noqa: BLE001 - logs only
                    console.print(f"could not flush the run's last logs: {type(exc).__name__}", highlight=False)

                stopped = stack.down(settings)
                console.print(f"stopped: {', '.join(stopped)}", highlight=False)
        finally:
            llm.stop()
            if args.keep:
                console.print(f"kept: {root}", highlight=False)
            else:
                shutil.rmtree(root, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
