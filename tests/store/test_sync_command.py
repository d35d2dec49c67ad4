"""``pmtk sync`` says what happened: exit codes, one-line errors, advice, waits, retries.

Everything runs over real loopback HTTP: the mock deployment (its fault profiles
break one rule each), a closed port for an unreachable host, and a tiny
stdlib server for a token endpoint that answers with hostile markup. The mock
serves the spec's shapes here (``shapes="spec"``): these tests are about the
command, not about reading the live service's Practitioner names.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import stamina
from rich.console import Console
from typer.testing import CliRunner

from toolkit.client import Client
from toolkit.store import SyncFailed, SyncProgress, load, read_manifest, sync
from toolkit.throttle import PACING, RATE_LIMITED, RetryPolicy

SECRET_ENV = "PM_CLIENT_SECRET"


@pytest.fixture(scope="module")
def dep() -> Iterator[Any]:
    """A small spec-shaped mock with test controls (fault profiles), unpaced."""
    from toolkit.mock import serve

    with serve(
        seed=0, scale="small", rate_limit=100_000, test_controls=True, shapes="spec"
    ) as deployment:
        yield deployment


@pytest.fixture
def faulty(dep: Any) -> Iterator[Any]:
    """``dep``, with whatever fault a test switches on switched off again afterwards."""
    try:
        yield dep
    finally:
        dep.set_fault(None)


def _cli(args: list[str], dep: Any | None = None, secret: str | None = None) -> Any:
    from toolkit.cli import app

    env = {"COLUMNS": "200"}
    if dep is not None:
        args = [*args, "--base-url", dep.base_url, "--client-id", dep.client_id]
        env[SECRET_ENV] = secret if secret is not None else dep.client_secret
    return CliRunner().invoke(app, args, env=env)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- usage errors: exit 2


def test_an_unknown_resource_is_a_usage_error_with_a_suggestion_before_any_request(
    dep: Any, tmp_path: Path
) -> None:
    before = dep.stats()["requests"]
    out = tmp_path / "store"
    result = _cli(["sync", "--out", str(out), "-r", "Referral", "-r", "apointment"], dep)
    assert result.exit_code == 2, result.output
    assert "unknown resource 'apointment'" in result.stderr
    assert "did you mean 'Appointment'?" in result.stderr
    assert dep.stats()["requests"] == before  # not even a token was asked for
    assert not out.exists()
    lower = _cli(["sync", "--out", str(out), "-r", "referral"], dep)
    assert lower.exit_code == 2 and "did you mean 'Referral'?" in lower.stderr
    nonsense = _cli(["sync", "--out", str(out), "-r", "Zzzz"], dep)
    assert nonsense.exit_code == 2 and "did you mean" not in nonsense.stderr
    assert "choose from Referral" in nonsense.stderr


def test_a_bad_errors_mode_and_incomplete_settings_exit_2_before_any_request(
    dep: Any, tmp_path: Path
) -> None:
    from toolkit.cli import app

    before = dep.stats()["requests"]
    bad = _cli(["sync", "--out", str(tmp_path / "a"), "--errors", "ignore"], dep)
    assert bad.exit_code == 2 and "'raise' or 'warn'" in bad.stderr
    # a base URL with no credentials: a configuration error, not a failed sync
    result = CliRunner().invoke(
        app,
        ["sync", "--out", str(tmp_path / "b"), "--base-url", dep.base_url],
        env={"COLUMNS": "200", "PM_CLIENT_ID": "", SECRET_ENV: ""},
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("configuration error: ")
    assert "PM_CLIENT_SECRET" in result.stderr and "resume" not in result.stderr
    assert len(_lines(result.stderr)) == 1
    assert dep.stats()["requests"] == before


# --------------------------------------------------------------------------- credentials


def test_a_wrong_secret_says_to_check_the_credentials_and_never_to_resume(
    dep: Any, tmp_path: Path
) -> None:
    wrong = "not-the-secret-[bold]x[/bold]"
    result = _cli(["sync", "--out", str(tmp_path / "s"), "-r", "Referral"], dep, secret=wrong)
    assert result.exit_code == 2, result.output  # refused credentials: 2, as from `pmtk check`
    assert not (tmp_path / "s").exists()  # a failed first sync leaves nothing behind
    err = result.stderr
    assert len(_lines(err)) == 1, err
    assert err.startswith("sync failed (Referral): ")
    assert "answered 401 [security]" in err  # the code in brackets, printed literally
    assert "check PM_CLIENT_ID and PM_CLIENT_SECRET" in err
    assert "resume" not in err and "again" not in err
    assert wrong not in result.output and dep.client_secret not in result.output


class _HostileToken(BaseHTTPRequestHandler):
    """A token endpoint that refuses every key with markup-like diagnostics."""

    DIAGNOSTICS = "key [revoked] by [/] admin [security] [/bold] note"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {
                "resourceType": "OperationOutcome",
                "issue": [
                    {"severity": "error", "code": "security", "diagnostics": self.DIAGNOSTICS}
                ],
            }
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/fhir+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the command's output, not the server's."""


