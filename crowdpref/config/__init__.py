"""The study config: every study-level choice of one RLHF data study, loaded from a YAML file.

A study YAML has these top-level sections (all but ``name`` optional; defaults reproduce the
published Prolific x Argilla social-reasoning study)::

    name / title / description / seed / participants
    questions:    categories, the shipped bank, extra files, LLM expansion, filters
    study1:       written answers: R responses per question, Q questions per participant
    study2:       pairwise ratings: ratings per pair, pairs per participant, scale points
    screening:    hate-speech classifier (detoxify), thresholds, flag-or-drop policy
    aggregation:  how ratings become chosen/rejected
    filters:      preregistered rules: which participants the default release leaves out
    publish:      Hugging Face Hub repo, licence, card
    crowd:        simulated participants (demo and tests)
    prolific:     recruitment on Prolific (rewards, filters)
    invites:      invitation links

Machine-level connection info (URLs, tokens) is not here: see :mod:`crowdpref.settings`.

Use :func:`load_study` to read a file: every problem becomes a one-line
:class:`~crowdpref.errors.ConfigError` naming the file, the dotted field and the fix.

The package, each module importing only those above it:

- :mod:`crowdpref.config.base`: strict scalar types, the slug rule, the base model and the
  field/problem/fix validation error;
- :mod:`crowdpref.config.plan`: the arithmetic (:class:`Batches`, :class:`StudyPlan`,
  :class:`ProlificCost`);
- :mod:`crowdpref.config.launch`: how a Prolific study's places open (``prolific.studyN.launch``);
- :mod:`crowdpref.config.sections`: one model per YAML section and its own checks;
- :mod:`crowdpref.config.explain`: the wording of the summary ``crowdpref validate`` prints;
- :mod:`crowdpref.config.study`: :class:`StudyConfig` and the checks that compare sections;
- :mod:`crowdpref.config.load`: :func:`load_study` and :func:`parse_study`, and the one-line
  error messages.
"""

from crowdpref.config.base import slugify
from crowdpref.config.launch import LaunchConfig
from crowdpref.config.load import load_study, parse_study
from crowdpref.config.plan import Batches, ProlificCost, StudyPlan
from crowdpref.config.sections import (
    DEFAULT_CATEGORIES,
    DETOXIFY_LABELS,
    REPO_PART_RE,
    AggregationConfig,
    Category,
    CrowdConfig,
    EvaluationConfig,
    FiltersConfig,
    InstructedChecks,
    InviteConfig,
    LLMExpansion,
    ProlificConfig,
    ProlificFilters,
    ProlificStudy,
    PublishConfig,
    QualityScale,
    QuestionsConfig,
    RatingChecks,
    RewardModelConfig,
    ScreeningConfig,
    Study1Config,
    Study2Config,
)
from crowdpref.config.study import StudyConfig

__all__ = [
    "DEFAULT_CATEGORIES",
    "DETOXIFY_LABELS",
    "REPO_PART_RE",
    "AggregationConfig",
    "Batches",
    "Category",
    "CrowdConfig",
    "EvaluationConfig",
    "FiltersConfig",
    "InstructedChecks",
    "InviteConfig",
    "LLMExpansion",
    "LaunchConfig",
    "ProlificConfig",
    "ProlificCost",
    "ProlificFilters",
    "ProlificStudy",
    "PublishConfig",
    "QualityScale",
    "QuestionsConfig",
    "RatingChecks",
    "RewardModelConfig",
    "ScreeningConfig",
    "Study1Config",
    "Study2Config",
    "StudyConfig",
    "StudyPlan",
    "load_study",
    "parse_study",
    "slugify",
]
