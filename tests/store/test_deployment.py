"""A store knows its deployment: a sync, ``pmtk listen`` and ``load`` refuse another's.

The first deployment is the embedded mock, run the way a new user runs it (``pmtk
sync`` with nothing configured, in a child process, twice: each run starts the mock
on another port). The second is a small server written from the spec
(``tests/spec_server.py``), which records every request: a refusal sends none.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import toolkit_client
from tests.spec_server import CLIENT_ID, SECRET, SpecDeployment, referral, serve_spec
from toolkit.client import Client
from toolkit.store import (
    MOCK_STORE,
    WrongDeployment,
    deployment_of,
    load,
    read_manifest,
    sync,
)
from toolkit.store.identity import hash_client_id

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PM_") or k == "PM_USER_AGENT"}


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the lock file included)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _sync_embedded(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pmtk sync -r Referral`` with nothing configured: the embedded mock, default folder."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from toolkit.cli import app; app()",
            "sync",
            "-r",
            "Referral",
            "-q",
        ],
        cwd=cwd,
        env={**CLEAN_ENV, "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def mock_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store the embedded mock made in its default folder, synced by two processes."""
    cwd = tmp_path_factory.mktemp("user")
    first = _sync_embedded(cwd)
    assert first.returncode == 0, first.stderr
    store = cwd / MOCK_STORE
    assert sorted(p.name for p in cwd.iterdir()) == [MOCK_STORE]  # never pmtk-store
    port_before = read_manifest(store)["deployment"]["base_url"]
    second = _sync_embedded(cwd)  # another process: the mock listens on another port
    assert second.returncode == 0, second.stderr
    manifest = read_manifest(store)
    assert manifest["deployment"]["embedded_mock"] is True
    assert manifest["deployment"]["base_url"] == port_before  # the binding was not rewritten
    assert manifest["resources"]["Referral"]["mode"] == "incremental"
    return store


@pytest.fixture
def second() -> Iterator[SpecDeployment]:
    """A second deployment: three referrals, on its own port."""
    records = {"Referral": [referral("R-1"), referral("R-2"), referral("R-3")]}
    with serve_spec(SpecDeployment(records=records)) as dep:
        yield dep


def _cli(args: list[str], dep: SpecDeployment) -> Any:
    from toolkit.cli import app

    env = {"COLUMNS": "400", "PM_CLIENT_SECRET": dep.client_secret}
    full = [*args, "--base-url", dep.base_url, "--client-id", dep.client_id, "--quiet"]
    return CliRunner().invoke(app, full, env=env)


def test_a_sync_from_another_deployment_is_refused_and_changes_nothing(
    mock_store: Path, second: SpecDeployment
) -> None:
    before = _snapshot(mock_store)
    result = _cli(["sync", "--out", str(mock_store)], second)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    line = lines[0]
    assert line.startswith("refused:")
    assert "the embedded mock" in line and second.base_url in line  # both deployments
    assert "--out NEW-FOLDER" in line and "--rebind" in line  # and the fixes
    assert _snapshot(mock_store) == before  # byte for byte
    assert second.seen == []  # not even a token was asked for


def test_the_python_api_refuses_too_and_load_checks_when_asked(
    mock_store: Path, second: SpecDeployment
) -> None:
    before = _snapshot(mock_store)
    with toolkit_client(second) as client, pytest.raises(WrongDeployment, match="rebind"):
        sync(client, mock_store, resources=["Referral"], progress=False)
    assert _snapshot(mock_store) == before
    with toolkit_client(second) as client:
        with pytest.raises(WrongDeployment, match="the embedded mock"):
            load("Referral", mock_store, deployment=client)
        assert load("Referral", mock_store).height == 166  # no deployment asked: read as is
    assert second.seen == []


def test_listen_refuses_a_store_of_another_deployment(
    mock_store: Path, second: SpecDeployment
) -> None:
    import toolkit

    before = _snapshot(mock_store)
    with (
        toolkit_client(second) as client,
        pytest.raises(WrongDeployment, match="not of"),
        toolkit.listen(mock_store, client=client, port=0, catch_up=False, no_auth=True),
    ):
        pytest.fail("the receiver started on another deployment's store")
    assert _snapshot(mock_store) == before
    assert second.seen == []


