"""Sync into the Parquet store against the real mock over loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from toolkit import catalogue, views
from toolkit.errors import TransportError
from toolkit.store import (
    PageProgress,
    StoreError,
    declared_schemas,
    load,
    read_manifest,
    schema_version,
    sync,
)


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    keys = ["id"] if "id" in df.columns else [df.columns[0], "index"]  # child: parent id, index
    return df.sort(keys)


def _assert_same_store(a: Path, b: Path, resource_type: str) -> None:
    for table in declared_schemas(resource_type):
        left = load(resource_type, a, table=table)
        right = load(resource_type, b, table=table)
        assert isinstance(left, pl.DataFrame) and isinstance(right, pl.DataFrame)
        assert left.height == right.height, table
        assert _sorted(left).equals(_sorted(right)), table


# --------------------------------------------------------------------------- full sync


def test_full_sync_stores_as_many_rows_as_the_mock_announces(
    synced: Any, new_client: Any, total_of: Any
) -> None:
    manifest = read_manifest(synced.path)
    with new_client(synced.dep) as client:
        for rt in catalogue.LISTED_RESOURCES:
            expected = total_of(client, rt)
            entry = manifest["resources"][rt]
            assert entry["status"] == "ok"
            assert entry["tables"][rt]["rows"] == expected, rt
            df = load(rt, synced.path)
            assert isinstance(df, pl.DataFrame)
            assert df.height == expected
            assert df["id"].n_unique() == expected, f"{rt} ids are not unique"


def test_full_sync_writes_every_child_table_keyed_by_parent(synced: Any) -> None:
    appointments = load("Appointment", synced.path)
    participants = load("Appointment", synced.path, table="appointment_participant")
    assert isinstance(appointments, pl.DataFrame) and isinstance(participants, pl.DataFrame)
    assert participants.height >= appointments.height  # at least practitioner + patient
    orphans = participants.join(
        appointments.select(pl.col("id").alias("appointment_id")), on="appointment_id", how="anti"
    )
    assert orphans.height == 0
    tables = read_manifest(synced.path)["resources"]["Appointment"]["tables"]
    assert set(tables) == {*declared_schemas("Appointment"), "_raw_Appointment"}
    for table, info in tables.items():
        assert info["path"].startswith(f"{table}/data-"), info
        assert (synced.path / info["path"]).is_file()


def test_manifest_records_high_water_mark_wall_time_rows_and_schema(synced: Any) -> None:
    entry = read_manifest(synced.path)["resources"]["Referral"]
    stored = load("Referral", synced.path)
    assert isinstance(stored, pl.DataFrame)
    assert entry["schema_version"] == schema_version("Referral")
    assert entry["high_water_mark"] is not None
    assert pl.Series([entry["high_water_mark"]]).str.to_datetime(time_zone="UTC").item() == (
        stored["last_updated"].max()
    )
    assert entry["fetched_at"].startswith("20")
    assert entry["mode"] == "full"
    assert not (synced.path / ".staging" / "Referral").exists()


def test_load_returns_the_declared_dtypes_of_every_table(synced: Any) -> None:
    for rt in catalogue.LISTED_RESOURCES:
        for view in views.VIEWS[rt]:
            df = load(rt, synced.path, table=view.name)
            assert isinstance(df, pl.DataFrame)
            assert df.schema == view.schema, view.name
            lazy = load(rt, synced.path, table=view.name, lazy=True)
            assert isinstance(lazy, pl.LazyFrame)
            assert lazy.collect_schema() == view.schema


# --------------------------------------------------------------------------- incremental


def test_resync_with_nothing_changed_costs_one_list_request_per_resource_and_one_export(
    synced: Any, new_client: Any
) -> None:
    dep = synced.dep
    before = {p.name: p.stat().st_mtime_ns for p in synced.path.glob("*/data-*.parquet")}
    dep.reset_rate_limit()
    start = dep.stats()
    with new_client(dep) as client:
        summary = sync(client, synced.path, progress=False)
    end = dep.stats()
    by_path = {
        path: end["requests_by_path"].get(path, 0) - start["requests_by_path"].get(path, 0)
        for path in end["requests_by_path"]
    }
    for rt in catalogue.LISTED_RESOURCES:
        assert by_path.get(f"/main/{rt}", 0) == 1, rt
        assert summary[rt].mode == "incremental"
        assert summary[rt].status == "unchanged"
        assert summary[rt].pages == 1
    token = end["requests_by_path"].get("/main/oauth/token", 0) - start["requests_by_path"].get(
        "/main/oauth/token", 0
    )
    assert token <= 1
    # ... plus one $export-ids per type that has it (Patient), to drop deleted records
    exports = sum(by_path.get(path, 0) for path in catalogue.EXPORT_IDS.values())
    assert exports == len(catalogue.EXPORT_IDS) == 1
    assert end["requests"] - start["requests"] == len(catalogue.LISTED_RESOURCES) + exports + token
    after = {p.name: p.stat().st_mtime_ns for p in synced.path.glob("*/data-*.parquet")}
    assert after == before, "an unchanged resource must not be rewritten"


def test_incremental_sync_picks_up_a_patched_referral_and_keeps_ids_unique(
    tmp_path: Path, new_client: Any
) -> None:
    from toolkit.mock import serve

    store = tmp_path / "store"
    with (
        serve(seed=1, scale="small", rate_limit=100_000, test_controls=True) as dep,
        new_client(dep) as client,
    ):
        sync(client, store, resources=["Referral"], progress=False)
        before = load("Referral", store)
        assert isinstance(before, pl.DataFrame)
        target = before["id"][5]
        dep.advance_clock(5)
        client.patch("Referral", target, {"comment": "changed by the store test"})
        start = dep.stats()["requests_by_path"].get("/main/Referral", 0)
        summary = sync(client, store, resources=["Referral"], progress=False)
        requests = dep.stats()["requests_by_path"].get("/main/Referral", 0) - start
    after = load("Referral", store)
    assert isinstance(after, pl.DataFrame)
    assert summary["Referral"].mode == "incremental"
    assert summary["Referral"].status == "updated"
    assert requests == 1
    assert after.height == before.height
    assert after["id"].n_unique() == after.height
    row = after.filter(pl.col("id") == target)
    assert row["comment"].item() == "changed by the store test"
    assert row["last_updated"].item() > before.filter(pl.col("id") == target)["last_updated"].item()
    untouched = after.filter(pl.col("id") != target).sort("id")
    assert untouched.equals(before.filter(pl.col("id") != target).sort("id"))
    entry = read_manifest(store)["resources"]["Referral"]
    assert entry["high_water_mark"] is not None
    mark = pl.Series([entry["high_water_mark"]]).str.to_datetime(time_zone="UTC").item()
    assert mark == after["last_updated"].max()


def test_changed_view_schema_forces_a_full_sync(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    store = tmp_path / "copy"
    shutil.copytree(synced.path, store)
    manifest = orjson.loads((store / "manifest.json").read_bytes())
    manifest["resources"]["Practitioner"]["schema_version"] = "1-0000000000000000"
    (store / "manifest.json").write_bytes(orjson.dumps(manifest))
    with new_client(synced.dep) as client:
        summary = sync(client, store, resources=["Practitioner", "Organization"], progress=False)
    assert summary["Practitioner"].mode == "full"
    assert summary["Organization"].mode == "incremental"
    entry = read_manifest(store)["resources"]["Practitioner"]
    assert entry["schema_version"] == schema_version("Practitioner")


# --------------------------------------------------------------------------- interruption


class _Interrupt:
    """A progress callback that raises ``KeyboardInterrupt`` after ``n`` staged pages."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen: list[PageProgress] = []

    def __call__(self, event: PageProgress) -> None:
        self.seen.append(event)
        if len(self.seen) == self.n:
            raise KeyboardInterrupt


