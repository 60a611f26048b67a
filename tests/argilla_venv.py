"""Python snippets run by the Argilla venv's interpreter (``.venv-argilla``), several for the price
of one import of argilla-server.

Importing anything of ``argilla_server`` imports its whole app (``argilla_server/__init__.py``):
about 5 s of CPU. :func:`run_forked` pays it once: one process imports the module ``preload``,
then forks one child per snippet, and each child runs its snippet as ``python -c SNIPPET``
would (``__main__``, ``sys.argv``, its own environment changes, its exit status, its stdout and
stderr apart), from the state of a fresh process that has just imported ``preload`` - what every
snippet here imports first anyway. A snippet's patches, environment and exit never reach the
next one (each is its own process)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGILLA_PYTHON = REPO / ".venv-argilla" / "bin" / "python"


@dataclass(frozen=True)
class Snippet:
    """``python -c code *args`` with ``env`` changes (a value ``None`` unsets the variable),
    killed (SIGALRM: return code -14) after ``timeout_s``."""

    code: str
    args: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=dict)
    timeout_s: int = 120


@dataclass(frozen=True)
class Ran:
    """What :func:`run_forked` saw of one snippet (the fields of ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


FORK_SERVER = r"""
import importlib, json, os, signal, sys, tempfile, traceback

preload, snippets = sys.argv[1], json.loads(sys.stdin.read())
importlib.import_module(preload)
results = []
for snippet in snippets:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.alarm(snippet["timeout_s"])
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        for name, value in snippet["env"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.argv = ["-c", *snippet["args"]]
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        status = 0
        try:
            exec(compile(snippet["code"], "<string>", "exec"), namespace)
        except SystemExit as exc:  # as the interpreter treats it at exit
            if exc.code is None:
                status = 0
            elif isinstance(exc.code, int):
                status = exc.code
            else:
                print(exc.code, file=sys.stderr); status = 1
        except BaseException as exc:  # the snippet's own frames, as python -c prints them
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next); status = 1
        try:
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    texts = []
    for handle in (out, err):
        handle.seek(0); texts.append(handle.read().decode(errors="replace")); handle.close()
    results.append({"returncode": os.waitstatus_to_exitcode(wait_status), "stdout": texts[0], "stderr": texts[1]})
print(json.dumps(results))
"""


def run_forked(snippets: list[Snippet], *, preload: str, env: dict[str, str] | None = None,
               cwd: Path | None = None, timeout: float = 600) -> list[Ran]:
    """Each of ``snippets`` run by the Argilla venv's Python in a child of one process that
    imported ``preload`` (with ``env``, as ``subprocess.run``'s, and ``cwd``), in order."""
    payload = json.dumps([{"code": s.code, "args": list(s.args), "env": s.env, "timeout_s": s.timeout_s}
                          for s in snippets])
    run = subprocess.run([str(ARGILLA_PYTHON), "-c", FORK_SERVER, preload], input=payload, env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"the fork server failed (importing {preload}?):\n{run.stderr[-3000:]}"
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == len(snippets), run.stdout[-2000:]
    return [Ran(**result) for result in results]

