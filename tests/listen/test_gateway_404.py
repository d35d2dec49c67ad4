"""Only the API's own word deletes: a gateway's 404 page is a failed read, not a deletion.

A reverse proxy on loopback (``tests/listen/gateway.py``) sits in front of the mock,
as nginx or a load balancer does; during a deploy it answers some reads with its own
404 page. The receiver reads each announced record through it. A record is removed
only on a 404/410 whose body is a FHIR OperationOutcome sent as FHIR JSON (what the
API itself answers for a record it no longer has); every other answer is retried
and then dead-lettered with its reason, and the stored record stays.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl
import pytest

from tests.conftest import synced_store
from tests.listen.conftest import notification
from tests.listen.gateway import Gateway, gateway
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import Listener, listen


@pytest.fixture(scope="module")
def proxy(dep: Any) -> Iterator[Gateway]:
    with gateway(dep.base_url) as running:
        yield running


class _Via:
    """What ``synced_store`` needs of a deployment: the gateway's URL, the mock's key."""

    def __init__(self, dep: Any, proxy: Gateway) -> None:
        self.base_url = proxy.base_url
        self.client_id = dep.client_id
        self.client_secret = dep.client_secret


@pytest.fixture(scope="module")
def gated_template(dep: Any, proxy: Gateway, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Appointment synced through the gateway (the store is bound to the gateway's URL)."""
    path = tmp_path_factory.mktemp("gated") / "store"
    return synced_store(_Via(dep, proxy), path, ["Appointment"])


@pytest.fixture
def gated_store(gated_template: Path, tmp_path: Path) -> Path:
    from tests.conftest import copied_store

    return copied_store(gated_template, tmp_path / "store")


@pytest.fixture
def gated_client(dep: Any, proxy: Gateway) -> Iterator[Client]:
    from tests.conftest import toolkit_client

    with toolkit_client(_Via(dep, proxy)) as c:
        yield c


@pytest.fixture
def receiver(gated_store: Path, gated_client: Client, proxy: Gateway) -> Iterator[Listener]:
    proxy.hits.clear()
    with listen(
        gated_store, client=gated_client, no_auth=True, catch_up=False, max_attempts=2
    ) as running:
        yield running
    proxy.broken.clear()


def post(listener: Listener, body: bytes) -> None:
    answer = httpx.post(
        listener.url, content=body, headers={"Content-Type": "application/fhir+json"}, timeout=10
    )
    assert answer.status_code == 202, answer.text


def stored_ids(store: Path) -> set[str]:
    return {str(i) for i in load("Appointment", store)["id"].to_list()}


def dead_letters(listener: Listener) -> list[dict[str, Any]]:
    """Each dead letter, oldest first, with the id of its record."""
    letters = listener.queue.dead_letters()
    return [{**letter, "id": letter["record"].split("/", 1)[1]} for letter in letters]