class _FailingClient:
    """Wraps a client; its page walk dies with a TransportError after ``n`` pages."""

    def __init__(self, client: Any, n: int) -> None:
        self.client = client
        self.n = n

    @property
    def requests_sent(self) -> int:
        return int(self.client.requests_sent)

    def walk(self, resource_type: str, /, **options: Any) -> Any:
        walk = self.client.walk(resource_type, **options)
        n = self.n

        class _Failing:
            summary = walk.summary

            def __iter__(self) -> Iterator[Any]:
                for i, page in enumerate(walk):
                    if i == n:
                        msg = "connection reset (injected by the test)"
                        raise TransportError(msg)
                    yield page

        return _Failing()


def test_interrupted_sync_resumes_and_equals_a_clean_sync(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    store = tmp_path / "store"
    interrupt = _Interrupt(3)
    with new_client(synced.dep) as client:
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=["Appointment"], progress=interrupt)
        state = orjson.loads((store / ".staging" / "Appointment" / "state.json").read_bytes())
        done = interrupt.seen[-1].page
        assert state["pages_done"] == done and state["phase"] == "fetch"
        entry = read_manifest(store)["resources"]["Appointment"]
        assert entry["status"] == "interrupted" and entry["resumable"] is True
        with pytest.raises(StoreError):
            load("Appointment", store)
        summary = sync(client, store, resources=["Appointment"], progress=False)
    full_pages = synced.summary["Appointment"].pages
    assert summary["Appointment"].resumed
    # the resumed walk re-reads the last staged page, and skips those before it
    assert summary["Appointment"].pages == full_pages - (done - 1)
    assert not (store / ".staging" / "Appointment").exists()
    _assert_same_store(store, synced.path, "Appointment")
    df = load("Appointment", store)
    assert isinstance(df, pl.DataFrame)
    assert df["id"].n_unique() == df.height


