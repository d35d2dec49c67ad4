"""Referral utilisation logic on small hand-made frames."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from toolkit import analysis

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def _referrals(**overrides: list[object]) -> pl.DataFrame:
    data: dict[str, list[object]] = {
        "id": ["R1", "R2", "R3"],
        "subject_id": ["/main/Patient/P1", "/main/Patient/P2", "/main/Patient/P3"],
        "performer_id": ["/main/Practitioner/PR-1", "/main/Practitioner/PR-1", "PR-2"],
        "requester_id": [
            "/main/PractitionerRole/EP-1",
            "/main/PractitionerRole/EP-2",
            "/main/PractitionerRole/EP-9",
        ],
        "coverage_id": ["/main/Coverage/C1", "/main/Coverage/C2", None],
        "period_start": [dt.date(2026, 1, 1), dt.date(2026, 6, 1), dt.date(2026, 1, 1)],
        "period_end": [dt.date(2026, 12, 31), dt.date(2026, 12, 1), dt.date(2027, 6, 1)],
        "active": [True, True, False],
        "limit_quantity": [10, 5, None],
        "limit_quantity_offset": [2, 0, None],
        "limit_quantity_used": [6, 1, None],
        "limit_money_value": [1000.0, None, 500.0],
        "limit_money_currency": ["AUD", None, "AUD"],
        "limit_money_used": [100.0, None, 450.0],
        "include_cancelled_appointment": [False, True, False],
    }
    data.update(overrides)
    return pl.DataFrame(data)


def test_quantity_share_counts_offset_as_used() -> None:
    out = analysis.referral_utilisation(_referrals())
    assert out["quantity_share"].to_list() == [pytest.approx(0.8), pytest.approx(0.2), None]


def test_money_share_is_used_over_limit_and_null_without_limit() -> None:
    out = analysis.referral_utilisation(_referrals())
    assert out["money_share"].to_list() == [pytest.approx(0.1), None, pytest.approx(0.9)]


def test_share_is_the_larger_of_quantity_and_money() -> None:
    out = analysis.referral_utilisation(_referrals())
    assert out["share"].to_list() == [pytest.approx(0.8), pytest.approx(0.2), pytest.approx(0.9)]
    assert out["quantity_remaining"].to_list() == [2, 4, None]


def test_zero_quantity_limit_gives_no_share_instead_of_infinity() -> None:
    out = analysis.referral_utilisation(_referrals(limit_quantity=[0, 5, None]))
    assert out["quantity_share"][0] is None


def test_referrals_needing_attention_flags_nearly_used_and_expiring_active_only() -> None:
    util = analysis.referral_utilisation(_referrals())
    flagged = analysis.referrals_needing_attention(util, today=dt.date(2026, 11, 21))
    # R1: 80 % used (threshold inclusive); R2: ends in 10 days; R3: 90 % but inactive.
    assert flagged["id"].to_list() == ["R2", "R1"]
    assert flagged["reason"].to_list() == ["ends in 10 days", "80% used"]


def test_referral_that_already_ended_is_not_expiring() -> None:
    util = analysis.referral_utilisation(
        _referrals(limit_quantity_used=[0, 0, None], period_end=[None, dt.date(2026, 11, 1), None])
    )
    flagged = analysis.referrals_needing_attention(util, today=dt.date(2026, 11, 21))
    assert flagged.is_empty()


def _visits() -> pl.DataFrame:
    appointment = pl.DataFrame(
        {
            "id": ["A1", "A2", "A3", "A4", "A5", "A6"],
            "start": [
                "2026-02-01T09:00:00Z",
                "2026-03-01T09:00:00Z",
                "2026-04-01T09:00:00Z",
                "2025-12-01T09:00:00Z",  # before R1's period
                "2026-12-01T09:00:00Z",  # future
                "2026-07-01T09:00:00Z",  # R2's patient
            ],
            "created": ["2026-01-01T09:00:00Z"] * 6,
        }
    )
    statuses = ["attended", "noshow", "cancelled", "attended", "booked", "cancelled"]
    patients = ["P1", "P1", "P1", "P1", "P1", "P2"]
    participant = pl.DataFrame(
        {
            "appointment_id": [a for a in appointment["id"] for _ in range(2)],
            "actor_id": [
                x for p in patients for x in ("/main/PractitionerRole/PR-1", f"/main/Patient/{p}")
            ],
            "actor_type": ["PractitionerRole", "Patient"] * 6,
            "status": [x for s in statuses for x in ("booked", s)],
            "invoice_id": [None] * 12,
        },
        schema_overrides={"invoice_id": pl.String},
    )
    return analysis.appointment_visits(appointment, participant, now=NOW, tz="UTC")


def test_recount_matches_patient_practitioner_and_period() -> None:
    out = analysis.referral_recount(_referrals(), _visits()).sort("id")
    r1 = out.row(0, named=True)
    assert (r1["attended"], r1["did_not_attend"], r1["cancelled"]) == (1, 1, 1)
    assert r1["used_excluding_cancelled"] == 2
    assert r1["used_including_cancelled"] == 3
    assert r1["recounted_used"] == 2  # R1 does not include cancelled appointments
    assert r1["share_excluding_cancelled"] == pytest.approx((2 + 2) / 10)
    assert r1["share_including_cancelled"] == pytest.approx((3 + 2) / 10)
    assert (r1["beyond_limit"], r1["covered_used"]) == (0, 2)


def test_recount_past_the_limit_is_reported_beyond_limit_not_covered() -> None:
    small = _referrals(limit_quantity=[3, 5, None])
    r1 = analysis.referral_recount(small, _visits()).sort("id").row(0, named=True)
    # 2 recounted + 2 offset against a limit of 3: one unit is past the limit.
    assert (r1["recounted_used"], r1["beyond_limit"], r1["covered_used"]) == (2, 1, 1)


def test_recount_includes_cancelled_when_the_referral_says_so() -> None:
    out = analysis.referral_recount(_referrals(), _visits()).sort("id")
    r2 = out.row(1, named=True)
    assert r2["cancelled"] == 1
    assert r2["recounted_used"] == 1
    assert out.row(2, named=True)["recounted_used"] == 0


def test_referring_practice_resolves_role_to_sp_organization_or_falls_back() -> None:
    roles = pl.DataFrame(
        {
            "id": ["EP-1", "EP-2"],
            "organization_id": ["/main/Organization/SP-7", "/main/Organization/CL-1"],
        }
    )
    orgs = pl.DataFrame({"id": ["SP-7"], "name": ["Harbour GP"]})
    out = analysis.referring_practice(_referrals(), roles, orgs)
    assert out["referring_practice"].to_list() == ["Harbour GP", "EP-2", "EP-9"]
    assert out["practice_id"].to_list() == ["SP-7", None, None]


def test_referring_practice_without_roles_groups_by_requester() -> None:
    out = analysis.referring_practice(_referrals())
    assert out["referring_practice"].to_list() == ["EP-1", "EP-2", "EP-9"]


def test_referral_funder_follows_coverage_payor_to_funder_name() -> None:
    coverage = pl.DataFrame(
        {
            "id": ["C1", "C2"],
            "payor_id": ["/main/Organization/FD-1", "/main/Patient/P2"],
        }
    )
    orgs = pl.DataFrame({"id": ["FD-1"], "name": ["Medicare"]})
    out = analysis.referral_funder(_referrals(), coverage, orgs)
    assert out["funder"].to_list() == ["Medicare", "(no funder)", "(no funder)"]
    assert out["funder_id"].to_list() == ["FD-1", None, None]


def test_utilisation_summary_pools_units_across_referrals() -> None:
    util = analysis.referral_utilisation(_referrals(requester_id=["a", "a", "b"]))
    out = analysis.utilisation_summary(util, "requester_id")
    first = out.row(0, named=True)
    assert first["requester_id"] == "a"
    assert first["referrals"] == 2
    assert first["units_limit"] == 15
    assert first["units_used"] == 9
    assert first["quantity_share"] == pytest.approx(9 / 15)
    assert out.row(1, named=True)["money_share"] == pytest.approx(0.9)


def test_reference_id_keeps_bare_ids() -> None:
    df = pl.DataFrame({"r": ["/main/Organization/FD-3", "FD-4", None]})
    assert df.select(analysis.reference_id("r")).to_series().to_list() == ["FD-3", "FD-4", None]


def test_row_counts_lists_each_table() -> None:
    out = analysis.row_counts({"a": pl.DataFrame({"x": [1, 2, 3]}), "b": pl.DataFrame()})
    assert out.rows() == [("a", 3, 1), ("b", 0, 0)]
