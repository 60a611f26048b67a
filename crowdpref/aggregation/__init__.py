"""Aggregation: the ratings of study 2 become one chosen/rejected row per answer pair."""

from crowdpref.aggregation.pairs import *  # noqa: F403
from crowdpref.aggregation.pairs import __all__  # noqa: F401
