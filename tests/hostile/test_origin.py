"""Credentials go only to the configured origin: a foreign link is an error, not a request.

Each case points a ``next`` link (or a ``read``/``request`` URL) somewhere else
and checks, on a second real server that records headers, that nothing at all
-- so no ``Authorization`` header -- reached it, and that the error is typed.
"""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from tests.hostile.conftest import SECRET, TOKEN, Recorder, api_app, serve
from tests.loopback import bundle
from toolkit.client import Client
from toolkit.errors import ForeignLink, RedirectRefused
from toolkit.origin import Origin
from toolkit.transport import GuardedTransport


def _client(port: int, **kwargs: object) -> Client:
    return Client(
        f"http://127.0.0.1:{port}/main",
        "hostile-client",
        SECRET,
        progress=False,
        requests_per_minute=None,
        timeout=5,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "link",
    [
        "Patient?page=2",  # relative
        "/main/Patient?page=2",  # absolute path
        "http://127.0.0.1:{api}/main/Patient?page=2",  # absolute, same origin
    ],
)
def test_same_origin_next_links_are_followed(link: str) -> None:
    holder: dict[str, int] = {}

    async def handler(request: Request) -> Response:
        if request.query_params.get("page") == "2":
            return JSONResponse(bundle(["b"], total=2))
        return JSONResponse(bundle(["a"], total=2, next_url=link.format(api=holder["api"])))

    with serve(api_app(handler)) as api:
        holder["api"] = api
        with _client(api) as client:
            ids = [r["id"] for r in client.records("Patient")]
    assert ids == ["a", "b"]


FOREIGN_LINKS = {
    "other port": "http://127.0.0.1:{foreign}/main/Patient?page=2",
    "other host": "http://localhost:{foreign}/main/Patient?page=2",
    "protocol-relative": "//localhost:{foreign}/main/Patient?page=2",
    "userinfo trick": "http://127.0.0.1:{api}@localhost:{foreign}/main/Patient?page=2",
    "userinfo on the api host": "http://user:pw@127.0.0.1:{api}/main/Patient?page=2",
    "backslash": "http://localhost:{foreign}\\@127.0.0.1:{api}/main/Patient?page=2",
    "backslash path": "/\\localhost:{foreign}/main/Patient?page=2",
    "https scheme": "https://127.0.0.1:{api}/main/Patient?page=2",
}


@pytest.mark.parametrize("link", FOREIGN_LINKS.values(), ids=FOREIGN_LINKS.keys())
def test_foreign_next_link_raises_and_never_reaches_the_foreign_server(
    link: str, foreign: tuple[Recorder, int]
) -> None:
    recorder, fport = foreign
    holder: dict[str, int] = {}

    async def handler(request: Request) -> Response:
        target = link.format(api=holder["api"], foreign=fport)
        return JSONResponse(bundle(["a"], total=2, next_url=target))

    with serve(api_app(handler)) as api:
        holder["api"] = api
        with _client(api) as client:
            with pytest.raises(ForeignLink) as info:
                list(client.records("Patient"))
            assert client.auth.token_requests == 1  # no new token for anybody
    assert recorder.seen == []
    assert recorder.authorization_headers == []
    message = str(info.value)
    assert "not requested" in message
    assert TOKEN not in message and SECRET not in message
    assert "pw" not in info.value.url


def test_redirect_to_a_foreign_host_is_not_followed(foreign: tuple[Recorder, int]) -> None:
    recorder, fport = foreign

    async def handler(request: Request) -> Response:
        return RedirectResponse(f"http://localhost:{fport}/main/Patient", status_code=302)

    with (
        serve(api_app(handler)) as api,
        _client(api) as client,
        pytest.raises(RedirectRefused, match=r"302.*localhost.*off the configured origin") as info,
    ):
        list(client.pages("Patient"))
    assert recorder.seen == []
    assert info.value.location == f"http://localhost:{fport}/main/Patient"


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:{foreign}/main/Patient/1",
        "//localhost:{foreign}/main/Patient/1",
        "http://127.0.0.1:{api}@localhost:{foreign}/main/Patient/1",
    ],
)
def test_request_with_a_foreign_absolute_url_sends_nothing(
    url: str, foreign: tuple[Recorder, int]
) -> None:
    recorder, fport = foreign

    async def handler(request: Request) -> Response:
        return JSONResponse({"resourceType": "Patient", "id": "1"})

    with serve(api_app(handler)) as api, _client(api) as client:
        with pytest.raises(ForeignLink):
            client.request("GET", url.format(api=api, foreign=fport))
        assert client.requests_sent == 0
        # the same absolute URL on the API's own origin works
        same = client.request("GET", f"http://127.0.0.1:{api}/main/Patient/1")
        assert same.json()["id"] == "1"
    assert recorder.seen == []


def test_https_to_http_downgrade_is_refused_before_sending() -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path.endswith("/oauth/token"):
            return httpx.Response(200, json={"access_token": "t", "expires_in": 900})
        return httpx.Response(
            200, json=bundle(["a"], total=2, next_url="http://api.test/main/Patient?page=2")
        )

    with (
        Client(
            "https://api.test/main",
            "c",
            SECRET,
            transport=httpx.MockTransport(handle),
            progress=False,
        ) as client,
        pytest.raises(ForeignLink, match="downgrades https to http"),
    ):
        list(client.pages("Patient"))
    assert [r.url.scheme for r in sent] == ["https", "https"]


def test_the_transport_refuses_any_other_origin_even_the_token_request() -> None:
    sent: list[httpx.Request] = []
    guard = GuardedTransport(
        Origin.of("https://api.test/main"),
        httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200)),
    )
    for url in ("https://evil.test/main/oauth/token", "https://api.test:8443/main/x"):
        with pytest.raises(ForeignLink):
            guard.handle_request(httpx.Request("POST", url))
    guard.handle_request(httpx.Request("GET", "https://api.test:443/main/x"))
    assert [r.url.host for r in sent] == ["api.test"]
    settings_client = Client("https://api.test/main", "c", SECRET, progress=False)
    assert settings_client.auth.token_url == "https://api.test/main/oauth/token"
    settings_client.close()