def test_sync_failing_mid_walk_keeps_the_old_data_and_resumes(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    manifest_before = read_manifest(store)["resources"]["InvoiceLine"]
    old = load("InvoiceLine", store)
    with new_client(synced.dep) as client:
        with pytest.raises(TransportError):
            sync(_FailingClient(client, 4), store, resources=["InvoiceLine"], full=True,
                 progress=False)  # fmt: skip
        entry = read_manifest(store)["resources"]["InvoiceLine"]
        assert entry["status"] == "failed"
        assert entry["tables"] == manifest_before["tables"]
        assert entry["high_water_mark"] == manifest_before["high_water_mark"]
        kept = load("InvoiceLine", store)
        assert isinstance(kept, pl.DataFrame) and isinstance(old, pl.DataFrame)
        assert kept.equals(old)
        summary = sync(client, store, resources=["InvoiceLine"], full=True, progress=False)
    assert summary["InvoiceLine"].resumed and summary["InvoiceLine"].mode == "full"
    assert read_manifest(store)["resources"]["InvoiceLine"]["status"] == "ok"
    _assert_same_store(store, synced.path, "InvoiceLine")


def test_a_crash_during_commit_is_rolled_forward(
    synced: Any, tmp_path: Path, new_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolkit.store.transaction as store_module  # where the commit step calls it

    store = tmp_path / "store"
    calls = {"n": 0}
    real = store_module.update_manifest

    def crash_on_commit(root: Path, resource_type: str, entry: dict[str, Any]) -> None:
        if entry.get("status") == "ok":
            calls["n"] += 1
            raise KeyboardInterrupt
        real(root, resource_type, entry)

    with new_client(synced.dep) as client:
        monkeypatch.setattr(store_module, "update_manifest", crash_on_commit)
        with pytest.raises(KeyboardInterrupt):
            sync(client, store, resources=["Organization"], progress=False)
        monkeypatch.setattr(store_module, "update_manifest", real)
        assert calls["n"] == 1
        state = orjson.loads((store / ".staging" / "Organization" / "state.json").read_bytes())
        assert state["phase"] == "commit"
        summary = sync(client, store, resources=["Organization"], progress=False)
    assert summary["Organization"].mode == "incremental"
    assert summary["Organization"].status == "unchanged"
    _assert_same_store(store, synced.path, "Organization")


# --------------------------------------------------------------------------- errors


def test_load_from_a_missing_store_says_to_sync_first(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no pmtk store") as info:
        load("Referral", tmp_path / "nowhere")
    assert isinstance(info.value, FileNotFoundError)


def test_load_of_a_resource_never_synced_names_what_the_store_holds(
    synced: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    manifest = orjson.loads((store / "manifest.json").read_bytes())
    del manifest["resources"]["Practitioner"]
    (store / "manifest.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(StoreError, match="holds no Practitioner data"):
        load("Practitioner", store)
    with pytest.raises(StoreError, match="has no table 'nope'"):
        load("Referral", store, table="nope")


def test_load_of_a_corrupt_or_missing_file_raises_store_error(synced: Any, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    tables = read_manifest(store)["resources"]
    (store / tables["Referral"]["tables"]["Referral"]["path"]).write_bytes(b"not parquet at all")
    with pytest.raises(StoreError, match="checksum mismatch"):
        load("Referral", store)
    with pytest.raises(StoreError, match="not a readable Parquet file"):
        load("Referral", store, verify=False)
    (store / tables["Practitioner"]["tables"]["Practitioner"]["path"]).unlink()
    with pytest.raises(StoreError, match="missing"):
        load("Practitioner", store)
    (store / "manifest.json").write_bytes(b"{truncated")
    with pytest.raises(StoreError, match="unreadable"):
        load("Patient", store)


def test_a_second_concurrent_sync_is_refused(synced: Any, tmp_path: Path, new_client: Any) -> None:
    import fcntl

    store = tmp_path / "store"
    store.mkdir()
    with (store / ".lock").open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with new_client(synced.dep) as client, pytest.raises(StoreError, match="another"):
            sync(client, store, resources=["Practitioner"], progress=False)


def test_unknown_resource_is_refused_before_any_request(tmp_path: Path) -> None:
    from toolkit.errors import ConfigurationError

    class NoClient:
        requests_sent = 0

        def walk(self, resource_type: str, /, **options: Any) -> Any:
            raise AssertionError("no request expected")

    with pytest.raises(ConfigurationError, match="Location"):
        sync(NoClient(), tmp_path, resources=["Location"], progress=False)


def test_pmtk_sync_command_writes_a_store_and_prints_a_summary(synced: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolkit.cli import app

    dep = synced.dep
    out = tmp_path / "cli-store"
    args = ["sync", "--out", str(out), "-r", "Practitioner", "-r", "Organization"]
    args += ["--base-url", dep.base_url, "--client-id", dep.client_id]
    result = CliRunner().invoke(
        app, args, env={"PM_CLIENT_SECRET": dep.client_secret, "COLUMNS": "160"}
    )
    assert result.exit_code == 0, result.output
    assert "Practitioner" in result.output and "requests" in result.output
    assert set(read_manifest(out)["resources"]) == {"Practitioner", "Organization"}
    _assert_same_store(out, synced.path, "Practitioner")
