"""The dress rehearsal (``crowdpref preflight STUDY.yaml --rehearse N``): N simulated participants
through the running stack's real participant address - the study link with a PROLIFIC_PID,
onboarding when the study has it, the work in Argilla through the same address (and, in the
public profile, Caddy's TLS), Finish - on a throw-away copy of the study, recruited on the FAKE
Prolific. Nobody real is recruited or paid.

- The copy: ``<name>-rehearsal-<stamp>`` (its own run folder, Argilla accounts, workspaces and
  datasets, store rows), study 1 only, with a crowd that neither drops out nor is careless (every
  participant is expected to finish), and enough answers per question for N batches.
- The crowd: :class:`~crowdpref.simulation.crowd.SimulatedCrowd` through the
  :class:`~crowdpref.simulation.arrivals.ProlificDoor`, as ``crowdpref demo`` has it, one
  participant per thread so that arrivals overlap.
- The waves: the N participants are split over arrival rates :data:`RATES` (N // 4 per wave, the
  remainder in the fastest; fewer than 4: one each in the slowest waves), the pool of warm
  accounts topped up to the study's ``pool_size`` before each wave (as before a launch). The time
  to the first item is from the entry request (the fake Prolific hands out the study link, the
  portal's entry) to Argilla's answer with the participant's queue. The capacity is the highest
  rate whose p95 stays under :data:`P95_LIMIT_S` with every arrival of its wave through; it goes
  to ``<state>/capacity.json`` (0 when no rate tried was within it).
- The checks: every count in the store and in Argilla (answers submitted, participants complete,
  submissions on the fake Prolific); the webhooks the portal heard during the rehearsal; Argilla's
  worker jobs done and failed during it.
- The clean-up: the copy's Argilla accounts, workspaces and datasets, its store rows and its run
  folder; a rehearsal killed half-way is removed by the next one (:func:`remove_leftovers`).
"""

from __future__ import annotations

import math
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crowdpref.errors import first_line
from crowdpref.preflight.report import Check, fail, ok, warn
from crowdpref.preflight.stack import RqWorkers, portal_hook_statuses

RATES = (0.5, 1.0, 2.0, 4.0)
"""Arrivals per second of the waves, slowest first."""
P95_LIMIT_S = 1.0
"""The capacity is the highest rate whose time to the first item stays under this at p95."""
MARK = "-rehearsal-"
REHEARSAL_NAME = re.compile(r"[a-z0-9-]+-rehearsal-\d{10}")
PROLIFIC_WORKSPACE = "demo-workspace"  # the fake Prolific's workspace (crowdpref demo's)
SETTLE_S = 15.0
"""After the last participant: how long to wait for Argilla's worker and the webhooks to go quiet."""
PARTICIPANT_TIMEOUT_S = 180.0


# --- pure parts (unit-tested) ----------------------------------------------------------------------
def rehearsal_name(study: str, now: float) -> str:
    """``<study>-rehearsal-<yymmddHHMM>`` (UTC), the study's name cut so the whole fits in 40."""
    suffix = f"{MARK}{time.strftime('%y%m%d%H%M', time.gmtime(now))}"
    return f"{study[: 40 - len(suffix)].rstrip('-')}{suffix}"


def is_rehearsal(name: str) -> bool:
    return REHEARSAL_NAME.fullmatch(name) is not None


def waves(n: int, rates: Sequence[float] = RATES) -> list[tuple[float, int]]:
    """(rate, participants) per wave: ``n`` split over ``rates``, the remainder to the fastest
    waves; with fewer participants than rates, one each in the slowest waves."""
    if n <= 0:
        return []
    if n < len(rates):
        return [(rate, 1) for rate in rates[:n]]
    share, extra = divmod(n, len(rates))
    return [(rate, share + (i >= len(rates) - extra)) for i, rate in enumerate(rates)]


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (q in 0..100) of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Wave:
    rate: float
    planned: int
    times: list[float] = field(default_factory=list)  # seconds to the first item, per participant through
    errors: list[str] = field(default_factory=list)  # why the others did not get through

    @property
    def p50(self) -> float | None:
        return percentile(self.times, 50) if self.times else None

    @property
    def p95(self) -> float | None:
        return percentile(self.times, 95) if self.times else None

    @property
    def within(self) -> bool:
        return not self.errors and self.p95 is not None and self.p95 < P95_LIMIT_S