def test_rebind_discards_the_old_data_and_syncs_in_full(
    mock_store: Path, second: SpecDeployment, tmp_path: Path
) -> None:
    store = tmp_path / "rebound"
    subprocess.run(["cp", "-a", str(mock_store), str(store)], check=True)
    # files are named by their content: an empty table (no extensions, say) is the same
    # file in both deployments, so only files holding rows are the old data
    old_files = {
        p.name
        for p in store.rglob("data-*.parquet")
        if pl.scan_parquet(p).select(pl.len()).collect().item()
    }
    result = _cli(["sync", "--out", str(store), "-r", "Referral", "--rebind"], second)
    assert result.exit_code == 0, result.output
    manifest = read_manifest(store)
    assert manifest["deployment"] == {
        "base_url": second.base_url,
        "client_id_sha256": hash_client_id(CLIENT_ID),
    }
    assert manifest["resources"]["Referral"]["mode"] == "full"
    assert load("Referral", store)["id"].to_list() == ["R-1", "R-2", "R-3"]
    assert not old_files & {p.name for p in store.rglob("data-*.parquet")}
    # bound now: the next sync of the same deployment is incremental, no --rebind needed
    again = _cli(["sync", "--out", str(store), "-r", "Referral"], second)
    assert again.exit_code == 0, again.output
    assert read_manifest(store)["resources"]["Referral"]["mode"] == "incremental"
    raw = (store / "manifest.json").read_bytes()
    assert CLIENT_ID.encode() not in raw and SECRET.encode() not in raw
    assert hashlib.sha256(CLIENT_ID.encode()).hexdigest()[:16].encode() not in raw


def test_the_same_address_with_another_api_key_is_another_deployment(
    second: SpecDeployment, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    with toolkit_client(second) as client:
        sync(client, store, resources=["Referral"], progress=False)
    other = Client(
        base_url=second.base_url.replace("http://", "HTTP://") + "/",
        client_id="another-key",
        client_secret=SECRET,
        requests_per_minute=None,
        progress=False,
    )
    requests = len(second.seen)
    with other, pytest.raises(WrongDeployment, match="client id #"):
        sync(other, store, resources=["Referral"], progress=False)
    assert len(second.seen) == requests
    # the same address spelt differently (case, trailing slash) is the same address
    spelt, plain = deployment_of(other), deployment_of(toolkit_client(second))
    assert spelt is not None and plain is not None
    assert spelt.base_url == plain.base_url


def test_a_store_without_a_recorded_deployment_is_refused_unless_empty(
    second: SpecDeployment, tmp_path: Path
) -> None:
    store = tmp_path / "old"
    with toolkit_client(second) as client:
        sync(client, store, resources=["Referral"], progress=False)
    path = store / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    del manifest["deployment"]  # as written by a pmtk before the binding existed
    path.write_bytes(orjson.dumps(manifest))
    before = _snapshot(store)
    with (
        toolkit_client(second) as client,
        pytest.raises(WrongDeployment, match="records no deployment"),
    ):
        sync(client, store, resources=["Referral"], progress=False)
    assert _snapshot(store) == before
    result = _cli(["sync", "--out", str(store), "-r", "Referral", "--rebind"], second)
    assert result.exit_code == 0, result.output
    assert read_manifest(store)["deployment"]["base_url"] == second.base_url
    # an unbound store that holds no data yet is simply bound by its first sync
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "manifest.json").write_bytes(
        orjson.dumps({"kind": "pmtk-store", "format": 2, "resources": {}})
    )
    with toolkit_client(second) as client:
        sync(client, empty, resources=["Referral"], progress=False)
    assert read_manifest(empty)["deployment"]["base_url"] == second.base_url


def test_the_default_folder_follows_the_settings(
    monkeypatch: pytest.MonkeyPatch, second: SpecDeployment, tmp_path: Path
) -> None:
    from toolkit.store import DEFAULT_STORE, default_store

    monkeypatch.chdir(tmp_path)  # no .env of the project's
    for name in ("PM_BASE_URL", "PM_REGION", "PM_CLIENT_ID", "PM_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    assert default_store() == MOCK_STORE
    with toolkit_client(second) as client:
        assert default_store(client) == DEFAULT_STORE
    monkeypatch.setenv("PM_BASE_URL", second.base_url)
    monkeypatch.setenv("PM_CLIENT_ID", second.client_id)
    monkeypatch.setenv("PM_CLIENT_SECRET", second.client_secret)
    assert default_store() == DEFAULT_STORE
