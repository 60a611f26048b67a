"""Personal details that need a recogniser more than a regular expression: Presidio's pattern
recognisers (phone numbers, payment cards, IBANs, IP addresses, URLs) and, where a spaCy model
with named-entity recognition is installed, names of people and places.

What runs, and what it needs:

=================  =======================================  ==================================
kind               Presidio recogniser (entity)             needs
=================  =======================================  ==================================
``phone``          ``PhoneRecognizer`` (``PHONE_NUMBER``)   nothing: Google's libphonenumber
``payment-card``   ``CreditCardRecognizer`` (Luhn checked)  nothing
``iban``           ``IbanRecognizer`` (checksum checked)    nothing
``ip-address``     ``IpRecognizer`` (IPv4, IPv6)            nothing
``url``            ``UrlRecognizer``                        nothing
``person``         ``SpacyRecognizer`` (``PERSON``)         a spaCy NER model
``place``          ``SpacyRecognizer`` (``LOCATION``:       a spaCy NER model
                   spaCy's ``GPE`` and ``LOC``)
=================  =======================================  ==================================

The analyzer is built from a registry holding exactly these recognisers - never Presidio's
default registry, whose ``EmailRecognizer`` consults tldextract's public-suffix list (a
download on first use): e-mail addresses and tokens are found by crowdpref's own patterns
(:mod:`crowdpref.release.privacy`). Without an NER model the analyzer runs on Presidio's
``NoOpNlpEngine``, which loads no model, so nothing is downloaded and nothing asks the network.

The NER model (``publish.ner_model``): an installed spaCy package name or a folder written by
``nlp.to_disk``; unset, the first installed of :data:`NER_CANDIDATES`. None installed: names
and places are NOT looked for, and :attr:`Recognisers.warning` says so (the build logs it,
writes it into ``privacy.json`` and the card). A configured model that cannot be loaded is a
one-line :class:`CrowdprefError`, never a silent fallback. Presidio's own download of a missing
spaCy model is never reached: a model is handed to it only once it is found on this machine.

Presidio and spaCy are imported when :func:`load_recognisers` is first called (seconds), not
when this module is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crowdpref.errors import CrowdprefError, first_line

__all__ = ["KINDS", "NER_CANDIDATES", "NO_NER_WARNING", "Finding", "Kind", "Recognisers",
           "load_recognisers"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kind:
    """One kind of personal detail a recogniser finds."""

    name: str
    """Short id used in the review file, the card and artifacts (``phone``, ``person``...)."""
    label: str
    """What it is, in words, for the card."""
    entity: str
    """Presidio's entity name."""
    placeholder: str
    """What a masked value becomes."""
    needs_ner: bool = False


KINDS: tuple[Kind, ...] = (
    Kind("phone", "phone number", "PHONE_NUMBER", "[phone removed]"),
    Kind("payment-card", "payment card number", "CREDIT_CARD", "[card number removed]"),
    Kind("iban", "IBAN (bank account)", "IBAN_CODE", "[iban removed]"),
    Kind("ip-address", "IP address", "IP_ADDRESS", "[ip address removed]"),
    Kind("url", "web address (URL)", "URL", "[url removed]"),
    Kind("person", "name of a person", "PERSON", "[name removed]", needs_ner=True),
    Kind("place", "name of a place", "LOCATION", "[place removed]", needs_ner=True),
)
BY_ENTITY = {k.entity: k for k in KINDS}
BY_KIND = {k.name: k for k in KINDS}

NER_CANDIDATES = ("en_core_web_lg", "en_core_web_md", "en_core_web_sm")
"""spaCy's English pipelines with NER, best first: the first installed is used when
``publish.ner_model`` is unset."""

NO_NER_WARNING = (
    "NO NAME OR PLACE DETECTION: no spaCy model with named-entity recognition is installed "
    f"({', '.join(NER_CANDIDATES)} were looked for), so names of people and places in the "
    "answers were NOT looked for; install one (e.g. pip install en_core_web_sm's wheel) or set "
    "publish.ner_model to a spaCy pipeline folder, and build again")
"""Said in the log, ``privacy.json`` and the card when no NER model could be used."""

_NER_LABELS = {"PERSON", "PER", "GPE", "LOC", "LOCATION"}


