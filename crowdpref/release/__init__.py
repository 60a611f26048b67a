"""The dataset release (being split into modules; see crowdpref.release.build)."""

from crowdpref.release.build import *  # noqa: F403
from crowdpref.release.build import __all__  # noqa: F401
