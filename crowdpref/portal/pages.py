"""The portal's pages: plain HTML, no external assets, readable on a phone. The pages are Jinja2
templates (``crowdpref/portal/templates/*.html.j2``) rendered with autoescape on: every value from
outside is escaped (by :func:`html.escape`, as the pages always were), and only HTML this module
made itself (:func:`markdown`, the worked examples, a script's JavaScript literals) is passed in as
markup. Line breaks and the indentation after them in an ``.html.j2`` template lay the template
out and are not part of the page (:class:`_Layout`): the pages are the bytes they were as
f-strings (tests/unit/test_rendering_golden.py). Two pages have a script: :func:`argilla_session`,
which hands a minted session to Argilla's frontend (it cannot be done without one), and
:func:`work_frame`, whose bar asks the portal for the participant's progress (without scripts the
bar still shows it as of the page's load, and Finish works)."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension
from markupsafe import Markup


class _Layout(Extension):
    """Drops each line break and the indentation after it from an ``.html.j2`` template's source,
    so the templates can be indented while the pages stay one line (as they always were)."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return re.sub(r"\n[ \t]*", "", source) if name and name.endswith(".html.j2") else source


def _escape(value: Any) -> Any:
    """Every value a template prints, escaped as the f-string pages escaped it (``html.escape``:
    ``&quot;``/``&#x27;`` for quotes); markup made here passes as it is."""
    return value if isinstance(value, Markup) else Markup(html.escape(str(value)))


