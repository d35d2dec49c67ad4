"""Nothing dropped, nothing refused: FHIR R4's own forms read (issue 24).

Fixtures are hand-written from the FHIR R4 examples, AU Base urls and the facts
file (:mod:`tests.frames.fhir_r4_forms`), not from pmtk's mock.
"""

from __future__ import annotations

import warnings
from typing import Any

import msgspec
import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.frames.fhir_r4_forms as forms
from toolkit.errors import DataValidationError
from toolkit.schemas import PmtkDataWarning, validate
from toolkit.views import VIEWS, flatten, flatten_tables


def _rows(table: pl.DataFrame, url: str) -> list[dict[str, Any]]:
    return table.filter(pl.col("url") == url).to_dicts()


@pytest.fixture(scope="module")
def patient_tables() -> dict[str, pl.DataFrame]:
    return flatten_tables("Patient", [orjson.dumps(forms.bundle(forms.patient()))])


@pytest.mark.parametrize(("key", "value", "kind", "text"), forms.VALUES)
@pytest.mark.parametrize(
    ("base", "path", "parent"),
    [
        ("http://example.org/fhir/resource", "", None),
        ("http://example.org/fhir/name", "name[0]", None),
        ("http://example.org/fhir/nested", "extension[", "http://example.org/fhir/complex"),
    ],
    ids=["resource", "element", "nested"],
)
def test_an_unknown_extension_of_every_type_at_every_depth_keeps_url_and_value(
    patient_tables: dict[str, pl.DataFrame],
    key: str,
    value: Any,
    kind: str,
    text: str | None,
    base: str,
    path: str,
    parent: str | None,
) -> None:
    (row,) = _rows(patient_tables["patient_extension"], f"{base}/{kind}")
    assert row["patient_id"] == "100001"
    assert row["path"] == path or (path.endswith("[") and row["path"].startswith(path))
    assert row["parent_url"] == parent
    assert row["modifier"] is False
    assert row["value_type"] == kind
    assert row["value"] == text
    assert orjson.loads(row["value_json"]) == value


def test_au_base_extensions_and_primitive_extensions_come_back_by_url(
    patient_tables: dict[str, pl.DataFrame],
) -> None:
    ext = patient_tables["patient_extension"]
    # The one-expression pull the README shows.
    indigenous = ext.filter(pl.col("url").str.ends_with("/indigenous-status")).select(
        "patient_id", "value"
    )
    assert indigenous.rows() == [("100001", "4")]
    assert _rows(ext, forms.VETERAN)[0]["value"] == "GOL"
    assert _rows(ext, forms.MAIDEN)[0]["value"] == "Windsor"
    birth = _rows(ext, forms.BIRTH_TIME)[0]
    assert (birth["path"], birth["value"]) == ("birthDate", "1974-12-25T14:35:45-05:00")
    prefix = _rows(ext, forms.OWN_PREFIX)[0]
    assert (prefix["path"], prefix["value"]) == ("contact[0].name.family", "VV")
    # A known extension is still read into its column, and not twice.
    main = patient_tables["Patient"].row(0, named=True)
    assert main["status"] == "current"
    assert _rows(ext, forms.PATIENT_STATUS) == []
    # The extension JSON is not stored a second time in extra.
    assert "extension" not in (main["extra"] or "")
    assert "VV" not in (main["extra"] or "")
    assert orjson.loads(main["extra"])["contact"][0]["name"]["family"] == "du Marché"


def test_the_extension_table_alone_gives_the_same_rows(
    patient_tables: dict[str, pl.DataFrame],
) -> None:
    alone = flatten("Patient", [forms.bundle(forms.patient())], table="patient_extension")
    assert alone.equals(patient_tables["patient_extension"])
    # AU Base three, the outer complex one, every type at three depths, then the
    # telecom's, the birth time and the own prefix; patient-status is a column.
    assert alone.height == 3 + 1 + 3 * len(forms.VALUES) + 3


def test_an_extension_table_is_valid_against_its_schema(
    patient_tables: dict[str, pl.DataFrame],
) -> None:
    validate(patient_tables["patient_extension"], "Patient", table="patient_extension")


