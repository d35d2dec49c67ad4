"""``pmtk check`` as its user meets it: exit codes, what lands on stdout and stderr, reports.

Every path of the documented exit codes is run for real: the embedded mock and small
servers on 127.0.0.1 (a token endpoint answering 404 or 401, a deployment that hangs
so that Ctrl-C can land mid-run, a port nobody listens on). The clean run goes through
the installed console script in a subprocess, as a user types it; the rest run
in-process through typer's CliRunner, which keeps stdout and stderr apart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contracts.report import CATEGORIES
from toolkit.cli import app
from toolkit.mock import serve

runner = CliRunner()
PMTK = Path(sys.executable).parent / "pmtk"
SECRET = "-s3cret [bold]x[/] value"
"""Starts with '-', holds rich markup: neither may be parsed, shown or echoed."""
OPT_INS = ("--allow-writes", "--probe-rate-limit")
"""Every opt-in of ``pmtk check``: the clean run checks all that the suite can."""
NOISE = re.compile(r"Traceback|INTERNALERROR|\[\s*\d+%\]|::|contracts/test_\w+\.py|!!!|Exit: ")
"""What pytest would leak: tracebacks, ``[ 82%]``, node ids, its exit banners."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env["COLUMNS"] = "200"
    return env


def _invoke(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env=_env(), catch_exceptions=False)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _no_noise(text: str) -> None:
    found = NOISE.search(text)
    assert found is None, f"{found.group()!r} leaked into the console:\n{text}"


# ------------------------------------------- a tiny deployment


@dataclass
class Fake:
    """A deployment on 127.0.0.1 that records every request and answers as told."""

    token_status: int = 200
    hang_on_get: bool = False
    requests: list[str] = field(default_factory=list)
    get_arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    base_url: str = ""


