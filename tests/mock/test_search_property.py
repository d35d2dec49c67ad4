"""A property test of the mock's search against FHIR R4's rules, every declared type.

Over generated queries on the records the session mock serves, each answer is
compared with a brute-force filter written here from the rules alone (FHIR R4
search 3.1.1.4.4.1 for dates, 3.1.1.4.6 for strings, 3.1.1.4.9 for tokens,
3.1.1.4.10 for references; the facts file's "FHIR R4 search rules": a comma is OR,
a repeated parameter is AND, a value of lower precision is an implicit range and so
is the stored value; a reference is read by the last two segments of its path). It
shares no code with the mock: the ranges are computed with :mod:`datetime` from the
served text, and references, codes and extensions are read from the served JSON.

Slots are many (every 30 minutes of every role): their queries carry a two-day
``start`` window, and the oracle counts over the window's records.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import api_client
from tests.loopback import all_pages
from toolkit.mock.server import Deployment

UTC = dt.UTC
PREFIXES = ("eq", "ne", "gt", "lt", "ge", "le", "sa", "eb")
DATES = (  # (type, parameter, how to read the stored text)
    ("Appointment", "date", lambda r: r.get("start")),
    ("Invoice", "created", lambda r: r.get("date")),
    ("Patient", "_lastUpdated", lambda r: r["meta"]["lastUpdated"]),
    ("Patient", "birthdate", lambda r: r.get("birthDate")),
)
NAMES = (("Patient", "name"), ("Patient", "family"), ("Patient", "given"), ("Organization", "name"))


@pytest.fixture(scope="module")
def api(mock_deployment: Deployment) -> Iterator[httpx.Client]:
    mock_deployment.reset_rate_limit()
    with api_client(mock_deployment) as client:
        yield client


@pytest.fixture(scope="module")
def records(api: httpx.Client) -> dict[str, list[dict[str, Any]]]:
    types = ("Appointment", "Invoice", "Patient", "Organization", "Referral", "PractitionerRole")
    out = {t: all_pages(api, t) for t in types}
    out["Slot"] = all_pages(api, "Slot", **dict(slot_window(api)))
    return out


def slot_window(api: httpx.Client) -> list[tuple[str, str]]:
    """Two UTC days of Slots from the first one's: the set every Slot query runs over."""
    first = api.get("Slot", params={"_count": 1}).json()["entry"][0]["resource"]["start"]
    day = dt.date.fromisoformat(first[:10])
    return [("start", f"ge{day}"), ("start", f"lt{day + dt.timedelta(days=2)}")]


# ---------------------------------------------------------------- FHIR's rules, plainly
def fhir_range(text: str) -> tuple[dt.datetime, dt.datetime]:
    """The implicit range of a FHIR date or date-time at its own precision."""
    if len(text) == 4:
        return dt.datetime(int(text), 1, 1, tzinfo=UTC), dt.datetime(
            int(text) + 1, 1, 1, tzinfo=UTC
        )
    if len(text) == 7:
        year, month = int(text[:4]), int(text[5:])
        end = (year + 1, 1) if month == 12 else (year, month + 1)
        return dt.datetime(year, month, 1, tzinfo=UTC), dt.datetime(*end, 1, tzinfo=UTC)
    if len(text) == 10:
        day = dt.datetime(int(text[:4]), int(text[5:7]), int(text[8:]), tzinfo=UTC)
        return day, day + dt.timedelta(days=1)
    clock = text[11:]
    zone = "Z" if clock.endswith("Z") else clock[-6:] if clock[-6] in "+-" else ""
    clock = clock[: len(clock) - len(zone)]
    moment = dt.datetime.fromisoformat(
        text[:11] + clock + ("+00:00" if zone in ("", "Z") else zone)
    )
    width = dt.timedelta(minutes=1) if clock.count(":") == 1 else dt.timedelta(seconds=1)
    return moment, moment + width


