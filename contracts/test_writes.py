"""write (opt-in with --allow-writes): creates, attachments, PATCH round trip, $find and $book.

Every record this creates is a professional contact, a coverage, a referral or an
appointment marked "pmtk contract check": run it against a sandbox or a practice
set aside for testing, never against live patient data.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
import uuid
from typing import Any

import pytest

from contracts.session import DATA_ROOT_CAUSES, Exchange
from contracts.suite import Recorder, Run, entries
from contracts.walker import walk_resource
from toolkit import catalogue as cat

MARK = "pmtk contract check"
SAMPLE_BYTES = base64.b64encode(b"pmtk contract check attachment").decode()


@pytest.fixture
def writes(pm: Run) -> dict[str, Any]:
    if not pm.options.allow_writes:
        pytest.skip("opt-in: --allow-writes (creates records)")
    scratch: dict[str, Any] = pm.observations.setdefault("_writes", {})
    return scratch


def _created(check: Recorder, ex: Exchange, resource: str) -> dict[str, Any] | None:
    if ex.status != 201:
        check.fail(f"creating a {resource} answered {ex.status}, expected 201", ex)
        return None
    body = ex.json if isinstance(ex.json, dict) else None
    if body is None:
        check.fail(f"creating a {resource} returned no JSON object", ex)
        return None
    prefixes = cat.resource(resource).create_prefixes
    rid = str(body.get("id"))
    if prefixes and not rid.startswith(prefixes):
        check.fail(f"the created {resource} id {rid!r} does not start with {prefixes[0]}", ex)
    for problem in walk_resource(resource, body):
        check.fail(f"created {problem.text()} ({problem.category})", ex)
    return body


def _create(
    pm: Run, check: Recorder, writes: dict[str, Any], resource: str, body: dict[str, Any]
) -> None:
    """POST ``body`` to the catalogue's create path; on success remember the new id."""
    path = cat.CREATE_PATHS[resource]
    started = _now()
    ex = pm.session.request(
        "POST", path.removeprefix(cat.API_PREFIX), json_body=body, operation=f"POST {path}"
    )
    created = _created(check, ex, resource)
    if created:
        writes[resource.lower()] = created["id"]
        _log_write(pm, resource, str(created["id"]), ex, body, started, previous=None)


def _ref(resource: str, rid: str) -> dict[str, str]:
    return {"reference": f"{cat.API_PREFIX}/{resource}/{rid}", "type": resource}


def _listed(pm: Run, resource: str) -> list[Any]:
    ex = pm.sample().bundles.get(resource)
    return entries(ex.json) if ex is not None else []


def _patient_id(pm: Run) -> str:
    for p in _listed(pm, "Patient"):
        if isinstance(p, dict) and isinstance(p.get("id"), str):
            return str(p["id"])
    pytest.skip("no Patient to write against")


def _referral_body(pm: Run, writes: dict[str, Any], content_types: list[str]) -> dict[str, Any]:
    coverage = writes.get("coverage")
    if coverage is None:
        pytest.skip("needs the Coverage created by write.create-coverage")
    requester = None
    for referral in _listed(pm, "Referral"):
        if isinstance(referral, dict) and isinstance(referral.get("requester"), dict):
            requester = referral["requester"]
            break
    if requester is None and "practitioner" in writes:
        requester = _ref("PractitionerRole", writes["practitioner"])
    if requester is None:
        pytest.skip("no external PractitionerRole to name as requester")
    return {
        "resourceType": "Referral",
        "coverage": _ref("Coverage", coverage),
        "subject": _ref("Patient", _patient_id(pm)),
        "requester": requester,
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "active": True,
        "comment": MARK,
        "attachments": [
            {"contentType": ct, "data": SAMPLE_BYTES, "title": f"pmtk-{n}.bin"}
            for n, ct in enumerate(content_types)
        ],
    }


