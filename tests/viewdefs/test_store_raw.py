"""Raw records in the store: kept compressed by id, a rebuild from them with no request,
and user views materialised from them (``pmtk sync --rebuild``, ``--view``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.conftest import api_client
from toolkit.cli import app
from toolkit.client import Client
from toolkit.mock import Deployment
from toolkit.store import StoreDamaged, load, sync
from toolkit.store.raw import raw_pages, raw_records, raw_table, rebuild, write_views
from toolkit.views import VIEWS

RESOURCES = ["Referral", "Appointment", "Practitioner"]

PARTICIPANTS: dict[str, Any] = {
    "resourceType": "ViewDefinition",
    "name": "participants",
    "resource": "Appointment",
    "select": [
        {"column": [{"name": "id", "path": "id"}]},
        {
            "forEach": "participant",
            "column": [{"name": "actor", "path": "actor.getReferenceKey()"}],
        },
    ],
}


def _mock_records(dep: Deployment, resource_type: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with api_client(dep) as http:
        url: str | None = f"{resource_type}?_count=100"
        while url:
            bundle = http.get(url).raise_for_status().json()
            out.update({e["resource"]["id"]: e["resource"] for e in bundle.get("entry", [])})
            url = next((x["url"] for x in bundle.get("link", []) if x["relation"] == "next"), None)
    return out


@pytest.fixture(scope="module")
def synced(mock_deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("raw") / "store"
    mock_deployment.reset_rate_limit()
    with Client(
        mock_deployment.base_url,
        mock_deployment.client_id,
        mock_deployment.client_secret,
        progress=False,
    ) as client:
        sync(client, store, resources=RESOURCES, progress=False)
    return store


def test_raw_records_are_the_records_as_served_compressed_by_id(
    synced: Path, mock_deployment: Deployment
) -> None:
    for rt in RESOURCES:
        served = _mock_records(mock_deployment, rt)
        kept = [json.loads(r) for r in raw_records(synced, rt)]
        assert {r["id"]: r for r in kept} == served
        assert len(kept) == len(served)
        table = load(rt, synced, table=raw_table(rt))
        assert table.columns == ["id", "last_updated", "json"]
        assert table.get_column("last_updated").to_list() == [
            r["meta"]["lastUpdated"] for r in kept
        ]
        manifest = json.loads((synced / "manifest.json").read_text())
        path = synced / manifest["resources"][rt]["tables"][raw_table(rt)]["path"]
        codecs = {
            pq.ParquetFile(path).metadata.row_group(i).column(2).compression
            for i in range(pq.ParquetFile(path).metadata.num_row_groups)
        }
        assert codecs == {"ZSTD"}


def test_rebuild_sends_nothing_and_equals_the_fresh_sync(synced: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(synced, copy)
    before = json.loads((synced / "manifest.json").read_text())
    # no client at all; PM_ settings pointing nowhere would fail any request
    result = CliRunner().invoke(
        app,
        ["sync", "--out", str(copy), "--rebuild", "-q", "--base-url", "http://127.0.0.1:9/main"],
    )
    assert result.exit_code == 0, result.output
    after = json.loads((copy / "manifest.json").read_text())
    for rt in RESOURCES:
        for table in VIEWS[rt]:
            assert load(rt, copy, table=table.name).equals(load(rt, synced, table=table.name))
        old, new = before["resources"][rt], after["resources"][rt]
        for key in ("high_water_mark", "server_time", "next_since", "schema_version"):
            assert new[key] == old[key], key
        assert {t: v["sha256"] for t, v in new["tables"].items()} == {
            t: v["sha256"] for t, v in old["tables"].items()
        }
        assert new["last_sync"]["records_fetched"] == old["last_sync"]["records_fetched"]


def test_rebuild_after_a_table_is_lost_restores_it(synced: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(synced, copy)
    # a view changed (simulated): the main Referral table is gone; the raw records are not
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / manifest["resources"]["Referral"]["tables"]["Referral"]["path"]).unlink()
    summary = rebuild(copy, ["Referral"])
    assert summary.requests == 0
    assert load("Referral", copy).equals(load("Referral", synced))


def test_a_damaged_raw_file_is_never_rebuilt_from(synced: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(synced, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    raw = copy / manifest["resources"]["Referral"]["tables"][raw_table("Referral")]["path"]
    data = bytearray(raw.read_bytes())
    data[len(data) // 2] ^= 0xFF
    raw.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged):
        raw_records(copy, "Referral")
    with pytest.raises(StoreDamaged):
        raw_pages(copy, "Referral")
    stored = load("Referral", copy)
    result = CliRunner().invoke(
        app, ["sync", "--out", str(copy), "--rebuild", "-q", "-r", "Referral"]
    )
    assert result.exit_code != 0
    assert load("Referral", copy).equals(stored)  # the tables were left as they were


def test_views_are_materialised_from_the_raw_records(
    synced: Path, tmp_path: Path, mock_deployment: Deployment
) -> None:
    copy = tmp_path / "store"
    shutil.copytree(synced, copy)
    view_file = tmp_path / "participants.json"
    view_file.write_text(json.dumps(PARTICIPANTS))
    result = CliRunner().invoke(
        app, ["sync", "--out", str(copy), "--rebuild", "-q", "--view", str(view_file)]
    )
    assert result.exit_code == 0, result.output
    stored = pl.read_parquet(copy / "views" / "participants.parquet")
    mock_deployment.reset_rate_limit()
    with Client(
        mock_deployment.base_url,
        mock_deployment.client_id,
        mock_deployment.client_secret,
        progress=False,
    ) as client:
        live = client.frame("Appointment", view=PARTICIPANTS)
    assert stored.sort(["id", "actor"]).equals(live.sort(["id", "actor"]))


def _general_read_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-record Python read of run_view (39 s for a medium store) made to fail."""
    import toolkit.viewdefs

    def refused(*args: Any, **kwargs: Any) -> pl.DataFrame:
        raise AssertionError("run_view took the general, per-record read")

    monkeypatch.setattr(toolkit.viewdefs, "_read_items", refused)


