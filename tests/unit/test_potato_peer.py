"""The pure parts of the potato comparison (benchmarks/potato_peer.py, run by
``benchmarks/portal.py --compare potato``): the burst schedule, the double-allocation counter,
the comparison table's rows, and the one-line failure when potato cannot be installed."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("potato_peer", REPO / "benchmarks" / "potato_peer.py")
assert SPEC is not None and SPEC.loader is not None
peer = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("potato_peer", peer)  # its dataclasses look their module up
SPEC.loader.exec_module(peer)

# pip with no package index, no configured wheel folders: potato cannot be installed
OFFLINE = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}


# --- the burst schedule ----------------------------------------------------------------------------------
def test_schedule_spreads_the_arrivals_evenly_over_the_window_from_zero():
    assert peer.burst_schedule(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    times = peer.burst_schedule(200, 10.0)
    assert len(times) == 200 and times[0] == 0.0 and max(times) < 10.0
    gaps = {round(b - a, 9) for a, b in zip(times, times[1:])}
    assert gaps == {0.05}


def test_schedule_matches_the_one_portal_py_uses_for_crowdpref():
    # portal.py: arrival k of the burst is due at k * window / n
    n, window = 37, 3.0
    assert peer.burst_schedule(n, window) == [k * window / n for k in range(n)]


def test_schedule_of_a_zero_window_sends_everyone_at_once_and_refuses_nonsense():
    assert peer.burst_schedule(3, 0.0) == [0.0, 0.0, 0.0]
    assert peer.burst_schedule(0, 5.0) == []
    for arrivals, window in ((-1, 1.0), (3, -1.0), (3, math.nan)):
        with pytest.raises(ValueError):
            peer.burst_schedule(arrivals, window)


# --- double allocations ----------------------------------------------------------------------------------
def fixed_order(people: int, items: int, per_person: int, per_item: int) -> list[tuple[str, list[str]]]:
    """potato's default ``fixed_order`` as observed (2.12.1, 2026-11-25): each person gets the
    first items in file order with room left; once none has room, the first items again."""
    holders = [0] * items
    out = []
    for k in range(people):
        free = [i for i in range(items) if holders[i] < per_item][:per_person]
        mine = free if len(free) == per_person else list(range(per_person))
        for i in mine:
            holders[i] += 1
        out.append((f"p{k}", [f"q{i}" for i in mine]))
    return out


def test_the_issue_s_potato_figure_143_holders_of_one_item():
    # 300 items, 15 per person, 3 per item: 60 places; 200 arrivals
    served = fixed_order(200, 300, 15, 3)
    assert peer.most_holders(served) == 143
    assert len(peer.over_cap(served, 3)) == 140  # everyone after the 60 places


def test_no_double_allocation_while_every_item_stays_within_its_cap():
    served = fixed_order(60, 300, 15, 3)
    assert peer.over_cap(served, 3) == []
    assert peer.most_holders(served) == 3


def test_a_person_counts_once_in_the_order_served_and_only_beyond_the_cap():
    served = [("a", ["x", "y"]), ("b", ["x", "y"]), ("c", ["x", "z"]), ("d", ["z", "w"]), ("e", ["y", "x"])]
    assert peer.over_cap(served, 2) == ["c", "e"]  # c: x held by a and b; e: both over, counted once
    assert peer.over_cap(served, 1) == ["b", "c", "d", "e"]  # d: z already held by c
    assert peer.over_cap(list(reversed(served)), 2) == ["b", "a"]  # x: e, c, then b and a are over
    assert peer.most_holders(served) == 4


def test_an_item_listed_twice_for_one_person_is_not_a_double_allocation():
    assert peer.over_cap([("a", ["x", "x"]), ("b", ["y"])], 1) == []
    assert peer.over_cap([("a", ["x", "x"]), ("b", ["x"])], 2) == []  # x: two holders, a and b
    assert peer.most_holders([("a", ["x", "x"])]) == 1
    assert peer.most_holders([]) == 0
    with pytest.raises(ValueError):
        peer.over_cap([], 0)


# --- the comparison table ----------------------------------------------------------------------------------
def burst(seconds: list[float], errors: int = 0, label: str = "burst", places: int = 4) -> object:
    people = []
    for k, s in enumerate(seconds):
        a = peer.Arrival(f"p{k}", f"s{k}", 0.0, started=0.0, total=s, errors=errors if k == 0 else 0)
        a.first_item = None if math.isinf(s) else "q0"
        a.items = [] if math.isinf(s) else ["q0"]
        people.append(a)
    study = peer.PotatoStudy(places, 1, 1)
    return peer.BurstResult(label, len(seconds), 10.0, places, study, people, 1.0, 1.0, 10.0)


def test_rows_put_crowdpref_beside_potato_with_the_ratio_of_the_p95s():
    b = burst([0.1] * 20, errors=2)  # 20 people served item q0 with one place per item: 19 over
    (row,) = peer.comparison_rows([(b, peer.CrowdprefSide(p95=2.0, errors=0, double=0))])
    assert dict(zip(peer.COLUMNS, row)) == {
        "burst": "burst: 20 arrivals in 10 s, 4 places", "potato p50": "0.10 s", "potato p95": "0.10 s",
        "potato errors": "2 (0 never)", "potato double allocations": "19", "most holders of one item": "20",
        "crowdpref p95": "2.00 s", "crowdpref errors": "0", "crowdpref double allocations": "0",
        "p95 crowdpref / potato": "20x"}


def test_rows_say_never_for_who_gave_up_and_show_who_was_turned_away():
    b = burst([0.1, 0.2, math.inf])
    (row,) = peer.comparison_rows([(b, peer.CrowdprefSide(p95=math.inf, errors=3, double=0, turned_away=17))])
    cells = dict(zip(peer.COLUMNS, row))
    assert cells["potato p95"] == "never" and cells["potato errors"] == "0 (1 never)"
    assert cells["crowdpref p95"] == "never" and cells["p95 crowdpref / potato"] == "never"
    assert cells["crowdpref double allocations"] == "0 (17 turned away)"
    (row,) = peer.comparison_rows([(burst([0.2, 0.2]), peer.CrowdprefSide(0.3, 0, 0))])
    assert dict(zip(peer.COLUMNS, row))["p95 crowdpref / potato"] == "1.5x"
    (row,) = peer.comparison_rows([(burst([0.2]), None)])  # potato alone
    assert row[6:] == ["-", "-", "-", "-"]


# --- without the package index ------------------------------------------------------------------------------
def test_without_the_package_index_the_install_fails_with_one_line(tmp_path):
    env = {**os.environ, **OFFLINE}
    with pytest.raises(peer.PotatoUnavailable) as caught:
        peer.install_potato(tmp_path, env=env)
    message = str(caught.value)
    assert "\n" not in message
    assert "pip could not install potato-annotation==2.12.1 from the package index" in message
    assert "No matching distribution" in message  # pip's own reason, its last ERROR line


def test_portal_py_compare_potato_offline_exits_2_with_one_line_before_starting_anything(tmp_path):
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "portal.py"), "--compare", "potato", "--arrivals", "4",
         "--home", str(home)],
        capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE}, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("portal.py --compare potato: pip could not install "
                                                   "potato-annotation==2.12.1 from the package index"), lines
    assert not (home / "state").exists() and not list(home.glob("**/*.pid"))  # no stack was started
