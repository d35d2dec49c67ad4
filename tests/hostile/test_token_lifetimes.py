"""Sane token lifetimes: an unusable ``expires_in`` never means a token per request.

A token server (spec section 5, written here) issues each ``expires_in`` issue 23
lists: missing, not a number, 0, negative, under 60 s. Twenty API requests then
cost at most one token request. A fake clock shows the lifetime each is given.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.hostile.conftest import SECRET, serve
from toolkit.auth import MIN_TOKEN_LIFETIME, ClientCredentialsAuth, token_lifetime
from toolkit.client import Client

MISSING = object()

LIFETIMES: dict[str, Any] = {
    "missing": MISSING,
    "null": None,
    "zero": 0,
    "negative": -1,
    "string NaN": "NaN",
    "string Infinity": "Infinity",
    "not a number": "soon",
    "boolean": True,
    "under 60 s": 5,
    "a list": [900],
}


def _token_server(expires_in: Any, issued: list[str]) -> Starlette:
    async def token(request: Request) -> Response:
        body = await request.json()
        if body.get("client_secret") != SECRET:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        issued.append(f"token-{len(issued)}")
        answer: dict[str, Any] = {"token_type": "Bearer", "access_token": issued[-1]}
        if expires_in is not MISSING:
            answer["expires_in"] = expires_in
        return JSONResponse(answer)

    async def patient(request: Request) -> Response:
        if request.headers.get("authorization") not in {f"Bearer {t}" for t in issued}:
            return JSONResponse({"resourceType": "OperationOutcome", "issue": []}, status_code=401)
        return JSONResponse({"resourceType": "Patient", "id": request.path_params["rid"]})

    return Starlette(
        routes=[
            Route("/main/oauth/token", token, methods=["POST"]),
            Route("/main/Patient/{rid}", patient, methods=["GET"]),
        ]
    )


@pytest.mark.parametrize("case", list(LIFETIMES), ids=list(LIFETIMES))
def test_twenty_requests_need_one_token(case: str) -> None:
    issued: list[str] = []
    with (
        serve(_token_server(LIFETIMES[case], issued)) as port,
        Client(
            f"http://127.0.0.1:{port}/main",
            "hostile-client",
            SECRET,
            progress=False,
            requests_per_minute=None,
            timeout=5,
        ) as client,
    ):
        for n in range(20):
            client.read("Patient", str(n))
        assert client.auth.token_requests == 1
    assert len(issued) == 1


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("expires_in", "kept"),
    [
        (MISSING, 840.0),  # the documented 900 s, less the 60 s margin
        ("NaN", 840.0),
        ("soon", 840.0),
        (3600, 840.0),  # the stated 15 minutes win over expires_in 3600
        (0, MIN_TOKEN_LIFETIME / 2),  # raised to 60 s; a short token keeps half its life
        (-1, MIN_TOKEN_LIFETIME / 2),
        (59, MIN_TOKEN_LIFETIME / 2),
        (300, 240.0),
        ("300", 240.0),  # a number sent as a string is still that number
    ],
)
def test_the_lifetime_a_token_is_given(expires_in: Any, kept: float) -> None:
    clock = _Clock()
    auth = ClientCredentialsAuth(
        "http://x/main/oauth/token", "hostile-client", SECRET, user_agent="t", clock=clock
    )
    payload: dict[str, Any] = {"access_token": "token-one", "token_type": "Bearer"}
    if expires_in is not MISSING:
        payload["expires_in"] = expires_in
    auth._store(httpx.Response(200, json=payload))
    clock.now += kept - 0.5
    assert auth._current() is not None
    clock.now += 1.0
    assert auth._current() is None


def test_the_reason_a_lifetime_was_changed_is_kept() -> None:
    assert token_lifetime(900) == (900.0, None)
    seconds, why = token_lifetime(-5)
    assert seconds == MIN_TOKEN_LIFETIME and why is not None and "-5" in why
    seconds, why = token_lifetime(float("nan"))
    assert seconds == 900.0 and why is not None and "finite" in why
    assert token_lifetime(None)[1] == "expires_in is missing; the documented 900 s is used"
