"""``pmtk`` as a person sees it: the real command on a pseudo-terminal and on a pipe.

Each test runs the installed ``pmtk`` executable (what ``uv run pmtk`` runs) against a
mock deployment over loopback HTTP, once in an 80-column pseudo-terminal (pexpect)
and once with its output piped, and reads the text:

* on the terminal, rich's live view: bars that end (``166/166``, never ``…/?``) and a
  summary that is never squeezed (``2,…``);
* on a pipe, and with ``NO_COLOR`` or ``TERM=dumb`` on a terminal, plain lines: no
  colour codes, no box drawing, no ellipsis, one row per line, however long;
* ``--output json`` is one JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests.conftest import USER_AGENT, api_client

PMTK = Path(sys.executable).parent / "pmtk"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BOX = set("│┃┏┓┗┛━─╭╮╰╯┡┩")
RESOURCES = ["-r", "Referral", "-r", "Invoice"]


@pytest.fixture(scope="module")
def dep() -> Iterator[Any]:
    from toolkit.mock import serve

    with serve(seed=0, scale="small", rate_limit=100_000) as deployment:
        yield deployment


def _totals(dep: Any) -> dict[str, int]:
    """Referrals and Invoices the mock serves, as its own Bundle ``total`` says."""
    with api_client(dep) as api:
        return {
            name: int(api.get(name, params={"_count": 1}).json()["total"])
            for name in ("Referral", "Invoice")
        }


def _env(dep: Any, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PM_", "NO_COLOR"))}
    env.update(
        PM_BASE_URL=dep.base_url,
        PM_CLIENT_ID=dep.client_id,
        PM_CLIENT_SECRET=dep.client_secret,
        PM_USER_AGENT=USER_AGENT,
        TERM="xterm-256color",
        COLUMNS="80",
        LINES="24",
    )
    env.update(extra)
    return env


def _pty(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run ``pmtk args`` in an 80x24 pseudo-terminal; its exit code and everything shown."""
    child = pexpect.spawn(
        str(PMTK), args, env=env, cwd=str(cwd), dimensions=(24, 80), encoding="utf-8",
        timeout=180,
    )  # fmt: skip
    child.expect(pexpect.EOF)
    text = child.before or ""
    child.close()
    assert child.exitstatus is not None, f"killed by signal {child.signalstatus}"
    return child.exitstatus, text


def _pipe(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PMTK), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=180
    )


def _last_frame_lines(text: str, word: str) -> list[str]:
    """The lines naming ``word`` as last drawn (a live view redraws them many times)."""
    plain = ANSI.sub("", text).replace("\r\n", "\n")
    return [chunk for line in plain.split("\n") for chunk in line.split("\r") if word in chunk]


def test_sync_on_a_terminal_draws_bars_that_end_and_a_summary_that_is_never_squeezed(
    dep: Any, tmp_path: Path
) -> None:
    code, shown = _pty(["sync", "--out", "store", *RESOURCES], _env(dep), tmp_path)
    assert code == 0, shown
    assert ANSI.search(shown), "a terminal gets rich's live view"
    totals = _totals(dep)
    for name, records in totals.items():
        bars = [line for line in _last_frame_lines(shown, name) if "records" in line]
        assert bars, shown
        assert re.search(rf"{records}/{records}\s+records", bars[-1]), bars[-1]  # it ended
    assert "/? records" not in ANSI.sub("", shown).split("pmtk sync ->")[-1]
    # 80 columns cannot hold the boxed table: it is printed as whole lines, never "2,…"
    assert "…" not in shown
    summary = [line for line in _last_frame_lines(shown, "Invoice") if "updated" in line]
    assert summary and f"{totals['Invoice']:,}" in summary[-1]


