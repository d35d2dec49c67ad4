"""Settings are checked before anything runs: PM_TIMEZONE, ``.env`` lines, the hint list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config import KNOWN_VARIABLES, configured, resolve_settings
from toolkit.errors import ConfigurationError

PMTK = Path(sys.executable).parent / "pmtk"


def test_a_time_zone_that_is_not_iana_is_refused_with_the_settings() -> None:
    environ = {"PM_TIMEZONE": "Mars/Base"}
    with pytest.raises(ConfigurationError, match=r"PM_TIMEZONE='Mars/Base' \(environment\)"):
        configured(environ=environ)
    with pytest.raises(ConfigurationError, match="IANA time zone"):
        resolve_settings("http://127.0.0.1:9/main", "id", "secret", environ=environ)
    # a real zone, and no zone at all, pass
    assert configured(environ={"PM_TIMEZONE": "Australia/Sydney"}) is False
    assert configured(environ={}) is False


def test_connect_refuses_a_bad_time_zone_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import toolkit

    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("PM_") and k != "PM_USER_AGENT"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PM_TIMEZONE", "Mars/Base")
    with pytest.raises(ConfigurationError, match="Mars/Base"):
        toolkit.connect()  # not the mock first and a failure in a notebook's cell 2


def test_a_bad_time_zone_is_one_line_and_exit_2_from_every_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env["PM_TIMEZONE"] = "Mars/Base"
    for args in (["sync", "--out", "s"], ["check", "--report-dir", "r"]):
        run = subprocess.run(
            [str(PMTK), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 2, (args, run.stderr)
        assert len(run.stderr.splitlines()) == 1, run.stderr
        assert "PM_TIMEZONE='Mars/Base'" in run.stderr and "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_junk_line_in_dotenv_names_the_file_and_line_once_and_never_its_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("PM_")]:
        monkeypatch.delenv(name)
    (tmp_path / ".env").write_text(
        "PM_BASE_URL=http://127.0.0.1:9/main\n# a comment\nPM_CLIENT_SECRET hunter2\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigurationError) as info:
        configured()
    message = str(info.value)
    assert message.startswith(f"{tmp_path / '.env'} line 3: not a setting")
    assert "hunter2" not in message  # the line may hold a secret
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    run = subprocess.run(
        [str(PMTK), "sync", "--out", "s"], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "line 3" in lines[0] and ".env" in lines[0], run.stderr
    assert "python-dotenv" not in run.stderr and "hunter2" not in run.stderr


def test_the_did_you_mean_hint_lists_every_known_name() -> None:
    with pytest.raises(ConfigurationError) as info:
        configured(environ={"PM_TIMEZON": "UTC"})
    message = str(info.value)
    assert "did you mean PM_TIMEZONE?" in message
    listed = message.split("pmtk reads ", 1)[1]
    assert all(name in listed for name in KNOWN_VARIABLES), listed
