"""A new study config for real people (``crowdpref new-study NAME --participants invite|prolific``).

A pilot with real people needs none of the simulation's settings: no ``crowd:`` section, a
drop-out window in tens of minutes (a slow reader keeps their work), a small question set, and
onboarding on - copied from the shipped ``studies/social-reasoning.yaml`` when it is there (its
content is written for participants), else a short built-in one.

    text = new_study_text("my-pilot", "invite")          # YAML, commented
    path = write_new_study("my-pilot", "invite", folder)  # refuses to overwrite

Nothing here talks to a service; the caller validates the file (:func:`crowdpref.config.load_study`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from crowdpref.config.base import slugify
from crowdpref.config.sections import ProlificStudy
from crowdpref.errors import ConfigError

__all__ = ["DROPOUT_MINUTES", "PARTICIPANTS", "SHIPPED", "new_study_data", "new_study_text", "write_new_study"]

PARTICIPANTS = ("invite", "prolific")
DROPOUT_MINUTES = 45
"""The drop-out window of a new study: 45 minutes without activity before the work goes back
(on Prolific at least the least maximum time Prolific allows for the study's estimated time)."""
ESTIMATED_MINUTES = 30
"""A new Prolific study's ``estimated_completion_minutes``."""
PILOT_POOL_SIZE = 2
"""Warm accounts per study of a pilot (few people: few accounts made ahead)."""
SHIPPED = Path(__file__).resolve().parents[2] / "studies" / "social-reasoning.yaml"
"""Where the shipped study's onboarding is copied from (a source checkout)."""

_PILOT_CATEGORIES = ["empathy", "conflict-resolution", "social-norms"]

_ITEM = {"prompt": "A question asks how to comfort a friend whose pet died. Which answer is stronger?",
         "options": ["Tell them it was only a pet and they can get another one.",
                     "Acknowledge their loss, ask how they are feeling, and offer to help with something "
                     "concrete, because grief is eased by being heard."],
         "answer": 2,
         "explanation": "The second answer is specific, kind and says why; the first dismisses the person's feelings."}

_FALLBACK = {
    "study1": {
        "minutes": 5,
        "introduction": "**Thank you for taking part.** You will write short answers to questions about everyday "
                        "social situations. First, a few minutes of examples and practice show what a good answer "
                        "looks like; then a short quiz. The whole study takes about 30 minutes.",
        "examples": [{"question": "How would you tell a flatmate that their music is too loud at night?",
                      "strong": "Pick a calm moment, say how the noise affects your sleep, and suggest a quiet hour "
                                "you can both keep - it names the problem without blaming them.",
                      "strong_why": "It is specific, respectful, and explains its reasoning.",
                      "weak": "Just tell them to be quiet.",
                      "weak_why": "It gives no reason and ignores how the flatmate will feel."}],
        "practice": [_ITEM],
        "quiz": {"items": [_ITEM], "pass_mark": 1, "attempts": 2},
    },
    "study2": {
        "minutes": 5,
        "introduction": "**Thank you for taking part.** You will compare pairs of answers to questions about "
                        "everyday social situations and say which is better, and by how much. First, examples and "
                        "practice; then a short quiz. The whole study takes about 30 minutes.",
        "examples": [{"question": "How would you tell a flatmate that their music is too loud at night?",
                      "answer_a": "Just tell them to be quiet.",
                      "answer_b": "Pick a calm moment, explain how it affects your sleep, and agree a quiet hour.",
                      "rating": 7,
                      "why": "B is clearly better: specific and respectful, with a reason. Not 8: A is short but "
                             "not harmful."}],
        "practice": [_ITEM],
        "quiz": {"items": [_ITEM], "pass_mark": 1, "attempts": 2},
    },
}


def _shipped_onboarding() -> dict[str, dict[str, Any]]:
    """The shipped study's onboarding blocks, else the built-in ones."""
    try:
        data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        data = None
    found: dict[str, dict[str, Any]] = {}
    for key in ("study1", "study2"):
        block = ((data or {}).get(key) or {}).get("onboarding") if isinstance(data, dict) else None
        found[key] = copy.deepcopy(block if isinstance(block, dict) else _FALLBACK[key])
    return found


def new_study_data(name: str, participants: str) -> dict[str, Any]:
    """The config of a new study for real people (a mapping, in the order it is written)."""
    if participants not in PARTICIPANTS:
        raise ConfigError(f"--participants must be invite or prolific (got {participants!r}): the simulated crowd "
                          "has its own config (studies/demo.yaml)")
    slug = slugify(name)
    if not slug:
        raise ConfigError(f"study name {name!r} has no letters or digits: give a name such as my-pilot")
    onboarding = _shipped_onboarding()
    for key in ("study1", "study2"):
        if participants == "prolific":
            onboarding[key].setdefault("screen_out_reward", 80)
        else:
            onboarding[key].pop("screen_out_reward", None)  # Prolific only
    dropout = DROPOUT_MINUTES
    if participants == "prolific":  # never released while Prolific still gives them time
        dropout = max(dropout, ProlificStudy(estimated_completion_minutes=ESTIMATED_MINUTES).least_allowed_minutes)
    data: dict[str, Any] = {
        "name": slug,
        "title": slug.replace("-", " ").capitalize(),
        "description": "A pilot of the social-reasoning study with real people.",
        "seed": 1,
        "participants": participants,
        "questions": {"categories": list(_PILOT_CATEGORIES), "bank": True, "per_category": 2,
                      "llm": {"enabled": False}},
        "study1": {"responses_per_question": 2, "questions_per_participant": 3,
                   "inactive_after_minutes": dropout, "pool_size": PILOT_POOL_SIZE, "remainder": "smaller_last",
                   "onboarding": onboarding["study1"]},
        "study2": {"ratings_per_pair": 2, "pairs_per_participant": 3, "scale_points": 8,
                   "inactive_after_minutes": dropout, "pool_size": PILOT_POOL_SIZE, "remainder": "smaller_last",
                   "onboarding": onboarding["study2"]},
        "publish": {"private": True},
    }
    if participants == "prolific":
        # places open a pool's worth at a time (the paced launch): a pilot's few warm accounts are
        # never outrun by a step of arrivals (crowdpref validate warns otherwise)
        launch = {"step": PILOT_POOL_SIZE}
        data["prolific"] = {"enabled": True,
                            "study1": {"reward": 450, "estimated_completion_minutes": ESTIMATED_MINUTES,
                                       "launch": launch},
                            "study2": {"reward": 450, "estimated_completion_minutes": ESTIMATED_MINUTES,
                                       "launch": dict(launch)}}
    return data


class _Dumper(yaml.SafeDumper):
    """Multi-line text as YAML literal blocks (readable and editable)."""


def _text(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def new_study_text(name: str, participants: str) -> str:
    """The new study's config as commented YAML."""
    data = new_study_data(name, participants)
    who = ("invitation links: `crowdpref invite <this file>` prints one per person" if participants == "invite"
           else "Prolific (needs PROLIFIC_TOKEN; rewards in pence/cents)")
    head = (f"# {data['name']}: a study with real people - {who}.\n"
            f"# Written by `crowdpref new-study`; check it with `crowdpref validate <this file>`.\n"
            "#   3 categories x 2 questions = 6 questions; study 1: 2 answers each, 3 per participant;\n"
            "#   study 2: every pair of a question's 2 answers, 2 ratings each, 3 per participant.\n"
            f"# Drop-out: {DROPOUT_MINUTES} minutes without activity before a participant's work goes to someone else.\n"
            "# Onboarding (docs/how-to/onboarding.md) runs before any work; remove a study's block to turn it off.\n"
            "# Pilot study 1 alone: `crowdpref run generate-questions <this file>`, then\n"
            "# `crowdpref run collect-responses <this file>` (docs/how-to/pilot-invite-links.md).\n\n")
    return head + yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def write_new_study(name: str, participants: str, path: Path) -> Path:
    """Write the new study's config to ``path`` (a ``.yaml`` file, else a folder: ``<name>.yaml``
    in it, created when missing);
    ConfigError when the file exists (never overwritten)."""
    text = new_study_text(name, participants)
    is_file = path.suffix.lower() in (".yaml", ".yml") and not path.is_dir()
    target = path if is_file else path / f"{slugify(name)}.yaml"
    if target.exists():
        raise ConfigError(f"{target}: exists already: refusing to overwrite it; choose another NAME or --out PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with target.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise ConfigError(f"{target}: exists already: refusing to overwrite it; "
                          "choose another NAME or --out PATH") from None
    return target
