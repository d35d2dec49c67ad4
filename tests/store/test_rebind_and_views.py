"""A rebind leaves nothing of the old deployment, views included; views stay inside the store.

Issue 33: ``--rebind`` kept the old deployment's rows in ``views/*.parquet`` (and in
leftover data files and queued webhook events); a ``views`` folder that is a link
was followed, so ``write_views`` wrote outside the store; a view named ``"ok\\n"``
was accepted (``re.match`` with ``$`` matches before a trailing newline).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import synced_store
from toolkit.cli import app
from toolkit.errors import ViewDefinitionError
from toolkit.store import StoreLinked, load, read_manifest
from toolkit.store.raw import write_views

RT = "Referral"
VIEW: dict[str, Any] = {
    "resourceType": "ViewDefinition",
    "name": "referral_ids",
    "resource": RT,
    "select": [{"column": [{"name": "id", "path": "id"}]}],
}


@pytest.fixture(scope="module")
def other() -> Iterator[Any]:
    """A second deployment (another mock, so another base URL) with other records."""
    from toolkit.mock import serve

    with serve(seed=7, scale="small", rate_limit=100_000) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def synced_one(dep: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synced_store(dep, tmp_path_factory.mktemp("store") / "pmtk-store", [RT])


@pytest.fixture
def store(synced_one: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "pmtk-store"
    shutil.copytree(synced_one, copy)
    return copy


def _env(dep: Any) -> dict[str, str]:
    return {
        "PM_BASE_URL": dep.base_url,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        "PM_USER_AGENT": "Store tests (tests@example.org)",
    }


def _parquet_files(store: Path) -> set[Path]:
    return {p for p in store.rglob("*.parquet*") if p.is_file()}


def test_a_rebind_leaves_no_data_of_the_old_deployment_views_included(
    store: Path, other: Any
) -> None:
    old_ids = set(load(RT, store)["id"].to_list())
    written = write_views(store, [VIEW])
    assert set(pl.read_parquet(written["referral_ids"])["id"]) == old_ids
    # a leftover of an earlier commit (a crash before the old file was deleted)
    main = store / read_manifest(store)["resources"][RT]["tables"][RT]["path"]
    shutil.copyfile(main, main.with_name("data-00000000deadbeef.parquet"))
    from toolkit.webhooks import Event, EventQueue

    journal = EventQueue(store)  # a change of the old deployment, queued in the journal
    journal.put([Event(RT, "old-1")], "2026-11-23T10:00:00Z")
    journal.close()
    queue = store / ".webhooks" / "queue"  # and one an older receiver left in a file
    queue.mkdir(parents=True)
    (queue / "event.json").write_text('{"id": "x"}', "utf-8")
    seen = store / ".webhooks" / "events-seen.json"  # the old deployment's event numbers
    seen.write_text('{"subscriptions": {"sub-1": [1, 2, 3]}}', "utf-8")
    (store / "views" / "notes.txt").write_text("the user's own file", "utf-8")

    result = CliRunner().invoke(
        app, ["sync", "--out", str(store), "-r", RT, "--rebind", "-q"], env=_env(other)
    )
    assert result.exit_code == 0, result.output
    manifest = read_manifest(store)
    assert "discarding" not in manifest
    named = {
        store / info["path"]
        for entry in manifest["resources"].values()
        for info in entry["tables"].values()
    }
    assert _parquet_files(store) == named  # no view, leftover or staged page of the old one
    assert not list(queue.glob("*"))
    assert not list((store / ".webhooks").glob("journal.sqlite3*"))
    assert not seen.exists()  # else the new deployment's events 1-3 would be "replays"
    assert (store / "views" / "notes.txt").is_file()  # not pmtk's: kept
    new_ids = set(load(RT, store)["id"].to_list())
    assert new_ids
    again = write_views(store, [VIEW])
    assert set(pl.read_parquet(again["referral_ids"])["id"]) == new_ids


def test_a_rebind_interrupted_half_way_is_finished_by_the_next_sync(
    store: Path, other: Any
) -> None:
    write_views(store, [VIEW])
    manifest_file = store / "manifest.json"
    manifest = json.loads(manifest_file.read_text("utf-8"))
    # what a crash right after the manifest switched leaves: the marker and the old files
    from toolkit.store.identity import bind, deployment_of
    from toolkit.store.layout import locked

    with locked(store):
        current = deployment_of(other_client := _client(other))
        other_client.close()
        assert current is not None
        manifest.update(deployment=current.to_json(), resources={}, discarding=True)
        manifest_file.write_text(json.dumps(manifest), "utf-8")
        assert (store / "views" / "referral_ids.parquet").is_file()
        bind(store, current)
    assert "discarding" not in read_manifest(store)
    assert not _parquet_files(store)


def _client(dep: Any) -> Any:
    from tests.conftest import toolkit_client

    return toolkit_client(dep)


def test_write_views_refuses_a_views_folder_that_is_a_link(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store / "views").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreLinked, match="views"):
        write_views(store, [VIEW])
    assert not list(outside.iterdir())
    view_file = tmp_path / "ids.json"
    view_file.write_text(json.dumps(VIEW), "utf-8")
    result = CliRunner().invoke(
        app, ["sync", "--out", str(store), "--rebuild", "-q", "--view", str(view_file)]
    )
    assert result.exit_code == 2, result.output
    assert not list(outside.iterdir())


def test_write_views_refuses_a_view_file_that_is_a_link(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.parquet"
    target.write_bytes(b"mine")
    (store / "views").mkdir()
    os.symlink(target, store / "views" / "referral_ids.parquet")
    with pytest.raises(StoreLinked):
        write_views(store, [VIEW])
    assert target.read_bytes() == b"mine"


@pytest.mark.parametrize("name", ["ok\n", "ok\r\n", "../up", "a.b", "-x", "x" * 65])
def test_a_view_name_is_matched_whole(store: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(ViewDefinitionError, match="name"):
        write_views(store, [{**VIEW, "name": name}])
    assert not (store / "views").exists()
    view_file = tmp_path / "v.json"
    view_file.write_text(json.dumps({**VIEW, "name": name}), "utf-8")
    before = (store / "manifest.json").read_bytes()
    result = CliRunner().invoke(
        app, ["sync", "--out", str(store), "--rebuild", "--view", str(view_file)]
    )
    assert result.exit_code == 2, result.output
    assert (store / "manifest.json").read_bytes() == before
