"""The open peer in the same run: potato (potato-annotation 2.12.1) under the burst shapes that
``benchmarks/portal.py`` sends to crowdpref.

Runs by hand (not a test), from ``benchmarks/portal.py --compare potato`` or on its own:

    .venv/bin/python benchmarks/potato_peer.py [--arrivals 200] [--window 10] [--over 25 --places 8]
                                               [--potato-venv DIR]

1. potato is installed with pip from the package index into a new virtualenv in a temporary
   folder (this interpreter's pip, ``--python``; about a minute; ``--potato-venv DIR`` reuses
   one). Without the package index the
   benchmark stops with one line saying so and exit status 2.
2. For each burst a fresh potato server (its own process, a free port on 127.0.0.1, its own task
   folder) runs a Prolific-style study: ``login: {type: url_direct, url_argument: PROLIFIC_PID}``,
   ``max_annotations_per_user`` = Q items per person and ``max_annotations_per_item`` = R people
   per item, and as many items as the burst's places need (places = items x R / Q). Its
   assignment strategy is potato's default (``fixed_order``).
3. The burst: ``arrivals`` people whose entry requests are due evenly over ``window`` seconds
   (:func:`burst_schedule`, the schedule ``portal.py`` uses), one thread each. A person opens
   ``/?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..`` and follows the redirects; the time counted
   is from that request to the page showing their first item (a hidden ``instance_id`` field).
   An error (no such page, 5xx, no connection) counts once and is retried as a person reloads,
   after 1, 2, 4, 8 s; whoever has no item page after ``GIVE_UP_S`` counts as "never".
4. After the burst (not timed) each person's assigned items are read from potato's admin API
   (``/admin/user_state/<id>``, with the admin key of the task's config). Double allocations
   (:func:`over_cap`): in the order the people's item pages came back, a person counts when one
   of their items was already held by R others. Also printed: the most people holding one item.

potato keeps its state in memory until a participant's first answer; there is no account and no
durable claim behind the figures. The admin key and the Prolific-style ids never reach the
output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for benchmarks.percentiles
from benchmarks.percentiles import fmt, pct  # noqa: E402
from tests.ports import free_port  # noqa: E402

POTATO = "potato-annotation==2.12.1"
GIVE_UP_S = 300.0  # a person without their item page after this long gives up
PAUSE_FIRST_S, PAUSE_MAX_S = 1.0, 8.0  # reloads after an error: 1, 2, 4, 8 s
START_TIMEOUT_S = 180.0  # the potato server answering after its start
INSTALL_TIMEOUT_S = 900.0
ITEM_PAGE = re.compile(r'<input[^>]*name="instance_id"[^>]*value="([^"]+)"')


class PotatoUnavailable(RuntimeError):
    """potato could not be installed or started; the message is one line."""


# --- pure parts ------------------------------------------------------------------------------------------
def burst_schedule(arrivals: int, window: float) -> list[float]:
    """Seconds after the burst's start at which each entry request is due: evenly over
    ``window`` (the first at 0, the last at ``window * (arrivals - 1) / arrivals``), as
    ``benchmarks/portal.py`` schedules crowdpref's arrivals."""
    if arrivals < 0 or window < 0 or math.isnan(window):
        raise ValueError(f"arrivals and window must be >= 0 (got {arrivals}, {window})")
    return [i * window / arrivals for i in range(arrivals)]


def over_cap(assignments: Iterable[tuple[str, Sequence[str]]], cap: int) -> list[str]:
    """The people handed an item that ``cap`` others already held (double allocations), taking
    ``assignments`` (person, their items) in the order they were served. A person counts once
    however many of their items were over; an item listed twice for one person counts once."""
    if cap < 1:
        raise ValueError(f"cap must be >= 1 (got {cap})")
    holders: Counter[str] = Counter()
    over: list[str] = []
    for person, items in assignments:
        mine = set(items)
        if any(holders[item] >= cap for item in mine):
            over.append(person)
        holders.update(mine)
    return over


def most_holders(assignments: Iterable[tuple[str, Sequence[str]]]) -> int:
    """The most people holding one item (0 with no assignment)."""
    holders: Counter[str] = Counter()
    for _, items in assignments:
        holders.update(set(items))
    return max(holders.values(), default=0)


# --- installing and running potato -----------------------------------------------------------------------
def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:200]