MODES = ["html404", "text404", "json404", "outcome-as-html", "html410", "redirect"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("delete", [False, True], ids=["update", "delete"])
def test_a_gateway_answer_never_deletes_a_stored_record(
    receiver: Listener, proxy: Gateway, mode: str, delete: bool
) -> None:
    rid = sorted(stored_ids(receiver.store))[3]
    path = f"/main/Appointment/{rid}"
    proxy.broken[path] = mode
    post(receiver, notification(("Appointment", rid), delete=delete))
    assert receiver.wait_idle(30), receiver.status()
    assert rid in stored_ids(receiver.store), f"{mode} deleted Appointment/{rid}"
    assert proxy.count(path) == 2  # retried once (max_attempts=2), then given up
    (letter,) = dead_letters(receiver)
    assert letter["id"] == rid
    assert "gave up after 2 attempt(s)" in letter["reason"]
    status = {"redirect": "302", "html410": "410"}.get(mode, "404")
    assert f"answered {status}" in letter["reason"], letter["reason"]
    assert receiver.stats.failures == 1 and receiver.stats.applied == 0


def test_the_apis_own_404_deletes_and_a_heal_after_a_gateway_404_updates(
    receiver: Listener, proxy: Gateway, dep: Any, gated_client: Client
) -> None:
    """The control: the same path through the same gateway, once the API itself answers."""
    ids = sorted(stored_ids(receiver.store))
    gone, kept = ids[4], ids[5]
    dep.delete("Appointment", [gone])
    # the API's 404 is an OperationOutcome in application/fhir+json: the record goes
    post(receiver, notification(("Appointment", gone), delete=True))
    # a gateway 404 on the first read only: the retry reads the record and keeps it
    proxy.broken[f"/main/Appointment/{kept}"] = "html404"
    post(receiver, notification(("Appointment", kept)))
    for _ in range(200):
        if proxy.count(f"/main/Appointment/{kept}") >= 1:
            break
        import time

        time.sleep(0.01)
    proxy.broken.clear()
    assert receiver.wait_idle(30), receiver.status()
    after = stored_ids(receiver.store)
    assert gone not in after and kept in after
    assert not dead_letters(receiver)
    rows = load("Appointment", receiver.store).filter(pl.col("id") == kept)
    assert rows.height == 1


@pytest.mark.parametrize(("letters", "size"), [(10, 10**9), (1000, 2500)], ids=["count", "bytes"])
def test_a_flood_of_undeliverable_events_keeps_the_dead_letters_bounded(
    gated_store: Path, gated_client: Client, proxy: Gateway, dep: Any, letters: int, size: int
) -> None:
    """Every read is refused for good (422): each change is dead at once. The folder
    keeps the newest letters within the bounds; the oldest are removed and counted."""
    import subprocess
    import sys

    ids = [f"9{n:07d}" for n in range(30)]
    proxy.broken.update({f"/main/Appointment/{rid}": "fhir422" for rid in ids})
    try:
        with listen(
            gated_store,
            client=gated_client,
            no_auth=True,
            catch_up=False,
            max_dead_letters=letters,
            max_dead_bytes=size,
        ) as receiver:
            for rid in ids:
                post(receiver, notification(("Appointment", rid)))
            assert receiver.wait_idle(60), receiver.status()
            kept = dead_letters(receiver)
            status = receiver.status()
            on_disk = receiver.queue.dead_bytes()
    finally:
        proxy.broken.clear()
    assert len(kept) <= letters and on_disk <= max(size, max(len(orjson.dumps(k)) for k in kept))
    assert 1 <= len(kept) < 30
    assert status["dead_letters"] == len(kept)
    assert status["dead_letters_evicted"] == 30 - len(kept)
    newest = {letter["id"] for letter in kept}
    assert newest == set(ids[30 - len(kept) :])  # the oldest went first
    listed = subprocess.run(
        [sys.executable, "-c", "from toolkit.cli import app; app()", "listen",
         "--store", str(gated_store), "--dead-letters"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == len(kept) + 1
    assert all("answered 422" in line and "Appointment/9" in line for line in lines[:-1])
    assert f"{30 - len(kept)} older one(s) removed" in lines[-1]


@pytest.mark.parametrize("mode", ["html404", "redirect"])
@pytest.mark.parametrize("reconcile", [False, True], ids=["export-ids", "reconcile"])
def test_a_gateway_answer_never_makes_a_sync_drop_records(
    dep: Any, proxy: Gateway, tmp_path: Path, mode: str, reconcile: bool
) -> None:
    """``pmtk sync`` drops records only when a complete answer of the API lacks them:
    Patient from ``$export-ids``, any type from the whole list with ``--reconcile``.
    A gateway's answer to either drops nothing."""
    from toolkit.errors import PmtkError
    from toolkit.store import SyncFailed, sync

    rtype = "Appointment" if reconcile else "Patient"
    store = synced_store(_Via(dep, proxy), tmp_path / "store", [rtype])
    before = load(rtype, store).height
    path = "/main/Appointment" if reconcile else "/main/Patient/$export-ids"
    proxy.broken[path] = mode
    try:
        from tests.conftest import toolkit_client

        with toolkit_client(_Via(dep, proxy)) as client:
            try:
                summary = sync(client, store, resources=[rtype], reconcile=reconcile)
                results = summary.resources
            except SyncFailed as exc:  # the failed read is the resource's failure
                results = exc.summary.resources
            except PmtkError:  # or the whole run's: either way nothing is dropped
                results = []
    finally:
        proxy.broken.clear()
    assert load(rtype, store).height == before
    assert all(r.deleted == 0 for r in results), results
