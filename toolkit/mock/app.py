"""The mock's ASGI application (Starlette): auth, rate limit, the 22 endpoints, test controls.

Request path of a resource call: User-Agent check (403) -> bearer token (401)
-> sliding-window rate limit (429) -> fault hooks -> handler. Every error is a
FHIR OperationOutcome; nothing answers with a traceback.
"""

from __future__ import annotations

import calendar
import copy
import datetime as dt
import math
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Sequence
from email.utils import formatdate
from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit import catalogue, rules
from toolkit.mock.data import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_START_HOUR,
    GRID_UNITS,
    SLOT_HORIZON_DAYS,
    DayGrid,
    iso,
    ref,
)
from toolkit.mock.faults import FAULT_PROFILES
from toolkit.mock.shapes import (
    STATUS_URL,
    absolute_references,
    extension_name,
    status_code,
    to_spec,
    to_stored,
)
from toolkit.mock.state import MockState, TokenProblem
from toolkit.mock.store import Collection, Record
from toolkit.mock.validation import Problem, validate

__all__ = ["create_app"]

FHIR_JSON = "application/fhir+json"
PATCH_TYPES = frozenset({"application/merge-patch+json", "application/json", FHIR_JSON})
BODY_TYPES = frozenset({"application/json", FHIR_JSON})
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]
NAME_ARRAYS = frozenset({"Practitioner.name"})
PATCHABLE = frozenset({"Referral", "Appointment", "Coverage"})
CREATABLE = {"Referral": "", "Coverage": "", "Organization": "SP-", "Practitioner": "EP-"}
LISTED = frozenset(catalogue.LISTED_RESOURCES)
READABLE = frozenset(name for name in catalogue.RESOURCES if name != "Slot")
EMPTY_405 = frozenset({"Practitioner", "PractitionerRole", "Organization"})
DATE_SORT = {
    "Appointment": ("date", "start"),
    "Referral": ("created",),
    "Coverage": ("period",),
    "InvoiceLine": ("enteredDate", "date"),
}
OWNER_PARAM = {
    "Appointment": "patient",
    "Referral": "subject",
    "Coverage": "beneficiary",
    "InvoiceLine": "subject",
}
PREFIXES = ("eq", "ne", "gt", "ge", "lt", "le")
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
        # returning without finishing makes the server close the connection mid-body


class Ctx:
    """Per-request facts the guard worked out: the client and the rate-limit numbers."""

    __slots__ = ("client", "remaining")

    def __init__(self, client: str, remaining: int) -> None:
        self.client = client
        self.remaining = remaining


# --------------------------------------------------------------------------- parsing helpers


_INSTANT = re.compile(
    r"(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{2})(?:-(?P<d>[0-9]{2})"
    r"(?:T(?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?)"
    r"(?P<tz>Z|[+-][0-9]{2}:[0-9]{2})?)?)?)?"
)


def _parse_instant(value: str) -> tuple[float, float]:
    """A FHIR date/date-time search value as a half-open [lo, hi) epoch range.

    Only FHIR's forms (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, ``YYYY-MM-DDThh:mm[:ss[.f]]``
    with ``Z``, an offset or nothing for UTC), years 0001 to 9999. The upper bound
    is computed in epoch seconds, so ``9999-12-31`` works instead of overflowing.
    """
    match = _INSTANT.fullmatch(value)
    if match is None or match["y"] == "0000":
        msg = f"{value[:60]!r} is not a FHIR date or date-time (YYYY-MM-DDThh:mm:ssZ)"
        raise Problem4xx(400, "invalid", msg)
    try:
        year = int(match["y"])
        if match["m"] is None:
            lo = dt.datetime(year, 1, 1, tzinfo=dt.UTC).timestamp()
            hi = lo + (366 if calendar.isleap(year) else 365) * 86_400
        elif match["d"] is None:
            month = int(match["m"])
            lo = dt.datetime(year, month, 1, tzinfo=dt.UTC).timestamp()
            hi = lo + calendar.monthrange(year, month)[1] * 86_400
        elif match["time"] is None:
            day = dt.date(year, int(match["m"]), int(match["d"]))
            lo = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()
            hi = lo + 86_400
        else:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            lo = moment.timestamp()
            hi = lo + 1
    except (ValueError, OverflowError, OSError):
        msg = f"{value[:60]!r} is not a real calendar date or time"
        raise Problem4xx(400, "invalid", msg) from None
    return lo, hi


def _date_predicate(param: str, raw: str) -> Callable[[float | None], bool]:
    prefix = raw[:2] if raw[:2] in PREFIXES else "eq"
    value = raw[2:] if raw[:2] in PREFIXES else raw
    if not value:
        raise Problem4xx(400, "invalid", f"{param}={raw!r} has no date")
    lo, hi = _parse_instant(value)
    tests: dict[str, Callable[[float], bool]] = {
        "eq": lambda x: lo <= x < hi,
        "ne": lambda x: not lo <= x < hi,
        "gt": lambda x: x >= hi,
        "ge": lambda x: x >= lo,
        "lt": lambda x: x < lo,
        "le": lambda x: x < hi,
    }
    test = tests[prefix]
    return lambda x: x is not None and test(x)


def _last_segment(value: str) -> str:
    return value.rstrip("/").rsplit("/", 1)[-1]


