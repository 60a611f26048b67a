"""The study's arithmetic: how work items split into participant batches, the numbers a study
plans for a given question count, and what it costs on Prolific.

:class:`~crowdpref.config.study.StudyConfig` builds these (``plan``, ``prolific_cost``); nothing
here reads a config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crowdpref.config.base import _problem

__all__ = ["Batches", "ProlificCost", "ScreenOutCost", "StudyPlan"]


@dataclass(frozen=True)
class Batches:
    """How ``items`` work items split into participant batches of ``per_participant``."""

    items: int
    per_participant: int

    @property
    def remainder(self) -> int:
        """Items left over after the full batches (0: the split is even)."""
        return self.items % self.per_participant

    @property
    def participants(self) -> int:
        return math.ceil(self.items / self.per_participant)

    def describe(self) -> str:
        text = f"{self.participants} participants x {self.per_participant}"
        if self.remainder:
            text += f" (last gets {self.remainder})"
        return text


def _check_batches(batches: Batches, remainder: str, field: str, what: str) -> None:
    if remainder == "error" and batches.remainder:
        raise _problem(
            field,
            f"{batches.items} {what} do not split into batches of {batches.per_participant} "
            f"({batches.remainder} left over) and remainder is 'error'",
            "change the numbers so they divide evenly, or set remainder: smaller_last",
        )


@dataclass(frozen=True)
class StudyPlan:
    """Derived numbers for a given question count."""

    n_questions: int
    study1: Batches
    pairs_per_question: int
    n_pairs: int
    study2: Batches

    @property
    def n_responses(self) -> int:
        return self.study1.items

    @property
    def n_ratings(self) -> int:
        return self.study2.items


@dataclass(frozen=True)
class ProlificCost:
    """What a study costs on Prolific, in major units of the workspace currency: the rewards
    of the first places, Prolific's fee on them, and the most the budget guard lets it reach."""

    places: tuple[int, int]
    caps: tuple[int, int]
    rewards: tuple[int, int]  # minor units per place
    fee_rate: float

    def _total(self, places: tuple[int, int]) -> float:
        return sum(p * r for p, r in zip(places, self.rewards)) / 100 * (1 + self.fee_rate)

    @property
    def planned(self) -> float:
        """Rewards of the first places plus the fee."""
        return self._total(self.places)

    @property
    def at_cap(self) -> float:
        """The same with every study raised to its ``max_places``."""
        return self._total(self.caps)

    def describe(self) -> str:
        parts = [f"study {i + 1}: {p} places x {r / 100:.2f}" for i, (p, r) in enumerate(zip(self.places, self.rewards))]
        return (f"{'; '.join(parts)}; + fee {self.fee_rate:.1%} = {self.planned:,.2f} (workspace currency); "
                f"at most {self.at_cap:,.2f} if places are raised to their caps ({self.caps[0]}, {self.caps[1]})")


@dataclass(frozen=True)
class ScreenOutCost:
    """What paying the people an onboarding quiz screens out can cost on Prolific, in major units
    of the workspace currency. Nobody knows beforehand how many will fail, so this is the
    MAXIMUM: every slot of each study's screen-out code used (Prolific pauses the study there),
    each paid the fixed reward, plus the fee. ``rewards[i]`` None: that study screens nobody out."""

    slots: tuple[int, int]
    rewards: tuple[int | None, int | None]  # minor units per screen-out
    fee_rate: float

    @property
    def maximum(self) -> float:
        return sum(s * r for s, r in zip(self.slots, self.rewards) if r) / 100 * (1 + self.fee_rate)

    def describe(self) -> str:
        parts = [f"study {i + 1}: the budget allows {s} screen-out{'s' * (s != 1)} (the code's slots) x "
                 f"{r / 100:.2f} = {s * r / 100:,.2f}" for i, (s, r) in enumerate(zip(self.slots, self.rewards)) if r]
        return (f"{'; '.join(parts)}; + fee {self.fee_rate:.1%} = at most {self.maximum:,.2f} (workspace currency): "
                "the maximum, every screen-out slot used (slots = the study's places; Prolific pauses the study "
                "when they are used up); only people crowdpref's quiz screened out are paid")
