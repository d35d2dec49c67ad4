"""Creates and merge-patches, with the slot a moved appointment frees."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from toolkit.mock.app.core import MockCore
from toolkit.mock.app.patching import merge_participants, merge_patch
from toolkit.mock.app.records import appointment_slot, date_of, owner_of
from toolkit.mock.app.responses import (
    CREATABLE,
    EMPTY_405,
    PATCH_TYPES,
    PATCHABLE,
    Ctx,
    Problem4xx,
)
from toolkit.mock.data import (
    iso,
    ref,
)
from toolkit.mock.shapes import (
    to_spec,
)
from toolkit.mock.store import Record

SERVER_SET: dict[str, dict[str, Any]] = {"Patient": {"active": True}}
"""Fields the server sets on a create, whatever the body says: a Patient's ``active`` is
read-only (facts), and a new patient record is in use."""


class WritingRoom(MockCore):
    """Creates and merge-patches, with the slot a moved appointment frees."""

    async def create(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        self.collection(rtype)
        if rtype not in CREATABLE:
            hint = " (book it with POST /main/Appointment/$book)" if rtype == "Appointment" else ""
            raise Problem4xx(405, "not-supported", f"{rtype} cannot be created{hint}")
        body = to_spec(await self.json_object(request), rtype, self.names)
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
                date=date_of(rtype, record),
                owner=owner_of(rtype, record),
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
        record.update(SERVER_SET.get(rtype, {}))
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
        refused = _patch_refused(request, rtype)
        if refused is not None:
            return refused
        patch = to_spec(await self.json_object(request), rtype, self.names)
        for key in ("id", "resourceType"):
            if key in patch and patch[key] != coll.record(index).get(key):
                raise self.invalid(rtype, [(key, "cannot be changed")])
        patch.pop("meta", None)
        with self.state.lock:
            current = coll.record(index)
            spec_current = to_spec(current, rtype, self.names)
            merged = self._merged(rtype, spec_current, patch)
            self.check_write(rtype, merged)
            merged.pop("attachments", None)
            now = self.state.fault.patch_stamp(self.state.now())
            merged["meta"] = {**(merged.get("meta") or {}), "lastUpdated": iso(now)}
            record, content = self.stored(rtype, merged)
            if rtype == "Appointment":
                self._move_slot(current, record)
            coll.replace(
                index,
                record,
                updated=now,
                date=date_of(rtype, record),
                owner=owner_of(rtype, record),
            )
            coll.prime(index, content)
            coll.move_to_end(index)
            self.state.announce(rtype, coll.ids[index], "update")
        reply = orjson.loads(content)
        self.state.fault.patch_reply(rtype, reply)
        if reply != orjson.loads(content):
            content = orjson.dumps(reply)
        return self.respond(request, content)

    def _merged(self, rtype: str, spec_current: dict[str, Any], patch: dict[str, Any]) -> Any:
        """``patch`` merged into the record; an Appointment's participants are merged by
        their own rules (a participant that is not an array is kept as sent)."""
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
        return merged

    def _move_slot(self, old: Record, new: Record) -> None:
        grid = self.state.data.grid
        for record, take in ((old, False), (new, True)):
            role, start, minutes, cancelled = appointment_slot(record)
            r = self.role_index.get(role or "")
            if r is None or cancelled or not minutes:
                continue
            if take:
                grid.take(r, start, minutes)
            else:
                grid.release(r, start, minutes)


def _patch_refused(request: Request, rtype: str) -> Response | None:
    """A PATCH ``rtype`` cannot take (405, an empty one for some types) or a body that is
    not a JSON merge patch (415); ``None`` when the PATCH may go on."""
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
    return None
