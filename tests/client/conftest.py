"""Fixtures of the client tests: instant retries, a fake clock and a scripted fake API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import stamina

from tests.loopback import bundle

SECRET = "s3cret-never-shown-0123456789"
TOKEN_PREFIX = "tok-never-shown-"


@pytest.fixture(autouse=True)
def instant_retries() -> Iterator[None]:
    """Retries keep their attempt counts but do not sleep."""
    with stamina.set_testing(True, attempts=6, cap=True):
        yield


@dataclass
class FakeClock:
    """A monotonic clock that moves only when something sleeps on it."""

    now: float = 1000.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeApi:
    """A scripted deployment behind :class:`httpx.MockTransport`.

    ``routes`` maps ``(method, path)`` to a handler; unknown routes answer 404
    with an OperationOutcome. Token requests are answered here and counted.
    """

    routes: dict[tuple[str, str], Handler] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    token_requests: int = 0
    expires_in: int = 3600
    token_delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    issued: list[str] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/main/oauth/token":
            with self.lock:
                self.token_requests += 1
                token = f"{TOKEN_PREFIX}{self.token_requests}"
                self.issued.append(token)
            if self.token_delay:
                threading.Event().wait(self.token_delay)
            return httpx.Response(
                200,
                json={"token_type": "Bearer", "expires_in": self.expires_in, "access_token": token},
            )
        with self.lock:
            self.requests.append(request)
        handler = self.routes.get((request.method, request.url.path))
        if handler is None:
            return outcome(404, "not-found", f"no route {request.method} {request.url.path}")
        return handler(request)

    def count(self, method: str | None = None, path: str | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if (method is None or r.method == method) and (path is None or r.url.path == path)
        )

    def client(self, **kwargs: Any) -> Any:
        from toolkit.client import Client

        kwargs.setdefault("base_url", "https://api.test/main")
        kwargs.setdefault("client_id", "client-1")
        kwargs.setdefault("client_secret", SECRET)
        kwargs.setdefault("progress", False)
        return Client(transport=httpx.MockTransport(self.handle), **kwargs)


def outcome(status: int, code: str, diagnostics: str, **kw: Any) -> httpx.Response:
    body = {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": code, "diagnostics": diagnostics}],
    }
    return httpx.Response(status, json=body, **kw)


@pytest.fixture
def fake_api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_outcome() -> Callable[..., httpx.Response]:
    return outcome


@pytest.fixture
def make_bundle() -> Callable[..., dict[str, Any]]:
    return bundle