def date_matches(prefix: str, query: str, stored: str | None) -> bool:
    if stored is None:
        return False
    q_lo, q_hi = fhir_range(query)
    s_lo, s_hi = fhir_range(stored)
    inside = q_lo <= s_lo and s_hi <= q_hi
    if prefix == "eq":
        return inside
    if prefix == "ne":
        return not inside
    if prefix == "gt":  # the range above the value intersects the target's range
        return max(q_hi, s_lo) < s_hi
    if prefix == "lt":  # the range below the value intersects the target's range
        return s_lo < min(q_lo, s_hi)
    if prefix == "ge":
        return max(q_hi, s_lo) < s_hi or inside
    if prefix == "le":
        return s_lo < min(q_lo, s_hi) or inside
    if prefix == "sa":  # starts after the end of the value's range
        return s_lo >= q_hi
    return s_hi <= q_lo  # eb: ends before its start


def plain(text: str) -> str:
    return "".join(
        c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
    ).casefold()


def name_texts(record: dict[str, Any], part: str) -> list[str]:
    names = record.get("name")
    if isinstance(names, str):
        return [names] if part == "name" else []
    out: list[str] = []
    for name in names if isinstance(names, list) else [names]:
        if isinstance(name, str) and part == "name":
            out.append(name)
        if not isinstance(name, dict):
            continue
        if part in ("name", "family") and name.get("family"):
            out.append(name["family"])
        if part in ("name", "given"):
            out += [g for g in name.get("given") or [] if g]
        if part == "name" and name.get("text"):
            out.append(name["text"])
    return out


def string_matches(modifier: str, values: list[str], texts: list[str]) -> bool:
    for value in values:
        for text in texts:
            if modifier == "exact" and text == value:
                return True
            if modifier == "contains" and plain(value) in plain(text):
                return True
            if modifier == "" and any(
                word.startswith(plain(value)) for word in [plain(text), *plain(text).split()]
            ):
                return True
    return False


# ---------------------------------------------------------------- queries
def date_text(moment: dt.datetime, precision: str, zone: str) -> str:
    if precision in ("year", "month", "day"):
        return moment.astimezone(UTC).isoformat()[: {"year": 4, "month": 7, "day": 10}[precision]]
    offset = {"Z": 0, "+10:00": 10, "-05:00": -5}[zone]
    local = moment.astimezone(dt.timezone(dt.timedelta(hours=offset)))
    clock = local.strftime("%H:%M" if precision == "minute" else "%H:%M:%S")
    return f"{local.date().isoformat()}T{clock}{zone}"


@st.composite
def date_queries(draw: st.DrawFn, records: dict[str, list[dict[str, Any]]]) -> Any:
    rtype, param, read = draw(st.sampled_from(DATES))
    stored = [t for r in records[rtype] if (t := read(r))]
    params: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(1, 2))):  # a repeat is AND
        values = []
        for _ in range(draw(st.integers(1, 2))):  # a comma is OR
            anchor = fhir_range(draw(st.sampled_from(stored)))[0]
            shift = draw(st.sampled_from([0, 0, 1, -1, 30, -59, 3600, -86_400, 40 * 86_400]))
            precision = draw(st.sampled_from(["year", "month", "day", "minute", "second"]))
            zone = draw(st.sampled_from(["Z", "+10:00", "-05:00"]))
            prefix = draw(st.sampled_from(["", *PREFIXES]))
            moment = anchor + dt.timedelta(seconds=shift)
            values.append(prefix + date_text(moment, precision, zone))
        params.append((param, ",".join(values)))
    return rtype, read, params


def expected_dates(records: list[dict[str, Any]], read: Any, params: Any) -> int:
    def one(value: str, stored: str | None) -> bool:
        prefix, text = (value[:2], value[2:]) if value[:2].isalpha() else ("eq", value)
        return date_matches(prefix, text, stored)

    return sum(
        all(any(one(v, read(r)) for v in value.split(",")) for _p, value in params) for r in records
    )