@pytest.mark.parametrize("how", ["pipe", "NO_COLOR", "TERM=dumb"])
def test_sync_off_a_terminal_prints_plain_whole_lines(dep: Any, tmp_path: Path, how: str) -> None:
    args = ["sync", "--out", "store", *RESOURCES]
    if how == "pipe":
        run = _pipe(args, _env(dep), tmp_path)
        code, out, err = run.returncode, run.stdout, run.stderr
    else:
        name, value = ("NO_COLOR", "1") if how == "NO_COLOR" else ("TERM", "dumb")
        code, shown = _pty(args, _env(dep, **{name: value}), tmp_path)
        out, err = shown.replace("\r\n", "\n"), ""
    assert code == 0, out + err
    text = out + err
    assert not ANSI.search(text), "no colour or cursor codes"
    assert not set(text) & BOX and "…" not in text
    lines = [line for line in out.splitlines() if line.strip()]
    rows = {line.split()[0]: line.split() for line in lines}
    assert rows["resource"][:3] == ["resource", "mode", "status"]
    totals = _totals(dep)
    assert rows["Referral"][1:4] == ["full", "updated", f"{totals['Referral']:,}"]
    invoices = f"{totals['Invoice']:,}"
    assert rows["Invoice"][1:5] == ["full", "updated", invoices, invoices]
    assert any(line.startswith("pmtk sync -> ") for line in lines)


def test_sync_json_is_one_document_on_stdout(dep: Any, tmp_path: Path) -> None:
    run = _pipe(["sync", "--out", "store", *RESOURCES, "--output", "json"], _env(dep), tmp_path)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    by_name = {r["resource"]: r for r in doc["resources"]}
    assert by_name["Invoice"]["rows"]["Invoice"] == _totals(dep)["Invoice"]
    assert by_name["Referral"]["status"] == "updated" and doc["failed"] == []
    assert run.stderr == ""  # no bars, no notices: nothing but the document


def test_a_missing_user_agent_is_one_warning_line_without_a_source_path(
    dep: Any, tmp_path: Path
) -> None:
    env = _env(dep)
    del env["PM_USER_AGENT"]
    run = _pipe(["sync", "--out", "store", "-r", "Practitioner", "-q"], env, tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("pmtk: warning: no user agent configured")
    assert ".py" not in lines[0] and "PmtkConfigWarning" not in lines[0]


def test_a_refused_first_sync_exits_2_on_both_and_leaves_no_folder(
    dep: Any, tmp_path: Path
) -> None:
    env = _env(dep, PM_CLIENT_SECRET="wrong-secret")
    run = _pipe(["sync", "--out", "piped"], env, tmp_path)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.splitlines()) == 1 and "check PM_CLIENT_ID" in run.stderr
    code, shown = _pty(["sync", "--out", "tty"], env, tmp_path)
    assert code == 2, shown
    assert "check PM_CLIENT_ID" in shown
    assert not (tmp_path / "piped").exists() and not (tmp_path / "tty").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _pipe(["sync", "--out", "empty"], env, tmp_path).returncode == 2
    assert empty.is_dir() and list(empty.iterdir()) == []  # the user's folder stays, empty


def test_usage_errors_and_help_read_the_same_on_a_terminal_and_a_pipe(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env.update(TERM="xterm-256color", COLUMNS="80")
    args = ["check", "--token-probe-seconds", "abc"]
    want = "pmtk check: --token-probe-seconds: 'abc' is not a whole number; see 'pmtk check -h'"
    run = _pipe(args, env, tmp_path)
    assert (run.returncode, run.stderr.strip(), run.stdout) == (2, want, "")
    code, shown = _pty(args, env, tmp_path)
    assert (code, ANSI.sub("", shown).strip()) == (2, want)
    code, shown = _pty(["sync", "-h"], env, tmp_path)
    shown = ANSI.sub("", shown)
    assert code == 0 and "Usage: pmtk sync" in shown and "<bool>" not in shown


def test_check_json_on_a_pipe_is_the_report_document(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    run = _pipe(["check", "--output", "json", "--report-dir", "rep"], env, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc == json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    assert doc["target"]["embedded_mock"] is True
    # stderr: the progress as plain whole lines, no colour codes, no live view
    assert not ANSI.search(run.stderr) and "…" not in run.stderr
    assert any(line.startswith("  auth ") for line in run.stderr.splitlines())
