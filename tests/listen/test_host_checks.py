"""DNS rebinding: the receiver serves only the ``Host`` values it is reached by.

A web page on ``attacker.example`` whose DNS answer is switched to 127.0.0.1 is
same-origin with the receiver; its requests carry ``Host: attacker.example:<port>``.
RFC 9110 section 15.5.20 gives 421 (Misdirected Request) for a request to a server
that does not serve that authority. These tests talk to a real ``listen()`` over
loopback, setting the Host header as such a page's browser would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.listen.conftest import notification
from toolkit.client import Client
from toolkit.errors import ConfigurationError
from toolkit.webhooks import Listener, listen

SECRET = "X-Hook: s3cret-host-checks"
AUTH = {"X-Hook": "s3cret-host-checks"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def guarded(store: Path, client: Client) -> Iterator[Listener]:
    with listen(
        store,
        client=client,
        auth_header=SECRET,
        catch_up=False,
        public_hosts=["hooks.example.org", "edge.example.net:8443"],
    ) as running:
        yield running


@pytest.fixture
def open_receiver(store: Path, client: Client) -> Iterator[Listener]:
    with listen(store, client=client, no_auth=True, catch_up=False) as running:
        yield running


def _post(listener: Listener, host: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = notification(("Patient", "100001"))
    sent = {**JSON, **(headers or {}), "Host": host}
    return httpx.post(listener.url, content=body, headers=sent, timeout=10, trust_env=False)


def _status(listener: Listener, host: str, headers: dict[str, str] | None = None) -> httpx.Response:
    url = listener.url.replace("/webhook", "/status")
    return httpx.get(url, headers={**(headers or {}), "Host": host}, timeout=10, trust_env=False)


REBOUND = ["attacker.example", "attacker.example:{port}", "hooks.example.org.attacker.example"]


@pytest.mark.parametrize("host", REBOUND)
def test_a_rebound_host_gets_421_on_an_open_receiver(open_receiver: Listener, host: str) -> None:
    shown = host.format(port=open_receiver.port)
    answer = _post(open_receiver, shown)
    assert answer.status_code == 421, answer.text
    assert open_receiver.queue.count() == 0 and open_receiver.stats.events_queued == 0
    status = _status(open_receiver, shown)
    assert status.status_code == 421
    assert str(open_receiver.store) not in status.text  # nothing of the store is told


HOSTS = [
    ("127.0.0.1:{port}", 202),
    ("localhost:{port}", 202),
    ("LOCALHOST:{port}", 202),
    ("127.0.0.1", 202),
    ("hooks.example.org", 202),
    ("hooks.example.org:443", 202),
    ("edge.example.net:8443", 202),
    ("edge.example.net:443", 421),  # given with a port: that port only
    ("127.0.0.1:1", 421),  # another port of this machine
    ("attacker.example:{port}", 421),
    ("", 421),
    ("127.0.0.1:{port}@attacker.example", 421),
    ("[::1]:{port}", 202),
    ("[::1]:{port}x", 421),
]


def test_only_the_hosts_the_receiver_serves_are_accepted(guarded: Listener) -> None:
    """One receiver, every Host (one listener for all: each start costs a second)."""
    got = {
        host: _post(guarded, host.format(port=guarded.port), AUTH).status_code for host, _ in HOSTS
    }
    assert got == dict(HOSTS)


def test_status_needs_the_authentication_header(guarded: Listener) -> None:
    here = f"127.0.0.1:{guarded.port}"
    bare = _status(guarded, here)
    assert bare.status_code == 401
    assert str(guarded.store) not in bare.text
    assert _status(guarded, here, {"X-Hook": "wrong"}).status_code == 401
    signed = _status(guarded, here, AUTH)
    assert signed.status_code == 200 and signed.json()["worker"] == "running"
    assert _status(guarded, "attacker.example", AUTH).status_code == 421


def test_status_of_an_open_loopback_receiver_needs_no_header(open_receiver: Listener) -> None:
    answer = _status(open_receiver, f"localhost:{open_receiver.port}")
    assert answer.status_code == 200


@pytest.mark.parametrize("bad", ["", "a b", "host/path", "user@host", "host:port", "[::1"])
def test_a_public_host_that_is_no_host_is_refused(store: Path, client: Client, bad: str) -> None:
    with (
        pytest.raises(ConfigurationError, match="--public-host"),
        listen(store, client=client, no_auth=True, catch_up=False, public_hosts=[bad]),
    ):
        pytest.fail("the receiver started")