def test_a_known_url_in_a_form_no_column_reads_keeps_its_url() -> None:
    odd = {
        "resourceType": "Patient",
        "id": "7",
        "extension": [
            {"url": forms.PATIENT_STATUS, "valueBoolean": True},
            {"url": "patient-status", "valueCode": "archived", "extension": [
                {"url": "since", "valueDate": "2024"}
            ]},
        ],
    }  # fmt: skip
    tables = flatten_tables("Patient", [forms.bundle(odd)])
    assert tables["Patient"].get_column("status").to_list() == ["archived"]
    assert tables["Patient"].get_column("extra").to_list() == [None]
    ext = tables["patient_extension"]
    assert ext.select("url", "path", "index", "value_type", "value", "parent_url").rows() == [
        (forms.PATIENT_STATUS, "", 0, "boolean", "true", None),
        ("since", "extension[1]", 0, "date", "2024", "patient-status"),
    ]


def test_element_extensions_beside_known_ones_on_appointment_participants() -> None:
    appt = {
        "resourceType": "Appointment",
        "id": "5",
        "start": "2025-09-29T09:00:00+10:00",
        "end": "2025-09-29T09:30:00+10:00",
        "participant": [
            {
                "actor": {"reference": "Patient/1"},
                "modifierExtension": [
                    {"url": "appointment-participant-status", "valueCode": "booked"},
                    {"url": "http://example.org/fhir/consent", "valueBoolean": True},
                ],
                "extension": [{"url": "http://example.org/fhir/seat", "valueInteger": 4}],
            }
        ],
    }
    tables = flatten_tables("Appointment", [forms.bundle(appt)])
    assert tables["appointment_participant"].get_column("status").to_list() == ["booked"]
    ext = tables["appointment_extension"]
    assert ext.select("path", "modifier", "index", "url", "value").rows() == [
        ("participant[0]", True, 1, "http://example.org/fhir/consent", "true"),
        ("participant[0]", False, 0, "http://example.org/fhir/seat", "4"),
    ]
    assert tables["appointment_participant"].get_column("extra").to_list() == [None]


def test_a_page_of_known_extensions_only_takes_the_fast_path_and_fills_no_rows() -> None:
    from toolkit.views.reader import compiled_reader

    page = orjson.dumps(
        forms.bundle({"resourceType": "Patient", "id": "1", "extension": [
            {"url": forms.PATIENT_STATUS, "valueString": "current"}
        ]})
    )  # fmt: skip
    compiled_reader("Patient").strict.decode(page)  # passes the exact check
    assert flatten("Patient", [page], table="patient_extension").height == 0
    unknown = page.replace(b"patient-status", b"patient-statusx")
    with pytest.raises(msgspec.ValidationError, match="url"):
        compiled_reader("Patient").strict.decode(unknown)
    assert flatten("Patient", [unknown], table="patient_extension").height == 1


def test_coverage_funder_type_extension_and_r4_arrays() -> None:
    tables = flatten_tables("Coverage", [forms.bundle(forms.coverage())])
    main = tables["Coverage"].row(0, named=True)
    assert (main["payor_id"], main["payor_type"]) == ("OG-2", "Organization")
    assert (main["identifier_system"], main["identifier_value"]) == (
        "http://benefitsinc.com/certificate",
        "12345",
    )
    assert main["invalid"] is None and main["extra"] is None
    assert tables["coverage_payor"].select("index", "payor_id", "payor_type").rows() == [
        (0, "OG-2", "Organization"),
        (1, "4", "Patient"),
    ]
    assert tables["coverage_identifier"].get_column("value").to_list() == ["12345", "69514496"]
    (funder,) = tables["coverage_extension"].to_dicts()
    assert (funder["url"], funder["value"]) == (forms.FUNDER_TYPE, "employer")


def test_coverage_payor_and_identifier_as_the_specs_single_objects() -> None:
    spec_form = {
        **forms.coverage(),
        "payor": {"reference": "/main/Organization/FD-3", "type": "Organization"},
        "identifier": {"system": "dva", "value": "QX123"},
    }
    tables = flatten_tables("Coverage", [forms.bundle(spec_form)])
    main = tables["Coverage"].row(0, named=True)
    assert (main["payor_id"], main["identifier_value"]) == ("FD-3", "QX123")
    assert tables["coverage_payor"].get_column("payor_id").to_list() == ["FD-3"]
    assert main["invalid"] is None


