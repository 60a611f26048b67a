"""Recruitment on Prolific: which Prolific a study talks to, its Prolific study (created once,
published, places raised), and the reconciliation of submissions with the study store.

A study with ``participants: prolific`` and ``prolific.enabled`` talks to the real API
(``prolific_api_url``, ``PROLIFIC_TOKEN``). A ``participants: simulated`` study talks to the
FAKE Prolific that ``crowdpref demo`` starts (``tests/fakes/prolific_server.py`` on
``fake_prolific_port``), never to the real one, so a simulation cannot reach real people.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crowdpref.config import StudyConfig

FAKE_PROLIFIC_TOKEN = "fake-prolific-token"


@dataclass(frozen=True)
class ProlificTarget:
    """The Prolific a study uses: API base URL, where participants finish, the token."""

    api_url: str
    app_url: str
    token: str = ""
    fake: bool = False

    def __repr__(self) -> str:  # the token never prints
        return f"ProlificTarget({self.api_url!r}, fake={self.fake})"


def prolific_target(config: StudyConfig, settings: Any) -> ProlificTarget | None:
    """The Prolific this study verifies visitors against and recruits on; None when it has none
    (invite links, or Prolific people without API access: ``prolific.enabled: false``)."""
    if config.participants == "simulated":
        base = f"http://{settings.host}:{settings.fake_prolific_port}"
        return ProlificTarget(f"{base}/api/v1/", base, FAKE_PROLIFIC_TOKEN, fake=True)
    if config.participants == "prolific" and config.prolific.enabled:
        token = settings.prolific_token.get_secret_value() if settings.prolific_token else ""
        return ProlificTarget(settings.prolific_api_url, settings.prolific_app_url, token)
    return None


def prolific_client(config: StudyConfig, settings: Any, **options: Any) -> Any:
    """A :class:`~crowdpref.prolific.ProlificClient` for the study's Prolific (see
    :func:`prolific_target`); ConfigError when the study has none or no token is set."""
    from crowdpref.errors import ConfigError
    from crowdpref.prolific import ProlificClient

    target = prolific_target(config, settings)
    if target is None:
        raise ConfigError(f"study '{config.name}' does not recruit on Prolific (participants: "
                          f"{config.participants}, prolific.enabled: {config.prolific.enabled}): set both to use it")
    if not target.token:
        raise ConfigError("PROLIFIC_TOKEN is not set: create an API token in Prolific (Settings > API tokens) "
                          "and export PROLIFIC_TOKEN=...")
    return ProlificClient(target.api_url, target.token, **options)