def _depth_problem(value: Any, limit: int) -> str | None:
    """Why ``value`` nests deeper than ``limit`` arrays/objects, or None (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return f"the body nests deeper than {limit} levels of objects and arrays"
        stack.extend((child, depth + 1) for child in children)
    return None


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _int_param(name: str, raw: str, lo: int, hi: int | None) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise Problem4xx(400, "invalid", f"{name} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        limit = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise Problem4xx(400, "invalid", f"{name} must be {limit}, got {value}")
    return value


def _names_of(record: Record, resource: str, part: str) -> list[str]:
    if resource == "Organization":
        return [record.get("name", "")] if part == "name" else []
    out: list[str] = []
    for name in record.get("name") or []:
        if part in ("name", "family") and name.get("family"):
            out.append(name["family"])
        if part in ("name", "given"):
            out.extend(name.get("given") or [])
        if part == "name" and name.get("text"):
            out.append(name["text"])
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value; ``target`` is not changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _actor_key(entry: Any) -> str | None:
    actor = entry.get("actor") if isinstance(entry, dict) else None
    text = actor.get("reference") if isinstance(actor, dict) else None
    return text if isinstance(text, str) and text else None


def _merge_extensions(current: Any, patch: list[Any]) -> list[Any]:
    """Extension arrays inside a participant merge by (bare) url; null removes one."""
    result = [copy.deepcopy(x) for x in current] if isinstance(current, list) else []
    for item in patch:
        url = item.get("url") if isinstance(item, dict) else None
        found = next(
            (n for n, x in enumerate(result) if isinstance(x, dict) and x.get("url") == url), None
        )
        if url is None or found is None:
            result.append(copy.deepcopy(item))
        else:
            result[found] = copy.deepcopy(item)
    return result


def merge_participants(current: Any, patch: list[Any]) -> tuple[list[Any], list[Problem]]:
    """Merge a PATCH's ``participant`` entries into the current ones BY ACTOR.

    The live service does this (facts, "Cancelling a patient's attendance"): a patch
    with only the patient's participant changes that participant and keeps the
    practitioner's. RFC 7386 would replace the whole array; this is the one place the
    mock departs from it. Inside a matched entry, members merge as RFC 7386 and the
    ``extension``/``modifierExtension`` arrays merge by url. An entry with an actor
    that matches none is added. Every patch entry needs an actor.
    """
    result = [copy.deepcopy(p) for p in current] if isinstance(current, list) else []
    problems: list[Problem] = []
    for n, entry in enumerate(patch):
        key = _actor_key(entry)
        if not isinstance(entry, dict) or key is None:
            message = "is required in a PATCH: participants are merged by their actor"
            problems.append((f"participant[{n}].actor.reference", message))
            continue
        found = next((i for i, p in enumerate(result) if _actor_key(p) == key), None)
        if found is None:
            result.append(merge_patch({}, entry))
            continue
        merged = merge_patch(result[found], {k: v for k, v in entry.items() if "xtension" not in k})
        for container in ("extension", "modifierExtension"):
            if container not in entry:
                continue
            value = entry[container]
            if value is None:
                merged.pop(container, None)
            elif isinstance(value, list):
                merged[container] = _merge_extensions(merged.get(container), value)
            else:
                merged[container] = copy.deepcopy(value)  # the rules report the wrong type
        result[found] = merged
    return result, problems


def _owner_of(resource: str, record: Record) -> str | None:
    if resource == "Appointment":
        for part in record.get("participant") or []:
            text = _actor_key(part) or ""
            if "/Patient/" in text:  # the reference names the type; `type` is optional
                return _last_segment(text)
        return None
    key = {"Referral": "subject", "Coverage": "beneficiary", "InvoiceLine": "subject"}.get(resource)
    target = record.get(key) if key else None
    if isinstance(target, dict) and isinstance(target.get("reference"), str):
        return _last_segment(target["reference"])
    return None


def _date_of(resource: str, record: Record) -> float | None:
    value: Any = None
    if resource == "Appointment":
        value = record.get("start")
    elif resource == "Referral":
        value = record.get("created")
    elif resource == "Coverage":
        value = (record.get("period") or {}).get("start")
    elif resource == "InvoiceLine":
        value = record.get("enteredDate")
    if not isinstance(value, str):
        return None
    try:
        return _parse_instant(value)[0]
    except Problem4xx:
        return None


def _participant_status(part: dict[str, Any]) -> str | None:
    for ext in part.get("modifierExtension") or []:
        if isinstance(ext, dict) and extension_name(str(ext.get("url", ""))) == STATUS_URL:
            return status_code(ext)
    return None


def _appointment_slot(record: Record) -> tuple[str | None, int, int, bool]:
    """(role id, start epoch, minutes, cancelled) of an appointment record (any shape).

    The appointment holds its slot unless the practitioner's participant is
    cancelled or every patient participant is (so cancelling one patient of a
    group appointment keeps the slot, and cancelling the only patient frees it).
    """
    role = None
    patients: list[bool] = []
    practitioner_cancelled = False
    for part in record.get("participant") or []:
        text = _actor_key(part) or ""
        parts = text.split("/")
        kind = parts[-2] if len(parts) >= 2 else ""
        cancelled = _participant_status(part) in ("cancelled", "cancelled (no charge)")
        if kind == "PractitionerRole":
            role = parts[-1]
            practitioner_cancelled = practitioner_cancelled or cancelled
        elif kind == "Patient":
            patients.append(cancelled)
    try:
        start = int(_parse_instant(record["start"])[0])
        end = int(_parse_instant(record["end"])[0])
    except (KeyError, Problem4xx, TypeError):
        return role, 0, 0, True
    freed = practitioner_cancelled or (bool(patients) and all(patients))
    return role, start, max(0, (end - start) // 60), freed


# --------------------------------------------------------------------------- the app


class MockApp:
    """Handlers bound to one :class:`MockState`."""

    def __init__(self, state: MockState) -> None:
        self.state = state
        self.store = state.store
        self.role_index = {rid: i for i, rid in enumerate(state.data.roles)}

    # ------------------------------------------------------------------ guard
    def guarded(
        self, handler: Handler, *, counts_as_list: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        state = self.state

        async def endpoint(request: Request) -> Response:
            fault = state.fault
            auth = request.headers.get("authorization", "")
            client = None
            if auth[:7].lower() == "bearer " and auth[7:].strip():
                try:
                    client = state.client_for(auth[7:].strip())
                except TokenProblem as problem:
                    if fault != "auth-not-enforced":
                        return error(
                            401,
                            problem.code,
                            str(problem),
                            {"www-authenticate": 'Bearer error="invalid_token"'},
                        )
            if client is None:
                if fault != "auth-not-enforced":
                    return error(
                        401,
                        "login",
                        "an Authorization: Bearer <access token> header is required",
                        {"www-authenticate": "Bearer"},
                    )
                client = "anonymous"
            allowed, remaining, retry = state.admit(client)
            limit = state.options.rate_limit
            headers: dict[str, str] = {}
            if fault != "no-ratelimit-headers":
                headers = {"x-ratelimit-limit": str(limit), "x-ratelimit-remaining": str(remaining)}
            if not allowed:
                if fault != "no-retry-after":
                    headers["retry-after"] = str(retry)
                return error(
                    429,
                    "throttled",
                    f"more than {limit} requests in 60 seconds; retry in {retry} s",
                    headers,
                )
            if fault == "flaky-503" and state.tick("flaky", 4):
                response = error(503, "transient", "the service is briefly unavailable")
            else:
                try:
                    response = await handler(request, Ctx(client, remaining))
                except Problem4xx as problem:
                    response = fhir(
                        outcome_bytes(
                            problem.code, problem.diagnostics, problem.issues, problem.resource
                        ),
                        problem.status,
                    )
                if (
                    counts_as_list
                    and fault == "drop-connections"
                    and response.status_code == 200
                    and state.tick("drop", 5)
                ):
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
        if self.state.fault == "wrong-id-prefix" and rtype == "Practitioner":
            rid = "PR-" + rid[3:] if rid.startswith("XP-") else rid
        index = coll.pos.get(rid)
        if index is None:
            raise Problem4xx(404, "not-found", f"{rtype}/{rid} does not exist")
        return coll, index

    def raw(self, rtype: str, coll: Collection, index: int) -> bytes:
        fault = self.state.fault
        if fault is None or not self._touches(fault, rtype):
            return coll.raw(index)
        rec = copy.deepcopy(coll.record(index))
        self._break(fault, rtype, index, rec)
        return orjson.dumps(rec)

    @staticmethod
    def _touches(fault: str, rtype: str) -> bool:
        return (
            (fault == "wrong-id-prefix" and rtype == "Practitioner")
            or (fault in ("enum-outside-spec", "bad-reference") and rtype == "Referral")
            or (fault in ("bad-phone", "bad-country") and rtype == "Organization")
            or (fault == "missing-required" and rtype == "Appointment")
        )

    @staticmethod
    def _break(fault: str, rtype: str, index: int, rec: Record) -> None:
        if fault == "wrong-id-prefix" and rec["id"].startswith("PR-"):
            rec["id"] = "XP-" + rec["id"][3:]
        elif fault == "enum-outside-spec" and index % 3 == 0:
            rec["allocationType"] = "Everything"
        elif fault == "bad-reference" and "performer" in rec:
            ep = _last_segment(rec.get("requester", {}).get("reference", "EP-7001"))
            rec["performer"] = ref("Practitioner", ep)
        elif fault == "bad-phone":
            for t in rec.get("telecom") or []:
                v = t.get("value", "")
                if t.get("system") in ("phone", "fax") and v.startswith("+61") and len(v) == 12:
                    t["value"] = f"{v[:3]} {v[3]} {v[4:8]} {v[8:]}"
        elif fault == "bad-country":
            for a in rec.get("address") or []:
                a["country"] = "Australia"
        elif fault == "missing-required" and index % 4 == 1:
            rec.pop("end", None)

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
        if self.state.fault == "wrong-content-type":
            response.headers["content-type"] = "application/json"
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
        problem = _depth_problem(value, self.state.options.max_depth)
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
            check_attachment_types=self.state.fault != "attachment-type-unchecked",
            accept_arrays=NAME_ARRAYS,
        )
        if rtype == "Practitioner" and self.state.options.shapes == "spec":
            names = record.get("name")
            if isinstance(names, list) and len(names) > 1:
                message = "this deployment serves the spec's single name object: send one name"
                problems.append(("name", message))
        if problems:
            raise self.invalid(rtype, problems)

    def stored(self, rtype: str, record: Record) -> tuple[Record, bytes]:
        """The deployment's form of a checked record and its JSON, made before storing.

        Serialising first means a record that cannot be written out (orjson refuses
        nesting deeper than 254) is refused instead of poisoning every later read.
        """
        record = to_stored(rtype, record, self.state.options.shapes)
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
        token = state.issue_token(client_id)
        content = orjson.dumps(
            {"token_type": "Bearer", "expires_in": state.options.expires_in, "access_token": token}
        )
        return self.respond(request, content, 200, {"cache-control": "no-store"})

    # ------------------------------------------------------------------ list
    def select(self, rtype: str, coll: Collection, params: list[tuple[str, str]]) -> Sequence[int]:
        indices: Sequence[int] = coll.order()
        filters: list[Callable[[int], bool]] = []
        sort_spec: str | None = None
        allowed = catalogue.SEARCH_PARAMETERS.get(rtype, ())
        for key, value in params:
            name, _, modifier = key.partition(":")
            if name == "_id":
                wanted = {v.strip() for v in value.split(",") if v.strip()}
                if rtype == "Practitioner" and self.state.fault == "wrong-id-prefix":
                    wanted = {"PR-" + w[3:] if w.startswith("XP-") else w for w in wanted}
                filters.append(lambda i, w=wanted: coll.ids[i] in w)  # type: ignore[misc]
            elif name == "_lastUpdated":
                test = _date_predicate(name, value)
                filters.append(lambda i, t=test: t(coll.updated[i]))  # type: ignore[misc]
            elif name == "_sort":
                sort_spec = value
            elif name not in allowed:
                continue  # FHIR servers ignore search parameters they do not support
            elif name == "date":
                test = _date_predicate(name, value)
                filters.append(lambda i, t=test: t(coll.date[i]))  # type: ignore[misc]
            elif name == OWNER_PARAM.get(rtype):
                owners = {_last_segment(v.strip()) for v in value.split(",") if v.strip()}
                filters.append(lambda i, o=owners: coll.owner[i] in o)  # type: ignore[misc]
            elif name in ("name", "family", "given"):
                needle = _fold(value)
                mode = modifier or "starts"

                def match(
                    i: int,
                    part: str = name,
                    needle: str = needle,
                    mode: str = mode,
                    exact: str = value,
                ) -> bool:
                    for text in _names_of(coll.record(i), rtype, part):
                        folded = _fold(text)
                        if mode == "exact" and text == exact:
                            return True
                        if mode == "contains" and needle in folded:
                            return True
                        if mode not in ("exact", "contains") and any(
                            w.startswith(needle) for w in (folded, *folded.split())
                        ):
                            return True
                    return False

                filters.append(match)
        if filters:
            indices = [i for i in indices if all(f(i) for f in filters)]
        if sort_spec:
            indices = self.sort(rtype, coll, indices, sort_spec)
        return indices

    def sort(self, rtype: str, coll: Collection, indices: Sequence[int], spec: str) -> list[int]:
        keys = [k.strip() for k in spec.split(",") if k.strip()]
        result = list(indices)
        for key in reversed(keys):
            desc = key.startswith("-")
            name = key.lstrip("-")
            if name in ("id", "_id"):
                result.sort(key=lambda i: (len(coll.ids[i]), coll.ids[i]), reverse=desc)
            elif name == "_lastUpdated":
                result.sort(key=coll.updated.__getitem__, reverse=desc)
            elif name in DATE_SORT.get(rtype, ()):
                missing = -math.inf if desc else math.inf
                result.sort(
                    key=lambda i: d if (d := coll.date[i]) is not None else missing, reverse=desc
                )
            else:
                known = ", ".join(("id", "_lastUpdated", *DATE_SORT.get(rtype, ())))
                raise Problem4xx(
                    400, "not-supported", f"cannot sort {rtype} by {name!r}; use {known}"
                )
        return result

    def page_params(self, params: list[tuple[str, str]]) -> tuple[int, int, str]:
        count = catalogue.DEFAULT_PAGE_SIZE
        page = 1
        total_mode = "accurate"
        for key, value in params:
            if key == "_count":
                count = _int_param("_count", value, 1, catalogue.MAX_PAGE_SIZE)
            elif key == "page":
                page = _int_param("page", value, 1, None)
            elif key == "_total":
                if value not in ("none", "estimate", "accurate"):
                    raise Problem4xx(400, "invalid", "_total must be none, estimate or accurate")
                total_mode = value
        return count, page, total_mode

    def bundle(
        self,
        request: Request,
        params: list[tuple[str, str]],
        total: int,
        entries: Iterable[bytes],
        count: int,
        page: int,
        total_mode: str,
    ) -> bytes:
        fault = self.state.fault
        path = request.url.path
        base = origin(request)
        kept = [(k, v) for k, v in params if k != "page"]

        def link(n: int, absolute: bool = True) -> str:
            query = urlencode([*kept, ("page", str(n))])
            return f"{base if absolute else ''}{path}?{query}"

        last = max(1, math.ceil(total / count))
        self_link = f"{base}{path}" + (f"?{request.url.query}" if request.url.query else "")
        links: list[dict[str, str]] = [{"relation": "self", "url": self_link}]
        absolute = fault != "relative-next-links"
        if fault == "paging-loop" and page == 2:
            links.append({"relation": "next", "url": link(1, absolute)})
        elif page < last:
            links.append({"relation": "next", "url": link(page + 1, absolute)})
        links.append({"relation": "last", "url": link(last, absolute)})
        shown_total = total + 5 if fault == "total-mismatch" else total
        head = b'{"resourceType":"Bundle","type":"searchset"'
        if total_mode != "none":
            head += b',"total":%d' % shown_total
        parts = [b'{"resource":' + e + b"}" for e in entries]
        return head + b',"link":' + orjson.dumps(links) + b',"entry":[' + b",".join(parts) + b"]}"

    async def list_(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        if rtype not in LISTED:
            raise Problem4xx(404, "not-supported", f"{rtype} has no list endpoint")
        coll = self.collection(rtype)
        params = request.query_params.multi_items()
        count, page, total_mode = self.page_params(params)
        summary_count = ("_summary", "count") in params
        indices = self.select(rtype, coll, params)
        start = (page - 1) * count
        chosen = [] if summary_count else indices[start : start + count]
        entries = [self.raw(rtype, coll, i) for i in chosen]
        content = self.bundle(request, params, len(indices), entries, count, page, total_mode)
        # armed touches fire after this page was built: the next page sees them
        self.state.list_served(rtype)
        return self.respond(request, content)

    # ------------------------------------------------------------------ read, create, patch
    async def read(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        coll, index = self.lookup(rtype, request.path_params["rid"])
        return self.respond(request, self.raw(rtype, coll, index))

    async def create(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        self.collection(rtype)
        if rtype not in CREATABLE:
            hint = " (book it with POST /main/Appointment/$book)" if rtype == "Appointment" else ""
            raise Problem4xx(405, "not-supported", f"{rtype} cannot be created{hint}")
        body = to_spec(await self.json_object(request))
        self.check_write(rtype, body)
        with self.state.lock:
            now = self.state.now()
            rid = self._next_id(rtype)
            record, content = self.stored(rtype, self._stored(rtype, rid, body, now))
            coll = self.store[rtype]
            index = coll.add(
                rid,
                record,
                updated=now,
                date=_date_of(rtype, record),
                owner=_owner_of(rtype, record),
            )
            coll.prime(index, content)
            if rtype == "Practitioner":
                self._add_external_role(rid, now)
            self.state.announce(rtype, rid, "create")
        headers = {"location": self.location(request, rtype, rid)}
        return self.respond(request, content, 201, headers)

    def _next_id(self, rtype: str) -> str:
        prefix = CREATABLE.get(rtype, "")
        counter_key = prefix or rtype
        n = self.state.data.next_ids[counter_key]
        self.state.data.next_ids[counter_key] = n + 1
        return f"{prefix}{n}"

    @staticmethod
    def _stored(rtype: str, rid: str, body: dict[str, Any], now: float) -> Record:
        record: Record = {"resourceType": rtype, "id": rid, "meta": {"lastUpdated": iso(now)}}
        for key, value in body.items():
            if key not in ("resourceType", "id", "meta", "attachments"):
                record[key] = value
        return record

    def _add_external_role(self, rid: str, now: float) -> None:
        roles = self.store["PractitionerRole"]
        roles.add(
            rid,
            {
                "resourceType": "PractitionerRole",
                "id": rid,
                "meta": {"lastUpdated": iso(now)},
                "active": True,
                "practitioner": ref("Practitioner", rid),
            },
            updated=now,
        )

    async def patch(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        coll, index = self.lookup(rtype, request.path_params["rid"])
        if rtype in EMPTY_405:
            return Response(b"", status_code=405, headers={"allow": "GET"})
        if rtype not in PATCHABLE:
            raise Problem4xx(405, "not-supported", f"{rtype} does not accept PATCH")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media not in PATCH_TYPES:
            raise Problem4xx(
                415,
                "not-supported",
                "PATCH bodies are JSON merge patches: Content-Type application/merge-patch+json",
            )
        patch = to_spec(await self.json_object(request))
        for key in ("id", "resourceType"):
            if key in patch and patch[key] != coll.record(index).get(key):
                raise self.invalid(rtype, [(key, "cannot be changed")])
        patch.pop("meta", None)
        with self.state.lock:
            current = coll.record(index)
            spec_current = to_spec(current)
            participants = patch.pop("participant", None) if rtype == "Appointment" else None
            merged = merge_patch(spec_current, patch)
            if isinstance(participants, list):
                merged["participant"], problems = merge_participants(
                    spec_current.get("participant"), participants
                )
                if problems:
                    raise self.invalid(rtype, problems)
            elif participants is not None:
                merged["participant"] = participants  # not an array: the rules say so
            self.check_write(rtype, merged)
            merged.pop("attachments", None)
            now = self.state.now()
            merged["meta"] = {**(merged.get("meta") or {}), "lastUpdated": iso(now)}
            record, content = self.stored(rtype, merged)
            if rtype == "Appointment":
                self._move_slot(current, record)
            coll.replace(
                index,
                record,
                updated=now,
                date=_date_of(rtype, record),
                owner=_owner_of(rtype, record),
            )
            coll.prime(index, content)
            coll.move_to_end(index)
            self.state.announce(rtype, coll.ids[index], "update")
        return self.respond(request, content)

    def _move_slot(self, old: Record, new: Record) -> None:
        grid = self.state.data.grid
        for record, take in ((old, False), (new, True)):
            role, start, minutes, cancelled = _appointment_slot(record)
            r = self.role_index.get(role or "")
            if r is None or cancelled or not minutes:
                continue
            if take:
                grid.take(r, start, minutes)
            else:
                grid.release(r, start, minutes)

    # ------------------------------------------------------------------ $find
    async def find(self, request: Request, ctx: Ctx) -> Response:
        params = request.query_params.multi_items()
        q: dict[str, list[str]] = {}
        for k, v in params:
            q.setdefault(k, []).append(v)
        missing = [n for n in ("start", "end", "duration") if not q.get(n)]
        if missing:
            raise Problem4xx(400, "required", f"$find needs {', '.join(missing)}")
        lo = _parse_instant(q["start"][0])[0]
        hi = _parse_instant(q["end"][0])[0]
        if hi <= lo:
            raise Problem4xx(400, "invalid", "end must be after start")
        duration = _int_param("duration", q["duration"][0], 1, GRID_UNITS * GRID_MINUTES)
        count, page, total_mode = self.page_params(params)
        data = self.state.data
        roles = list(range(len(data.roles)))
        practitioners = self.store["Practitioner"]
        roles = [r for r in roles if practitioners.record(r).get("active", True)]
        for name in ("practitioner-role", "practitioner"):
            if q.get(name):
                wanted = {_last_segment(x) for v in q[name] for x in v.split(",")}
                roles = [r for r in roles if data.roles[r] in wanted]
        if q.get("organization"):
            orgs = {_last_segment(x) for v in q["organization"] for x in v.split(",")}
            if not any(o.startswith("PG-") for o in orgs):
                roles = [r for r in roles if data.role_clinic[r] in orgs]
        first_only = q.get("show", [""])[0] == "first-available"
        descending = q.get("_sort", ["start"])[0] == "-start"
        proposals = self._free_slots(roles, int(lo), int(hi), duration, first_only)
        proposals.sort(key=lambda p: (p[1], p[0]), reverse=descending)
        start = (page - 1) * count
        entries = [self._proposal(r, s, duration) for r, s in proposals[start : start + count]]
        content = self.bundle(request, params, len(proposals), entries, count, page, total_mode)
        return self.respond(request, content)

    def _free_slots(
        self, roles: list[int], lo: int, hi: int, duration: int, first_only: bool
    ) -> list[tuple[int, int]]:
        grid = self.state.data.grid
        unit = GRID_MINUTES * 60
        first_day = max(lo - lo % DAY, ANCHOR)
        last_day = min(hi, ANCHOR + SLOT_HORIZON_DAYS * DAY)
        days = [d for d in range(first_day, last_day, DAY) if time.gmtime(d).tm_wday < 5]
        out: list[tuple[int, int]] = []
        for r in roles:
            for day in days:
                found = False
                for u in range(GRID_UNITS):
                    start = day + GRID_START_HOUR * 3600 + u * unit
                    if start < lo or start + duration * 60 > hi:
                        continue
                    if not DayGrid.on_grid(start, duration):
                        continue
                    if grid.is_free(r, start, duration):
                        out.append((r, start))
                        if first_only:
                            found = True
                            break
                if found:
                    break
        return out

    def _proposal(self, r: int, start: int, duration: int) -> bytes:
        data = self.state.data
        return orjson.dumps(
            {
                "resourceType": "Appointment",
                "id": f"proposed-{start}-{duration}",
                "start": iso(start),
                "end": iso(start + duration * 60),
                "minutesDuration": duration,
                "supportingInformation": [ref("HealthcareService", data.role_service[r])],
                "participant": [
                    {
                        "type": [{"coding": [{"code": "ATND", "display": "attender"}]}],
                        "actor": ref("PractitionerRole", data.roles[r]),
                    }
                ],
            }
        )

    # ------------------------------------------------------------------ $book
    async def book(self, request: Request, ctx: Ctx) -> Response:
        body = await self.json_object(request)
        if body.get("resourceType") != "Parameters" or not isinstance(body.get("parameter"), list):
            raise Problem4xx(
                400, "structure", "$book takes a Parameters resource with a parameter array"
            )
        params: dict[str, dict[str, Any]] = {}
        for n, item in enumerate(body["parameter"]):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise Problem4xx(400, "structure", f"parameter[{n}] needs a name")
            params[item["name"]] = item
        patient_ref = self._param_ref(params, "patient-id", "Patient")
        if "appt-id" in params:
            return await self._join_group(request, params, patient_ref)
        appt = (params.get("appt-resource") or {}).get("resource")
        if not isinstance(appt, dict):
            raise Problem4xx(400, "required", "$book needs appt-resource (or appt-id)")
        appt = to_spec(appt)
        self.check_write("Appointment", appt)
        role_id = None
        for part in appt.get("participant") or []:
            actor = part.get("actor") or {}
            if str(actor.get("reference", "")).startswith("/main/PractitionerRole/"):
                role_id = _last_segment(actor["reference"])
        r = self.role_index.get(role_id or "")
        if r is None:
            raise self.invalid(
                "Appointment",
                [("participant", "needs a PractitionerRole/PR-... actor of the practice group")],
            )
        start = int(_parse_instant(appt["start"])[0])
        end = int(_parse_instant(appt["end"])[0])
        minutes = (end - start) // 60
        if end <= start:
            raise self.invalid("Appointment", [("end", "must be after start")])
        if "minutesDuration" in appt and appt["minutesDuration"] != minutes:
            raise self.invalid(
                "Appointment", [("minutesDuration", f"does not match start/end ({minutes})")]
            )
        status = (
            self._param_code(params, "status", catalogue.PARTICIPANT_STATUSES, "booked") or "booked"
        )
        location = self._param_code(params, "location-type", catalogue.LOCATION_TYPES, None)
        service = self._param_ref(params, "healthcare-service-id", "HealthcareService", False)
        grid = self.state.data.grid
        with self.state.lock:
            if not DayGrid.on_grid(start, minutes):
                raise Problem4xx(
                    409,
                    "conflict",
                    "no slot of that practitioner role starts at that time for that length",
                )
            if not grid.is_free(r, start, minutes) and self.state.fault != "double-booking":
                raise Problem4xx(409, "conflict", "that slot is already booked")
            now = self.state.now()
            rid = self._next_id("Appointment")
            record: Record = {
                "resourceType": "Appointment",
                "id": rid,
                "meta": {"lastUpdated": iso(now)},
            }
            if location is not None:
                record["extension"] = [{"url": "location-type", "valueCode": location}]
            if appt.get("description"):
                record["description"] = appt["description"]
            record.update(
                {
                    "start": iso(start),
                    "end": iso(end),
                    "minutesDuration": minutes,
                    "created": iso(now),
                    "supportingInformation": [
                        service or ref("HealthcareService", self.state.data.role_service[r])
                    ],
                    "participant": [
                        {
                            "type": [{"coding": [{"code": "ATND", "display": "attender"}]}],
                            "actor": ref("PractitionerRole", self.state.data.roles[r]),
                            "modifierExtension": [_status_ext("booked")],
                        },
                        {
                            "actor": patient_ref,
                            "modifierExtension": [_status_ext(status)],
                        },
                    ],
                }
            )
            record, content = self.stored("Appointment", record)
            if status != "cancelled":
                grid.take(r, start, minutes)
            coll = self.store["Appointment"]
            index = coll.add(
                rid,
                record,
                updated=now,
                date=float(start),
                owner=_last_segment(patient_ref["reference"]),
            )
            coll.prime(index, content)
            self.state.announce("Appointment", rid, "create")
        headers = {"location": self.location(request, "Appointment", rid)}
        return self.respond(request, content, 201, headers)

    async def _join_group(
        self, request: Request, params: dict[str, dict[str, Any]], patient: dict[str, str]
    ) -> Response:
        target = self._param_ref(params, "appt-id", "Appointment")
        coll, index = self.lookup("Appointment", _last_segment(target["reference"]))
        with self.state.lock:
            merged = to_spec(coll.record(index))
            present = any(
                _actor_key(p) == patient["reference"] for p in merged.get("participant") or []
            )
            if not present:
                merged.setdefault("participant", []).append(
                    {"actor": patient, "modifierExtension": [_status_ext("booked")]}
                )
            now = self.state.now()
            merged["meta"] = {"lastUpdated": iso(now)}
            record, content = self.stored("Appointment", merged)
            coll.replace(index, record, updated=now, date=coll.date[index], owner=coll.owner[index])
            coll.prime(index, content)
            coll.move_to_end(index)
            self.state.announce("Appointment", coll.ids[index], "update")
        return self.respond(request, content, 200)

    def _param_ref(
        self, params: dict[str, dict[str, Any]], name: str, rtype: str, required: bool = True
    ) -> dict[str, str]:
        item = params.get(name)
        if item is None:
            if required:
                raise Problem4xx(400, "required", f"$book needs the {name} parameter")
            return {}
        value = to_spec(item.get("valueReference"))
        field = catalogue.Field(name, "reference", ref=catalogue.Ref((catalogue.Target(rtype),)))
        options = rules.Options(resolves=self.store.resolves)
        path = f"parameter[{name}].valueReference"
        problems = [
            (v.path, v.message) for v in rules.check_value(field, value, options, path=path)
        ]
        if problems:
            raise self.invalid("Parameters", problems)
        return ref(rtype, _last_segment(value["reference"]))

    def _param_code(
        self,
        params: dict[str, dict[str, Any]],
        name: str,
        allowed: tuple[str, ...],
        default: str | None,
    ) -> str | None:
        item = params.get(name)
        if item is None:
            return default
        code = status_code(item)  # valueCode, valueCoding or valueString
        if code == "cancelled (no charge)":
            code = "cancelled"
        if code not in allowed:
            raise self.invalid(
                "Parameters",
                [(f"parameter[{name}].valueCode", f"{code!r} is not one of {', '.join(allowed)}")],
            )
        return str(code)

    # ------------------------------------------------------------------ test controls
    def controls_enabled(self) -> None:
        if not self.state.options.test_controls:
            raise Problem4xx(404, "not-found", "test controls are off")

    async def control(self, request: Request) -> Response:
        try:
            self.controls_enabled()
            action = request.path_params["action"]
            method = request.method
            state = self.state
            result: Any
            if action == "clock" and method == "POST":
                body = await self.json_object(request)
                seconds = body.get("advance")
                if (
                    isinstance(seconds, bool)
                    or not isinstance(seconds, int | float)
                    or not math.isfinite(seconds)
                ):
                    raise Problem4xx(400, "invalid", "advance must be a number of seconds")
                try:
                    result = state.advance_clock(float(seconds))
                except ValueError as exc:
                    raise Problem4xx(400, "invalid", str(exc)) from None
            elif action == "rate-limit/reset" and method == "POST":
                state.reset_rate_limit()
                result = {"reset": True}
            elif action == "fault" and method == "PUT":
                body = await self.json_object(request)
                name = body.get("profile")
                if name is not None and name not in FAULT_PROFILES:
                    raise Problem4xx(400, "invalid", f"unknown fault profile {name!r}")
                state.set_fault(name)
                result = {"profile": name}
            elif action == "fault" and method == "GET":
                result = {
                    "profile": state.fault,
                    "profiles": {n: p.description for n, p in FAULT_PROFILES.items()},
                }
            elif action == "stats" and method == "GET":
                result = state.stats()
            elif action == "stats/reset" and method == "POST":
                state.reset_stats()
                result = {"reset": True}
            elif action == "touch" and method == "POST":
                result = self._touch(await self.json_object(request))
            elif action == "touch" and method == "GET":
                result = state.pending()
            elif action == "delete" and method == "POST":
                result = self._delete(await self.json_object(request))
            elif action == "touch" and method == "DELETE":
                state.clear_triggers()
                result = state.pending()
            else:
                raise Problem4xx(404, "not-found", f"no test control {method} {action}")
        except Problem4xx as problem:
            return error(problem.status, problem.code, problem.diagnostics)
        return Response(orjson.dumps(result), media_type="application/json")

    def _touch(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"type", "ids", "after_list_requests"?}``: touch now, or arm a touch."""
        rtype, ids = body.get("type"), body.get("ids")
        if not isinstance(rtype, str):
            raise Problem4xx(400, "invalid", "type must be a resource type name")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise Problem4xx(400, "invalid", "ids must be an array of record ids")
        try:
            if "after_list_requests" in body:
                return self.state.arm_touch(rtype, ids, body["after_list_requests"])
            return self.state.touch(rtype, ids)
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None

    def _delete(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"type", "ids"}``: delete records as the product's user would."""
        rtype, ids = body.get("type"), body.get("ids")
        if not isinstance(rtype, str):
            raise Problem4xx(400, "invalid", "type must be a resource type name")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise Problem4xx(400, "invalid", "ids must be an array of record ids")
        try:
            return self.state.delete(rtype, ids)
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None


