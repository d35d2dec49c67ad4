"""FHIR R4 search semantics in the mock, over real loopback HTTP (issue #35).

Expected answers are computed here from every record the mock serves unfiltered,
by FHIR R4's rules as the facts file states them (a comma inside one value is OR,
a repeated parameter is AND; a date of lower precision is an implicit range, and
so is the stored value; a reference parameter takes an id, ``Type/id``, an
absolute URL and the ``:Type`` modifier). No mock code is reused.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from typing import Any

import httpx
import pytest

from tests.loopback import all_pages
from toolkit.mock.server import Deployment


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _human_parts(record: dict[str, Any], part: str) -> list[str]:
    names = record.get("name")
    if isinstance(names, str):
        return [names]
    out: list[str] = []
    for name in names if isinstance(names, list) else [names]:
        if not isinstance(name, dict):
            continue
        if part in ("name", "family") and isinstance(name.get("family"), str):
            out.append(name["family"])
        if part in ("name", "given"):
            out += [g for g in name.get("given") or [] if isinstance(g, str)]
        if part == "name" and isinstance(name.get("text"), str):
            out.append(name["text"])
    return out


def _starts(texts: list[str], needle: str) -> bool:
    """FHIR's default string match: a field, or a word of it, starts with the value."""
    folded = _fold(needle)
    return any(w.startswith(folded) for t in texts for w in (_fold(t), *_fold(t).split()))


def _ids(body: dict[str, Any]) -> set[str]:
    return {e["resource"]["id"] for e in body["entry"]}


@pytest.mark.parametrize(
    ("rtype", "part"),
    [("Patient", "name"), ("Patient", "family"), ("Patient", "given"), ("Organization", "name")],
)
@pytest.mark.parametrize("prefer", [None, "handling=strict"])
def test_a_comma_in_a_string_search_is_or(
    mock_api: httpx.Client, rtype: str, part: str, prefer: str | None
) -> None:
    everything = all_pages(mock_api, rtype)
    words: list[str] = []
    for record in everything:
        for text in _human_parts(record, part):
            word = text.split()[0] if text.split() else ""
            if len(word) >= 3 and word[:3] not in words:
                words.append(word[:3])
    first, second = words[0], words[-1]
    expected = {
        r["id"]
        for r in everything
        if _starts(_human_parts(r, part), first) or _starts(_human_parts(r, part), second)
    }
    only_first = {r["id"] for r in everything if _starts(_human_parts(r, part), first)}
    assert only_first < expected  # both values find something the other does not
    headers = {"Prefer": prefer} if prefer else {}
    answer = mock_api.get(rtype, params={part: f"{first},{second}", "_count": 100}, headers=headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] == len(expected)
    assert _ids(body) == expected
    # repeating the parameter is AND: both words must match
    both = mock_api.get(
        rtype, params=[(part, first), (part, second), ("_count", "100")], headers=headers
    ).json()
    assert _ids(both) == {
        r["id"]
        for r in everything
        if _starts(_human_parts(r, part), first) and _starts(_human_parts(r, part), second)
    }


# ---------------------------------------------------------------- dates, by FHIR's ranges
def _range(text: str) -> tuple[dt.datetime, dt.datetime]:
    """FHIR's implicit range of a date/date-time at its precision (UTC when no zone)."""
    if len(text) == 4:
        lo = dt.datetime(int(text), 1, 1, tzinfo=dt.UTC)
        return lo, lo.replace(year=lo.year + 1)
    if len(text) == 7:
        lo = dt.datetime(int(text[:4]), int(text[5:7]), 1, tzinfo=dt.UTC)
        nxt = (
            lo.replace(year=lo.year + 1, month=1)
            if lo.month == 12
            else lo.replace(month=lo.month + 1)
        )
        return lo, nxt
    if len(text) == 10:
        lo = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
        return lo, lo + dt.timedelta(days=1)
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    clock = text[11:].split("+")[0].split("Z")[0].rsplit("-", 1)[0]
    step = dt.timedelta(minutes=1) if len(clock) == 5 else dt.timedelta(seconds=1)
    return moment, moment + step


def _fhir_date_match(prefix: str, query: str, stored: str) -> bool:
    """FHIR R4 3.1.1.4.4.1, word for word on the two ranges."""
    ql, qh = _range(query)
    sl, sh = _range(stored)
    contained = ql <= sl and sh <= qh
    above = sh > qh  # the range above the search value intersects the target's
    below = sl < ql
    return {
        "eq": contained,
        "ne": not contained,
        "gt": above,
        "lt": below,
        "ge": above or contained,
        "le": below or contained,
        "sa": sl >= qh,
        "eb": sh <= ql,
    }[prefix]


