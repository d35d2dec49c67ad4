"""Reads and lists: search, sort and the Bundle page of a list."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response

from toolkit import catalogue
from toolkit.mock.app.core import MockCore
from toolkit.mock.app.patching import actor_key, names_of
from toolkit.mock.app.records import origin, participant_status, start_seconds
from toolkit.mock.app.responses import (
    DATE_SORT,
    LISTED,
    OWNER_PARAM,
    Ctx,
    Problem4xx,
)
from toolkit.mock.app.search import (
    DAY,
    date_matcher,
    int_param,
    reference_values,
    string_matcher,
    token_values,
)
from toolkit.mock.data import GRID_MINUTES
from toolkit.mock.store import Collection


class ListingRoom(MockCore):
    """Reads and lists: search, sort and the Bundle page of a list."""

    # ------------------------------------------------------------------ list
    def select(
        self, rtype: str, coll: Collection, params: list[tuple[str, str]]
    ) -> tuple[Sequence[int], list[str]]:
        """The indices a search selects, in order, and the parameters it ignored.

        FHIR's rule (facts): an unsupported parameter, or an empty value, is ignored
        and left out of the Bundle's ``self`` link, unless the request says
        ``Prefer: handling=strict`` (:meth:`list_` then answers 400). A modifier a
        supported parameter does not take is refused with 400, as FHIR requires.
        """
        filters: list[Callable[[int], bool]] = []
        ignored: list[str] = []
        sort_spec: str | None = None
        allowed = catalogue.SEARCH_PARAMETERS.get(rtype, ())
        if not self.state.fault.fhir_search:  # a deployment without the FHIR-standard ones
            allowed = tuple(p for p in allowed if p not in catalogue.FHIR_SEARCH.get(rtype, ()))
        for key, value in params:
            name, _, modifier = key.partition(":")
            if key in _PAGING or name == "_include":
                continue  # read by page_params and _includes
            if key == "_summary":
                if value != "count":
                    ignored.append(key)  # the mock serves whole records only
                continue
            if name not in (*allowed, *_COMMON_FILTERS) or not value.strip(", "):
                ignored.append(key)  # FHIR servers ignore unsupported parameters and empty values
                continue
            if name == "_sort":
                sort_spec = value
            else:
                filters.append(self._filter(rtype, coll, name, modifier, value))
        order = coll.order()
        indices = [i for i in order if all(f(i) for f in filters)] if filters else order
        return (self.sort(rtype, coll, indices, sort_spec) if sort_spec else indices), ignored

    def _filter(
        self, rtype: str, coll: Collection, name: str, modifier: str, value: str
    ) -> Callable[[int], bool]:
        """One parameter's filter, by its FHIR type in the catalogue (one path for all)."""
        kind = catalogue.search_type(rtype, name)
        if modifier and not (
            (kind == "string" and modifier in ("exact", "contains")) or kind == "reference"
        ):
            raise Problem4xx(
                400, "not-supported", f"{rtype} search {name!r} takes no :{modifier} modifier"
            )
        if name == "_id":
            return self._id_filter(rtype, coll, value)
        special = _SPECIAL.get((rtype, name))
        if special is not None:
            return special(self, coll, modifier, value)
        if kind == "date":
            return _date_filter(rtype, coll, name, value)
        if kind == "string":
            return _name_filter(coll, rtype, name, modifier, value)
        if kind == "reference" and name in (OWNER_PARAM.get(rtype), "patient"):
            # FHIR's ``patient``: the owner search of a type whose owner field is not so named
            return _owner_filter(rtype, name, coll, modifier, value)
        if kind == "reference":
            return _reference_filter(coll, rtype, name, modifier, value)
        return _token_filter(coll, catalogue.search_field(rtype, name), value)

    def _id_filter(self, rtype: str, coll: Collection, value: str) -> Callable[[int], bool]:
        """``_id=a,b``: any of the ids, as the fault profile stores them."""
        wanted = token_values(value)
        stored = {self.state.fault.stored_id(rtype, w) for w in wanted}
        return lambda i: coll.ids[i] in stored

    def slot_role(self, index: int) -> str:
        """The PractitionerRole id of the Slot at ``index`` (from the grid, no record built)."""
        data = self.state.data
        return data.roles[data.slots.unit(index)[0]]

    def sort(self, rtype: str, coll: Collection, indices: Sequence[int], spec: str) -> list[int]:
        keys = [k.strip() for k in spec.split(",") if k.strip()]
        result = list(indices)
        for key in reversed(keys):
            desc = key.startswith("-")
            name = key.lstrip("-")
            if name in ("id", "_id"):
                result.sort(key=lambda i: (len(coll.ids[i]), coll.ids[i]), reverse=desc)
            elif name == catalogue.LAST_UPDATED:
                result.sort(key=coll.updated.__getitem__, reverse=desc)
            elif name in DATE_SORT.get(rtype, ()):
                missing = -math.inf if desc else math.inf
                result.sort(
                    key=lambda i: d if (d := coll.date[i]) is not None else missing, reverse=desc
                )
            else:
                known = ", ".join(("id", catalogue.LAST_UPDATED, *DATE_SORT.get(rtype, ())))
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
                count = int_param("_count", value, 1, catalogue.MAX_PAGE_SIZE)
            elif key == "page":
                page = int_param("page", value, 1, None)
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
        included: Sequence[bytes] | None = None,
        ignored: Sequence[str] = (),
    ) -> bytes:
        """One searchset page. With ``included`` (``_include`` was asked, even if it
        found nothing), each match says ``search.mode: match`` and the included
        records follow as ``search.mode: include``; without, the bytes are as ever.
        ``ignored`` parameters are left out of the ``self``, ``next`` and ``last`` links."""
        fault = self.state.fault
        path = request.url.path
        base = origin(request)
        skipped = set(ignored)
        honoured = [(k, v) for k, v in params if k not in skipped]
        kept = [(k, v) for k, v in honoured if k != "page"]

        def link(n: int, absolute: bool = True) -> str:
            query = urlencode([*kept, ("page", str(n))])
            return f"{base if absolute else ''}{path}?{query}"

        last = max(1, math.ceil(total / count))
        # The self link is the search as the server understood it: an ignored
        # parameter is left out (FHIR's rule, facts), so a client can tell.
        query = urlencode(honoured) if skipped else request.url.query
        self_link = f"{base}{path}" + (f"?{query}" if query else "")
        links: list[dict[str, str]] = [{"relation": "self", "url": self_link}]
        absolute = fault.absolute_links
        following = fault.next_page(page, last)
        if following is not None:
            links.append({"relation": "next", "url": link(following, absolute)})
        links.append({"relation": "last", "url": link(last, absolute)})
        shown_total = fault.shown_total(total)
        head = b'{"resourceType":"Bundle","type":"searchset"'
        if total_mode != "none":
            head += b',"total":%d' % shown_total
        if included is None:
            parts = [b'{"resource":' + e + b"}" for e in entries]
        else:
            parts = [b'{"resource":' + e + b',"search":{"mode":"match"}}' for e in entries]
            parts += [b'{"resource":' + e + b',"search":{"mode":"include"}}' for e in included]
        return head + b',"link":' + orjson.dumps(links) + b',"entry":[' + b",".join(parts) + b"]}"

    async def list_(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        if rtype not in LISTED:
            raise Problem4xx(404, "not-supported", f"{rtype} has no list endpoint")
        coll = self.collection(rtype)
        params = request.query_params.multi_items()
        count, page, total_mode = self.page_params(params)
        includes = _includes(rtype, params)
        summary_count = ("_summary", "count") in params
        indices, ignored = self.select(rtype, coll, params)
        refuse_ignored(request, rtype, ignored)
        start = (page - 1) * count
        chosen = [] if summary_count else indices[start : start + count]
        entries = [self.raw(rtype, coll, i) for i in chosen]
        included = self.included(coll, chosen, includes) if includes else None
        content = self.bundle(
            request, params, len(indices), entries, count, page, total_mode, included, ignored
        )
        # armed touches fire after this page was built: the next page sees them
        self.state.list_served(rtype)
        return self.respond(request, content)

    def included(
        self, coll: Collection, chosen: Sequence[int], includes: Sequence[catalogue.Include]
    ) -> list[bytes]:
        """The records the page's matches refer to along ``includes``: each once, those
        that exist (a reference to a deleted record brings nothing), in reference order."""
        out: list[bytes] = []
        seen: set[tuple[str, str]] = set()
        for i in chosen:
            record = coll.record(i)
            for inc in includes:
                for kind, rid in inc.references(record):
                    if (kind, rid) in seen:
                        continue
                    seen.add((kind, rid))
                    target = self.store.collections.get(kind)
                    index = None if target is None else target.pos.get(rid)
                    if target is not None and index is not None:
                        out.append(self.raw(kind, target, index))
        return out

    # ------------------------------------------------------------------ read, create, patch
    async def read(self, request: Request, ctx: Ctx) -> Response:
        rtype = request.path_params["rtype"]
        coll, index = self.lookup(rtype, request.path_params["rid"])
        return self.respond(request, self.raw(rtype, coll, index))

    async def export_ids(self, request: Request, ctx: Ctx) -> Response:
        """``GET /main/<Type>/$export-ids``: a Parameters resource of every id of the type.

        One parameter per record in list order. A ``live`` deployment answers in the form
        a production client reads (facts, client-observed): ``{"name": "id",
        "valueReference": {"reference": ".../main/Patient/<id>", "type": "Patient"}}``,
        absolute as every live reference; a ``spec`` one ``{"name": "id", "valueId":
        "<id>"}`` (pmtk's reading). pmtk's client reads both.
        """
        rtype = request.url.path.split("/")[2]  # a route of catalogue.EXPORT_IDS
        coll = self.store[rtype]
        if self.state.options.shapes == "live":
            params = [
                {
                    "name": "id",
                    "valueReference": {"reference": f"/main/{rtype}/{coll.ids[i]}", "type": rtype},
                }
                for i in coll.order()
            ]
        else:
            params = [{"name": "id", "valueId": coll.ids[i]} for i in coll.order()]
        body = orjson.dumps({"resourceType": "Parameters", "parameter": params})
        return self.respond(request, body)

    async def metadata(self, request: Request, ctx: Ctx) -> Response:
        """``GET /main/metadata``: the CapabilityStatement generated from the catalogue."""
        return self.respond(request, _CAPABILITY[self.state.fault.fhir_search])


_CAPABILITY = {
    standard: orjson.dumps(catalogue.capability_statement(fhir_search=standard))
    for standard in (True, False)
}


_PAGING = frozenset({"_count", "page", "_total"})
_COMMON_FILTERS = ("_id", catalogue.LAST_UPDATED, "_sort")


def strict(request: Request) -> bool:
    """Whether the request says ``Prefer: handling=strict`` (FHIR's search handling)."""
    for header in request.headers.getlist("prefer"):
        for part in header.split(","):
            for item in part.split(";"):
                key, _, value = item.strip().partition("=")
                if (
                    key.strip().lower() == "handling"
                    and value.strip().strip('"').lower() == "strict"
                ):
                    return True
    return False


def refuse_ignored(request: Request, what: str, ignored: Sequence[str]) -> None:
    """The 400 of ``Prefer: handling=strict`` when a parameter would be ignored."""
    if ignored and strict(request):
        names = ", ".join(sorted(set(ignored)))
        raise Problem4xx(
            400,
            "not-supported",
            f"{what} does not support the search parameter(s) {names} "
            "(Prefer: handling=strict; without it they are ignored and left out of the self link)",
        )


def _email_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Patient ``email`` (facts): a telecom of system email, compared without case."""
    wanted = {v.casefold() for v in token_values(value)}

    def match(i: int) -> bool:
        for item in coll.record(i).get("telecom") or []:
            if isinstance(item, dict) and item.get("system") == "email":
                text = item.get("value")
                if isinstance(text, str) and text.strip().casefold() in wanted:
                    return True
        return False

    return match


def _actor_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Appointment ``actor`` (facts): any participant's actor, given as ``Type/id``."""
    wanted = _wanted_references("Appointment", "actor", "participant.actor", modifier, value)

    def match(i: int) -> bool:
        for part in coll.record(i).get("participant") or []:
            actor = part.get("actor") if isinstance(part, dict) else None
            if catalogue.reference_pair(actor) in wanted:
                return True
        return False

    return match


def _slot_role_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Slot ``practitioner-role`` (facts): the role the Slot belongs to."""
    wanted = _wanted_references("Slot", "practitioner-role", "practitionerRole", modifier, value)
    roles = {rid for _kind, rid in wanted}
    return lambda i: room.slot_role(i) in roles


def _slot_practitioner_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Slot ``practitioner`` (facts): the Slots of the roles of that Practitioner."""
    wanted = reference_values("Slot", "practitioner", modifier, value, ("Practitioner",))
    roles = room.store["PractitionerRole"]
    of_practitioner = {
        roles.ids[i]
        for i in roles.order()
        if catalogue.reference_pair(roles.record(i).get("practitioner")) in wanted
    }
    return lambda i: room.slot_role(i) in of_practitioner


def _slot_end_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Slot ``end`` (facts: a ``start``/``end`` window): a date search on the Slot's end."""
    test = date_matcher("end", value)
    unit = GRID_MINUTES * 60
    return lambda i: test(None if (d := coll.date[i]) is None else d + unit)


def _appointment_status_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Appointment ``status`` (FHIR R4; pmtk's reading): the vendor records an appointment's
    status per participant (facts), so this is the status of its Patient participant."""
    wanted = token_values(value)

    def match(i: int) -> bool:
        return any(
            isinstance(part, dict)
            and "/Patient/" in str(actor_key(part) or "")
            and participant_status(part) in wanted
            for part in coll.record(i).get("participant") or []
        )

    return match


def _appointment_practitioner_filter(
    room: ListingRoom, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """Appointment ``practitioner`` (FHIR R4): a participant that is that Practitioner, or
    one of its PractitionerRoles (the vendor's practitioner participant is a role)."""
    types = ("Practitioner",)
    wanted = reference_values("Appointment", "practitioner", modifier, value, types)
    roles = room.store["PractitionerRole"]
    of_practitioner = wanted | {
        ("PractitionerRole", roles.ids[i])
        for i in roles.order()
        if catalogue.reference_pair(roles.record(i).get("practitioner")) in wanted
    }

    def match(i: int) -> bool:
        for part in coll.record(i).get("participant") or []:
            actor = part.get("actor") if isinstance(part, dict) else None
            if catalogue.reference_pair(actor) in of_practitioner:
                return True
        return False

    return match


_Special = Callable[[ListingRoom, Collection, str, str], Callable[[int], bool]]
_SPECIAL: dict[tuple[str, str], _Special] = {
    ("Patient", "email"): _email_filter,
    ("Appointment", "actor"): _actor_filter,
    ("Appointment", "status"): _appointment_status_filter,
    ("Appointment", "practitioner"): _appointment_practitioner_filter,
    ("Slot", "practitioner-role"): _slot_role_filter,
    ("Slot", "practitioner"): _slot_practitioner_filter,
    ("Slot", "end"): _slot_end_filter,
}
"""Searches the facts name that select on something other than one field of the record."""


def _date_filter(rtype: str, coll: Collection, name: str, value: str) -> Callable[[int], bool]:
    """A date search (``ge2026-01-01``) on one instant per record (``_lastUpdated``, dates).

    ``meta.lastUpdated`` and date-times are served to the second; a field the catalogue
    declares with format ``date`` (``Invoice.date``, ``Coverage.period.start``) is a
    whole UTC day, so FHIR's ranges compare it as one (:func:`date_matcher`).
    """
    if name == catalogue.LAST_UPDATED:
        instants: Sequence[float | None] = coll.updated
        width = 1.0
    elif name in catalogue.DATE_SEARCH.get(rtype, ((), ""))[0]:
        instants = coll.date
        path = catalogue.DATE_SEARCH[rtype][1]
        width = DAY if catalogue.field_at(rtype, path).format == "date" else 1.0
    else:  # a date field with no column (Patient ``birthdate``): read from each record
        path = catalogue.search_field(rtype, name)
        width = DAY if catalogue.field_at(rtype, path).format == "date" else 1.0
        test = date_matcher(name, value, width)
        return lambda i: test(start_seconds(coll.record(i).get(path)))
    test = date_matcher(name, value, width)
    return lambda i: test(instants[i])


def _owner_filter(
    rtype: str, name: str, coll: Collection, modifier: str, value: str
) -> Callable[[int], bool]:
    """A search on the patient a record belongs to (id, ``Patient/id``, URL; any of)."""
    owners = {rid for _k, rid in reference_values(rtype, name, modifier, value, ("Patient",))}
    return lambda i: coll.owner[i] in owners


def _token_filter(coll: Collection, name: str, value: str) -> Callable[[int], bool]:
    """A search on a coded field (``status=free``; comma-separated: any of)."""
    wanted = token_values(value)

    def match(i: int) -> bool:
        found = coll.record(i).get(name)
        if isinstance(found, bool):  # a boolean token searches as true/false (FHIR)
            found = "true" if found else "false"
        return found in wanted

    return match


def _includes(rtype: str, params: list[tuple[str, str]]) -> list[catalogue.Include]:
    """The ``_include`` values of a list query (repeatable, or comma-separated), checked.

    An unknown name is a 400 naming the valid ones; so is ``_include:iterate`` (not served).
    """
    known = catalogue.INCLUDES.get(rtype, {})
    out: list[catalogue.Include] = []
    for key, value in params:
        if key.partition(":")[0] != "_include":
            continue
        for name in (v.strip() for v in value.split(",")):
            inc = known.get(name) if key == "_include" else None
            if inc is None:
                valid = ", ".join(known) or "none"
                what = f"{key}={name!r}" if key == "_include" else f"{key} (a modifier)"
                raise Problem4xx(
                    400, "not-supported", f"{rtype} does not support {what}; valid: {valid}"
                )
            if inc not in out:
                out.append(inc)
    return out


def _reference_filter(
    coll: Collection, rtype: str, name: str, modifier: str, value: str
) -> Callable[[int], bool]:
    """A search on a reference field (``recipient=Patient/123``; comma-separated: any of).

    A field that may point at more than one type takes ``Type/id`` or ``:Type``: a
    bare id is refused with 422 (facts, "Shapes seen on the live service").
    """
    field = catalogue.search_field(rtype, name)
    wanted = _wanted_references(rtype, name, field, modifier, value)

    def match(i: int) -> bool:
        value = coll.record(i).get(field)
        items = value if isinstance(value, list) else [value]  # many=True: any of them
        return any(catalogue.reference_pair(item) in wanted for item in items)

    return match


def _wanted_references(
    rtype: str, name: str, path: str, modifier: str, value: str
) -> set[tuple[str, str]]:
    """The (type, id) pairs of a reference search on the field at ``path``."""
    field = catalogue.field_at(rtype, path)
    if field.ref is None:
        raise Problem4xx(400, "not-supported", f"{rtype} cannot be searched by {name!r}")
    prefixes = {t.type: t.prefixes for t in field.ref.targets}
    return reference_values(rtype, name, modifier, value, field.ref.types, prefixes)


def _name_filter(
    coll: Collection, rtype: str, part: str, modifier: str, value: str
) -> Callable[[int], bool]:
    """A string search (``name``/``family``/``given``): word prefix, ``:exact``, ``:contains``."""
    test = string_matcher(part, modifier, value)
    return lambda i: test(names_of(coll.record(i), rtype, part))