def release_slot(state: MockState, record: Record) -> None:
    """Free the grid slot an Appointment held (it was deleted)."""
    role, start, minutes, cancelled = _appointment_slot(record)
    index = {rid: i for i, rid in enumerate(state.data.roles)}.get(role or "")
    if index is not None and not cancelled and minutes:
        state.data.grid.release(index, start, minutes)


def _status_ext(code: str) -> dict[str, Any]:
    return {"url": "appointment-participant-status", "valueCoding": {"code": code}}


def origin(request: Request) -> str:
    """``http://127.0.0.1:<port>``: the address the server really listens on.

    Taken from the ASGI ``server`` (the bound socket), not the ``Host`` header, so a
    forged Host cannot point links or references at another machine.
    """
    server = request.scope.get("server")
    if server and server[1] is not None:
        return f"http://{server[0]}:{server[1]}"
    return f"{request.url.scheme}://{request.url.netloc}"


KNOWN_TYPES = frozenset(catalogue.RESOURCES)
OPERATIONS = frozenset({"/main/Appointment/$find", "/main/Appointment/$book"})


def route_key(path: str) -> str:
    """The route template a path counts under in the statistics.

    Known resource types keep their name (``/main/Appointment/{id}``); everything
    else folds into a handful of keys, so that any number of distinct paths costs
    a bounded number of counters.
    """
    if path == "/main/oauth/token" or path in OPERATIONS:
        return path
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "" or parts[1] != "main":
        return "(outside /main)"
    rtype = parts[2] if parts[2] in KNOWN_TYPES else "{unknown type}"
    if len(parts) == 3:
        return f"/main/{rtype}"
    if len(parts) == 4:
        return f"/main/{rtype}/" if parts[3] == "" else f"/main/{rtype}/{{id}}"
    return "/main/(deeper path)"