@dataclass(frozen=True)
class Finding:
    """A personal detail found in a text: its kind and span (never the value)."""

    kind: str
    start: int
    end: int


@dataclass
class Recognisers:
    """The loaded analyzer, and what it can and cannot find."""

    analyzer: Any
    ner_model: str | None = None
    """The spaCy model names and places are found with; None: they are not looked for."""
    warning: str | None = None

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return tuple(k for k in KINDS if self.ner_model or not k.needs_ner)

    def find(self, text: str) -> list[Finding]:
        """Every finding in ``text``, in text order; where two overlap, the longer (then the
        more certain) one."""
        if not text or not text.strip():
            return []
        results = self.analyzer.analyze(text=text, language="en",
                                        entities=[k.entity for k in self.kinds])
        results = sorted(results, key=lambda r: (-(r.end - r.start), -r.score, r.start))
        kept: list[Finding] = []
        for r in results:
            kind = BY_ENTITY.get(r.entity_type)
            if kind is None or any(r.start < f.end and f.start < r.end for f in kept):
                continue
            kept.append(Finding(kind.name, r.start, r.end))
        return sorted(kept, key=lambda f: f.start)


def mask_findings(text: str, findings: Sequence[Finding]) -> str:
    """``text`` with every finding replaced by its kind's placeholder (findings must not
    overlap, as :meth:`Recognisers.find` returns them)."""
    out, last = [], 0
    for f in sorted(findings, key=lambda f: f.start):
        out += [text[last:f.start], BY_KIND[f.kind].placeholder]
        last = f.end
    out.append(text[last:])
    return "".join(out)


def _find_ner_model(configured: str | None) -> tuple[str | None, str | None]:
    """(what to load, how it is named) for the configured model or the first installed
    candidate; (None, None) when none is installed and none was configured."""
    import spacy

    if configured:
        if Path(configured).expanduser().is_dir():
            return str(Path(configured).expanduser()), configured
        if spacy.util.is_package(configured):
            return configured, configured
        raise CrowdprefError(
            f"publish.ner_model: {configured!r} is neither an installed spaCy package nor a "
            "folder: install the model (pip install its wheel), point it at a folder written by "
            "nlp.to_disk, or remove the setting")
    for name in NER_CANDIDATES:
        if spacy.util.is_package(name):
            return name, name
    return None, None


def load_recognisers(ner_model: str | None = None) -> Recognisers:
    """The analyzer with Presidio's pattern recognisers and, when a spaCy NER model is
    configured (``ner_model``) or installed, its names and places (see the module docstring)."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NerModelConfiguration, NoOpNlpEngine, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        SpacyRecognizer,
        UrlRecognizer,
    )

    recognisers: list[Any] = [PhoneRecognizer(), CreditCardRecognizer(), IbanRecognizer(),
                              IpRecognizer(), UrlRecognizer()]
    source, name = _find_ner_model(ner_model)
    warning = None
    if source is None:
        engine: Any = NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "none"}])
        warning = NO_NER_WARNING
        logger.warning(warning)
    else:
        engine = SpacyNlpEngine(
            models=[{"lang_code": "en", "model_name": source}],
            ner_model_configuration=NerModelConfiguration(
                labels_to_ignore=[], low_score_entity_names=[]))
        recognisers.append(SpacyRecognizer(supported_entities=["PERSON", "LOCATION"]))
    try:
        engine.load()
    except Exception as exc:  # noqa: BLE001 - any failure to load a model is one line
        detail = first_line(exc, 160)
        raise CrowdprefError(f"publish.ner_model: the spaCy model {name!r} cannot be loaded "
                             f"({type(exc).__name__}: {detail}): reinstall it or point "
                             "publish.ner_model at a working pipeline folder") from None
    if source is not None:
        labels = {label for pipe_labels in engine.nlp["en"].pipe_labels.values()
                  for label in pipe_labels}
        if not labels & _NER_LABELS:
            raise CrowdprefError(
                f"publish.ner_model: the spaCy model {name!r} labels no names or places (none of "
                f"{', '.join(sorted(_NER_LABELS))} in its pipes {engine.nlp['en'].pipe_names}): "
                "use a pipeline with named-entity recognition")
    registry = RecognizerRegistry(recognizers=recognisers, supported_languages=["en"])
    analyzer = AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"])
    return Recognisers(analyzer, ner_model=name, warning=warning)
