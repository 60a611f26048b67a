"""The deployments of ``prefect.yaml``, read once for everything that needs them.

``prefect.yaml`` is the single source of truth: ``prefect deploy --all`` reads it directly
(:mod:`deployments.deploy`), ``deployments/serve.py`` turns the same entries into
``flow.to_deployment(...)`` calls, and :func:`problems` checks it against the flows (entrypoints
import, parameter and schedule-parameter names exist in the flow's signature, every schedule
has a timezone, every deployment a description, tags and the ``crowdpref`` pool).

Prefect is imported only inside the functions that need it.
"""

from __future__ import annotations

import datetime
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crowdpref.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "prefect.yaml"
WORK_POOL = "crowdpref"
WORK_POOL_TYPE = "process"


@dataclass(frozen=True)
class ScheduleDef:
    """One ``schedules:`` entry: exactly one of interval (seconds) / cron / rrule."""

    interval: float | None = None
    cron: str | None = None
    rrule: str | None = None
    timezone: str | None = None
    active: bool = True  # Prefect's default when `active` is left out
    slug: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "interval" if self.interval is not None else "cron" if self.cron else "rrule"

    def describe(self) -> str:
        what = f"every {self.interval:g} s" if self.interval is not None else self.cron or self.rrule
        return f"{what} ({self.timezone or 'UTC'}, {'active' if self.active else 'inactive'})"

    def to_prefect(self) -> Any:
        """A ``prefect.schedules.Schedule`` for ``flow.to_deployment(schedules=[...])``."""
        from prefect.schedules import Cron, Interval, RRule

        common = dict(timezone=self.timezone, active=self.active, parameters=dict(self.parameters), slug=self.slug)
        if self.interval is not None:
            return Interval(datetime.timedelta(seconds=self.interval), **common)
        if self.cron:
            return Cron(self.cron, **common)
        return RRule(self.rrule, **common)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DeploymentDef:
    name: str
    entrypoint: str  # "flows/study.py:study", relative to the repository root
    description: str
    tags: tuple[str, ...]
    parameters: dict[str, Any]
    schedules: tuple[ScheduleDef, ...]
    work_pool: str | None
    concurrency_limit: int | None = None
    collision_strategy: str | None = None

    @property
    def module(self) -> str:
        path, _, _ = self.entrypoint.partition(":")
        return path.removesuffix(".py").replace("/", ".")

    @property
    def attribute(self) -> str:
        return self.entrypoint.partition(":")[2]

    def load_flow(self) -> Any:
        """Import the flow object (the repository root must be importable)."""
        return getattr(importlib.import_module(self.module), self.attribute)

    def to_deployment(self, flow: Any | None = None) -> Any:
        """The same deployment for ``prefect.serve`` (a ``RunnerDeployment``, no work pool)."""
        flow = flow if flow is not None else self.load_flow()
        concurrency: Any = None
        if self.concurrency_limit is not None:
            from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

            concurrency = ConcurrencyLimitConfig(
                limit=self.concurrency_limit,
                collision_strategy=ConcurrencyLimitStrategy(self.collision_strategy or "ENQUEUE"),
            )
        return flow.to_deployment(
            name=self.name,
            description=self.description,
            tags=list(self.tags),
            parameters=dict(self.parameters),
            schedules=[s.to_prefect() for s in self.schedules],
            concurrency_limit=concurrency,
        )


def _schedule(raw: dict[str, Any], where: str) -> ScheduleDef:
    kinds = [k for k in ("interval", "cron", "rrule") if raw.get(k) is not None]
    if len(kinds) != 1:
        raise ConfigError(f"{where}: a schedule needs exactly one of interval, cron or rrule (found {kinds or 'none'})")
    interval = raw.get("interval")
    if interval is not None and not isinstance(interval, (int, float)):
        raise ConfigError(f"{where}: interval must be a number of seconds, not {interval!r}")
    return ScheduleDef(
        interval=float(interval) if interval is not None else None,
        cron=raw.get("cron"),
        rrule=raw.get("rrule"),
        timezone=raw.get("timezone"),
        active=bool(raw.get("active", True)),
        slug=raw.get("slug"),
        parameters=dict(raw.get("parameters") or {}),
    )


def load_definitions(path: Path = PREFECT_YAML) -> list[DeploymentDef]:
    """The deployments of ``prefect.yaml`` (one-line :class:`ConfigError` when malformed)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the deployments ({exc.__class__.__name__}: {exc})") from None
    out = []
    for i, raw in enumerate(data.get("deployments") or []):
        where = f"{path.name}: deployments[{i}]"
        if not isinstance(raw, dict) or not raw.get("name") or ":" not in str(raw.get("entrypoint", "")):
            raise ConfigError(f"{where}: needs a name and an entrypoint 'path.py:flow_function'")
        where = f"{path.name}: deployment '{raw['name']}'"
        limit = raw.get("concurrency_limit")
        strategy = None
        if isinstance(limit, dict):
            strategy = limit.get("collision_strategy")
            limit = limit.get("limit")
        out.append(
            DeploymentDef(
                name=str(raw["name"]),
                entrypoint=str(raw["entrypoint"]),
                description=" ".join(str(raw.get("description") or "").split()),
                tags=tuple(raw.get("tags") or ()),
                parameters=dict(raw.get("parameters") or {}),
                schedules=tuple(
                    _schedule(s, f"{where}, schedule {j}") for j, s in enumerate(raw.get("schedules") or [])
                ),
                work_pool=(raw.get("work_pool") or {}).get("name"),
                concurrency_limit=int(limit) if limit is not None else None,
                collision_strategy=strategy,
            )
        )
    return out


def problems(definitions: list[DeploymentDef], *, import_flows: bool = True) -> list[str]:
    """What is wrong with the definitions (empty when they are fine). With ``import_flows``, the
    entrypoints are imported and parameter names checked against the flows' signatures."""
    found: list[str] = []
    names = [d.name for d in definitions]
    for name in sorted({n for n in names if names.count(n) > 1}):
        found.append(f"{name}: defined more than once")
    for d in definitions:
        if not d.description:
            found.append(f"{d.name}: no description")
        if not d.tags:
            found.append(f"{d.name}: no tags")
        if d.work_pool != WORK_POOL:
            found.append(f"{d.name}: work pool is {d.work_pool!r}, expected {WORK_POOL!r}")
        for s in d.schedules:
            if not s.timezone:
                found.append(f"{d.name}: schedule {s.describe()} has no timezone")
            if not s.slug:
                found.append(f"{d.name}: schedule {s.describe()} has no slug")
        if not import_flows:
            continue
        try:
            flow = d.load_flow()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            found.append(f"{d.name}: cannot import {d.entrypoint} ({exc.__class__.__name__}: {exc})")
            continue
        signature = inspect.signature(flow.fn)
        for source, params in [("parameters", d.parameters)] + [
            (f"schedule {s.slug or s.describe()}", s.parameters) for s in d.schedules
        ]:
            unknown = set(params) - set(signature.parameters)
            if unknown:
                found.append(f"{d.name}: {source} {sorted(unknown)} are not parameters of {d.entrypoint}")
    return found
