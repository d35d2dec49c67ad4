"""Each fault profile breaks exactly its one rule, observably, over real HTTP."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jwt
import pytest

from tests.conftest import USER_AGENT, api_client, token_for
from tests.mock.test_booking import WINDOW, book_body
from tests.mock.test_writes import attachment, referral_body
from toolkit import catalogue as cat
from toolkit.mock import FAULT_PROFILES, Deployment, serve

RATE = 3


@pytest.fixture
def faulty(request: pytest.FixtureRequest) -> Iterator[tuple[Deployment, httpx.Client]]:
    """A mock started with the profile named by the test's parameter and a limit of 3/min."""
    with (
        serve(fault=request.param, rate_limit=RATE, test_controls=True) as dep,
        api_client(dep) as client,
    ):
        yield dep, client


def _entries(client: httpx.Client, path: str, **params: object) -> list[dict[str, object]]:
    return [e["resource"] for e in client.get(path, params=params).json()["entry"]]


def wrong_id_prefix(dep: Deployment, client: httpx.Client) -> None:
    ids = [r["id"] for r in _entries(client, "Practitioner", _count=100)]
    assert any(str(i).startswith("XP-") for i in ids)
    assert client.get("Practitioner/XP-6001").json()["id"] == "XP-6001"


def enum_outside_spec(dep: Deployment, client: httpx.Client) -> None:
    values = [r.get("allocationType") for r in _entries(client, "Referral")]
    assert values.count("Everything") >= 3


def bad_reference(dep: Deployment, client: httpx.Client) -> None:
    refs = [r["performer"]["reference"] for r in _entries(client, "Referral")]  # type: ignore[index]
    assert refs and all("/main/Practitioner/EP-" in str(x) for x in refs)


def bad_phone(dep: Deployment, client: httpx.Client) -> None:
    values = [
        t["value"]
        for r in _entries(client, "Organization", _count=100)
        for t in r.get("telecom", [])  # type: ignore[attr-defined]
        if t["system"] == "phone"
    ]
    assert any(" " in v for v in values)


def bad_country(dep: Deployment, client: httpx.Client) -> None:
    countries = [
        a["country"]
        for r in _entries(client, "Organization", _count=100)
        for a in r.get("address", [])  # type: ignore[attr-defined]
    ]
    assert "Australia" in countries


def missing_required(dep: Deployment, client: httpx.Client) -> None:
    missing = [r["id"] for r in _entries(client, "Appointment") if "end" not in r]
    assert len(missing) >= 3


def no_ratelimit_headers(dep: Deployment, client: httpx.Client) -> None:
    response = client.get("Patient")
    assert response.status_code == 200
    assert "x-ratelimit-limit" not in response.headers
    assert "x-ratelimit-remaining" not in response.headers


def _exhaust(client: httpx.Client) -> httpx.Response:
    responses = [client.get("Patient", params={"_count": 1}) for _ in range(RATE + 1)]
    return responses[-1]


def no_retry_after(dep: Deployment, client: httpx.Client) -> None:
    last = _exhaust(client)
    assert last.status_code == 429 and "retry-after" not in last.headers


def rate_limit_not_enforced(dep: Deployment, client: httpx.Client) -> None:
    assert _exhaust(client).status_code == 200


def rate_limit_per_token(dep: Deployment, client: httpx.Client) -> None:
    dep.reset_rate_limit()
    statuses = [client.get("Organization/PG-1000").status_code for _ in range(RATE + 1)]
    assert statuses == [200] * RATE + [429]
    fresh = {"Authorization": f"Bearer {token_for(dep)}"}
    # The spec's limit is the client's: with a new token the same client is let through.
    assert client.get("Organization/PG-1000", headers=fresh).status_code == 200


def tokens_die_early(dep: Deployment, client: httpx.Client) -> None:
    token = client.headers["Authorization"].split()[1]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 900
    dep.advance_clock(301)
    response = client.get("Patient")
    assert response.status_code == 401 and response.json()["issue"][0]["code"] == "expired"


def tokens_outlive_expires_in(dep: Deployment, client: httpx.Client) -> None:
    dep.advance_clock(7200)
    assert client.get("Patient").status_code == 200