def capacity(measured: Sequence[Wave]) -> float:
    """The highest rate whose wave got everyone through with p95 < :data:`P95_LIMIT_S`; 0 when none."""
    return max((w.rate for w in measured if w.within), default=0.0)


def capacity_record(measured: Sequence[Wave], participants: int, now: float) -> dict[str, Any]:
    """What ``<state>/capacity.json`` holds (read by the config check and the paced launch)."""
    return {"arrivals_per_s": capacity(measured), "measured_at": now,
            "measured_at_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now)),
            "method": f"dress rehearsal: {participants} simulated participants in waves of increasing arrival "
                      f"rate; the highest rate whose p95 time to the first item < {P95_LIMIT_S:g} s",
            "participants": participants, "p95_limit_s": P95_LIMIT_S,
            "rates": [{"per_s": w.rate, "participants": w.planned, "through": len(w.times),
                       "p50_s": _round(w.p50), "p95_s": _round(w.p95)} for w in measured]}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def capacity_check(measured: Sequence[Wave]) -> Check:
    name = "rehearsal: capacity measured"
    tried = "; ".join(f"{w.rate:g}/s p95 {_seconds(w.p95)}" + (f" ({len(w.errors)} not through)" if w.errors else "")
                      for w in measured)
    per_s = capacity(measured)
    if not per_s:
        return warn(name, f"below the lowest rate tried ({tried}): no wave stayed under p95 {P95_LIMIT_S:g} s",
                    "give the server more CPU, raise the study's pool_size (warm accounts), and pace the launch "
                    "slowly; rehearse again")
    return ok(name, f"{per_s:g} arrival(s)/s at p95 < {P95_LIMIT_S:g} s ({tried}); written to capacity.json")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def rehearsal_study(data: dict[str, Any], name: str, participants: int, questions: int) -> dict[str, Any]:
    """The rehearsal's copy of a study config (its YAML as a dict): named ``name``, simulated
    participants arriving through the fake Prolific with every place open at once (the waves pace
    the arrivals), none careless or dropping out, no LLM, no
    Hub, study 1 sized for ``participants`` batches of its ``questions_per_participant`` over
    ``questions`` questions. Study 1's onboarding and checks stay as they are."""
    copy = {k: v for k, v in data.items() if k not in ("title",)}
    copy["name"] = name
    copy["participants"] = "simulated"
    prolific = dict(data.get("prolific") or {})
    # every place open at once: the waves set the arrival rates (a paced launch would cap them)
    prolific["study1"] = {**(prolific.get("study1") or {}), "launch": {"mode": "all"}}
    copy["prolific"] = {**prolific, "enabled": False}
    copy["crowd"] = {**(data.get("crowd") or {}), "arrive_via": "prolific", "llm": False, "dropout_rate": 0.0,
                     "never_start_rate": 0.0, "low_effort_rate": 0.0, "offensive_rate": 0.0,
                     "careless_rate": 0.0, "random_clicker_rate": 0.0}
    copy["publish"] = {**(data.get("publish") or {}), "repo_id": None}
    questions_section = dict(data.get("questions") or {})
    if isinstance(questions_section.get("llm"), dict):
        questions_section["llm"] = {**questions_section["llm"], "enabled": False}
    copy["questions"] = questions_section
    study1 = dict(data.get("study1") or {})
    study1.pop("username_prefix", None)
    per = int(study1.get("questions_per_participant", 5))
    copies = int(study1.get("responses_per_question", 4))
    study1["responses_per_question"] = max(copies, math.ceil(participants * min(per, questions) / max(1, questions)))
    study1["too_fast_seconds"] = 0
    copy["study1"] = study1
    study2 = dict(data.get("study2") or {})
    study2.pop("username_prefix", None)
    copy["study2"] = study2
    return copy


# --- the rehearsal on the running stack -----------------------------------------------------------
@dataclass
class Readers:
    """What the rehearsal reads around the crowd (the pre-flight's probes): the portal's log
    lines and Argilla's rq workers."""

    portal_log: Callable[[], Sequence[str]]
    rq_workers: Callable[[], RqWorkers]


@dataclass
class Outcome:
    """What the rehearsal did: its lines, the waves, and capacity.json's path when written."""

    name: str
    checks: list[Check]
    waves: list[Wave]
    capacity_file: Path | None = None


