"""The mock's webhook sender, checked by a plain stdlib HTTP server (not pmtk's receiver).

What a receiver must see: a ``history`` Bundle led by a SubscriptionStatus whose
focus references the changed record, the configured header byte for byte, the
events in write order, and a retry with backoff while the receiver is down.
"""

from __future__ import annotations

import http.server
import threading
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

    def __init__(self, port: int, status: int = 202) -> None:
        self.status = status
        self.calls: list[tuple[dict[str, bytes], bytes]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(size)
                raw = {k.lower(): v.encode("latin-1") for k, v in self.headers.items()}
                recorder.calls.append((raw, body))
                self.send_response(recorder.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

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
    with serve(
        scale="small",
        test_controls=True,
        webhook=f"http://127.0.0.1:{port}/hook",
        webhook_header=f"{NAME}: {VALUE}",
    ) as dep:
        yield dep


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
    for n, bundle in enumerate(recorder.accepted(), start=1):
        assert bundle["resourceType"] == "Bundle" and bundle["type"] == "history"
        status = bundle["entry"][0]["resource"]
        assert status["resourceType"] == "SubscriptionStatus"
        event = status["notificationEvent"][0]
        assert event["eventNumber"] == str(n)
        focus.append(event["focus"]["reference"].removeprefix(wired.base_url))
    assert focus == ["/Appointment/10000003", "/Patient/100004", "/Appointment/10000005"]
    deleted = recorder.accepted()[2]
    assert deleted["entry"][1]["request"] == {"method": "DELETE", "url": "Appointment/10000005"}
    assert deleted["entry"][0]["resource"]["topic"].endswith("appointment-delete")


def test_a_receiver_that_is_down_gets_the_events_in_order_once_it_is_up(
    wired: Any, port: int
) -> None:
    wired.touch("Appointment", ["10000010"])
    wired.touch("Appointment", ["10000011"])
    assert not wired.webhooks_sent(0.4)
    stats = wired.webhook_stats()
    assert stats["retries"] >= 2 and stats["sent"] == 0 and stats["pending"] == 2
    with Recorder(port) as recorder:
        assert wired.webhooks_sent(15), wired.webhook_stats()
    ids = [
        b["entry"][0]["resource"]["notificationEvent"][0]["focus"]["reference"].rsplit("/", 1)[1]
        for b in recorder.accepted()
    ]
    assert ids == ["10000010", "10000011"]


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
    assert "--webhook" in mock_help and "--webhook-header" in mock_help
    for option in ("--store", "--port", "--auth-header", "--no-catch-up"):
        assert option in listen_help
