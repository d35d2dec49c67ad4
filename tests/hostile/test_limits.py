"""Bounded waits and sizes, over real sockets: a drip feed and a gzip bomb; safe ids."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tests.hostile.conftest import SECRET, api_app, serve
from toolkit.client import Client
from toolkit.errors import DeadlineExceeded, InvalidId, OutcomeUnknown, ResponseTooLarge
from toolkit.origin import Origin
from toolkit.transport import GuardedTransport

GIB = 1 << 30


def _client(port: int, **kwargs: object) -> Client:
    return Client(
        f"http://127.0.0.1:{port}/main",
        "c",
        SECRET,
        progress=False,
        requests_per_minute=None,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_server_dripping_one_byte_at_a_time_hits_the_whole_request_deadline() -> None:
    async def drip(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b'{"resourceType": "Bundle", "entry": ['
            while True:  # each byte well inside any per-read timeout
                await asyncio.sleep(0.1)
                yield b" "

        return StreamingResponse(body(), media_type="application/fhir+json")

    with serve(api_app(drip)) as port, _client(port, timeout=1.5) as client:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded) as info:
            client.frame("Patient")
        elapsed = time.monotonic() - started
    assert info.value.limit == 1.5
    assert f"127.0.0.1:{port}/main/Patient" in info.value.url
    assert "1.5 s deadline" in str(info.value)
    assert elapsed < 15  # generous: 1.5 s deadline, not retried (before: forever)


def test_a_stalled_write_answer_is_outcome_unknown_not_a_resend() -> None:
    calls: list[int] = []

    async def stall(request: Request) -> Response:
        calls.append(1)

        async def body() -> AsyncIterator[bytes]:
            yield b"{"
            await asyncio.sleep(30)

        return StreamingResponse(body(), media_type="application/json")

    with (
        serve(api_app(stall)) as port,
        _client(port, timeout=1.0) as client,
        pytest.raises(OutcomeUnknown, match="deadline"),
    ):
        client.request("PATCH", "Patient/1", json={"a": 1}, retry=False)
    assert calls == [1]


def _bomb() -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    return b"".join([z.compress(block) for _ in range(GIB >> 20)] + [z.flush()])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb()


def _rss_kib(field: str) -> int:
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("memory is measured from /proc/self/status (Linux)")
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    pytest.fail(f"no {field} in /proc/self/status: the memory bound cannot be measured")


def test_a_gzip_bomb_stops_at_the_size_cap_with_bounded_memory(bomb: bytes) -> None:
    assert len(bomb) < 2 * (1 << 20)  # about 1 MB on the wire, 1 GiB decoded

    async def boom(request: Request) -> Response:
        return Response(
            bomb,
            headers={"content-encoding": "gzip", "content-type": "application/fhir+json"},
        )

    cap = 16 << 20
    with serve(api_app(boom)) as port, _client(port, max_response_bytes=cap) as client:
        with contextlib.suppress(OSError):  # reset the peak: VmHWM then measures this test
            Path("/proc/self/clear_refs").write_text("5")
        before = _rss_kib("VmRSS")
        with pytest.raises(ResponseTooLarge) as info:
            client.frame("Patient")
        peak = _rss_kib("VmHWM")
    assert info.value.limit == cap
    assert "16,777,216 bytes" in str(info.value)
    growth_mib = (peak - before) / 1024
    print(f"gzip bomb: RSS peak grew {growth_mib:.0f} MiB (cap {cap >> 20} MiB, body 1024 MiB)")
    assert growth_mib < 400  # generous; reading it whole would take over 1,024 MiB


def test_the_default_cap_is_64_mib_and_small_gzip_pages_decode() -> None:
    payload = (
        b'{"resourceType": "Bundle", "total": 1, "entry": [{"resource": '
        b'{"resourceType": "Patient", "id": "1"}}]}'
    )

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/oauth/token"):
            return httpx.Response(200, json={"access_token": "t", "expires_in": 900})
        assert request.headers["accept-encoding"] == "gzip, deflate"
        return httpx.Response(
            200, content=gzip.compress(payload), headers={"content-encoding": "gzip"}
        )

    guard = GuardedTransport(Origin.of("https://api.test"), httpx.MockTransport(handle))
    assert guard.max_response_bytes == 64 << 20
    with Client(
        "https://api.test/main", "c", SECRET, transport=httpx.MockTransport(handle), progress=False
    ) as client:
        assert [r["id"] for r in client.records("Patient")] == ["1"]


BAD_IDS = [
    ".",
    "..",
    "../Patient",
    "a/b",
    "a?b",
    "a#b",
    "%2e%2e",
    "a b",
    "a\tb",
    "a\nb",
    "",
    "x" * 65,
    "\x00",
    "ü",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_unsafe_ids_are_refused_before_anything_is_sent(bad: str) -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"access_token": "t", "expires_in": 900})

    with Client(
        "https://api.test/main", "c", SECRET, transport=httpx.MockTransport(handle), progress=False
    ) as client:
        with pytest.raises(InvalidId, match="nothing was sent"):
            client.read("Referral", bad)
        with pytest.raises(InvalidId):
            client.patch("Referral", bad, {"comment": "x"})
    assert sent == []  # not even a token request


def test_the_catalogue_id_shapes_still_pass() -> None:
    from toolkit.origin import safe_id

    for ok in ("CL-2", "PR-1234", "300004", "a.b", "x" * 64, "proposed-1757485800-30"):
        assert safe_id("Organization", ok) == ok
