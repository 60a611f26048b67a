"""Benchmark: a paced launch of ``--places`` places (default 400) against the fake Prolific, with
Prolific's crowd taking every place the moment it opens. Issue 34's figure: no one waits over
2 s for their first item, no one gets a 5xx.

Runs by hand (not a test). It starts its OWN laptop stack in a private state folder on free ports
(Argilla with its SQL search plug-in, Redis, the rq worker, the portal, the fake Prolific) and
stops every process it started at the end, also on an error or Ctrl-C.

1. Set-up (not timed): ``<state>/capacity.json`` says the server takes ``--capacity`` arrivals
   per second (as the pre-flight's dress rehearsal would write it), so the study's paced launch
   (``prolific.study1.launch``, ``step_seconds`` ``--step-seconds``) opens steps of capacity x
   step_seconds places. A ``participants: simulated`` study whose crowd arrives through the fake
   Prolific, sized for one batch per place, goes into the portal's studies folder; its warm pool
   is filled; its Prolific study is published with the first step open.
2. The launch: from then on nothing but the portal's own launch pacer
   (:mod:`crowdpref.pacer`, a thread of the portal) raises the places. The benchmark plays
   Prolific's crowd at its most eager: every :data:`WATCH_S` seconds it reads the study's places
   (the real Prolific API on the fake), and for every place open and not taken a new person
   takes it at once and walks in as a browser does (:class:`~crowdpref.simulation.arrivals.ProlificDoor`:
   the study link, the portal's pages, the session the portal hands them) to their first item
   in Argilla (their dataset's pending records). Then they stay, as a person writing would.
3. The figures: seconds from taking the place to the first item (p50 / p95 / max, and how many
   over :data:`WAIT_LIMIT_S`), the portal's 5xx answers (from its log), failures; the launch's
   length against what the pace allows (places / (step / step_seconds)) and its raises from the
   store's event log. Exit 1 when someone waited over the limit, got a 5xx or failed.

    .venv/bin/python benchmarks/paced_launch.py [--places 400] [--capacity 2] [--step-seconds S]
                                                [--quick] [--home DIR]

``--quick``: 40 places (a minute or two).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd
import yaml
from rich.console import Console

from benchmarks.percentiles import pct
from benchmarks.portal import private_settings
from crowdpref.settings import Settings

NAME = "paced-bench"
R, Q = 4, 4  # copies per question, questions per participant: one batch per participant
WATCH_S = 0.25  # how often the crowd looks at the study's open places
WAIT_LIMIT_S = 2.0  # the figure: nobody waits longer for their first item
GIVE_UP_S = 120.0
PORTAL_LOG = re.compile(r"crowdpref\.portal (GET|POST) (\S+) (\d{3}) (\d+) ms")

console = Console()
if not console.is_terminal:
    console = Console(width=160)


def write_study(settings: Settings, places: int, step_seconds: float, pool: int) -> Path:
    from crowdpref.runfolder import write_parquet

    folder = Path(settings.portal_studies)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump({
        "name": NAME, "seed": 1, "participants": "simulated",
        "study1": {"responses_per_question": R, "questions_per_participant": Q, "pool_size": pool,
                   "inactive_after_minutes": 600, "too_fast_seconds": 0},
        "study2": {"pairs_per_participant": 4},
        "crowd": {"arrive_via": "prolific", "dropout_rate": 0.0, "never_start_rate": 0.0, "careless_rate": 0.0,
                  "random_clicker_rate": 0.0, "low_effort_rate": 0.0, "offensive_rate": 0.0, "llm": False},
        "prolific": {"study1": {"places": places, "max_places": places,
                                "launch": {"mode": "paced", "step_seconds": step_seconds}}},
    }))
    questions = pd.DataFrame([{"question_id": f"q{i:05d}", "category": "empathy",
                               "question": f"Question {i}: how would you handle situation number {i} with a friend?"}
                              for i in range(math.ceil(places * Q / R))])
    write_parquet(questions, settings.runs_dir / NAME / "questions.parquet")
    return path


@dataclass
class Person:
    key: str
    took_at: float  # perf_counter when they took the place
    waited: float = math.nan  # seconds to their first item
    error: str | None = None


@dataclass
class Crowd:
    """Prolific's eager crowd: a new person for every open place, each on a thread."""

    settings: Settings
    config: Any
    collection: Any
    people: list[Person] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def arrive(self) -> None:
        number = len(self.people) + 1
        person = Person(f"paced-{number}", time.perf_counter())
        self.people.append(person)
        thread = threading.Thread(target=self._walk, args=(person,), daemon=True, name=person.key)
        thread.start()
        self.threads.append(thread)

    def _walk(self, person: Person) -> None:
        from crowdpref.argilla_client import AnnotatorSession
        from crowdpref.errors import first_line
        from crowdpref.simulation.arrivals import Arrival, open_door

        door = open_door(self.config, self.settings, self.collection)
        try:
            arrival = door.arrive(person.key)
            if not isinstance(arrival, Arrival):
                person.error = "no place or refused"
                return
            session = AnnotatorSession(self.settings.argilla_participant_url, arrival.participant.username,
                                       arrival.password, token=arrival.token)
            try:
                dataset = next((d for d in session.datasets() if d["name"] == self.collection.dataset_name), None)
                if dataset is None or not session.pending_records(dataset["id"]):
                    person.error = "Argilla showed no item"
                    return
            finally:
                session.close()
            person.waited = time.perf_counter() - person.took_at
        except Exception as exc:  # noqa: BLE001 - a person's failure is a finding
            person.error = first_line(exc, 200, with_type=True)
        finally:
            door.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--places", type=int, default=400)
    parser.add_argument("--capacity", type=float, default=2.0, help="arrivals/s written to capacity.json")
    parser.add_argument("--step-seconds", type=float, default=None,
                        help="the launch's step_seconds (default: the config's default)")
    parser.add_argument("--quick", action="store_true", help="40 places")
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()
    places = 40 if args.quick else args.places
    if args.step_seconds is None:
        from crowdpref.config import LaunchConfig

        args.step_seconds = LaunchConfig().step_seconds
    home = args.home or Path(tempfile.mkdtemp(prefix="paced-bench-"))

    from crowdpref.config import load_study
    from crowdpref.pacer import launch_pace
    from crowdpref.recruitment import ensure_prolific_study, prolific_client
    from crowdpref.studies import open_collection
    from services import stack

    settings = private_settings(home)
    failed = True
    try:
        started = time.perf_counter()
        with console.status("starting Argilla, the portal and the fake Prolific"):
            stack.up(settings, components=["argilla", "portal", "caddy"], supervise=False)  # one origin
            stack.start_fake_prolific(settings)
        console.print(f"stack up in {time.perf_counter() - started:.0f} s (state folder {home})")
        (settings.state_dir / "capacity.json").write_text(json.dumps({"arrivals_per_s": args.capacity}))
        step = max(1, math.floor(args.capacity * args.step_seconds + 1e-9))
        path = write_study(settings, places, args.step_seconds, pool=max(2 * step, 8))
        config = load_study(path)
        collection = open_collection(path, "study1", settings)
        with console.status("filling the warm pool"):
            collection.refill_pool()
        pace = launch_pace(config, "study1", settings)
        console.print(f"pace: {pace.describe()}; {places} places; the crowd takes every open place at once")
        with prolific_client(config, settings) as client:
            platform = ensure_prolific_study(collection, config, settings, client, pace=pace)
            crowd = Crowd(settings, config, collection)
            log_before = len(_portal_lines(settings))
            launch_start = time.perf_counter()
            last_new = launch_start
            while True:
                study = client.get_study(platform.external_id)
                free = study.total_available_places - len(crowd.people)  # each took one place, none gave it back
                for _ in range(max(0, free)):
                    crowd.arrive()
                    last_new = time.perf_counter()
                if len(crowd.people) >= places:
                    break
                if time.perf_counter() - last_new > max(120.0, 6 * args.step_seconds):
                    console.print(f"[red]no place opened for {time.perf_counter() - last_new:.0f} s: stopped at "
                                  f"{len(crowd.people)} of {places}[/red]")
                    break
                time.sleep(WATCH_S)
            opened_in = time.perf_counter() - launch_start
            for thread in crowd.threads:
                thread.join(GIVE_UP_S)
        statuses = [m.group(3) for line in _portal_lines(settings)[log_before:] if (m := PORTAL_LOG.search(line))]
        five = sum(s.startswith("5") for s in statuses)
        waits = [p.waited for p in crowd.people if not math.isnan(p.waited)]
        errors = [p for p in crowd.people if p.error]
        over = [w for w in waits if w > WAIT_LIMIT_S]
        raises = collection.store.events(collection.info.id, kinds=["places_raised"])
        allowed_s = (places - step) / (step / args.step_seconds)
        console.print(f"\n[bold]{len(crowd.people)} people took {places} places in {opened_in:.0f} s[/bold] "
                      f"(the pace allows it in {allowed_s:.0f} s at the earliest: {len(raises)} raises after the first "
                      f"step of {step})")
        if waits:
            console.print(f"time to the first item: p50 {pct(waits, 50):.2f} s, p95 "
                          f"{pct(waits, 95):.2f} s, max {max(waits):.2f} s; over {WAIT_LIMIT_S:g} s: "
                          f"{len(over)}")
        console.print(f"portal answers: {len(statuses)}, of them 5xx: {five}; people who failed: {len(errors)}"
                      + "".join(f"\n  {p.key}: {p.error}" for p in errors[:5]))
        verdict = not over and not five and not errors and len(waits) == places
        console.print(f"[{'green' if verdict else 'red'}]{'MET' if verdict else 'MISSED'}[/]: nobody waited over "
                      f"{WAIT_LIMIT_S:g} s, no 5xx, everyone in")
        failed = not verdict
        collection.store.close()
    finally:
        with console.status("stopping the stack"):
            stack.down(settings)  # the fake Prolific too (it has a pid record)
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    return 1 if failed else 0


def _portal_lines(settings: Settings) -> list[str]:
    from services.process import ProcessManager

    try:
        return ProcessManager(settings.state_dir).log_path("portal").read_text(errors="replace").splitlines()
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main())
