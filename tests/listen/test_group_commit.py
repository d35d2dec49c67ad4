"""Deliveries that arrive together share their fsyncs, and a 202 still means "on disk".

The mock announces its writes with several deliveries in flight (as Stripe and
GitHub send); the receiver writes the notifications that arrive while it is
fsyncing as one group (one file, one file fsync, one folder fsync) and answers
every one of them only after that. Checked here over real loopback HTTP:

- a group is shared: deliveries held up by a slow disk are written together, and
  none is answered before the folder fsync returns;
- a failing fsync answers 503 to every delivery of its group, never 202;
- a ``pmtk listen`` child is killed with SIGKILL at each step of a group commit
  (bytes written but not fsynced; fsynced and renamed but the folder not fsynced;
  all fsynced but nobody answered): every change it answered 202 for is in its
  queue on disk, the mock retries the ones it did not answer, and a new receiver
  on the same store applies every change.

A SIGKILL keeps the page cache, so the kill tests prove that nothing is answered
before it is written and that a restart recovers; that nothing is answered before
the fsyncs is what the blocked-fsync test proves.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import RATE, SECRET_HEADER, notification
from toolkit.client import Client
from toolkit.store import load, verify
from toolkit.webhooks import Listener, listen

NAME, VALUE = SECRET_HEADER
HEADER_TEXT = f"{NAME}: {VALUE}"
HEADERS = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}
KILLPOINT = Path(__file__).with_name("killpoint.py")
ROOT = Path(__file__).resolve().parents[2]


class Relay:
    """A stdlib HTTP server between the mock's sender and a receiver that may be dead.

    It forwards each POST to ``target`` and notes the focus id, the eventNumber and
    the receiver's status (502 when nothing answered, which the sender retries).
    """

    def __init__(self) -> None:
        self.target = ""
        self.answers: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {
                    k: v.encode("latin-1")
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length", "connection")
                }
                try:
                    status = httpx.post(
                        relay.target, content=body, headers=headers, timeout=20
                    ).status_code
                except httpx.HTTPError:
                    status = 502
                event = orjson.loads(body)["entry"][0]["resource"]["notificationEvent"][0]
                rid = event["focus"]["reference"].rsplit("/", 1)[1]
                with relay.lock:
                    relay.answers.append((rid, event["eventNumber"], status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def acknowledged(self) -> set[str]:
        with self.lock:
            return {rid for rid, _number, status in self.answers if status == 202}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def relay() -> Iterator[Relay]:
    r = Relay()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="module")
def dep(relay: Relay) -> Iterator[Any]:
    """The module's mock, announcing its writes through the relay, eight at a time."""
    from toolkit.mock import serve

    with serve(
        seed=0,
        scale="small",
        rate_limit=RATE,
        test_controls=True,
        webhook=relay.url,
        webhook_header=HEADER_TEXT,
        webhook_concurrency=8,
    ) as deployment:
        yield deployment


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def _queued_ids(store: Path) -> set[str]:
    """Record ids queued in the journal on disk (what a restarted receiver will apply),
    read with plain ``sqlite3``."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(store / ".webhooks" / "journal.sqlite3")) as db:
        rows = db.execute(
            "SELECT rid FROM changes WHERE state IN ('queued', 'claimed', 'read')"
        ).fetchall()
    return {str(rid) for (rid,) in rows}


def _slow_intake(monkeypatch: pytest.MonkeyPatch, first: Callable[[], None]) -> list[str]:
    """Run ``first`` inside the first intake transaction (before its commit); the names
    of the transactions made are returned as they happen."""
    from toolkit.webhooks.journal import EventQueue

    real = EventQueue._transaction
    calls: list[str] = []

    @contextlib.contextmanager
    def transaction(self: EventQueue, step: str) -> Iterator[Any]:
        calls.append(step)
        with real(self, step) as db:
            yield db
            if step == "intake" and calls.count("intake") == 1:
                first()

    monkeypatch.setattr(EventQueue, "_transaction", transaction)
    return calls


def _wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _idle_worker(listener: Listener) -> None:
    """A worker that applies nothing until stopped: the queue files stay to be counted."""
    listener.caught_up.set()
    listener._stop.wait()


def _post_together(url: str, bodies: list[bytes]) -> list[int]:
    """POST every body at once from its own thread; the statuses in order."""
    codes = [0] * len(bodies)

    def send(n: int) -> None:
        codes[n] = httpx.post(url, content=bodies[n], headers=HEADERS, timeout=30).status_code

    threads = [threading.Thread(target=send, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return codes


def test_deliveries_arriving_during_an_fsync_share_the_next_one_and_wait_for_it(
    store: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = threading.Event()
    release = threading.Event()

    def slow_disk() -> None:
        entered.set()
        assert release.wait(30)  # the disk is slow: the first commit takes a while

    calls = _slow_intake(monkeypatch, slow_disk)
    monkeypatch.setattr(Listener, "_work", _idle_worker)
    ids = [str(i) for i in load("Appointment", store)["id"][40:52]]
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        first: list[int] = []
        lone = threading.Thread(
            target=lambda: first.extend(
                _post_together(receiver.url, [notification(("Appointment", ids[0]))])
            )
        )
        lone.start()
        assert entered.wait(30)
        # eleven more arrive while the first group's folder fsync has not returned
        later: list[int] = []
        crowd = threading.Thread(
            target=lambda: later.extend(
                _post_together(
                    receiver.url, [notification(("Appointment", rid)) for rid in ids[1:]]
                )
            )
        )
        crowd.start()
        deadline = time.monotonic() + 30
        while len(receiver.queue._arrived) < 11 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(receiver.queue._arrived) == 11  # all waiting behind the first group
        assert first == [] and later == []  # nobody heard 202 before the commit
        release.set()
        lone.join(30)
        crowd.join(60)
        assert first == [202] and later == [202] * 11
        # two group commits for twelve deliveries: the first alone, the eleven together
        assert receiver.queue.group_commits == 2
        assert receiver.queue.grouped == 12
        assert calls.count("intake") == 2
    assert _queued_ids(store) == set(ids)


def test_a_failed_fsync_answers_503_to_its_whole_group_and_never_202(
    store: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    def failing_disk() -> None:
        time.sleep(0.3)  # long enough for the others to join the next group
        raise sqlite3.OperationalError("disk I/O error")

    _slow_intake(monkeypatch, failing_disk)
    monkeypatch.setattr(Listener, "_work", _idle_worker)
    ids = [str(i) for i in load("Appointment", store)["id"][60:66]]
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        codes = _post_together(receiver.url, [notification(("Appointment", r)) for r in ids])
        assert 503 in codes and set(codes) <= {202, 503}, codes
        assert codes.count(202) == receiver.queue.grouped  # the failed group is not counted
        assert receiver.stats.received == codes.count(202)
        # the groups written since have cleared it from last_error: it stays as resolved
        seen = receiver.stats.last_error or receiver.stats.resolved_error or ""
        assert "writing the event queue failed" in seen
        # the sender retries the 503s: now they are written
        again = [
            notification(("Appointment", r)) for r, c in zip(ids, codes, strict=True) if c == 503
        ]
        assert _post_together(receiver.url, again) == [202] * len(again)
    assert _queued_ids(store) == set(ids)


def _listen_child(dep: Any, store: Path, step: str, when: str, nth: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        "PM_WEBHOOK_AUTH": HEADER_TEXT,
        "PYTHONIOENCODING": "utf-8",
        "PYTHONPATH": str(ROOT),
    }
    options = ["--store", str(store), "--port", "0", "--no-catch-up", "--base-url", dep.base_url]
    return subprocess.Popen(
        [sys.executable, str(KILLPOINT), step, when, str(nth), "listen", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        encoding="utf-8",
    )


@pytest.mark.parametrize("step", ["before", "after"])
def test_a_kill_at_each_step_of_a_group_commit_loses_nothing_acknowledged(
    step: str, dep: Any, relay: Relay, store: Path, api: httpx.Client, client: Client
) -> None:
    ids = [str(i) for i in load("Appointment", store)["id"][100:124]]
    texts = {rid: f"kill {step} {n}" for n, rid in enumerate(ids)}
    assert dep.webhooks_sent(30)
    before = dep.webhook_stats()
    relay.answers.clear()
    lock = (store / ".lock").open("a+")
    # four commits one at a time, answered; then a burst, whose second commit is killed
    with _listen_child(dep, store, "intake", step, nth=6) as proc:
        try:
            assert proc.stdout is not None
            banner = "".join(proc.stdout.readline() for _ in range(3))
            assert banner.startswith("webhook URL: "), banner
            relay.target = banner.splitlines()[0].split(": ", 1)[1].strip()
            # A writer holds the store: the child acknowledges and queues, applies nothing.
            fcntl.flock(lock, fcntl.LOCK_EX)
            for rid in ids[:4]:
                describe(api, rid, texts[rid])
                _wait_for(lambda rid=rid: rid in relay.acknowledged())
            for rid in ids[4:]:
                describe(api, rid, texts[rid])
            proc.wait(timeout=60)  # it dies in its sixth group commit
            acknowledged = relay.acknowledged()
            on_disk = _queued_ids(store)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            _out, errors = proc.communicate(timeout=30)
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
    assert proc.returncode == -signal.SIGKILL, errors
    # the first four commits were answered; the sixth died before any answer
    assert set(ids[:4]) <= acknowledged, (relay.answers, errors)
    assert acknowledged <= on_disk, acknowledged - on_disk
    assert len(acknowledged) < len(ids)
    # the mock retries what was not answered (the relay says 502 while nobody listens)
    deadline = time.monotonic() + 30
    while dep.webhook_stats()["retries"] == before["retries"]:
        assert time.monotonic() < deadline, dep.webhook_stats()
        time.sleep(0.05)

    with listen(store, client=client, auth_header=HEADER_TEXT, catch_up=False) as receiver:
        relay.target = receiver.url
        assert dep.webhooks_sent(60), dep.webhook_stats()
        assert receiver.wait_idle(60), receiver.stats
    after = dep.webhook_stats()
    assert after["sent"] - before["sent"] == len(ids)
    assert after["refused"] == before["refused"] and after["dropped"] == before["dropped"]
    answered = relay.acknowledged()
    assert answered == set(ids)  # every announcement heard 202 in the end
    stored = load("Appointment", store).filter(pl.col("id").is_in(ids))
    assert dict(zip(stored["id"], stored["description"], strict=True)) == texts
    assert verify(store).ok


def test_the_receiver_keeps_up_with_several_deliveries_in_flight(
    dep: Any, relay: Relay, store: Path, api: httpx.Client, client: Client
) -> None:
    """Forty writes in a row: the mock has up to eight in flight, and all land."""
    ids = [str(i) for i in load("Appointment", store)["id"][200:240]]
    assert dep.webhooks_sent(30)
    with listen(store, client=client, auth_header=HEADER_TEXT, catch_up=False) as receiver:
        relay.target = receiver.url
        for rid in ids:
            describe(api, rid, f"in flight {rid}")
        assert dep.webhooks_sent(60), dep.webhook_stats()
        assert receiver.wait_idle(60), receiver.stats
        assert receiver.queue.grouped >= len(ids)
    assert dep.webhook_stats()["most_in_flight"] <= 8
    stored = load("Appointment", store).filter(pl.col("id").is_in(ids))
    assert dict(zip(stored["id"], stored["description"], strict=True)) == {
        rid: f"in flight {rid}" for rid in ids
    }
