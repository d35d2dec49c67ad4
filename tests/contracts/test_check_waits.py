"""``pmtk check`` says when it waits for the rate limit, and for how long in all.

Against a mock limited to 12 requests a minute the suite's pacing starts after two
requests (it keeps 10 in hand): the live line on a terminal must say
``waiting 5 s: rate limit (10 left)`` beside the check that
waits, where it used to show ``checking ... 0/43`` for minutes without a word. Off a
terminal each wait is one whole line, and the summary gives the total.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pexpect
from rich.console import Console

from contracts.command import ConsoleProgress
from contracts.report import render_summary
from contracts.session import Session
from toolkit._cli import make_console
from toolkit.throttle import RATE_LIMITED

PMTK = Path(sys.executable).parent / "pmtk"


def test_the_live_line_says_check_waits_for_the_rate_limit(tmp_path: Path) -> None:
    from toolkit.mock import serve

    with serve(seed=0, scale="small", rate_limit=12) as dep:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
        env["TERM"] = "xterm"
        args = [
            "check", "--base-url", dep.base_url, "--client-id", dep.client_id,
            "--client-secret", dep.client_secret, "--report-dir", str(tmp_path / "reports"),
            "--category", "paging",
        ]  # fmt: skip
        child = pexpect.spawn(
            str(PMTK), args, env=env, cwd=str(tmp_path), dimensions=(24, 120),
            encoding="utf-8", timeout=90,
        )  # fmt: skip
        child.expect(r"checking \S+: waiting \d+ s: rate limit \(\d+ left\)")
        child.sendintr()
        child.expect(pexpect.EOF, timeout=30)
        child.close()
    assert child.exitstatus == 130


def test_a_wait_is_announced_counted_and_one_whole_line_off_a_terminal() -> None:
    slept: list[float] = []
    session = Session("http://127.0.0.1:9/main", "id", "secret", sleep=slept.append)
    try:
        buffer = io.StringIO()
        shown = ConsoleProgress(make_console(file=buffer))  # as pmtk check makes it
        shown.check_id = "prefix.ids[Referral]"
        stop = session.subscribe(shown.wait)
        session.wait(45.0)
        session.wait(0.4)  # too short to be worth a line
        stop()
        session.wait(2.0)  # no longer listened to
    finally:
        session.close()
    assert slept == [45.0, 0.4, 2.0]
    assert session.waited == 47.4
    assert shown.waited == 45.4
    # One whole line, however long.
    assert buffer.getvalue() == (f"  prefix.ids[Referral]: waiting 45 s: {RATE_LIMITED}\n")


def _report(waited: float) -> dict[str, object]:
    return {
        "target": {"base_url": "http://127.0.0.1:1/main", "embedded_mock": False},
        "elapsed_seconds": 95.0,
        "summary": {
            "passed": 3, "failed": 0, "skipped": 0, "observed": 0, "requests": 150,
            "by_category": {"paging": {"passed": 3, "failed": 0, "skipped": 0, "observed": 0}},
        },
        "checks": [],
        "observations": {"requests": {"seconds_waited_for_rate_limit": waited}},
    }  # fmt: skip


def _text(report: dict[str, object]) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=200, force_terminal=False).print(render_summary(report))
    return buffer.getvalue()


def test_the_summary_says_how_long_the_run_waited_for_the_rate_limit() -> None:
    assert "150 requests in 95.0 s, 45.2 s of it waiting for the rate limit" in _text(_report(45.2))
    assert "waiting" not in _text(_report(0.0))
