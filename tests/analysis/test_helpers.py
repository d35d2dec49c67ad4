"""Small helpers the notebooks share: as-of moment, names, role look-ups, report tables."""

from __future__ import annotations

import datetime as dt

import polars as pl

from toolkit import analysis


def test_data_as_of_is_latest_last_updated_across_frames() -> None:
    a = pl.DataFrame({"last_updated": [dt.datetime(2026, 10, 1, tzinfo=dt.UTC)]})
    b = pl.DataFrame({"last_updated": [dt.datetime(2026, 10, 31, 23, tzinfo=dt.UTC), None]})
    now = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    assert analysis.data_as_of(a, b, now=now) == dt.datetime(2026, 10, 31, 23, tzinfo=dt.UTC)


def test_data_as_of_never_runs_ahead_of_now_and_falls_back_to_now() -> None:
    future = pl.DataFrame({"last_updated": [dt.datetime(2030, 1, 1, tzinfo=dt.UTC)]})
    now = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    assert analysis.data_as_of(future, now=now) == now
    assert analysis.data_as_of(pl.DataFrame({"x": [1]}), now=now) == now


def test_practitioner_names_join_prefix_given_family_and_fall_back_to_id() -> None:
    df = pl.DataFrame(
        {
            "id": ["PR-1", "PR-2"],
            "name_prefix": [["Dr"], None],
            "name_given": [["Zoë"], None],
            "name_family": ["Nguyễn", None],
        },
        schema_overrides={"name_prefix": pl.List(pl.String), "name_given": pl.List(pl.String)},
    )
    assert analysis.practitioner_names(df).rows() == [("PR-1", "Dr Zoë Nguyễn"), ("PR-2", "PR-2")]


def test_role_organizations_reads_reference_keys() -> None:
    roles = [
        {
            "id": "PR-1",
            "practitioner": {"reference": "/main/Practitioner/PR-1"},
            "organization": {"reference": "/main/Organization/CL-9"},
        },
        {"id": "EP-2"},
    ]
    assert analysis.role_organizations(roles).rows() == [
        ("PR-1", "PR-1", "CL-9"),
        ("EP-2", None, None),
    ]


def test_role_organizations_of_nothing_is_an_empty_typed_frame() -> None:
    out = analysis.role_organizations([])
    assert out.is_empty()
    assert out.columns == ["id", "practitioner_id", "organization_id"]
