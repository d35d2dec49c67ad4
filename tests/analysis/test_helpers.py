"""Small helpers the notebooks share: as-of moment, names, role look-ups, report tables."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from toolkit import analysis
from toolkit.errors import MethodNotAllowed, NotFound


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


def test_practitioner_display_names_join_prefix_given_family_and_leave_no_name_null() -> None:
    df = pl.DataFrame(
        {
            "id": ["PR-1", "PR-2"],
            "name_prefix": [["Dr"], None],
            "name_given": [["Zoë"], None],
            "name_family": ["Nguyễn", None],
        },
        schema_overrides={"name_prefix": pl.List(pl.String), "name_given": pl.List(pl.String)},
    )
    assert analysis.practitioner_display_names(df).rows() == [
        ("PR-1", "Dr Zoë Nguyễn"),
        ("PR-2", None),
    ]


def test_role_organizations_reads_reference_keys() -> None:
    roles: list[dict[str, Any]] = [
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


class _FakeReader:
    """Serves roles from a dict; answers 404 for unknown ids, or 405 for everything."""

    def __init__(self, roles: dict[str, dict[str, Any]], *, refuse: bool = False) -> None:
        self.roles = roles
        self.refuse = refuse
        self.asked: list[str] = []

    def read(self, resource_type: str, record_id: str) -> dict[str, Any]:
        self.asked.append(record_id)
        url = f"/main/{resource_type}/{record_id}"
        if self.refuse:
            raise MethodNotAllowed(405, method="GET", url=url)
        if record_id not in self.roles:
            raise NotFound(404, method="GET", url=url)
        return self.roles[record_id]


def test_read_roles_skips_missing_roles_and_deduplicates_ids() -> None:
    reader = _FakeReader(
        {"EP-2": {"id": "EP-2", "organization": {"reference": "/main/Organization/SP-1"}}}
    )
    out = analysis.read_roles(reader, ["EP-2", "EP-1", "EP-2", None])  # type: ignore[list-item]
    assert out.rows() == [("EP-2", None, "SP-1")]
    assert reader.asked == ["EP-1", "EP-2"]


def test_read_roles_stops_at_the_first_refusal_other_than_not_found() -> None:
    reader = _FakeReader({}, refuse=True)
    out = analysis.read_roles(reader, ["EP-1", "EP-2", "EP-3"])
    assert out.is_empty()
    assert reader.asked == ["EP-1"]


def test_top_n_keeps_the_largest_groups_by_weight_and_relabels_the_rest() -> None:
    df = pl.DataFrame({"who": ["a", "b", "c", "d"], "value": [5.0, 1.0, 9.0, 1.0]})
    out = analysis.top_n(df, "who", n=2, weight="value", other="others")
    assert out["who"].to_list() == ["a", "others", "c", "others"]


def test_top_n_breaks_ties_by_label() -> None:
    df = pl.DataFrame({"who": ["b", "a", "c"]})
    assert analysis.top_n(df, "who", n=1)["who"].to_list() == ["Other", "a", "Other"]