def rehearse(settings: Any, study_path: Path, participants: int, readers: Readers, *,
             rates: Sequence[float] = RATES, now: Callable[[], float] = time.time,
             say: Callable[[str], None] = lambda line: None) -> Outcome:
    """Run the rehearsal on the running stack (the portal and the fake Prolific must answer:
    ``crowdpref preflight --rehearse`` starts the fake) and remove it; its report lines. Never
    raises for what the rehearsal finds: a failure is a FAIL line; the copy is removed whatever
    happened."""
    from crowdpref.store import open_store

    started = now()
    checks: list[Check] = []
    store = open_store(settings)
    try:
        leftovers = remove_leftovers(settings, store)
        if leftovers:
            checks.append(ok("rehearsal: leftovers removed", "an earlier rehearsal stopped half-way; removed "
                             + "; ".join(leftovers)))
        measured: list[Wave] = []
        try:
            name = rehearsal_name(_study_name(study_path), started)
        except Exception as exc:  # noqa: BLE001 - an invalid config: its own line says why
            return Outcome("", checks + [fail("rehearsal: participants through the stack", f"not rehearsed: "
                                              f"{first_line(exc, 200)}", "fix the study config first")], measured)
        restore = _swap_webhook_meta(store)
        try:
            checks += _run(settings, store, Path(study_path), name, participants, readers, rates, measured, say)
        except Exception as exc:  # noqa: BLE001 - the rehearsal's failure is its FAIL line
            checks.append(fail("rehearsal: participants through the stack",
                               f"stopped: {first_line(exc, 300, with_type=True)}",
                               "read <state>/logs/portal.log and argilla.log; fix the service named, then rehearse again"))
        finally:
            restore()
            checks.append(_removed_check(settings, store, name))
        capacity_file = None
        if measured and any(w.times or w.errors for w in measured):
            checks.append(capacity_check(measured))
            capacity_file = write_capacity(settings.state_dir, capacity_record(measured, participants, now()))
        return Outcome(name, checks, measured, capacity_file)
    finally:
        store.close()


def write_capacity(state_dir: Path, record: dict[str, Any]) -> Path:
    from crowdpref.preflight.host import CAPACITY_FILE
    from crowdpref.runfolder import write_json

    return write_json(record, Path(state_dir) / CAPACITY_FILE)


def _study_name(study_path: Path) -> str:
    from crowdpref.config import load_study

    return load_study(study_path).name


def _swap_webhook_meta(store: Any) -> Callable[[], None]:
    """The fake Prolific signs its webhooks with a secret of its own, which the rehearsal stores
    where the portal reads it; this puts back what was there before (a real subscription's)."""
    from crowdpref.recruitment import WEBHOOK_SECRET_META, WEBHOOK_SUBSCRIPTION_META

    before = {meta: store.get_meta(meta) for meta in (WEBHOOK_SECRET_META, WEBHOOK_SUBSCRIPTION_META)}

    def restore() -> None:
        for meta, value in before.items():
            store.set_meta(meta, value or "")

    return restore


def _run(settings: Any, store: Any, study_path: Path, name: str, n: int, readers: Readers,
         rates: Sequence[float], measured: list[Wave], say: Callable[[str], None]) -> list[Check]:
    import yaml

    from crowdpref.config import load_study
    from crowdpref.recruitment import (
        ensure_prolific_study,
        prolific_client,
        setup_webhooks,
    )
    from crowdpref.runfolder import RunFolder, write_parquet, write_text
    from crowdpref.simulation.crowd import CrowdReport, SimulatedCrowd
    from crowdpref.studies import open_collection

    source = load_study(study_path)
    data = yaml.safe_load(Path(study_path).read_text(encoding="utf-8"))
    path = settings.runs_dir / f"{name}.yaml"
    questions = _questions(settings, source, data, name, path)
    config_data = rehearsal_study(data, name, n, len(questions))
    write_text(yaml.safe_dump(config_data, sort_keys=False, allow_unicode=True), path)
    write_parquet(questions, RunFolder.for_study(settings.runs_dir, name).questions)
    config = load_study(path)
    say(f"rehearsal {name}: {n} participants in waves of " + ", ".join(f"{k} at {r:g}/s" for r, k in waves(n, rates)))
    collection = open_collection(path, "study1", settings)
    collection.refill_pool()
    with prolific_client(config, settings) as client:
        setup_webhooks(settings, store, client, workspace_id=PROLIFIC_WORKSPACE, force=True)
        ensure_prolific_study(collection, config, settings, client)
    log_before = len(readers.portal_log())
    rq_before = _jobs(readers)
    deliveries_before = len(store.deliveries("prolific"))
    crowd = SimulatedCrowd(config.crowd, config.seed)
    writer = crowd.study1_writer([], Counter())
    walker = crowd.onboarding_walker(config, "study1")
    reports: list[CrowdReport] = []
    number = 0
    for rate, k in waves(n, rates):
        collection.refill_pool()  # warm accounts up to pool_size, as before a launch
        wave = Wave(rate, k)
        threads = []
        wave_start = time.perf_counter()
        for i in range(k):
            number += 1
            delay = wave_start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            thread = threading.Thread(target=_participant, daemon=True, name=f"rehearsal-{number}", args=(
                settings, config, collection, crowd, writer, walker, SimulatedCrowd.key("study1", number), wave,
                reports))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(PARTICIPANT_TIMEOUT_S)
        if any(thread.is_alive() for thread in threads):
            wave.errors.append(f"still working after {PARTICIPANT_TIMEOUT_S:g} s")
        measured.append(wave)
        say(f"  {rate:g}/s: {len(wave.times)}/{k} through, p50 {_seconds(wave.p50)}, p95 {_seconds(wave.p95)}")
    rq_after = _settle(readers, rq_before)
    collection.monitor()  # the store reads the answers back, as the study flow's collection run does
    lines = list(readers.portal_log())[log_before:]
    return [
        _through_check(settings, measured, n),
        _first_item_check(measured),
        _counts_check(store, collection, config, settings, sum(r.finished for r in reports), n),
        _webhooks_check(lines, len(store.deliveries("prolific")) - deliveries_before),
        _worker_check(rq_before, rq_after),
    ]