@st.composite
def string_queries(draw: st.DrawFn, records: dict[str, list[dict[str, Any]]]) -> Any:
    rtype, part = draw(st.sampled_from(NAMES))
    texts = [t for r in records[rtype] for t in name_texts(r, part)]
    modifier = draw(st.sampled_from(["", "exact", "contains"]))
    values = []
    for _ in range(draw(st.integers(1, 3))):
        text = draw(st.sampled_from(texts))
        start = draw(st.integers(0, max(0, len(text) - 1))) if modifier == "contains" else 0
        end = draw(st.integers(start + 1, len(text)))
        value = text if modifier == "exact" and draw(st.booleans()) else text[start:end]
        value = draw(st.sampled_from([value, value.upper(), value.lower(), plain(value)]))
        if value.strip() and "," not in value and "\\" not in value:
            values.append(value.strip())
    if not values:
        values = [texts[0][:2]]
    key = f"{part}:{modifier}" if modifier else part
    return rtype, part, modifier, [(key, ",".join(values))], values


def _total(api: httpx.Client, rtype: str, params: list[tuple[str, str]]) -> int:
    answer = api.get(rtype, params=[*params, ("_summary", "count")])
    assert answer.status_code == 200, (params, answer.text)
    total: int = answer.json()["total"]
    return total


_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_SETTINGS
@given(data=st.data())
def test_date_search_agrees_with_fhirs_ranges(
    data: st.DataObject,
    api: httpx.Client,
    records: dict[str, list[dict[str, Any]]],
    mock_deployment: Deployment,
) -> None:
    rtype, read, params = data.draw(date_queries(records))
    mock_deployment.reset_rate_limit()
    assert _total(api, rtype, params) == expected_dates(records[rtype], read, params), params


@_SETTINGS
@given(data=st.data())
def test_string_search_agrees_with_fhirs_rules(
    data: st.DataObject,
    api: httpx.Client,
    records: dict[str, list[dict[str, Any]]],
    mock_deployment: Deployment,
) -> None:
    rtype, part, modifier, params, values = data.draw(string_queries(records))
    mock_deployment.reset_rate_limit()
    expected = sum(string_matches(modifier, values, name_texts(r, part)) for r in records[rtype])
    assert _total(api, rtype, params) == expected, params


# ---------------------------------------------------------------- tokens and references
def pair(reference: Any) -> tuple[str, str] | None:
    """(type, id) of a Reference, from the last two segments of its path (facts)."""
    text = reference.get("reference") if isinstance(reference, dict) else None
    parts = text.split("?")[0].strip("/").split("/") if isinstance(text, str) else []
    return (parts[-2], parts[-1]) if len(parts) >= 2 else None


def patient_statuses(record: dict[str, Any]) -> set[str]:
    """An Appointment's status as the vendor records it: its Patient participants' status."""
    out: set[str] = set()
    for part in record.get("participant") or []:
        if (pair(part.get("actor")) or ("", ""))[0] != "Patient":
            continue
        for ext in part.get("modifierExtension") or []:
            if ext.get("url", "").rsplit("/", 1)[-1] == "appointment-participant-status":
                coding = ext.get("valueCoding") or {}
                out.add(coding.get("code") or ext.get("valueCode") or ext.get("valueString"))
    return out


def codes_of(rtype: str, param: str, record: dict[str, Any]) -> set[str]:
    if (rtype, param) == ("Appointment", "status"):
        return patient_statuses(record)
    value = record.get(param)
    if isinstance(value, bool):
        return {"true" if value else "false"}
    return {value} if isinstance(value, str) else set()


TOKENS = (
    ("Patient", "gender"),
    ("Patient", "active"),
    ("Invoice", "status"),
    ("Slot", "status"),
    ("Appointment", "status"),
)


