"""auth: the token endpoint's answer, and resource requests without a valid token."""

from __future__ import annotations

import secrets
import time

import jwt
import pytest

from contracts.session import TOKEN_ENDPOINT_ROOT_CAUSE, Exchange
from contracts.suite import FINAL_PHASE, Recorder, Run, entries
from toolkit import catalogue as cat

PROBE_PATH = "/Patient"


def _leaks_data(ex: Exchange) -> bool:
    data = ex.json
    if not isinstance(data, dict):
        return False
    if data.get("resourceType") == "Bundle":
        return bool(entries(data))
    return data.get("resourceType") not in (None, "OperationOutcome")


def _expect_refused(check: Recorder, ex: Exchange, what: str) -> None:
    if ex.status != 401:
        check.fail(f"{what}: expected 401, got {ex.status}", ex)
    if _leaks_data(ex):
        check.fail(f"{what}: the response carried data", ex)


@pytest.mark.pm_check("auth.token-response", "auth")
def test_token_response_is_a_bearer_token(pm: Run, check: Recorder) -> None:
    ex, token = pm.session.request_token(remember=False)
    check.attach(ex)
    data = ex.json if isinstance(ex.json, dict) else {}
    if ex.status != 200:
        check.fail(f"token request answered {ex.status}", ex)
        return
    if data.get("token_type") != "Bearer":
        check.fail(f"token_type is {data.get('token_type')!r}, expected 'Bearer'", ex)
    expires_in = data.get("expires_in")
    if not isinstance(expires_in, int) or isinstance(expires_in, bool):
        check.fail(f"expires_in is {expires_in!r}, expected an integer", ex)
    if token is None:
        check.fail("no access_token in the token response", ex)


@pytest.mark.pm_check("auth.wrong-secret-refused", "auth")
def test_wrong_secret_gets_no_token(pm: Run, check: Recorder) -> None:
    wrong = "wrong-" + secrets.token_urlsafe(12)
    ex, token = pm.session.request_token(secret=wrong, remember=False)
    check.attach(ex)
    if token is not None or ex.status == 200:
        check.fail(f"a wrong client secret was accepted ({ex.status}, token issued)", ex)
    elif ex.status not in (400, 401, 403):
        check.fail(f"a wrong client secret answered {ex.status}, expected 400/401", ex)


@pytest.mark.pm_check("auth.no-token-refused", "auth")
def test_request_without_token_is_refused(pm: Run, check: Recorder) -> None:
    ex = pm.session.get(PROBE_PATH, auth=None, params={"_count": 1})
    _expect_refused(check, ex, "no Authorization header")


@pytest.mark.pm_check("auth.malformed-token-refused", "auth")
def test_malformed_token_is_refused(pm: Run, check: Recorder) -> None:
    ex = pm.session.get(PROBE_PATH, auth="not-a-token", params={"_count": 1})
    _expect_refused(check, ex, "malformed bearer token")


@pytest.mark.pm_check("auth.forged-token-refused", "auth")
def test_token_signed_with_another_key_is_refused(pm: Run, check: Recorder) -> None:
    real = pm.session.token().access_token
    try:
        claims = jwt.decode(real, options={"verify_signature": False})
        header = jwt.get_unverified_header(real)
    except jwt.PyJWTError:
        now = int(time.time())
        claims, header = (
            {"sub": pm.session.client_id, "iat": now, "exp": now + cat.TOKEN_LIFETIME_STATED},
            {},
        )
    algorithm = header.get("alg") if header.get("alg", "").startswith("HS") else "HS256"
    forged = jwt.encode(claims, secrets.token_bytes(32), algorithm=algorithm)
    ex = pm.session.get(PROBE_PATH, auth=forged, params={"_count": 1})
    _expect_refused(check, ex, "JWT with the right claims signed with another key")


SHOWN = 3


@pytest.mark.pm_check(TOKEN_ENDPOINT_ROOT_CAUSE, "auth", phase=FINAL_PHASE)
def test_every_token_asked_for_with_the_credentials_was_issued(pm: Run, check: Recorder) -> None:
    """The run's credentials got a token at the start; every later token request with them
    must get one too. A token endpoint that stops issuing is this one finding: the checks
    that then had no token are its follow-ons (the cascade guard), not findings of their own.
    """
    session = pm.session
    own = set(session.own_token_requests)
    asked = [ex for ex in session.log if ex.seq in own]
    refused = [ex for ex in asked if session.cascade.cause_of(ex) == TOKEN_ENDPOINT_ROOT_CAUSE]
    issued = len(asked) - len(refused)
    for ex in refused[:SHOWN]:
        before = sum(1 for other in asked if other.seq < ex.seq and other not in refused)
        check.fail(
            f"the token endpoint answered {ex.status} without a token to the run's own "
            f"credentials (accepted at the start; {before} tokens issued before this request)",
            ex,
        )
    if len(refused) > SHOWN:
        check.fail(f"{len(refused)} of {len(asked)} token requests with the credentials got none")
    check.note(f"{issued} of {len(asked)} token requests with the run's credentials issued a token")
