"""argilla-server as the public profile runs it, but with bcrypt back ON the event loop: the
lever "bcrypt off the loop" measured alone by ``benchmarks/portal.py --bcrypt-on-loop``.

Runs in Argilla's own venv (``uvicorn argilla_bcrypt_on_loop:app --app-dir benchmarks``):
imports ``services/argilla/launch.py`` (the SQL search engine registered as in the stack) but
first marks argilla-server's accounts module as already patched, so the launcher's
``bcrypt_off_the_loop`` leaves argilla-server's stock (on-the-loop) bcrypt in place. Benchmark
use only; never part of a stack.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services" / "argilla"))

from argilla_server.contexts import accounts  # noqa: E402

import launch  # noqa: E402

setattr(accounts, getattr(launch, "BCRYPT_PATCHED", "_crowdpref_bcrypt_off_the_loop"), True)
if getattr(launch, "bcrypt_off_the_loop", None) is not None:
    launch.bcrypt_off_the_loop()  # a no-op now: the stock functions stay
    assert accounts.authenticate_user.__module__.startswith("argilla_server"), "bcrypt was moved off the loop"

from argilla_server import app  # noqa: E402,F401  (what uvicorn serves)
