"""The portal's pages: plain HTML, no external assets, readable on a phone. Every value from
outside is escaped. Two pages have a script: :func:`argilla_session`, which hands a minted session
to Argilla's frontend (it cannot be done without one), and :func:`work_frame`, whose bar asks the
portal for the participant's progress (without scripts the bar still shows it as of the page's
load, and Finish works)."""

from __future__ import annotations

import html
import json
import re

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;line-height:1.5;margin:0;color:#1a1a1a;background:#fafafa}
main{max-width:40rem;margin:0 auto;padding:1.25rem}
h1{font-size:1.5rem;margin:.5rem 0 1rem}h2,h3{font-size:1.15rem;margin:1.25rem 0 .5rem}
.box{background:#fff;border:1px solid #ddd;border-radius:.5rem;padding:1rem 1.25rem;margin:1rem 0}
.code{font-size:2rem;font-weight:700;letter-spacing:.1em;font-family:ui-monospace,monospace}
.button{display:inline-block;background:#1f5fbf;color:#fff;border:0;border-radius:.4rem;padding:.8rem 1.4rem;
font-size:1.05rem;text-decoration:none;cursor:pointer}
.muted{color:#555;font-size:.95rem}
.box>:first-child{margin-top:0}.box>:last-child{margin-bottom:0}
fieldset{border:0;padding:0;margin:0 0 1.25rem}legend{font-weight:600;padding:0;margin-bottom:.25rem}
.option{display:flex;align-items:flex-start;gap:.75rem;background:#fff;border:1px solid #bbb;border-radius:.4rem;
padding:.8rem 1rem;margin:.5rem 0;min-height:2.75rem;cursor:pointer}
.option input{width:1.35rem;height:1.35rem;margin:.1rem 0 0;flex:none}
.right{border-left:.35rem solid #1b6e2e}.wrong{border-left:.35rem solid #a61b1b}
.steps{color:#555;font-size:.95rem;margin:-.5rem 0 1rem}
"""


def page(title: str, body: str, head: str = "") -> str:
    return (
        f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{head}"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta name=\"referrer\" content=\"no-referrer\">"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )


def message(title: str, text: str) -> str:
    return page(title, f"<p>{html.escape(text)}</p>")


def markdown(text: str) -> str:
    """The little markdown the study guidelines use: headings, bullets, bold, paragraphs."""
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
    return "\n".join(out)


def welcome(title: str, what: str, items: int, minutes: int | None, guidelines: str, start_action: str,
            finish_url: str, inactive_minutes: float | None = None, invited: bool = False) -> str:
    expect = (f"<li>You will get <strong>{items} items</strong> to {html.escape(what)}, in Argilla, "
              "an annotation tool that opens when you press Start (you are logged in automatically).</li>")
    if minutes:
        expect += f"<li>It takes about <strong>{minutes} minutes</strong>.</li>"
    expect += ("<li>Submit each item. You can stop and come back through the same link: your work is kept. "
               + (f"If you stay inactive for more than {inactive_minutes:g} minutes, your remaining items go to "
                  "someone else.</li>" if inactive_minutes else
                  "If you stay inactive for a long time, your remaining items go to someone else.</li>")
               + "<li>When every item is submitted, press <strong>Finish</strong> in the bar above your items "
               + f"(or open <a href=\"{html.escape(finish_url)}\">the finish page</a>) "
               + ("to tell us you are done.</li>" if invited else "to get your completion code.</li>"))
    body = (f"<div class=\"box\"><h2>What to expect</h2><ul>{expect}</ul>"
            f"<form method=\"post\" action=\"{html.escape(start_action)}\">"
            "<button class=\"button\" type=\"submit\">Start</button></form></div>"
            f"<div class=\"box\">{markdown(guidelines)}</div>")
    return page(title, body)


INVITE_NEXT = ("<p>Your answers are saved: there is nothing else to do, and you can close this page.</p>"
               "<p class=\"muted\">What happens next: the research team collects everyone's answers when the "
               "study closes, and contacts you the way they invited you if they need anything more. You do not "
               "need a completion code.</p>")


def finished(code: str | None, completion_url: str | None) -> str:
    """The finish page: with a code (Prolific) the code and the way back; without one (an
    invitation) thanks and what happens next."""
    if not code:
        return page("Finished", "<p>Thank you! Every item is submitted.</p>" + f"<div class=\"box\">{INVITE_NEXT}</div>")
    body = f"<p>Thank you! Every item is submitted.</p><div class=\"box\"><p>Your completion code:</p>" \
           f"<p class=\"code\">{html.escape(code)}</p>"
    if completion_url:
        body += (f"<p><a class=\"button\" href=\"{html.escape(completion_url)}\">Back to Prolific</a></p>"
                 "<p class=\"muted\">The button takes you to Prolific with your code filled in.</p>")
        # and on to Prolific by itself after a few seconds (the button is for the impatient)
        head = f"<meta http-equiv=\"refresh\" content=\"5;url={html.escape(completion_url)}\">"
        return page("Finished", body + "<p class=\"muted\">Taking you there in 5 seconds.</p></div>", head)
    return page("Finished", body + "</div>")


def already_done(code: str | None, completion_url: str | None) -> str:
    """An old study or invitation link opened after the participant completed: they are done
    (with their completion code and the way back to Prolific when the study has them)."""
    body = "<p>You have already finished this study. Thank you! There is nothing more to do.</p>"
    if not code:
        body += f"<div class=\"box\">{INVITE_NEXT}</div>"
    if code:
        body += (f"<div class=\"box\"><p>Your completion code:</p><p class=\"code\">{html.escape(code)}</p>"
                 + (f"<p><a class=\"button\" href=\"{html.escape(completion_url)}\">Back to Prolific</a></p>"
                    if completion_url else "") + "</div>")
    return page("You are done", body)


def not_finished(submitted: int, total: int, argilla_url: str | None, start_action: str) -> str:
    left = total - submitted
    body = (f"<p>You have submitted <strong>{submitted} of {total}</strong> items: "
            f"<strong>{left}</strong> still to go.</p>"
            "<p>Go back to Argilla, submit the rest (press <em>Submit</em> on each one), then open this page again.</p>"
            + (f"<p><a href=\"{html.escape(argilla_url)}\">Open my items in Argilla</a> (if you are still logged in), or</p>"
               if argilla_url else "")
            + f"<form method=\"post\" action=\"{html.escape(start_action)}\">"
            "<button class=\"button\" type=\"submit\">Back to my items</button></form>")
    return page("Not finished yet", body)


def _js(value: object) -> str:
    """A value as a JavaScript literal that cannot end the inline script."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def argilla_session(token: str, expires: int, target: str, token_key: str, expiration_key: str) -> str:
    """The answer to *Start* in the public profile (served on Argilla's origin): the script
    stores the minted Argilla session where Argilla's frontend keeps it (``token_key`` =
    ``Bearer <token>``, ``expiration_key`` = the expiry in ms) and replaces this page with
    ``target`` (so Back does not return to it). Without scripts, it says so."""
    script = (f"try{{localStorage.setItem({_js(token_key)},{_js('Bearer ' + token)});"
              f"localStorage.setItem({_js(expiration_key)},{_js(str(expires * 1000))});"
              f"location.replace({_js(target)});}}catch(e){{document.getElementById('failed').hidden=false;}}")
    body = ("<p>Opening your items in Argilla\u2026</p>"
            "<p id=\"failed\" hidden>Your browser did not let us open Argilla. Please allow this site to store "
            "data (it is needed to keep you signed in), then press Back and Start again.</p>"
            "<noscript><p>Argilla needs JavaScript: please turn it on, then press Back and Start again.</p></noscript>"
            f"<script>{script}</script>")
    return page("Opening Argilla", body)


WORK_STYLE = """
html,body{height:100%;margin:0}
body{display:flex;flex-direction:column;height:100vh;height:100dvh;font-family:system-ui,-apple-system,Segoe UI,Roboto,
sans-serif;color:#1a1a1a}
.bar{flex:none;display:flex;align-items:center;justify-content:space-between;gap:.75rem;padding:.35rem .75rem;
background:#fff;border-bottom:1px solid #ccc;font-size:.95rem;line-height:1.3}
.bar.done{background:#e3f2e6;border-bottom-color:#1b6e2e}
.bar .button{display:inline-block;background:#1f5fbf;color:#fff;border-radius:.4rem;padding:.55rem 1rem;
font-size:1rem;text-decoration:none;white-space:nowrap;font-weight:600}
.bar.done .button{background:#1b6e2e}
iframe{flex:1;width:100%;border:0;min-height:0}
"""
FRAME_SRC = re.compile(r'<iframe id="argilla" name="argilla" src="([^"]+)"')
WORK_POLL_MS = 6000  # how often the bar asks for progress (stops once everything is submitted)
WORKING_WORDS = "{submitted} of {total} items submitted"
DONE_WORDS = "All {total} items submitted. Press the button to finish."
GIVEN_BACK_WORDS = "Your place in this study was given back, so there is nothing more to do here."


def work_frame(title: str, target: str, submitted: int, total: int, done: bool, finish_action: str,
               progress_action: str, invited: bool) -> str:
    """The participant's work: a thin bar on top (their progress, and a Finish button that is
    always on screen, at any size) over Argilla in a frame that fills the rest. The bar's
    script asks ``progress_action`` every few seconds and, once every item is submitted, turns
    the bar green and says so. ``target`` (the frame's Argilla page) may carry a password sign-in
    on the laptop stack: this page is served with no-store and no referrer."""
    done_label = "Finish" if invited else "Get my code"
    words = (DONE_WORDS if done else WORKING_WORDS).format(submitted=submitted, total=total)
    label = done_label if done else "Finish"
    script = (
        f"(function(){{var url={_js(progress_action)},every={WORK_POLL_MS},bar=document.getElementById('bar'),"
        "text=document.getElementById('progress'),fin=document.getElementById('finish');"
        "function words(t,p){return t.replace('{submitted}',p.submitted).replace('{total}',p.total);}"
        f"function show(p){{if(p.given_back){{text.textContent={_js(GIVEN_BACK_WORDS)};fin.hidden=true;return true;}}"
        f"if(p.done){{bar.className='bar done';text.textContent=words({_js(DONE_WORDS)},p);"
        f"fin.textContent={_js(done_label)};return true;}}text.textContent=words({_js(WORKING_WORDS)},p);return false;}}"
        "function poll(){fetch(url,{credentials:'same-origin',cache:'no-store'}).then(function(r){"
        "return r.ok?r.json():null;}).then(function(p){if(!(p&&show(p)))setTimeout(poll,every);})"
        ".catch(function(){setTimeout(poll,every*3);});}"
        "if(bar.className.indexOf('done')<0)setTimeout(poll,every);})();")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{html.escape(title)}</title><style>{WORK_STYLE}</style></head><body>"
        f'<nav class="bar{" done" if done else ""}" id="bar" aria-label="Your progress">'
        f'<span id="progress" aria-live="polite">{html.escape(words)}</span>'
        f'<a class="button" id="finish" href="{html.escape(finish_action)}" target="_top">{html.escape(label)}</a>'
        "</nav>"
        f'<iframe id="argilla" name="argilla" src="{html.escape(target)}" title="Your items in Argilla"></iframe>'
        f"<script>{script}</script></body></html>"
    )


SESSION_TOKEN = re.compile(r'"Bearer ([\w-]+\.[\w-]+\.[\w-]+)"')
SESSION_TARGET = re.compile(r'location\.replace\(("[^"]+")\)')


def session_handover(session_page: str) -> tuple[str, str] | None:
    """The token and the next address an :func:`argilla_session` page hands the browser (what
    its script writes and where it goes), or None when the page is not one."""
    token, target = SESSION_TOKEN.search(session_page), SESSION_TARGET.search(session_page)
    return (token.group(1), json.loads(target.group(1))) if token and target else None


def frame_target(work_page: str) -> str | None:
    """The Argilla page a :func:`work_frame` page opens in its frame (what a browser loads into
    it), or None when the page has no frame."""
    found = FRAME_SRC.search(work_page)
    return html.unescape(found.group(1)) if found else None


# --- onboarding (before any work is claimed) --------------------------------------------------------
def _steps(current: str, has_practice: bool, has_quiz: bool) -> str:
    names = ["Introduction"] + (["Practice"] if has_practice else []) + (["Quiz"] if has_quiz else []) + ["The work"]
    at = names.index(current) + 1 if current in names else 1
    path = " \u2192 ".join(html.escape(n) for n in names)
    return f"<p class=\"steps\">Step {at} of {len(names)}: {path}</p>"


def _button_form(action: str, label: str, method: str = "post") -> str:
    return (f"<form method=\"{method}\" action=\"{html.escape(action)}\">"
            f"<button class=\"button\" type=\"submit\">{html.escape(label)}</button></form>")


def answer_example(n: int, question: str, strong: str, strong_why: str, weak: str, weak_why: str) -> str:
    """A worked study-1 example: a question, a strong and a weak answer, each with its reason."""
    return (f"<div class=\"box\"><h3>Example {n}</h3><p><strong>Question:</strong></p>{markdown(question)}"
            f"<div class=\"box right\"><p><strong>A strong answer</strong></p>{markdown(strong)}"
            f"<p class=\"muted\"><strong>Why it is strong:</strong> {html.escape(strong_why)}</p></div>"
            f"<div class=\"box wrong\"><p><strong>A weak answer</strong></p>{markdown(weak)}"
            f"<p class=\"muted\"><strong>Why it is weak:</strong> {html.escape(weak_why)}</p></div></div>")


def pair_example(n: int, question: str, answer_a: str, answer_b: str, rating: int, label: str, points: int,
                 why: str) -> str:
    """A worked study-2 example: a pair, the rating the team would give on the scale, and why."""
    return (f"<div class=\"box\"><h3>Example {n}</h3><p><strong>Question:</strong></p>{markdown(question)}"
            f"<div class=\"box\"><p><strong>Answer A</strong></p>{markdown(answer_a)}</div>"
            f"<div class=\"box\"><p><strong>Answer B</strong></p>{markdown(answer_b)}</div>"
            f"<p><strong>Our rating: {rating} of {points}</strong> ({html.escape(label)}; 1 = strong preference "
            f"for A, {points} = strong preference for B).</p>"
            f"<p class=\"muted\"><strong>Why:</strong> {html.escape(why)}</p></div>")


def onboarding_intro(title: str, introduction: str, minutes: int, examples: list[str], practice: int,
                     quiz: tuple[int, int, int] | None, action: str) -> str:
    """The first onboarding page: what the study is for, what comes before the work, and the
    worked examples. ``quiz``: (items, pass mark, attempts) when there is one."""
    plan = f"<li>This introduction takes about <strong>{minutes} minutes</strong>, practice included.</li>"
    if practice:
        plan += (f"<li>Then <strong>{practice} practice question{'s' * (practice != 1)}</strong>: you see at once "
                 "whether you were right, and why. Practice never counts.</li>")
    if quiz:
        n, mark, attempts = quiz
        plan += (f"<li>Then a short quiz: <strong>{n} question{'s' * (n != 1)}</strong>; get <strong>{mark}</strong> "
                 f"right to go on to the work. You have <strong>{attempts} attempt{'s' * (attempts != 1)}</strong>."
                 "</li>")
    plan += "<li>No work is given to you until you finish these steps.</li>"
    body = (_steps("Introduction", bool(practice), bool(quiz)) + f"<div class=\"box\">{markdown(introduction)}</div>"
            f"<div class=\"box\"><h2>Before the work</h2><ul>{plan}</ul></div>")
    if examples:
        body += "<h2>Worked examples</h2>" + "".join(examples)
    body += _button_form(action, "Continue")
    return page(f"{title}: introduction", body)


def _options(name: str, options: list[str], chosen: int | None = None) -> str:
    out = []
    for i, option in enumerate(options, start=1):
        checked = " checked" if chosen == i else ""
        out.append(f"<label class=\"option\"><input type=\"radio\" name=\"{html.escape(name)}\" value=\"{i}\" "
                   f"required{checked}><span>{html.escape(option)}</span></label>")
    return "".join(out)


def practice_item(title: str, index: int, total: int, prompt: str, options: list[str], action: str,
                  has_quiz: bool) -> str:
    """One practice question (answered here, never counted)."""
    body = (_steps("Practice", True, has_quiz)
            + f"<form method=\"post\" action=\"{html.escape(action)}\">"
            f"<input type=\"hidden\" name=\"index\" value=\"{index}\">"
            f"<fieldset><legend>Practice question {index + 1} of {total}</legend>{markdown(prompt)}"
            f"{_options('choice', options)}</fieldset>"
            "<button class=\"button\" type=\"submit\">Check my answer</button></form>"
            "<p class=\"muted\">Practice never counts: it is here so that you know what we ask for.</p>")
    return page(f"{title}: practice", body)


def practice_feedback(title: str, index: int, total: int, prompt: str, options: list[str], chosen: int | None,
                      answer: int, explanation: str, next_action: str, next_label: str, has_quiz: bool,
                      next_method: str = "post") -> str:
    """The immediate feedback on a practice answer: right or not, the right option, and why."""
    right = chosen == answer
    verdict = ("<p><strong>Right!</strong></p>" if right else
               f"<p><strong>Not quite.</strong> You chose: {html.escape(options[chosen - 1]) if chosen else '(nothing)'}"
               "</p>")
    body = (_steps("Practice", True, has_quiz)
            + f"<p class=\"muted\">Practice question {index + 1} of {total}</p>{markdown(prompt)}"
            f"<div class=\"box {'right' if right else 'wrong'}\" role=\"status\">{verdict}"
            f"<p>The best answer: <strong>{html.escape(options[answer - 1])}</strong></p>{markdown(explanation)}</div>"
            + _button_form(next_action, next_label, next_method))
    return page(f"{title}: practice", body)


def practice_done(title: str, answered: int, correct: int, action: str, label: str, has_quiz: bool) -> str:
    body = (_steps("Practice", True, has_quiz)
            + f"<p>You answered all {answered} practice questions ({correct} right on the first try). "
            "Practice never counts.</p>" + _button_form(action, label))
    return page(f"{title}: practice", body)


def quiz(title: str, items: list[tuple[str, list[str]]], pass_mark: int, attempt: int, attempts: int,
         action: str, has_practice: bool, wrong: list[int] | None = None) -> str:
    """The qualification quiz: every question on one form. ``wrong``: the questions (0-based)
    the last attempt got wrong (named, their answers not given away)."""
    n = len(items)
    intro = (f"<p>Answer all {n} question{'s' * (n != 1)}; <strong>{pass_mark}</strong> right answers take you on "
             f"to the work. This is attempt <strong>{attempt} of {attempts}</strong>.</p>")
    if wrong:
        intro = (f"<div class=\"box wrong\" role=\"status\"><p><strong>Not passed yet.</strong> These questions were "
                 f"not right: {', '.join(str(i + 1) for i in wrong)}. Read them again carefully.</p></div>" + intro)
    fields = "".join(f"<fieldset><legend>Question {i + 1} of {n}</legend>{markdown(prompt)}"
                     f"{_options(f'q{i}', options)}</fieldset>" for i, (prompt, options) in enumerate(items))
    body = (_steps("Quiz", has_practice, True) + intro
            + f"<form method=\"post\" action=\"{html.escape(action)}\">{fields}"
            "<button class=\"button\" type=\"submit\">Submit my answers</button></form>")
    return page(f"{title}: quiz", body)


def quiz_failed(title: str, score: int, total: int, pass_mark: int, wrong: list[str], attempts_left: int,
                retry_url: str) -> str:
    """A failed attempt with attempts left: what was wrong, and try again."""
    items = "".join(f"<li>{html.escape(prompt)}</li>" for prompt in wrong)
    body = (f"<div class=\"box wrong\" role=\"status\"><p>You got <strong>{score} of {total}</strong> right; "
            f"<strong>{pass_mark}</strong> are needed.</p><p>Not right this time:</p><ul>{items}</ul></div>"
            f"<p>You have <strong>{attempts_left} more attempt{'s' * (attempts_left != 1)}</strong>. "
            "Take a moment with the introduction's examples, then try again.</p>"
            f"<p><a class=\"button\" href=\"{html.escape(retry_url)}\">Try again</a></p>")
    return page(f"{title}: not passed yet", body)


def screened_out(back_url: str | None, paid: bool = True) -> str:
    """The polite page for someone the quiz turned away. On Prolific: they are screened out,
    crowdpref gives Prolific the screen-out itself (``paid``; no code to enter), and the way
    back; without API access (``paid`` false), to message the researchers; elsewhere: thanks."""
    body = ("<p>Thank you for taking the time to go through the introduction and the quiz.</p>"
            "<p>This time the quiz did not go well enough for us to give you the study's work, and it cannot be "
            "taken again. This says nothing about you: the task is narrow, and the quiz is strict on purpose.</p>")
    if back_url and paid:
        body += ("<div class=\"box\"><p>You have been <strong>screened out</strong> of this study. You will get the "
                 "study's fixed screen-out payment for your time: we tell Prolific ourselves, so you need no code "
                 "and there is nothing to enter. It can take a few minutes to show in your Prolific account.</p>"
                 f"<p><a class=\"button\" href=\"{html.escape(back_url)}\">Back to Prolific</a></p>"
                 "<p class=\"muted\">Please do not return the study on Prolific: a returned study cannot be paid.</p></div>")
    elif back_url:
        body += ("<div class=\"box\"><p>You have been <strong>screened out</strong> of this study. Please message the "
                 "researchers through Prolific about the screen-out payment for your time.</p>"
                 f"<p><a class=\"button\" href=\"{html.escape(back_url)}\">Back to Prolific</a></p></div>")
    else:
        body += "<p>There is nothing else to do: you can close this page. Thank you again!</p>"
    return page("Thank you", body)