def _questions(settings: Any, source: Any, data: dict[str, Any], name: str, path: Path) -> Any:
    """The study's own questions when they were generated, else built from its bank and files
    (no LLM: a rehearsal spends nothing)."""
    import yaml

    from crowdpref.config import load_study
    from crowdpref.errors import CrowdprefError
    from crowdpref.questions import build_questions
    from crowdpref.runfolder import RunFolder, read_parquet, write_text

    own = RunFolder.for_study(settings.runs_dir, source.name).questions
    if own.exists():
        return read_parquet(own, needed_by="")
    write_text(yaml.safe_dump(rehearsal_study(data, name, 1, 1), sort_keys=False, allow_unicode=True), path)
    built = build_questions(load_study(path), settings).questions
    if built.empty:
        raise CrowdprefError(f"no questions to rehearse with: {source.name} has no questions.parquet yet and no bank "
                             "or file questions; run its generate-questions flow first")
    return built


def _participant(settings: Any, config: Any, collection: Any, crowd: Any, writer: Any, walker: Any, key: str,
                 wave: Wave, reports: list[Any]) -> None:
    """One simulated participant, start to Finish, timed to their first item."""
    from crowdpref.simulation.arrivals import Arrival, open_door
    from crowdpref.simulation.crowd import CrowdReport

    report = CrowdReport()
    door = open_door(config, settings, collection, onboard=walker)
    first: list[float] = []
    started = time.perf_counter()
    try:
        arrival = door.arrive(key)
        if not isinstance(arrival, Arrival):
            wave.errors.append(f"{key}: {'screened out by the onboarding quiz' if arrival else 'no place or refused'}")
            return
        crowd.work(collection, settings.argilla_participant_url, writer, key, arrival, door, report,
                   on_queue=lambda queue: first.append(time.perf_counter() - started))
        if not first:
            wave.errors.append(f"{key}: Argilla showed no dataset")
        elif not report.finished:
            wave.errors.append(f"{key}: got no completion code at Finish")
        else:
            wave.times.append(first[0])
    except Exception as exc:  # noqa: BLE001 - one participant's failure is a finding, not a crash
        wave.errors.append(f"{key}: {first_line(exc, 200, with_type=True)}")
    finally:
        door.close()
        reports.append(report)


def _jobs(readers: Readers) -> tuple[int, int] | None:
    try:
        state = readers.rq_workers()
    except Exception:  # noqa: BLE001 - no Redis: the worker line says so
        return None
    done = sum(int(w.get("successful_job_count") or 0) for w in state.workers)
    failed = max(sum(int(w.get("failed_job_count") or 0) for w in state.workers), state.failed_in_registry)
    return done, failed