@pytest.mark.pm_check("write.create-organization", "write")
def test_created_organization_is_an_sp_practice(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    body = {
        "resourceType": "Organization",
        "name": f"{MARK} practice {uuid.uuid4().hex[:8]}",
        "active": True,
        "telecom": [{"system": "phone", "value": "+61298765432", "use": "work"}],
        "address": [
            {
                "use": "work",
                "type": "physical",
                "line": ["1 Test St"],
                "city": "Sydney",
                "country": "AU",
            }
        ],
    }
    _create(pm, check, writes, "Organization", body)


@pytest.mark.pm_check("write.create-practitioner", "write")
def test_created_practitioner_is_an_ep_contact(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    body = {
        "resourceType": "Practitioner",
        "name": {"use": "official", "given": ["Contract"], "family": "Check", "prefix": ["Dr"]},
        "active": True,
    }
    _create(pm, check, writes, "Practitioner", body)


@pytest.mark.pm_check("write.create-coverage", "write")
def test_coverage_is_created(pm: Run, check: Recorder, writes: dict[str, Any]) -> None:
    patient = _ref("Patient", _patient_id(pm))
    body = {
        "resourceType": "Coverage",
        "beneficiary": patient,
        "subscriber": patient,
        "payor": patient,
        "subscriberID": "PMTK-CHECK",
        "status": "active",
    }
    _create(pm, check, writes, "Coverage", body)


@pytest.mark.pm_check("write.referral-attachments", "write")
def test_referral_accepts_every_allowed_attachment_type(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    _create(
        pm,
        check,
        writes,
        "Referral",
        _referral_body(pm, writes, list(cat.ATTACHMENT_CONTENT_TYPES)),
    )


@pytest.mark.pm_check("write.attachment-type-rejected", "write")
def test_referral_with_a_disallowed_attachment_type_is_rejected(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    body = _referral_body(pm, writes, ["text/plain"])
    path = cat.CREATE_PATHS["Referral"]
    ex = pm.session.request(
        "POST", path.removeprefix(cat.API_PREFIX), json_body=body, operation=f"POST {path}"
    )
    if ex.status is None or not 400 <= ex.status < 500:
        check.fail(f"a text/plain attachment answered {ex.status}, expected a 4xx refusal", ex)


def _comparable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("meta", "comment")}


@pytest.mark.pm_check("write.patch-round-trip", "write")
def test_patch_changes_exactly_what_was_sent(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    rid = writes.get("referral")
    if rid is None:
        pytest.skip("needs the Referral created by write.referral-attachments")
    before = pm.session.get(f"/Referral/{rid}", operation="GET /main/Referral/{id}")
    comment = f"{MARK} {uuid.uuid4().hex[:8]}"
    _next_second_after(_last_updated(before.json))
    started = _now()
    ex = pm.session.request(
        "PATCH",
        f"/Referral/{rid}",
        json_body={"comment": comment},
        content_type=cat.MERGE_PATCH_JSON,
        operation="PATCH /main/Referral/{id}",
    )
    if ex.status != 200:
        check.fail(f"PATCH answered {ex.status}, expected 200", ex)
        return
    _log_write(pm, "Referral", rid, ex, {"comment": comment}, started, previous=before)
    after = pm.session.get(f"/Referral/{rid}", operation="GET /main/Referral/{id}")
    data = after.json if isinstance(after.json, dict) else {}
    if data.get("comment") != comment:
        check.fail(
            f"after PATCH the comment reads {data.get('comment')!r}, expected {comment!r}",
            ex,
            after,
        )
    if isinstance(before.json, dict) and _comparable(before.json) != _comparable(data):
        changed = sorted(
            k for k in set(before.json) | set(data) if before.json.get(k) != data.get(k)
        )
        changed = [k for k in changed if k not in ("meta", "comment")]
        check.fail(f"PATCH of comment also changed {', '.join(changed)}", before, ex, after)


def _book_body(pm: Run, proposal: dict[str, Any]) -> dict[str, Any]:
    appointment: dict[str, Any] = {
        k: proposal[k]
        for k in ("start", "end", "minutesDuration", "participant", "supportingInformation")
        if k in proposal
    }
    appointment["resourceType"] = "Appointment"
    appointment["description"] = MARK
    return {
        "resourceType": "Parameters",
        "parameter": [
            {"name": "appt-resource", "resource": appointment},
            {"name": "patient-id", "valueReference": _ref("Patient", _patient_id(pm))},
            {"name": "status", "valueCode": "booked"},
        ],
    }


@pytest.mark.pm_check("write.find-and-book", "write")
def test_a_found_slot_can_be_booked(pm: Run, check: Recorder, writes: dict[str, Any]) -> None:
    day = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    params = {
        "start": (day + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": (day + dt.timedelta(days=15)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "duration": 30,
        "_count": 5,
    }
    found = pm.session.get(
        "/Appointment/$find", params=params, operation="GET /main/Appointment/$find"
    )
    proposals = [p for p in entries(found.json) if isinstance(p, dict)]
    if found.status != 200 or not proposals:
        check.fail(f"$find answered {found.status} with {len(proposals)} proposals", found)
        return
    body = _book_body(pm, proposals[0])
    started = _now()
    ex = pm.session.request(
        "POST", "/Appointment/$book", json_body=body, operation="POST /main/Appointment/$book"
    )
    if ex.status != 201:
        check.fail(f"$book of a proposed slot answered {ex.status}, expected 201", found, ex)
        return
    writes["booking"] = body
    for problem in walk_resource("Appointment", ex.json):
        check.fail(f"booked {problem.text()} ({problem.category})", ex)
    booked = ex.json.get("id") if isinstance(ex.json, dict) else None
    if not isinstance(booked, str) or not booked:
        check.fail("$book's reply has no Appointment id", ex)
        return
    # Read back like the other writes (write.read-back): the fields the booking sent.
    sent = body["parameter"][0]["resource"]
    _log_write(pm, "Appointment", booked, ex, sent, started, previous=None)


@pytest.mark.pm_check("write.double-booking-refused", "write")
def test_booking_the_same_slot_twice_is_refused(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    body = writes.get("booking")
    if body is None:
        pytest.skip("needs the booking made by write.find-and-book")
    ex = pm.session.request(
        "POST", "/Appointment/$book", json_body=body, operation="POST /main/Appointment/$book"
    )
    if ex.status != 409:
        check.fail(f"booking an already-booked slot again answered {ex.status}, expected 409", ex)


CLOCK_ALLOWANCE = dt.timedelta(seconds=120)
"""How far a deployment's clock may differ from ours before a ``lastUpdated`` is wrong."""
NOT_COMPARED = ("resourceType", "meta", "attachments")
"""Fields of a write not compared between its reply and a read: the type, the version
stamp (judged on its own) and attachments (stored apart from the record)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _log_write(
    pm: Run,
    resource: str,
    rid: str,
    reply: Exchange,
    sent: dict[str, Any],
    started: dt.datetime,
    *,
    previous: Exchange | None,
) -> None:
    """Read a write that succeeded back at once (before a later write changes the record):
    the record by its id and ``_lastUpdated=ge<before the write>``, for write.read-back."""
    since = started - CLOCK_ALLOWANCE
    read = pm.session.get(f"/{resource}/{rid}", operation=f"GET /main/{resource}/{{id}}")
    search = pm.session.get(
        f"/{resource}",
        params={"_id": rid, "_lastUpdated": f"ge{_stamp(since)}"},
        operation=f"GET /main/{resource}",
    )
    log: list[dict[str, Any]] = pm.scratch.setdefault("writes", [])
    log.append(
        {
            "resource": resource,
            "id": rid,
            "reply": reply,
            "sent": sent,
            "since": since,
            "previous": previous,
            "read": read,
            "search": search,
        }
    )


def _last_updated(record: Any) -> dt.datetime | None:
    meta = record.get("meta") if isinstance(record, dict) else None
    value = meta.get("lastUpdated") if isinstance(meta, dict) else None
    if not isinstance(value, str):
        return None
    try:
        stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


def _next_second_after(stamp: dt.datetime | None) -> None:
    """Wait (under a second) until the clock has left the second ``stamp`` falls in.

    A deployment may stamp ``meta.lastUpdated`` to the second: a PATCH in the same second
    as the previous version could not be stamped strictly after it, which write.read-back
    requires.
    """
    if stamp is None:
        return
    left = (stamp.replace(microsecond=0) + dt.timedelta(seconds=1) - _now()).total_seconds()
    if 0 < left <= 1:
        time.sleep(left + 0.05)


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.pm_check("write.read-back", "write")
def test_every_write_reads_back_as_its_reply_said(
    pm: Run, check: Recorder, writes: dict[str, Any]
) -> None:
    """Each write's reply against a read of the same record and an incremental search.

    Same id (prefix included), the same values for the fields sent, ``meta.lastUpdated``
    strictly after the previous version's (a PATCH) and not in the future beyond
    :data:`CLOCK_ALLOWANCE`, and ``_lastUpdated=ge<before the write>`` finds the record.
    """
    log: list[dict[str, Any]] = pm.scratch.get("writes", [])
    if not log:
        pytest.skip("no write succeeded to read back")
    for write in log:
        _read_back(check, write)
    check.note(f"{len(log)} writes read back")


def _read_back(check: Recorder, write: dict[str, Any]) -> None:
    resource, rid, reply_ex = write["resource"], write["id"], write["reply"]
    what = f"{reply_ex.method} {resource}/{rid}"
    reply = reply_ex.json if isinstance(reply_ex.json, dict) else {}
    read_ex: Exchange = write["read"]
    if read_ex.status != 200 or not isinstance(read_ex.json, dict):
        # Rests on the read alone: a read that failed on the server is a follow-on of
        # schema.server-errors (the cascade guard), not a write finding.
        check.fail(f"{what}: reading it back answered {read_ex.status}", read_ex)
        return
    read = read_ex.json
    if reply.get("id") != read.get("id"):
        check.fail(
            f"{what}: the reply's id is {reply.get('id')!r}, a read of the record says "
            f"{read.get('id')!r}",
            reply_ex,
            read_ex,
        )
    for key in sorted(set(write["sent"]) - set(NOT_COMPARED)):
        if reply.get(key) != read.get(key):
            check.fail(
                f"{what}: the reply's {key} is {reply.get(key)!r}, a read says {read.get(key)!r}",
                reply_ex,
                read_ex,
                cause=_served_broken(resource, read, key),
            )
    _judge_last_updated(check, write, what, reply, read_ex)


def _served_broken(resource: str, read: dict[str, Any], key: str) -> str | None:
    """The data check that owns ``key`` of a read breaking a spec rule, if it does.

    A deployment that serves a field broken (a phone with spaces) reads back differently
    from what it was sent: that is the data check's finding (``format.values[R]``), and the
    difference a follow-on of it, not a write finding of its own.
    """
    for problem in walk_resource(resource, read):
        top = problem.path.split(".", 1)[0].split("[", 1)[0]
        check = DATA_ROOT_CAUSES.get(problem.category)
        if problem.source == "spec" and top == key and check is not None:
            return f"{check}[{resource}]"
    return None


def _judge_last_updated(
    check: Recorder,
    write: dict[str, Any],
    what: str,
    reply: dict[str, Any],
    read_ex: Exchange,
) -> None:
    reply_ex: Exchange = write["reply"]
    stamp = _last_updated(read_ex.json)
    if stamp is None:
        check.fail(f"{what}: a read has no meta.lastUpdated with a time zone", read_ex)
        return
    if _last_updated(reply) != stamp:
        shown = (reply.get("meta") or {}).get("lastUpdated") if isinstance(reply, dict) else None
        check.fail(
            f"{what}: the reply's meta.lastUpdated is {shown!r}, a read says {_stamp(stamp)}",
            reply_ex,
            read_ex,
        )
    previous: Exchange | None = write["previous"]
    before = _last_updated(previous.json) if previous is not None else None
    if before is not None and not stamp > before:
        check.fail(
            f"{what}: meta.lastUpdated {_stamp(stamp)} is not after the previous version's "
            f"{_stamp(before)}",
            previous,
            reply_ex,
            read_ex,
        )
    if stamp > _now() + CLOCK_ALLOWANCE:
        check.fail(f"{what}: meta.lastUpdated {_stamp(stamp)} is in the future", read_ex)
    since, rid, search = write["since"], write["id"], write["search"]
    found = [r.get("id") for r in entries(search.json) if isinstance(r, dict)]
    if search.status != 200:
        check.fail(
            f"{what}: the incremental search _lastUpdated=ge{_stamp(since)} answered "
            f"{search.status}",
            search,
        )
    elif rid not in found:
        check.fail(
            f"{what}: _lastUpdated=ge{_stamp(since)} (before the write) does not find it "
            f"({search.status}, {len(found)} found): an incremental reader loses this change",
            reply_ex,
            search,
        )
