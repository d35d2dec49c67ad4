"""The mock's vocabulary of answers: media types, OperationOutcome errors, the request context."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from toolkit import catalogue
from toolkit.catalogue import forms
from toolkit.mock.validation import Problem

# The API's facts, from the catalogue (stated there once, with their sources).
FHIR_JSON = catalogue.FHIR_JSON
PATCH_TYPES = frozenset({catalogue.MERGE_PATCH_JSON, "application/json", FHIR_JSON})
BODY_TYPES = frozenset({"application/json", FHIR_JSON})
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]
ARRAY_FORMS = forms.ACCEPT_ARRAYS  # paths whose value may also come as an array (or one)
LIVE_ARRAYS = forms.LIVE_ARRAYS  # type -> fields of one value the live service serves as arrays
PATCHABLE = catalogue.PATCHABLE
CREATABLE = {  # type -> the id prefix the mock gives a created record
    rtype: (catalogue.RESOURCES[rtype].create_prefixes or ("",))[0]
    for rtype in catalogue.CREATE_PATHS
}
LISTED = frozenset(catalogue.LISTED_RESOURCES)
READABLE = frozenset(catalogue.RESOURCES)
EMPTY_405 = catalogue.PATCH_ANSWERS_EMPTY_405
DATE_SORT = {rtype: names for rtype, (names, _field) in catalogue.DATE_SEARCH.items()}
OWNER_PARAM = {rtype: param for rtype, (param, _field) in catalogue.OWNER_SEARCH.items()}


PREFIXES = ("eq", "ne", "gt", "ge", "lt", "le", "sa", "eb")


TOKEN_BODY_LIMIT = 64 * 1024


Handler = Callable[[Request, "Ctx"], Awaitable[Response]]


class Problem4xx(Exception):
    """Raised inside handlers; turned into an OperationOutcome response."""

    def __init__(
        self,
        status: int,
        code: str,
        diagnostics: str,
        *,
        issues: Sequence[Problem] = (),
        resource: str = "",
    ) -> None:
        self.status = status
        self.code = code
        self.diagnostics = diagnostics
        self.issues = issues
        self.resource = resource
        super().__init__(diagnostics)


def outcome_bytes(
    code: str, diagnostics: str, issues: Sequence[Problem] = (), resource: str = ""
) -> bytes:
    if issues:
        items = [
            {
                "severity": "error",
                "code": "required" if "required" in message else code,
                "diagnostics": f"{path}: {message}",
                "details": {"text": message},
                "expression": [f"{resource}.{path}" if resource else path],
            }
            for path, message in issues
        ]
    else:
        items = [
            {
                "severity": "error",
                "code": code,
                "diagnostics": diagnostics,
                "details": {"text": diagnostics},
            }
        ]
    return orjson.dumps({"resourceType": "OperationOutcome", "issue": items})


def fhir(content: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(content, status_code=status, headers=headers, media_type=FHIR_JSON)


def error(
    status: int, code: str, diagnostics: str, headers: dict[str, str] | None = None
) -> Response:
    return fhir(outcome_bytes(code, diagnostics), status, headers)


class TruncatedResponse(Response):
    """Announces the full length, sends about half the body, then drops the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytes(self.body)
        headers = [(k, v) for k, v in self.raw_headers if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": self.status_code, "headers": headers})
        await send(
            {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
        )


class Ctx:
    """Per-request facts the guard worked out: the client and the rate-limit numbers."""

    __slots__ = ("client", "remaining")

    def __init__(self, client: str, remaining: int) -> None:
        self.client = client
        self.remaining = remaining