def install_potato(folder: Path, env: dict[str, str] | None = None) -> Path:
    """A new virtualenv in ``folder`` with potato installed by pip from the package index;
    returns its ``potato`` command. Raises :class:`PotatoUnavailable` (one line) when pip
    cannot install it (no package index, no network)."""
    venv = folder / "potato-venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
    try:  # no pip of its own (seconds, not a minute): this interpreter's pip installs into it
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, text=True,
                       timeout=300)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise PotatoUnavailable(f"cannot create a virtualenv for potato in {venv}: {_last_line(str(exc))}") from None
    try:
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                              POTATO], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=run_env)
    except subprocess.TimeoutExpired:
        raise PotatoUnavailable(f"pip did not install {POTATO} within {INSTALL_TIMEOUT_S:g} s "
                                "(is the package index reachable?)") from None
    if pip.returncode != 0:
        raise PotatoUnavailable(f"pip could not install {POTATO} from the package index (exit {pip.returncode}: "
                                f"{_last_line(pip.stderr + pip.stdout)}); --compare potato needs the package "
                                "index, run without it offline")
    return potato_command(venv)


def potato_command(venv: Path) -> Path:
    command = venv / "bin" / "potato"
    if not command.exists():
        raise PotatoUnavailable(f"{venv} has no bin/potato: install {POTATO} there, or leave --potato-venv out")
    return command


@dataclass
class PotatoStudy:
    """One Prolific-style potato study: ``places`` people, Q items each, R people per item."""

    places: int
    per_person: int
    per_item: int

    @property
    def items(self) -> int:
        return math.ceil(self.places * self.per_person / self.per_item)

    def write(self, task: Path, admin_key: str) -> Path:
        task.mkdir(parents=True, exist_ok=True)
        with open(task / "items.jsonl", "w") as out:
            for i in range(self.items):
                out.write(json.dumps({"id": f"q{i:05d}",
                                      "text": f"Question {i}: how would you handle situation number {i} "
                                              "with a friend?"}) + "\n")
        config = {
            "annotation_task_name": "potato-peer-bench",
            "task_dir": ".",
            "output_annotation_dir": "annotation_output",
            "data_files": ["items.jsonl"],
            "item_properties": {"id_key": "id", "text_key": "text"},
            "login": {"type": "url_direct", "url_argument": "PROLIFIC_PID"},
            "max_annotations_per_user": self.per_person,
            "max_annotations_per_item": self.per_item,
            "admin_api_key": admin_key,
            "annotation_schemes": [{"annotation_type": "radio", "name": "better",
                                    "description": "Which answer is better?", "labels": ["A", "B"]}],
        }
        path = task / "config.yaml"
        path.write_text(json.dumps(config, indent=1))  # JSON is YAML
        return path


