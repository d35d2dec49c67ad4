"""Facts read off stored records: owner, date, participant status and booked slot."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from toolkit import catalogue
from toolkit.mock.app.patching import actor_key
from toolkit.mock.app.responses import Problem4xx
from toolkit.mock.app.search import last_segment, parse_instant
from toolkit.mock.shapes import (
    STATUS_URL,
    extension_name,
    status_code,
)
from toolkit.mock.state import MockState
from toolkit.mock.store import Record


def owner_of(resource: str, record: Record) -> str | None:
    if resource == "Appointment":
        for part in record.get("participant") or []:
            text = actor_key(part) or ""
            if "/Patient/" in text:  # the reference names the type; `type` is optional
                return last_segment(text)
        return None
    # The field the owner search selects on (the catalogue's OWNER_SEARCH).
    key = catalogue.OWNER_SEARCH.get(resource, ("", ""))[1]
    target = record.get(key) if key else None
    if isinstance(target, dict) and isinstance(target.get("reference"), str):
        return last_segment(target["reference"])
    return None


def date_of(resource: str, record: Record) -> float | None:
    # The field the date search selects on (the catalogue's DATE_SEARCH), e.g. period.start.
    value: Any = record
    for part in catalogue.DATE_SEARCH.get(resource, ((), "-"))[1].split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return start_seconds(value)


def start_seconds(value: object) -> float | None:
    """The start of a stored date or date-time, or None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return parse_instant(value)[0]
    except Problem4xx:
        return None


def participant_status(part: dict[str, Any]) -> str | None:
    for ext in part.get("modifierExtension") or []:
        if isinstance(ext, dict) and extension_name(str(ext.get("url", ""))) == STATUS_URL:
            return status_code(ext)
    return None


def appointment_slot(record: Record) -> tuple[str | None, int, int, bool]:
    """(role id, start epoch, minutes, cancelled) of an appointment record (any shape).

    The appointment holds its slot unless the practitioner's participant is
    cancelled or every patient participant is (so cancelling one patient of a
    group appointment keeps the slot, and cancelling the only patient frees it).
    """
    role = None
    patients: list[bool] = []
    practitioner_cancelled = False
    for part in record.get("participant") or []:
        text = actor_key(part) or ""
        parts = text.split("/")
        kind = parts[-2] if len(parts) >= 2 else ""
        cancelled = participant_status(part) in ("cancelled", "cancelled (no charge)")
        if kind == "PractitionerRole":
            role = parts[-1]
            practitioner_cancelled = practitioner_cancelled or cancelled
        elif kind == "Patient":
            patients.append(cancelled)
    try:
        start = int(parse_instant(record["start"])[0])
        end = int(parse_instant(record["end"])[0])
    except (KeyError, Problem4xx, TypeError):
        return role, 0, 0, True
    freed = practitioner_cancelled or (bool(patients) and all(patients))
    return role, start, max(0, (end - start) // 60), freed


def release_slot(state: MockState, record: Record) -> None:
    """Free the grid slot an Appointment held (it was deleted)."""
    role, start, minutes, cancelled = appointment_slot(record)
    index = {rid: i for i, rid in enumerate(state.data.roles)}.get(role or "")
    if index is not None and not cancelled and minutes:
        state.data.grid.release(index, start, minutes)


def status_ext(code: str) -> dict[str, Any]:
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
