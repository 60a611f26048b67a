"""``python -m crowdpref.cli``: the ``crowdpref`` command line."""

import sys

from crowdpref.cli import app

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
