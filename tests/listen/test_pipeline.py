"""The pipelined worker: the next batch is read while the last one commits.

Two hazards come with it, each tried over real loopback HTTP against a real receiver
whose record reads pass through a small relay written here from the spec's forms
(it relays every call to the mock and can hold back one record's answer):

- two changes of one record in two batches, the earlier read slow (its answer taken
  before the second change), the later read fast: the store must end with the later
  version, even when ``meta.lastUpdated`` cannot order them (the relay gives both the
  same stamp, as a service stamping to the second would);
- a commit that fails or crashes while the next batch is being read: nothing
  acknowledged may be lost, and nothing read before the failure committed over it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import SECRET_HEADER, notification
from tests.listen.flaky import forward, made_through, send_back
from toolkit.client import Client
from toolkit.store import load, verify
from toolkit.webhooks import listen

NAME, VALUE = SECRET_HEADER
HEADER_TEXT = f"{NAME}: {VALUE}"
HEADERS = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}
SAME_STAMP = "2099-01-01T00:00:00Z"
"""Every relayed Appointment gets this ``meta.lastUpdated``: the store cannot order two
versions by it, so only the worker's own ordering keeps the later one."""


Hold = Callable[[str, int], "threading.Event | None"]


class Relay:
    """A relay to the mock whose ``hold(rid, reads before)`` may name a gate that the
    record read's answer (fetched at once: the version of that moment) waits for."""

    def __init__(self, upstream: str, hold: Hold) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/main")
        self.hold = hold
        self.holding: Counter[str] = Counter()  # reads of the record being held now
        self.reads: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.base_url = ""