def _settle(readers: Readers, before: tuple[int, int] | None) -> tuple[int, int] | None:
    """Wait until Argilla's worker has been idle for a second (its webhooks sent), at most SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    last = _jobs(readers)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _jobs(readers)
        if now == last:
            return now
        last = now
    return last


def _through_check(settings: Any, measured: Sequence[Wave], n: int) -> Check:
    name = "rehearsal: participants through the stack"
    through = sum(len(w.times) for w in measured)
    where = f"entry at {settings.portal_public_url}, onboarding, work in Argilla at {settings.argilla_participant_url}, Finish"
    if through == n:
        return ok(name, f"{n}/{n} through ({where})")
    errors = [e for w in measured for e in w.errors]
    return fail(name, f"{through}/{n} through ({where}); first problem: {errors[0] if errors else 'unknown'}",
                "read <state>/logs/portal.log and argilla.log around the rehearsal's time; fix, then rehearse again")


def _first_item_check(measured: Sequence[Wave]) -> Check:
    name = "rehearsal: time to the first item"
    times = [t for w in measured for t in w.times]
    if not times:
        return fail(name, "no participant reached their first item", "see the line above")
    seen = f"p50 {percentile(times, 50):.2f} s, p95 {percentile(times, 95):.2f} s over {len(times)} participant(s)"
    if percentile(times, 95) >= P95_LIMIT_S:
        return warn(name, f"{seen} (the target is p95 < {P95_LIMIT_S:g} s at the launch's rate)",
                    "pace the launch at or below the measured capacity (see the capacity line)")
    return ok(name, seen)


def _counts_check(store: Any, collection: Any, config: Any, settings: Any, finished: int, n: int) -> Check:
    """Every count in the store and in Argilla: N participants complete, their whole batches
    submitted in the store, the same answers submitted in Argilla, N finishers on the fake Prolific."""
    from crowdpref.argilla_client import DatasetRef
    from crowdpref.recruitment import prolific_client

    name = "rehearsal: counts in the store and in Argilla"
    cid = collection.info.id
    people = store.participants(cid)
    batch = sum(len(p.assignments) for p in people)
    in_store = sum(a.status == "submitted" for p in people for a in p.assignments)
    complete = sum(p.status == "complete" for p in people)
    in_argilla = 0
    for p in people:
        if p.dataset_id is None:
            continue
        user = collection.owner.user_id(p.username)
        answers = collection.owner.answers(DatasetRef(p.dataset_id, f"{p.username}/{collection.dataset_name}"))
        in_argilla += sum(a.status == "submitted" and a.user_id == user for a in answers)
    platform = store.platform_study(cid)
    with prolific_client(config, settings) as client:
        submissions = client.list_submissions(platform.external_id) if platform is not None else []
    done_on_prolific = sum(s.status in ("AWAITING REVIEW", "APPROVED") for s in submissions)
    seen = (f"{len(people)} claimed, {complete} complete, {finished} finished with their code; answers submitted: "
            f"{in_store} in the store, {in_argilla} in Argilla, of {batch} allocated; {done_on_prolific} "
            f"submission(s) awaiting review on the fake Prolific")
    if len(people) == complete == finished == done_on_prolific == n and in_store == in_argilla == batch and batch:
        return ok(name, seen)
    return fail(name, seen + f" (expected {n} of each, and every allocated answer in both)",
                "a count that differs names the part that lost work: the store (portal.log), Argilla "
                "(argilla.log) or the Prolific hand-over; fix it and rehearse again")


def _webhooks_check(lines: Sequence[str], prolific_recorded: int) -> Check:
    name = "rehearsal: webhooks heard"
    statuses = portal_hook_statuses(lines)
    argilla, prolific = statuses.get("/hooks/argilla", {}), statuses.get("/hooks/prolific", {})
    heard_a = sum(k for s, k in argilla.items() if s < 300)
    refused_a = sum(k for s, k in argilla.items() if s >= 400)
    heard_p = sum(k for s, k in prolific.items() if s < 300)
    refused_p = sum(k for s, k in prolific.items() if s >= 400)
    seen = (f"Argilla {heard_a} accepted, {refused_a} refused; Prolific (fake) {heard_p} accepted, {refused_p} "
            f"refused, {prolific_recorded} recorded in the store")
    if not heard_a or not (heard_p or prolific_recorded):
        return fail(name, seen, "the portal does not hear them: read <state>/logs/argilla-worker.log (webhook jobs) "
                    "and portal.log; restart with `crowdpref up`")
    return ok(name, seen)


def _worker_check(before: tuple[int, int] | None, after: tuple[int, int] | None) -> Check:
    name = "rehearsal: Argilla worker jobs"
    if before is None or after is None:
        return fail(name, "Argilla's worker queue in Redis cannot be read", "start the stack with `crowdpref up`")
    done, failed = after[0] - before[0], after[1] - before[1]
    if failed:
        return fail(name, f"{done} OK, {failed} failed during the rehearsal",
                    "read the tracebacks in <state>/logs/argilla-worker.log (ERROR:rq.worker lines)")
    if not done:
        return fail(name, "no job done during the rehearsal (its webhooks were not sent)",
                    "read <state>/logs/argilla-worker.log; restart with `crowdpref up`")
    return ok(name, f"{done} OK, 0 failed during the rehearsal")


# --- the clean-up ----------------------------------------------------------------------------------------
def remove_leftovers(settings: Any, store: Any) -> list[str]:
    """Remove every rehearsal this stack still holds (a rehearsal killed half-way): its Argilla
    accounts, store rows, run folder and config. Returns what was removed, one phrase each."""
    from sqlalchemy import select

    from crowdpref.store import schema

    with store._read() as conn:
        names = {row for row in conn.execute(select(schema.collections.c.study).distinct()).scalars()
                 if is_rehearsal(row)}
    runs = Path(settings.runs_dir)
    if runs.is_dir():
        names |= {p.name.removesuffix(".yaml") for p in runs.iterdir() if is_rehearsal(p.name.removesuffix(".yaml"))}
    return [f"{name} ({describe(remove(settings, store, name))})" for name in sorted(names)]


def remove(settings: Any, store: Any, name: str) -> dict[str, int]:
    """Remove the rehearsal ``name``: wait for the portal's refill of its pool to end, delete its
    accounts (datasets, workspaces, users) in Argilla, its rows in the store (one transaction)
    and its run folder and config. Refuses a name that is not a rehearsal's."""
    from crowdpref.argilla_client import owner_for

    if not is_rehearsal(name):
        raise ValueError(f"{name!r} is not a rehearsal's name: refusing to remove it")
    _wait_for_refills(store, name)
    usernames = [a.username for key in ("study1", "study2") if (info := store.find_collection(name, key))
                 for a in store.accounts(info.id)]
    removed: dict[str, int] = {}
    if usernames:
        owner = owner_for(settings)
        try:
            removed.update(owner.delete_accounts(usernames))
        finally:
            owner.close()
    rows = store.delete_study(name)
    removed["store rows"] = sum(rows.values())
    folder = Path(settings.runs_dir) / name
    removed["run folder"] = int(folder.exists())
    shutil.rmtree(folder, ignore_errors=True)
    (Path(settings.runs_dir) / f"{name}.yaml").unlink(missing_ok=True)
    return removed


