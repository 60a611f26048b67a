"""The portal's pages and the dataset card render exactly as recorded in ``tests/unit/golden/``
(issue 31: moving them to Jinja2 templates must not change a byte a participant or a dataset user
sees). Every page function of :mod:`crowdpref.portal.pages` is rendered with representative and
hostile inputs (markup, quotes, ampersands, unicode), and dataset cards for a few configurations
of ``tests/unit/test_publish.py``'s planted run.

Pages compare byte for byte. Cards compare byte for byte too, after one normalisation: the YAML
header's byte counts (``num_bytes``, ``download_size``, ``dataset_size``) are replaced by ``N``,
because the release draws random participant ids, so the Parquet files' sizes change from build to
build; the counts are huggingface_hub's rendering of the sizes, not text of ours.

``CROWDPREF_WRITE_GOLDEN=1 pytest tests/unit/test_rendering_golden.py`` rewrites the golden files
(from the code as it is: only do it for a wanted change of the pages or the card, and review the
diff)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from crowdpref.portal import pages
from tests.unit.test_publish import build, card_of, small_config, write_study_run

GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("CROWDPREF_WRITE_GOLDEN") == "1"

H = "<script>alert(\"x&y\")</script> 'quoted' & caf\u00e9 \u2713 \u2192 \U0001f600"
"""A hostile value: markup, both quotes, an ampersand, unicode beyond the BMP."""
URL = "https://study.example.org/p?a=1&b=<x>\"'#frag"
GUIDE = ("# Guide & <rules>\nRead **carefully** & *kindly*: <b>no html</b>.\nA second line.\n\n"
         "## Steps\n- First **bold** <i>\n  continued here\n- Second \"quoted\"\n\nAfter the list.\n"
         "#### Deep heading\nPlain caf\u00e9 \u2713")


def _page_cases() -> dict[str, Callable[[], str]]:
    ex1 = pages.answer_example(1, GUIDE, "Strong " + H, "because " + H, "Weak **x**", "since " + H)
    ex2 = pages.pair_example(2, "Q " + H, "A " + H, "B *b*", 3, "Prefer " + H, 8, "why " + H)
    quiz_items = [("Prompt **one** " + H, ["Yes " + H, "No & never"]), ("Two", ["a", "b", "c"])]
    return {
        "page": lambda: pages.page(H, "<p>body</p>", "<meta name=\"x\" content=\"y\">"),
        "message": lambda: pages.message(H, H),
        "markdown": lambda: pages.markdown(GUIDE),
        "welcome": lambda: pages.welcome(H, H, 12, 20, GUIDE, URL, URL),
        "welcome_invited": lambda: pages.welcome("Study", "rate", 1, None, "", "/start", URL, 7.5, True),
        "welcome_inactive": lambda: pages.welcome("Study", "write", 3, 0, "text", "/s", "/f", 30, False),
        "finished_invite": lambda: pages.finished(None, None),
        "finished_code": lambda: pages.finished(H, None),
        "finished_code_url": lambda: pages.finished("C0DE&1", URL),
        "invitation": lambda: pages.invitation(H, URL),
        "already_done_invite": lambda: pages.already_done(None, URL),
        "already_done_code": lambda: pages.already_done(H, None),
        "already_done_code_url": lambda: pages.already_done("CODE", URL),
        "not_finished": lambda: pages.not_finished(3, 10, URL, URL),
        "not_finished_no_argilla": lambda: pages.not_finished(0, 1, None, "/start"),
        "argilla_session": lambda: pages.argilla_session("aaa.bbb.ccc", 1_767_607_200, URL + "</script>",
                                                          "auth._token.local", "key<&>\u2028"),
        "work_frame": lambda: pages.work_frame(H, URL, 2, 5, False, URL, URL + "</script>", False),
        "work_frame_done": lambda: pages.work_frame(H, "/a?b=1&c=2", 5, 5, True, "/finish", "/p", False),
        "work_frame_done_invited": lambda: pages.work_frame("T", "/a", 5, 5, True, "/finish", "/p", True),
        "answer_example": lambda: ex1,
        "pair_example": lambda: ex2,
        "onboarding_intro": lambda: pages.onboarding_intro(H, GUIDE, 10, [ex1, ex2], 2, (3, 2, 2), URL),
        "onboarding_intro_one": lambda: pages.onboarding_intro("T", "Intro", 5, [], 1, (1, 1, 1), "/go"),
        "onboarding_intro_bare": lambda: pages.onboarding_intro("T", "", 5, [], 0, None, "/go"),
        "practice_item": lambda: pages.practice_item(H, 0, 2, GUIDE, ["One " + H, "Two"], URL, True),
        "practice_item_no_quiz": lambda: pages.practice_item("T", 1, 2, "p", ["a", "b"], "/p", False),
        "practice_feedback_right": lambda: pages.practice_feedback(H, 0, 2, "P " + H, ["A " + H, "B"], 1, 1,
                                                                   "Because " + H, URL, "Next " + H, True),
        "practice_feedback_wrong": lambda: pages.practice_feedback("T", 1, 2, "P", ["A " + H, "B"], 1, 2,
                                                                   GUIDE, "/quiz", "To the quiz", False, "get"),
        "practice_feedback_none": lambda: pages.practice_feedback("T", 1, 2, "P", ["A", "B"], None, 2,
                                                                  "", "/n", "Next", True),
        "practice_done": lambda: pages.practice_done(H, 3, 2, URL, "Go " + H, True),
        "quiz": lambda: pages.quiz(H, quiz_items, 2, 1, 3, URL, True),
        "quiz_wrong": lambda: pages.quiz("T", quiz_items, 1, 2, 3, "/q", False, [0, 1]),
        "quiz_one": lambda: pages.quiz("T", quiz_items[:1], 1, 1, 1, "/q", True, []),
        "quiz_failed": lambda: pages.quiz_failed(H, 1, 3, 2, ["Prompt " + H, "Two"], 2, URL),
        "quiz_failed_last": lambda: pages.quiz_failed("T", 0, 1, 1, [], 1, "/r"),
        "screened_out_paid": lambda: pages.screened_out(URL, True),
        "screened_out_unpaid": lambda: pages.screened_out(URL, False),
        "screened_out_elsewhere": lambda: pages.screened_out(None),
        "preparing": lambda: pages.preparing(URL, 2),
        "preparing_failing": lambda: pages.preparing("/s/x/study1/start", 10, failing=True),
    }


PAGES = _page_cases()


def _check(path: Path, text: str) -> None:
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
        return
    assert path.exists(), f"{path} missing: write it with CROWDPREF_WRITE_GOLDEN=1"
    expected = path.read_bytes().decode("utf-8")
    assert text == expected, f"{path.name} differs from its golden file (first difference at character " \
                             f"{next(i for i, (a, b) in enumerate(zip(text + chr(0), expected + chr(1))) if a != b)})"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_page_renders_as_recorded(name: str) -> None:
    _check(GOLDEN / "pages" / f"{name}.html", PAGES[name]())


def test_every_page_function_is_rendered() -> None:
    """A page function added to pages.py gets a golden case too."""
    import inspect

    public = {n for n, f in inspect.getmembers(pages, inspect.isfunction)
              if f.__module__ == pages.__name__ and not n.startswith("_")}
    readers = {"read_argilla_session", "frame_target", "preparing_refresh"}  # read pages, do not render them
    missing = public - readers - {n for n in public if any(c == n or c.startswith(n + "_") for c in PAGES)}
    assert not missing, f"page functions without a golden case: {sorted(missing)}"


def test_readers_still_read_the_recorded_pages() -> None:
    """read_argilla_session and frame_target parse what the page functions write."""
    handed = pages.argilla_session("aaa.bbb.ccc", 1, "/work?x=1&y=<2>", "k", "e")
    assert pages.read_argilla_session(handed) == ("aaa.bbb.ccc", "/work?x=1&y=<2>")
    assert pages.frame_target(PAGES["work_frame_done"]()) == "/a?b=1&c=2"
    assert pages.preparing_refresh(PAGES["preparing_failing"]()) == (10, "/s/x/study1/start")
    assert pages.preparing_refresh(PAGES["preparing"]()) == (2, URL)
    assert pages.preparing_refresh(PAGES["finished_code_url"]()) is None


SIZES = re.compile(r"^(\s*(?:- )?(?:num_bytes|download_size|dataset_size): )\d+$", re.M)


def _card(folder: Path) -> str:
    header, body = card_of(folder)
    assert header["configs"]  # the YAML header parses
    return SIZES.sub(r"\1N", (folder / "README.md").read_text(encoding="utf-8"))


def _card_cases(tmp_path: Path) -> dict[str, Callable[[], str]]:
    def simulated() -> str:
        return _card(build(write_study_run(tmp_path / "a" / "pub-test", small_config())))

    def hostile_mixed() -> str:
        config = small_config("pub-mixed", pretty_name="Mixed " + H, content_warning=True,
                              tags=["human-feedback", "rlhf", "t&<x>"],
                              citation="@misc{x, title={A & B <c> \"d\"}}")
        config = config.model_copy(update={"description": "  A description with " + H + "\n\nand **markdown**. "})
        planted = write_study_run(tmp_path / "b" / "pub-mixed", config, source=("prolific", "invite", "simulated"),
                                  order="pair")
        return _card(build(planted, repo_id="org/mixed-data"))

    def bare() -> str:
        config = small_config("pub-bare", content_warning=False, citation=None)
        planted = write_study_run(tmp_path / "c" / "pub-bare", config, screening=False, stats=False,
                                  source="invite", participants=False)
        planted.collection = None
        run = planted.run
        from crowdpref.release import build_release

        return _card(build_release(run, config, forbidden=planted.forbidden))

    def unverified() -> str:
        config = small_config("pub-pilot")
        config = config.model_copy(update={
            "participants": "prolific", "prolific": config.prolific.model_copy(update={"verify": False})})
        planted = write_study_run(tmp_path / "d" / "pub-pilot", config, source="prolific")
        return _card(build(planted))

    def branches() -> str:
        """The card's other branches: a sample of pairs, incomplete pairs dropped, raters who
        wrote too, a withdrawal, the simulation's truth, screening warnings, the drop policy and
        the fallback classifier without thresholds."""
        from crowdpref.withdrawals import Withdrawn

        config = small_config("pub-branches")
        config = config.model_copy(update={
            "study2": config.study2.model_copy(update={"pairs": 2, "exclude_study1_participants": False}),
            "aggregation": config.aggregation.model_copy(update={"incomplete_pairs": "drop"})})
        planted = write_study_run(tmp_path / "e" / "pub-branches", config)
        run = planted.run
        aggregation = json.loads(run.file("aggregation.json").read_text())
        aggregation.update(truth={"share": 0.8333, "compared": 6}, withdrawn_participants=1)
        screening = json.loads(run.file("screening.json").read_text())
        screening.update(warnings=["model <x> & \"y\" failed"], policy="drop", limitations=None,
                         fallback_used=True, thresholds=None, model=None)
        from crowdpref.release import build_release

        return _card(build_release(run, config, aggregation=aggregation, screening=screening,
                                   collection=planted.collection, forbidden=planted.forbidden,
                                   withdrawn=Withdrawn(keys=frozenset({"nobody-here"}))))

    def screening_off() -> str:
        config = small_config("pub-off")
        config = config.model_copy(update={"screening": config.screening.model_copy(update={"enabled": False})})
        planted = write_study_run(tmp_path / "f" / "pub-off", config, screening=False)
        from crowdpref.release import build_release

        run = planted.run
        return _card(build_release(run, config, aggregation=json.loads(run.file("aggregation.json").read_text()),
                                   collection=planted.collection, forbidden=planted.forbidden))

    return {"simulated": simulated, "hostile_mixed": hostile_mixed, "bare": bare, "unverified": unverified,
            "branches": branches, "screening_off": screening_off}


CARDS = ("simulated", "hostile_mixed", "bare", "unverified", "branches", "screening_off")


@pytest.mark.parametrize("name", CARDS)
def test_card_renders_as_recorded(name: str, tmp_path: Path) -> None:
    _check(GOLDEN / "cards" / f"{name}.md", _card_cases(tmp_path)[name]())


def test_filtered_card_renders_as_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preregistered filters' section, the withdrawn count and a privacy pass that masked."""
    from tests.unit.test_release_filters import aggregate_run

    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "state"))
    planted = write_study_run(tmp_path / "runs" / "pub-test", small_config())
    aggregate_run(planted)
    run = planted.run
    from crowdpref.release import build_release

    folder = build_release(run, planted.config, aggregation=json.loads(run.file("aggregation.json").read_text()),
                           collection=planted.collection, forbidden=planted.forbidden)
    _check(GOLDEN / "cards" / "filtered.md", _card(folder))
