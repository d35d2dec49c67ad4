"""Ctrl-C answers at once while a command waits for the rate limit.

A mock limited to five requests a minute makes ``pmtk sync`` wait most of a
minute for its window. The wait happens in the page-prefetch thread while the
main thread waits for the next page; a SIGINT the kernel hands to the sleeping
thread must still reach the main thread, which exits 130 within seconds, not
when the wait ends (58 s and 24 s were observed before the fix).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect

from tests.conftest import USER_AGENT

PMTK = Path(sys.executable).parent / "pmtk"
ANSWER_WITHIN = 10
"""Seconds the command has to exit after SIGINT; the wait it interrupts is 10 s or more."""


def test_ctrl_c_during_a_long_rate_limit_wait_of_sync_exits_130_at_once(tmp_path: Path) -> None:
    from toolkit.mock import serve

    with serve(seed=0, scale="small", rate_limit=5) as dep:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
        env.update(
            PM_BASE_URL=dep.base_url, PM_CLIENT_ID=dep.client_id,
            PM_CLIENT_SECRET=dep.client_secret, PM_USER_AGENT=USER_AGENT, TERM="xterm",
        )  # fmt: skip
        child = pexpect.spawn(
            str(PMTK), ["sync", "--out", "store", "-r", "Appointment"], env=env,
            cwd=str(tmp_path), dimensions=(24, 120), encoding="utf-8", timeout=120,
        )  # fmt: skip
        # A wait with at least 10 s left: the window of five requests is spent.
        child.expect(r"waiting [1-9]\d+ s: rate limit")
        child.sendintr()
        # Not waiting the wait out: EOF well before the 10 s or more still to wait.
        child.expect(pexpect.EOF, timeout=ANSWER_WITHIN)
        child.close()
    shown = child.before or ""
    assert child.exitstatus == 130, shown
    assert "interrupted (Appointment)" in shown