def _count(api: httpx.Client, rtype: str, params: list[tuple[str, str]]) -> int:
    answer = api.get(rtype, params=[*params, ("_summary", "count")])
    assert answer.status_code == 200, answer.text
    total: int = answer.json()["total"]
    return total


def test_a_date_only_value_is_a_whole_day(mock_api: httpx.Client) -> None:
    invoices = all_pages(mock_api, "Invoice")
    day = max({i["date"] for i in invoices}, key=lambda d: sum(i["date"] == d for i in invoices))
    on_day = [i for i in invoices if i["date"] == day]
    assert len(on_day) >= 2
    # an instant cannot contain a whole day: FHIR finds none (the mock found the day's)
    assert _count(mock_api, "Invoice", [("created", f"eq{day}T00:00:00Z")]) == 0
    assert _count(mock_api, "Invoice", [("created", f"eq{day}")]) == len(on_day)
    # gt an instant at +10:00 (the day before, 14:00 UTC) reaches the day before's invoices
    before = (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
    query = f"{day}T00:00:00+10:00"
    expected = sum(_fhir_date_match("gt", query, i["date"]) for i in invoices)
    assert any(i["date"] == before for i in invoices)
    assert _count(mock_api, "Invoice", [("created", f"gt{query}")]) == expected


def test_last_updated_at_minute_precision_is_the_whole_minute(
    fresh_mock: Deployment, fresh_api: httpx.Client
) -> None:
    patient = fresh_api.get("Patient", params={"_count": 1}).json()["entry"][0]["resource"]
    fresh_mock.touch("Patient", [patient["id"]])  # lastUpdated: now, to the second
    stamp = fresh_api.get(f"Patient/{patient['id']}").json()["meta"]["lastUpdated"]
    minute = stamp[:16] + "Z"
    everything = all_pages(fresh_api, "Patient")
    for prefix in ("eq", "ne", "gt", "lt", "ge", "le", "sa", "eb"):
        expected = {
            p["id"]
            for p in everything
            if _fhir_date_match(prefix, minute, p["meta"]["lastUpdated"])
        }
        got = _count(fresh_api, "Patient", [("_lastUpdated", f"{prefix}{minute}")])
        assert got == len(expected), prefix
    found = fresh_api.get("Patient", params={"_lastUpdated": f"eq{minute}", "_count": 100})
    assert patient["id"] in _ids(found.json())


def test_sa_eb_comma_or_and_repeats_and_on_appointment_dates(mock_api: httpx.Client) -> None:
    appointments = all_pages(mock_api, "Appointment")
    starts = sorted({a["start"] for a in appointments})
    early, late = starts[len(starts) // 4], starts[3 * len(starts) // 4]
    cases: list[tuple[list[tuple[str, str]], set[str]]] = [
        ([("date", f"sa{early}")], {a["id"] for a in appointments if a["start"] > early}),
        ([("date", f"eb{late}")], {a["id"] for a in appointments if a["start"] < late}),
        (
            [("date", f"{early[:10]},{late[:10]}")],
            {a["id"] for a in appointments if a["start"][:10] in (early[:10], late[:10])},
        ),
        (
            [("date", f"ge{early}"), ("date", f"lt{late}")],
            {a["id"] for a in appointments if early <= a["start"] < late},
        ),
    ]
    for params, expected in cases:
        assert _count(mock_api, "Appointment", params) == len(expected), params


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("sa", "sa needs a date"),
        ("eb2026-13-01", "not a real calendar date"),
        ("xx2026", "'xx' is not a date prefix"),
        ("saturday", "sa needs a date"),
        ("ap2026-01-01", "ap (approximately) prefix is not supported"),
    ],
)
def test_a_bad_date_names_the_real_problem(mock_api: httpx.Client, value: str, words: str) -> None:
    answer = mock_api.get("Appointment", params={"date": value})
    assert answer.status_code == 400
    assert words in answer.json()["issue"][0]["diagnostics"]


# ---------------------------------------------------------------- references
def _pairs(value: Any) -> list[tuple[str, str]]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        text = item.get("reference", "") if isinstance(item, dict) else ""
        parts = [p for p in text.split("/") if p]
        if len(parts) >= 2:
            out.append((parts[-2], parts[-1]))
    return out


