"""The mock as a hardened server: limits, hostile input, and OperationOutcomes everywhere.

Connection-level cases go over a raw socket, so that nothing in an HTTP client
library smooths over what the server really sends.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import USER_AGENT, api_client
from tests.mock.test_booking import book_body
from tests.mock.test_writes import referral_body
from toolkit.mock import Deployment, serve

FHIR = "application/fhir+json"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


def _is_outcome(response: httpx.Response) -> bool:
    ok: bool = response.headers.get("content-type", "").startswith(FHIR) and (
        response.json()["resourceType"] == "OperationOutcome"
    )
    return ok


def _count(client: httpx.Client, rtype: str) -> int:
    total: int = client.get(rtype, params={"_summary": "count"}).json()["total"]
    return total


# --------------------------------------------------------------------------- depth and size


@pytest.mark.parametrize("depth", [65, 300, 1000, 5000])
def test_deep_bodies_are_refused_before_anything_is_stored(
    fresh_api: httpx.Client, depth: int
) -> None:
    before = _count(fresh_api, "Referral")
    body = orjson.dumps(referral_body()).decode()
    deep = '{"x":' * depth + "1" + "}" * depth  # written out: json.dumps would recurse
    content = (body[:-1] + ',"extra":' + deep + "}").encode()
    headers = {"Content-Type": "application/json"}
    response = fresh_api.post("Referral", content=content, headers=headers)
    assert response.status_code == 400 and _is_outcome(response)
    if depth < 1000:
        assert "64 levels" in response.json()["issue"][0]["diagnostics"]
    assert _count(fresh_api, "Referral") == before
    assert fresh_api.get("Referral", params={"_count": 100}).status_code == 200


def test_a_deep_patch_leaves_the_record_and_its_page_readable(fresh_api: httpx.Client) -> None:
    before = fresh_api.get("Referral/300001").json()
    response = fresh_api.patch("Referral/300001", json={"note": _nested(300)})
    assert response.status_code == 400 and _is_outcome(response)
    assert fresh_api.get("Referral/300001").json() == before
    assert fresh_api.get("Referral", params={"_id": "300001"}).status_code == 200


def test_a_body_over_the_size_cap_gets_413(fresh_mock: Deployment) -> None:
    with serve(max_body_bytes=1000) as dep, api_client(dep) as client:
        response = client.post("Referral", json=referral_body(comment="x" * 2000))
        assert response.status_code == 413 and _is_outcome(response)


# --------------------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("Appointment", {"date": "ge9999-12-31"}),
        ("Appointment", {"date": "9999"}),
        ("Appointment", {"date": "lt9999-12"}),
        ("Referral", {"_lastUpdated": "le9999-12-31T23:59:59Z"}),
        ("Appointment/$find", {"start": "9999-12-31", "end": "9999-12-31T23:59:59Z"}),
        ("Appointment", {"date": "eq0001-01-01T00:00:00+05:00"}),
    ],
)
def test_extreme_but_valid_dates_answer_200(
    mock_api: httpx.Client, path: str, params: dict[str, str]
) -> None:
    if path.endswith("$find"):
        params = {**params, "duration": "30"}
    assert mock_api.get(path, params=params).status_code == 200


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("Appointment", {"date": "ge10000-01-01"}),
        ("Appointment", {"date": "0000-01-01"}),
        ("Appointment", {"date": "2026-13-01"}),
        ("Appointment", {"date": "2026-02-30"}),
        ("Appointment", {"date": "2026-11-01T25:00:00Z"}),
        ("Appointment", {"date": "2026-W45-1"}),
        ("Appointment", {"date": "20261101"}),
        ("Referral", {"_lastUpdated": "gt2026-11-01T10:00:00+99:00"}),
        ("Referral", {"_lastUpdated": "ge"}),
        ("Appointment/$find", {"start": "9999-12-31T23:59:60Z", "end": "9999-12-31"}),
        ("Appointment/$find", {"start": "tomorrow", "end": "2026-12-01"}),
    ],
)
def test_malformed_or_out_of_range_dates_answer_400(
    mock_api: httpx.Client, path: str, params: dict[str, str]
) -> None:
    if path.endswith("$find"):
        params = {**params, "duration": "30"}
    response = mock_api.get(path, params=params)
    assert response.status_code == 400 and _is_outcome(response)


def test_booking_in_year_9999_is_a_conflict_not_a_crash(fresh_api: httpx.Client) -> None:
    body = book_body("PR-6001", "9999-12-31T23:30:00Z", "9999-12-31T23:59:59Z")
    response = fresh_api.post("Appointment/$book", json=body)
    assert response.status_code == 409 and _is_outcome(response)


def test_the_clock_control_refuses_to_leave_the_printable_years(fresh_mock: Deployment) -> None:
    response = httpx.post(
        f"{fresh_mock.base_url}/_test/clock",
        json={"advance": 1e12},
        headers={"User-Agent": USER_AGENT},
    )
    assert response.status_code == 400
    with api_client(fresh_mock) as client:
        assert client.get("Referral/300001").status_code == 200


# --------------------------------------------------------------------------- statistics


def test_statistics_count_route_templates_not_raw_paths(fresh_mock: Deployment) -> None:
    with httpx.Client(headers={"User-Agent": USER_AGENT}) as client:
        for n in range(300):
            client.get(f"{fresh_mock.base_url}/Patient/{n}-{'z' * 50}")
            client.get(f"{fresh_mock.base_url}/Unknown{n}/x/y")
            client.get(f"http://127.0.0.1:{fresh_mock.port}/elsewhere/{n}")
    stats = fresh_mock.stats()
    assert stats["requests"] == 900
    assert stats["requests_by_path"] == {
        "/main/Patient/{id}": 300,
        "/main/(deeper path)": 300,
        "(outside /main)": 300,
    }


# --------------------------------------------------------------------------- methods and errors


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("OPTIONS", "Referral", 405),
        ("TRACE", "Referral", 405),
        ("DELETE", "Referral/300001", 405),
        ("PUT", "Appointment/$book", 405),
        ("GET", "Nothing/1/2/3", 404),
        ("GET", "Location", 404),
        ("OPTIONS", "oauth/token", 405),
        ("TRACE", "_test/stats", 404),
    ],
)
def test_every_method_and_error_answers_an_operation_outcome(
    mock_api: httpx.Client, method: str, path: str, status: int
) -> None:
    response = mock_api.request(method, path)
    assert response.status_code == status
    assert _is_outcome(response)


def test_head_answers_the_get_headers_without_a_body(mock_api: httpx.Client) -> None:
    response = mock_api.head("Referral")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"].startswith(FHIR)
    missing = mock_api.head("Referral/nope")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith(FHIR)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_non_json_body_gets_415(mock_api: httpx.Client, content_type: str) -> None:
    response = mock_api.post(
        "Referral", content=b"coverage=1", headers={"Content-Type": content_type}
    )
    assert response.status_code == 415 and _is_outcome(response)


def test_practitioner_patch_keeps_its_observed_empty_405(mock_api: httpx.Client) -> None:
    response = mock_api.patch("Practitioner/PR-6001", json={"active": False})
    assert response.status_code == 405 and response.content == b""


# --------------------------------------------------------------------------- $book


def test_book_refuses_a_slot_another_appointment_was_patched_into(
    fresh_api: httpx.Client,
) -> None:
    window = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-28T00:00:00Z", "duration": "30"}
    params = {**window, "practitioner-role": "PR-6001", "_count": 2}
    free = [
        e["resource"] for e in fresh_api.get("Appointment/$find", params=params).json()["entry"]
    ]
    first = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", free[0]["start"], free[0]["end"])
    ).json()
    # move it onto the second free slot, a quarter of an hour off the grid
    moved_start = free[1]["start"].replace(":00:00Z", ":15:00Z").replace(":30:00Z", ":45:00Z")
    patch = {"start": moved_start, "end": free[1]["end"].replace(":00Z", ":00Z")}
    patched = fresh_api.patch(f"Appointment/{first['id']}", json=patch)
    assert patched.status_code == 200, patched.text
    again = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", free[1]["start"], free[1]["end"], "100003")
    )
    assert again.status_code == 409 and _is_outcome(again)
    # and the slot it left is free again
    left = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", free[0]["start"], free[0]["end"], "100003")
    )
    assert left.status_code == 201


def test_two_appointments_on_one_slot_keep_it_taken_when_one_leaves(
    fresh_api: httpx.Client,
) -> None:
    window = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-28T00:00:00Z", "duration": "30"}
    params = {**window, "practitioner-role": "PR-6001", "_count": 2}
    free = [
        e["resource"] for e in fresh_api.get("Appointment/$find", params=params).json()["entry"]
    ]
    a = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", free[0]["start"], free[0]["end"])
    ).json()
    b = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", free[1]["start"], free[1]["end"])
    ).json()
    onto_a = {"start": free[0]["start"], "end": free[0]["end"]}
    assert fresh_api.patch(f"Appointment/{b['id']}", json=onto_a).status_code == 200
    away = {"start": free[1]["start"], "end": free[1]["end"]}
    assert fresh_api.patch(f"Appointment/{b['id']}", json=away).status_code == 200
    response = fresh_api.post(
        "Appointment/$book", json=book_body("PR-6001", free[0]["start"], free[0]["end"], "100004")
    )
    assert response.status_code == 409, a


# --------------------------------------------------------------------------- connection limits


@pytest.fixture
def strict_mock() -> Iterator[Deployment]:
    with serve(header_timeout=1.0, body_timeout=1.0, max_header_bytes=4096) as dep:
        yield dep


def _exchange(port: int, data: bytes, wait: float = 10.0) -> tuple[bytes, float]:
    """Send ``data``, then read until the server closes; (answer, seconds until closed)."""
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks), time.monotonic() - began


def _status_and_body(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/fhir+json" in head.lower()
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


def test_a_half_sent_body_is_cut_off_with_408(strict_mock: Deployment) -> None:
    # the token endpoint reads its body before anything else (a resource would 401 first)
    request = (
        b"POST /main/oauth/token HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n"
        b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"grant_type": '
    )
    answer, took = _exchange(strict_mock.port, request)
    status, body = _status_and_body(answer)
    assert status == 408 and body["resourceType"] == "OperationOutcome"
    assert 0.9 <= took < 5.0


def test_a_half_sent_head_is_cut_off_with_408(strict_mock: Deployment) -> None:
    answer, took = _exchange(strict_mock.port, b"GET /main/Referral HTTP/1.1\r\nHost: x\r\n")
    status, body = _status_and_body(answer)
    assert status == 408 and body["issue"][0]["code"] == "timeout"
    assert 0.9 <= took < 5.0


def test_a_silent_connection_is_closed(strict_mock: Deployment) -> None:
    _answer, took = _exchange(strict_mock.port, b"")
    assert took < 5.0


def test_an_oversized_head_gets_431_and_the_server_stays_up(strict_mock: Deployment) -> None:
    big = b"X-Pad: " + b"a" * 8000 + b"\r\n"
    answer, _ = _exchange(
        strict_mock.port, b"GET /main/Referral HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n"
    )
    status, body = _status_and_body(answer)
    assert status == 431 and "4096 bytes" in body["issue"][0]["diagnostics"]
    ok = httpx.get(f"{strict_mock.base_url}/Referral", headers={"User-Agent": USER_AGENT})
    assert ok.status_code == 401  # served normally (no token)


def test_malformed_http_gets_a_400_operation_outcome(strict_mock: Deployment) -> None:
    answer, _ = _exchange(strict_mock.port, b"GARBAGE\x00 / HTTP/9\r\n\r\n")
    status, body = _status_and_body(answer)
    assert status == 400 and body["resourceType"] == "OperationOutcome"


def test_the_concurrency_limit_answers_503_as_an_operation_outcome() -> None:
    with serve(limit_concurrency=2) as dep:
        idle = socket.create_connection(("127.0.0.1", dep.port))
        try:
            time.sleep(0.2)  # the idle connection is now counted
            response = httpx.get(f"{dep.base_url}/Referral", headers={"User-Agent": USER_AGENT})
            assert response.status_code == 503 and _is_outcome(response)
        finally:
            idle.close()
        time.sleep(0.2)
        response = httpx.get(f"{dep.base_url}/Referral", headers={"User-Agent": USER_AGENT})
        assert response.status_code == 401