def describe(removed: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in removed.items()) or "nothing left"


def _wait_for_refills(store: Any, name: str, limit_s: float = 90.0) -> None:
    """The portal tops a pool up in the background after claims (yielding to arrivals for a few
    seconds first); an account it makes after the clean-up would stay behind. Wait (at most
    ``limit_s``) until no account of the rehearsal is being made and none was claimed for the
    portal's quiet time."""
    from crowdpref.collection import REFILL_QUIET_S

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        busy = False
        for key in ("study1", "study2"):
            info = store.find_collection(name, key)
            if info is None:
                continue
            last = store.last_claim_at(info.id)
            busy |= any(a.state == "creating" for a in store.accounts(info.id))
            busy |= last is not None and store.clock() - last < REFILL_QUIET_S + 2.0
        if not busy:
            return
        time.sleep(0.5)


def _removed_check(settings: Any, store: Any, name: str) -> Check:
    """Remove the rehearsal and check that nothing of it is left."""
    check = "rehearsal: removed"
    try:
        removed = remove(settings, store, name)
    except Exception as exc:  # noqa: BLE001 - reported; the next rehearsal removes what is left
        return fail(check, f"{name} could not be removed: {first_line(exc, 200, with_type=True)}",
                    "rehearse again (it removes leftovers first), or remove its accounts by hand")
    left = [what for what, there in (("store rows", store.find_collection(name, "study1") is not None),
                                     ("run folder", (Path(settings.runs_dir) / name).exists())) if there]
    if left:
        return fail(check, f"{name}: still there: {', '.join(left)}", "rehearse again (it removes leftovers first)")
    return ok(check, f"{name}: {describe(removed)} removed (the fake Prolific's study stays in its memory)")
