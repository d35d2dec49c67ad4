"""Hypothesis fuzzing of the real mock over loopback: no 5xx, no traceback, nothing half-stored.

Random methods, paths, query strings, headers and bodies (deep nesting, huge
strings, wrong types, valid-looking resources with one thing wrong). Each
example asserts: no 5xx; no Python traceback text in the body; every error body
is an OperationOutcome in ``application/fhir+json`` (the one documented exception:
the empty 405 of Practitioner/PractitionerRole/Organization PATCH); a refused
write leaves the list totals unchanged. After the run, the request statistics
must still have a bounded number of keys.

The CI budget is ``FUZZ_EXAMPLES`` (150) examples; ``tests/benchmarks/
bench_mock_fuzz.py`` runs the same property with many more.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import api_client
from toolkit import catalogue
from toolkit.mock import Deployment, serve

FUZZ_EXAMPLES = int(os.environ.get("PMTK_FUZZ_EXAMPLES", "150"))
LISTED = list(catalogue.LISTED_RESOURCES)
TYPES = [*catalogue.RESOURCES, "Nothing", "$find", ""]
IDS = ["300001", "10000001", "200001", "PR-6001", "SP-5001", "100001", "nope", "", "..", "%00"]
EMPTY_405 = ("Practitioner", "PractitionerRole", "Organization")
STATS_KEY_BOUND = 4 * len(catalogue.RESOURCES) + 16


def _deep(depth: int, leaf: Any = 1) -> bytes:
    return (b'{"a":' * depth) + orjson.dumps(leaf) + (b"}" * depth)


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(["9999-12-31", "2026-13-01", "/main/Patient/100001", "PR-6001", "\u0000"]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = ["subject", "coverage", "requester", "created", "participant", "extension", "name"]


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["json", "deep", "huge", "resource", "garbage", "empty"]))
    if kind == "deep":
        return _deep(draw(st.integers(min_value=60, max_value=1500)))
    if kind == "huge":
        size = draw(st.sampled_from([10_000, 300_000, 2_000_000]))
        return orjson.dumps({"resourceType": "Referral", "comment": "x" * size})
    if kind == "resource":
        body: dict[str, Any] = {
            "resourceType": draw(st.sampled_from([*catalogue.RESOURCES, "Parameters"])),
            draw(st.sampled_from(FIELDS)): draw(json_value),
        }
        return orjson.dumps(body)
    if kind == "garbage":
        return draw(st.binary(max_size=200))
    if kind == "empty":
        return b""
    return orjson.dumps(draw(json_value))


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(st.sampled_from(["GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS", "HEAD"]))
    shape = draw(st.integers(min_value=0, max_value=4))
    rtype = draw(st.sampled_from(TYPES))
    if shape == 0:
        path = rtype
    elif shape == 1:
        path = f"{rtype}/{draw(st.sampled_from(IDS))}"
    elif shape == 2:
        path = draw(st.sampled_from(["Appointment/$book", "Appointment/$find", "oauth/token"]))
    elif shape == 3:
        printable = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#")
        segment = draw(st.text(printable, max_size=20))
        path = f"{rtype}/{segment}"
    else:
        path = "/".join(draw(st.lists(st.sampled_from(IDS + TYPES), min_size=2, max_size=5)))
    keys = st.sampled_from(
        ["date", "_lastUpdated", "_count", "page", "_sort", "_id", "start", "end", "duration",
         "patient", "subject", "name", "_total", "_summary", "junk"]
    )  # fmt: skip
    values = st.one_of(
        st.sampled_from(
            ["ge9999-12-31", "9999", "2026-11-01", "0", "-1", "100", "ge", "lt2026-02-30",
             "10000-01-01", "-_lastUpdated", "Patient/100001", "count", "x" * 3000]
        ),
        st.text(max_size=20),
    )  # fmt: skip
    params = draw(st.lists(st.tuples(keys, values), max_size=4))
    headers = {
        "Content-Type": draw(
            st.sampled_from(
                ["application/json", "application/fhir+json", "application/merge-patch+json",
                 "text/plain", "multipart/form-data; boundary=x", "application/json; charset=x"]
            )
        ),
    }  # fmt: skip
    if draw(st.booleans()):
        visible = st.characters(min_codepoint=33, max_codepoint=126)  # what h11 lets us send
        headers["X-Junk"] = draw(st.text(visible, min_size=1, max_size=50))
    body = draw(bodies()) if method in ("POST", "PATCH", "PUT") else b""
    return {"method": method, "path": path, "params": params, "headers": headers, "body": body}


@pytest.fixture(scope="module")
def fuzz_mock() -> Iterator[Deployment]:
    with serve(seed=0, rate_limit=10**9, test_controls=True) as dep:
        yield dep


@pytest.fixture(scope="module")
def fuzz_api(fuzz_mock: Deployment) -> Iterator[httpx.Client]:
    with api_client(fuzz_mock) as client:
        yield client


def totals(client: httpx.Client) -> dict[str, int]:
    """``Bundle.total`` of every listed type (refused writes must not change them)."""
    out = {}
    for rtype in LISTED:
        response = client.get(rtype, params={"_summary": "count"})
        assert response.status_code == 200
        out[rtype] = response.json()["total"]
    return out


def check_response(request: dict[str, Any], response: httpx.Response) -> None:
    """The properties every answer must have, whatever was sent."""
    where = f"{request['method']} {request['path']} -> {response.status_code}"
    assert response.status_code < 500, where
    text = response.content
    assert b"Traceback" not in text and b'File "' not in text, where
    if response.status_code < 400 or request["method"] == "HEAD":
        return
    rtype = request["path"].split("/", 1)[0]
    empty_405 = response.status_code == 405 and request["method"] == "PATCH" and text == b""
    if empty_405 and rtype in EMPTY_405:
        return  # the facts' observed empty 405 (PATCH of an existing record), kept on purpose
    assert response.headers.get("content-type", "").startswith("application/fhir+json"), where
    body = orjson.loads(text)
    assert body["resourceType"] == "OperationOutcome" and body["issue"], where
    assert "entry" not in body


def send(client: httpx.Client, request: dict[str, Any]) -> httpx.Response:
    # An absolute URL: httpx refuses a *relative* one whose path starts with "//", and
    # such paths ("Patient//1") are exactly what the fuzzer should get to the server.
    return client.request(
        request["method"],
        f"{client.base_url}{request['path']}",
        params=request["params"],
        headers=request["headers"],
        content=request["body"],
    )


def run_property(client: httpx.Client, request: dict[str, Any]) -> None:
    writes = request["method"] in ("POST", "PATCH", "PUT")
    before = totals(client) if writes else None
    response = send(client, request)
    check_response(request, response)
    if before is not None and response.status_code >= 400:
        assert totals(client) == before, f"a refused {request['method']} changed the store"


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests())
def test_fuzzed_requests_never_break_the_mock(
    fuzz_api: httpx.Client, request: dict[str, Any]
) -> None:
    run_property(fuzz_api, request)


def test_statistics_stay_bounded_after_the_fuzzing(
    fuzz_mock: Deployment, fuzz_api: httpx.Client
) -> None:
    # runs after the fuzz test in file order; on its own it still sends a spread of paths
    for n in range(200):
        fuzz_api.get(f"Nothing{n}/{n}")
    stats = fuzz_mock.stats()
    assert stats["requests"] >= 200
    assert len(stats["requests_by_path"]) <= STATS_KEY_BOUND
    assert set(stats["responses_by_status"]) <= {str(s) for s in range(200, 500)}
    assert fuzz_api.get("Referral", params={"_count": 100}).status_code == 200
