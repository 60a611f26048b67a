"""The retry policy, in one place.

Tasks that cross the network (Argilla, an LLM, the Hub, Prolific) retry with backoff and jitter,
but ONLY on transient failures - a refused or dropped connection, a timeout, a 5xx. A problem the
user must fix (bad config, missing input, wrong key, a 4xx) fails at once with its one-line
message. Non-idempotent calls (e.g. Prolific's bulk approval) never use this policy. A call that
may or may not have been done (:class:`~crowdpref.prolific.ProlificAmbiguous`: a creation, a
payment or a bulk approval whose reply was lost) is never transient, whatever it says: a task
retry would repeat it blindly; the next run reconciles (reads back) instead."""

from __future__ import annotations

from typing import Any

import httpx

from crowdpref.errors import CrowdprefError
from crowdpref.prolific import ProlificAmbiguous

RETRY_DELAYS_S = [2, 10, 30]
JITTER = 0.5


def is_transient(exc: BaseException) -> bool:
    """Worth another try: network trouble or a server-side error, not a user-fixable problem,
    and never a call that may already have been done (ProlificAmbiguous)."""
    if isinstance(exc, ProlificAmbiguous):
        return False
    if isinstance(exc, CrowdprefError):
        return exc.transient
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    name = type(exc).__name__  # SDK errors we do not import here (argilla, openai, huggingface_hub)
    return name in {"APIConnectionError", "APITimeoutError", "InternalServerError", "ServiceUnavailableError"}


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only when the failure was transient."""
    try:
        state.result()
    except BaseException as exc:  # noqa: BLE001 - we classify, Prefect re-raises
        return is_transient(exc)
    return False


NETWORK = dict(
    retries=len(RETRY_DELAYS_S),
    retry_delay_seconds=RETRY_DELAYS_S,
    retry_jitter_factor=JITTER,
    retry_condition_fn=retry_transient,
)
"""Keyword arguments for ``@task(**NETWORK)``."""
