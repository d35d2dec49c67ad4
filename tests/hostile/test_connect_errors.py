"""Fast, honest connection errors: one attempt, the operating system's reason, the host.

A name that does not resolve and a port that refuses are answers, not hiccups: a
retry gets the same answer (issue 23 measured six attempts and 17.8 s, with
"Name or service not known" dropped). Both raise
:class:`~toolkit.errors.ConnectionFailed` after one attempt.

Name resolution here never leaves the machine: this machine's resolver forwards
every name, ``.invalid`` included, to a DNS server elsewhere, so ``getaddrinfo`` is
replaced for the test; it fails ``.invalid`` names as a resolver that honours RFC
6761 would, and refuses to resolve anything but loopback.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.hostile.conftest import SECRET
from toolkit.cli import app
from toolkit.client import Client
from toolkit.errors import ConnectionFailed

NOT_KNOWN = "Name or service not known"


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``getaddrinfo`` that fails ``.invalid`` names locally; returns the names asked."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        asked.append(name)
        if name.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, NOT_KNOWN)
        if name not in ("127.0.0.1", "localhost"):
            msg = f"the test resolves only loopback names, not {name!r}"
            raise AssertionError(msg)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.fixture
def refused_port() -> int:
    """A loopback port with nothing listening (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Counts the connection attempts (``socket.create_connection`` calls)."""
    real = socket.create_connection
    made: list[Any] = []

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        made.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    return made


def _client(base_url: str) -> Client:
    return Client(
        base_url, "hostile-client", SECRET, progress=False, requests_per_minute=None, timeout=5
    )


def test_an_unresolvable_name_is_one_attempt_with_the_reason(resolver: list[str]) -> None:
    with _client("http://nothing.invalid/main") as client:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as info:
            client.read("Patient", "1")
        elapsed = time.monotonic() - started
    assert resolver.count("nothing.invalid") == 1  # not retried
    assert NOT_KNOWN in str(info.value)
    assert "nothing.invalid" in str(info.value)
    assert info.value.host == "nothing.invalid"
    assert NOT_KNOWN in info.value.reason
    assert isinstance(info.value.__cause__, Exception)
    print(f"unresolvable name: one attempt, {elapsed:.3f} s")  # figure, not asserted


def test_a_refused_port_is_one_attempt_with_the_reason(
    refused_port: int, connects: list[Any]
) -> None:
    with (
        _client(f"http://127.0.0.1:{refused_port}/main") as client,
        pytest.raises(ConnectionFailed) as info,
    ):
        client.read("Patient", "1")
    assert len(connects) == 1  # not retried
    message = str(info.value)
    assert "Connection refused" in message
    assert f"127.0.0.1:{refused_port}" in message
    assert info.value.host == "127.0.0.1"


def test_a_refused_write_is_not_an_unknown_outcome(refused_port: int, connects: list[Any]) -> None:
    # Nothing was sent, so nothing can have landed: a plain ConnectionFailed.
    with (
        _client(f"http://127.0.0.1:{refused_port}/main") as client,
        pytest.raises(ConnectionFailed),
    ):
        client.request("POST", "Patient", json={"resourceType": "Patient"})
    assert len(connects) == 1


def test_pmtk_sync_says_the_reason_in_one_line(resolver: list[str], tmp_path: Path) -> None:
    args = ["sync", "--out", str(tmp_path / "store"), "-r", "Patient", "--quiet"]
    args += ["--base-url", "http://nothing.invalid/main", "--client-id", "hostile-client"]
    result = CliRunner().invoke(app, args, env={"PM_CLIENT_SECRET": SECRET, "COLUMNS": "300"})
    assert result.exit_code == 2, (
        result.output
    )  # refused before anything was fetched (README, exit codes)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert NOT_KNOWN in lines[0]
    assert "nothing.invalid" in lines[0]
    assert resolver.count("nothing.invalid") == 1
