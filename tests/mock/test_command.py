"""``pmtk mock``: the banner it prints, the server it runs, and a clean stop on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx

from tests.conftest import USER_AGENT


def test_pmtk_mock_prints_where_it_serves_answers_there_and_stops_on_ctrl_c() -> None:
    entry = "from toolkit.cli import main; main()"  # what the pmtk console script runs
    cmd = [sys.executable, "-c", entry, "mock", "--port", "0", "--test-controls"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # A pytest started in the background ignores SIGINT, and a child would inherit
        # that; Ctrl-C must reach the command as it does in a terminal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        banner = {}
        while "shapes" not in banner:
            line = proc.stdout.readline()
            assert line, f"pmtk mock exited early: {proc.stderr.read() if proc.stderr else ''}"
            key, _, value = line.partition(":")
            banner[key.strip()] = value.strip()
        base_url = banner["base URL"]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/main")
        assert banner["client id"] and banner["client secret"]
        assert banner["test controls"] == f"{base_url}/_test/ (test use only)"
        assert banner["shapes"] == "live"
        token = httpx.post(
            f"{base_url}/oauth/token",
            json={  # the token body is JSON (public-docs-facts.md)
                "grant_type": "client_credentials",
                "client_id": banner["client id"],
                "client_secret": banner["client secret"],
            },
            headers={"User-Agent": USER_AGENT},
        )
        assert token.status_code == 200, token.text
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving until Ctrl-C" in err and "stopping" in err