@pytest.fixture
def hostile_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileToken)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/main"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_server_text_with_brackets_is_printed_literally(
    hostile_server: str, tmp_path: Path
) -> None:
    from toolkit.cli import app

    args = ["sync", "--out", str(tmp_path / "s"), "-r", "Organization"]
    args += ["--base-url", hostile_server, "--client-id", "someone"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200", SECRET_ENV: "s3cr3t-[x]"})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert _HostileToken.DIAGNOSTICS in result.stderr  # "[/" did not crash, "[security]" stayed
    assert "check PM_CLIENT_ID and PM_CLIENT_SECRET" in result.stderr
    assert "s3cr3t" not in result.output and "resume" not in result.stderr


# --------------------------------------------------------------------------- unreachable host


def test_a_refused_host_is_one_attempt_and_a_clear_error(
    tmp_path: Path,
) -> None:
    # A refused port answers the same a second later: not retried (issue 23); the
    # retry display is shown for transient failures (503s, below).
    from toolkit.cli import app

    port = _free_port()  # closed: every connection is refused
    args = ["sync", "--out", str(tmp_path / "s"), "-r", "Referral"]
    args += ["--base-url", f"http://127.0.0.1:{port}/main", "--client-id", "someone"]
    with stamina.set_testing(True, attempts=3):  # no backoff sleeps; three attempts
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200", SECRET_ENV: "x"})
    assert result.exit_code == 2, result.output  # never reached, nothing fetched: refused
    lines = _lines(result.stderr)
    assert len(lines) == 1, lines
    assert lines[0].startswith("sync failed (Referral): ")
    assert f"127.0.0.1:{port} refused the connection" in lines[0]
    assert "Connection refused" in lines[0]  # the operating system's words
    assert f"cannot reach http://127.0.0.1:{port}/main" in lines[0]
    assert "PM_BASE_URL" in lines[0]
    assert "resume" not in lines[0]  # nothing was staged: there is nothing to resume
    assert "retry" not in result.output
    assert "stamina" not in result.output


def test_retries_print_readable_lines_and_no_bare_stamina_lines_in_a_real_process(
    faulty: Any, tmp_path: Path
) -> None:
    """A real ``pmtk sync`` process, logging unconfigured, against a mock answering 503s."""
    code = (
        "import stamina\n"
        "for attempt in stamina.retry_context(on=ValueError, attempts=2, wait_initial=0.01,"
        " wait_jitter=0):\n"
        "    with attempt:\n"
        "        if attempt.num == 1:\n"
        "            raise ValueError\n"
    )
    control = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    # the control: stamina's own hook, with logging unconfigured, prints the bare event
    assert "stamina.retry_scheduled" in control.stderr
    faulty.set_fault("flaky-503")
    with Client(
        base_url=faulty.base_url,
        client_id=faulty.client_id,
        client_secret=faulty.client_secret,
        requests_per_minute=None,
        progress=False,
        retry_policy=RetryPolicy(attempts=1),
    ) as warm:
        for _ in range(3):  # the next authenticated request, the sync's first, gets the 503
            warm.read("Organization", "CL-2001")
    out = tmp_path / "store"
    proc = subprocess.run(
        [
            *(sys.executable, "-c", "from toolkit.cli import app; app()", "sync"),
            *("--out", str(out), "-r", "Organization", "--base-url", faulty.base_url),
            *("--client-id", faulty.client_id),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PM_")},
            SECRET_ENV: faulty.client_secret,
            "COLUMNS": "200",
        },
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    host = faulty.base_url.split("/")[2]
    assert f"Organization: {host} answered ServerError 503 (retry 1/5 in " in proc.stderr
    assert "stamina" not in proc.stderr and "Traceback" not in proc.stderr
    assert faulty.client_secret not in proc.stderr + proc.stdout
    assert "Organization" in proc.stdout and "updated" in proc.stdout


# --------------------------------------------------------------------------- one failing resource


def test_one_resource_failing_validation_is_reported_while_the_others_are_stored(
    faulty: Any, tmp_path: Path
) -> None:
    faulty.set_fault("bad-country")  # Organization addresses say "Australia"
    out = tmp_path / "store"
    result = _cli(
        ["sync", "--out", str(out), "-r", "Organization", "-r", "Referral", "-r", "Coverage"],
        faulty,
    )
    assert result.exit_code == 1, result.output
    err = _lines(result.stderr)
    assert len(err) == 1, result.stderr
    assert err[0].startswith("sync failed (Organization): DataValidationError: ")
    assert "country" in err[0] and "'Australia'" in err[0]
    assert "--errors warn" in err[0] and "resume" not in err[0]
    # not a terminal: the table is plain lines, one per resource, each whole
    table = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "│" not in result.stdout and "…" not in result.stdout
    assert "failed" in table["Organization"] and "country" in table["Organization"]
    assert "updated" in table["Referral"] and "updated" in table["Coverage"]
    assert "1 of 3 resources failed" in result.stdout
    manifest = read_manifest(out)["resources"]
    assert manifest["Organization"]["status"] == "failed"
    assert manifest["Organization"]["resumable"] is False  # its bad pages are not kept
    assert not (out / ".staging" / "Organization").exists()
    assert manifest["Referral"]["status"] == "ok" and manifest["Coverage"]["status"] == "ok"
    referrals = load("Referral", out)
    assert isinstance(referrals, pl.DataFrame) and referrals.height > 100
    assert manifest["Referral"]["tables"]["Referral"]["rows"] == referrals.height
    # fixed at the source, the next run stores it
    faulty.set_fault(None)
    again = _cli(["sync", "--out", str(out), "-r", "Organization"], faulty)
    assert again.exit_code == 0, again.output
    assert read_manifest(out)["resources"]["Organization"]["status"] == "ok"


def test_a_broken_page_walk_fails_its_resource_only_and_sync_raises_at_the_end(
    faulty: Any, tmp_path: Path
) -> None:
    faulty.set_fault("paging-loop")  # page 2 links back to page 1: lists of one page are fine
    out = tmp_path / "store"
    with (
        Client(
            base_url=faulty.base_url,
            client_id=faulty.client_id,
            client_secret=faulty.client_secret,
            requests_per_minute=None,
            progress=False,
        ) as client,
        pytest.raises(SyncFailed) as info,
    ):
        sync(client, out, resources=["Referral", "Organization"], progress=False)
    failed = info.value
    assert [r.resource for r in failed.summary.failed] == ["Referral"]
    assert type(failed.errors["Referral"]).__name__ == "PagingLoop"
    assert failed.summary["Organization"].status == "updated"
    assert failed.summary["Referral"].error is not None
    assert "points back to a page already read" in failed.summary["Referral"].error
    assert "\n" not in failed.summary["Referral"].error
    organizations = load("Organization", out)
    assert isinstance(organizations, pl.DataFrame) and organizations.height > 0


# --------------------------------------------------------------------------- waiting states


class _VirtualTime:
    """A clock and a sleep that move the mock's virtual clock instead of waiting.

    The clock moves only when the client sleeps, never with real time: a wait is then
    exactly what the pacing asks (60 s), however long a request takes on a loaded machine.
    """

    def __init__(self, dep: Any) -> None:
        self.dep = dep
        self.start = time.monotonic()
        self.offset = 0.0
        self.on_sleep: list[Any] = []

    def clock(self) -> float:
        return self.start + self.offset

    def sleep(self, seconds: float) -> None:
        for hook in self.on_sleep:
            hook(seconds)
        self.offset += seconds
        self.dep.advance_clock(seconds)


def _rendered(display: SyncProgress) -> str:
    """What the progress display shows right now, as plain text."""
    console = Console(record=True, width=220, file=io.StringIO())
    console.print(display.progress.get_renderable())
    return console.export_text()


@pytest.fixture
def limited() -> Iterator[Any]:
    """A mock allowing 4 requests a minute (on its virtual clock)."""
    from toolkit.mock import serve

    with serve(
        seed=0, scale="small", rate_limit=4, test_controls=True, shapes="spec"
    ) as deployment:
        yield deployment


def test_the_progress_bar_says_it_waits_for_a_429(limited: Any, tmp_path: Path) -> None:
    vt = _VirtualTime(limited)
    display = SyncProgress("bars", console=Console(file=io.StringIO(), width=220))
    shown: list[str] = []
    vt.on_sleep.append(lambda seconds: shown.append(_rendered(display)))
    with Client(
        base_url=limited.base_url,
        client_id=limited.client_id,
        client_secret=limited.client_secret,
        requests_per_minute=None,  # the server's limit only: its 429 drives the wait
        progress=False,
        clock=vt.clock,
        sleep=vt.sleep,
    ) as other:
        for _ in range(4):  # another program with the same key spends the window
            other.read("Organization", "CL-2001")
    waits: list[tuple[float, str]] = []
    with Client(
        base_url=limited.base_url,
        client_id=limited.client_id,
        client_secret=limited.client_secret,
        requests_per_minute=None,
        progress=False,
        clock=vt.clock,
        sleep=vt.sleep,
    ) as client:
        client.throttle.subscribe(lambda seconds, reason: waits.append((seconds, reason)))
        summary = sync(client, tmp_path / "s", resources=["Referral"], progress=display)
    assert summary["Referral"].status == "updated"
    assert client.throttle.rate_limited >= 1
    assert waits and waits[0][1] == RATE_LIMITED and waits[0][0] >= 1
    first = shown[0]
    assert "Referral" in first and f"waiting {waits[0][0]:.0f} s: rate limit (429)" in first
    assert display.status("Referral") == ""  # cleared once pages came in again


def test_the_progress_bar_says_it_paces_itself(dep: Any, tmp_path: Path) -> None:
    vt = _VirtualTime(dep)
    display = SyncProgress("bars", console=Console(file=io.StringIO(), width=220))
    shown: list[str] = []
    vt.on_sleep.append(lambda seconds: shown.append(_rendered(display)))
    with Client(
        base_url=dep.base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=1,  # our own pacing: one request a minute
        progress=False,
        clock=vt.clock,
        sleep=vt.sleep,
    ) as client:
        summary = sync(client, tmp_path / "s", resources=["Referral"], progress=display)
    assert summary["Referral"].pages >= 2
    assert shown and all("waiting" in text and PACING in text for text in shown)
    assert any("waiting 60 s: rate limit pacing" in text for text in shown)


def test_lines_mode_writes_one_line_per_notable_wait_and_retry() -> None:
    from toolkit.retries import RetryNotice

    buffer = io.StringIO()
    display = SyncProgress("lines", console=Console(file=buffer, width=200))
    with display:
        display.start("Coverage")
        display.wait(0.2, PACING)  # too short to be worth a line
        display.wait(12.0, RATE_LIMITED)
        display.retry(RetryNotice("http://h:1/main/Coverage", 2, 1.5, "ConnectError"))
        display.retry(RetryNotice(None, 1, 0.5, "[/] ServerError 503"))
    assert buffer.getvalue().splitlines() == [
        "Coverage: waiting 12 s: rate limit (429)",
        "Coverage: connecting to h:1 (retry 2 in 1.5 s; ConnectError)",
        "Coverage: the deployment answered [/] ServerError 503 (retry 1 in 0.5 s)",
    ]


def test_stamina_hook_is_pmtks_and_keeps_other_hooks() -> None:
    from stamina.instrumentation import get_on_retry_hooks, set_on_retry_hooks

    from toolkit import retries

    def users_hook(details: Any) -> None:
        """A hook of the user's own, which must survive."""

    before = get_on_retry_hooks()
    try:
        set_on_retry_hooks(None)  # stamina's defaults: the bare logging line
        retries.install()
        hooks = get_on_retry_hooks()
        assert retries.on_retry in hooks
        assert not any("_logging" in getattr(h, "__module__", "") for h in hooks)
        set_on_retry_hooks([users_hook])
        retries.install()
        retries.install()
        assert get_on_retry_hooks() == (users_hook, retries.on_retry)
    finally:
        set_on_retry_hooks(before)
