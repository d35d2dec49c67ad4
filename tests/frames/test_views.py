"""Flattening Bundle pages into declared views: columns, dtypes, references, children."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit import catalogue
from toolkit.errors import ConfigurationError, DataValidationError
from toolkit.schemas import validate
from toolkit.views import DATETIME, VIEWS, flatten, flatten_tables, read_schema, table_names

LIVE = "https://terminology.halaxy.com/StructureDefinition/"


def ref(kind: str, rid: str) -> dict[str, str]:
    return {"reference": f"/main/{kind}/{rid}", "type": kind}


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceType": "Bundle",
        "type": "searchset",
        "total": len(resources),
        "link": [{"relation": "self", "url": "/main/X?page=1"}],
        "entry": [{"fullUrl": f"/main/x/{i}", "resource": r} for i, r in enumerate(resources)],
    }


def appointment(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "resourceType": "Appointment",
        "id": str(i),
        "meta": {"lastUpdated": "2026-11-20T10:00:00+11:00"},
        "start": "2026-11-21T09:00:00+10:00",
        "end": "2026-11-21T09:30:00Z",
        "minutesDuration": 30,
        "extension": [{"url": "location-type", "valueCode": "clinic"}],
        "supportingInformation": [ref("HealthcareService", "7")],
        "participant": [
            {
                "type": [{"coding": [{"code": "ATND"}]}],
                "actor": ref("PractitionerRole", "PR-12"),
                "modifierExtension": [
                    {"url": "appointment-participant-status", "valueCoding": {"code": "booked"}}
                ],
            },
            {
                "actor": ref("Patient", f"{i}"),
                "modifierExtension": [
                    {"url": "appointment-participant-status", "valueCoding": {"code": "arrived"}}
                ],
                "extension": [
                    {
                        "url": "appointment-participant-invoice",
                        "valueReference": ref("Invoice", f"INV{i}"),
                    }
                ],
            },
        ],
        **extra,
    }


REFERRAL_COLUMNS = [
    "id", "last_updated", "last_updated_precision", "coverage_id", "coverage_type",
    "period_start", "period_start_precision", "period_end", "period_end_precision",
    "performer_id", "performer_type", "requester_id", "requester_type", "referral_definition",
    "created", "created_precision", "active", "limit_quantity",
    "limit_quantity_offset", "limit_quantity_used", "limit_money_value", "limit_money_currency",
    "limit_money_used", "allocation_type", "subject_id", "subject_type",
    "include_cancelled_appointment",
    "comment", "expiry_type", "priority", "extra", "invalid",
]  # fmt: skip


def test_every_listed_resource_has_a_view() -> None:
    assert set(VIEWS) == set(catalogue.LISTED_RESOURCES)


def test_referral_view_has_the_documented_columns() -> None:
    assert [c.name for c in VIEWS["Referral"][0].columns] == REFERRAL_COLUMNS


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_every_column_is_present_with_its_dtype_when_no_record_has_it(resource_type: str) -> None:
    page = bundle({"resourceType": resource_type, "id": "PR-1"})
    tables = flatten_tables(resource_type, [page])
    for v in VIEWS[resource_type]:
        assert tables[v.name].schema == v.schema


@pytest.mark.parametrize("resource_type", catalogue.LISTED_RESOURCES)
def test_no_pages_gives_empty_tables_with_every_column(resource_type: str) -> None:
    for pages in ([], [bundle()], [{"resourceType": "Bundle", "type": "searchset", "total": 0}]):
        tables = flatten_tables(resource_type, pages)
        assert list(tables) == list(table_names(resource_type))
        for v in VIEWS[resource_type]:
            assert tables[v.name].height == 0
            assert tables[v.name].schema == v.schema


def test_a_field_first_seen_after_row_100_is_kept() -> None:
    records = [{"resourceType": "Referral", "id": str(i)} for i in range(150)]
    records[120]["comment"] = "late"
    records[130]["limitQuantity"] = {"quantity": 5}
    df = flatten("Referral", [bundle(*records[:100]), bundle(*records[100:])])
    assert df.height == 150
    assert df.filter(pl.col("comment") == "late").get_column("id").to_list() == ["120"]
    assert df.get_column("limit_quantity").to_list()[130] == 5


def test_unknown_fields_land_in_extra_as_json() -> None:
    records = [
        {"resourceType": "Referral", "id": "1", "status": "draft", "note": [{"text": "x"}]},
        {"resourceType": "Referral", "id": "2", "comment": "plain"},
    ]
    df = flatten("Referral", bundle(*records))
    extra = df.get_column("extra").to_list()
    assert json.loads(extra[0]) == {"status": "draft", "note": [{"text": "x"}]}
    assert extra[1] is None
    assert df.get_column("comment").to_list() == [None, "plain"]


def test_extra_is_null_when_every_key_is_known() -> None:
    df = flatten("Appointment", [bundle(appointment(1), appointment(2))])
    assert df.get_column("extra").null_count() == 2


def test_unknown_keys_in_one_page_do_not_shift_extra_of_other_pages() -> None:
    pages = [bundle(appointment(1)), bundle(appointment(2, status="booked")), bundle()]
    df = flatten("Appointment", pages)
    assert df.get_column("id").to_list() == ["1", "2"]
    assert df.get_column("extra").to_list() == [None, '{"status":"booked"}']


def test_references_keep_the_id_prefix_and_the_type_where_several_are_allowed() -> None:
    referral = {
        "resourceType": "Referral",
        "id": "9",
        "performer": ref("Practitioner", "PR-12"),
        "requester": ref("PractitionerRole", "EP-3"),
        "subject": ref("Patient", "44"),
        "coverage": ref("Coverage", "C1"),
    }
    row = flatten("Referral", [bundle(referral)]).row(0, named=True)
    assert row["performer_id"] == "PR-12"
    assert row["requester_id"] == "EP-3"
    assert (row["subject_id"], row["coverage_id"]) == ("44", "C1")
    coverage = {"resourceType": "Coverage", "id": "C1", "payor": ref("Organization", "FD-2")}
    cov = flatten("Coverage", [bundle(coverage)]).row(0, named=True)
    assert (cov["payor_id"], cov["payor_type"]) == ("FD-2", "Organization")


def test_money_is_split_into_value_and_currency() -> None:
    referral = {
        "resourceType": "Referral",
        "id": "1",
        "limitMoney": {"amount": {"value": 120, "currency": "AUD"}, "amountUsed": 20.5},
        "limitQuantity": {"quantity": 6, "quantityOffset": 1, "quantityUsed": 2},
    }
    df = flatten("Referral", [bundle(referral)])
    assert df.schema["limit_money_value"] == pl.Float64
    row = df.row(0, named=True)
    assert (row["limit_money_value"], row["limit_money_currency"]) == (120.0, "AUD")
    assert row["limit_money_used"] == 20.5
    assert (row["limit_quantity"], row["limit_quantity_offset"]) == (6, 1)


def test_date_times_with_offsets_are_converted_to_utc_and_dates_are_dates() -> None:
    referral = {
        "resourceType": "Referral",
        "id": "1",
        "created": "2026-11-21T09:00:00+10:00",
        "period": {"start": "2026-11-01", "end": "2027-11-01"},
    }
    df = flatten("Referral", [orjson.dumps(bundle(referral)).decode()])
    assert df.schema["created"] == DATETIME
    assert df.schema["period_start"] == pl.Date
    assert str(df.get_column("created")[0]) == "2026-11-20 23:00:00+00:00"
    assert str(df.get_column("period_end")[0]) == "2027-11-01"


def test_an_unparseable_date_time_is_kept_in_invalid_and_fails_validation() -> None:
    # Not a page refused: the row comes back with the cell null and the text kept,
    # and the spec's date-time rule fails it in validate (errors="raise").
    bad = appointment(1, start="next tuesday")
    df = flatten("Appointment", [bundle(appointment(0), bad)])
    assert df.get_column("id").to_list() == ["0", "1"]
    assert df.get_column("start").to_list()[1] is None
    assert df.get_column("start_precision").to_list()[1] is None
    kept = orjson.loads(df.get_column("invalid")[1])
    assert kept == [
        {"path": "start", "column": "start", "value": "next tuesday", "check": "format"}
    ]
    with pytest.raises(DataValidationError, match="next tuesday") as info:
        validate(df, "Appointment")
    cases = info.value.failure_cases
    assert cases.filter(pl.col("check") == "format: start").get_column("id").to_list() == ["1"]


def test_extension_fields_become_ordinary_columns() -> None:
    appt = flatten("Appointment", [bundle(appointment(1))]).row(0, named=True)
    assert appt["location_type"] == "clinic"
    coverage = {
        "resourceType": "Coverage",
        "id": "C1",
        "extension": [
            {"url": "coverage-payer", "valueCoding": {"code": "30", "display": "Organisation"}},
            {"url": "coverage-patient-anonymous", "valueBoolean": True},
            {"url": "coverage-organisation", "valueReference": ref("Organization", "OG-5")},
        ],
    }
    cov = flatten("Coverage", [bundle(coverage)]).row(0, named=True)
    assert (cov["payer_code"], cov["payer_display"]) == ("30", "Organisation")
    assert cov["patient_anonymous"] is True
    assert cov["organisation_id"] == "OG-5"
    line = {
        "resourceType": "InvoiceLine",
        "id": "L1",
        "extension": [
            {"url": "invoice-line-funder", "valueReference": ref("Organization", "FD-1")}
        ],
    }
    assert flatten("InvoiceLine", [bundle(line)]).get_column("funder_id").to_list() == ["FD-1"]


def test_participants_form_a_child_table_keyed_by_appointment_id() -> None:
    df = flatten(
        "Appointment", [bundle(appointment(1), appointment(2))], table="appointment_participant"
    )
    assert df.columns[:2] == ["appointment_id", "index"]
    assert {"type_code", "actor_id", "actor_type", "status", "invoice_id"} <= set(df.columns)
    assert df.select("appointment_id", "index").rows() == [("1", 0), ("1", 1), ("2", 0), ("2", 1)]
    first, second = df.head(2).to_dicts()
    assert (first["type_code"], first["actor_id"], first["actor_type"]) == (
        "ATND",
        "PR-12",
        "PractitionerRole",
    )
    assert (first["status"], first["invoice_id"]) == ("booked", None)
    assert (second["actor_type"], second["status"], second["invoice_id"]) == (
        "Patient",
        "arrived",
        "INV1",
    )


def test_child_tables_of_organization_invoice_line_and_patient() -> None:
    org = {
        "resourceType": "Organization",
        "id": "CL-1",
        "telecom": [{"system": "phone", "value": "+61298765432", "use": "work"}],
        "address": [{"line": ["1 Main St", "Level 2"], "city": "Sydney", "country": "AU"}],
        "type": [{"system": catalogue.ORGANIZATION_TYPE_SYSTEM, "code": "prov"}],
        "partOf": ref("Organization", "PG-1"),
    }
    tables = flatten_tables("Organization", [bundle(org)])
    assert tables["Organization"].get_column("part_of_id").to_list() == ["PG-1"]
    address = tables["organization_address"].row(0, named=True)
    assert address["organization_id"] == "CL-1"
    assert address["line"] == ["1 Main St", "Level 2"]
    assert tables["organization_telecom"].get_column("value").to_list() == ["+61298765432"]
    assert tables["organization_type"].get_column("code").to_list() == ["prov"]
    line = {
        "resourceType": "InvoiceLine",
        "id": "L1",
        "unitPriceComponent": [
            {"type": "base", "amount": {"value": 100, "currency": "AUD"}},
            {"type": "tax", "amount": {"value": 10.5, "currency": "AUD"}},
        ],
    }
    prices = flatten("InvoiceLine", [bundle(line)], table="invoice_line_price_component")
    assert prices.rows() == [
        ("L1", 0, "base", 100.0, "AUD", None, None),
        ("L1", 1, "tax", 10.5, "AUD", None, None),
    ]
    patient = {"resourceType": "Patient", "id": "P1", "name": [{"given": ["Ann"], "family": "Lee"}]}
    names = flatten("Patient", [bundle(patient)], table="patient_name")
    assert names.row(0, named=True) == {
        "patient_id": "P1",
        "index": 0,
        "use": None,
        "given": ["Ann"],
        "family": "Lee",
        "extra": None,
        "invalid": None,
    }


def test_entries_of_other_resource_types_are_skipped() -> None:
    page = bundle(appointment(1), {"resourceType": "Patient", "id": "5"})
    assert flatten("Appointment", [page]).get_column("id").to_list() == ["1"]


def test_a_single_bundle_in_bytes_is_accepted() -> None:
    assert flatten("Appointment", orjson.dumps(bundle(appointment(3)))).height == 1


def test_an_operation_outcome_page_raises_clearly() -> None:
    outcome = {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": "expired", "diagnostics": "token expired"}],
    }
    with pytest.raises(DataValidationError, match=r"page 1 is an OperationOutcome.*expired"):
        flatten("Appointment", [bundle(appointment(1)), outcome])


def test_a_page_that_is_not_a_bundle_raises_clearly() -> None:
    with pytest.raises(DataValidationError, match=r"page 0 is not a Bundle"):
        flatten("Appointment", [appointment(1)])


def test_a_value_of_the_wrong_json_type_is_null_and_kept_in_invalid() -> None:
    pages = [bundle(appointment(1, minutesDuration={"n": 3}), appointment(2))]
    df = flatten("Appointment", pages)
    assert df.get_column("minutes_duration").to_list() == [None, 30]
    assert json.loads(df.item(0, "invalid")) == [
        {"path": "minutesDuration", "column": "minutes_duration", "value": {"n": 3}}
    ]
    assert df.item(1, "invalid") is None


def test_malformed_json_raises_a_data_validation_error() -> None:
    with pytest.raises(DataValidationError, match="page 0"):
        flatten("Appointment", [b'{"resourceType": "Bundle", "entry": ['])


def test_a_page_that_is_a_json_array_raises_instead_of_being_half_read() -> None:
    two = orjson.dumps([bundle(appointment(1)), bundle(appointment(2))])
    for pages in ([b"[]"], [orjson.dumps(bundle(appointment(1))), two]):
        with pytest.raises(DataValidationError, match=f"page {len(pages) - 1} is not"):
            flatten("Appointment", pages)


def test_errors_name_the_first_bad_page_in_page_order() -> None:
    good = orjson.dumps(bundle(appointment(1)))
    outcome = {"resourceType": "OperationOutcome", "issue": [{"severity": "error"}]}
    pages = [good] * 5 + [orjson.dumps(outcome)] + [good] * 5 + [b"{"] + [good] * 5
    with pytest.raises(DataValidationError, match="page 5 is an OperationOutcome"):
        flatten("Appointment", pages)
    with pytest.raises(DataValidationError, match="page 10 is not"):
        flatten("Appointment", pages[:5] + pages[6:])
    tables = flatten_tables("Appointment", [good] * 17)
    assert tables["Appointment"].height == 17


def test_unknown_resource_type_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"known: Appointment, ChargeItemDefinition"):
        flatten("Location", [])


def test_unknown_table_lists_the_tables() -> None:
    with pytest.raises(ConfigurationError, match="appointment_participant"):
        flatten("Appointment", [], table="appointment_nothing")


def test_read_schema_is_explicit_and_derived_from_the_catalogue() -> None:
    schema = read_schema("Appointment")
    entry = schema["entry"]
    assert isinstance(entry, pl.List)
    resource = dict(entry.inner.to_schema())["resource"]  # type: ignore[union-attr]
    assert "minutesDuration" in dict(resource.to_schema())


def test_the_exact_check_flags_exactly_the_pages_a_fast_read_would_get_wrong() -> None:
    import msgspec

    from toolkit.views.reader import compiled_reader

    decoder = compiled_reader("Appointment").strict

    def flagged(page: bytes) -> bool:
        try:
            decoder.decode(page)
        except msgspec.DecodeError:
            return True
        return False

    known = orjson.dumps(bundle(appointment(1)))
    pretty = json.dumps(bundle(appointment(1)), indent=2).encode()
    nested = orjson.dumps(bundle(appointment(1, participant=[{"period": {"start": "x"}}])))
    top = orjson.dumps(bundle(appointment(1, status="booked")))
    value_only = orjson.dumps(bundle(appointment(1, description='say "status": no')))
    # Names the view knows deeper down (coding.code, extension.url), here at the top.
    known_deeper = orjson.dumps(bundle(appointment(1, code="x", url="y")))
    escaped_key = b'{"entry":[{"resource":{"resourceType":"Appointment","st\\u0061rt":"x"}}]}'
    not_a_bundle = b'[{"entry": []}]'
    # Values Polars would coerce silently: a number into a String, 1.5 into an Int64.
    number_as_text = orjson.dumps(bundle(appointment(1, description=7)))
    fraction = orjson.dumps(bundle(appointment(1, minutesDuration=1.5)))
    live_url = orjson.dumps(bundle(appointment(1, extension=[{"url": LIVE + "location-type"}])))
    pages = [known, pretty, nested, top, value_only, known_deeper, escaped_key, not_a_bundle]
    pages += [number_as_text, fraction, live_url]
    flags = [flagged(p) for p in pages]
    assert flags == [False, False, True, True, False, True, False, True, True, True, False]


def test_a_known_extension_under_another_base_takes_the_repair_path_and_reads_the_same() -> None:
    # The exact check accepts a known url only as the catalogue and the live
    # service write it (a set lookup, not a regex per extension); any other form
    # of it goes to the repair path, which reads it by its last segment, as the
    # view does: the same rows, nothing in the extension table.
    import msgspec

    from toolkit.views.reader import compiled_reader, compiled_table

    other = "http://example.org/fhir/StructureDefinition/"
    status = [{"url": other + "appointment-participant-status", "valueCoding": {"code": "booked"}}]
    participant = [{"actor": ref("Patient", "1"), "modifierExtension": status}]
    forms = {
        base: orjson.dumps(
            bundle(
                appointment(
                    1,
                    extension=[{"url": base + "location-type", "valueCode": "clinic"}],
                    participant=participant
                    if base == other
                    else [
                        {
                            "actor": ref("Patient", "1"),
                            "modifierExtension": [
                                {**status[0], "url": base + status[0]["url"].rsplit("/", 1)[1]}
                            ],
                        }
                    ],
                )
            )
        )
        for base in ("", LIVE, other)
    }
    for base, page in forms.items():
        for decoder in (
            compiled_reader("Appointment").strict,
            compiled_table("Appointment", "Appointment").strict,
        ):
            try:
                decoder.decode(page)
            except msgspec.ValidationError:
                assert base == other
            else:
                assert base != other
    tables = {base: flatten_tables("Appointment", [page]) for base, page in forms.items()}
    for name, table in tables[""].items():
        assert tables[other][name].equals(table), name
        assert tables[LIVE][name].equals(table), name
    assert tables[other]["Appointment"].item(0, "location_type") == "clinic"
    assert tables[other]["appointment_participant"].item(0, "status") == "booked"
    extension_tables = [name for name in tables[other] if name.endswith("_extension")]
    assert extension_tables
    assert all(tables[other][name].height == 0 for name in extension_tables)


def test_one_table_reads_only_its_fields_and_still_reports_every_odd_value() -> None:
    # participant is not read for the main table, but the exact check knows
    # every field: a wrong type there is reported on the record, never lost.
    odd = appointment(2, status="booked")
    odd["participant"] = "not a list"
    pages = [bundle(appointment(1), odd)]
    main = flatten("Appointment", pages)
    assert main.get_column("id").to_list() == ["1", "2"]
    assert main.get_column("extra").to_list() == [None, '{"status":"booked"}']
    assert json.loads(main.item(1, "invalid")) == [
        {"path": "participant", "column": None, "value": "not a list"}
    ]
    participants = flatten("Appointment", pages, table="appointment_participant")
    assert participants.get_column("appointment_id").to_list() == ["1", "1"]
    tables = flatten_tables("Appointment", pages)
    assert tables["appointment_participant"].equals(participants)
    assert tables["Appointment"].equals(main)


def test_a_page_that_is_not_utf8_is_refused_with_its_index() -> None:
    good = orjson.dumps(bundle(appointment(1)))
    broken = orjson.dumps(bundle(appointment(2, description="Review"))).replace(b"Rev", b"\xff\xfe")
    with pytest.raises(DataValidationError, match="page 1 is not a Bundle of Appointment"):
        flatten("Appointment", [good, broken])


def test_top_level_keys_that_the_view_knows_only_deeper_down_are_kept_in_extra() -> None:
    narrative = {"status": "generated", "div": "<div>Ann</div>"}
    records = [
        appointment(1, code="walk-in", type={"text": "t"}),
        appointment(2),
        {"resourceType": "Appointment", "id": "3", "url": "u", "display": "d"},
    ]
    df = flatten("Appointment", [bundle(*records)])
    extra = df.get_column("extra").to_list()
    assert json.loads(extra[0]) == {"code": "walk-in", "type": {"text": "t"}}
    assert extra[1] is None
    assert json.loads(extra[2]) == {"url": "u", "display": "d"}
    patient = {"resourceType": "Patient", "id": "P1", "text": narrative}
    assert json.loads(flatten("Patient", bundle(patient)).item(0, "extra")) == {"text": narrative}


def test_pages_read_in_batches_give_what_page_by_page_reading_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolkit.views import reader as views  # the reader module reads these names

    pages = [
        bundle(*(appointment(10 * p + i) for i in range(p % 4))) for p in range(12)
    ]  # pages of 0..3 entries, the empty ones included
    pages[3] = bundle(appointment(31, status="booked"), appointment(32))  # unknown top key
    pages[7] = bundle(appointment(71), {"resourceType": "Patient", "id": "5"})
    raws = [orjson.dumps(p) for p in pages]
    singly = [flatten_tables("Appointment", [raw]) for raw in raws]
    expected = {name: pl.concat([t[name] for t in singly]) for name in singly[0]}
    read_together: list[int] = []
    read_batch = views._read_batch

    def counting(comp: Any, batch: list[bytes]) -> pl.DataFrame | None:
        df = read_batch(comp, batch)
        read_together.append(0 if df is None else (df.height + 1) // 2)  # pages read together
        return df

    monkeypatch.setattr(views, "_read_batch", counting)
    for size in (1, 2_000, 5_000, 1 << 20):  # from one page a batch to all in one
        monkeypatch.setattr(views, "_BATCH_BYTES", size)
        read_together.clear()
        together = flatten_tables("Appointment", raws)
        for name, frame in expected.items():
            assert together[name].equals(frame), (size, name)
        # Every batch of several pages was read in one call (no fallback).
        batched = [len(b) for _, b in views._batches(raws, 0) if len(b) > 1]
        assert sum(read_together) == sum(batched), (size, read_together)
    assert batched == [len(raws)]  # the last size put every page in one batch
    assert expected["Appointment"].get_column("extra").drop_nulls().to_list() == [
        '{"status":"booked"}'
    ]


def test_broken_pages_that_join_into_valid_json_are_still_refused() -> None:
    bundle_ = b'{"resourceType":"Bundle"}'
    resource = b'{"resource":{"resourceType":"Appointment","id":"2"}}'
    cases = [
        # Half a Bundle, completed by the next page: one value for two pages.
        ([b'{"resourceType":"Bundle","entry":[' + resource, resource + b"]}"], 0),
        # Two Bundles in one page, then a page that opens a value the next one closes:
        # three Bundle objects for three pages, none of them valid alone.
        ([bundle_ + b"," + bundle_, b'{"resourceType":"Bundle","x":[{}', b"{}]}"], 0),
        # A good page, then one with a sentinel-like key of its own.
        ([bundle_, b'{"resourceType":"Bundle"},{"_pmtk_batch_sentinel":"x-0"},' + bundle_], 1),
    ]
    for pages, bad in cases:
        with pytest.raises(DataValidationError, match=f"page {bad} is not"):
            flatten("Appointment", pages)


def _iso(moment: dt.datetime, minutes: int | None, fraction: bool, sep: str) -> str:
    text = moment.isoformat(sep=sep, timespec="microseconds" if fraction else "seconds")
    if minutes is None:
        return text + "Z"
    sign = "-" if minutes < 0 else "+"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


_WELL_FORMED = st.builds(
    _iso,
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
    st.one_of(st.none(), st.integers(-23 * 60 - 59, 23 * 60 + 59)),
    st.booleans(),
    st.sampled_from(["T", "T", "T", " ", "t"]),
)
_DATE_TIMES = st.one_of(
    _WELL_FORMED,
    # Well-formed values with one character changed, dropped or added.
    st.builds(
        lambda text, at, char, how: (
            text[:at] + char + text[at + (how != "insert") :]
            if how != "drop"
            else text[:at] + text[at + 1 :]
        ),
        _WELL_FORMED,
        st.integers(0, 31),
        st.sampled_from(list("0123456789+-:.TZz ")),
        st.sampled_from(["replace", "insert", "drop"]),
    ),
    st.text(max_size=30),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), _DATE_TIMES), max_size=20))
def test_the_fast_date_time_path_gives_exactly_what_chrono_gives(values: list[str | None]) -> None:
    from toolkit.views.expressions import datetime_exact, datetime_fast

    text = pl.Series("t", values, dtype=pl.String)
    fast = text.to_frame().select(datetime_fast(pl.col("t"))).to_series()
    left = (fast.is_null() & text.is_not_null()).arg_true()
    completed = fast.scatter(left, datetime_exact(text.gather(left)))
    assert completed.dtype == DATETIME
    # As integers: year 1 minus an offset is before what Python's datetime can hold.
    expected = datetime_exact(text)
    assert completed.cast(pl.Int64).to_list() == expected.cast(pl.Int64).to_list()


def test_one_odd_record_is_repaired_alone_and_its_neighbours_read_as_sent() -> None:
    # The repair path rebuilds only the entries that fail the exact check: the
    # others must come out exactly as a clean page gives them, with nothing in
    # extra or invalid, and the odd one must carry its own findings only.
    clean = [appointment(i) for i in range(3)]
    odd = [appointment(0), appointment(1, minutesDuration="30", note="x"), appointment(2)]
    got = flatten_tables("Appointment", [orjson.dumps(bundle(*odd))])
    want = flatten_tables("Appointment", [orjson.dumps(bundle(*clean))])
    main, expected = got["Appointment"], want["Appointment"]
    assert main.get_column("invalid").is_null().to_list() == [True, False, True]
    assert main.get_column("extra").is_null().to_list() == [True, False, True]
    assert json.loads(main.get_column("extra")[1]) == {"note": "x"}
    (problem,) = json.loads(main.get_column("invalid")[1])
    assert problem["column"] == "minutes_duration" and problem["value"] == "30"
    kept = [c for c in expected.columns if c not in ("minutes_duration", "extra", "invalid")]
    assert main.select(kept).equals(expected.select(kept))
    assert main.get_column("minutes_duration").to_list() == [30, None, 30]
    for name, table in got.items():
        if name != "Appointment":
            assert table.equals(want[name]), name


@pytest.mark.parametrize("odd", [False, True], ids=["as read", "repaired"])
def test_a_null_array_item_is_no_child_row_and_the_others_keep_their_index(odd: bool) -> None:
    # FHIR JSON has no null items (to FHIRPath a collection holds none, and the
    # ViewDefinition runner drops them): participant: [null, {...}, null] gives the
    # real participant's row alone, at its index as sent, on a clean page and on one
    # the repair path reads (an odd value elsewhere in the record)
    clean = appointment(1)
    nulled = appointment(2)
    nulled["participant"] = [None, nulled["participant"][1], None]
    nulled["supportingInformation"] = [None]
    if odd:
        nulled["minutesDuration"] = "30"
    tables = flatten_tables("Appointment", [bundle(clean, nulled)])
    participants = tables["appointment_participant"]
    assert participants.select("appointment_id", "index").rows() == [("1", 0), ("1", 1), ("2", 1)]
    assert participants.row(2, named=True)["actor_id"] == "2"
    assert participants.row(2, named=True)["status"] == "arrived"
    assert tables["appointment_supporting_information"].get_column("appointment_id").to_list() == [
        "1"
    ]
    main = tables["Appointment"]
    assert main.get_column("id").to_list() == ["1", "2"]
    assert main.get_column("invalid").is_null().to_list() == [True, not odd]
