"""Every event once: a replayed delivery makes no upstream read, also after a restart.

The notifications are written by hand in FHIR's subscription-notification shape
(``public-docs-facts.md``, "Events": ``subscription``, ``eventsSinceSubscriptionStart``
and ``notificationEvent[].eventNumber``), posted over loopback to a real ``listen()``
whose worker reads each record from the real mock. What is counted is the client's
requests, i.e. the reads that reached the API.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.listen.conftest import notification
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import listen

JSON = {"Content-Type": "application/fhir+json"}
SUB = "https://au-api.halaxy.com/main/Subscription/sub-7"


def numbered(
    rtype: str, rid: str, number: int, *, subscription: str = SUB, since: int | None = None
) -> bytes:
    """A notification of one event with its number, as the live service sends it."""
    bundle = orjson.loads(notification((rtype, rid)))
    status = bundle["entry"][0]["resource"]
    status["subscription"] = {"reference": subscription}
    status["eventsSinceSubscriptionStart"] = str(number if since is None else since)
    status["notificationEvent"][0]["eventNumber"] = str(number)
    return orjson.dumps(bundle)


def patients(store: Path, n: int) -> list[str]:
    return [str(i) for i in load("Patient", store)["id"].to_list()[:n]]


def post(url: str, body: bytes) -> int:
    return httpx.post(url, content=body, headers=JSON, timeout=30, trust_env=False).status_code


@pytest.mark.parametrize("numbered_events", [True, False], ids=["eventNumber", "digest"])
@pytest.mark.parametrize("concurrent", [False, True], ids=["one-by-one", "at-once"])
def test_a_delivery_sent_40_times_costs_the_reads_of_one(
    store: Path, client: Client, numbered_events: bool, concurrent: bool
) -> None:
    (rid,) = patients(store, 1)
    body = numbered("Patient", rid, 5) if numbered_events else notification(("Patient", rid))
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        before = client.requests_sent
        if concurrent:
            with ThreadPoolExecutor(8) as pool:
                codes = list(pool.map(lambda _n: post(receiver.url, body), range(40)))
        else:
            codes = [post(receiver.url, body) for _ in range(40)]
        assert codes == [202] * 40
        assert receiver.wait_idle(30), receiver.status()
        assert client.requests_sent - before == 1
        assert receiver.stats.applied == 1
        assert receiver.status()["events"]["duplicates"] == 39


def test_a_replay_after_a_restart_makes_no_read(store: Path, client: Client) -> None:
    first, second = patients(store, 2)
    bodies = [numbered("Patient", first, 11), notification(("Patient", second))]
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        assert [post(receiver.url, b) for b in bodies] == [202, 202]
        assert receiver.wait_idle(30)
    sent = client.requests_sent
    with listen(store, client=client, no_auth=True, catch_up=False) as again:
        assert [post(again.url, b) for b in bodies] == [202, 202]
        assert again.wait_idle(30)
        assert client.requests_sent == sent  # nothing read again
        assert again.stats.applied == 0
        # a new event of the same record is read
        assert post(again.url, numbered("Patient", first, 12)) == 202
        assert again.wait_idle(30)
        assert client.requests_sent == sent + 1


def test_the_same_number_of_another_subscription_is_another_event(
    store: Path, client: Client
) -> None:
    first, second = patients(store, 2)
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        before = client.requests_sent
        assert post(receiver.url, numbered("Patient", first, 3)) == 202
        other = numbered("Patient", second, 3, subscription=SUB.replace("sub-7", "sub-8"))
        assert post(receiver.url, other) == 202
        assert receiver.wait_idle(30)
        assert client.requests_sent - before == 2


def test_a_delivery_refused_503_is_taken_when_sent_again(
    store: Path, client: Client, monkeypatch: Any
) -> None:
    """A claim whose queueing failed is released: the sender's retry is queued, not lost
    as a 'duplicate'."""
    (rid,) = patients(store, 1)
    body = numbered("Patient", rid, 21)
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        real_put = receiver.queue.put
        calls = {"n": 0}

        def failing_once(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError(28, "No space left on device")
            return real_put(*args, **kwargs)

        monkeypatch.setattr(receiver.queue, "put", failing_once)
        before = client.requests_sent
        assert post(receiver.url, body) == 503
        assert post(receiver.url, body) == 202
        assert receiver.wait_idle(30)
        assert client.requests_sent - before == 1 and receiver.stats.applied == 1
