"""Every acknowledged change lands: a flaky upstream, poison events, a full queue, new types.

The receiver runs over real loopback HTTP; its record reads go through a small
relay (``flaky.py``) that breaks them as a misbehaving deployment would.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import SECRET_HEADER, notification
from tests.listen.flaky import every_nth, flaky_upstream, made_through
from toolkit.client import Client
from toolkit.errors import PmtkError
from toolkit.store import load, read_manifest, sync, verify
from toolkit.webhooks import listen

NAME, VALUE = SECRET_HEADER
HEADER_TEXT = f"{NAME}: {VALUE}"
HEADERS = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}
PMTK = [sys.executable, "-c", "from toolkit.cli import app; app()"]


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def _relay_client(dep: Any, base_url: str, store: Path) -> Client:
    """A client reaching ``dep`` through a relay at ``base_url``; ``store`` (synced from
    ``dep`` directly) is marked as made through the relay, which is the same deployment
    at another address, so that the store's deployment check lets the receiver use it."""
    made_through(store, base_url)
    return Client(
        base_url=base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=None,
        progress=False,
    )


def _describe(api: httpx.Client, rids: list[str], text: str) -> None:
    for n, rid in enumerate(rids):
        describe(api, rid, f"{text} {n}")


def _descriptions(store: Path, rids: list[str]) -> dict[str, str | None]:
    rows = load("Appointment", store).filter(pl.col("id").is_in(rids))
    return dict(zip(rows["id"].to_list(), rows["description"].to_list(), strict=True))


def test_every_change_lands_when_a_tenth_of_the_reads_fail(
    dep: Any, store: Path, api: httpx.Client
) -> None:
    rids = [str(i) for i in load("Appointment", store)["id"][:100]]
    _describe(api, rids, "flaky")
    with (
        flaky_upstream(dep.base_url, every_nth(10)) as flaky,
        _relay_client(dep, flaky.base_url, store) as client,
        listen(store, client=client, auth_header=HEADER_TEXT, catch_up=False) as receiver,
    ):
        for start in range(0, len(rids), 10):
            body = notification(*[("Appointment", rid) for rid in rids[start : start + 10]])
            assert httpx.post(receiver.url, content=body, headers=HEADERS).status_code == 202
        assert receiver.wait_idle(60), receiver.status()
        status = receiver.status()
    assert _descriptions(store, rids) == {rid: f"flaky {n}" for n, rid in enumerate(rids)}
    assert flaky.broken >= 10
    assert status["dead_letters"] == 0 and status["queue"]["events"] == 0
    # one read per change, plus one per broken read: about 1.1, not a batch read again
    assert receiver.stats.requests <= len(rids) + flaky.broken + 2
    assert receiver.stats.retried == flaky.broken
    assert verify(store).ok


@pytest.mark.parametrize("rid", ["..", ".", "a" * 65, "%2e%2e", "..%2F..%2Foauth", "a b"], ids=repr)
def test_an_id_the_client_would_refuse_is_400_and_never_queued(
    dep: Any, store: Path, client: Client, rid: str
) -> None:
    with listen(store, client=client, auth_header=HEADER_TEXT, catch_up=False) as receiver:
        body = notification(("Patient", rid), reference="/main/{type}/{id}")
        response = httpx.post(receiver.url, content=body, headers=HEADERS)
        assert response.status_code == 400, response.text
        assert "focus.reference" in response.json()["issue"][0]["diagnostics"]
        assert receiver.queue.count() == 0
        assert not any(receiver.queue.states().values())


