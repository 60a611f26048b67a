"""The Prolific contract: every request the fake Prolific receives and every reply it sends,
checked against Prolific's own published OpenAPI document (``prolific-openapi.yml`` beside this
module, package data; its provenance and quirks: ``prolific-openapi.md``) with openapi-core (the
``test`` extra: the tests import this module, the demo's fake only when openapi-core is
installed). No schema is written by hand here: the operations, parameters, bodies and replies
are the document's; this module only adapts a request / reply to the library and reads its
errors.

    contract = ProlificContract.load()          # cached: built once per process
    problems = contract.check_request("POST", "/api/v1/studies/", {}, headers, body_bytes)
    problems += contract.check_response("POST", "/api/v1/studies/", {}, headers, body_bytes,
                                        201, reply_headers, reply_bytes)

Policy (what is stricter than the bare document, and why):

- Undocumented fields are violations, in requests and replies alike (openapi-core's
  ``additional_properties_default_policy="forbid"``). The document leaves ``additionalProperties``
  unset, so a plain validator lets ``{"secret": ...}`` pass where the document names the field
  ``value``: a wrong field name would never be found. The fake must send only what the document
  describes, and the client may only send (and so only rely on receiving) documented fields.
- A status the operation does not declare is a violation, except the generic HTTP refusals the
  document never lists per operation (401, 403, 404, 429): their body must still be the
  operation's documented error shape (its ``400`` schema). Injected faults (test control: 503,
  429, cut connections) are not Prolific's answers and are not checked.
- An unknown route is a violation.

Adjustments to the loaded document (the file itself is never edited), each a known quirk:

1. ``oneOf`` lists that allow both ``integer`` and ``number`` (range filters' ``lower`` /
   ``upper``): a plain integer matches both branches, so a strict ``oneOf`` rejects the very
   values Prolific's docs show. Read as ``anyOf``. The request is never bent
   to fit.
2. ``POST /hooks/subscriptions/`` declares a ``SubscriptionList`` reply and no ``X-Hook-Secret``
   header, while Prolific's prose docs ("Monitoring study progress") say the reply carries the
   subscription's ``id`` and that header. Both shapes are accepted: the list, or one
   ``SubscriptionDetail`` with its ``id`` (and the header, declared optional).
3. ``ErrorDetail`` requires ``title`` but does not list it among its properties; under the
   forbid policy no error reply could ever pass, so ``title`` (a string) is added.
4. List replies (``results`` arrays) declare no pagination envelope, but Prolific's docs and
   notes describe ``_links.next.href`` (and ``meta``) beside ``results``; those two keys are
   allowed on any object with a ``results`` array. Nothing else is.
5. ``GET /participant-groups/`` takes a required ``filter`` object parameter (``workspace_id``
   or ``project_id``) in form style, exploded: on the wire each property is its own query
   parameter (``?workspace_id=...``). openapi-core reads an exploded form object only as one
   ``filter=k=v&...`` value and has no object type on a bare ``oneOf``: the parameter's schema
   gets ``type: object`` with its branches' properties, and :func:`_fold_object_params` gathers
   the wire's query parameters into that one value. The ``oneOf`` (exactly one of the two)
   is still the library's to check.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import yaml
from openapi_core import Config, OpenAPI
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.templating.responses.exceptions import ResponseNotFound
from openapi_core.testing import MockRequest, MockResponse
from openapi_core.validation.schemas import oas31_schema_validators_factory
from openapi_core.validation.schemas._validators import build_forbid_unspecified_additional_properties_validator
from openapi_core.validation.schemas.factories import DialectSchemaValidatorsFactory

SPEC = Path(__file__).resolve().parent / "prolific-openapi.yml"  # package data, beside this module
SERVER = "https://api.prolific.com"  # the document's server: paths are matched under it
GENERIC_REFUSALS = (401, 403, 404, 429)  # answered by any operation, listed by none


@dataclass(frozen=True)
class Violation:
    """One breach of the contract: which exchange, which side, and the validator's words."""

    method: str
    path: str
    side: str  # "request" or "response"
    message: str
    status: int | None = None

    def __str__(self) -> str:
        status = f" {self.status}" if self.status is not None else ""
        return f"{self.method} {self.path} {self.side}{status}: {self.message}"


