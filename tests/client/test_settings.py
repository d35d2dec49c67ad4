"""One configuration path: typos, half configurations and malformed addresses are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolkit.config import PmtkConfigWarning, check_base_url, configured, resolve_settings
from toolkit.errors import ConfigurationError


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.upper().startswith("PM_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env
    return monkeypatch


def test_nothing_configured_means_the_embedded_mock(bare_env: pytest.MonkeyPatch) -> None:
    assert configured() is False


def test_a_misspelt_base_url_variable_is_an_error_not_a_silent_mock(
    bare_env: pytest.MonkeyPatch,
) -> None:
    bare_env.setenv("PM_BASEURL", "https://au-api.halaxy.com/main")
    with pytest.raises(ConfigurationError, match=r"PM_BASEURL.*did you mean PM_BASE_URL"):
        configured()


def test_a_misspelt_name_in_dotenv_is_an_error_too(bare_env: pytest.MonkeyPatch) -> None:
    Path(".env").write_text("PM_CLIENT_SECRETT=x\n")
    with pytest.raises(ConfigurationError, match=r"\.env.*PM_CLIENT_SECRET"):
        configured()


def test_unrelated_pm_variables_are_left_alone(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("PM_HOME_DIRECTORY", "/x")
    assert configured() is False


def test_credentials_without_an_address_are_refused(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("PM_CLIENT_ID", "id")
    bare_env.setenv("PM_CLIENT_SECRET", "s3cret-value")
    with pytest.raises(ConfigurationError, match="no deployment address") as info:
        configured()
    assert "s3cret-value" not in str(info.value)


def test_settings_come_from_a_dotenv_file_below_the_environment(
    bare_env: pytest.MonkeyPatch,
) -> None:
    Path(".env").write_text(
        "PM_BASE_URL=https://eu-api.halaxy.com/main\nPM_CLIENT_ID=from-file\n"
        "PM_CLIENT_SECRET=file-secret\nPM_USER_AGENT=Acme (it@acme.test)\n"
    )
    bare_env.setenv("PM_CLIENT_ID", "from-env")
    assert configured() is True
    s = resolve_settings()
    assert s.base_url == "https://eu-api.halaxy.com/main"
    assert s.client_id == "from-env"
    assert s.client_secret.reveal() == "file-secret"
    assert "file-secret" not in repr(s)


@pytest.mark.parametrize(
    ("url", "fix"),
    [
        ("https://au-api.halaxy.com", "use https://au-api.halaxy.com/main"),
        ("https://au-api.halaxy.com/", "use https://au-api.halaxy.com/main"),
        ("https://au-api.halaxy.com/api", "use https://au-api.halaxy.com/api/main"),
        ("au-api.halaxy.com/main", "http:// or https://"),
        ("https://user:pw@au-api.halaxy.com/main", "user name or password"),
        ("https://au-api.halaxy.com/main?x=1", "query or fragment"),
    ],
)
def test_a_malformed_base_url_says_the_fix(url: str, fix: str) -> None:
    with pytest.raises(ConfigurationError, match=fix.replace("?", r"\?")) as info:
        check_base_url(url)
    assert "pw" not in str(info.value)


def test_a_missing_user_agent_warns_and_says_how_to_set_it(bare_env: pytest.MonkeyPatch) -> None:
    with pytest.warns(PmtkConfigWarning, match="set PM_USER_AGENT"):
        s = resolve_settings("https://x.test/main", "id", "secret")
    assert s.user_agent.startswith("pmtk/")