@pytest.fixture
def fake() -> Iterator[Fake]:
    state = Fake()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``state.requests`` instead."""

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/fhir+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            state.requests.append(f"POST {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/main/oauth/token":
                self._send(404, {"resourceType": "OperationOutcome", "issue": []})
            elif state.token_status != 200 or body.get("client_secret") != SECRET:
                status = 401 if state.token_status == 200 else state.token_status
                issue = {"severity": "error", "code": "security", "diagnostics": "[bad] login"}
                self._send(status, {"resourceType": "OperationOutcome", "issue": [issue]})
            else:
                token = {"access_token": "tok-123456", "token_type": "Bearer", "expires_in": 900}
                self._send(200, token)

        def do_GET(self) -> None:
            state.requests.append(f"GET {self.path}")
            if state.hang_on_get and not self.path.startswith("/main/_test/"):
                state.get_arrived.set()
                state.release.wait(60)
            self._send(404, {"resourceType": "OperationOutcome", "issue": []})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/main"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _target(fake: Fake) -> list[str]:
    return ["--base-url", fake.base_url, "--client-id", "cid", "--client-secret", SECRET]


# ----------------------------------- exit 2 before any request


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


BAD_OPTIONS: list[tuple[str, Any, str]] = [
    ("baseline-missing", lambda d: ["--baseline", str(d / "nope.json")], "no such file"),
    ("baseline-folder", lambda d: ["--baseline", str(d)], "is a folder"),
    (
        "baseline-not-json",
        lambda d: ["--baseline", str(_write(d / "b.json", b'{"format": 2,'))],
        "not JSON (",
    ),
    (
        "baseline-not-utf8",
        lambda d: ["--baseline", str(_write(d / "b.json", b"\xff\xfe{}"))],
        "not UTF-8",
    ),
    (
        "baseline-array",
        lambda d: ["--baseline", str(_write(d / "b.json", b"[1, 2]"))],
        "a JSON list, not a pmtk report",
    ),
    (
        "baseline-other-json",
        lambda d: ["--baseline", str(_write(d / "b.json", b'{"name": "x"}'))],
        "not a pmtk report.json",
    ),
    (
        "baseline-future-format",
        lambda d: ["--baseline", str(_write(d / "b.json", b'{"format": 99, "checks": []}'))],
        "report format 99",
    ),
    (
        "baseline-bad-checks",
        lambda d: ["--baseline", str(_write(d / "b.json", b'{"format": 1, "checks": [{}]}'))],
        "checks[0] is not an object",
    ),
    (
        "report-dir-is-a-file",
        lambda d: ["--report-dir", str(_write(d / "f", b"x"))],
        "exists and is not a folder",
    ),
    (
        "report-dir-under-a-file",
        lambda d: ["--report-dir", str(_write(d / "f", b"x") / "sub")],
        "cannot be created",
    ),
    ("budget-zero", lambda d: ["--request-budget", "0"], "--request-budget 0: must be"),
    ("examples-zero", lambda d: ["--schema-examples", "0"], "--schema-examples 0: must be"),
    (
        "token-probe-negative",
        lambda d: ["--token-probe-seconds", "-1"],
        "--token-probe-seconds -1: must be",
    ),
    (
        "token-probe-too-long",
        lambda d: ["--token-probe-seconds", "99999"],
        "from 0 to 7200",
    ),
]


@pytest.mark.parametrize(("name", "args", "expected"), BAD_OPTIONS, ids=[b[0] for b in BAD_OPTIONS])
def test_a_bad_local_option_exits_2_before_any_request(
    name: str, args: Any, expected: str, fake: Fake, tmp_path: Path
) -> None:
    extra = args(tmp_path)
    if "--report-dir" not in extra:
        extra += ["--report-dir", str(tmp_path / "reports")]
    result = _invoke(*_target(fake), *extra)
    assert result.exit_code == 2, result.output
    assert fake.requests == [], "an option error must be found before any request"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pmtk check: "), result.stderr
    assert expected in lines[0]
    assert result.stdout == ""
    _no_noise(result.output)


def test_a_bad_option_is_found_before_the_embedded_mock_starts(tmp_path: Path) -> None:
    result = _invoke("--baseline", str(tmp_path / "missing.json"))
    assert result.exit_code == 2
    assert "embedded mock" not in result.output
    assert "no such file" in result.stderr


def test_credentials_without_a_base_url_exit_2(tmp_path: Path) -> None:
    result = _invoke("--client-id", "x", "--client-secret", SECRET)
    assert result.exit_code == 2
    assert "no deployment address" in " ".join(result.stderr.split())
    assert SECRET not in result.output


# ------------------------------ exit 2: wrong address, refused


def test_a_base_url_without_main_stops_at_the_token_endpoint_with_one_line(
    tmp_path: Path,
) -> None:
    with serve(test_controls=True) as dep:
        # Ends with /main, as the settings demand, but nothing answers there.
        origin = dep.base_url.removesuffix("/main") + "/api/main"
        result = _invoke(
            "--base-url",
            origin,
            "--client-id",
            dep.client_id,
            "--client-secret",
            dep.client_secret,
            "--report-dir",
            str(tmp_path),
        )
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("pmtk check: ")]
    assert len(errors) == 1, result.stderr
    assert f"no token endpoint at {origin}/oauth/token (status 404)" in errors[0]
    assert "ending in /main" in " ".join(result.stderr.split())
    assert "FAILED" not in result.output
    assert result.stdout.strip() == "not checked; total time " + result.stdout.split()[-2] + " s"
    assert not (tmp_path / "report.json").exists()
    _no_noise(result.output)


def test_refused_credentials_are_said_once_and_exit_2(fake: Fake, tmp_path: Path) -> None:
    fake.token_status = 401
    result = _invoke(*_target(fake), "--report-dir", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert result.output.count("refused") == 1, result.output
    assert "refused by the token endpoint" in result.stderr
    assert SECRET not in result.output
    # The preflight: one token request, nothing more (no probe of the mock's /_test/).
    assert fake.requests == ["POST /main/oauth/token"]
    assert not (tmp_path / "report.json").exists()
    _no_noise(result.output)


def test_an_unreachable_deployment_exits_2_with_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/main"
    result = _invoke(
        "--base-url",
        url,
        "--client-id",
        "x",
        "--client-secret",
        SECRET,
        "--report-dir",
        str(tmp_path),
    )
    assert result.exit_code == 2
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("pmtk check: ")]
    assert len(errors) == 1 and "deployment unreachable" in errors[0], result.stderr
    assert SECRET not in result.output
    _no_noise(result.output)


# ------------------------------- exit 1: findings with reasons


def test_findings_exit_1_and_each_failed_check_shows_its_reason(tmp_path: Path) -> None:
    # A small budget keeps this run short: the data checks run, the rest are skipped.
    with serve(test_controls=True, fault="bad-phone") as dep:
        result = _invoke(
            "--base-url",
            dep.base_url,
            "--client-id",
            dep.client_id,
            "--client-secret",
            dep.client_secret,
            "--report-dir",
            str(tmp_path),
            "--request-budget",
            "90",
            "--schema-examples",
            "1",
        )
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert [c["id"] for c in failed] == ["format.values[Organization]"]
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("FAILED ")]
    assert len(lines) == 1, result.stdout
    # The id with its brackets (rich markup would eat them) and the finding's first line.
    first = failed[0]["message"].splitlines()[0]
    assert lines[0].startswith("FAILED format.values[Organization]: ")
    assert first[:60] in lines[0]
    assert result.stdout.rstrip().splitlines()[-1].startswith("findings; total time")
    assert "  format " in result.stderr and "1 failed" in result.stderr
    assert report["target"] == {"base_url": dep.base_url, "embedded_mock": False}
    _no_noise(result.output)


# ----------------------------- exit 0: the real console script


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``pmtk check`` against the embedded mock through the console script.

    The report folder already holds a format-1 report that lists a failure, and it is
    also the ``--baseline``: the baseline is read before the run, so the new report
    written over it still compares against the old content.

    Every opt-in is on (``--allow-writes --probe-rate-limit``), so that this one run
    of the whole suite is also the clean-mock conformance run: the tests below share
    it instead of each starting a complete check (the 90-second target it used to
    assert is ``tests/benchmarks/bench_check.py``).
    """
    reports = tmp_path_factory.mktemp("reports")
    old = {
        "format": 1,
        "target": "http://old/main",
        "checks": [
            {"id": "format.values[Organization]", "status": "failed"},
            {"id": "auth.token-response", "status": "passed"},
        ],
    }
    (reports / "report.json").write_text(json.dumps(old))
    proc = subprocess.run(
        [
            str(PMTK),
            "check",
            "--report-dir",
            str(reports),
            "--schema-examples",
            "1",
            "--baseline",
            str(reports / "report.json"),
            *OPT_INS,
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    report = json.loads((reports / "report.json").read_text())
    return {"proc": proc, "report": report, "dir": reports}


def test_clean_mock_with_every_opt_in_is_conformant(clean_run: dict[str, Any]) -> None:
    proc, report = clean_run["proc"], clean_run["report"]
    failed = [
        c["id"] + ": " + c["message"][:200] for c in report["checks"] if c["status"] == "failed"
    ]
    assert proc.returncode == 0, failed or proc.stderr + proc.stdout
    assert report["summary"]["failed"] == 0
    assert report["summary"]["by_category"]["write"]["passed"] > 0  # --allow-writes applied
    assert report["observations"]["rate_limit_probe"]["first_429_at"] == 501
    assert report["observations"]["token_lifetime"]["honours"].startswith("documented")
    assert report["observations"]["capability_statement"] == {
        "served": True,
        "differences": 0,
        "first_differences": [],
    }
    assert "total time" in proc.stdout


def test_clean_mock_exits_0_through_the_console_script(clean_run: dict[str, Any]) -> None:
    proc = clean_run["proc"]
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("conformant; total time")
    assert "FAILED" not in proc.stdout


def test_the_embedded_mock_is_named_on_stderr_and_in_the_report(clean_run: dict[str, Any]) -> None:
    proc, report = clean_run["proc"], clean_run["report"]
    first = proc.stderr.splitlines()[0]
    assert first.startswith("checking the embedded mock at http://127.0.0.1:"), proc.stderr
    assert report["format"] == 2
    target = report["target"]
    assert target["embedded_mock"] is True
    assert target["base_url"].startswith("http://127.0.0.1:") and target["base_url"].endswith(
        "/main"
    )
    assert target["base_url"] in first
    assert "embedded mock" in proc.stdout  # the summary table's title


def test_progress_is_one_line_per_category_without_pytest_noise(clean_run: dict[str, Any]) -> None:
    proc, report = clean_run["proc"], clean_run["report"]
    _no_noise(proc.stderr + proc.stdout)
    lines = proc.stderr.splitlines()[1:]
    shown = [ln.split()[0] for ln in lines]
    assert sorted(shown) == sorted(report["summary"]["by_category"]), proc.stderr
    assert set(shown) <= set(CATEGORIES)
    by_category = report["summary"]["by_category"]
    for line in lines:
        n = by_category[line.split()[0]]
        if n["passed"]:
            assert f"{n['passed']} passed" in line
        if n["skipped"]:
            assert f"{n['skipped']} skipped" in line


def test_the_baseline_is_read_before_the_report_is_replaced(clean_run: dict[str, Any]) -> None:
    report, folder = clean_run["report"], clean_run["dir"]
    assert report["baseline"]["fixed"] == ["format.values[Organization]"]
    assert report["baseline"]["new"] == []
    leftovers = sorted(p.name for p in folder.iterdir())
    assert leftovers == ["junit.xml", "report.html", "report.json"]


# -------------------------------------------- exit 130: Ctrl-C


def test_ctrl_c_exits_130_and_leaves_the_previous_reports_untouched(
    fake: Fake, tmp_path: Path
) -> None:
    fake.hang_on_get = True
    reports = tmp_path / "reports"
    reports.mkdir()
    before = {
        name: f"previous {name}".encode() for name in ("report.json", "junit.xml", "report.html")
    }
    for name, content in before.items():
        (reports / name).write_bytes(content)
    proc = subprocess.Popen(
        [str(PMTK), "check", *_target(fake), "--report-dir", str(reports)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        # The auth checks have run (records exist) when the first resource GET hangs.
        assert fake.get_arrived.wait(120), "the run never reached a resource request"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted (Ctrl-C); no report written" in stderr
    assert "previous reports" in stderr and "untouched" in stderr
    for name, content in before.items():
        assert (reports / name).read_bytes() == content, f"{name} was replaced"
    assert sorted(p.name for p in reports.iterdir()) == sorted(before)
    assert SECRET not in stdout + stderr
    _no_noise(stdout + stderr)


def test_on_a_pipe_every_observation_is_one_whole_line(clean_run: dict[str, Any]) -> None:
    # The README: on a pipe, "each observation of pmtk check one whole line", so grep
    # finds every one; a terminal shows the first ones and says how many more.
    proc, report = clean_run["proc"], clean_run["report"]
    observed = [o for c in report["checks"] for o in c.get("observed", [])]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("observed: ")]
    assert len(lines) == len(observed)
    assert "more in report.json" not in proc.stdout


def test_a_terminal_summary_shows_the_first_observations_and_counts_the_rest() -> None:
    from contracts.report import MAX_OBSERVED_SHOWN, render_summary

    observation = {
        "field": "Coverage.payor", "rule": "reference-form", "source": "facts", "example": "x",
    }  # fmt: skip
    report = {
        "target": {"base_url": "http://127.0.0.1:1/main", "embedded_mock": False},
        "elapsed_seconds": 1.0,
        "summary": {
            "passed": 1, "failed": 0, "skipped": 0, "observed": 31, "requests": 3,
            "by_category": {"reference": {"passed": 1, "failed": 0, "skipped": 0}},
        },
        "checks": [{"id": "reference.forms", "status": "passed",
                    "observed": [{**observation, "count": n} for n in range(31)]}],
    }  # fmt: skip
    shown = render_summary(report).renderables
    every = render_summary(report, observed_limit=None).renderables
    texts = [str(t) for t in shown if str(t).startswith("observed:")]
    assert len(texts) == MAX_OBSERVED_SHOWN + 1
    assert (
        texts[-1]
        == f"observed: ... and {31 - MAX_OBSERVED_SHOWN} more in report.json / report.html"
    )
    assert len([t for t in every if str(t).startswith("observed:")]) == 31