def test_every_reference_column_has_its_type_companion() -> None:
    for views in VIEWS.values():
        for v in views:
            names = [c.name for c in v.columns]
            for c in v.columns:
                if c.role == "ref_id":
                    assert c.name.removesuffix("_id") + "_type" in names, (v.name, c.name)


def test_general_practitioner_keeps_organization_and_practitioner_types(
    patient_tables: dict[str, pl.DataFrame],
) -> None:
    gp = patient_tables["patient_general_practitioner"]
    assert gp.select("general_practitioner_id", "general_practitioner_type").rows() == [
        ("CL-7", "Organization"),
        ("PR-12", "Practitioner"),
    ]
    validate(gp, "Patient", table="patient_general_practitioner")
    # A type outside FHIR's targets is seen, not read as a PractitionerRole.
    wrong = gp.with_columns(general_practitioner_type=pl.lit("Patient"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        validate(wrong, "Patient", table="patient_general_practitioner")
    checks = {
        check
        for w in caught
        if isinstance(w.message, PmtkDataWarning)
        for check in w.message.failure_cases.get_column("check").to_list()
    }
    assert any("reference_type" in c or "one of" in c for c in checks)


def test_a_page_with_one_partial_date_returns_every_row() -> None:
    df = flatten("Appointment", [forms.bundle(*forms.appointments())])
    assert df.get_column("id").to_list() == ["1", "2", "3"]
    created = df.get_column("created").to_list()
    assert str(created[1]) == "2025-09-28 00:00:00+00:00"
    assert df.get_column("created_precision").to_list() == ["time", "day", "time"]
    assert df.get_column("invalid").to_list() == [None, None, None]
    # errors="raise" does not raise: the precision is an observation, not a spec rule.
    with pytest.warns(PmtkDataWarning, match="created_precision"):
        validate(df, "Appointment", errors="raise")


@pytest.mark.parametrize(
    ("text", "start", "precision"),
    [
        ("2025", "2025-01-01 00:00:00+00:00", "year"),
        ("2025-09", "2025-09-01 00:00:00+00:00", "month"),
        ("2025-09-28", "2025-09-28 00:00:00+00:00", "day"),
        ("2025-09-28T09:00:00+10:00", "2025-09-27 23:00:00+00:00", "time"),
    ],
)
def test_a_partial_date_time_reads_as_the_start_of_its_period(
    text: str, start: str, precision: str
) -> None:
    (appt, *_) = forms.appointments()
    df = flatten("Appointment", [forms.bundle({**appt, "created": text})])
    assert str(df.get_column("created")[0]) == start
    assert df.get_column("created_precision")[0] == precision
    # The text sent is the value cut to its precision.
    cut = {"year": 4, "month": 7, "day": 10}
    if precision in cut:
        assert str(df.get_column("created")[0])[: cut[precision]] == text


def test_a_date_time_in_a_date_column_reads_as_its_own_calendar_date() -> None:
    df = flatten("Invoice", [forms.bundle(*forms.invoices())])
    assert [str(d) for d in df.get_column("date").to_list()] == [
        "2025-09-28",  # not the 13:30 UTC of the 28th, nor a refused page
        "2025-09-28",
        "2025-09-01",
    ]
    assert df.get_column("date_precision").to_list() == ["day", "time", "month"]
    with pytest.warns(PmtkDataWarning, match="date_precision"):
        validate(df, "Invoice", errors="raise")


@pytest.mark.parametrize("bad", ["2025-13", "2025-09-28T25:00:00+10:00", "28/09/2025", "20250"])
def test_a_date_that_is_no_fhir_form_is_kept_and_fails_only_in_validate(bad: str) -> None:
    (appt, *_) = forms.appointments()
    df = flatten("Appointment", [forms.bundle(appt, {**appt, "id": "9", "created": bad})])
    assert df.get_column("id").to_list() == ["1", "9"]
    assert df.get_column("created")[1] is None
    assert df.get_column("created_precision")[1] is None
    assert orjson.loads(df.get_column("invalid")[1])[0]["value"] == bad
    with pytest.raises(DataValidationError, match="format: created"):
        validate(df, "Appointment", errors="raise")
    with pytest.warns(PmtkDataWarning, match="format: created"):
        validate(df, "Appointment", errors="warn")


def test_extension_rows_stay_with_their_record_across_pages_and_included_entries() -> None:
    # Rows are keyed per entry: a clean record, an _include'd resource of another
    # type (with extensions of its own) and batched pages must not shift them.
    def pat(rid: str, *urls: str) -> dict[str, Any]:
        return {
            "resourceType": "Patient",
            "id": rid,
            "extension": [{"url": u, "valueString": rid} for u in urls],
        }

    included = {
        "resourceType": "Organization",
        "id": "CL-1",
        "extension": [{"url": "http://example.org/fhir/org", "valueString": "x"}],
    }
    pages = [
        orjson.dumps(forms.bundle(pat("A"), included, pat("B", "u:1", "u:2"))),
        orjson.dumps(forms.bundle(pat("C"))),
        orjson.dumps(forms.bundle(pat("D", "u:3"), pat("E"))),
    ] * 3
    ext = flatten_tables("Patient", pages)["patient_extension"]
    assert set(ext.select("patient_id", "url", "value").rows()) == {
        ("B", "u:1", "B"),
        ("B", "u:2", "B"),
        ("D", "u:3", "D"),
    }
    assert ext.height == 9
    alone = flatten("Patient", pages, table="patient_extension")
    assert alone.equals(ext)


def test_a_main_table_read_alone_keeps_no_extension_in_extra() -> None:
    # One table's read skips fields; the extensions it meets still do not land
    # in extra, and a list of nulls beside them is kept as it is.
    record = {
        "resourceType": "Practitioner",
        "id": "PR-1",
        "extension": [{"url": "http://example.org/fhir/x", "valueCode": "y"}],
        "photo": [None, None],
        "_gender": {"id": "g1", "extension": [{"url": "u:g", "valueBoolean": True}]},
    }
    main = flatten("Practitioner", [forms.bundle(record)])
    assert orjson.loads(main.get_column("extra")[0]) == {
        "photo": [None, None],
        "_gender": {"id": "g1"},
    }
    ext = flatten("Practitioner", [forms.bundle(record)], table="practitioner_extension")
    assert ext.select("path", "url", "value").rows() == [
        ("", "http://example.org/fhir/x", "y"),
        ("gender", "u:g", "true"),
    ]


_EXT_VALUE = st.sampled_from(forms.VALUES).map(lambda v: {v[0]: v[1]})


def _extension_tree(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    url = st.sampled_from(["u:a", "http://example.org/b", "https://x.org/c/patient-statusx"])
    leaf = st.builds(lambda u, v: {"url": u, **v}, url, _EXT_VALUE)
    if depth == 0:
        return leaf
    nested = st.builds(
        lambda u, kids: {"url": u, "extension": kids},
        url,
        st.lists(_extension_tree(depth - 1), max_size=3),
    )
    return st.one_of(leaf, nested)


def _count(extensions: list[dict[str, Any]]) -> int:
    return sum(1 + _count(e.get("extension", [])) for e in extensions)


@settings(max_examples=60, deadline=None)
@given(
    top=st.lists(_extension_tree(2), max_size=4),
    on_name=st.lists(_extension_tree(1), max_size=3),
    status=st.sampled_from([None, "valueCode", "valueString", "valueBoolean"]),
)
def test_every_extension_element_is_a_row_or_a_column(
    top: list[dict[str, Any]], on_name: list[dict[str, Any]], status: str | None
) -> None:
    extensions = list(top)
    if status is not None:
        value: Any = True if status == "valueBoolean" else "current"
        extensions.insert(len(extensions) // 2, {"url": forms.PATIENT_STATUS, status: value})
    record: dict[str, Any] = {"resourceType": "Patient", "id": "1", "extension": extensions}
    if on_name:
        record["name"] = [{"family": "F", "extension": on_name}]
    tables = flatten_tables("Patient", [forms.bundle(record)])
    read = status in ("valueCode", "valueString")
    ext = tables["patient_extension"]
    assert ext.height == _count(extensions) + _count(on_name) - read
    assert tables["Patient"].get_column("status").to_list() == ["current" if read else None]
    assert tables["Patient"].get_column("extra").to_list() == [None]
    assert ext.get_column("url").null_count() == 0
    keys = ext.select("patient_id", "path", "modifier", "index")
    assert keys.is_unique().all()
