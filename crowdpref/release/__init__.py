"""The dataset release: a study's results published as a Hugging Face dataset.

A release is the folder ``<run>/release/`` in Hub layout: one Parquet file per configuration
(``default`` holds the ``prompt`` / ``chosen`` / ``rejected`` preferences; ``responses``,
``ratings``, ``questions`` and the others hold what they were made from) and a generated dataset
card (``README.md``). Participants appear only under random published ids, personal details
recognised by their form are masked, every file is scanned for secrets before the folder is
swapped in, and a push makes a Hub dataset repo equal to the folder.

Modules, lowest first (each imports only those above it):

- :mod:`crowdpref.release.ids`: published participant ids and their private mapping;
- :mod:`crowdpref.release.markdown`: how values are written in the card's markdown;
- :mod:`crowdpref.release.schema`: every configuration and column of the release, declared once;
- :mod:`crowdpref.release.stats`: the numbers the card reports (stats files, store counts,
  figures measured on the data);
- :mod:`crowdpref.release.scan`: the secret scan and what must never be published;
- :mod:`crowdpref.release.recognisers`: Presidio's recognisers (phones, payment cards, IBANs, IP
  addresses, URLs; names and places with a spaCy NER model);
- :mod:`crowdpref.release.privacy`: personal details recognised by their form, masked or refused;
- :mod:`crowdpref.release.review`: the privacy review: what the recognisers flag is decided
  (keep, mask, drop) in a private review file before the build goes on;
- :mod:`crowdpref.release.card`: the dataset card;
- :mod:`crowdpref.release.build`: the build of ``<run>/release/`` and its swap;
- :mod:`crowdpref.release.hub`: the push to the Hub.

No Prefect imports: ``tasks/publish.py`` and ``flows/publish_dataset.py`` wrap this package.
"""

from crowdpref.release.build import build_release, release_folder, release_summary
from crowdpref.release.card import display_order_text, provenance_text
from crowdpref.release.hub import (
    HUB_KEEP,
    PushError,
    PushResult,
    history_must_go,
    hub_dataset_url,
    push_release,
    release_files,
    validate_repo_id,
)
from crowdpref.release.ids import ID_LENGTH, PUBLISHED_IDS_FILE, published_ids
from crowdpref.release.privacy import (
    PRIVACY_FILE,
    PrivacyError,
    PrivacyReport,
    privacy_markdown,
    read_privacy_report,
)
from crowdpref.release.scan import forbidden_strings, scan_for_secrets
from crowdpref.release.schema import Column, Subset, coarsen_timestamps, release_subsets
from crowdpref.release.stats import collection_stats, read_stats

__all__ = [
    "HUB_KEEP",
    "ID_LENGTH",
    "PRIVACY_FILE",
    "PUBLISHED_IDS_FILE",
    "Column",
    "PrivacyError",
    "PrivacyReport",
    "PushError",
    "PushResult",
    "Subset",
    "build_release",
    "coarsen_timestamps",
    "collection_stats",
    "display_order_text",
    "forbidden_strings",
    "history_must_go",
    "hub_dataset_url",
    "privacy_markdown",
    "provenance_text",
    "published_ids",
    "push_release",
    "read_privacy_report",
    "read_stats",
    "release_files",
    "release_folder",
    "release_subsets",
    "release_summary",
    "scan_for_secrets",
    "validate_repo_id",
]
