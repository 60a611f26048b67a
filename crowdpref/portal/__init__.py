"""The participant portal: Prolific (or invite) arrivals get an Argilla account and work
from the pool, a welcome page, and their completion code (see :mod:`crowdpref.portal.app`)."""
