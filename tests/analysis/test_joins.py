"""Names for ids and invoice totals, on small hand-made frames shaped like the views."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from toolkit import analysis
from toolkit.errors import MissingColumnError, MixedCurrencyError, PmtkError

NAMES = {"name_prefix": pl.List(pl.String), "name_given": pl.List(pl.String)}


def _practitioners() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": ["PR-1", "PR-2", "EP-7"],
            "name_use": ["official", "official", None],
            "name_prefix": [["Dr"], None, ["Dr"]],
            "name_given": [["Ana"], ["Ben", "J"], ["José"]],
            "name_family": ["Kim", "Lee", "O'Brien"],
        },
        schema_overrides=NAMES,
    )


def _roles() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": ["PR-1", "PR-2", "PR-9", "EP-7"],
            "practitioner_id": ["PR-1", "/main/Practitioner/PR-2", "PR-9", "EP-7"],
            "organization_id": ["CL-1", "CL-2", "CL-1", "SP-5"],
        }
    )


def _organizations() -> pl.DataFrame:
    return pl.DataFrame(
        {"id": ["CL-1", "CL-2", "SP-5"], "name": ["Newtown", "Paddington", "Williams Family"]}
    )


# practitioner_names ---------------------------------------------------------------------------


def test_practitioner_names_give_each_role_its_practitioner_and_clinic() -> None:
    out = analysis.practitioner_names(_roles(), _practitioners(), _organizations())
    assert out.columns == [
        "role_id",
        "practitioner_id",
        "practitioner_name",
        "organization_id",
        "organization_name",
    ]
    assert out.rows() == [
        ("PR-1", "PR-1", "Dr Ana Kim", "CL-1", "Newtown"),
        ("PR-2", "PR-2", "Ben J Lee", "CL-2", "Paddington"),
        ("PR-9", "PR-9", None, "CL-1", "Newtown"),
        ("EP-7", "EP-7", "Dr José O'Brien", "SP-5", "Williams Family"),
    ]


def test_a_role_whose_practitioner_is_missing_keeps_its_row_with_a_null_name() -> None:
    out = analysis.practitioner_names(_roles(), _practitioners().filter(pl.col("id") != "PR-1"))
    assert out.height == 4
    row = out.row(0, named=True)
    assert row["role_id"] == "PR-1"
    assert row["practitioner_id"] == "PR-1"
    assert row["practitioner_name"] is None
    assert "organization_name" not in out.columns  # no Organization frame given


def test_external_referrer_roles_resolve_to_their_practice() -> None:
    out = analysis.practitioner_names(_roles(), _practitioners(), _organizations())
    ep = out.filter(pl.col("role_id").str.starts_with("EP-")).row(0, named=True)
    assert (ep["practitioner_name"], ep["organization_id"]) == ("Dr José O'Brien", "SP-5")


def test_duplicate_role_and_practitioner_ids_never_multiply_rows() -> None:
    roles = pl.concat([_roles(), _roles().head(1)])
    practitioners = pl.concat(
        [
            _practitioners(),
            pl.DataFrame(
                {
                    "id": ["PR-1"],
                    "name_use": ["usual"],
                    "name_prefix": [None],
                    "name_given": [["Annie"]],
                    "name_family": ["Kim"],
                },
                schema_overrides=NAMES,
            ),
        ]
    )
    out = analysis.practitioner_names(roles, practitioners)
    assert out["role_id"].to_list() == ["PR-1", "PR-2", "PR-9", "EP-7"]
    assert out.row(0)[2] == "Dr Ana Kim"  # the official row, not the later usual one


def test_the_official_name_wins_over_a_usual_name_listed_first() -> None:
    names = pl.DataFrame(
        {
            "practitioner_id": ["PR-1", "PR-1", "PR-2", "PR-2"],
            "index": [0, 1, 0, 1],
            "use": ["usual", "official", "nickname", "old"],
            "prefix": [None, ["Dr"], None, None],
            "given": [["Annie"], ["Ana"], ["Benny"], ["Benjamin"]],
            "family": ["Kim", "Kim", "Lee", "Lee"],
        },
        schema_overrides={"prefix": pl.List(pl.String), "given": pl.List(pl.String)},
    )
    assert analysis.practitioner_display_names(names).rows() == [
        ("PR-1", "Dr Ana Kim"),
        ("PR-2", "Benny Lee"),  # no official name: the first by index
    ]
    out = analysis.practitioner_names(_roles(), names)
    assert out["practitioner_name"].to_list() == ["Dr Ana Kim", "Benny Lee", None, None]


def test_the_official_row_of_the_main_table_wins_over_an_earlier_duplicate() -> None:
    practitioners = pl.DataFrame(
        {
            "id": ["PR-1", "PR-1"],
            "name_use": ["usual", "official"],
            "name_given": [["Annie"], ["Ana"]],
            "name_family": ["Kim", "Kim"],
        },
        schema_overrides=NAMES,
    )
    assert analysis.practitioner_display_names(practitioners).rows() == [("PR-1", "Ana Kim")]


def test_name_parts_may_be_plain_strings() -> None:
    people = pl.DataFrame({"id": ["PR-1"], "name_given": ["Ana"], "name_family": [None]})
    assert analysis.practitioner_display_names(people).rows() == [("PR-1", "Ana")]


# appointment_practitioners ---------------------------------------------------------------------


def _participants() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "appointment_id": ["A1", "A1", "A2", "A2", "A3", "A4", "A5", "A5"],
            "index": [0, 1, 1, 0, 0, 0, 0, 1],
            "actor_id": [
                "/main/PractitionerRole/PR-1",
                "/main/Patient/1",
                "PR-2",
                "2",
                "3",
                "PR-9",
                "/main/Practitioner/PR-2",
                "/main/PractitionerRole/PR-1",
            ],
            "actor_type": [
                "PractitionerRole",
                "Patient",
                "PractitionerRole",
                "Patient",
                "Patient",
                "PractitionerRole",
                "Practitioner",
                "PractitionerRole",
            ],
        }
    )


def test_each_appointment_gets_its_practitioners_name_and_clinic() -> None:
    appointments = pl.DataFrame({"id": ["A1", "A2", "A3", "A4", "A5", "A1"]})
    out = analysis.appointment_practitioners(
        appointments, _participants(), _roles(), _practitioners(), _organizations()
    )
    assert out.rows() == [
        ("A1", "PR-1", "PR-1", "Dr Ana Kim", "CL-1", "Newtown"),
        ("A2", "PR-2", "PR-2", "Ben J Lee", "CL-2", "Paddington"),
        # no practitioner participant: kept, all null
        ("A3", None, None, None, None, None),
        # the role's practitioner has no Practitioner record: kept, name null
        ("A4", "PR-9", "PR-9", None, "CL-1", "Newtown"),
        # a Practitioner named directly (index 0) wins over the later role
        ("A5", None, "PR-2", "Ben J Lee", None, None),
    ]


def test_a_role_missing_from_the_roles_frame_keeps_the_appointment() -> None:
    appointments = pl.DataFrame({"id": ["A1"]})
    roles = _roles().filter(pl.col("id") != "PR-1")
    out = analysis.appointment_practitioners(appointments, _participants(), roles, _practitioners())
    assert out.rows() == [("A1", "PR-1", None, None, None)]


# service_names ---------------------------------------------------------------------------------


def test_service_names_take_the_first_service_and_count_the_others() -> None:
    appointments = pl.DataFrame({"id": ["A1", "A2", "A3", "A4"]})
    info = pl.DataFrame(
        {
            "appointment_id": ["A1", "A2", "A2", "A3"],
            "index": [0, 1, 0, 0],
            "supporting_information_id": [
                "/main/HealthcareService/8001",
                "8002",
                "8003",
                "8999",
            ],
        }
    )
    services = pl.DataFrame(
        {
            "id": ["8001", "8002", "8003", "8001"],
            "name": ["Initial", "Standard", "Extended", "Duplicate"],
        }
    )
    out = analysis.service_names(appointments, info, services)
    assert out.rows() == [
        ("A1", "8001", "Initial", 1),
        ("A2", "8003", "Extended", 2),
        ("A3", "8999", None, 1),  # unknown service: kept, name null
        ("A4", None, None, 0),  # no service at all
    ]


# appointments_per_practitioner_week --------------------------------------------------------------


def _week_inputs() -> tuple[pl.DataFrame, pl.DataFrame]:
    mon1, mon2, mon3 = dt.date(2026, 11, 2), dt.date(2026, 11, 9), dt.date(2026, 11, 16)
    visits = pl.DataFrame(
        {
            "id": ["A1", "A2", "A3", "A4", "A5", "A6", "A7"],
            "week": [mon1, mon1, mon1, mon3, mon1, mon3, mon1],
            "outcome": [
                "attended",
                "cancelled",
                "attended",
                "upcoming",
                "did not attend",
                "attended",
                "attended",
            ],
        }
    )
    people = pl.DataFrame(
        {
            "appointment_id": ["A1", "A2", "A3", "A4", "A5", "A6", "A7"],
            # A3 is PR-1 at a second clinic (role PR-1b): still one practitioner
            "role_id": ["PR-1", "PR-1", "PR-1b", "PR-1", "PR-2", "PR-3", None],
            "practitioner_id": ["PR-1", "PR-1", "PR-1", "PR-1", "PR-2", "PR-3", None],
            "practitioner_name": [
                "Ana Kim",
                "Ana Kim",
                "Ana Kim",
                "Ana Kim",
                "Ben Lee",
                "Ben Lee",
                None,
            ],
        }
    )
    assert mon2 not in visits["week"].to_list()
    return visits, people


def test_weekly_counts_are_per_practitioner_name_without_cancelled() -> None:
    visits, people = _week_inputs()
    out = analysis.appointments_per_practitioner_week(visits, people)
    assert out.columns == ["practitioner", "practitioner_id", "week", "iso_week", "appointments"]
    assert out.select("practitioner", "week", "iso_week", "appointments").rows() == [
        ("(no practitioner)", dt.date(2026, 11, 2), "2026-W45", 1),
        ("Ana Kim", dt.date(2026, 11, 2), "2026-W45", 2),  # A2 cancelled, A3 via a second role
        ("Ana Kim", dt.date(2026, 11, 16), "2026-W47", 1),
        # two practitioners share a name: their ids keep them apart
        ("Ben Lee (PR-2)", dt.date(2026, 11, 2), "2026-W45", 1),
        ("Ben Lee (PR-3)", dt.date(2026, 11, 16), "2026-W47", 1),
    ]


def test_weekly_counts_can_keep_cancelled_and_fill_empty_weeks_with_zero() -> None:
    visits, people = _week_inputs()
    out = analysis.appointments_per_practitioner_week(
        visits, people, exclude_outcomes=(), fill_weeks=True
    )
    ana = out.filter(pl.col("practitioner") == "Ana Kim")
    assert ana.select("week", "appointments").rows() == [
        (dt.date(2026, 11, 2), 3),
        (dt.date(2026, 11, 9), 0),
        (dt.date(2026, 11, 16), 1),
    ]
    assert out.height == 4 * 3  # every practitioner label in every week
    assert out["appointments"].sum() == visits.height


def test_weekly_counts_of_nothing_are_an_empty_frame() -> None:
    visits, people = _week_inputs()
    out = analysis.appointments_per_practitioner_week(
        visits.filter(pl.col("outcome") == "cancelled"), people, fill_weeks=True
    )
    assert out.height == 0
    assert out.columns == ["practitioner", "practitioner_id", "week", "iso_week", "appointments"]


# invoice_reconciliation ------------------------------------------------------------------------


def _invoices() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": ["I1", "I2", "I3", "I4", "I1"],
            "status": ["issued", "issued", "active", "issued", "issued"],
            "total_net_value": [110.0, 100.0, 50.0, None, 110.0],
            "total_gross_value": [121.0, 100.0, 50.0, None, 121.0],
            "total_gross_currency": ["AUD", "AUD", "AUD", "AUD", "AUD"],
        }
    )


def _invoice_lines() -> tuple[pl.DataFrame, pl.DataFrame]:
    lines = pl.DataFrame(
        {
            "id": ["L1", "L2", "L3", "L4", "L5", "L6"],
            "invoice_id": ["/main/Invoice/I1", "I1", "I2", "I4", "I9", None],
            "quantity": [1.0, 1.0, 2.0, 1.0, 1.0, 1.0],
            "status": [None, "voided", None, None, None, None],
        },
        schema_overrides={"status": pl.String},
    )
    components = pl.DataFrame(
        {
            "invoice_line_id": ["L1", "L1", "L2", "L3", "L4", "L5", "L6"],
            "type": ["base", "tax", "base", "base", "base", "base", "base"],
            "amount_value": [100.0, 11.0, 10.0, 45.0, 20.0, 5.0, 7.0],
            "amount_currency": ["AUD"] * 7,
        }
    )
    return lines, components


def test_reconciliation_compares_line_sums_with_both_totals_and_reports_orphans() -> None:
    lines, components = _invoice_lines()
    out = analysis.invoice_reconciliation(_invoices(), lines, components)
    rows = {r["invoice_id"]: r for r in out.iter_rows(named=True)}
    assert out["invoice_id"].to_list() == ["I1", "I2", "I3", "I4", "I9", None]
    # I1: 100 + 11 tax + 10 voided = 121, as the mock counts every line
    assert rows["I1"]["lines_value"] == pytest.approx(121.0)
    assert rows["I1"]["gross_gap"] == 0.0
    assert rows["I1"]["net_gap"] == pytest.approx(-11.0)  # a totalNet without tax shows it
    assert rows["I1"]["lines_tax"] == pytest.approx(11.0)
    assert rows["I1"]["finding"] == "gap"
    assert rows["I2"]["lines_value"] == pytest.approx(90.0)
    assert rows["I2"]["gross_gap"] == pytest.approx(10.0)
    assert (rows["I2"]["finding"], rows["I2"]["reconciled"]) == ("gap", False)
    assert (rows["I3"]["lines"], rows["I3"]["finding"]) == (0, "no lines")
    assert rows["I3"]["gross_gap"] == pytest.approx(50.0)
    assert rows["I4"]["finding"] == "no total"
    assert rows["I9"]["finding"] == "invoice not found"
    assert rows["I9"]["lines_value"] == pytest.approx(5.0)
    assert rows[None]["finding"] == "line without invoice"
    assert out["lines"].sum() == lines.height  # every line is in exactly one row


def test_reconciliation_can_leave_voided_lines_out_and_then_matches() -> None:
    lines, components = _invoice_lines()
    invoices = _invoices().with_columns(
        pl.when(pl.col("id") == "I1")
        .then(111.0)
        .otherwise(pl.col("total_gross_value"))
        .alias("total_gross_value"),
        pl.when(pl.col("id") == "I1")
        .then(111.0)
        .otherwise(pl.col("total_net_value"))
        .alias("total_net_value"),
    )
    out = analysis.invoice_reconciliation(invoices, lines, components, exclude_statuses=("voided",))
    i1 = out.filter(pl.col("invoice_id") == "I1").row(0, named=True)
    assert i1["lines_value"] == pytest.approx(111.0)
    assert i1["excluded_value"] == pytest.approx(10.0)
    assert (i1["gross_gap"], i1["net_gap"], i1["finding"], i1["reconciled"]) == (
        0.0,
        0.0,
        "ok",
        True,
    )


def test_reconciliation_flags_an_invoice_in_another_currency_than_its_lines() -> None:
    lines, components = _invoice_lines()
    invoices = pl.DataFrame(
        {
            "id": ["I2"],
            "total_net_value": [90.0],
            "total_gross_value": [90.0],
            "total_gross_currency": ["NZD"],
        }
    )
    out = analysis.invoice_reconciliation(invoices, lines, components)
    assert out.filter(pl.col("invoice_id") == "I2")["finding"].to_list() == ["currency differs"]


def test_reconciliation_gap_is_within_tolerance_of_float_sums() -> None:
    lines = pl.DataFrame(
        {
            "id": ["L1", "L2", "L3"],
            "invoice_id": ["I1"] * 3,
            "quantity": [1.0] * 3,
            "status": [None] * 3,
        },
        schema_overrides={"status": pl.String},
    )
    components = pl.DataFrame(
        {
            "invoice_line_id": ["L1", "L2", "L3"],
            "type": ["base"] * 3,
            "amount_value": [0.1, 0.2, 0.3],
            "amount_currency": ["AUD"] * 3,
        }
    )
    invoices = pl.DataFrame({"id": ["I1"], "total_net_value": [0.6], "total_gross_value": [0.6]})
    out = analysis.invoice_reconciliation(invoices, lines, components).row(0, named=True)
    assert (out["gross_gap"], out["finding"]) == (0.0, "ok")


def test_reconciliation_refuses_a_line_priced_in_two_currencies() -> None:
    lines, components = _invoice_lines()
    mixed = components.with_columns(
        pl.when(pl.col("type") == "tax")
        .then(pl.lit("NZD"))
        .otherwise("amount_currency")
        .alias("amount_currency")
    )
    with pytest.raises(MixedCurrencyError):
        analysis.invoice_reconciliation(_invoices(), lines, mixed)


# referral_types and fee_names -------------------------------------------------------------------


def test_referral_types_join_by_name_prefer_active_and_keep_unknown_types() -> None:
    referrals = pl.DataFrame(
        {
            "id": ["R1", "R2", "R3", "R4", "R5"],
            "referral_definition": [
                "NDIS service agreement",
                " Mental Health Treatment Plan ",
                "Unknown plan",
                None,
                "/main/ReferralDefinition/505",
            ],
        }
    )
    definitions = pl.DataFrame(
        {
            "id": ["500", "504", "502", "505"],
            "name": [
                "NDIS service agreement",
                "NDIS service agreement",
                "Mental Health Treatment Plan",
                "Private health referral",
            ],
            "active": [False, True, True, True],
            "funder_id": ["FD-1", "FD-3", "FD-1", "FD-4"],
            "limit_quantity": [1, 20, 10, 8],
        }
    )
    out = analysis.referral_types(referrals, definitions)
    assert out.columns == [
        "id",
        "referral_definition",
        "definition_id",
        "definition_active",
        "definition_funder_id",
        "definition_limit_quantity",
    ]
    assert out.select(
        "id", "definition_id", "definition_funder_id", "definition_limit_quantity"
    ).rows() == [
        ("R1", "504", "FD-3", 20),  # the active one of two with the same name
        ("R2", "502", "FD-1", 10),  # spaces around the name are ignored
        ("R3", None, None, None),
        ("R4", None, None, None),
        ("R5", "505", "FD-4", 8),  # a reference with no display matches by id
    ]


def test_fee_names_read_the_canonical_definition_and_keep_unknown_lines() -> None:
    lines = pl.DataFrame(
        {
            "id": ["L1", "L2", "L3"],
            "definition": ["/main/ChargeItemDefinition/9001", "9002|3", None],
        }
    )
    fees = pl.DataFrame({"id": ["9001"], "title": ["Initial consultation"]})
    assert analysis.fee_names(lines, fees).rows() == [
        ("L1", "9001", "Initial consultation", None),
        ("L2", "9002", None, None),
        ("L3", None, None, None),
    ]


# input checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "frame", "column"),
    [
        (
            lambda: analysis.practitioner_names(_roles().drop("organization_id"), _practitioners()),
            "roles",
            "organization_id",
        ),
        (
            lambda: analysis.practitioner_names(_roles(), pl.DataFrame({"id": ["PR-1"]})),
            "practitioners",
            "name_given",
        ),
        (
            lambda: analysis.practitioner_names(
                _roles(), _practitioners(), _organizations().drop("name")
            ),
            "organizations",
            "name",
        ),
        (
            lambda: analysis.appointment_practitioners(
                pl.DataFrame({"id": ["A1"]}),
                _participants().drop("actor_type"),
                _roles(),
                _practitioners(),
            ),
            "participants",
            "actor_type",
        ),
        (
            lambda: analysis.service_names(
                pl.DataFrame({"appointment": ["A1"]}),
                pl.DataFrame({"appointment_id": [], "supporting_information_id": []}),
                pl.DataFrame({"id": [], "name": []}),
            ),
            "appointments",
            "id",
        ),
        (
            lambda: analysis.appointments_per_practitioner_week(
                _week_inputs()[0].drop("outcome"), _week_inputs()[1]
            ),
            "visits",
            "outcome",
        ),
        (
            lambda: analysis.invoice_reconciliation(
                _invoices().drop("total_gross_value"), *_invoice_lines()
            ),
            "invoices",
            "total_gross_value",
        ),
        (
            lambda: analysis.invoice_reconciliation(
                _invoices(), _invoice_lines()[0].drop("invoice_id"), _invoice_lines()[1]
            ),
            "invoice_lines",
            "invoice_id",
        ),
        (
            lambda: analysis.referral_types(
                pl.DataFrame({"id": ["R1"]}), pl.DataFrame({"id": ["1"], "name": ["x"]})
            ),
            "referrals",
            "referral_definition",
        ),
        (
            lambda: analysis.fee_names(
                pl.DataFrame({"id": ["L1"], "definition": ["x"]}), pl.DataFrame({"id": ["1"]})
            ),
            "charge_items",
            "title",
        ),
    ],
)
def test_a_missing_column_is_a_typed_error_naming_the_frame_and_column(
    call: object, frame: str, column: str
) -> None:
    with pytest.raises(MissingColumnError) as caught:
        call()  # type: ignore[operator]
    err = caught.value
    assert isinstance(err, PmtkError) and isinstance(err, ValueError)
    assert err.frame == frame
    assert column in err.missing
    assert f"the {frame} frame has no column" in str(err)
    assert repr(column) in str(err)


def test_visits_without_outcome_are_fine_when_nothing_is_excluded() -> None:
    visits, people = _week_inputs()
    out = analysis.appointments_per_practitioner_week(
        visits.drop("outcome"), people, exclude_outcomes=()
    )
    assert out["appointments"].sum() == visits.height


def test_a_lazy_frame_is_refused_with_a_clear_message() -> None:
    with pytest.raises(TypeError, match="collect a LazyFrame first"):
        analysis.practitioner_names(_roles().lazy(), _practitioners())  # type: ignore[arg-type]
