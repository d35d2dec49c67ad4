"""``pmtk listen`` is safe by default, and ``--status`` says what is queued, dead and wrong."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.listen.conftest import notification
from toolkit.client import Client
from toolkit.webhooks import listen

PMTK = [sys.executable, "-c", "from toolkit.cli import app; app()"]


def _env(dep: Any, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_WEBHOOK_AUTH")}
    return {
        **env,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        "PYTHONIOENCODING": "utf-8",
        **extra,
    }


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PMTK, "listen", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "needs an authentication header"),
        (["--no-auth", "--host", "0.0.0.0"], "only on a loopback address"),
        (["--no-auth", "--host", "192.0.2.10"], "only on a loopback address"),
    ],
    ids=["no-auth-header", "no-auth-on-any", "no-auth-on-lan"],
)
def test_listen_refuses_to_start_without_authentication_unless_told_on_loopback(
    dep: Any, tmp_path: Path, args: list[str], expected: str
) -> None:
    store = tmp_path / "store"
    done = _run(
        ["--store", str(store), "--port", "0", "--base-url", dep.base_url, *args], _env(dep)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert expected in done.stderr
    assert "PM_WEBHOOK_AUTH" in done.stderr or "loopback" in done.stderr
    assert not store.exists()  # refused before anything was written or bound


def test_no_auth_on_loopback_starts_and_says_so_on_stderr(dep: Any, tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["--store", str(store), "--port", "0", "--no-catch-up", "--base-url", dep.base_url]
    with subprocess.Popen(
        [*PMTK, "listen", *args, "--no-auth"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env=_env(dep),
    ) as proc:
        try:
            assert proc.stdout is not None
            banner = "".join(proc.stdout.readline() for _ in range(3))  # URL, store, header
            assert banner.startswith("webhook URL: http://127.0.0.1:"), banner
        finally:
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=30)
    assert "--no-auth" in err and "any program" in err
    assert "none (--no-auth" in banner


def test_the_auth_value_comes_from_pm_webhook_auth(dep: Any, tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["--store", str(store), "--port", "0", "--no-catch-up", "--base-url", dep.base_url]
    secret = "Bearer env-s3cret-never-shown"
    with subprocess.Popen(
        [*PMTK, "listen", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env=_env(dep, PM_WEBHOOK_AUTH=f"Authorization: {secret}"),
    ) as proc:
        try:
            assert proc.stdout is not None
            banner = "".join(proc.stdout.readline() for _ in range(3))
            url = banner.splitlines()[0].split(": ", 1)[1].strip()
            body = notification(("Patient", "1"))
            plain = {"Content-Type": "application/json"}
            assert httpx.post(url, content=body, headers=plain).status_code == 401
            signed = {**plain, "Authorization": secret}
            assert httpx.post(url, content=body, headers=signed).status_code == 202
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert secret not in banner + out + err and "Authorization (value hidden)" in banner


def test_status_reads_the_running_receiver_or_else_the_folder(
    dep: Any, store: Path, client: Client
) -> None:
    env = _env(dep)
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        live = _run(["--store", str(store), "--status", "--port", str(receiver.port)], env)
        assert live.returncode == 0, live.stderr
        assert "worker:       running" in live.stdout
        assert "accepting:    yes (202)" in live.stdout
        assert "queued:       0 change(s)" in live.stdout
        assert "dead letters: 0" in live.stdout
    # nobody listens now: the folder alone (a change left queued, one dead letter)
    from toolkit.webhooks import Change, Event, EventQueue

    queue = EventQueue(store)
    queue.put([Event("Appointment", "10000001")], "2026-11-23T10:00:00Z")
    queue.bury(Change(Event("Appointment", "10000002"), 0, attempts=12), "gave up: 500")
    offline = _run(["--store", str(store), "--status", "--port", "1"], env)
    assert offline.returncode == 0, offline.stderr
    assert "worker:       not running" in offline.stdout
    assert "queued:       1 change(s)" in offline.stdout
    assert "dead letters: 1" in offline.stdout and "--retry-dead" in offline.stdout
    assert "s unapplied" in offline.stdout


def test_status_of_a_folder_that_is_not_a_store_is_refused(dep: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    done = _run(["--store", str(tmp_path), "--status"], _env(dep))
    assert done.returncode == 2
    assert not (tmp_path / ".webhooks").exists()


@pytest.mark.parametrize(
    ("given", "paced"),
    [([], 500), (["--requests-per-minute", "120"], 120), (["--requests-per-minute", "0"], None)],
)
def test_requests_per_minute_reaches_the_receivers_client(
    dep: Any, store: Path, monkeypatch: pytest.MonkeyPatch, given: list[str], paced: int | None
) -> None:
    """``--requests-per-minute`` paces the record reads (0: none, for a private mock
    or a higher limit); without it the API's 500 a minute. The real receiver serves
    and its worker reads a record over loopback with the client the option made."""
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.webhooks import Listener, command

    seen: dict[str, Any] = {}

    def served(_doing: str) -> None:  # instead of waiting for Ctrl-C: one delivery
        listener = seen["listener"]
        seen["paced"] = listener.client.throttle.requests_per_minute
        answer = httpx.post(
            listener.url,
            content=notification(("Appointment", _first_id(store))),
            headers={"Content-Type": "application/json"},
        )
        seen["answer"] = answer.status_code
        seen["idle"] = listener.wait_idle(60)
        seen["requests"] = listener.stats.requests

    started = Listener.start_worker

    def start_worker(listener: Listener) -> None:
        seen["listener"] = listener
        started(listener)

    monkeypatch.setattr(command, "until_interrupted", served)
    monkeypatch.setattr(Listener, "start_worker", start_worker)
    monkeypatch.delenv("PM_WEBHOOK_AUTH", raising=False)
    args = ["listen", "--store", str(store), "--port", "0", "--no-auth", "--no-catch-up"]
    args += ["--base-url", dep.base_url, "--client-id", dep.client_id]
    args += ["--client-secret", dep.client_secret, *given]
    root, httpx_logger = logging.getLogger(), logging.getLogger("httpx")
    before = (list(root.handlers), root.level, httpx_logger.level)
    result = CliRunner().invoke(app, args, env={"PM_USER_AGENT": "pmtk tests (t@example.org)"})
    assert result.exit_code == 0, result.output
    # Run in-process, the command leaves logging as it found it: no handler left writing
    # to the runner's closed stream, httpx's requests still logged for the next caller.
    assert (list(root.handlers), root.level, httpx_logger.level) == before
    assert seen["paced"] == paced
    assert (seen["answer"], seen["idle"], seen["requests"]) == (202, True, 1)


def test_requests_per_minute_below_zero_is_refused(dep: Any, tmp_path: Path) -> None:
    done = _run(
        [
            "--store",
            str(tmp_path / "s"),
            "--no-auth",
            "--base-url",
            dep.base_url,
            "--requests-per-minute",
            "-1",
        ],
        _env(dep),
    )
    assert done.returncode == 2
    assert "requests-per-minute" in done.stderr


def _first_id(store: Path) -> str:
    from toolkit.store import load

    return str(load("Appointment", store)["id"][0])
