"""The mock's webhook sender, checked by a plain stdlib HTTP server (not pmtk's receiver).

What a receiver must see: a ``history`` Bundle led by a SubscriptionStatus whose
focus references the changed record, the configured header byte for byte, the
events numbered in write order (and delivered in it with a concurrency of 1), at
most ``webhook_concurrency`` deliveries in flight, and a retry with backoff while
the receiver is down.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tests.listen.conftest import SECRET_HEADER, free_port
from toolkit.cli import app
from toolkit.errors import ConfigurationError
from toolkit.mock import serve

NAME, VALUE = SECRET_HEADER


class Recorder:
    """A stdlib HTTP server on 127.0.0.1 that records POSTs and answers ``status``."""

    def __init__(self, port: int, status: int = 202, gate: threading.Event | None = None) -> None:
        self.status = status
        self.calls: list[tuple[dict[str, bytes], bytes]] = []
        self.gate = gate
        self.active = 0
        self.most_active = 0
        self.lock = threading.Lock()
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(size)
                raw = {k.lower(): v.encode("latin-1") for k, v in self.headers.items()}
                with recorder.lock:
                    recorder.active += 1
                    recorder.most_active = max(recorder.most_active, recorder.active)
                if recorder.gate is not None:
                    recorder.gate.wait(30)  # a slow receiver: the answer waits for the test
                with recorder.lock:
                    recorder.active -= 1
                    recorder.calls.append((raw, body))
                self.send_response(recorder.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def accepted(self) -> list[dict[str, Any]]:
        return [orjson.loads(body) for _headers, body in self.calls]


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def wired(port: int) -> Iterator[Any]:
    """A mock announcing to ``port`` with the default concurrency (eight in flight)."""
    with serve(
        scale="small",
        test_controls=True,
        webhook=f"http://127.0.0.1:{port}/hook",
        webhook_header=f"{NAME}: {VALUE}",
    ) as dep:
        yield dep


@pytest.fixture
def serial(port: int) -> Iterator[Any]:
    """A mock announcing one at a time (``webhook_concurrency=1``): strictly in write order."""
    with serve(
        scale="small",
        test_controls=True,
        webhook=f"http://127.0.0.1:{port}/hook",
        webhook_header=f"{NAME}: {VALUE}",
        webhook_concurrency=1,
    ) as dep:
        yield dep


def _number(bundle: dict[str, Any]) -> int:
    return int(bundle["entry"][0]["resource"]["notificationEvent"][0]["eventNumber"])


def _focus_id(bundle: dict[str, Any]) -> str:
    event = bundle["entry"][0]["resource"]["notificationEvent"][0]
    return str(event["focus"]["reference"].rsplit("/", 1)[1])


def test_an_announcement_is_a_history_bundle_with_the_header(wired: Any, port: int) -> None:
    with Recorder(port) as recorder:
        wired.touch("Appointment", ["10000003"])
        wired.touch("Patient", ["100004"])
        wired.delete("Appointment", ["10000005"])
        assert wired.webhooks_sent(10)
    assert len(recorder.calls) == 3
    headers, _body = recorder.calls[0]
    assert headers[NAME.lower()] == VALUE.encode()  # UTF-8, byte for byte
    assert headers["content-type"] == b"application/fhir+json"
    focus = []
    # several are in flight at once, so they may arrive in any order; the numbers
    # follow the writes
    bundles = sorted(recorder.accepted(), key=_number)
    for n, bundle in enumerate(bundles, start=1):
        assert bundle["resourceType"] == "Bundle" and bundle["type"] == "history"
        status = bundle["entry"][0]["resource"]
        assert status["resourceType"] == "SubscriptionStatus"
        event = status["notificationEvent"][0]
        assert event["eventNumber"] == str(n)
        focus.append(event["focus"]["reference"].removeprefix(wired.base_url))
    assert focus == ["/Appointment/10000003", "/Patient/100004", "/Appointment/10000005"]
    deleted = bundles[2]
    assert deleted["entry"][1]["request"] == {"method": "DELETE", "url": "Appointment/10000005"}
    assert deleted["entry"][0]["resource"]["topic"].endswith("appointment-delete")


def test_a_receiver_that_is_down_gets_the_events_in_order_once_it_is_up(
    serial: Any, port: int
) -> None:
    serial.touch("Appointment", ["10000010"])
    serial.touch("Appointment", ["10000011"])
    assert not serial.webhooks_sent(0.4)
    stats = serial.webhook_stats()
    assert stats["retries"] >= 2 and stats["sent"] == 0 and stats["pending"] == 2
    with Recorder(port) as recorder:
        assert serial.webhooks_sent(15), serial.webhook_stats()
    ids = [_focus_id(b) for b in recorder.accepted()]
    assert ids == ["10000010", "10000011"]


def test_a_receiver_that_is_down_gets_every_event_once_from_a_concurrent_sender(
    wired: Any, port: int
) -> None:
    touched = [str(10000040 + n) for n in range(12)]
    wired.touch("Appointment", touched)
    deadline = time.monotonic() + 15
    while wired.webhook_stats()["retries"] < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = wired.webhook_stats()
    assert stats["retries"] >= 8 and stats["sent"] == 0 and stats["pending"] == 12
    assert stats["most_in_flight"] == 8  # all eight threads retrying, four still queued
    with Recorder(port) as recorder:
        assert wired.webhooks_sent(15), wired.webhook_stats()
    ids = [_focus_id(b) for b in recorder.accepted()]
    assert sorted(ids) == touched  # each once, none lost, none twice
    assert sorted(_number(b) for b in recorder.accepted()) == list(range(1, 13))
    assert wired.webhook_stats()["sent"] == 12


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_no_more_than_the_concurrency_is_in_flight_and_a_slow_answer_holds_up_only_its_own(
    port: int, concurrency: int
) -> None:
    gate = threading.Event()
    with (
        serve(
            scale="small",
            test_controls=True,
            webhook=f"http://127.0.0.1:{port}/hook",
            webhook_concurrency=concurrency,
        ) as dep,
        Recorder(port, gate=gate) as recorder,
    ):
        dep.touch("Appointment", [str(10000060 + n) for n in range(12)])
        deadline = time.monotonic() + 15
        while recorder.active < concurrency and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # room for one too many to arrive, were the bound not kept
        assert recorder.active == recorder.most_active == concurrency
        assert dep.webhook_stats()["pending"] == 12  # undelivered: queued or in flight
        gate.set()
        assert dep.webhooks_sent(15), dep.webhook_stats()
    assert recorder.most_active == concurrency
    assert dep.webhook_stats()["most_in_flight"] == concurrency
    assert len(recorder.calls) == 12


def test_a_refusing_receiver_gets_three_attempts_then_the_next_event(wired: Any, port: int) -> None:
    with Recorder(port, status=401) as recorder:
        wired.touch("Appointment", ["10000020"])
        deadline = threading.Event()
        for _ in range(200):
            if wired.webhook_stats()["refused"] == 1:
                break
            deadline.wait(0.05)
        assert wired.webhook_stats()["refused"] == 1
        assert len(recorder.calls) == 3
        recorder.status = 202
        wired.touch("Appointment", ["10000021"])
        assert wired.webhooks_sent(10)
    assert wired.webhook_stats()["sent"] == 1


def test_the_queue_is_bounded_while_the_receiver_is_down(
    wired: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolkit.mock.webhooks as webhooks

    monkeypatch.setattr(webhooks, "QUEUE_LIMIT", 3)
    wired.touch("Appointment", [str(10000030 + n) for n in range(6)])
    stats = wired.webhook_stats()
    assert stats["dropped"] >= 2 and stats["pending"] <= 4


@pytest.mark.parametrize(
    "options",
    [
        {"webhook": "http://10.1.2.3/hook"},
        {"webhook": "https://example.com/hook"},
        {"webhook": "ftp://127.0.0.1/hook"},
        {"webhook": "http://127.0.0.1:9/hook", "webhook_header": "no colon"},
        {"webhook": "http://127.0.0.1:9/hook", "webhook_header": "X-A: b\r\nX-Injected: 1"},
        {"webhook": "http://127.0.0.1:9/hook", "webhook_concurrency": 0},
        {"webhook": "http://127.0.0.1:9/hook", "webhook_concurrency": 65},
        {"webhook": "http://127.0.0.1:9/hook", "webhook_concurrency": "8"},
    ],
)
def test_only_loopback_targets_and_well_formed_headers_are_accepted(
    options: dict[str, str],
) -> None:
    with pytest.raises(ConfigurationError), serve(scale="small", **options):
        pass


def test_the_commands_document_their_webhook_options() -> None:
    runner = CliRunner()
    mock_help = runner.invoke(app, ["mock", "--help"]).output
    listen_help = runner.invoke(app, ["listen", "--help"]).output
    assert "--webhook" in mock_help and "--auth-header" in mock_help
    assert "--webhook-concurrency" in mock_help
    for option in ("--store", "--port", "--auth-header", "--no-catch-up"):
        assert option in listen_help
