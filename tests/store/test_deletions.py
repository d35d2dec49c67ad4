"""Deleted records leave the store: Patient through $export-ids, every type with reconcile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import api_client
from toolkit import catalogue
from toolkit.cli import app
from toolkit.errors import MalformedPage
from toolkit.listing import exported_ids
from toolkit.mock import serve
from toolkit.store import load, read_manifest, sync

RATE = 100_000


@pytest.fixture
def dep() -> Iterator[Any]:
    """A mock of its own: these tests delete records."""
    with serve(rate_limit=RATE, test_controls=True) as deployment:
        yield deployment


def _ids(store: Path, resource: str, table: str | None = None) -> set[str]:
    frame = load(resource, store, table=table)
    assert isinstance(frame, pl.DataFrame)
    key = "id" if table is None else frame.columns[0]
    return set(frame[key].to_list())


def test_the_mock_lists_every_patient_id_and_forgets_a_deleted_one(dep: Any) -> None:
    with api_client(dep) as client:
        before = client.get("Patient/$export-ids").json()
        total = client.get("Patient", params={"_count": 1}).json()["total"]
        first = _exported(before["parameter"][0])
        dep.delete("Patient", [first])
        after = client.get("Patient/$export-ids").json()
    assert before["resourceType"] == "Parameters" and len(before["parameter"]) == total
    assert [_exported(p) for p in after["parameter"]] == [
        _exported(p) for p in before["parameter"][1:]
    ]


def _exported(parameter: dict[str, Any]) -> str:
    """The id of one ``$export-ids`` parameter: a live mock's ``valueReference`` (facts,
    client-observed), a spec one's ``valueId``."""
    if "valueReference" in parameter:
        reference: str = parameter["valueReference"]["reference"]
        return reference.rsplit("/", 1)[-1]
    value: str = parameter["valueId"]
    return value


def test_an_incremental_sync_drops_a_deleted_patient_in_one_request(
    dep: Any, new_client: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    with new_client(dep) as client:
        sync(client, store, resources=["Patient"], progress=False)
        stored = _ids(store, "Patient")
        gone = sorted(stored)[3]
        children = _ids(store, "Patient", "patient_address")
        assert gone in children
        dep.delete("Patient", [gone])
        result = sync(client, store, resources=["Patient"], progress=False)["Patient"]
    assert result.mode == "incremental" and result.deleted == 1
    assert result.requests == 2  # the incremental list page and $export-ids
    assert _ids(store, "Patient") == stored - {gone}
    assert gone not in _ids(store, "Patient", "patient_address")
    assert (
        read_manifest(store)["resources"]["Patient"]["tables"]["Patient"]["rows"] == len(stored) - 1
    )


def test_reconcile_walks_the_ids_and_drops_what_the_deployment_no_longer_has(
    dep: Any, new_client: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    with new_client(dep) as client:
        sync(client, store, resources=["Referral"], progress=False)
        stored = _ids(store, "Referral")
        gone = sorted(stored)[:2]
        dep.delete("Referral", gone)
        plain = sync(client, store, resources=["Referral"], progress=False)["Referral"]
        assert plain.deleted == 0 and set(gone) <= _ids(store, "Referral")  # never seen
        pages = -(-(len(stored) - 2) // catalogue.MAX_PAGE_SIZE)
        result = sync(client, store, resources=["Referral"], progress=False, reconcile=True)
    reconciled = result["Referral"]
    assert reconciled.deleted == 2
    assert reconciled.requests == 1 + pages  # the incremental page, then the id walk
    assert _ids(store, "Referral") == stored - set(gone)


def test_pmtk_sync_reconcile_reports_the_deleted_records(dep: Any, tmp_path: Path) -> None:
    store = tmp_path / "cli"
    args = ["sync", "--out", str(store), "-r", "Coverage"]
    args += ["--base-url", dep.base_url, "--client-id", dep.client_id]
    env = {"PM_CLIENT_SECRET": dep.client_secret, "COLUMNS": "200"}
    runner = CliRunner()
    assert runner.invoke(app, args, env=env).exit_code == 0
    gone = sorted(_ids(store, "Coverage"))[0]
    dep.delete("Coverage", [gone])
    result = runner.invoke(app, [*args, "--reconcile"], env=env)
    assert result.exit_code == 0, result.output
    assert "deleted" in result.output
    assert gone not in _ids(store, "Coverage")


@pytest.mark.parametrize(
    ("parameter", "expected"),
    [
        ({"name": "id", "valueId": "100001"}, {"100001"}),
        ({"name": "patient", "valueString": "100002"}, {"100002"}),
        ({"name": "patient", "valueReference": {"reference": "/main/Patient/7"}}, {"7"}),
    ],
)
def test_export_ids_reads_each_form_of_id(parameter: dict[str, Any], expected: set[str]) -> None:
    data = {"resourceType": "Parameters", "parameter": [parameter]}
    assert exported_ids("Patient", "u", data) == expected


@pytest.mark.parametrize(
    "data",
    [
        {"resourceType": "Bundle"},
        {"resourceType": "Parameters", "parameter": [{"name": "id"}]},
        {"resourceType": "Parameters", "parameter": ["100001"]},
    ],
)
def test_an_export_that_is_not_a_whole_list_of_ids_is_refused(data: Any) -> None:
    with pytest.raises(MalformedPage):
        exported_ids("Patient", "https://x.test/main/Patient/$export-ids", data)
