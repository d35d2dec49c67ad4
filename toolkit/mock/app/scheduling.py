"""``$find`` and ``$book``: free slots, proposals and booking a patient into a group."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from toolkit import catalogue, rules
from toolkit.mock.app.listing import ListingRoom, refuse_ignored
from toolkit.mock.app.patching import actor_key
from toolkit.mock.app.records import status_ext
from toolkit.mock.app.responses import (
    Ctx,
    Problem4xx,
)
from toolkit.mock.app.search import (
    int_param,
    last_segment,
    parse_instant,
)
from toolkit.mock.app.writing import WritingRoom
from toolkit.mock.data import (
    ANCHOR,
    DAY,
    GRID_MINUTES,
    GRID_UNITS,
    SLOT_HORIZON_DAYS,
    iso,
    ref,
)
from toolkit.mock.data.grid import local_date, opening
from toolkit.mock.shapes import (
    status_code,
    to_spec,
)
from toolkit.mock.store import Record

_FIND_PARAMETERS = frozenset(
    {
        "start",
        "end",
        "duration",
        "practitioner-role",
        "practitioner",
        "organization",
        "show",
        "emergency",
        "apply-buffer-time",
        "_sort",
        "_count",
        "page",
        "_total",
    }
)
"""What ``$find`` takes (facts); anything else is ignored and left out of ``self``."""


class SchedulingRoom(ListingRoom, WritingRoom):
    """``$find`` and ``$book``: free slots, proposals and booking a patient into a group."""

    # ------------------------------------------------------------------ $find
    async def find(self, request: Request, ctx: Ctx) -> Response:
        params = request.query_params.multi_items()
        q: dict[str, list[str]] = {}
        for k, v in params:
            q.setdefault(k, []).append(v)
        missing = [n for n in ("start", "end", "duration") if not q.get(n)]
        if missing:
            raise Problem4xx(400, "required", f"$find needs {', '.join(missing)}")
        lo = parse_instant(q["start"][0])[0]
        hi = parse_instant(q["end"][0])[0]
        if hi <= lo:
            raise Problem4xx(400, "invalid", "end must be after start")
        duration = int_param("duration", q["duration"][0], 1, GRID_UNITS * GRID_MINUTES)
        count, page, total_mode = self.page_params(params)
        data = self.state.data
        roles = list(range(len(data.roles)))
        practitioners = self.store["Practitioner"]
        roles = [r for r in roles if practitioners.record(r).get("active", True)]
        for name in ("practitioner-role", "practitioner"):
            if q.get(name):
                wanted = {last_segment(x) for v in q[name] for x in v.split(",")}
                roles = [r for r in roles if data.roles[r] in wanted]
        if q.get("organization"):
            orgs = {last_segment(x) for v in q["organization"] for x in v.split(",")}
            if not any(o.startswith(catalogue.PRACTICE_GROUP_PREFIX) for o in orgs):
                roles = [r for r in roles if data.role_clinic[r] in orgs]
        ignored = [k for k, _v in params if k not in _FIND_PARAMETERS]
        refuse_ignored(request, "$find", ignored)
        first_only = q.get("show", [""])[0] == "first-available"
        descending = q.get("_sort", ["start"])[0] == "-start"
        proposals = self._free_slots(roles, int(lo), int(hi), duration, first_only)
        proposals.sort(key=lambda p: (p[1], p[0]), reverse=descending)
        start = (page - 1) * count
        entries = [self._proposal(r, s, duration) for r, s in proposals[start : start + count]]
        content = self.bundle(
            request, params, len(proposals), entries, count, page, total_mode, ignored=ignored
        )
        return self.respond(request, content)

    def _free_slots(
        self, roles: list[int], lo: int, hi: int, duration: int, first_only: bool
    ) -> list[tuple[int, int]]:
        """Free (role, start) units in [lo, hi), on each role's own clock (its clinic's)."""
        grid = self.state.data.grid
        unit = GRID_MINUTES * 60
        first = max(lo, ANCHOR)
        last = min(hi, ANCHOR + SLOT_HORIZON_DAYS * DAY) - 1
        out: list[tuple[int, int]] = []
        if last < first:
            return out
        for r in roles:
            zone = grid.zone(r)
            day, final = local_date(zone, first), local_date(zone, last)
            found = False
            while day <= final and not found:
                if day.weekday() < 5:
                    base = opening(zone, day)
                    for u in range(GRID_UNITS):
                        start = base + u * unit
                        if start < lo or start + duration * 60 > hi:
                            continue
                        if grid.on_grid(r, start, duration) and grid.is_free(r, start, duration):
                            out.append((r, start))
                            if first_only:
                                found = True
                                break
                day += dt.timedelta(days=1)
        return out

    def _proposal(self, r: int, start: int, duration: int) -> bytes:
        data = self.state.data
        return orjson.dumps(
            {
                "resourceType": "Appointment",
                # unique per proposal: the role too, or two practitioners free at the
                # same time would share an id (439 proposals, 80 distinct ids)
                "id": f"proposed-{data.roles[r]}-{start}-{duration}",
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
        """``POST /main/Appointment/$book``: book a patient into a free slot (or a group)."""
        params = _book_parameters(await self.json_object(request))
        patient_ref = self._param_ref(params, "patient-id", "Patient")
        if "appt-id" in params:
            return await self._join_group(request, params, patient_ref)
        appt = (params.get("appt-resource") or {}).get("resource")
        if not isinstance(appt, dict):
            raise Problem4xx(400, "required", "$book needs appt-resource (or appt-id)")
        appt = to_spec(appt)
        self.check_write("Appointment", appt)
        r = self._booked_role(appt)
        start, end, minutes = self._booked_times(appt)
        status = (
            self._param_code(params, "status", catalogue.PARTICIPANT_STATUSES, "booked") or "booked"
        )
        location = self._param_code(params, "location-type", catalogue.LOCATION_TYPES, None)
        service = self._param_ref(params, "healthcare-service-id", "HealthcareService", False)
        grid = self.state.data.grid
        with self.state.lock:
            if not grid.on_grid(r, start, minutes):
                raise Problem4xx(
                    409,
                    "conflict",
                    "no slot of that practitioner role starts at that time for that length",
                )
            if not grid.is_free(r, start, minutes) and not self.state.fault.books_taken_slots:
                raise Problem4xx(409, "conflict", "that slot is already booked")
            now = self.state.now()
            rid = self._next_id("Appointment")
            record = self._booked_record(
                rid, now, appt, r, (start, end, minutes), (location, status), service, patient_ref
            )
            record, content = self.stored("Appointment", record)
            if status != "cancelled":
                grid.take(r, start, minutes)
            coll = self.store["Appointment"]
            owner = last_segment(patient_ref["reference"])
            index = coll.add(rid, record, updated=now, date=float(start), owner=owner)
            coll.prime(index, content)
            self.state.announce("Appointment", rid, "create")
        headers = {"location": self.location(request, "Appointment", rid)}
        reply = orjson.loads(content)
        self.state.fault.book_reply(reply)
        if reply != orjson.loads(content):
            content = orjson.dumps(reply)
        return self.respond(request, content, 201, headers)

    def _booked_role(self, appt: dict[str, Any]) -> int:
        """The index of the practice group's role the appointment's practitioner actor names."""
        role_id = None
        for part in appt.get("participant") or []:
            actor = part.get("actor") or {}
            if str(actor.get("reference", "")).startswith("/main/PractitionerRole/"):
                role_id = last_segment(actor["reference"])
        r = self.role_index.get(role_id or "")
        if r is None:
            raise self.invalid(
                "Appointment",
                [("participant", "needs a PractitionerRole/PR-... actor of the practice group")],
            )
        return r

    def _booked_times(self, appt: dict[str, Any]) -> tuple[int, int, int]:
        """Start and end (epoch seconds) and minutes, checked against each other."""
        start = int(parse_instant(appt["start"])[0])
        end = int(parse_instant(appt["end"])[0])
        minutes = (end - start) // 60
        if end <= start:
            raise self.invalid("Appointment", [("end", "must be after start")])
        if "minutesDuration" in appt and appt["minutesDuration"] != minutes:
            raise self.invalid(
                "Appointment", [("minutesDuration", f"does not match start/end ({minutes})")]
            )
        return start, end, minutes

    def _booked_record(
        self,
        rid: str,
        now: float,
        appt: dict[str, Any],
        r: int,
        times: tuple[int, int, int],
        codes: tuple[str | None, str],
        service: Any,
        patient_ref: dict[str, Any],
    ) -> Record:
        """The Appointment a booking stores, in the spec's form."""
        start, end, minutes = times
        location, status = codes
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
                        "modifierExtension": [status_ext("booked")],
                    },
                    {"actor": patient_ref, "modifierExtension": [status_ext(status)]},
                ],
            }
        )
        return record

    async def _join_group(
        self, request: Request, params: dict[str, dict[str, Any]], patient: dict[str, str]
    ) -> Response:
        target = self._param_ref(params, "appt-id", "Appointment")
        coll, index = self.lookup("Appointment", last_segment(target["reference"]))
        with self.state.lock:
            merged = to_spec(coll.record(index))
            present = any(
                actor_key(p) == patient["reference"] for p in merged.get("participant") or []
            )
            if not present:
                merged.setdefault("participant", []).append(
                    {"actor": patient, "modifierExtension": [status_ext("booked")]}
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
        return ref(rtype, last_segment(value["reference"]))

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


def _book_parameters(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A ``$book`` Parameters body as ``{name: parameter}`` (400 when it is not one)."""
    if body.get("resourceType") != "Parameters" or not isinstance(body.get("parameter"), list):
        raise Problem4xx(
            400, "structure", "$book takes a Parameters resource with a parameter array"
        )
    params: dict[str, dict[str, Any]] = {}
    for n, item in enumerate(body["parameter"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise Problem4xx(400, "structure", f"parameter[{n}] needs a name")
        params[item["name"]] = item
    return params
