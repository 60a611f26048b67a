"""Benchmark: what a participant's sign-in costs argilla-server, and the levers (issue 19 s2).

Runs by hand (not a test). Starts the embedded Argilla (``stack.up``, for Redis, the migrated
database and the owner) in a private state folder, creates ``--users`` annotators, then starts
two more argilla-server processes on the same database: ``patched`` (services/argilla/launch.py
``start``: bcrypt in threads) and ``stock`` (the same launcher without ``bcrypt_off_the_loop``:
bcrypt on the event loop). Against each, in turn:

1. burst: every user's ``POST /api/v1/token`` at once (one thread each) while a prober sends
   ``GET /api/v1/status`` one after another: burst wall time, login p50 / p95, status p95 /
   max, the server's CPU seconds; then ``--creations`` new accounts created one after another
   (``POST /api/v1/users`` as the owner: what the warm pool's refill asks of Argilla for every
   participant account, one bcrypt hash each - participants no longer log in with a password, but
   their accounts are still made with one) while the prober runs: what that does to every other
   request (issue 34: does the bcrypt patch still pay?);
2. one arrival after another, ``--sequential`` of them: the password login (``POST
   /api/v1/token`` + ``GET /api/v1/me/datasets``) against the portal's minted token
   (crowdpref/portal/argilla_session.py, + the same ``GET``): latency p50 and server CPU per
   arrival;
3. bcrypt's own cost, cost 12 (Argilla's) against cost 4, one hash each, in the Argilla venv.

Stops every process it started, also on an error.

    .venv/bin/python benchmarks/argilla_auth.py [--users 40] [--sequential 20] [--creations 16]

Argilla hashes at its own cost 12 here (the test stacks' cheap cost, which importing
tests.conftest sets, is unset again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from crowdpref.portal import argilla_session  # noqa: E402
from tests.conftest import isolated_settings  # noqa: E402
from tests.ports import free_port  # noqa: E402

os.environ.pop("CROWDPREF_TEST_BCRYPT_ROUNDS", None)  # tests.conftest sets the test stacks' cheap cost: Argilla's own here

PASSWORD = "bench-" + "p" * 26
LAUNCH = REPO / "services" / "argilla" / "launch.py"
STOCK = ("import sys; sys.path.insert(0, {dir!r}); import sql_search_engine; from argilla_server.cli import app; "
         "sys.argv = ['argilla', 'start', '--host', '127.0.0.1', '--port', {port!r}, '--no-access-log']; app()")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_server(settings, variant: str) -> tuple[subprocess.Popen, str]:
    from services.argilla.service import env, server_python

    port = free_port()
    python = str(server_python(settings))
    argv = ([python, str(LAUNCH), "start", "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
            if variant == "patched" else [python, "-c", STOCK.format(dir=str(LAUNCH.parent), port=str(port))])
    proc = subprocess.Popen(argv, env=env(settings), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v1/status", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"{variant} server did not start")


def burst(url: str, pid: int, users: list[str], create: dict[str, str] | None = None) -> dict[str, float]:
    """Every user's login at once (``create``: the owner's headers - each user created instead, one
    after another, as the warm pool's refill does), while a prober sends ``GET /api/v1/status``
    one after another."""
    status_s: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=120) as client:
            while not done.is_set():
                began = time.perf_counter()
                client.get(f"{url}/api/v1/status")
                status_s.append(time.perf_counter() - began)

    def login(user: str) -> tuple[float, int]:
        began = time.perf_counter()
        if create is not None:
            reply = httpx.post(f"{url}/api/v1/users", headers=create, timeout=300, json={
                "username": user, "first_name": user, "password": PASSWORD, "role": "annotator"})
        else:
            reply = httpx.post(f"{url}/api/v1/token", data={"username": user, "password": PASSWORD}, timeout=300)
        return time.perf_counter() - began, reply.status_code

    cpu0, began = cpu_s(pid), time.perf_counter()
    prober = threading.Thread(target=probe)
    prober.start()
    with ThreadPoolExecutor(1 if create is not None else len(users)) as pool:
        answers = list(pool.map(login, users))
    logins = [seconds for seconds, _ in answers]
    wall = time.perf_counter() - began
    done.set()
    prober.join()
    return {"wall": wall, "login p50": statistics.median(logins), "login p95": pct(logins, 0.95),
            "status p95": pct(status_s, 0.95), "status max": max(status_s), "cpu": cpu_s(pid) - cpu0,
            "errors": sum(status != 201 for _, status in answers)}


def arrivals(url: str, pid: int, users: list[str], secret: str, how: str) -> dict[str, float]:
    times = []
    cpu0 = cpu_s(pid)
    with httpx.Client(timeout=120) as client:
        for user in users:
            began = time.perf_counter()
            if how == "password":
                token = client.post(f"{url}/api/v1/token", data={"username": user, "password": PASSWORD}).json()[
                    "access_token"]
            else:
                token, _ = argilla_session.mint_token(secret, user)
            listed = client.get(f"{url}/api/v1/me/datasets", headers={"Authorization": f"Bearer {token}"})
            assert listed.status_code == 200, listed.status_code
            times.append(time.perf_counter() - began)
    return {"p50": statistics.median(times), "cpu per arrival": (cpu_s(pid) - cpu0) / len(users)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=40)
    parser.add_argument("--sequential", type=int, default=20)
    parser.add_argument("--creations", type=int, default=16,
                        help="accounts created one after another while the prober runs (default 16)")
    args = parser.parse_args()
    from services import stack
    from services.argilla.service import SERVER, auth_secret, server_python
    from services.process import ProcessManager

    home = Path(tempfile.mkdtemp(prefix="crowdpref-auth-bench-"))
    settings = isolated_settings(home)
    procs: list[subprocess.Popen] = []
    try:
        stack.up(settings, components=["argilla"])
        owner = {"X-Argilla-Api-Key": settings.resolved_argilla_api_key()}
        users = [f"bench-{i}" for i in range(args.users)]
        with httpx.Client(base_url=settings.argilla_api_url, headers=owner, timeout=120) as client:
            for user in users:
                client.post("/api/v1/users", json={"username": user, "first_name": user, "password": PASSWORD,
                                                   "role": "annotator"}).raise_for_status()
        ProcessManager(settings.state_dir).stop(SERVER)  # only the measured servers from here (Redis stays)
        secret = auth_secret(settings)
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
              f"load {os.getloadavg()[0]:.1f}")
        for variant in ("stock", "patched"):
            proc, url = start_server(settings, variant)
            procs.append(proc)
            httpx.get(f"{url}/api/v1/status", timeout=30)
            b = burst(url, proc.pid, users)
            print(f"{variant:8} burst of {len(users)} logins: wall {b['wall']:.1f} s, login p50 {b['login p50']:.2f} s "
                  f"p95 {b['login p95']:.2f} s, status p95 {b['status p95']:.3f} s max {b['status max']:.3f} s, "
                  f"server CPU {b['cpu']:.1f} s, {b['errors']} not 201 (HTTP 5xx)")
            made = [f"bench-{variant}-new-{i}" for i in range(args.creations)]
            c = burst(url, proc.pid, made, create=owner)
            print(f"{variant:8} {len(made)} accounts created one after another (the warm pool's refill): wall "
                  f"{c['wall']:.1f} s, creation p50 {c['login p50']:.2f} s, status p95 {c['status p95']:.3f} s max "
                  f"{c['status max']:.3f} s, server CPU {c['cpu']:.1f} s, {c['errors']} not 201")
            for how in ("password", "token"):
                a = arrivals(url, proc.pid, users[:args.sequential], secret, how)
                print(f"{variant:8} {how:8} arrival one at a time: p50 {a['p50'] * 1000:.0f} ms, "
                      f"server CPU {a['cpu per arrival'] * 1000:.0f} ms per arrival")
            proc.terminate()
            proc.wait(30)
        for cost in (12, 4):
            out = subprocess.run([str(server_python(settings)), "-c",
                                  f"import bcrypt, time; t = time.process_time(); bcrypt.hashpw(b'x' * 32, "
                                  f"bcrypt.gensalt({cost})); print(time.process_time() - t)"],
                                 capture_output=True, text=True, check=True).stdout
            print(f"bcrypt cost {cost}: {float(out) * 1000:.1f} ms CPU per hash")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stack.down(settings)
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
