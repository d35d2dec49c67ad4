"""The uvicorn settings the mock and ``pmtk listen`` share (``toolkit._protocol.guarded_config``).

Each server sends no ``Server`` header, logs no access lines, runs no lifespan, and reads
requests with the guarded protocol and the given limits.
"""

from __future__ import annotations

import time

import httpx

from tests.conftest import api_client
from toolkit._protocol import GuardedProtocol, Limits, guarded_config
from toolkit.mock import Deployment


def test_the_shared_settings() -> None:
    limits = Limits(max_header_bytes=12_345, header_timeout=1.0, body_timeout=2.0, clock=time.time)
    config = guarded_config(object(), limits, host="127.0.0.1", port=0, log_level="warning")
    assert (config.access_log, config.lifespan, config.server_header) == (False, "off", False)
    assert config.timeout_graceful_shutdown == 2
    assert config.h11_max_incomplete_event_size == 12_345
    assert isinstance(config.http, type) and issubclass(config.http, GuardedProtocol)
    assert config.http._limits is limits


def test_the_mock_answers_without_a_server_header(mock_deployment: Deployment) -> None:
    mock_deployment.reset_rate_limit()
    with api_client(mock_deployment) as http:
        response = http.get("Referral?_count=1")
    assert response.status_code == 200
    assert "server" not in response.headers
    bare = httpx.get(f"{mock_deployment.base_url}/Referral")  # refused, no token
    assert bare.status_code == 401 and "server" not in bare.headers