def _handler(relay: Relay, http: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet

        def _relay(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            answer = forward(self, http, relay.upstream, body)
            content = answer.content
            parts = self.path.split("?")[0].split("/")
            if self.command == "GET" and len(parts) == 4 and parts[2] == "Appointment":
                rid = parts[3]
                with relay.lock:
                    seen = relay.reads[rid]
                    relay.reads[rid] += 1
                if answer.status_code == 200:
                    record = orjson.loads(content)
                    record.setdefault("meta", {})["lastUpdated"] = SAME_STAMP
                    content = orjson.dumps(record)
                gate = relay.hold(rid, seen)
                if gate is not None:
                    with relay.lock:
                        relay.holding[rid] += 1
                    gate.wait(30)
                    with relay.lock:
                        relay.holding[rid] -= 1
            send_back(self, answer, content)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _relay

    return Handler


@contextmanager
def relay_to(upstream: str, hold: Hold, gates: list[threading.Event]) -> Iterator[Relay]:
    relay = Relay(upstream, hold)
    with httpx.Client(timeout=30, trust_env=False) as http:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(relay, http))
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        relay.base_url = f"http://127.0.0.1:{server.server_address[1]}/main"
        try:
            yield relay
        finally:
            for gate in gates:
                gate.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def _client_through(dep: Any, base_url: str, store: Path) -> Client:
    """A client reaching ``dep`` through the relay; the store is marked as made there."""
    made_through(store, base_url)
    return Client(
        base_url=base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=None,
        progress=False,
    )


def _post(url: str, *rids: str) -> None:
    body = notification(*[("Appointment", rid) for rid in rids])
    answer = httpx.post(url, content=body, headers=HEADERS)
    assert answer.status_code == 202, answer.text


def _descriptions(store: Path, rids: list[str]) -> dict[str, str | None]:
    rows = load("Appointment", store).filter(pl.col("id").is_in(rids))
    return dict(zip(rows["id"].to_list(), rows["description"].to_list(), strict=True))


def _until(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_a_slow_earlier_read_never_lands_over_a_fast_later_one(
    dep: Any, store: Path, api: httpx.Client
) -> None:
    rid, other = (str(i) for i in load("Appointment", store)["id"][200:202])
    gate = threading.Event()
    with (
        relay_to(dep.base_url, lambda r, n: gate if (r, n) == (rid, 0) else None, [gate]) as relay,
        _client_through(dep, relay.base_url, store) as client,
        listen(store, client=client, auth_header=HEADER_TEXT, catch_up=False) as receiver,
    ):
        describe(api, rid, "earlier")
        _post(receiver.url, rid)
        # The first read has its answer ("earlier") and is held back, slow.
        assert _until(lambda: relay.holding[rid] == 1), relay.reads
        describe(api, rid, "later")
        describe(api, other, "later too")
        _post(receiver.url, rid, other)  # the second batch, queued behind the slow read
        time.sleep(0.3)
        gate.set()
        assert receiver.wait_idle(60), receiver.status()
        batches = receiver.stats.batches
    assert _descriptions(store, [rid, other]) == {rid: "later", other: "later too"}
    assert relay.reads[rid] == 2, relay.reads  # two batches, each read the record once
    assert batches >= 2
    assert verify(store).ok


@pytest.mark.parametrize("how", ["store-write-fails", "worker-crashes"])
def test_a_commit_failing_while_the_next_batch_is_read_loses_nothing(
    dep: Any, store: Path, api: httpx.Client, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    rids = [str(i) for i in load("Appointment", store)["id"][300:306]]
    first, second = rids[:3], rids[3:]
    # The first read of each batch's first record waits for that batch's gate.
    gates = {first[0]: threading.Event(), second[0]: threading.Event()}
    for n, rid in enumerate(rids):
        describe(api, rid, f"pipelined {how} {n}")
    with (
        relay_to(
            dep.base_url, lambda r, n: gates.get(r) if n == 0 else None, list(gates.values())
        ) as relay,
        _client_through(dep, relay.base_url, store) as client,
        listen(store, client=client, auth_header=HEADER_TEXT, catch_up=False) as receiver,
    ):
        failed = threading.Event()

        def reading_next() -> None:
            # fail only once the second batch is on the wire (its first read held)
            assert _until(lambda: relay.holding[second[0]] == 1), relay.reads

        if how == "store-write-fails":
            import toolkit.webhooks.target as target  # where the store target calls it

            real = target.apply_changes

            def apply_once_failing(*args: Any, **kwargs: Any) -> Any:
                if not failed.is_set():
                    reading_next()
                    failed.set()
                    msg = "No space left on device (simulated)"
                    raise OSError(msg)
                return real(*args, **kwargs)

            monkeypatch.setattr(target, "apply_changes", apply_once_failing)
        else:
            real_commit = receiver._commit

            def commit_once_crashing(*args: Any) -> Any:
                if not failed.is_set():
                    reading_next()
                    failed.set()
                    msg = "the worker crashed mid-commit (simulated)"
                    raise RuntimeError(msg)
                return real_commit(*args)

            monkeypatch.setattr(receiver, "_commit", commit_once_crashing)
        _post(receiver.url, *first)
        assert _until(lambda: relay.holding[first[0]] == 1), relay.reads  # batch one is read
        _post(receiver.url, *second)
        time.sleep(0.3)
        # The first batch's reads end; its commit fails while the second batch's
        # first read is still held (it is being read).
        gates[first[0]].set()
        assert failed.wait(30)
        assert relay.holding[second[0]] == 1, relay.reads
        gates[second[0]].set()
        assert receiver.wait_idle(60), receiver.status()
        status = receiver.status()
        restarts = receiver.stats.restarts
        states = receiver.queue.states()
    assert _descriptions(store, rids) == {rid: f"pipelined {how} {n}" for n, rid in enumerate(rids)}
    assert status["dead_letters"] == 0 and status["queue"]["events"] == 0, status
    # the commits that succeeded since have cleared the error: it is shown as resolved
    assert status["last_error"] is None, status
    assert "simulated" in (status["resolved_error"] or {}).get("text", ""), status
    assert restarts == (1 if how == "worker-crashes" else 0)
    # a failed store write queues the batch again (it is read again); a crashed
    # worker's successor applies the reads the journal kept (not read again)
    expected = 2 if how == "store-write-fails" else 1
    assert all(relay.reads[rid] == expected for rid in first), relay.reads
    assert not any(states.values()), states
    assert verify(store).ok
