"""Neither the client secret nor an access token shows in logs, reprs or errors."""

from __future__ import annotations

import logging

import httpx
import pytest

from toolkit.errors import PmtkError

SECRET = "s3cret-never-shown-0123456789"


def test_secret_and_token_absent_from_logs_reprs_and_errors(fake_api, make_outcome, caplog):
    caplog.set_level(logging.DEBUG)
    fake_api.routes[("GET", "/main/Patient/1")] = lambda r: httpx.Response(
        200, json={"resourceType": "Patient", "id": "1"}
    )
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return make_outcome(401, "expired", "expired")
        return make_outcome(503, "transient", "busy")

    fake_api.routes[("GET", "/main/Patient/2")] = flaky
    texts: list[str] = []
    with fake_api.client() as client:
        client.read("Patient", "1")
        texts += [repr(client), str(client), repr(client.auth), repr(client.throttle)]
        with pytest.raises(PmtkError) as info:
            client.read("Patient", "2")
        texts += [str(info.value), repr(info.value)]
        cause = info.value.__cause__
        texts += [str(cause), repr(cause)]
        client.auth.token_url = "https://api.test/main/denied"
        client.auth.invalidate()
        with pytest.raises(PmtkError) as info2:
            client.read("Patient", "1")
        texts += [str(info2.value), repr(info2.value), repr(client.auth)]
    texts.append(caplog.text)
    texts += [str(r.args) for r in caplog.records]
    assert fake_api.issued, "a token was issued"
    haystack = "\n".join(texts)
    assert "HTTP Request" in caplog.text  # httpx's own logging was captured
    assert SECRET not in haystack
    for token in fake_api.issued:
        assert token not in haystack
