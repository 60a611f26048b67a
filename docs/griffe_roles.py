"""A griffe extension for the API reference: the library's docstrings are prose with Sphinx roles
(``:func:`load_study```, ``:data:`crowdpref.contracts.SOURCES```) and reStructuredText's ``::``
before a literal block, which Markdown would show literally. Each role becomes code; a dotted name also links to its page when that object is
documented (an optional cross-reference: no warning when it is not, e.g. a private helper).

It also unmarks what griffe-pydantic's static analysis takes for a model field but pydantic does
not: an attribute without an annotation (``_check = model_validator(...)(helper)``), which would
otherwise break its template. Its ``on_package`` hook runs before ``on_object``."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|data|class|mod|meth|attr|exc|obj|const):`(~?)([^`]+)`")


def _replace(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    shown = target.rsplit(".", 1)[-1] if tilde else target
    if target.startswith("crowdpref."):
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'
    return f"`{shown}`"


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_replace, obj.docstring.value).replace("::\n", ":\n")
        if obj.is_attribute and "pydantic-field" in obj.labels and obj.annotation is None:
            obj.labels.discard("pydantic-field")
