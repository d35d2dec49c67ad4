"""Catch-up and status that tell the truth: an API that starts late, a status found
without ``--port``, an error cleared once the failing thing succeeds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.conftest import toolkit_client
from tests.listen.conftest import free_port, notification
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import listen

PMTK = [sys.executable, "-c", "from toolkit.cli import app; app()", "listen"]


def _env(dep: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env.update(PM_CLIENT_ID=dep.client_id, PM_CLIENT_SECRET=dep.client_secret)
    env.update(PM_USER_AGENT="pmtk tests (tests@example.org)", PYTHONIOENCODING="utf-8")
    return env


def _until(check: Any, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


class _Later:
    """The connection details of a mock that is not running yet."""

    def __init__(self, port: int) -> None:
        self.base_url = f"http://127.0.0.1:{port}/main"
        self.client_id = "pmtk-demo"
        self.client_secret = "pmtk-demo-secret"


def test_a_catch_up_that_fails_because_the_api_is_not_up_is_retried_until_it_succeeds(
    tmp_path: Path,
) -> None:
    from toolkit.mock import serve

    port = free_port()
    store = tmp_path / "store"
    with (
        toolkit_client(_Later(port)) as client,
        listen(store, client=client, no_auth=True) as receiver,
    ):
        # the API is down: the catch-up failed, and says it will try again
        assert _until(lambda: receiver.stats.catch_up.startswith("failed")), receiver.stats
        assert "trying again" in receiver.stats.catch_up
        assert "catch-up" in (receiver.status()["last_error"] or {}).get("text", "")
        # an event for a type with no table yet waits for the catch-up
        body = notification(("Appointment", "10000001"))
        answer = httpx.post(
            receiver.url, content=body, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 202
        with serve(port=port, seed=0, scale="small", rate_limit=100_000) as dep:
            assert dep.client_id == client.client_id
            assert _until(lambda: receiver.stats.catch_up.startswith("ok"), 60), receiver.stats
            assert receiver.wait_idle(60), receiver.status()
            status = receiver.status()
            assert status["last_error"] is None, status  # the error is gone once it succeeded
            assert "catch-up" in status["resolved_error"]["text"]
            assert status["queue"]["waiting_for_sync"] == {}
            assert receiver.stats.applied == 1
            assert "10000001" in load("Appointment", store)["id"].to_list()


def test_status_without_port_finds_the_running_receiver_of_the_store(
    dep: Any, store: Path, client: Client
) -> None:
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        assert receiver.port != 8090
        found = subprocess.run(
            [*PMTK, "--store", str(store), "--status", "--output", "json"],
            capture_output=True, text=True, env=_env(dep), timeout=120, check=False,
        )  # fmt: skip
        assert found.returncode == 0, found.stderr
        report = orjson.loads(found.stdout)["status"]
        assert report["worker"] == "running", report
        assert (store / ".webhooks" / "receiver.json").is_file()
    # a clean stop removes the file; a crash's stale file (a dead pid) is ignored
    assert not (store / ".webhooks" / "receiver.json").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = {"pid": int(dead.stdout), "host": "127.0.0.1", "port": free_port()}
    (store / ".webhooks" / "receiver.json").write_bytes(orjson.dumps(stale))
    gone = subprocess.run(
        [*PMTK, "--store", str(store), "--status"],
        capture_output=True, text=True, env=_env(dep), timeout=120, check=False,
    )  # fmt: skip
    assert gone.returncode == 0, gone.stderr
    assert "worker:       not running" in gone.stdout


def test_a_receiver_restarted_after_a_failure_shows_it_then_clears_it(
    dep: Any, store: Path, client: Client
) -> None:
    """The last error a previous run kept is read at start (it used to raise AttributeError
    before the statistics existed) and cleared once what failed succeeds."""
    (store / ".webhooks").mkdir(parents=True, exist_ok=True)
    kept = {"text": "catch-up sync failed: ConnectionFailed", "at": time.time() - 60,
            "what": "catch-up"}  # fmt: skip
    (store / ".webhooks" / "last-error.json").write_bytes(orjson.dumps(kept))
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        assert receiver.status()["last_error"]["text"] == kept["text"]
        receiver.clear_error("catch-up")
        status = receiver.status()
        assert status["last_error"] is None
        assert status["resolved_error"]["text"] == kept["text"]
    assert not (store / ".webhooks" / "last-error.json").exists()
