"""Mock -> webhook -> receiver -> store, over loopback: every announced write lands.

The mock here announces its writes to a receiver on a port reserved for the
module; each test starts a receiver on it, writes through the mock's API (PATCH,
$book, a group join, a touch, a delete made "in the product"), waits until the
mock delivered every announcement and the receiver applied it, and then reads
the store with ``toolkit.load``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client
from tests.listen.conftest import RATE, SECRET_HEADER, free_port, notification
from toolkit.client import Client
from toolkit.store import load, read_manifest, verify
from toolkit.views import flatten_tables
from toolkit.webhooks import Listener, listen

PORT = free_port()
NAME, VALUE = SECRET_HEADER
HEADER_TEXT = f"{NAME}: {VALUE}"


@pytest.fixture(scope="module")
def dep() -> Iterator[Any]:
    """The module's mock, announcing every write to 127.0.0.1:PORT with the secret header."""
    from toolkit.mock import serve

    with serve(
        seed=0,
        scale="small",
        rate_limit=RATE,
        test_controls=True,
        webhook=f"http://127.0.0.1:{PORT}/webhook",
        webhook_header=HEADER_TEXT,
    ) as deployment:
        yield deployment


@pytest.fixture
def receiver(store: Path, client: Client, dep: Any) -> Iterator[Listener]:
    with listen(store, client=client, port=PORT, auth_header=HEADER_TEXT, catch_up=False) as r:
        yield r
        assert dep.webhooks_sent(30), dep.webhook_stats()  # nothing left for the next test


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def settle(dep: Any, receiver: Listener) -> None:
    assert dep.webhooks_sent(30), dep.webhook_stats()
    assert receiver.wait_idle(30), receiver.stats


def appointment(store: Path, rid: str) -> dict[str, Any]:
    rows = load("Appointment", store).filter(pl.col("id") == rid)
    assert rows.height == 1, f"Appointment {rid}: {rows.height} rows"
    return rows.row(0, named=True)


