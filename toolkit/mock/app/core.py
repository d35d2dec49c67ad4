"""The handlers' shared ground: state, lookups, bodies, write checks and the token endpoint."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from toolkit import catalogue
from toolkit.catalogue import forms
from toolkit.mock.app.records import origin
from toolkit.mock.app.responses import (
    ARRAY_FORMS,
    BODY_TYPES,
    LIVE_ARRAYS,
    PATCH_TYPES,
    READABLE,
    TOKEN_BODY_LIMIT,
    Ctx,
    Handler,
    Problem4xx,
    TruncatedResponse,
    error,
    fhir,
    outcome_bytes,
)
from toolkit.mock.app.search import (
    depth_problem,
)
from toolkit.mock.shapes import (
    absolute_references,
    to_stored,
)
from toolkit.mock.state import MockState, TokenProblem
from toolkit.mock.store import Collection, Record
from toolkit.mock.validation import Problem, validate


class MockCore:
    """Handlers bound to one :class:`MockState`."""

    def __init__(self, state: MockState) -> None:
        self.state = state
        self.store = state.store
        self.role_index = {rid: i for i, rid in enumerate(state.data.roles)}
        self.names = forms.Names.of(self.store.names(forms.NAMED_TARGETS))
        """The names of the records a form names (a live Referral's ``referralDefinition``)."""

    # ------------------------------------------------------------------ guard
    def guarded(
        self, handler: Handler, *, counts_as_list: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        state = self.state

        async def endpoint(request: Request) -> Response:
            client = _authenticate(state, request)
            if isinstance(client, Response):
                return client
            bearer = request.headers.get("authorization", "")[7:].strip()
            remaining, headers, refusal = _admit(state, state.fault.rate_limit_key(client, bearer))
            if refusal is not None:
                return refusal
            fault = state.fault
            if fault.fails_request():
                response = error(503, "transient", "the service is briefly unavailable")
            elif fault.fails_path(request.method, request.url.path):
                response = error(500, "exception", "an internal error occurred")
            else:
                response = await _answer(handler, request, Ctx(client, remaining))
                if counts_as_list and response.status_code == 200 and fault.cuts_list():
                    response = TruncatedResponse(
                        response.body, headers=dict(response.headers), media_type=None
                    )
            response.headers.update(headers)
            return response

        return endpoint

    # ------------------------------------------------------------------ helpers
    def collection(self, rtype: str) -> Collection:
        if rtype not in READABLE or rtype not in self.store.collections:
            raise Problem4xx(404, "not-found", f"there is no resource type {rtype!r}")
        return self.store[rtype]

    def lookup(self, rtype: str, rid: str) -> tuple[Collection, int]:
        coll = self.collection(rtype)
        rid = self.state.fault.stored_id(rtype, rid)
        index = coll.pos.get(rid)
        if index is None:
            raise Problem4xx(404, "not-found", f"{rtype}/{rid} does not exist")
        return coll, index

    def raw(self, rtype: str, coll: Collection, index: int) -> bytes:
        """The served JSON of a stored record, as the active fault profile changes it."""
        fault = self.state.fault
        if rtype not in fault.touches:
            return coll.raw(index)
        rec = copy.deepcopy(coll.record(index))
        fault.break_record(rtype, index, rec)
        return orjson.dumps(rec)

    def respond(
        self,
        request: Request,
        content: bytes,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """A FHIR JSON response; a live deployment's references become absolute here."""
        if self.state.options.shapes == "live":
            content = absolute_references(content, origin(request))
        response = fhir(content, status, headers)
        media_type = response.headers["content-type"]
        served = self.state.fault.content_type(media_type)
        if served != media_type:
            response.headers["content-type"] = served
        return response

    async def read_body(self, request: Request, limit: int | None = None) -> bytes:
        limit = self.state.options.max_body_bytes if limit is None else limit
        declared = request.headers.get("content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise Problem4xx(400, "invalid", "Content-Length is not a number") from None
            if size > limit:
                raise Problem4xx(
                    413, "too-costly", f"the body ({size} bytes) is larger than {limit} bytes"
                )
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media and media not in BODY_TYPES and media not in PATCH_TYPES:
            raise Problem4xx(
                415,
                "not-supported",
                f"the body must be JSON (Content-Type application/json), not {media[:60]!r}",
            )
        body = bytearray()
        too_big = False
        try:
            async for chunk in request.stream():
                if too_big:
                    continue  # drain without keeping, so the client can read the answer
                body += chunk
                if len(body) > limit:
                    too_big = True
                    body = bytearray()
        except ClientDisconnect:
            # the connection went away (or the body timeout cut it): nothing to answer
            raise Problem4xx(400, "incomplete", "the request body was not sent in full") from None
        if too_big:
            raise Problem4xx(413, "too-costly", f"the body is larger than {limit} bytes")
        return bytes(body)

    async def json_object(self, request: Request) -> dict[str, Any]:
        body = await self.read_body(request)
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise Problem4xx(400, "structure", f"the body is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise Problem4xx(400, "structure", "the body must be a JSON object")
        problem = depth_problem(value, self.state.options.max_depth)
        if problem is not None:
            raise Problem4xx(400, "too-costly", problem)
        return value

    def location(self, request: Request, rtype: str, rid: str) -> str:
        return f"{origin(request)}/main/{rtype}/{rid}"

    def invalid(self, rtype: str, problems: list[Problem]) -> Problem4xx:
        summary = "; ".join(f"{p}: {m}" for p, m in problems[:5])
        return Problem4xx(422, "invariant", summary, issues=problems, resource=rtype)

    def check_write(self, rtype: str, record: dict[str, Any]) -> None:
        """Raise 422 listing every catalogue rule ``record`` (a whole spec-form record) breaks."""
        problems = validate(
            catalogue.RESOURCES[rtype],
            record,
            resolves=self.store.resolves,
            max_attachment_bytes=self.state.options.max_attachment_bytes,
            check_attachment_types=self.state.fault.checks_attachment_types,
            accept_arrays=ARRAY_FORMS,
        )
        spec_shapes = self.state.options.shapes == "spec"
        for name in sorted(LIVE_ARRAYS.get(rtype, ())) if spec_shapes else ():
            items = record.get(name)
            if isinstance(items, list) and len(items) > 1:
                message = f"this deployment serves the spec's single {name} object: send one {name}"
                problems.append((name, message))
        if problems:
            raise self.invalid(rtype, problems)

    def stored(self, rtype: str, record: Record) -> tuple[Record, bytes]:
        """The deployment's form of a checked record and its JSON, made before storing.

        Serialising first means a record that cannot be written out (orjson refuses
        nesting deeper than 254) is refused instead of poisoning every later read.
        """
        record = to_stored(rtype, record, self.state.options.shapes, self.names)
        try:
            return record, orjson.dumps(record)
        except orjson.JSONEncodeError as exc:
            raise Problem4xx(400, "too-costly", f"the record cannot be stored: {exc}") from None

    # ------------------------------------------------------------------ token
    async def token(self, request: Request) -> Response:
        state = self.state
        try:
            body = await self.read_body(request, TOKEN_BODY_LIMIT)
        except Problem4xx as problem:
            return error(problem.status, problem.code, problem.diagnostics)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return error(400, "structure", "the token request body must be JSON")
        if not isinstance(payload, dict):
            return error(400, "structure", "the token request body must be a JSON object")
        grant = payload.get("grant_type")
        client_id = payload.get("client_id")
        secret = payload.get("client_secret")
        if grant != "client_credentials":
            return error(400, "invalid", "grant_type must be 'client_credentials'")
        if not isinstance(client_id, str) or not isinstance(secret, str):
            return error(400, "invalid", "client_id and client_secret are required strings")
        if not state.check_credentials(client_id, secret):
            return error(401, "security", "unknown client_id or wrong client_secret")
        if state.fault.token_endpoint_fails():
            return error(503, "transient", "the token service is unavailable")
        token = state.issue_token(client_id)
        content = orjson.dumps(
            {"token_type": "Bearer", "expires_in": state.options.expires_in, "access_token": token}
        )
        return self.respond(request, content, 200, {"cache-control": "no-store"})


def _authenticate(state: MockState, request: Request) -> str | Response:
    """The OAuth client the bearer token belongs to, or the 401 refusing the call."""
    enforced = state.fault.enforces_auth
    auth = request.headers.get("authorization", "")
    client = None
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        try:
            client = state.client_for(auth[7:].strip())
        except TokenProblem as problem:
            if enforced:
                return error(
                    401,
                    problem.code,
                    str(problem),
                    {"www-authenticate": 'Bearer error="invalid_token"'},
                )
    if client is None:
        if enforced:
            return error(
                401,
                "login",
                "an Authorization: Bearer <access token> header is required",
                {"www-authenticate": "Bearer"},
            )
        client = "anonymous"
    return client


def _admit(state: MockState, client: str) -> tuple[int, dict[str, str], Response | None]:
    """The rate limit: requests left, the headers to send, and the 429 when none are left."""
    fault = state.fault
    allowed, remaining, retry = state.admit(client)
    limit = state.options.rate_limit
    headers: dict[str, str] = {}
    if fault.ratelimit_headers:
        limit_header, remaining_header = catalogue.RATE_LIMIT_HEADERS
        headers = {limit_header: str(limit), remaining_header: str(remaining)}
    if allowed:
        return remaining, headers, None
    if fault.retry_after:
        headers[catalogue.RETRY_AFTER_HEADER] = str(retry)
    window = catalogue.RATE_LIMIT_WINDOW_SECONDS
    text = f"more than {limit} requests in {window} seconds; retry in {retry} s"
    return remaining, headers, error(429, "throttled", text, headers)


async def _answer(handler: Handler, request: Request, ctx: Ctx) -> Response:
    """The handler's answer; a :class:`Problem4xx` it raises becomes its OperationOutcome."""
    try:
        return await handler(request, ctx)
    except Problem4xx as problem:
        return fhir(
            outcome_bytes(problem.code, problem.diagnostics, problem.issues, problem.resource),
            problem.status,
        )