def test_a_poison_change_goes_to_the_dead_letters_and_the_rest_of_its_batch_lands(
    dep: Any, store: Path, api: httpx.Client, tmp_path: Path
) -> None:
    rids = [str(i) for i in load("Appointment", store)["id"][100:106]]
    refused, failing = rids[0], rids[1]
    _describe(api, rids, "poison")
    broken = {"on": True}

    def policy(_rtype: str, rid: str, _seen: int) -> int | None:
        if not broken["on"]:
            return None
        return {refused: 400, failing: 500}.get(rid)

    with (
        flaky_upstream(dep.base_url, policy) as flaky,
        _relay_client(dep, flaky.base_url, store) as client,
        listen(
            store, client=client, auth_header=HEADER_TEXT, catch_up=False, max_attempts=3
        ) as receiver,
    ):
        body = notification(*[("Appointment", rid) for rid in rids])
        assert httpx.post(receiver.url, content=body, headers=HEADERS).status_code == 202
        assert receiver.wait_idle(30), receiver.status()
        landed = _descriptions(store, rids)
        assert all(landed[rid] == f"poison {n}" for n, rid in enumerate(rids) if n > 1)
        assert landed[refused] != "poison 0" and landed[failing] != "poison 1"
        dead = {
            letter["record"].split("/", 1)[1]: letter for letter in receiver.queue.dead_letters()
        }
        assert set(dead) == {refused, failing}
        assert "400" in dead[refused]["reason"] and dead[refused]["attempts"] == 1
        assert "gave up after 3 attempt(s)" in dead[failing]["reason"]
        assert "500" in dead[failing]["reason"]
        assert flaky.reads[("Appointment", failing)] == 3
        status = receiver.status()
        assert status["dead_letters"] == 2 and status["queue"]["events"] == 0
        # The operator fixes the cause, then queues the dead letters again.
        broken["on"] = False
        done = subprocess.run(
            [*PMTK, "listen", "--store", str(store), "--retry-dead"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONIOENCODING": "utf-8"},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "requeued 2 dead letter(s)" in done.stdout
        receiver.wake.set()
        assert receiver.wait_idle(30), receiver.status()
        assert receiver.status()["dead_letters"] == 0
    assert _descriptions(store, rids) == {rid: f"poison {n}" for n, rid in enumerate(rids)}


def test_an_event_never_creates_a_table_and_waits_for_a_sync_of_its_type(
    dep: Any, client: Client, tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh"
    with listen(fresh, client=client, no_auth=True, catch_up=False) as receiver:
        body = notification(("Patient", "100001"))
        headers = {"Content-Type": "application/json"}
        assert httpx.post(receiver.url, content=body, headers=headers).status_code == 202
        assert receiver.wait_idle(30)
        assert "Patient" not in (read_manifest(fresh).get("resources") or {})
        with pytest.raises(PmtkError):
            load("Patient", fresh)
        assert receiver.status()["queue"]["waiting_for_sync"] == {"Patient": 1}
        assert receiver.stats.applied == 0
        sync(client, fresh, resources=["Patient"], progress=False)  # the catch-up, by hand
        receiver.wake.set()
        assert receiver.wait_idle(30)
        assert receiver.stats.applied == 1
        assert receiver.status()["queue"]["waiting_for_sync"] == {}
    patients = load("Patient", fresh)
    assert patients.height > 1 and "100001" in patients["id"].to_list()


def test_a_full_queue_answers_503_with_retry_after_and_everything_acknowledged_lands(
    dep: Any, store: Path, client: Client, api: httpx.Client
) -> None:
    rids = [str(i) for i in load("Appointment", store)["id"][200:400]]
    _describe(api, rids, "capped")
    cap = 30_000
    acknowledged: list[str] = []
    with listen(store, client=client, no_auth=True, catch_up=False, max_queue_bytes=cap) as r:
        headers = {"Content-Type": "application/json"}
        with (store / ".lock").open("a+") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # a long sync holds the store: nothing applies
            answers = []
            for start in range(0, len(rids), 20):
                chunk = rids[start : start + 20]
                body = notification(*[("Appointment", rid) for rid in chunk])
                answer = httpx.post(r.url, content=body, headers=headers)
                answers.append(answer)
                if answer.status_code == 202:
                    acknowledged += chunk
            codes = [a.status_code for a in answers]
            assert set(codes) == {202, 503}, codes
            assert codes.index(503) > 0 and 202 not in codes[codes.index(503) :]
            refused = [a for a in answers if a.status_code == 503]
            assert all(a.headers.get("retry-after", "").isdigit() for a in refused)
            assert r.queue.bytes() <= cap + 10_000  # at most one notification past the cap
            assert r.status()["accepting"] is False
            fcntl.flock(held, fcntl.LOCK_UN)
        assert r.wait_idle(90), r.status()
        after = httpx.post(r.url, content=notification(("Appointment", rids[-1])), headers=headers)
        assert after.status_code == 202
        assert r.wait_idle(30)
    landed = _descriptions(store, acknowledged)
    assert landed == {rid: f"capped {rids.index(rid)}" for rid in acknowledged}
