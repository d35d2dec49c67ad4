"""One exit-code table for every command, as the README documents it, on every path.

The paths not repeated here are tested where their command is: ``check`` 0/1/2/130
in tests/contracts/test_command.py, ``sync`` 1 (a resource failed) and 2 (refused
credentials, unreachable) in tests/store/test_sync_command.py and
tests/cli/test_terminal_and_pipe.py, ``sync --verify`` 3 in tests/store/test_safety.py,
``sync`` 4 in tests/store/test_write_errors.py.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from typer.testing import CliRunner

from contracts import command as check
from contracts.command import VERDICTS as CHECK_CODES
from tests.conftest import USER_AGENT
from toolkit._cli import EXIT_CODES, EXIT_FAILED, EXIT_OK, EXIT_REFUSED

ROOT = Path(__file__).resolve().parents[2]
PMTK = Path(sys.executable).parent / "pmtk"


def test_the_readme_documents_the_one_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    codes = [int(c) for c in re.findall(r"^\| `(\d+)` \|", section, re.M)]
    assert codes == sorted(EXIT_CODES), section
    assert set(CHECK_CODES) <= set(EXIT_CODES)  # check's codes mean the same
    # ... because check takes its numbers from the one table rather than its own.
    assert (check.EXIT_CONFORMANT, check.EXIT_FINDINGS, check.EXIT_NOT_CHECKED) == (
        EXIT_OK,
        EXIT_FAILED,
        EXIT_REFUSED,
    )


def _run(args: list[str], **env: str) -> Any:
    from toolkit.cli import app

    clean = {k: "" for k in os.environ if k.startswith("PM_")}
    return CliRunner().invoke(app, args, env={**clean, "COLUMNS": "80", **env})


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        (["sync", "--errors", "ignore"], {}, 2),
        (["sync", "--output", "yaml"], {}, 2),
        (["sync", "-r", "Nonsense"], {}, 2),
        (["sync", "--bogus"], {}, 2),
        (["sync"], {"PM_TIMEZONE": "Mars/Base"}, 2),
        (["sync"], {"PM_CLIENT_ID": "someone"}, 2),  # credentials without an address
        (["check", "--token-probe-seconds", "abc"], {}, 2),
        (["check", "--output", "yaml"], {}, 2),
        (["check"], {"PM_TIMEZONE": "Mars/Base"}, 2),
        (["listen", "--port", "x"], {}, 2),
        (["notebooks", "--html", "out", "--only", "99_none"], {}, 2),
        (["mock", "--scale", "huge"], {}, 2),
        (["nonsense"], {}, 2),
        (["--version"], {}, 0),
        (["sync", "-h"], {}, 0),
    ],
)
def test_every_refusal_is_one_line_and_exit_2(
    args: list[str], env: dict[str, str], code: int, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    result = _run(args, **env)
    assert result.exit_code == code, result.output
    if code == 2:
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "Traceback" not in result.output and "╭" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_rate_limit_wait_shows_on_the_terminal_bar_and_ctrl_c_exits_130_keeping_pages(
    tmp_path: Path,
) -> None:
    from toolkit.mock import serve

    # Five requests a minute: the sixth is a 429, and the client waits for the window.
    with serve(seed=0, scale="small", rate_limit=5) as dep:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
        env.update(
            PM_BASE_URL=dep.base_url, PM_CLIENT_ID=dep.client_id,
            PM_CLIENT_SECRET=dep.client_secret, PM_USER_AGENT=USER_AGENT, TERM="xterm",
        )  # fmt: skip
        args = ["sync", "--out", "store", "-r", "Appointment"]
        child = pexpect.spawn(
            str(PMTK), args, env=env, cwd=str(tmp_path), dimensions=(24, 80),
            encoding="utf-8", timeout=180,
        )  # fmt: skip
        # On an 80-column terminal the bar itself says why it waits, and counts down.
        # (pacing from x-ratelimit-remaining, or a 429: either way the bar says so)
        # The bar shows the wait with the records staged so far. On a loaded machine a
        # slow first answer can be retried inside the first window, so the first wait may
        # come before any page: Ctrl-C is sent at a wait that has staged records.
        child.expect(
            r"Appointment\s+(?:\x1b\[[0-9;]*m)*waiting \d+ s: rate limit[^\r]*?"
            r"(?:\x1b\[[0-9;]*m)*[1-9][\d,]*/[\d,?]+(?:\x1b\[[0-9;]*m)* records"
        )
        child.sendintr()
        child.expect(pexpect.EOF)
        child.close()
    shown = child.before or ""
    assert child.exitstatus == 130, shown
    assert "interrupted (Appointment)" in shown
    assert "staged page(s) kept; run the same command again to resume" in shown
    assert (tmp_path / "store" / ".staging" / "Appointment").is_dir()  # kept for the rerun
