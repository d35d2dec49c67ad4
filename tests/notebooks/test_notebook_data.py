"""The notebooks read a synced store: an incremental sync first, then ``toolkit.load``.

Everything here runs against mocks over loopback HTTP. Request counts come from
the mock's own counters (``dep.stats()``), not from pmtk's, so a client that
quietly walked every list again would be caught.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

import toolkit
from toolkit import Client
from toolkit.mock import serve
from toolkit.notebook_data import STORE_ENV, notebook_data, notebook_store_dir, store_target
from toolkit.store import StoreError
from toolkit.store.layout import locked

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = ("02_referral_utilisation", "03_appointments_attendance", "04_revenue")
USED = ["Referral", "Appointment", "Organization", "Practitioner", "PractitionerRole"]


def _client(dep: object) -> Client:
    return Client(
        dep.base_url,  # type: ignore[attr-defined]
        dep.client_id,  # type: ignore[attr-defined]
        dep.client_secret,  # type: ignore[attr-defined]
        requests_per_minute=None,
        progress=False,
        user_agent="pmtk tests (tests@example.org)",
    )


def _resource_requests(dep: object) -> int:
    """Requests the mock answered outside token issuing (its own count)."""
    stats = dep.stats()  # type: ignore[attr-defined]
    by_path: dict[str, int] = stats["requests_by_path"]
    return sum(n for path, n in by_path.items() if "token" not in path)


@pytest.fixture
def no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)


@pytest.fixture(scope="module")
def port() -> int:
    """One address for the module's mock processes: a store is bound to the deployment
    it was synced from (its address and key), and a mock started again on the same
    address with the same seed is that deployment again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def synced(tmp_path: Path, port: int) -> Iterator[Path]:
    """A store filled by a first notebook run against one mock process."""
    store = tmp_path / "store"
    with serve(port=port, seed=0, scale="small") as dep, _client(dep) as client:
        data = notebook_data(client, USED, store=store, quiet=True)
    assert set(data.modes.values()) == {"full"}
    yield store


def test_a_later_run_syncs_incrementally_with_a_few_requests(synced: Path, port: int) -> None:
    # A new kernel starts a new mock process: the same address, the same data.
    with serve(port=port, seed=0, scale="small", test_controls=True) as dep, _client(dep) as client:
        dep.reset_stats()
        data = notebook_data(client, USED, store=synced, quiet=True)
        sent = _resource_requests(dep)
        assert set(data.modes.values()) == {"incremental"}
        assert sent <= 2 * len(USED), sent  # about one per resource: no list walk
        assert data.requests == sent
        # What the notebook reads equals what a full list walk returns.
        stored = data.tables("Appointment")
        listed = client.frames("Appointment")
    assert set(stored) == set(listed)
    for name, frame in listed.items():
        assert stored[name].sort(stored[name].columns[:2]).equals(frame.sort(frame.columns[:2])), (
            name
        )


def test_a_changed_record_reaches_the_notebook_on_the_next_run(synced: Path, port: int) -> None:
    with serve(port=port, seed=0, scale="small", test_controls=True) as dep, _client(dep) as client:
        first = notebook_data(client, ["Referral"], store=synced, quiet=True).frame("Referral")
        some = first["id"][0]
        dep.touch("Referral", [some])
        again = notebook_data(client, ["Referral"], store=synced, quiet=True)
        after = again.frame("Referral")
    assert again.modes == {"Referral": "incremental"}
    before_stamp = first.filter(pl.col("id") == some)["last_updated"][0]
    after_stamp = after.filter(pl.col("id") == some)["last_updated"][0]
    assert after_stamp > before_stamp
    assert after.height == first.height


def test_a_type_the_deployment_does_not_list_reads_as_the_default(tmp_path: Path) -> None:
    from tests.contracts.live_proxy import live_proxy

    with (
        serve(test_controls=True) as dep,
        live_proxy(
            dep, secret="s3cret-x", token_text="t", missing=("/main/PractitionerRole",)
        ) as url,
        Client(url, "pmtk-demo", "s3cret-x", requests_per_minute=None, progress=False) as client,
    ):
        data = notebook_data(
            client, ["PractitionerRole", "Practitioner"], store=tmp_path, quiet=True
        )
    assert "PractitionerRole" in data.unavailable
    assert not data.holds("PractitionerRole")
    fallback = pl.DataFrame(schema={"id": pl.String})
    assert data.frame("PractitionerRole", default=fallback) is fallback
    with pytest.raises(StoreError, match="holds no PractitionerRole data"):
        data.frame("PractitionerRole")
    assert data.frame("Practitioner").height > 0


def test_two_notebooks_on_one_store_take_turns(synced: Path, port: int) -> None:
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with locked(synced):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with serve(port=port, seed=0, scale="small") as dep, _client(dep) as client:
            with pytest.raises(StoreError, match="another pmtk sync"):
                notebook_data(client, ["Referral"], store=synced, wait=0.3, quiet=True)
            threading.Timer(1.0, release.set).start()
            began = time.monotonic()
            data = notebook_data(client, ["Referral"], store=synced, wait=30, quiet=True)
            assert time.monotonic() - began >= 0.5  # it waited for the holder
    finally:
        release.set()
        holder.join()
    assert data.modes == {"Referral": "incremental"}


def test_the_embedded_mock_gets_its_own_folder_outside_the_repository(
    no_store_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("PM_BASE_URL", "PM_REGION", "PM_CLIENT_ID", "PM_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env from the repository
    client = toolkit.connect(progress=False)
    try:
        folder = notebook_store_dir(client)
    finally:
        client.close()
    assert (
        folder == tmp_path / "cache" / "pmtk" / "notebook-stores" / "embedded-mock-small-seed0-live"
    )
    assert folder.name != "pmtk-store"
    assert REPO not in folder.parents


class _Target:
    def __init__(self, base_url: str, client_id: str) -> None:
        self.base_url = base_url
        self.client_id = client_id


def test_real_deployments_get_a_folder_per_address_and_key(no_store_env: None) -> None:
    au = store_target(_Target("https://au-api.halaxy.com/main", "key-1"))
    assert au.startswith("au-api.halaxy.com-main-")
    assert store_target(_Target("https://au-api.halaxy.com/main", "key-2")) != au
    assert store_target(_Target("https://eu-api.halaxy.com/main", "key-1")) != au
    # A mock on a loopback port is not taken for the embedded mock.
    assert not store_target(_Target("http://127.0.0.1:5000/main", "pmtk-demo")).startswith(
        "embedded-mock"
    )
    assert "key-1" not in au  # the id is hashed, never written out


def test_pm_notebook_store_names_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "mine"))
    assert notebook_store_dir(_Target("https://au-api.halaxy.com/main", "k")) == tmp_path / "mine"


def test_notebooks_02_to_04_read_the_store_and_only_find_goes_to_the_api() -> None:
    for name in NOTEBOOKS:
        cells = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))[
            "cells"
        ]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert "notebook_data(" in code, name
        for listing in ("client.frame(", "client.frames(", "client.list("):
            assert listing not in code, f"{name} still lists from the API: {listing}"
