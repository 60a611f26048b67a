"""The portal's pages: plain HTML, no external assets, readable on a phone. Every value from
outside is escaped. One page has a script: :func:`argilla_session`, which hands a minted session
to Argilla's frontend (it cannot be done without one)."""

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
            finish_url: str) -> str:
    expect = (f"<li>You will get <strong>{items} items</strong> to {html.escape(what)}, in Argilla, "
              "an annotation tool that opens when you press Start (you are logged in automatically).</li>")
    if minutes:
        expect += f"<li>It takes about <strong>{minutes} minutes</strong>.</li>"
    expect += ("<li>Submit each item. You can stop and come back through the same link: your work is kept. "
               "If you stay inactive for a long time, your remaining items go to someone else.</li>"
               f"<li>When every item is submitted, open <a href=\"{html.escape(finish_url)}\">the finish page</a> "
               "(the link is also in the guidelines inside Argilla) to get your completion code.</li>")
    body = (f"<div class=\"box\"><h2>What to expect</h2><ul>{expect}</ul>"
            f"<form method=\"post\" action=\"{html.escape(start_action)}\">"
            "<button class=\"button\" type=\"submit\">Start</button></form></div>"
            f"<div class=\"box\">{markdown(guidelines)}</div>")
    return page(title, body)


def finished(code: str, completion_url: str | None) -> str:
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
