"""Token endpoint, bearer tokens and the User-Agent rule, over real loopback HTTP."""

from __future__ import annotations

import httpx
import jwt

from tests.conftest import USER_AGENT, api_client, token_for
from toolkit.mock import Deployment, serve

HEADERS = {"User-Agent": USER_AGENT, "Accept": "application/fhir+json"}


def _token_request(dep: Deployment, body: object) -> httpx.Response:
    return httpx.post(f"{dep.base_url}/oauth/token", json=body, headers=HEADERS)


def _creds(dep: Deployment, **override: str) -> dict[str, str]:
    body = {
        "grant_type": "client_credentials",
        "client_id": dep.client_id,
        "client_secret": dep.client_secret,
    }
    body.update(override)
    return body


def test_token_endpoint_answers_bearer_with_expires_in_3600(mock_deployment: Deployment) -> None:
    response = _token_request(mock_deployment, _creds(mock_deployment))
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    assert isinstance(body["access_token"], str) and body["access_token"]


def test_token_is_a_jwt_whose_real_lifetime_is_900_seconds(mock_deployment: Deployment) -> None:
    claims = jwt.decode(token_for(mock_deployment), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 900
    assert claims["sub"] == mock_deployment.client_id


def test_wrong_secret_gets_401(mock_deployment: Deployment) -> None:
    response = _token_request(mock_deployment, _creds(mock_deployment, client_secret="nope"))
    assert response.status_code == 401
    assert response.json()["resourceType"] == "OperationOutcome"


def test_unknown_client_id_gets_401(mock_deployment: Deployment) -> None:
    response = _token_request(mock_deployment, _creds(mock_deployment, client_id="someone"))
    assert response.status_code == 401


def test_malformed_token_body_gets_400(mock_deployment: Deployment) -> None:
    response = httpx.post(
        f"{mock_deployment.base_url}/oauth/token",
        content=b"{not json",
        headers={**HEADERS, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["resourceType"] == "OperationOutcome"


def test_token_body_that_is_not_an_object_gets_400(mock_deployment: Deployment) -> None:
    assert _token_request(mock_deployment, ["client_credentials"]).status_code == 400


def test_wrong_grant_type_gets_400(mock_deployment: Deployment) -> None:
    body = _creds(mock_deployment, grant_type="password")
    assert _token_request(mock_deployment, body).status_code == 400


def test_missing_token_gets_401_operation_outcome(mock_deployment: Deployment) -> None:
    response = httpx.get(f"{mock_deployment.base_url}/Referral", headers=HEADERS)
    assert response.status_code == 401
    outcome = response.json()
    assert outcome["resourceType"] == "OperationOutcome"
    assert "entry" not in outcome


def test_forged_token_gets_401(mock_deployment: Deployment) -> None:
    forged = jwt.encode({"sub": "pmtk-demo", "iat": 0, "exp": 2**40}, b"x" * 32, algorithm="HS256")
    response = httpx.get(
        f"{mock_deployment.base_url}/Referral",
        headers={**HEADERS, "Authorization": f"Bearer {forged}"},
    )
    assert response.status_code == 401
    assert response.json()["issue"][0]["code"] != "expired"


def test_expired_token_gets_401_with_code_expired(fresh_mock: Deployment) -> None:
    with api_client(fresh_mock) as client:
        assert client.get("Patient").status_code == 200
        fresh_mock.advance_clock(901)
        response = client.get("Patient")
    assert response.status_code == 401
    assert response.json()["issue"][0]["code"] == "expired"


def test_token_still_works_shortly_before_its_real_lifetime(fresh_mock: Deployment) -> None:
    with api_client(fresh_mock) as client:
        fresh_mock.advance_clock(880)
        assert client.get("Patient").status_code == 200


def test_token_lifetime_and_expires_in_are_options() -> None:
    with serve(token_lifetime=60, expires_in=120, test_controls=True) as dep:
        assert _token_request(dep, _creds(dep)).json()["expires_in"] == 120
        with api_client(dep) as client:
            dep.advance_clock(61)
            assert client.get("Patient").status_code == 401


def test_missing_user_agent_gets_403_on_resources(mock_deployment: Deployment) -> None:
    with api_client(mock_deployment) as client:
        del client.headers["User-Agent"]
        response = client.get("Referral", headers={"User-Agent": ""})
    assert response.status_code == 403
    assert response.json()["resourceType"] == "OperationOutcome"


def test_missing_user_agent_gets_403_on_the_token_endpoint(mock_deployment: Deployment) -> None:
    response = httpx.post(
        f"{mock_deployment.base_url}/oauth/token",
        json=_creds(mock_deployment),
        headers={"User-Agent": ""},
    )
    assert response.status_code == 403
