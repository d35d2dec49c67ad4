"""Validation of write bodies against the catalogue, before anything is sent.

A create, a merge patch or a ``$book`` Parameters body is checked field by
field against :mod:`toolkit.catalogue` by :mod:`toolkit.rules`: JSON types,
closed enums, reference shapes and id prefixes, formats (phone, country,
currency, date, date-time, canonical), required fields, and attachments (one of
seven content types, valid base64, at most ``MAX_ATTACHMENT_BYTES`` decoded).
The client is strict: keys the catalogue does not describe and references
without ``type`` are problems too. In a patch, null removes a field and the
resource's required fields need not be present. Every problem is collected;
if there is any, :class:`~toolkit.errors.RequestValidationError` lists them all
and the request is not sent.

Bodies may be plain dicts or pydantic models (dumped by alias, without unset
fields).

:func:`create_write`, :func:`patch_write` and :func:`book_write` turn what a
user passes to :meth:`toolkit.Client.create`, ``patch`` and ``book`` into a
checked :class:`Write`: the method, path, body, media type and whether a retry
after sending is safe. The client only sends it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from toolkit import catalogue, rules
from toolkit.catalogue import Field
from toolkit.errors import RequestValidationError
from toolkit.origin import safe_id

__all__ = [
    "CREATABLE",
    "NOT_PATCHABLE",
    "PATCHABLE",
    "Booking",
    "Write",
    "as_body",
    "book_parameters",
    "book_write",
    "check_book",
    "check_create",
    "check_patch",
    "create_write",
    "patch_write",
    "reference_to",
]

Problems = list[tuple[str, str]]

CREATABLE: dict[str, str] = catalogue.CREATE_PATHS
"""Resource type -> create path: the catalogue's ``CREATE_PATHS`` under its older name."""

PATCHABLE: frozenset[str] = catalogue.PATCHABLE
"""Resource types with a PATCH endpoint (the catalogue's fact)."""

NOT_PATCHABLE: frozenset[str] = catalogue.PATCH_ANSWERS_EMPTY_405
"""Resource types the API answers 405 to on PATCH (the catalogue's fact)."""


def as_body(body: Any) -> dict[str, Any]:
    """A write body as a plain dict: pydantic models are dumped by alias, unset fields dropped."""
    dump = getattr(body, "model_dump", None)
    if callable(dump):
        out = dump(by_alias=True, exclude_none=True, mode="json")
        if isinstance(out, dict):
            return out
    if isinstance(body, Mapping):
        return dict(body)
    msg = f"a write body must be a dict or a pydantic model, got {type(body).__name__}"
    raise TypeError(msg)


_CREATE = rules.Options(mode="create", server_fields=frozenset({"meta"}), closed=True)
_PATCH = rules.Options(mode="patch", server_fields=frozenset({"meta"}), closed=True)
_BOOKED = rules.Options(mode="create", server_fields=frozenset({"id", "meta"}), closed=True)


_ANY_REFERENCE = re.compile(
    r"^(?:[A-Za-z][A-Za-z0-9+.-]*://[^/]+)?(?:/[^?#]*?)?/?(?:main/)?"
    r"(?P<type>[A-Z][A-Za-z]+)/(?P<id>[^/?#]+)$"
)