def _js(value: object) -> Markup:
    """A value as a JavaScript literal that cannot end the inline script."""
    return Markup(json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


_ENV = Environment(loader=PackageLoader("crowdpref.portal", "templates"), autoescape=True, finalize=_escape,
                   undefined=StrictUndefined, extensions=[_Layout])
_ENV.filters["js"] = _js


def _render(template: str, **values: Any) -> str:
    return _ENV.get_template(template).render(**values)


def page(title: str, body: str, head: str = "") -> str:
    """A page around ``body`` and ``head`` (HTML, as they are) with ``title`` (escaped)."""
    return _render("base.html.j2", title=title, body=Markup(body), head=Markup(head))


def message(title: str, text: str) -> str:
    return _render("message.html.j2", title=title, text=text)


def markdown(text: str) -> Markup:
    """The little markdown the study guidelines use: headings, bullets, bold, paragraphs (as
    HTML, the text escaped)."""
    out: list[str] = []
    in_list = False
    paragraph: list[str] = []

    def inline(line: str) -> str:
        escaped = html.escape(line)
        escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
        return re.sub(r"\*(.+?)\*", r"<em>\1</em>", escaped)

    def flush() -> None:
        nonlocal in_list
        if paragraph:
            out.append(f"<p>{inline(' '.join(paragraph))}</p>")
            paragraph.clear()
        if in_list:
            out.append("</ul>")
            in_list = False

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
        elif line.startswith("#"):
            flush()
            level = min(3, max(2, len(line) - len(line.lstrip("#"))))
            out.append(f"<h{level}>{inline(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            if paragraph:
                out.append(f"<p>{inline(' '.join(paragraph))}</p>")
                paragraph.clear()
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{inline(line[2:])}</li>")
        elif in_list and out and out[-1].startswith("<li>"):  # a bullet continued on the next line
            out[-1] = out[-1][: -len("</li>")] + " " + inline(line) + "</li>"
        else:
            paragraph.append(line)
    flush()
    return Markup("\n".join(out))


def welcome(title: str, what: str, items: int, minutes: int | None, guidelines: str, start_action: str,
            finish_url: str, inactive_minutes: float | None = None, invited: bool = False) -> str:
    return _render("welcome.html.j2", title=title, what=what, items=items, minutes=minutes,
                   guidelines=markdown(guidelines), start_action=start_action, finish_url=finish_url,
                   inactive_minutes=inactive_minutes, invited=invited)


def finished(code: str | None, completion_url: str | None) -> str:
    """The finish page: with a code (Prolific) the code and the way back (and on to Prolific by
    itself after a few seconds); without one (an invitation) thanks and what happens next."""
    return _render("finished.html.j2", title="Finished", code=code, completion_url=completion_url)


def invitation(title: str, action: str) -> str:
    """What an invitation link opens: the study's name and a button that posts to ``action``
    (the link itself); only that press claims a place, never the link's GET."""
    return _render("invitation.html.j2", title=title, action=action)


def already_done(code: str | None, completion_url: str | None) -> str:
    """An old study or invitation link opened after the participant completed: they are done
    (with their completion code and the way back to Prolific when the study has them)."""
    return _render("already_done.html.j2", title="You are done", code=code, completion_url=completion_url)


def not_finished(submitted: int, total: int, argilla_url: str | None, start_action: str) -> str:
    return _render("not_finished.html.j2", title="Not finished yet", submitted=submitted, total=total,
                   argilla_url=argilla_url, start_action=start_action)


def argilla_session(token: str, expires: int, target: str, token_key: str, expiration_key: str) -> str:
    """The answer to *Start* in the public profile (served on Argilla's origin): the script
    stores the minted Argilla session where Argilla's frontend keeps it (``token_key`` =
    ``Bearer <token>``, ``expiration_key`` = the expiry in ms) and replaces this page with
    ``target`` (so Back does not return to it). Without scripts, it says so."""
    return _render("argilla_session.html.j2", title="Opening Argilla", token=token, expires=expires, target=target,
                   token_key=token_key, expiration_key=expiration_key)


def preparing(action: str, seconds: int, failing: bool = False) -> str:
    """The page that waits for the participant's workspace in Argilla: it reloads ``action``
    (GET) every ``seconds`` with a meta refresh, so it moves on by itself without a script;
    ``failing``: Argilla does not answer (their place is kept, it keeps trying)."""
    return _render("preparing.html.j2", title="Your work is being prepared", action=action, seconds=seconds,
                   failing=failing)


FRAME_SRC = re.compile(r'<iframe id="argilla" name="argilla" src="([^"]+)"')
WORK_POLL_MS = 2000  # how often the bar asks for progress (stops once everything is submitted)
WORK_NUDGE_MS = (800, 2500)  # and this long after a click or key in the frame (one origin: a submit, maybe)
WORKING_LABEL = "Check my progress"  # before every item is submitted: the finish page says what is left
WORKING_WORDS = "{submitted} of {total} items submitted"
DONE_WORDS = "All {total} items submitted."  # the button says what comes next (one line more on a phone otherwise)
GIVEN_BACK_WORDS = "Your place in this study was given back, so there is nothing more to do here."


def work_frame(title: str, target: str, submitted: int, total: int, done: bool, finish_action: str,
               progress_action: str, invited: bool) -> str:
    """The participant's work: a thin bar on top (their progress, and a Finish button that is
    always on screen, at any size) over Argilla in a frame that fills the rest. The bar's
    script asks ``progress_action`` every :data:`WORK_POLL_MS` - and, where the frame is on the
    portal's origin, soon after each click or key in it (a submit, maybe: :data:`WORK_NUDGE_MS`) -
    and, once every item is submitted, turns the bar green, says so, and relabels the button
    from :data:`WORKING_LABEL` to what it does then (get the code; an invitation: say they are
    done). ``target`` (the frame's Argilla page) may carry a password sign-in
    on the laptop stack: this page is served with no-store and no referrer."""
    done_label = "Finish: tell us I am done" if invited else "Finish: get my code"
    return _render("work_frame.html.j2", title=title, target=target, done=done, finish_action=finish_action,
                   progress_action=progress_action, poll_ms=WORK_POLL_MS, nudge_ms=list(WORK_NUDGE_MS),
                   done_label=done_label,
                   words=(DONE_WORDS if done else WORKING_WORDS).format(submitted=submitted, total=total),
                   label=done_label if done else WORKING_LABEL, working_words=WORKING_WORDS, done_words=DONE_WORDS,
                   given_back_words=GIVEN_BACK_WORDS)


SESSION_TOKEN = re.compile(r'"Bearer ([\w-]+\.[\w-]+\.[\w-]+)"')
SESSION_TARGET = re.compile(r'location\.replace\(("[^"]+")\)')


def read_argilla_session(session_page: str) -> tuple[str, str] | None:
    """The token and the next address an :func:`argilla_session` page hands the browser (what
    its script writes and where it goes), or None when the page is not one."""
    token, target = SESSION_TOKEN.search(session_page), SESSION_TARGET.search(session_page)
    return (token.group(1), json.loads(target.group(1))) if token and target else None


PREPARING_REFRESH = re.compile(r'<meta http-equiv="refresh" content="(\d+);url=([^"]+)">')


def preparing_refresh(page_text: str) -> tuple[int, str] | None:
    """What a :func:`preparing` page's meta refresh does - (seconds, the address it reloads) -
    or None when the page is not one (a client that is not a browser follows it: the simulated
    crowd, the benchmark)."""
    if "<title>Your work is being prepared</title>" not in page_text:
        return None
    found = PREPARING_REFRESH.search(page_text)
    return (int(found.group(1)), html.unescape(found.group(2))) if found else None


def frame_target(work_page: str) -> str | None:
    """The Argilla page a :func:`work_frame` page opens in its frame (what a browser loads into
    it), or None when the page has no frame."""
    found = FRAME_SRC.search(work_page)
    return html.unescape(found.group(1)) if found else None


# --- onboarding (before any work is claimed) --------------------------------------------------------
def answer_example(n: int, question: str, strong: str, strong_why: str, weak: str, weak_why: str) -> Markup:
    """A worked study-1 example: a question, a strong and a weak answer, each with its reason."""
    return Markup(_render("answer_example.html.j2", n=n, question=markdown(question), strong=markdown(strong),
                          strong_why=strong_why, weak=markdown(weak), weak_why=weak_why))


def pair_example(n: int, question: str, answer_a: str, answer_b: str, rating: int, label: str, points: int,
                 why: str) -> Markup:
    """A worked study-2 example: a pair, the rating the team would give on the scale, and why."""
    return Markup(_render("pair_example.html.j2", n=n, question=markdown(question), answer_a=markdown(answer_a),
                          answer_b=markdown(answer_b), rating=rating, label=label, points=points, why=why))


def onboarding_intro(title: str, introduction: str, minutes: int, examples: list[str], practice: int,
                     quiz: tuple[int, int, int] | None, action: str) -> str:
    """The first onboarding page: what the study is for, what comes before the work, and the
    worked examples (pages of :func:`answer_example` / :func:`pair_example`). ``quiz``: (items,
    pass mark, attempts) when there is one."""
    return _render("onboarding_intro.html.j2", title=f"{title}: introduction", introduction=markdown(introduction),
                   minutes=minutes, examples=[Markup(e) for e in examples], practice=practice, quiz=quiz,
                   action=action)


def practice_item(title: str, index: int, total: int, prompt: str, options: list[str], action: str,
                  has_quiz: bool) -> str:
    """One practice question (answered here, never counted)."""
    return _render("practice_item.html.j2", title=f"{title}: practice", index=index, total=total,
                   prompt=markdown(prompt), options=options, action=action, has_quiz=has_quiz)


def practice_feedback(title: str, index: int, total: int, prompt: str, options: list[str], chosen: int | None,
                      answer: int, explanation: str, next_action: str, next_label: str, has_quiz: bool,
                      next_method: str = "post") -> str:
    """The immediate feedback on a practice answer: right or not, the right option, and why."""
    return _render("practice_feedback.html.j2", title=f"{title}: practice", index=index, total=total,
                   prompt=markdown(prompt), right=chosen == answer,
                   chose=options[chosen - 1] if chosen else "(nothing)", best=options[answer - 1],
                   explanation=markdown(explanation), next_action=next_action, next_label=next_label,
                   next_method=next_method, has_quiz=has_quiz)


def practice_done(title: str, answered: int, correct: int, action: str, label: str, has_quiz: bool) -> str:
    return _render("practice_done.html.j2", title=f"{title}: practice", answered=answered, correct=correct,
                   action=action, label=label, has_quiz=has_quiz)


def quiz(title: str, items: list[tuple[str, list[str]]], pass_mark: int, attempt: int, attempts: int,
         action: str, has_practice: bool, wrong: list[int] | None = None) -> str:
    """The qualification quiz: every question on one form. ``wrong``: the questions (0-based)
    the last attempt got wrong (named, their answers not given away)."""
    return _render("quiz.html.j2", title=f"{title}: quiz", items=[(markdown(p), o) for p, o in items],
                   pass_mark=pass_mark, attempt=attempt, attempts=attempts, action=action,
                   has_practice=has_practice, wrong=[i + 1 for i in wrong or []])


def quiz_failed(title: str, score: int, total: int, pass_mark: int, wrong: list[str], attempts_left: int,
                retry_url: str) -> str:
    """A failed attempt with attempts left: what was wrong, and try again."""
    return _render("quiz_failed.html.j2", title=f"{title}: not passed yet", score=score, total=total,
                   pass_mark=pass_mark, wrong=[markdown(w) for w in wrong], attempts_left=attempts_left, retry_url=retry_url)


def screened_out(back_url: str | None, paid: bool = True) -> str:
    """The polite page for someone the quiz turned away. On Prolific: they are screened out,
    crowdpref gives Prolific the screen-out itself (``paid``; no code to enter), and the way
    back; without API access (``paid`` false), to message the researchers; elsewhere: thanks."""
    return _render("screened_out.html.j2", title="Thank you", back_url=back_url, paid=paid)