def token_revoked_early(dep: Deployment, client: httpx.Client) -> None:
    from toolkit.mock.faults import REVOKE_AFTER_USES

    token = httpx.post(
        f"{dep.base_url}/oauth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": dep.client_id,
            "client_secret": dep.client_secret,
        },
        headers={"User-Agent": USER_AGENT},
    ).json()["access_token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}
    statuses = []
    for _ in range(REVOKE_AFTER_USES + 1):
        dep.reset_rate_limit()
        response = httpx.get(f"{dep.base_url}/Organization/PG-1000", headers=headers)
        statuses.append(response.status_code)
    assert statuses == [200] * REVOKE_AFTER_USES + [401]
    assert response.json()["issue"][0]["code"] == "expired"
    assert claims["exp"] - claims["iat"] == 900  # the JWT still claims its 15 minutes


def auth_not_enforced(dep: Deployment, client: httpx.Client) -> None:
    response = httpx.get(f"{dep.base_url}/Patient", headers={"User-Agent": USER_AGENT})
    assert response.status_code == 200 and response.json()["entry"]


def any_secret_accepted(dep: Deployment, client: httpx.Client) -> None:
    response = httpx.post(
        f"{dep.base_url}/oauth/token",
        json={"grant_type": "client_credentials", "client_id": dep.client_id, "client_secret": "x"},
        headers={"User-Agent": USER_AGENT},
    )
    assert response.status_code == 200 and response.json()["access_token"]


def _next(bundle: dict[str, object]) -> str:
    return next(x["url"] for x in bundle["link"] if x["relation"] == "next")  # type: ignore[attr-defined]


def paging_loop(dep: Deployment, client: httpx.Client) -> None:
    page2 = client.get(_next(client.get("Referral").json())).json()
    assert "page=1" in _next(page2)


def total_mismatch(dep: Deployment, client: httpx.Client) -> None:
    bundle = client.get("Organization", params={"_count": 100}).json()
    assert bundle["total"] == len(bundle["entry"]) + 5


def wrong_content_type(dep: Deployment, client: httpx.Client) -> None:
    assert client.get("Patient").headers["content-type"] == "application/json"


def double_booking(dep: Deployment, client: httpx.Client) -> None:
    slot = _entries(client, "Appointment/$find", **WINDOW)[0]
    role = slot["participant"][0]["actor"]["reference"].rsplit("/", 1)[1]  # type: ignore[index]
    body = book_body(role, str(slot["start"]), str(slot["end"]))
    assert client.post("Appointment/$book", json=body).status_code == 201
    assert client.post("Appointment/$book", json=body).status_code == 201


def attachment_type_unchecked(dep: Deployment, client: httpx.Client) -> None:
    item = attachment(contentType="text/x-shellscript", data=base64.b64encode(b"ls").decode())
    assert client.post("Referral", json=referral_body(attachments=[item])).status_code == 201


def _patch_comment(dep: Deployment, client: httpx.Client) -> tuple[dict[str, Any], httpx.Response]:
    dep.reset_rate_limit()
    created = client.post("Referral", json=referral_body())
    assert created.status_code == 201
    record = created.json()
    reply = client.patch(
        f"Referral/{record['id']}",
        json={"comment": "patched"},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert reply.status_code == 200
    return record, reply


def patch_reply_id_prefix(dep: Deployment, client: httpx.Client) -> None:
    record, reply = _patch_comment(dep, client)
    assert reply.json()["id"] == f"RF-{record['id']}"
    assert client.get(f"Referral/{record['id']}").json()["id"] == record["id"]


def patch_stale_last_updated(dep: Deployment, client: httpx.Client) -> None:
    record, reply = _patch_comment(dep, client)
    stamp = reply.json()["meta"]["lastUpdated"]
    assert stamp < record["meta"]["lastUpdated"]  # ISO instants in UTC sort as text
    search = client.get(
        "Referral",
        params={"_id": record["id"], "_lastUpdated": f"ge{record['meta']['lastUpdated']}"},
    )
    assert search.json().get("entry", []) == []


def token_endpoint_fails_later(dep: Deployment, client: httpx.Client) -> None:
    # The client's own token was the first issued; the next, with the same good
    # credentials, is refused by a failing endpoint, while a wrong secret still gets 401.
    def ask(secret: str) -> httpx.Response:
        body = {"grant_type": "client_credentials", "client_id": dep.client_id}
        return httpx.post(
            f"{dep.base_url}/oauth/token",
            json={**body, "client_secret": secret},
            headers={"User-Agent": USER_AGENT},
        )

    assert ask("wrong-secret").status_code == 401
    refused = ask(dep.client_secret)
    assert refused.status_code == 503
    assert refused.json()["resourceType"] == "OperationOutcome"
    assert "access_token" not in refused.json()
    assert client.get("Organization/PG-1000").status_code == 200  # the issued token works


def referral_server_error(dep: Deployment, client: httpx.Client) -> None:
    dep.reset_rate_limit()  # the profile's limit is 3 a minute
    for path in ("Referral", "Referral/300001"):
        response = client.get(path)
        assert response.status_code == 500
        assert response.json()["resourceType"] == "OperationOutcome"
    assert client.post("Referral", json=referral_body()).status_code == 500
    dep.reset_rate_limit()
    assert client.get("ReferralDefinition").status_code == 200  # only Referral
    assert client.get("Organization/PG-1000").status_code == 200


def book_reply_local_times(dep: Deployment, client: httpx.Client) -> None:
    dep.reset_rate_limit()
    slot = _entries(client, "Appointment/$find", **WINDOW)[0]
    role = slot["participant"][0]["actor"]["reference"].rsplit("/", 1)[1]  # type: ignore[index]
    body = book_body(role, str(slot["start"]), str(slot["end"]))
    reply = client.post("Appointment/$book", json=body)
    assert reply.status_code == 201
    stored = client.get(f"Appointment/{reply.json()['id']}").json()
    # The stored times are the slot's; the reply's are 10 hours later.
    assert _instant(stored["start"]) == _instant(str(slot["start"]))
    shift = _instant(reply.json()["start"]) - _instant(stored["start"])
    assert shift.total_seconds() == 10 * 3600
    assert reply.json()["id"] == stored["id"]


def _instant(text: str) -> Any:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def flaky_503(dep: Deployment, client: httpx.Client) -> None:
    dep.reset_rate_limit()
    statuses = []
    for n in range(8):
        if n % 3 == 0:
            dep.reset_rate_limit()
        statuses.append(client.get("Organization/PG-1000").status_code)
    assert statuses == [200, 200, 200, 503, 200, 200, 200, 503]


def drop_connections(dep: Deployment, client: httpx.Client) -> None:
    outcomes = []
    for _ in range(5):
        dep.reset_rate_limit()
        try:
            outcomes.append(client.get("Appointment").status_code)
        except httpx.RemoteProtocolError:
            outcomes.append(-1)
    assert outcomes == [200, 200, 200, 200, -1]


def relative_next_links(dep: Deployment, client: httpx.Client) -> None:
    assert _next(client.get("Referral").json()).startswith("/main/Referral?")


def vendor_search_only(dep: Deployment, client: httpx.Client) -> None:
    everyone = client.get("Appointment", params={"_summary": "count"}).json()["total"]
    answer = client.get("Appointment", params={"status": "booked", "_summary": "count"}).json()
    assert answer["total"] == everyone  # ignored, as FHIR lets a server
    assert "status=" not in answer["link"][0]["url"]  # and left out of self
    declared = cat.declared_search(client.get("metadata").json())
    assert not declared["Appointment"] & set(cat.FHIR_SEARCH["Appointment"])
    assert {"date", "patient", "actor"} <= declared["Appointment"]


CHECKS: dict[str, Callable[[Deployment, httpx.Client], None]] = {
    "wrong-id-prefix": wrong_id_prefix,
    "enum-outside-spec": enum_outside_spec,
    "bad-reference": bad_reference,
    "bad-phone": bad_phone,
    "bad-country": bad_country,
    "missing-required": missing_required,
    "no-ratelimit-headers": no_ratelimit_headers,
    "no-retry-after": no_retry_after,
    "rate-limit-not-enforced": rate_limit_not_enforced,
    "rate-limit-per-token": rate_limit_per_token,
    "tokens-die-early": tokens_die_early,
    "tokens-outlive-expires-in": tokens_outlive_expires_in,
    "token-revoked-early": token_revoked_early,
    "token-endpoint-fails-later": token_endpoint_fails_later,
    "auth-not-enforced": auth_not_enforced,
    "any-secret-accepted": any_secret_accepted,
    "paging-loop": paging_loop,
    "total-mismatch": total_mismatch,
    "wrong-content-type": wrong_content_type,
    "referral-server-error": referral_server_error,
    "double-booking": double_booking,
    "attachment-type-unchecked": attachment_type_unchecked,
    "patch-reply-id-prefix": patch_reply_id_prefix,
    "patch-stale-last-updated": patch_stale_last_updated,
    "book-reply-local-times": book_reply_local_times,
    "flaky-503": flaky_503,
    "drop-connections": drop_connections,
    "relative-next-links": relative_next_links,
    "vendor-search-only": vendor_search_only,
}


def test_every_fault_profile_has_an_observable_check() -> None:
    assert set(CHECKS) == set(FAULT_PROFILES)


@pytest.mark.parametrize("faulty", list(CHECKS), indirect=True)
def test_fault_profile_breaks_its_rule(faulty: tuple[Deployment, httpx.Client]) -> None:
    dep, client = faulty
    name = dep.options.fault
    assert name is not None
    CHECKS[name](dep, client)


@pytest.mark.parametrize("name", list(CHECKS))
def test_without_the_fault_its_check_fails(name: str) -> None:
    """The checks really observe their fault: on a faithful mock each one fails."""
    with (
        serve(rate_limit=RATE, test_controls=True) as dep,
        api_client(dep) as client,
        pytest.raises((AssertionError, StopIteration)),
    ):
        CHECKS[name](dep, client)
