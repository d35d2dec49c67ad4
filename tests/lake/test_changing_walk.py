"""A lake sync while the deployment's records change under its walk.

On a busy deployment a record changed during a list walk moves to the end of the
list: the walk reads it twice (and its recovery, :mod:`toolkit.paging`, reads what
changed once more), so one staged part can hold two versions of one id. The lake's
sync refused the part (``id: field_uniqueness``) and so the whole sync; it now keeps
the newest version of each id within a part, as the store does.

One server is written here from the facts file's paging rules alone (the hostile
suite's ``Changing`` collection), one is pmtk's mock with its touch control.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tests.hostile.conftest import api_app, serve
from tests.hostile.test_changing import Changing, _client
from tests.lake.conftest import ground_truth
from toolkit import lake
from toolkit.client import Client
from toolkit.mock import serve as serve_mock

UA = "pmtk-tests (tests@example.invalid)"


def _read(where: Path, table: str) -> pl.DataFrame:
    """A table of the lake, read by Polars alone."""
    return pl.read_delta(str(where / "tables" / table))


def test_a_record_changed_during_the_walk_is_stored_once_in_its_new_version(
    tmp_path: Path,
) -> None:
    server = Changing(250, victims=["p010", "p020"])
    where = tmp_path / "lake"
    with serve(api_app(server.handle)) as port, _client(port) as client:
        summary = lake.sync(client, where, deployment="busy", resources=["Patient"])
    assert server.fired, "the collection never changed under the walk"
    assert summary["Patient"].status == "ok"
    for table in ("Patient", "_raw_Patient"):
        frame = _read(where, table)
        assert frame.height == 250 == frame["id"].n_unique(), table
    patients = _read(where, "Patient")
    victims = patients.filter(pl.col("id").is_in(["p010", "p020"]))
    assert victims["gender"].to_list() == ["male", "male"]  # the version read last
    loaded = lake.load("Patient", where, deployment="busy")
    assert loaded.height == 250 == loaded["id"].n_unique()


def test_a_full_lake_sync_of_the_mock_while_records_are_touched_stores_each_once(
    tmp_path: Path,
) -> None:
    where = tmp_path / "lake"
    with (
        serve_mock(seed=0, scale="small", test_controls=True) as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, user_agent=UA) as client,
    ):
        lake.sync(client, where, deployment="clinic", resources=["Appointment"])
        order = list(ground_truth(dep, "Appointment"))  # the list's order
        # after page 2 of the walk: one record already read, one ahead of the walk
        dep.touch_after("Appointment", [order[3], order[-5]], after_list_requests=2)
        again = lake.sync(client, where, deployment="clinic", resources=["Appointment"], full=True)
        assert dep.pending_touches() == {"armed": []}  # the touch fired mid-walk
        truth = ground_truth(dep, "Appointment")
    assert again["Appointment"].status == "ok"
    raw = _read(where, "_raw_Appointment")
    assert raw.height == raw["id"].n_unique()
    assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == truth
    main = lake.load("Appointment", where, deployment="clinic")
    assert main.height == len(truth) == main["id"].n_unique()
