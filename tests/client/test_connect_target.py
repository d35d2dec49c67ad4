"""toolkit.connect(): the embedded mock only when nothing is configured, said on stderr."""

from __future__ import annotations

import subprocess
import sys

from toolkit.mock import serve

SCRIPT = """
import toolkit
with toolkit.connect(progress=False) as client:
    print(client.read("Organization", "CL-2001")["id"])
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", SCRIPT],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nothing_configured_uses_the_mock_and_says_so_on_stderr_only() -> None:
    run = _run({})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "CL-2001"  # piped output stays data only
    assert "embedded mock" in run.stderr


def test_credentials_without_an_address_are_refused_not_sent_to_the_mock() -> None:
    run = _run({"PM_CLIENT_ID": "real-id", "PM_CLIENT_SECRET": "real-secret-value"})
    assert run.returncode != 0
    assert "ConfigurationError" in run.stderr and "PM_BASE_URL" in run.stderr
    assert "real-secret-value" not in run.stderr + run.stdout


def test_a_misspelt_address_variable_is_refused() -> None:
    run = _run({"PM_BASEURL": "https://au-api.halaxy.com/main"})
    assert run.returncode != 0
    assert "did you mean PM_BASE_URL" in run.stderr


def test_a_base_url_whose_token_endpoint_is_missing_is_a_configuration_error() -> None:
    # A server on the right host, given without /main: nothing answers at /oauth/token.
    with serve() as dep:
        wrong = dep.base_url.removesuffix("/main") + "/api/main"
        run = _run(
            {
                "PM_BASE_URL": wrong,
                "PM_CLIENT_ID": dep.client_id,
                "PM_CLIENT_SECRET": dep.client_secret,
                "PM_USER_AGENT": "tests (t@example.invalid)",
            }
        )
    assert run.returncode != 0
    assert "ConfigurationError" in run.stderr
    assert "including /main" in run.stderr
    assert dep.client_secret not in run.stderr
