"""Benchmark: each lever of issue 19's public profile measured alone, one after another in one
run, with the same burst (``benchmarks/portal.py`` once per variant, each on its own fresh stack
in a temporary state folder, stopped at its end).

Variants (each changes one thing from the row it is compared with):

- ``public``: the public profile as it ships - Caddy with TLS, Argilla with 2 uvicorn workers on
  PostgreSQL, the study store on PostgreSQL, the portal minting Argilla's session (no bcrypt
  login), bcrypt (account creation) off the event loop;
- ``password``: the same, but every arrival logs in with its password (``POST /api/v1/token``,
  one bcrypt check of cost 12) - the share of the minted session;
- ``password-on-loop``: that, with argilla-server's stock bcrypt on the event loop
  (benchmarks/argilla_bcrypt_on_loop.py) - the share of bcrypt off the loop;
- ``password-1-worker``: ``password`` with one uvicorn worker - the share of the second worker;
- ``embedded``: the laptop stack (SQLite, one Argilla process, no Caddy, password login, bcrypt
  off the loop) - against ``password-1-worker``, the share of PostgreSQL (Caddy's TLS is the
  other difference).

    .venv/bin/python benchmarks/public_levers.py [--arrivals 100] [--window 10]
                                                 [--only public,password,...] [--out DIR]

Prints one row per variant: p50 / p95 entry -> workspace with records, how many got in, HTTP
errors the participants saw, double allocations, lost webhooks, the load average, and each
variant's p95 against the one it is compared with. A variant whose stack failed shows its exit
status; the others still run. Ctrl-C stops the running variant (portal.py stops its stack).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
VARIANTS: dict[str, tuple[list[str], str | None, str]] = {
    # name: (portal.py options, compared with, the lever that comparison isolates)
    "public": (["--profile", "public"], None, "the public profile as it ships"),
    "password": (["--profile", "public", "--sign-in", "password"], "public",
                 "minted session -> password login (bcrypt check per arrival)"),
    "password-on-loop": (["--profile", "public", "--sign-in", "password", "--bcrypt-on-loop"], "password",
                         "bcrypt off the event loop -> on it"),
    "password-1-worker": (["--profile", "public", "--sign-in", "password", "--argilla-workers", "1"], "password",
                          "2 uvicorn workers -> 1"),
    "embedded": (["--profile", "embedded", "--sign-in", "password"], "password-1-worker",
                 "PostgreSQL + Caddy -> SQLite, no Caddy"),
}


def fmt(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrivals", type=int, default=100)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--only", default=",".join(VARIANTS), help="comma-separated variants, in this order")
    parser.add_argument("--out", type=Path, default=None, help="keep each variant's log and JSON here")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in VARIANTS]
    if unknown:
        print(f"public_levers.py: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="crowdpref-levers-"))
    out.mkdir(parents=True, exist_ok=True)
    console = Console(width=180) if not Console().is_terminal else Console()
    results: dict[str, dict | None] = {}
    status: dict[str, int] = {}
    for name in chosen:
        options = VARIANTS[name][0]
        log, figures = out / f"{name}.log", out / f"{name}.json"
        figures.unlink(missing_ok=True)
        command = [sys.executable, str(HERE / "portal.py"), *options, "--arrivals", str(args.arrivals),
                   "--window", f"{args.window:g}", "--no-settle", "--json", str(figures)]
        console.print(f"[bold]{name}[/]: {' '.join(options)} (log {log})")
        started = time.perf_counter()
        with open(log, "w") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
            try:
                status[name] = process.wait()
            except KeyboardInterrupt:  # portal.py stops its own stack on SIGINT/SIGTERM
                process.terminate()
                process.wait()
                console.print("[yellow]interrupted[/]")
                break
        results[name] = json.loads(figures.read_text()) if figures.exists() else None
        console.print(f"  exit {status[name]} after {time.perf_counter() - started:.0f} s")

    table = Table(title=f"levers, {args.arrivals} arrivals in {args.window:g} s each, {os.cpu_count()} cores, "
                        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: seconds from the entry request to "
                        "the logged-in workspace with records")
    for column in ("variant", "lever (against)", "p50", "p95", "in", "HTTP errors seen", "double alloc.",
                   "lost webhooks", "load 1 min (start/after)", "p95 / compared"):
        table.add_column(column, justify="right")
    for name in chosen:
        if name not in status:
            continue
        figures, (_, against, lever) = results.get(name), VARIANTS[name]
        if figures is None:
            table.add_row(name, lever, *["-"] * 7, f"exit {status[name]}")
            continue
        other = results.get(against) if against else None
        share = "-"
        if other and figures["p95_s"] is not None and other["p95_s"]:
            share = f"{figures['p95_s'] / other['p95_s']:.1f}x {against}"
        table.add_row(name, f"{lever}" + (f" ({against})" if against else ""), fmt(figures["p50_s"]),
                      fmt(figures["p95_s"]), f"{figures['in']}/{figures['arrivals']}",
                      str(figures["http_errors_seen"]), str(figures["double_allocations"]),
                      str(figures["lost_webhooks"]),
                      f"{figures['load_at_start']:.1f} / {figures['load_after_burst']:.1f}", share)
    console.print(table)
    console.print(f"logs and figures: {out}")
    return 0 if status and all(code in (0, 1) for code in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
