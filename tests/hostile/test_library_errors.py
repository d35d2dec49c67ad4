"""Every error is a PmtkError: undecodable bodies and broken HTTP, wrapped with their cause.

A raw-socket server answers what a deployment should never send (issue 23): a body
in ``Content-Encoding: br`` (not asked for; brotli need not be installed), a gzip
stream that breaks off, a status line that is not HTTP, a connection cut inside the
headers. The client raises :class:`~toolkit.errors.ProtocolError` with httpx's
exception as ``__cause__``; ``pmtk sync`` prints one line and no traceback.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.hostile.conftest import SECRET
from tests.hostile.rawhttp import Seen, http_answer, raw_server
from toolkit.cli import app
from toolkit.client import Client
from toolkit.errors import OutcomeUnknown, PmtkError, ProtocolError

PATIENT = b'{"resourceType": "Patient", "id": "1"}'
BUNDLE = b'{"resourceType": "Bundle", "type": "searchset", "total": 1, "entry": []}'


def _brotli(seen: Seen) -> bytes:
    # Bytes that are not brotli either: decoding them must fail, installed or not.
    return http_answer(200, b"\x8b\x03\x80not-brotli", {"Content-Encoding": "br"})


def _broken_gzip(seen: Seen) -> bytes:
    packed = gzip.compress(BUNDLE if "?" in seen.path else PATIENT)
    return http_answer(200, packed[:10] + b"\xff" * 20 + packed[30:], {"Content-Encoding": "gzip"})


def _not_http(seen: Seen) -> bytes:
    return b"SPDY/9 200 maybe\r\n\x00\x01garbage\r\n\r\n"


def _cut_in_headers(seen: Seen) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: applic"


ANSWERS = {
    "content-encoding br": _brotli,
    "broken gzip stream": _broken_gzip,
    "not an HTTP status line": _not_http,
    "connection cut in the headers": _cut_in_headers,
}


def _client(base_url: str) -> Client:
    return Client(
        base_url, "hostile-client", SECRET, progress=False, requests_per_minute=None, timeout=5
    )


@pytest.mark.parametrize("answer", list(ANSWERS), ids=list(ANSWERS))
def test_a_read_raises_a_pmtk_error_with_the_library_error_as_cause(answer: str) -> None:
    with (
        raw_server(ANSWERS[answer]) as server,
        _client(server.base_url) as client,
        pytest.raises(ProtocolError) as info,
    ):
        client.read("Patient", "1")
    assert isinstance(info.value.__cause__, httpx.HTTPError)
    assert "/main/Patient/1" in str(info.value)


def test_a_broken_gzip_stream_names_the_encoding() -> None:
    with (
        raw_server(_broken_gzip) as server,
        _client(server.base_url) as client,
        pytest.raises(ProtocolError, match="gzip") as info,
    ):
        client.read("Patient", "1")
    assert isinstance(info.value.__cause__, httpx.DecodingError)


def test_an_encoding_not_asked_for_names_it() -> None:
    with (
        raw_server(_brotli) as server,
        _client(server.base_url) as client,
        pytest.raises(ProtocolError, match="'br'"),
    ):
        client.read("Patient", "1")
    # The client asked only for what it decodes itself.
    assert server.seen[-1].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("answer", list(ANSWERS), ids=list(ANSWERS))
def test_pmtk_sync_prints_one_line_and_no_traceback(answer: str, tmp_path: Path) -> None:
    with raw_server(ANSWERS[answer]) as server:
        args = ["sync", "--out", str(tmp_path / "store"), "-r", "Patient", "--quiet"]
        args += ["--base-url", server.base_url, "--client-id", "hostile-client"]
        result = CliRunner().invoke(app, args, env={"PM_CLIENT_SECRET": SECRET, "COLUMNS": "300"})
    assert result.exit_code == 2, (
        result.output
    )  # refused before anything was fetched (README, exit codes)
    assert not isinstance(result.exception, PmtkError | httpx.HTTPError)  # only typer's Exit
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("sync failed (Patient)")


def test_an_unreadable_answer_to_a_write_is_an_unknown_outcome() -> None:
    # The POST was sent and answered: it may have landed, so it must not look retryable.
    with (
        raw_server(_broken_gzip) as server,
        _client(server.base_url) as client,
        pytest.raises(OutcomeUnknown, match="could not be read") as info,
    ):
        client.request("POST", "Patient", json={"resourceType": "Patient"})
    assert isinstance(info.value.__cause__, httpx.DecodingError)
    assert [s.method for s in server.seen] == ["POST", "POST"]  # the token, then the write once