class PotatoServer:
    """A potato server in its own process group; ``stop`` ends the group (also after an error)."""

    def __init__(self, command: Path, study: PotatoStudy, folder: Path):
        self.command, self.study, self.folder = command, study, folder
        self.admin_key = secrets.token_urlsafe(24)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "potato.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        config = self.study.write(self.folder, self.admin_key)
        started = time.perf_counter()
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [str(self.command), "start", config.name, "-p", str(self.port), "--host", "127.0.0.1"],
                cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.perf_counter() - started < START_TIMEOUT_S:
            if self.process.poll() is not None:
                raise PotatoUnavailable(f"the potato server exited ({self.process.returncode}) at its start; "
                                        f"its log: {self.log}")
            try:
                httpx.get(f"{self.url}/", timeout=2)
                return time.perf_counter() - started
            except httpx.TransportError:
                time.sleep(0.3)
        raise PotatoUnavailable(f"the potato server did not answer within {START_TIMEOUT_S:g} s; its log: {self.log}")

    def cpu_seconds(self) -> float:
        if self.process is None:
            return math.nan
        try:
            raw = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return math.nan
        fields = raw[raw.rfind(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def assigned(self, pid: str) -> list[str]:
        reply = httpx.get(f"{self.url}/admin/user_state/{pid}", headers={"X-API-Key": self.admin_key}, timeout=60)
        if reply.status_code == 404:
            return []
        reply.raise_for_status()
        return [item["id"] for item in reply.json()["assignments"]["items"]]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        except ProcessLookupError:
            pass


# --- one burst -------------------------------------------------------------------------------------------
@dataclass
class Arrival:
    pid: str
    session_id: str
    scheduled: float
    started: float = math.nan
    total: float = math.nan  # entry request -> first item's page (retries and pauses included)
    errors: int = 0
    error: str | None = None
    first_item: str | None = None
    items: list[str] = field(default_factory=list)
    browser: httpx.Client | None = None  # made before the burst (an SSL context costs CPU)

    @property
    def ok(self) -> bool:
        return self.first_item is not None


@dataclass
class BurstResult:
    label: str
    arrivals: int
    window: float
    places: int
    study: PotatoStudy
    people: list[Arrival]
    start_s: float
    cpu_s: float
    wall_s: float
    load: float = math.nan  # the machine's 1-minute load average before the burst

    def seconds(self) -> list[float]:
        return [a.total if a.ok else math.inf for a in self.people]

    @property
    def p50(self) -> float:
        return pct(self.seconds(), 50)

    @property
    def p95(self) -> float:
        return pct(self.seconds(), 95)

    @property
    def errors(self) -> int:
        return sum(a.errors for a in self.people)

    @property
    def never(self) -> int:
        return sum(not a.ok for a in self.people)

    def served(self) -> list[tuple[str, list[str]]]:
        order = sorted((a for a in self.people if a.ok), key=lambda a: a.started + a.total)
        return [(a.pid, a.items) for a in order]

    @property
    def double(self) -> int:
        return len(over_cap(self.served(), self.study.per_item))

    @property
    def most_holders(self) -> int:
        return most_holders(self.served())


def _arrive(server: PotatoServer, a: Arrival, study_id: str, t0: float, stop: threading.Event) -> None:
    stop.wait(max(0.0, t0 + a.scheduled - time.perf_counter()))
    if stop.is_set():
        return
    begun = time.perf_counter()
    a.started = begun - t0
    pauses = 0
    assert a.browser is not None
    with a.browser as browser:
        while not stop.is_set():
            try:
                page = browser.get(f"{server.url}/", params={"PROLIFIC_PID": a.pid, "STUDY_ID": study_id,
                                                              "SESSION_ID": a.session_id})
                found = ITEM_PAGE.search(page.text) if page.status_code == 200 else None
                if found:
                    a.first_item = found.group(1)
                    a.total = time.perf_counter() - begun
                    return
                a.error = f"answered {page.status_code} without an item page"
            except httpx.HTTPError as exc:
                a.error = exc.__class__.__name__
            a.errors += 1
            if time.perf_counter() - begun > GIVE_UP_S:
                return
            stop.wait(min(PAUSE_MAX_S, PAUSE_FIRST_S * 2 ** pauses))
            pauses += 1


def run_burst(command: Path, label: str, arrivals: int, window: float, places: int, per_person: int,
              per_item: int, folder: Path) -> BurstResult:
    """One burst against a fresh potato server whose study has ``places`` places."""
    study = PotatoStudy(places, per_person, per_item)
    task = folder / re.sub(r"\W+", "-", label).strip("-")
    server = PotatoServer(command, study, task)
    stop = threading.Event()
    people: list[Arrival] = []
    try:
        start_s = server.start()
        study_id = secrets.token_hex(12)
        people = [Arrival(secrets.token_hex(12), secrets.token_hex(12), due,
                          browser=httpx.Client(follow_redirects=True, timeout=GIVE_UP_S))
                  for due in burst_schedule(arrivals, window)]
        httpx.get(f"{server.url}/", timeout=60)  # warm-up: its sign-in page, no place taken
        load = os.getloadavg()[0]
        cpu_before = server.cpu_seconds()
        t0 = time.perf_counter() + 0.5
        threads = [threading.Thread(target=_arrive, args=(server, a, study_id, t0, stop), daemon=True)
                   for a in people]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
        wall_s = time.perf_counter() - t0
        cpu_s = server.cpu_seconds() - cpu_before
        for a in people:
            if a.ok:
                a.items = server.assigned(a.pid)
        return BurstResult(label, arrivals, window, places, study, people, start_s, cpu_s, wall_s, load)
    finally:
        stop.set()
        server.stop()
        for a in people:
            if a.browser is not None:
                a.browser.close()


# --- printing --------------------------------------------------------------------------------------------
def ratio(crowdpref: float, potato: float) -> str:
    if math.isinf(crowdpref):
        return "never"
    if math.isnan(crowdpref) or math.isnan(potato) or potato <= 0:
        return "-"
    return f"{crowdpref / potato:.0f}x" if crowdpref / potato >= 10 else f"{crowdpref / potato:.1f}x"


@dataclass
class CrowdprefSide:
    """crowdpref's figures for the same burst (from ``benchmarks/portal.py``)."""

    p95: float
    errors: int
    double: int
    turned_away: int = 0


def comparison_rows(bursts: list[tuple[BurstResult, CrowdprefSide | None]]) -> list[list[str]]:
    """The comparison table's rows: per burst, potato's p50 / p95, errors, double allocations
    and most holders of one item, then crowdpref's p95, errors and double allocations and the
    ratio of the p95s (crowdpref / potato)."""
    rows = []
    for b, c in bursts:
        rows.append([
            f"{b.label}: {b.arrivals} arrivals in {b.window:g} s, {b.places} places",
            fmt(b.p50), fmt(b.p95), f"{b.errors} ({b.never} never)", str(b.double), str(b.most_holders),
            fmt(c.p95) if c else "-", str(c.errors) if c else "-",
            (str(c.double) + (f" ({c.turned_away} turned away)" if c.turned_away else "")) if c else "-",
            ratio(c.p95, b.p95) if c else "-",
        ])
    return rows


COLUMNS = ("burst", "potato p50", "potato p95", "potato errors", "potato double allocations",
           "most holders of one item", "crowdpref p95", "crowdpref errors", "crowdpref double allocations",
           "p95 crowdpref / potato")


def print_comparison(console: object, bursts: list[tuple[BurstResult, CrowdprefSide | None]], title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column, justify="right")
    for row in comparison_rows(bursts):
        table.add_row(*row)
    console.print(table)  # type: ignore[attr-defined]
    for b, _ in bursts:
        console.print(f"potato, {b.label}: server up in {b.start_s:.1f} s; {b.cpu_s:.1f} CPU s for the burst "  # type: ignore[attr-defined]
                      f"({b.cpu_s / max(1, b.arrivals - b.never) * 1000:.0f} ms per arrival); "
                      f"{b.study.items} items, {b.study.per_person} per person, {b.study.per_item} per item; "
                      f"load average {b.load:.1f} before it"
                      + (f"; last error: {next(a.error for a in b.people if a.error)}"
                         if any(a.error for a in b.people) else ""))


def compare_bursts(console: object, arrivals: int, window: float, over: int, places: int, per_person: int,
                   per_item: int) -> list[BurstResult]:
    """What ``benchmarks/portal.py --compare potato`` runs: potato installed into a temporary
    virtualenv (removed after), then the burst (``arrivals`` in ``window`` seconds, as many
    places as arrivals) and a burst of ``over`` arrivals at the same rate for ``places`` places.
    Raises :class:`PotatoUnavailable` when potato cannot be installed or started."""
    folder = Path(tempfile.mkdtemp(prefix="crowdpref-potato-bench-"))
    try:
        started = time.perf_counter()
        with console.status(f"installing {POTATO} into a temporary virtualenv (pip)"):  # type: ignore[attr-defined]
            command = install_potato(folder)
        console.print(f"{POTATO} installed in {time.perf_counter() - started:.0f} s")  # type: ignore[attr-defined]
        bursts = []
        for label, n, seconds, room in (("burst", arrivals, window, arrivals),
                                        ("more arrivals than places", over, window * over / max(1, arrivals), places)):
            with console.status(f"potato: {n} arrivals in {seconds:g} s for {room} places"):  # type: ignore[attr-defined]
                bursts.append(run_burst(command, label, n, seconds, room, per_person, per_item, folder))
        return bursts
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrivals", type=int, default=200, help="people in the burst (default 200)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds over which they arrive (default 10)")
    parser.add_argument("--per-person", type=int, default=4, help="items per person, Q (default 4)")
    parser.add_argument("--per-item", type=int, default=4, help="people per item, R (default 4)")
    parser.add_argument("--over", type=int, default=0,
                        help="then a burst of this many arrivals (same rate) for --places places (default: none)")
    parser.add_argument("--places", type=int, default=8, help="places of the --over burst's study (default 8)")
    parser.add_argument("--potato-venv", type=Path, default=None,
                        help="a virtualenv with potato already installed (default: a new one, removed after)")
    args = parser.parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    folder = Path(tempfile.mkdtemp(prefix="crowdpref-potato-bench-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if args.potato_venv is not None:
            command = potato_command(args.potato_venv.resolve())
        else:
            started = time.perf_counter()
            with console.status(f"installing {POTATO} into a temporary virtualenv"):
                command = install_potato(folder)
            console.print(f"{POTATO} installed in {time.perf_counter() - started:.0f} s")
        bursts = [run_burst(command, "burst", args.arrivals, args.window, args.arrivals, args.per_person,
                            args.per_item, folder)]
        if args.over:
            bursts.append(run_burst(command, "more arrivals than places", args.over,
                                    args.window * args.over / max(1, args.arrivals), args.places, args.per_person,
                                    args.per_item, folder))
        print_comparison(console, [(b, None) for b in bursts],
                         f"potato alone ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores): seconds from the "
                         "Prolific-style entry URL to the first item's page")
        return 0
    except PotatoUnavailable as exc:
        print(f"potato_peer: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