def _errors_text(exc: BaseException) -> str:
    """The validator's message, with each schema error's location (``a.b: message``)."""
    details = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        for err in getattr(cur, "schema_errors", None) or []:
            where = ".".join(str(p) for p in getattr(err, "absolute_path", []) or [])
            message = getattr(err, "message", str(err))
            context = getattr(err, "context", None) or []
            if context:  # a oneOf / anyOf failure: say why each branch failed, briefly
                reasons = sorted({getattr(c, "message", str(c)) for c in context})[:4]
                message += f" ({'; '.join(reasons)})"
            details.append(f"{where}: {message}" if where else message)
        cur = cur.__cause__ or cur.__context__
    head = str(exc).split(": Value ", 1)[0] if details else str(exc)
    return f"{head}: {'; '.join(details)}" if details else head


# --- the adjusted document --------------------------------------------------------------------------------
def _resolve(spec: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _adjust(spec: dict[str, Any]) -> dict[str, Any]:
    """The document with the quirks of the module docstring handled (a copy)."""
    spec = copy.deepcopy(spec)
    schemas = spec["components"]["schemas"]
    # 1. oneOf [integer, ..., number]: a plain integer matches two branches -> anyOf (quirk 1)
    for node in list(_walk(spec)):
        branches = node.get("oneOf")
        if isinstance(branches, list):
            types = {(_resolve(spec, b) or {}).get("type") for b in branches if isinstance(b, dict)}
            if {"integer", "number"} <= types:
                node["anyOf"] = node.pop("oneOf")
    # 2. POST /hooks/subscriptions/: the documented list, or the prose's one subscription with its id
    created = spec["paths"]["/api/v1/hooks/subscriptions/"]["post"]["responses"]["201"]
    media = created["content"]["application/json"]
    media["schema"] = {"anyOf": [media["schema"], {"allOf": [{"$ref": "#/components/schemas/SubscriptionDetail"},
                                                             {"required": ["id"]}]}]}
    created.setdefault("headers", {})["X-Hook-Secret"] = {"required": False, "schema": {"type": "string"}}
    # 3. ErrorDetail requires a title it does not list among its properties
    detail = schemas["ErrorDetail"]
    if "title" in detail.get("required", []) and "title" not in detail.get("properties", {}):
        detail["properties"]["title"] = {"type": "string"}
    # 4. the pagination envelope beside any results array
    for node in list(_walk(spec)):
        props = node.get("properties")
        if isinstance(props, dict) and isinstance(_resolve(spec, props.get("results")), dict) \
                and _resolve(spec, props["results"]).get("type") == "array":
            props.setdefault("_links", {"type": "object", "additionalProperties": True})
            props.setdefault("meta", {"type": "object", "additionalProperties": True})
    # 5. object query parameters (form, exploded): give the schema its object type and properties
    for item in spec["paths"].values():
        for operation in item.values():
            for param in operation.get("parameters", []) if isinstance(operation, dict) else []:
                schema = _resolve(spec, param.get("schema"))
                if param.get("in") != "query" or not isinstance(schema, dict) or "type" in schema:
                    continue
                branches = [_resolve(spec, b) for b in schema.get("oneOf", []) + schema.get("anyOf", [])]
                if branches and all(isinstance(b, dict) and b.get("type") == "object" for b in branches):
                    schema["type"] = "object"
                    schema["properties"] = {k: v for b in branches for k, v in b.get("properties", {}).items()}
    return spec


def _object_params(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(method, path template) -> {object query parameter: its property names}."""
    found: dict[tuple[str, str], dict[str, list[str]]] = {}
    for template, item in spec["paths"].items():
        for method, operation in item.items():
            for param in operation.get("parameters", []) if isinstance(operation, dict) else []:
                schema = _resolve(spec, param.get("schema"))
                if param.get("in") == "query" and isinstance(schema, dict) and schema.get("type") == "object":
                    found.setdefault((method, template), {})[param["name"]] = list(schema.get("properties", {}))
    return found


_LOCK = threading.Lock()  # one validation at a time: the fake serves from several threads


class _ForbidUndocumented(DialectSchemaValidatorsFactory):
    """openapi-core's own "forbid" policy (undocumented properties are errors), with its extended
    jsonschema validator class built once per dialect: the library builds that class anew for
    every schema it checks, which was most of the time a check took (about 15 ms an exchange)."""

    def __init__(self) -> None:
        base = oas31_schema_validators_factory
        super().__init__(base.schema_validator_cls, base.default_jsonschema_dialect_id,
                         format_checker=base.format_checker)
        self._classes: dict[type, type] = {}

    def get_validator_cls(self, spec: Any, schema: Any) -> Any:
        base = super().get_validator_cls(spec, schema)
        if base not in self._classes:
            self._classes[base] = build_forbid_unspecified_additional_properties_validator(base)
        return self._classes[base]


class ProlificContract:
    """Prolific's published API as a validator of requests and replies."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = _adjust(spec)
        # the document itself has component names its meta-schema refuses: it is not checked;
        # undocumented properties are errors (the "forbid" policy, see _ForbidUndocumented)
        config = Config(spec_validator_cls=None, schema_validators_factory=_ForbidUndocumented())
        self.app = OpenAPI.from_dict(self.spec, config=config)
        self._object_params = _object_params(self.spec)

    @classmethod
    def load(cls, path: Path = SPEC) -> ProlificContract:
        """The contract of ``path``, built once per process (about half a second)."""
        return _load(str(path))

    # -- the library's view of an exchange -------------------------------------------------------------
    def _request(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                 body: bytes | None) -> MockRequest:
        query = self._fold_object_params(method, path, dict(query))
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "application/json")
        return MockRequest(SERVER, method, path, args=query, headers=dict(headers), data=body or None,
                           content_type=str(content_type).split(";", 1)[0].strip().lower() or "application/json")

    def _fold_object_params(self, method: str, path: str, query: dict[str, str]) -> dict[str, str]:
        """Quirk 5: gather an exploded form object's properties into the one value the library reads."""
        result = self._operation(method, path)
        if result is None:
            return query
        for name, props in self._object_params.get((method.lower(), result), {}).items():
            present = {k: query.pop(k) for k in props if k in query}
            if present and name not in query:
                query[name] = urlencode(present)
        return query

    @lru_cache(maxsize=512)
    def _operation(self, method: str, path: str) -> str | None:
        """The document's path template for ``method path`` (None when there is none)."""
        from openapi_core.templating.paths.finders import APICallPathFinder

        finder = APICallPathFinder(self.app.spec, base_url=None)
        try:
            found = finder.find(method.lower(), f"{SERVER}{path}")
        except (PathNotFound, OperationNotFound):
            return None
        return str(found.path.parts[-1])

    def known(self, method: str, path: str) -> bool:
        """Whether the document has an operation for ``method path``."""
        return self._operation(method, path) is not None

    def error_schema(self, method: str, path: str) -> str:
        """How the operation documents its refusals: ``"Error"`` (``{"error": {...}}``) or
        ``"ErrorDetail"`` (the detail object itself); ``"Error"`` for an unknown route."""
        template = self._operation(method, path)
        if template is None:
            return "Error"
        operation = self.spec["paths"][template][method.lower()]
        schema = (((operation.get("responses", {}).get("400") or {}).get("content") or {})
                  .get("application/json", {}).get("schema") or {})
        return str(schema.get("$ref", "#/Error")).rsplit("/", 1)[-1]

    # -- checks ----------------------------------------------------------------------------------------
    def check_request(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                      body: bytes | None) -> list[Violation]:
        request = self._request(method, path, query, headers, body)
        with _LOCK:
            errors = list(self.app.iter_request_errors(request))
        return [Violation(method, path, "request", _errors_text(e)) for e in errors]

    def check_response(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                       body: bytes | None, status: int, reply_headers: Mapping[str, str],
                       reply: bytes | str | Any) -> list[Violation]:
        if self._operation(method, path) is None:
            return []  # the unknown route is the request's violation already
        data = reply if isinstance(reply, bytes) else (reply.encode() if isinstance(reply, str)
                                                       else json.dumps(reply).encode())
        request = self._request(method, path, query, headers, body)
        response = MockResponse(data, status_code=status, headers=dict(reply_headers))
        with _LOCK:
            errors = list(self.app.iter_response_errors(request, response))
            if status in GENERIC_REFUSALS and errors and all(isinstance(e, ResponseNotFound) for e in errors):
                # a refusal no operation lists: its body must still be the documented error shape
                errors = list(self.app.iter_response_errors(
                    request, MockResponse(data, status_code=400, headers=dict(reply_headers))))
        return [Violation(method, path, "response", _errors_text(e), status) for e in errors]


@lru_cache(maxsize=4)
def _load(path: str) -> ProlificContract:
    with open(path, encoding="utf-8") as handle:
        spec = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return ProlificContract(spec)