@st.composite
def token_queries(draw: st.DrawFn, records: dict[str, list[dict[str, Any]]]) -> Any:
    rtype, param = draw(st.sampled_from(TOKENS))
    seen = sorted({c for r in records[rtype] for c in codes_of(rtype, param, r)})
    params = []
    for _ in range(draw(st.integers(1, 2))):
        values = draw(st.lists(st.sampled_from([*seen, "no-such-code"]), min_size=1, max_size=3))
        params.append((param, ",".join(values)))
    return (
        rtype,
        params,
        lambda r: all(codes_of(rtype, param, r) & set(v.split(",")) for _p, v in params),
    )


def references_of(
    rtype: str, param: str, record: dict[str, Any], roles: dict[str, tuple[str, str] | None]
) -> set[tuple[str, str]]:
    """What a reference search of ``rtype``'s ``param`` compares: FHIR R4's paths."""
    if (rtype, param) == ("Appointment", "practitioner"):  # a Practitioner participant
        actors = [pair(p.get("actor")) for p in record.get("participant") or []]
        direct = {a for a in actors if a and a[0] == "Practitioner"}
        via_role = {roles.get(a[1]) for a in actors if a and a[0] == "PractitionerRole"}
        return direct | {p for p in via_role if p}
    field = {"patient": "subject", "general-practitioner": "generalPractitioner"}.get(param, param)
    value = record.get(field)
    items = value if isinstance(value, list) else [value]
    return {p for p in map(pair, items) if p}


REFERENCES = (  # (type, parameter, the one type it points at, or "" for several)
    ("Invoice", "subject", "Patient"),
    ("Referral", "patient", "Patient"),
    ("Slot", "schedule", "Schedule"),
    ("Appointment", "practitioner", "Practitioner"),
    ("PractitionerRole", "practitioner", "Practitioner"),
    ("Patient", "general-practitioner", ""),
)


@st.composite
def reference_queries(draw: st.DrawFn, records: dict[str, list[dict[str, Any]]]) -> Any:
    rtype, param, single = draw(st.sampled_from(REFERENCES))
    roles = {r["id"]: pair(r.get("practitioner")) for r in records["PractitionerRole"]}
    seen = sorted({p for r in records[rtype] for p in references_of(rtype, param, r, roles)})
    params, wanted = [], []
    for _ in range(draw(st.integers(1, 2))):
        chosen = draw(st.lists(st.sampled_from(seen), min_size=1, max_size=2))
        if draw(st.booleans()):
            chosen.append((chosen[0][0], "999999999"))  # no such record
        typed = draw(st.sampled_from(["Type/id", "absolute", "bare", ":Type"]))
        if typed in ("bare", ":Type") and not single:
            typed = "Type/id"
        if typed == ":Type":
            chosen = [c for c in chosen if c[0] == chosen[0][0]]
        forms = {
            "Type/id": lambda t, i: f"{t}/{i}",
            "absolute": lambda t, i: f"https://au-api.halaxy.com/main/{t}/{i}",
            "bare": lambda t, i: i,
            ":Type": lambda t, i: i,
        }
        key = f"{param}:{chosen[0][0]}" if typed == ":Type" else param
        params.append((key, ",".join(forms[typed](t, i) for t, i in chosen)))
        wanted.append(set(chosen))
    return rtype, params, lambda r: all(references_of(rtype, param, r, roles) & w for w in wanted)


@_SETTINGS
@given(data=st.data(), kind=st.sampled_from(["token", "reference"]))
def test_token_and_reference_search_agree_with_fhirs_rules(
    data: st.DataObject,
    kind: str,
    api: httpx.Client,
    records: dict[str, list[dict[str, Any]]],
    mock_deployment: Deployment,
) -> None:
    strategy = token_queries if kind == "token" else reference_queries
    rtype, params, matches = data.draw(strategy(records))
    window = slot_window(api) if rtype == "Slot" else []
    mock_deployment.reset_rate_limit()
    expected = sum(1 for r in records[rtype] if matches(r))
    assert _total(api, rtype, [*params, *window]) == expected, params
