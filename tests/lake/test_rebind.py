"""A rebind gives a lake's name to another deployment and leaves nothing of the old one.

What the lake holds is read without pmtk (Polars' ``read_delta``, the files on disk and
the Delta log's own text); what a deployment holds, over plain HTTP. A rebind killed
at each of its steps (``os._exit``: no cleanup, no lease given back) is finished by
running it again, and at no point can the new deployment's records land beside the
old one's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from tests.conftest import api_client, toolkit_client
from tests.lake.conftest import delta_rows, ground_truth
from toolkit import lake
from toolkit.lake.commit import key_of
from toolkit.lake.location import LakeError
from toolkit.mock import serve
from toolkit.store.identity import WrongDeployment

RESOURCES = ["Organization", "Practitioner"]


@pytest.fixture
def three_mocks() -> Iterator[tuple[Any, Any, Any]]:
    with (
        serve(seed=0, scale="small") as a,
        serve(seed=1, scale="small") as b,
        serve(seed=2, scale="small") as c,
    ):
        yield a, b, c


def _sync(dep: Any, where: Path, name: str, **kwargs: Any) -> lake.LakeSyncSummary:
    with toolkit_client(dep) as client:
        return lake.sync(client, where, deployment=name, resources=RESOURCES, **kwargs)


def _names(dep: Any) -> set[str]:
    """The organisations' names, read over plain HTTP."""
    with api_client(dep) as api:
        bundle = api.get("Organization?_count=100").raise_for_status().json()
    return {e["resource"]["name"] for e in bundle.get("entry", []) if e["resource"].get("name")}


def _files_of(where: Path, name: str) -> list[Path]:
    return sorted(where.glob(f"tables/*/deployment={name}/*.parquet"))


def _log_text(where: Path) -> str:
    return "".join(p.read_text() for p in where.glob("tables/*/_delta_log/*.json"))


def _logged_values(where: Path) -> dict[str, set[str]]:
    """Per table, the columns whose values the Delta log keeps (min and max statistics)."""
    out: dict[str, set[str]] = {}
    for log in where.glob("tables/*/_delta_log/*.json"):
        for line in log.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                stats = json.loads(add["stats"])
                kept = {*stats.get("minValues", {}), *stats.get("maxValues", {})}
                out.setdefault(log.parts[-3], set()).update(kept)
    return out


def _matches(where: Path, name: str, dep: Any) -> None:
    for resource in RESOURCES:
        truth = ground_truth(dep, resource)
        raw = delta_rows(where, f"_raw_{resource}", name)
        assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == truth, resource
        main = delta_rows(where, resource, name)
        assert sorted(main["id"].to_list()) == sorted(truth), resource


def test_a_rebind_leaves_no_row_file_or_value_of_the_old_deployment(
    tmp_path: Path, three_mocks: Any
) -> None:
    a, b, c = three_mocks
    where = tmp_path / "lake"
    _sync(a, where, "north")
    _sync(b, where, "south")
    south_before = {t: delta_rows(where, t, "south") for t in ("Organization", "_raw_Organization")}
    only_a = _names(a) - _names(b) - _names(c)
    assert only_a and _files_of(where, "north")
    # Without --rebind the name stays the old deployment's: nothing is written.
    with pytest.raises(WrongDeployment):
        _sync(c, where, "north")

    before = DeltaTable(str(where / "_pmtk" / "state")).version()
    with toolkit_client(c) as client:
        done = lake.rebind(where, "north", client)
    assert done.done and sum(done.rows.values()) > 0

    # No row through Delta, no file on disk, no value of the old deployment in the log.
    for table in ("Organization", "_raw_Organization", "Practitioner", "_raw_Practitioner"):
        assert delta_rows(where, table, "north").height == 0, table
    assert _files_of(where, "north") == []
    log = _log_text(where)
    assert [n for n in only_a if n in log] == []
    # The log keeps no value but each record's key, of any deployment, at any version.
    logged = _logged_values(where)
    assert logged and all(
        cols <= {key_of(t.removeprefix("_raw_").split("_")[0].title(), t)}
        for t, cols in logged.items()
    ), logged
    # Through pmtk the name holds nothing until the new deployment's first sync, and a
    # look back before the rebind says the files are gone (no traceback, no old row).
    assert lake.load("Organization", where, deployment="north").height == 0
    with pytest.raises(LakeError, match="is gone from storage"):
        lake.load("Organization", where, deployment="north", as_of=before)
    # The other deployment is untouched.
    for table, frame in south_before.items():
        assert delta_rows(where, table, "south").sort("id").equals(frame.sort("id")), table
    # The new deployment's sync reads everything; its rows alone are under the name.
    _sync(c, where, "north")
    _matches(where, "north", c)
    _matches(where, "south", b)
    assert "rebind" in lake.history(where, "north")["kind"].to_list()
    # A second rebind to the same deployment has nothing to do.
    with toolkit_client(c) as client:
        assert not lake.rebind(where, "north", client).done


def test_sync_with_rebind_gives_the_name_and_reads_everything(
    tmp_path: Path, three_mocks: Any
) -> None:
    a, _, c = three_mocks
    where = tmp_path / "lake"
    _sync(a, where, "north")
    summary = _sync(c, where, "north", rebind=True)
    assert summary["Organization"].upserted == len(ground_truth(c, "Organization"))
    _matches(where, "north", c)
