"""The simulated crowd's door through the fake Prolific (crowdpref/simulation/arrivals.py): a simulated
person treats the portal's 503 as the page tells them to - wait, open the link again - and gives
up after a few tries, as a person would."""

from __future__ import annotations

import httpx

from crowdpref.simulation.arrivals import ENTRY_PAUSE_S, ENTRY_TRIES, ProlificDoor


def _door(statuses: list[int]) -> tuple[ProlificDoor, httpx.Client, list[float]]:
    answers = iter(statuses)
    browser = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(next(answers))))
    door = object.__new__(ProlificDoor)  # only _open is exercised: no collection or fake needed
    pauses: list[float] = []
    door.sleep = pauses.append
    return door, browser, pauses


def test_a_503_is_tried_again_after_a_pause() -> None:
    door, browser, pauses = _door([503, 503, 303])
    assert door._open(browser, "http://portal.test/s/x/study1").status_code == 303
    assert pauses == [ENTRY_PAUSE_S, 2 * ENTRY_PAUSE_S]


def test_a_portal_that_keeps_answering_503_is_given_up_on() -> None:
    door, browser, pauses = _door([503] * ENTRY_TRIES)
    assert door._open(browser, "http://portal.test/s/x/study1").status_code == 503
    assert len(pauses) == ENTRY_TRIES - 1


def test_other_answers_are_taken_at_once() -> None:
    for status in (303, 409, 500):
        door, browser, pauses = _door([status])
        assert door._open(browser, "http://portal.test/s/x/study1").status_code == status and pauses == []
