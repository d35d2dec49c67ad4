"""``pmtk mock`` prints where it serves and the demo credentials, then serves until Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx

from tests.conftest import USER_AGENT


def test_pmtk_mock_prints_base_url_and_credentials_and_serves() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from toolkit.cli import app; app()", "mock", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        info = dict(line.split(":", 1) for line in lines)
        base_url = info["base URL"].strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/main")
        assert info["client id"].strip() == "pmtk-demo"
        response = httpx.post(
            f"{base_url}/oauth/token",
            json={
                "grant_type": "client_credentials",
                "client_id": info["client id"].strip(),
                "client_secret": info["client secret"].strip(),
            },
            headers={"User-Agent": USER_AGENT},
        )
        assert response.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == 0