def test_a_patch_reaches_the_store_with_one_request(
    dep: Any, receiver: Listener, api: httpx.Client, client: Client
) -> None:
    rid = str(load("Appointment", receiver.store)["id"][5])
    sent_before = client.requests_sent
    response = api.patch(
        f"Appointment/{rid}",
        json={"description": "moved by webhook test"},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200
    settle(dep, receiver)
    assert appointment(receiver.store, rid)["description"] == "moved by webhook test"
    assert client.requests_sent - sent_before == 1
    assert verify(receiver.store).ok


def test_a_participant_patch_replaces_the_child_rows(
    dep: Any, receiver: Listener, api: httpx.Client
) -> None:
    parts = load("Appointment", receiver.store, table="appointment_participant")
    booked = parts.filter(pl.col("actor_type") == "Patient").row(0, named=True)
    rid, patient = booked["appointment_id"], booked["actor_id"]
    response = api.patch(
        f"Appointment/{rid}",
        json={
            "participant": [
                {
                    "actor": {"reference": f"/main/Patient/{patient}", "type": "Patient"},
                    "modifierExtension": [
                        {
                            "url": "appointment-participant-status",
                            "valueCoding": {"code": "cancelled (no charge)"},
                        }
                    ],
                }
            ]
        },
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200, response.text
    settle(dep, receiver)
    after = load("Appointment", receiver.store, table="appointment_participant").filter(
        pl.col("appointment_id") == rid
    )
    before = parts.filter(pl.col("appointment_id") == rid)
    assert after.height == before.height  # replaced, not appended
    # the stored rows are exactly the server's current version, flattened
    current = api.get(f"Appointment/{rid}").json()
    bundle = {"resourceType": "Bundle", "entry": [{"resource": current}]}
    expected = flatten_tables("Appointment", [bundle])["appointment_participant"]
    assert after.sort("index").equals(expected.sort("index"))
    stamp = appointment(receiver.store, rid)["last_updated"]
    assert stamp.isoformat().replace("+00:00", "Z")[:19] == current["meta"]["lastUpdated"][:19]


def test_a_booking_and_a_group_join_arrive_as_create_and_update(
    dep: Any, receiver: Listener, api: httpx.Client
) -> None:
    window = {"start": "2026-12-01T00:00:00Z", "end": "2026-12-08T00:00:00Z", "duration": "30"}
    proposal = api.get("Appointment/$find", params=window).json()["entry"][0]["resource"]
    role = proposal["participant"][0]["actor"]["reference"].rsplit("/", 1)[1]
    booked = api.post(
        "Appointment/$book",
        json={
            "resourceType": "Parameters",
            "parameter": [
                {
                    "name": "appt-resource",
                    "resource": {
                        "resourceType": "Appointment",
                        "start": proposal["start"],
                        "end": proposal["end"],
                        "participant": [{"actor": {"reference": f"/main/PractitionerRole/{role}"}}],
                    },
                },
                {"name": "patient-id", "valueReference": {"reference": "/main/Patient/100001"}},
            ],
        },
    )
    assert booked.status_code == 201, booked.text
    rid = booked.json()["id"]
    joined = api.post(
        "Appointment/$book",
        json={
            "resourceType": "Parameters",
            "parameter": [
                {"name": "appt-id", "valueReference": {"reference": f"/main/Appointment/{rid}"}},
                {"name": "patient-id", "valueReference": {"reference": "/main/Patient/100002"}},
            ],
        },
    )
    assert joined.status_code == 200, joined.text
    settle(dep, receiver)
    assert appointment(receiver.store, rid)["start"] is not None
    actors = (
        load("Appointment", receiver.store, table="participant")
        .filter(pl.col("appointment_id") == rid)["actor_id"]
        .to_list()
    )
    assert {"100001", "100002"} <= set(actors)


def test_a_delete_is_confirmed_by_one_read_and_removes_the_record_and_its_child_rows(
    dep: Any, receiver: Listener, client: Client
) -> None:
    rid = str(load("Appointment", receiver.store)["id"][7])
    sent_before = client.requests_sent
    dep.delete("Appointment", [rid])
    settle(dep, receiver)
    assert rid not in load("Appointment", receiver.store)["id"].to_list()
    for table in ("appointment_participant", "appointment_supporting_information"):
        rows = load("Appointment", receiver.store, table=table)
        assert rid not in rows["appointment_id"].to_list(), table
    assert client.requests_sent == sent_before + 1  # the read that answered 404
    last = read_manifest(receiver.store)["events"]["last_applied"]
    assert (last["type"], last["id"], last["action"]) == ("Appointment", rid, "delete")


def test_a_patient_change_is_applied(dep: Any, receiver: Listener) -> None:
    patients = load("Patient", receiver.store)
    rid = str(patients["id"][3])
    old = patients.filter(pl.col("id") == rid)["last_updated"].item()
    dep.advance_clock(60)
    dep.touch("Patient", [rid])
    settle(dep, receiver)
    new = load("Patient", receiver.store).filter(pl.col("id") == rid)["last_updated"].item()
    assert new > old


def test_writes_the_live_service_does_not_announce_send_nothing(
    dep: Any, receiver: Listener, api: httpx.Client
) -> None:
    sent = dep.webhook_stats()["sent"]
    referral = api.get("Referral", params={"_count": 1}).json()["entry"][0]["resource"]
    response = api.patch(
        f"Referral/{referral['id']}",
        json={"comment": "not announced"},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200
    assert dep.webhooks_sent(10)
    assert dep.webhook_stats()["sent"] == sent


def test_duplicate_and_out_of_order_events_are_harmless(
    dep: Any, receiver: Listener, api: httpx.Client
) -> None:
    ids = [str(i) for i in load("Appointment", receiver.store)["id"][10:13]]
    for n, rid in enumerate(ids):
        api.patch(
            f"Appointment/{rid}",
            json={"description": f"version {n}"},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    settle(dep, receiver)
    before = load("Appointment", receiver.store)
    # replay them reversed, twice, plus one for a record deleted meanwhile
    dep.delete("Appointment", [ids[0]])
    settle(dep, receiver)
    headers = {NAME: VALUE.encode(), "Content-Type": "application/json"}
    for _ in range(2):
        for rid in reversed(ids):
            body = notification(("Appointment", rid), reference="/main/{type}/{id}")
            assert httpx.post(receiver.url, content=body, headers=headers).status_code == 202
    assert receiver.wait_idle(30)
    after = load("Appointment", receiver.store)
    assert after.height == before.height - 1
    assert after["id"].n_unique() == after.height
    assert ids[0] not in after["id"].to_list()  # the late update did not resurrect it
    for n, rid in enumerate(ids[1:], start=1):
        assert appointment(receiver.store, rid)["description"] == f"version {n}"
    assert verify(receiver.store).ok


def test_a_record_failing_its_schema_is_set_aside_and_the_others_applied(
    dep: Any, receiver: Listener, api: httpx.Client
) -> None:
    ids = [str(i) for i in load("Appointment", receiver.store)["id"][40:48]]
    dep.set_fault("missing-required")  # some Appointments are served without "end"
    try:
        broken = [rid for rid in ids if "end" not in api.get(f"Appointment/{rid}").json()]
        fine = [rid for rid in ids if rid not in broken]
        assert broken and fine
        headers = {NAME: VALUE.encode(), "Content-Type": "application/json"}
        body = notification(*[("Appointment", rid) for rid in ids])
        assert httpx.post(receiver.url, content=body, headers=headers).status_code == 202
        assert receiver.wait_idle(30)
    finally:
        dep.set_fault(None)
    failed = receiver.queue.dead_letters()
    assert {letter["record"] for letter in failed} == {f"Appointment/{rid}" for rid in broken}
    assert all("fails its schema" in letter["reason"] for letter in failed)
    assert receiver.stats.failures == len(broken)
    assert receiver.queue.count() == 0
    assert verify(receiver.store).ok


def test_a_delete_of_a_record_the_api_still_serves_is_applied_as_an_update(
    dep: Any, receiver: Listener, api: httpx.Client
) -> None:
    rid = str(load("Appointment", receiver.store)["id"][8])
    api.patch(
        f"Appointment/{rid}",
        json={"description": "still here"},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    settle(dep, receiver)
    headers = {NAME: VALUE.encode(), "Content-Type": "application/json"}
    body = notification(("Appointment", rid), delete=True)  # a forged or mistaken delete
    assert httpx.post(receiver.url, content=body, headers=headers).status_code == 202
    assert receiver.wait_idle(30)
    assert appointment(receiver.store, rid)["description"] == "still here"
    assert verify(receiver.store).ok
