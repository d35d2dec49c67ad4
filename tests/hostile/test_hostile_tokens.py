"""A token endpoint that answers a token no request header could carry.

A bearer token travels in the ``Authorization`` header (RFC 6750, section 2.1: visible
ASCII), and servers refuse request heads past 8 to 32 KiB. A hostile or broken token
endpoint answering an 8 MB ``access_token`` kept ``Client(timeout=10)`` busy for over
40 s, compiling a redaction pattern of the token outside every deadline; one with a
newline in it would reach httpx's header code. Both are refused at once with an
:class:`AuthError` that names the problem and never the token. The servers here are
raw sockets on 127.0.0.1 answering the spec's token endpoint (``tests/hostile/rawhttp.py``).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.hostile.conftest import SECRET
from tests.hostile.rawhttp import Seen, http_answer, raw_server
from toolkit import redaction
from toolkit.auth import MAX_TOKEN_CHARS
from toolkit.client import Client
from toolkit.errors import AuthError

PATIENT = b'{"resourceType": "Patient", "id": "1"}'


def _token(value: str):  # type: ignore[no-untyped-def]
    def answer(_seen: Seen) -> bytes:
        body = {"token_type": "Bearer", "expires_in": 900, "access_token": value}
        return http_answer(200, json.dumps(body).encode())

    return answer


def _read(base_url: str) -> None:
    with Client(
        base_url, "hostile-client", SECRET, progress=False, requests_per_minute=None, timeout=10
    ) as client:
        client.read("Patient", "1")


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("T" * 8_000_000, "is 8,000,000 characters long"),
        ("T" * (MAX_TOKEN_CHARS + 1), f"is {MAX_TOKEN_CHARS + 1:,} characters long"),
        ("hostile-token\r\nX-Injected: yes", "a control or non-ASCII character at position 13"),
        ("hostile token value", "a space at position 7"),
        ("hostile-t\u00f6ken-value", "a control or non-ASCII character at position 9"),
    ],
    ids=["8 MB", "one over the limit", "CRLF", "space", "non-ASCII"],
)
def test_a_token_no_header_could_carry_is_refused_with_a_clear_error(token: str, said: str) -> None:
    with raw_server(lambda _s: http_answer(200, PATIENT), token=_token(token)) as server:
        with pytest.raises(AuthError) as refused:
            _read(server.base_url)
        assert not [s for s in server.seen if not s.path.startswith("/main/oauth/token")]
    text = str(refused.value)
    assert said in text
    assert token[:40] not in text and "T" * 20 not in text
    assert len(text) < 1000


def test_the_longest_token_a_header_carries_is_used() -> None:
    """The limit is not off by one: a token of exactly ``MAX_TOKEN_CHARS`` is sent."""
    token = "eyJ" + "a" * (MAX_TOKEN_CHARS - 3)
    with raw_server(lambda _s: http_answer(200, PATIENT), token=_token(token)) as server:
        _read(server.base_url)
        sent = [s.headers.get("authorization") for s in server.seen if "Patient" in s.path]
    assert sent == [f"Bearer {token}"]
    assert redaction.redact(f"echoed {token}") == "echoed <redacted>"


def test_adding_a_token_compiles_that_token_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept token's forms are compiled once: before, each new token recompiled every
    form of the 256 kept (1 s an addition when they were JWT-sized), and a token
    endpoint handing out short-lived tokens made each request pay it."""
    compiled: list[str] = []
    real = redaction._compile

    def counting(secret: str, client_id: str | None):  # type: ignore[no-untyped-def]
        compiled.append(secret)
        return real(secret, client_id)

    monkeypatch.setattr(redaction, "_compile", counting)
    registry = redaction.Redactor()
    tokens = [f"token-{n:04d}-" + "x" * 200 for n in range(redaction.MAX_TOKENS + 20)]
    for token in tokens:
        registry.add(token, token=True)
    assert compiled == tokens  # each once, when added
    assert registry.redact(tokens[-1]) == "<redacted>"
    assert registry.redact(tokens[0]) == tokens[0]  # the oldest dropped past MAX_TOKENS
    assert registry.redact(tokens[20]) == "<redacted>"  # the oldest kept


def test_a_secret_containing_another_is_redacted_whole_whatever_the_order_added() -> None:
    registry = redaction.Redactor()
    short, long = "abcdefgh-secret", "abcdefgh-secret-and-more-of-it"
    # secrets are kept apart from tokens: the short secret must not run first
    registry.add(long, token=True)
    registry.add(short)
    assert registry.redact(f"x {long} y {short} z") == "x <redacted> y <redacted> z"
    assert not re.search("and-more", registry.redact(long))
