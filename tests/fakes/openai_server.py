"""A fake OpenAI-compatible server, so tests can drive the REAL ``openai`` client over HTTP.

    with FakeOpenAIServer(mode="good", questions_per_reply=3) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key,
                               timeout=5, max_retries=0)

It serves ``POST /v1/chat/completions`` (and ``GET /v1/models``) on 127.0.0.1 at a free port,
in a background thread. It checks the bearer key (a wrong one gets a 401 whose message echoes
the key, as real servers do, so tests can check it is never repeated) and answers by ``mode``:

``good``          ``{"questions": [...]}`` with ``questions_per_reply`` questions
``fenced``        the same JSON inside a fenced code block, between chatty sentences
``malformed``     JSON cut off mid-way (trailing comma, no closing brackets)
``numbered``      a numbered list in prose, no JSON at all
``partial``       valid JSON with only ``partial_count`` questions
``refusal``       an apology, no questions
``slow``          waits ``slow_seconds`` before answering (to trigger client timeouts)
``unauthorized``  401 whatever the key
``server_error``  500

Or set ``reply`` to a function ``(request_json) -> str`` for any other content (e.g. answers
to questions). Questions come from a pool of distinct, valid questions, never repeated
within one server's life (``questions_served`` counts them). ``requests`` holds every
request body received (a list of dicts), ``request_headers`` their headers (lower-case names).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("good", "fenced", "malformed", "numbered", "partial", "refusal", "slow",
         "unauthorized", "server_error")
REFUSAL = "I'm sorry, but I can't help with writing those. Is there anything else I can do for you?"

#: Distinct, valid, open social-reasoning questions (none near a bank question).
QUESTION_POOL = (
    "A flatmate keeps borrowing your charger without asking; how could you bring it up without sounding petty?",
    "Your cousin posts a photo of you online that you dislike; what would be a considerate way to ask her to take it down?",
    "Why do some people find it easier to apologise by text message than in person?",
    "A new parent at the school gate never joins the other parents' conversations; what might explain her distance?",
    "How would you react if a stranger thanked you for a kindness you do not remember doing?",
    "What should a team do when its most productive member is also the one who upsets everyone?",
    "Your grandfather tells the same war story at every family meal; how can relatives respond with patience?",
    "How might a referee explain an unpopular decision to angry parents at a children's football match?",
    "A street musician plays beside your outdoor cafe table all afternoon; what are fair ways to respond?",
    "Which questions help you understand a friend who suddenly quits a well-paid job?",
    "What could a volunteer say to a lonely hospital patient who does not want visitors?",
    "How could neighbours share a single parking space fairly when one of them works nights?",
    "Why might a child lie about finishing homework even when the truth would not get her into trouble?",
    "A shop assistant mispronounces your name repeatedly; how would you correct her kindly?",
    "How do you decide whether to tell a colleague that his fly is undone during a presentation break?",
    "What makes a surprise party a lovely gesture for some people and an ordeal for others?",
    "Your friend lends you a book and you spill coffee on it; how would you make amends?",
    "How should a tour guide handle a guest who keeps correcting her facts in front of the group?",
    "A classmate copies your style of clothing exactly; what feelings might drive her to do that?",
    "What would help two elderly sisters who have not spoken for twenty years to start talking again?",
    "How can a bus driver stay courteous to passengers after being insulted by one of them?",
    "Why might someone feel guilty about receiving a generous gift they cannot repay?",
    "What is a respectful way to ask guests to remove their shoes in your home?",
    "How could a coach tell a talented player that she will sit on the bench for the final?",
    "Your neighbour's child hits a ball through your window and runs off; how would you approach the family?",
    "What can a new resident do to be welcomed into a small village where everyone knows each other?",
    "How might a waiter respond when a diner insists on paying the bill for a table of strangers?",
    "Which signs show that a friend's teasing has stopped being affectionate?",
    "A coworker eats lunch alone every day; what would be a low-pressure way to include him?",
    "What does a good host do when two guests start arguing about religion at dinner?",
    "How should a landlady respond when a tenant pays the rent late for the first time in years?",
    "Why might a person refuse help they clearly need, and how can you offer it anyway?",
    "How would you comfort a teammate who missed the penalty that lost the championship?",
    "What should an office do to make a colleague returning from long sick leave feel at ease?",
    "A passer-by drops a bag of oranges on a busy pavement; how do people decide whether to help?",
    "How could a grandmother explain to her grandson why she does not like having her photo taken?",
    "What might a teenager be trying to say by slamming the door after dinner?",
    "How can two friends stay close after one of them becomes much richer than the other?",
    "Why do people sometimes say 'no worries' when they are in fact quite worried?",
    "How should a choir leader handle a singer who is enthusiastic but always out of tune?",
)


class FakeOpenAIServer:
    """See the module docstring. Use as a context manager, or call start() and stop()."""

    def __init__(self, mode: str = "good", *, api_key: str | None = "sk-fake-test-key-0123456789",
                 questions_per_reply: int = 5, partial_count: int = 2, slow_seconds: float = 5.0,
                 reply: Callable[[dict[str, Any]], str] | None = None):
        self.mode = mode
        self.api_key = api_key
        self.questions_per_reply = questions_per_reply
        self.partial_count = partial_count
        self.slow_seconds = slow_seconds
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.questions_served = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False  # a handler still sleeping in "slow" mode must not block stop()
        httpd.fake = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- content -----------------------------------------------------------------------------
    def next_questions(self, count: int) -> list[str]:
        """``count`` pool questions not served before by this server."""
        with self._lock:
            start = self.questions_served
            self.questions_served += count
        if start + count > len(QUESTION_POOL):
            raise RuntimeError(f"fake server: question pool exhausted ({len(QUESTION_POOL)})")
        return list(QUESTION_POOL[start : start + count])

    def content_for(self, body: dict[str, Any]) -> str:
        """The assistant message content for one request, by mode."""
        if self.reply is not None:
            return self.reply(body)
        if self.mode == "refusal":
            return REFUSAL
        if self.mode == "partial":
            return json.dumps({"questions": self.next_questions(self.partial_count)})
        questions = self.next_questions(self.questions_per_reply)
        as_json = json.dumps({"questions": questions}, indent=2)
        if self.mode == "fenced":
            return f"Sure! Here are some new questions:\n\n```json\n{as_json}\n```\n\nLet me know if you need more."
        if self.mode == "malformed":
            items = ", ".join(json.dumps(q) for q in questions)
            return '{"questions": [' + items + ","  # cut off: trailing comma, no closing brackets
        if self.mode == "numbered":
            listed = "\n".join(f"{i}. {q}" for i, q in enumerate(questions, start=1))
            return f"Here are the questions you asked for:\n\n{listed}\n\nI hope these help."
        return as_json

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI ``chat.completion`` object around :meth:`content_for`."""
        with self._lock:
            number = len(self.requests)
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": self.content_for(body)},
                "finish_reason": "stop",
            }],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }


def _error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    server_version = "FakeOpenAI/1.0"

    @property
    def fake(self) -> FakeOpenAIServer:
        return self.server.fake  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model",
                                                          "created": 0, "owned_by": "fake"}]})
        else:
            self._send(404, _error(f"no route {self.path}", "invalid_request_error"))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, _error(f"no route {self.path}", "invalid_request_error"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, _error("request body is not JSON", "invalid_request_error"))
            return
        fake = self.fake
        with fake._lock:
            fake.requests.append(body)
            fake.request_headers.append({k.lower(): v for k, v in self.headers.items()})
        presented = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if fake.mode == "unauthorized" or (fake.api_key is not None and presented != fake.api_key):
            self._send(401, _error(f"Incorrect API key provided: {presented}.",
                                   "invalid_request_error", "invalid_api_key"))
            return
        if fake.mode == "server_error":
            self._send(500, _error("The server had an error processing your request.", "server_error"))
            return
        if fake.mode == "slow" and fake._stopping.wait(fake.slow_seconds):
            return  # the server is stopping; the client has long given up
        self._send(200, fake.completion(body))

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and hung up