class Gate:
    """Pure ASGI wrapper: User-Agent check (403), a virtual-clock ``Date``, statistics.

    Every response gets a ``Date`` header from the mock's virtual clock (the server
    time a client should note before a walk), in place of uvicorn's real-time one.
    """

    def __init__(self, app: ASGIApp, state: MockState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        counted = not path.startswith("/main/_test/")
        status_seen = 500
        state = self.state

        async def dated_send(message: Message) -> None:
            nonlocal status_seen
            if message["type"] == "http.response.start":
                status_seen = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"date"]
                headers.append((b"date", formatdate(state.now(), usegmt=True).encode()))
                message = {**message, "headers": headers}
            await send(message)

        has_agent = any(k == b"user-agent" and v.strip() for k, v in scope["headers"])
        try:
            if not has_agent:
                content = outcome_bytes("forbidden", "a User-Agent header is required")
                await fhir(content, 403)(scope, receive, dated_send)
            else:
                await self.app(scope, receive, dated_send)
        finally:
            if counted:
                state.record(route_key(path), status_seen)


def create_app(state: MockState) -> ASGIApp:
    """The ASGI application serving ``state``."""
    mock = MockApp(state)

    def by_method(
        table: dict[str, Handler], *, is_list: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        guarded = {
            m: mock.guarded(h, counts_as_list=is_list and m == "GET") for m, h in table.items()
        }
        if "GET" in guarded:
            guarded["HEAD"] = guarded["GET"]  # uvicorn sends the headers without the body

        async def endpoint(request: Request) -> Response:
            handler = guarded.get(request.method)
            if handler is None:
                allow = ", ".join(sorted(guarded))
                return error(
                    405,
                    "not-supported",
                    f"{request.method} is not allowed on {request.url.path}",
                    {"allow": allow},
                )
            return await handler(request)

        return endpoint

    async def token(request: Request) -> Response:
        if request.method != "POST":
            return error(405, "not-supported", "the token endpoint takes POST", {"allow": "POST"})
        return await mock.token(request)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, "not-found", f"nothing at {request.url.path[:200]}")

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own refusals (a method outside a route's list, a bad request):
        # an OperationOutcome like every other error, never text/plain.
        status = exc.status_code if isinstance(exc, HTTPException) else 400
        detail = exc.detail if isinstance(exc, HTTPException) else "bad request"
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else None
        return error(status, "not-supported" if status == 405 else "invalid", str(detail), headers)

    async def server_error(request: Request, exc: Exception) -> Response:
        return error(500, "exception", "the mock failed to handle this request")

    routes = [
        Route("/main/oauth/token", token, methods=ALL_METHODS),
        Route("/main/_test/{action:path}", mock.control, methods=ALL_METHODS),
        Route("/main/Appointment/$find", by_method({"GET": mock.find}), methods=ALL_METHODS),
        Route("/main/Appointment/$book", by_method({"POST": mock.book}), methods=ALL_METHODS),
        Route(
            "/main/{rtype}",
            by_method({"GET": mock.list_, "POST": mock.create}, is_list=True),
            methods=ALL_METHODS,
        ),
        Route("/main/{rtype}/", by_method({"POST": mock.create}), methods=ALL_METHODS),
        Route(
            "/main/{rtype}/{rid}",
            by_method({"GET": mock.read, "PATCH": mock.patch}),
            methods=ALL_METHODS,
        ),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            404: not_found,
            HTTPException: http_error,
            500: server_error,
            Exception: server_error,
        },
    )
    app.router.redirect_slashes = False
    return Gate(app, state)
