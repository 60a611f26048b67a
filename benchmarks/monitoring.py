"""Benchmark: one monitoring pass over N claimed, idle participants (default 400) - polling every
participant (what monitoring did before Argilla's webhooks) against the pass that reads only
whom reported activity, the backstop or a due release names.

Runs by hand (not a test). It starts its OWN stack in a private state folder on free ports -
the embedded Argilla (server + SQL search plug-in, Redis, rq worker) and the participant portal
as its own process, exactly as ``crowdpref up`` starts it (so the portal registers Argilla's
webhook itself when it starts) - and stops every process it started at the end.

1. Set-up (not timed, duration printed): a ``participants: invite`` study-1 config (R=3, Q=3,
   N questions: one batch per participant, no warm pool), and N claims (``Collection.claim``,
   a few threads: each creates the Argilla user, workspace and dataset and logs 3 records).
2. Polling (before): the store has no webhook registered yet, so ``monitor()`` reads every
   active participant from Argilla - ``--passes`` passes timed.
3. Webhooks (after): the portal registers the webhook (the benchmark waits for its secret in the
   store); one untimed pass (the polling passes have just read everyone, so nobody is due),
   then ``--passes`` idle passes are timed: nobody worked, so nobody is read.
4. Activity: ``--active`` participants each submit one answer as the web UI does; once the
   webhooks have brought them to the store, one pass is timed (it reads those participants).

Prints seconds per pass, the reads per pass and the ratio polling / idle.

    .venv/bin/python benchmarks/monitoring.py [--participants 400] [--passes 2] [--active 10]
                                             [--workers 3] [--home DIR]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.ports import free_port  # noqa: E402

from crowdpref.argilla_client import AnnotatorSession  # noqa: E402
from crowdpref.portal import argilla_hooks  # noqa: E402
from crowdpref.runfolder import write_parquet  # noqa: E402
from crowdpref.settings import Settings, load_settings  # noqa: E402
from crowdpref.store import Claimed  # noqa: E402
from crowdpref.studies import open_collection  # noqa: E402

NAME, R, Q = "monitoring-bench", 3, 3


def private_settings(home: Path) -> Settings:
    """Own state folder and free ports; nothing external can leak in from the environment."""
    return load_settings(
        home=home, argilla_port=free_port(), prefect_port=free_port(), redis_port=free_port(),
        portal_port=free_port(), fake_prolific_port=free_port(), portal_studies=home / "portal-studies",
        argilla_venv=REPO / ".venv-argilla", argilla_url=None, argilla_api_key=None, argilla_public_url=None,
        prefect_api_url=None, database_url=None, portal_url=None, prolific_token=None,
    )


def write_study(settings: Settings, participants: int) -> Path:
    folder = Path(settings.portal_studies)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump({
        "name": NAME, "seed": 1, "participants": "invite",
        "study1": {"responses_per_question": R, "questions_per_participant": Q, "pool_size": 0,
                   "inactive_after_minutes": 600, "backstop_minutes": 30},
        "study2": {"pairs_per_participant": 4},
    }))
    questions = pd.DataFrame([{"question_id": f"q{i:05d}", "category": "empathy",
                               "question": f"Question {i}: how would you handle situation number {i} with a friend?"}
                              for i in range(participants * Q // R)])
    write_parquet(questions, settings.runs_dir / NAME / "questions.parquet")
    return path


def timed_pass(collection) -> tuple[float, int, bool]:
    started = time.perf_counter()
    progress = collection.monitor()
    return time.perf_counter() - started, progress.read_now, progress.webhooks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", type=int, default=400)
    parser.add_argument("--passes", type=int, default=2, help="timed passes of each kind (default 2)")
    parser.add_argument("--active", type=int, default=10, help="participants who answer before the last pass")
    parser.add_argument("--workers", type=int, default=3, help="claim threads during the set-up")
    parser.add_argument("--home", type=Path, default=None, help="state folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    n = args.participants
    home = (args.home or Path(tempfile.mkdtemp(prefix="crowdpref-monitoring-bench-"))).resolve()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the stack
    from services import stack

    settings = private_settings(home)
    clean = False
    try:
        started = time.perf_counter()
        stack.up(settings, components=["argilla"])
        print(f"Argilla up in {time.perf_counter() - started:.0f} s (state folder {home})", flush=True)
        path = write_study(settings, n)
        collection = open_collection(path, "study1", settings)
        store = collection.store

        started = time.perf_counter()
        claims: dict[int, Claimed] = {}

        def claim(i: int) -> None:
            for attempt in range(3):
                try:
                    result = collection.claim(f"invite:{i:04d}", "invite")
                    assert isinstance(result, Claimed), result
                    claims[i] = result
                    return
                except Exception:  # noqa: BLE001 - a busy server: the same claim again completes it
                    if attempt == 2:
                        raise
                    time.sleep(2)

        with ThreadPoolExecutor(args.workers) as pool:
            for done, _ in enumerate(pool.map(claim, range(n)), 1):
                if done % 50 == 0:
                    print(f"  {done}/{n} claimed ({time.perf_counter() - started:.0f} s)", flush=True)
        setup_s = time.perf_counter() - started
        print(f"set-up: {n} participants claimed (user, workspace, dataset, {Q} records each) in {setup_s:.0f} s",
              flush=True)

        polling = []
        for _ in range(args.passes):
            seconds, reads, webhooks = timed_pass(collection)
            assert not webhooks and reads == n, (webhooks, reads)
            polling.append(seconds)
            print(f"polling pass (no webhooks): {seconds:.1f} s, {reads} participants read", flush=True)

        stack.up(settings, components=["portal"])  # registers Argilla's webhook when it starts
        deadline = time.monotonic() + 120
        while not collection.webhooks_active():
            if time.monotonic() > deadline:
                raise SystemExit("the portal did not register Argilla's webhook within 120 s (see its log)")
            time.sleep(0.5)
        print(f"portal up; Argilla webhook registered ({argilla_hooks.hook_url(settings)})", flush=True)
        seconds, reads, _ = timed_pass(collection)
        print(f"first pass with webhooks (untimed): {seconds:.1f} s, {reads} read", flush=True)
        idle = []
        for _ in range(args.passes):
            seconds, reads, webhooks = timed_pass(collection)
            assert webhooks and reads == 0, (webhooks, reads)
            idle.append(seconds)
            print(f"idle pass (webhooks): {seconds:.2f} s, {reads} participants read", flush=True)

        active = [claims[i] for i in range(0, n, max(1, n // max(1, args.active)))][: args.active]
        for claimed in active:
            session = AnnotatorSession(settings.argilla_api_url, claimed.participant.username,
                                       collection.owner.passwords(claimed.participant.username))
            try:
                dataset = next(d for d in session.datasets() if d["name"] == collection.dataset_name)
                record = session.pending_records(dataset["id"])[0]
                session.submit([(record["id"], {"response": "I would listen first, then say how I feel.",
                                                "quality": 4})])
            finally:
                session.close()
        deadline = time.monotonic() + 120
        names = {c.participant.username for c in active}
        while True:
            reached = sum(1 for p in store.participants(collection.info.id) if p.username in names and p.submitted)
            if reached == len(active) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        print(f"{reached}/{len(active)} answers reached the store through the webhook (no read)", flush=True)
        seconds, reads, _ = timed_pass(collection)
        print(f"pass after {len(active)} participants worked: {seconds:.2f} s, {reads} participants read", flush=True)

        before, after = statistics.median(polling), statistics.median(idle)
        print()
        print(f"participants: {n} (claimed, idle)")
        print(f"polling every participant: {before:.1f} s per pass ({before / n * 1000:.0f} ms per participant)")
        print(f"webhooks, idle:            {after:.2f} s per pass")
        print(f"webhooks, {len(active)} active:        {seconds:.2f} s per pass ({reads} read)")
        print(f"ratio polling / idle:      {before / after:.0f}x")
        clean = True
    except KeyboardInterrupt:
        print("interrupted: stopping the stack")
    finally:
        stopped = stack.down(settings)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        if clean and args.home is None:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"state folder kept: {home}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
