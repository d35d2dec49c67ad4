"""Redirects are never data (issue 23).

Seen against the landed code: a 302 whose body was an empty Bundle made a list
walk return 0 rows, complete; a 307 carrying an Organization was returned by
``client.read`` as the record. Now a 3xx is followed only for a GET to the same
origin, at most 5 hops, and the target is read; any other 3xx raises
:class:`~toolkit.errors.RedirectRefused` naming the status and the location, and
nothing is sent to another origin.
"""

from __future__ import annotations

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.hostile.conftest import SECRET, TOKEN, Recorder, api_app, serve
from tests.loopback import bundle
from toolkit.client import Client
from toolkit.errors import RedirectRefused
from toolkit.http import MAX_REDIRECTS

EMPTY = bundle([], total=0)
ORGANIZATION = {"resourceType": "Organization", "id": "ORG-1", "name": "not the record"}


def _client(port: int) -> Client:
    return Client(
        f"http://127.0.0.1:{port}/main",
        "hostile-client",
        SECRET,
        progress=False,
        requests_per_minute=None,
        timeout=5,
    )


def _redirect(status: int, location: str | None, body: object) -> Response:
    headers = {"location": location} if location is not None else {}
    return JSONResponse(body, status_code=status, headers=headers)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_same_origin_redirect_of_a_list_is_followed_and_its_body_ignored(status: int) -> None:
    async def handler(request: Request) -> Response:
        if request.query_params.get("moved") == "1":
            return JSONResponse(bundle(["a", "b"], total=2))
        return _redirect(status, "/main/Patient?moved=1&_count=100", EMPTY)

    with serve(api_app(handler)) as api, _client(api) as client:
        ids = [r["id"] for r in client.records("Patient")]
    assert ids == ["a", "b"]


def test_a_redirect_to_another_origin_is_an_error_not_an_empty_list(
    foreign: tuple[Recorder, int],
) -> None:
    recorder, fport = foreign
    location = f"http://127.0.0.1:{fport}/main/Patient"

    async def handler(request: Request) -> Response:
        return _redirect(302, location, EMPTY)

    with (
        serve(api_app(handler)) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused) as info,
    ):
        list(client.records("Patient"))
    assert recorder.seen == []  # nothing, so no credentials, reached the other origin
    assert info.value.status == 302
    assert info.value.location == location
    assert "302" in str(info.value) and location in str(info.value)


def test_a_same_origin_307_on_a_read_returns_the_target_not_the_body() -> None:
    async def handler(request: Request) -> Response:
        if request.query_params.get("v") == "2":
            return JSONResponse({"resourceType": "Patient", "id": "1", "name": [{"text": "A"}]})
        return _redirect(307, "/main/Patient/1?v=2", ORGANIZATION)

    with serve(api_app(handler)) as api, _client(api) as client:
        record = client.read("Patient", "1")
    assert record["resourceType"] == "Patient"


def test_a_cross_origin_307_on_a_read_is_refused(foreign: tuple[Recorder, int]) -> None:
    recorder, fport = foreign

    async def handler(request: Request) -> Response:
        return _redirect(307, f"http://localhost:{fport}/main/Patient/1", ORGANIZATION)

    with (
        serve(api_app(handler)) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused, match="307") as info,
    ):
        client.read("Patient", "1")
    assert recorder.seen == []
    assert info.value.location == f"http://localhost:{fport}/main/Patient/1"


def test_redirects_stop_after_five_hops() -> None:
    hops: list[int] = []

    async def handler(request: Request) -> Response:
        n = int(request.query_params.get("hop", "0"))
        hops.append(n)
        return _redirect(302, f"/main/Patient/1?hop={n + 1}", ORGANIZATION)

    with (
        serve(api_app(handler)) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused, match=f"more than {MAX_REDIRECTS} redirects"),
    ):
        client.read("Patient", "1")
    assert hops == list(range(MAX_REDIRECTS + 1))  # the request and five redirects, no more


@pytest.mark.parametrize(
    ("status", "location", "why"),
    [
        (302, None, "no Location"),
        (300, "/main/Patient/1?v=2", "not a redirect pmtk follows"),
        (304, "/main/Patient/1?v=2", "not a redirect pmtk follows"),
    ],
)
def test_other_3xx_answers_are_refused(status: int, location: str | None, why: str) -> None:
    followed: list[str] = []

    async def handler(request: Request) -> Response:
        if request.query_params.get("v"):
            followed.append(str(request.url))
            return JSONResponse({"resourceType": "Patient", "id": "1"})
        return _redirect(status, location, ORGANIZATION)

    with (
        serve(api_app(handler)) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused, match=why) as info,
    ):
        client.read("Patient", "1")
    assert followed == []
    assert info.value.status == status


def test_a_write_is_never_redirected() -> None:
    sent: list[str] = []

    async def handler(request: Request) -> Response:
        sent.append(f"{request.method} {request.url.path}?{request.url.query}")
        if request.query_params.get("v"):
            return JSONResponse({"resourceType": "Patient", "id": "1"})
        return _redirect(307, "/main/Patient/1?v=2", ORGANIZATION)

    with (
        serve(api_app(handler)) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused, match="only a GET is redirected"),
    ):
        client.request("PATCH", "Patient/1", json=[], content_type="application/json-patch+json")
    assert sent == ["PATCH /main/Patient/1?"]


def test_the_token_post_is_not_redirected(foreign: tuple[Recorder, int]) -> None:
    recorder, fport = foreign
    from starlette.applications import Starlette
    from starlette.routing import Route

    async def token(request: Request) -> Response:
        return _redirect(307, f"http://127.0.0.1:{fport}/main/oauth/token", {})

    app = Starlette(routes=[Route("/main/oauth/token", token, methods=["POST"])])
    with (
        serve(app) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused, match="token endpoint redirects") as info,
    ):
        client.read("Patient", "1")
    assert recorder.seen == []  # the secret went nowhere else
    assert info.value.location == f"http://127.0.0.1:{fport}/main/oauth/token"
    assert SECRET not in str(info.value) and TOKEN not in str(info.value)
