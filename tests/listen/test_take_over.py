"""One worker per journal, and ``pmtk listen --take-over``: a restart without a pause.

A stop-and-start restart closes the port while the old process stops and the new one
starts and warms up; every change announced meanwhile is late. ``--take-over`` serves
on the same port beside the old receiver, asks it to stop, and starts its worker only
once the old worker has stopped (``toolkit/webhooks/handover.py``). Each test posts
notifications written by hand (``public-docs-facts.md``, "Events") over loopback, and
the worker reads every record from the real mock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import SECRET_HEADER, free_port, listen_process, notification
from tests.listen.test_every_event_once import SUB, numbered, patients, post
from toolkit.client import Client
from toolkit.errors import ConfigurationError
from toolkit.store import load, verify
from toolkit.webhooks import listen
from toolkit.webhooks.eventlog import EventLog
from toolkit.webhooks.handover import WorkerLock

NAME, VALUE = SECRET_HEADER


def _rows(store: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(store / ".webhooks" / "journal.sqlite3")) as db:
        return int(db.execute("SELECT count(*) FROM changes").fetchone()[0])


def test_a_second_receiver_of_one_store_is_refused(store: Path, client: Client) -> None:
    """Two workers on one journal would put each other's claimed changes back in the
    queue and read them twice; the second receiver is refused before it binds."""
    (rid,) = patients(store, 1)
    with listen(store, client=client, no_auth=True, catch_up=False) as first:
        second = listen(store, client=client, no_auth=True, catch_up=False)
        with pytest.raises(ConfigurationError) as refused, second:
            pytest.fail("a second receiver of one store started")
        text = str(refused.value)
        assert f"pid {os.getpid()}" in text and f":{first.port}" in text
        assert "--take-over" in text
        assert post(first.url, numbered("Patient", rid, 1)) == 202  # the first still works
        assert first.wait_idle(30) and first.stats.applied == 1


def test_a_port_another_receiver_holds_is_refused_without_take_over(
    store: Path, template: Path, tmp_path: Path, client: Client
) -> None:
    """Every receiver binds with SO_REUSEPORT (so that it can be taken over); without
    ``take_over`` the port must still be free, or receivers of two stores would share
    a port and the kernel would split the deliveries between them."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(template, other)
    with listen(store, client=client, no_auth=True, catch_up=False) as first:
        second = listen(other, client=client, no_auth=True, catch_up=False, port=first.port)
        bound = rf"could not bind 127\.0\.0\.1:{first.port}"
        with pytest.raises(ConfigurationError, match=bound), second:
            pytest.fail("two receivers shared a port")
        assert not (other / ".webhooks" / "receiver.json").exists()


def test_take_over_serves_before_the_old_worker_stops_and_works_only_after(
    store: Path, client: Client
) -> None:
    """The old worker is the test holding the journal's lock. Meanwhile the new receiver
    answers 202 and journals (no pause for the sender) but applies nothing; once the
    lock is free it applies what it received, and it knows the event numbers the old
    receiver saved meanwhile (a replay of them makes no read)."""
    ids = patients(store, 9)
    port = free_port()
    old = WorkerLock(store)
    assert old.take(0)
    state: dict[str, Any] = {}
    up, done = threading.Event(), threading.Event()

    def run() -> None:
        try:
            with listen(
                store, client=client, no_auth=True, catch_up=False, port=port, take_over=True
            ) as rx:
                state["rx"] = rx
                up.set()
                done.wait(60)
        except BaseException as exc:  # reported below
            state["error"] = exc
            up.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/webhook"
    try:
        deadline = time.monotonic() + 60
        code = 0
        while code != 202 and time.monotonic() < deadline:
            try:
                code = post(url, numbered("Patient", ids[6], 6))
            except httpx.TransportError:
                time.sleep(0.05)
        assert code == 202, state
        assert post(url, numbered("Patient", ids[7], 7)) == 202
        # the old receiver saved numbers 1-5 of the same subscription meanwhile
        theirs = EventLog(store / ".webhooks")
        for n in range(1, 6):
            key = [(SUB, str(n))]
            assert theirs.claim(key)[0] == [True]
            theirs.confirm(key, ["Patient"])
        theirs.save()
        time.sleep(0.6)  # longer than the log's save interval and a worker's poll
        # a delivery now would make the new receiver save its log over the old one's
        assert post(url, numbered("Patient", ids[8], 8)) == 202
        time.sleep(0.6)
        assert not up.is_set(), "the worker started while the old one held the journal"
        assert _rows(store) == 3  # journalled, not applied
        before = client.requests_sent
        old.release()
        assert up.wait(60) and "error" not in state, state
        rx = state["rx"]
        assert rx.wait_idle(30), rx.status()
        assert rx.stats.applied == 3 and client.requests_sent - before == 3
        replays = [numbered("Patient", ids[n - 1], n) for n in (3, 6)]
        assert [post(url, body) for body in replays] == [202, 202]
        assert rx.wait_idle(30)
        assert client.requests_sent - before == 3  # neither replay was read
        assert rx.status()["events"]["subscriptions"][SUB]["missing_count"] == 0
    finally:
        old.release()
        done.set()
        thread.join(60)
    saved = EventLog(store / ".webhooks")
    assert saved.status()["subscriptions"][SUB]["highest"] == 8
    assert saved.claim([(SUB, str(n)) for n in range(1, 9)])[0] == [False] * 8  # all seen


