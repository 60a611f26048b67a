"""crowdpref: the library. Plain typed Python with no Prefect imports; ``tasks/`` and ``flows/``
wrap it for orchestration.

The public API is the names in ``__all__``, importable from ``crowdpref`` itself (each is loaded
on first use, so ``import crowdpref`` stays cheap) or from the package that holds it:

- ``crowdpref.config``: the study config. :func:`load_study` reads a study YAML into a
  :class:`StudyConfig` (a one-line :class:`ConfigError` on bad input).
- ``crowdpref.settings``: where the services are. :func:`load_settings` gives :class:`Settings`.
- ``crowdpref.store``: the study store (SQL). :func:`open_store` gives a :class:`Store`: who holds
  what, every event, the participant lifecycle.
- ``crowdpref.aggregation``: ratings into chosen/rejected, :func:`aggregate`.
- ``crowdpref.release``: the dataset release, :func:`build_release` and :func:`push_release`.
- ``crowdpref.errors``: :class:`CrowdprefError` and its kinds, each a one-line message.

Everything else (the stages ``questions``, ``study1``, ``study2``, ``screening``; the clients
``argilla_client``, ``prolific``; ``recruitment``, ``withdrawals``; the participant ``portal``;
the ``simulation`` of a crowd and of Prolific) is imported from its module, and may change
between versions more freely than the names here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    "StudyConfig": "crowdpref.config",
    "load_study": "crowdpref.config",
    "Settings": "crowdpref.settings",
    "load_settings": "crowdpref.settings",
    "Store": "crowdpref.store",
    "open_store": "crowdpref.store",
    "aggregate": "crowdpref.aggregation",
    "AggregationResult": "crowdpref.aggregation",
    "build_release": "crowdpref.release",
    "push_release": "crowdpref.release",
    "CrowdprefError": "crowdpref.errors",
    "ConfigError": "crowdpref.errors",
    "ServiceError": "crowdpref.errors",
    "StateFileError": "crowdpref.errors",
}

__all__ = ["__version__", *_HOMES]

if TYPE_CHECKING:
    from crowdpref.aggregation import AggregationResult, aggregate
    from crowdpref.config import StudyConfig, load_study
    from crowdpref.errors import ConfigError, CrowdprefError, ServiceError, StateFileError
    from crowdpref.release import build_release, push_release
    from crowdpref.settings import Settings, load_settings
    from crowdpref.store import Store, open_store


def __getattr__(name: str) -> Any:
    """Load a public name from its home module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'crowdpref' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