def test_a_reference_takes_an_id_type_and_id_a_url_and_the_type_modifier(
    mock_api: httpx.Client,
) -> None:
    base = str(mock_api.base_url).rstrip("/")
    appointments = all_pages(mock_api, "Appointment")
    patient = next(
        rid
        for a in appointments
        for p in a["participant"]
        for kind, rid in _pairs(p["actor"])
        if kind == "Patient"
    )
    theirs = {
        a["id"]
        for a in appointments
        if ("Patient", patient) in [q for p in a["participant"] for q in _pairs(p["actor"])]
    }
    forms = [
        [("patient", patient)],
        [("patient", f"Patient/{patient}")],
        [("patient", f"{base}/Patient/{patient}")],
        [("patient:Patient", patient)],
        [("actor:Patient", patient)],
        [("actor", f"{base}/Patient/{patient}")],
        [("patient", f"Patient/{patient},Patient/nobody")],
    ]
    for params in forms:
        assert _count(mock_api, "Appointment", params) == len(theirs), params
    assert 0 < len(theirs) < len(appointments)

    invoices = all_pages(mock_api, "Invoice")
    kind, rid = next(q for i in invoices for q in _pairs(i.get("recipient")))
    billed = {i["id"] for i in invoices if (kind, rid) in _pairs(i.get("recipient"))}
    for params in (
        [("recipient", f"{kind}/{rid}")],
        [(f"recipient:{kind}", rid)],
        [("recipient", f"{base}/{kind}/{rid}")],
    ):
        assert _count(mock_api, "Invoice", params) == len(billed), params

    role = mock_api.get("PractitionerRole", params={"_count": 1}).json()["entry"][0]["resource"]
    practitioner = role["practitioner"]["reference"].rsplit("/", 1)[-1]
    window = [("start", "ge2026-11-02"), ("end", "le2026-11-03")]
    plain = _count(mock_api, "Slot", [*window, ("practitioner", practitioner)])
    assert plain > 0
    assert _count(mock_api, "Slot", [*window, ("practitioner:Practitioner", practitioner)]) == plain
    assert (
        _count(mock_api, "Slot", [*window, ("practitioner-role:PractitionerRole", role["id"])]) > 0
    )


@pytest.mark.parametrize(
    ("rtype", "params", "status", "words"),
    [
        ("Appointment", [("patient:Organization", "1")], 400, "takes no :Organization"),
        ("Appointment", [("patient:Patient", "Practitioner/1")], 400, "cannot point at"),
        ("Invoice", [("recipient:Patient", "Organization/1")], 400, "names a Organization"),
        ("Appointment", [("actor", "12")], 422, "actor:"),
        ("Appointment", [("date:Patient", "2026")], 400, "takes no :Patient"),
    ],
)
def test_a_bad_reference_says_what_is_wrong(
    mock_api: httpx.Client, rtype: str, params: list[tuple[str, str]], status: int, words: str
) -> None:
    answer = mock_api.get(rtype, params=params)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["issue"][0]["diagnostics"]


# ---------------------------------------------------------------- client-observed searches
def _declared(api: httpx.Client, rtype: str) -> set[str]:
    statement = api.get("metadata").json()
    entry = next(r for r in statement["rest"][0]["resource"] if r["type"] == rtype)
    return {p["name"] for p in entry.get("searchParam", [])}


def test_patient_general_practitioner_and_role_practitioner_as_a_production_client_asks(
    mock_api: httpx.Client,
) -> None:
    """Facts (client-observed): ``Patient?general-practitioner=Type/id`` and
    ``PractitionerRole?practitioner=Practitioner/<id>``, declared in the statement."""
    assert "general-practitioner" in _declared(mock_api, "Patient")
    assert "practitioner" in _declared(mock_api, "PractitionerRole")
    patients = all_pages(mock_api, "Patient")
    kind, rid = next(q for p in patients for q in _pairs(p.get("generalPractitioner")))
    theirs = {p["id"] for p in patients if (kind, rid) in _pairs(p.get("generalPractitioner"))}
    assert 0 < len(theirs) < len(patients)
    for params in (
        [("general-practitioner", f"{kind}/{rid}")],
        [(f"general-practitioner:{kind}", rid)],
    ):
        answer = mock_api.get("Patient", params=[*params, ("_count", "100")])
        assert answer.status_code == 200, answer.text
        assert _ids(answer.json()) == theirs
        assert "general-practitioner" in str(answer.json()["link"][0]["url"])  # not ignored

    roles = all_pages(mock_api, "PractitionerRole")
    practitioner = next(q for r in roles for q in _pairs(r.get("practitioner")))
    of_it = {r["id"] for r in roles if practitioner in _pairs(r.get("practitioner"))}
    got = mock_api.get(
        "PractitionerRole", params={"practitioner": "/".join(practitioner), "_count": 100}
    ).json()
    assert _ids(got) == of_it and 0 < len(of_it) < len(roles)


def test_export_ids_answers_value_references_on_a_live_mock(mock_api: httpx.Client) -> None:
    """Facts: a production client reads ``parameter[].valueReference.reference``."""
    body = mock_api.get("Patient/$export-ids").json()
    patients = {p["id"] for p in all_pages(mock_api, "Patient")}
    references = [p["valueReference"]["reference"] for p in body["parameter"]]
    assert all(r.startswith(str(mock_api.base_url).rstrip("/") + "/Patient/") for r in references)
    assert {r.rsplit("/", 1)[-1] for r in references} == patients