def _plain_participants(records: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """PARTICIPANTS computed by hand: one row per participant, its actor's id (the key
    ``getReferenceKey()`` gives for a relative reference ``Type/id``)."""
    rows = []
    for record in records:
        for participant in record.get("participant") or []:
            reference = (participant.get("actor") or {}).get("reference")
            key = reference.rsplit("/", 1)[-1] if reference else None
            rows.append((record["id"], key))
    return sorted(rows, key=lambda r: (r[0], r[1] or ""))


def test_raw_pages_give_run_view_every_record_on_its_fast_read(
    synced: Path, mock_deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit.viewdefs import run_view

    records = raw_records(synced, "Appointment")
    pages = raw_pages(synced, "Appointment", size=7)
    assert len(pages) == -(-len(records) // 7)  # every record, in pages of 7 (the last short)
    entries = [e["resource"] for p in pages for e in json.loads(p)["entry"]]
    assert entries == [json.loads(r) for r in records]  # unchanged, in stored order
    _general_read_refused(monkeypatch)
    frame = run_view(PARTICIPANTS, pages)
    served = list(_mock_records(mock_deployment, "Appointment").values())
    got = sorted(frame.iter_rows(), key=lambda r: (r[0], r[1] or ""))
    assert got == _plain_participants(served)


def test_views_are_materialised_on_the_fast_read(
    synced: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "store"
    shutil.copytree(synced, copy)
    _general_read_refused(monkeypatch)
    (path,) = write_views(copy, [PARTICIPANTS]).values()
    stored = [json.loads(r) for r in raw_records(copy, "Appointment")]
    got = sorted(pl.read_parquet(path).iter_rows(), key=lambda r: (r[0], r[1] or ""))
    assert got == _plain_participants(stored)


def test_a_wrong_view_file_is_refused_before_anything(synced: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(synced, copy)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**PARTICIPANTS, "select": [{"forEach": "@@"}]}))
    before = (copy / "manifest.json").read_bytes()
    result = CliRunner().invoke(app, ["sync", "--out", str(copy), "--rebuild", "--view", str(bad)])
    assert result.exit_code == 2
    assert "select[0].forEach" in result.output
    assert (copy / "manifest.json").read_bytes() == before
    assert not (copy / "views").exists()