@pytest.fixture
def api(dep: Any) -> Iterator[httpx.Client]:
    with api_client(dep) as c:
        yield c


def _pmtk_listen(dep: Any, store: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    env = {"PM_WEBHOOK_AUTH": f"{NAME}: {VALUE}", "NO_COLOR": "1"}
    argv = ["--store", str(store), "--port", str(port), "--no-catch-up", "--base-url", dep.base_url]
    return listen_process(dep, [*argv, *extra], env=env)


def _wait_for_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"pmtk listen ended (exit {proc.wait()}) before {prefix!r}")
        if line.startswith(prefix):
            return line


def _until(done: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Whether ``done()`` came true within ``timeout`` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_take_over_of_a_running_pmtk_listen_loses_no_change(
    dep: Any, store: Path, api: httpx.Client
) -> None:
    """A sender announces a change every 20 ms (retrying a refused connection, as the
    vendor's would have to) while a second ``pmtk listen --take-over`` replaces the
    first: the first exits cleanly, and every change acknowledged by either is in the
    store afterwards."""
    ids = [str(i) for i in load("Appointment", store)["id"].to_list()[:400]]
    port = free_port()
    headers = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}
    old = _pmtk_listen(dep, store, port)
    new: subprocess.Popen[str] | None = None
    written: dict[str, str] = {}
    stop = threading.Event()
    failures: list[str] = []

    def announce() -> None:
        for n, rid in enumerate(ids):
            if stop.is_set():
                return
            text = f"take-over {n}"
            describe(api, rid, text)
            body = notification(("Appointment", rid))
            for _attempt in range(200):
                try:
                    code = httpx.post(
                        f"http://127.0.0.1:{port}/webhook", content=body, headers=headers
                    ).status_code
                except httpx.TransportError as exc:
                    failures.append(type(exc).__name__)
                    time.sleep(0.02)
                    continue
                if code == 202:
                    written[rid] = text
                    break
                failures.append(str(code))
                time.sleep(0.02)
            time.sleep(0.02)

    sender = threading.Thread(target=announce, daemon=True)
    try:
        _wait_for_line(old, "webhook URL: ")
        sender.start()
        # Counted, not timed, so that a loaded machine still sends changes to each side.
        assert _until(lambda: len(written) >= 25), failures  # acknowledged by the old one
        new = _pmtk_listen(dep, store, port, "--take-over")
        assert old.wait(120) == 0
        _wait_for_line(new, "webhook URL: ")
        up = len(written)
        assert _until(lambda: len(written) >= up + 25), failures  # ... and by the new one
        stop.set()
        sender.join(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stored = load("Appointment", store).filter(pl.col("id").is_in(list(written)))
            got = dict(zip(stored["id"].to_list(), stored["description"].to_list(), strict=True))
            if all(got.get(rid) == text for rid, text in written.items()):
                break
            time.sleep(0.2)
        late = {rid: (text, got.get(rid)) for rid, text in written.items() if got.get(rid) != text}
        assert not late, f"{len(late)} acknowledged change(s) not applied: {list(late.items())[:3]}"
    finally:
        stop.set()
        said = {}
        for name, proc in (("old", old), ("new", new)):
            if proc is not None:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                said[name] = proc.communicate(timeout=60)  # also closes the pipes
    errors = said["new"][1]
    assert f"taking over from pid {old.pid}" in errors, errors
    assert VALUE not in errors
    assert verify(store).ok


def test_a_take_over_whose_old_worker_never_stops_gives_up_and_keeps_what_it_received(
    store: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old worker (the test holding the lock) never stops: the new receiver gives
    up with an error after the wait, and the deliveries it acknowledged meanwhile stay
    in the journal, applied by the next worker to run."""
    import toolkit.webhooks.serve as serve

    monkeypatch.setattr(serve, "TAKE_OVER_WAIT", 1.5)
    (rid,) = patients(store, 1)
    port = free_port()
    old = WorkerLock(store)
    assert old.take(0)
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            with listen(
                store, client=client, no_auth=True, catch_up=False, port=port, take_over=True
            ):
                pytest.fail("the take-over went on while the old worker ran")
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        code = 0
        deadline = time.monotonic() + 30
        while code != 202 and time.monotonic() < deadline and thread.is_alive():
            with contextlib.suppress(httpx.TransportError):
                code = post(f"http://127.0.0.1:{port}/webhook", numbered("Patient", rid, 1))
        assert code == 202
        thread.join(30)
    finally:
        old.release()
    error = outcome.get("error")
    assert isinstance(error, ConfigurationError) and "did not stop within 1.5 s" in str(error)
    assert _rows(store) == 1
    with listen(store, client=client, no_auth=True, catch_up=False) as rx:
        assert rx.wait_idle(30) and rx.stats.applied == 1
    assert _rows(store) == 0