def spec_form(value: Any) -> Any:
    """``value`` with every reference and extension url in the spec's form, for sending.

    Records read from the live service carry absolute references
    (``https://au-api.halaxy.com/main/Patient/1``) or ``Type/id`` ones, and full
    canonical extension urls (public-docs-facts.md); a body built from them is
    written in the spec's form, ``/main/Patient/1`` and the bare extension name.

    Examples
    --------
    >>> spec_form({"subject": {"reference": "https://au-api.halaxy.com/main/Patient/1"}})
    {'subject': {'reference': '/main/Patient/1'}}
    >>> spec_form({"extension": [{"url": "https://x.test/StructureDefinition/location-type"}]})
    {'extension': [{'url': 'location-type'}]}
    """
    if isinstance(value, list):
        return [spec_form(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "reference" and isinstance(item, str):
            match = _ANY_REFERENCE.match(item)
            if match:
                item = f"{catalogue.API_PREFIX}/{match['type']}/{match['id']}"
        elif key in ("extension", "modifierExtension") and isinstance(item, list):
            item = [
                {**spec_form(e), "url": e["url"].rstrip("/").rsplit("/", 1)[-1]}
                if isinstance(e, Mapping) and isinstance(e.get("url"), str)
                else spec_form(e)
                for e in item
            ]
        else:
            item = spec_form(item)
        out[key] = item
    return out


def _pairs(violations: list[rules.Violation]) -> Problems:
    return [(v.path, v.message) for v in violations]


def check_create(resource_type: str, body: Any) -> dict[str, Any]:
    """Validate a create body; return it as a dict with ``resourceType`` set.

    Raises
    ------
    RequestValidationError
        Listing every problem, when there is any (or when the type has no create endpoint).
    """
    if resource_type not in CREATABLE:
        known = ", ".join(sorted(CREATABLE))
        reason = f"{resource_type} has no create endpoint; creatable: {known}"
        raise RequestValidationError(resource_type, [("", reason)])
    data = spec_form(as_body(body))
    problems = _pairs(rules.check_resource(resource_type, data, _CREATE))
    if problems:
        raise RequestValidationError(resource_type, problems)
    return {"resourceType": resource_type, **{k: v for k, v in data.items() if k != "resourceType"}}


def check_patch(resource_type: str, record_id: str, changes: Any) -> dict[str, Any]:
    """Validate a merge patch for ``resource_type/record_id``; return it as a dict.

    ``null`` values are allowed (a merge patch removes those fields), required
    fields need not be present, but every value that is present must be valid.

    Raises
    ------
    RequestValidationError
        Listing every problem; also for types the API refuses to patch (405).
    """
    problems: Problems = []
    if resource_type in NOT_PATCHABLE or resource_type not in PATCHABLE:
        reason = (
            f"{resource_type} does not accept PATCH (the API answers 405 Method Not Allowed)"
            if resource_type in NOT_PATCHABLE
            else f"{resource_type} has no update endpoint"
        )
        known = ", ".join(sorted(PATCHABLE - NOT_PATCHABLE))
        problems.append(("", f"{reason}; patchable: {known}"))
        raise RequestValidationError(resource_type, problems)
    data = spec_form(as_body(changes))
    wrong_id = rules.id_problem(catalogue.resource(resource_type), record_id)
    if wrong_id is not None:
        problems.append(("id", wrong_id))
    if "id" in data and data["id"] != record_id:
        problems.append(("id", f"{data['id']!r} differs from the id patched, {record_id!r}"))
    if not data:
        problems.append(("", "the patch is empty"))
    problems += _pairs(rules.check_resource(resource_type, data, _PATCH))
    if problems:
        raise RequestValidationError(resource_type, problems)
    return data


def reference_to(resource_type: str, value: Any) -> dict[str, Any]:
    """A reference object from an id, a ``/main/...`` path or a reference dict.

    Examples
    --------
    >>> reference_to("Patient", "123")
    {'reference': '/main/Patient/123', 'type': 'Patient'}
    >>> reference_to("PractitionerRole", "/main/PractitionerRole/PR-9")
    {'reference': '/main/PractitionerRole/PR-9', 'type': 'PractitionerRole'}
    """
    if isinstance(value, Mapping):
        return dict(spec_form(value))
    text = str(value)
    if not text.startswith("/"):
        text = f"{catalogue.API_PREFIX}/{resource_type}/{text}"
    return {"reference": text, "type": resource_type}


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            msg = f"datetime {value!r} has no timezone; pass an aware datetime"
            raise ValueError(msg)
        return value.isoformat()
    return str(value)


def _book_times(start: datetime | str, end: datetime | str) -> tuple[str, str, int]:
    """ISO ``start`` and ``end`` of a booking, and the whole minutes between them."""
    try:
        start_s, end_s = _iso(start), _iso(end)
    except ValueError as exc:
        raise RequestValidationError("Appointment", [("start/end", str(exc))]) from None
    try:
        delta = datetime.fromisoformat(end_s) - datetime.fromisoformat(start_s)
    except (TypeError, ValueError):
        problem = ("start/end", "start and end must be ISO 8601 date-times with an offset")
        raise RequestValidationError("Appointment", [problem]) from None
    return start_s, end_s, int(delta.total_seconds() // 60)


def book_parameters(
    *,
    start: datetime | str,
    end: datetime | str,
    practitioner_role: Any,
    patient: Any,
    healthcare_service: Any = None,
    location_type: str = "clinic",
    status: str = "booked",
    description: str | None = None,
) -> dict[str, Any]:
    """The ``Parameters`` body of ``POST /main/Appointment/$book`` (facts, Writes).

    ``practitioner_role``, ``patient`` and ``healthcare_service`` accept an id
    (``"PR-1234"``), a ``/main/...`` path or a reference dict. ``minutesDuration``
    is computed from ``start`` and ``end``.
    """
    start_s, end_s, minutes = _book_times(start, end)
    appointment: dict[str, Any] = {
        "resourceType": "Appointment",
        "start": start_s,
        "end": end_s,
        "minutesDuration": minutes,
        "participant": [
            {
                "type": [{"coding": [{"code": "ATND"}]}],
                "actor": reference_to("PractitionerRole", practitioner_role),
            }
        ],
    }
    if description is not None:
        appointment["description"] = description
    parameter: list[dict[str, Any]] = [
        {"name": "appt-resource", "resource": appointment},
        {"name": "patient-id", "valueReference": reference_to("Patient", patient)},
    ]
    if healthcare_service is not None:
        service = reference_to("HealthcareService", healthcare_service)
        parameter.append({"name": "healthcare-service-id", "valueReference": service})
    parameter.append({"name": "location-type", "valueCode": location_type})
    parameter.append({"name": "status", "valueCode": status})
    return {"resourceType": "Parameters", "parameter": parameter}


_BOOK_REFS = {
    "patient-id": catalogue.Ref((catalogue.Target("Patient"),)),
    "healthcare-service-id": catalogue.Ref((catalogue.Target("HealthcareService"),)),
    "appt-id": catalogue.Ref((catalogue.Target("Appointment"),)),
}


def _booked_appointment_problems(path: str, res: dict[str, Any]) -> Problems:
    """The problems of the Appointment of an ``appt-resource`` parameter at ``path``."""
    problems = _pairs(rules.check_resource("Appointment", res, _BOOKED, path=f"{path}.resource"))
    start, end = str(res.get("start")), str(res.get("end"))
    try:
        backwards = datetime.fromisoformat(end) <= datetime.fromisoformat(start)
    except (TypeError, ValueError):
        backwards = False  # already reported as a format problem
    if backwards:
        problems.append((f"{path}.resource.end", "must be after start"))
    actors = [
        (x or {}).get("actor", {}).get("type")
        for x in res.get("participant") or []
        if isinstance(x, dict)
    ]
    if "PractitionerRole" not in actors:
        problems.append((f"{path}.resource.participant", "needs a PractitionerRole actor (ATND)"))
    return problems


def _book_parameter_problems(path: str, p: dict[str, Any]) -> Problems:
    """The problems of one named ``$book`` parameter at ``path``."""
    name = p["name"]
    if name == "appt-resource":
        res = p.get("resource")
        if not isinstance(res, dict):
            return [(f"{path}.resource", "must be an Appointment object")]
        return _booked_appointment_problems(path, res)
    if name in _BOOK_REFS:
        field = Field(name, "reference", ref=_BOOK_REFS[name])
        vpath = f"{path}.valueReference"
        return _pairs(rules.check_value(field, p.get("valueReference"), _BOOKED, path=vpath))
    if name in ("location-type", "status"):
        if not isinstance(p.get("valueCode"), str) or not p["valueCode"]:
            return [(f"{path}.valueCode", "must be a non-empty code")]
        return []
    return [(f"{path}.name", f"{name!r} is not a $book parameter")]


def check_book(body: Any) -> dict[str, Any]:
    """Validate a ``$book`` Parameters body; return it as a dict.

    Raises
    ------
    RequestValidationError
        Listing every problem.
    """
    problems: Problems = []
    data = as_body(body)
    if data.get("resourceType") != "Parameters":
        problems.append(("resourceType", "a $book body is a 'Parameters' resource"))
    params = data.get("parameter")
    if not isinstance(params, list) or not params:
        problems.append(("parameter", "must be a non-empty array"))
        raise RequestValidationError("Appointment", problems)
    seen: set[str] = set()
    for i, p in enumerate(params):
        path = f"parameter[{i}]"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            problems.append((path, "must be an object with a 'name'"))
            continue
        seen.add(p["name"])
        problems += _book_parameter_problems(path, p)
    if ("appt-resource" in seen) == ("appt-id" in seen):
        problems.append(("parameter", "needs exactly one of 'appt-resource' and 'appt-id'"))
    if "patient-id" not in seen:
        problems.append(("parameter", "needs a 'patient-id' parameter"))
    if problems:
        raise RequestValidationError("Appointment", problems)
    return data


# ---------------------------------------------------------------------- writes ready to send

_BOOK_PATH = next(e.path for e in catalogue.ENDPOINTS if e.kind == "book")


@dataclass(frozen=True, slots=True)
class Write:
    """A write checked against the catalogue, ready for the request pipeline.

    Attributes
    ----------
    method, path
        ``"POST"`` or ``"PATCH"``, and the API path.
    body
        The JSON body.
    retry
        Whether a failure after the request was sent may be retried: only a
        merge patch that does not append ``attachments`` is idempotent.
    content_type
        The body's media type.
    """

    method: str
    path: str
    body: dict[str, Any]
    retry: bool
    content_type: str = "application/json"


def create_write(resource_type: str, body: Any) -> Write:
    """The checked ``POST`` creating a ``resource_type`` record (:func:`check_create`)."""
    data = check_create(resource_type, body)
    return Write("POST", CREATABLE[resource_type], data, retry=False)


def patch_write(resource_type: str, record_id: str, changes: Any) -> Write:
    """The checked merge ``PATCH`` of one record (:func:`check_patch`).

    Raises
    ------
    InvalidId
        When ``record_id`` cannot be one path segment (checked first).
    RequestValidationError
        When a change breaks a catalogue rule, or the type does not accept PATCH.
    """
    safe_id(resource_type, record_id)
    data = check_patch(resource_type, record_id, changes)
    return Write(
        "PATCH",
        f"{resource_type}/{record_id}",
        data,
        retry="attachments" not in data,
        content_type=catalogue.MERGE_PATCH_JSON,
    )


class Booking(TypedDict, total=False):
    """The keywords of a booking: :meth:`toolkit.Client.book` and :func:`book_write`.

    Without a ready ``Parameters`` body, ``start``, ``end``, ``practitioner_role`` and
    ``patient`` are required; :func:`book_parameters` builds the body from them.

    Attributes
    ----------
    start, end : datetime or str
        When the appointment starts and ends (``minutesDuration`` is computed).
    practitioner_role, patient, healthcare_service : str or dict
        An id (``"PR-1234"``), a ``/main/...`` path or a reference dict; the service
        is optional.
    location_type : str
        ``"clinic"`` when not given.
    status : str
        ``"booked"`` when not given.
    description : str or None
        Free text shown with the appointment.
    """

    start: datetime | str
    end: datetime | str
    practitioner_role: Any
    patient: Any
    healthcare_service: Any
    location_type: str
    status: str
    description: str | None


_BOOK_REQUIRED = ("start", "end", "practitioner_role", "patient")


def book_write(parameters: Mapping[str, Any] | None, /, **booking: Unpack[Booking]) -> Write:
    """The checked ``POST .../Appointment/$book``: from ``parameters``, else from ``booking``.

    Raises
    ------
    TypeError
        For a keyword that is not a :class:`Booking` key, as a plain signature would.
    RequestValidationError
        Without ``parameters``, when a required :class:`Booking` key is missing or None.
    """
    unknown = sorted(set(booking) - set(Booking.__optional_keys__))
    if unknown:
        msg = f"book() got an unexpected keyword argument {unknown[0]!r}"
        raise TypeError(msg)
    if parameters is None:
        missing = [(n, "is required to book") for n in _BOOK_REQUIRED if booking.get(n) is None]
        if missing:
            raise RequestValidationError("Appointment", missing)
        parameters = book_parameters(**booking)
    return Write("POST", _BOOK_PATH, check_book(parameters), retry=False)
