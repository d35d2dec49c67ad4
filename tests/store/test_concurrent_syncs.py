"""Two `pmtk sync` processes at once on one folder (issue 33: two syncs delete the store).

Real processes of the command line, against one mock over loopback. The loser of
the lock must stop with a clear error and remove nothing it does not own; the
winner commits, and the store it leaves is complete and verifies.

The interleaving that destroyed the store is made certain, not left to luck: the
loser's standard error is a pipe the test has filled, so the loser, having found
the folder missing (a first sync), blocks on its first line (the missing user
agent warning) until the winner holds the lock and has staged pages; then the
pipe is drained and the loser runs on into the held lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import toolkit_client
from tests.store.conftest import mock_total
from toolkit.store import load, sync, verify

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fills a POSIX pipe")

CLI = [sys.executable, "-c", "from toolkit.cli import app; app()"]


def _env(dep: Any, *, agent: bool) -> dict[str, str]:
    env = {
        **os.environ,
        "PM_BASE_URL": dep.base_url,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        "PYTHONIOENCODING": "utf-8",
    }
    env.pop("PM_USER_AGENT", None)
    if agent:
        env["PM_USER_AGENT"] = "Store tests (tests@example.org)"
    return env


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full: the next write to it blocks until it is read."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    for size in (4096, 1):  # whole pages, then the bytes left over
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(write, b"x" * size)
    os.set_blocking(write, True)
    return read, write


@contextlib.contextmanager
def _stalled_sync(dep: Any, out: Path) -> Iterator[tuple[subprocess.Popen[bytes], Any]]:
    """A ``pmtk sync --out out`` stalled on its first line of stderr; ``release()`` frees it."""
    read, write = _full_pipe()
    chunks: list[bytes] = []
    proc = subprocess.Popen(
        [*CLI, "sync", "--out", str(out), "-r", "Appointment", "-q"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=write,
        env=_env(dep, agent=False),
    )
    os.close(write)

    def drain() -> None:
        with os.fdopen(read, "rb") as handle:
            while chunk := handle.read1(65536):
                chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)

    def release() -> bytes:
        reader.start()
        proc.wait(timeout=120)
        reader.join(30)
        return b"".join(chunks).lstrip(b"x")

    try:
        yield proc, release
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _staged(out: Path) -> bool:
    return any((out / ".staging").glob("Appointment/**/part-*.parquet"))


def _wait_for(predicate: Any, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the winner ended before the loser was released"
        assert time.monotonic() < deadline, "the winner never staged a page"
        time.sleep(0.01)


def _winner(dep: Any, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "sync", "--out", str(out), "-r", "Appointment", "-q"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(dep, agent=True),
        text=True,
        encoding="utf-8",
    )


def _complete(dep: Any, out: Path) -> None:
    """The store holds every Appointment of the mock and every file matches its sha256."""
    report = verify(out)
    assert report.ok, report.problems
    assert report.files
    with toolkit_client(dep) as client:
        total = mock_total(client, "Appointment")
    stored = load("Appointment", out)
    assert isinstance(stored, pl.DataFrame)
    assert stored.height == total
    assert stored["id"].n_unique() == total
    assert not any((out / ".staging").glob("*/**/part-*.parquet"))


def _race(dep: Any, out: Path) -> tuple[subprocess.Popen[str], str, str, int | None, str]:
    """The loser starts first and finds ``out`` as it is; the winner locks it meanwhile."""
    with _stalled_sync(dep, out) as (loser, release):
        time.sleep(0.2)  # the loser has looked at the folder, then stalls on its warning
        winner = _winner(dep, out)
        try:
            _wait_for(lambda: _staged(out), winner)
            lost = release().decode("utf-8", "replace")
            won_out, won_err = winner.communicate(timeout=180)
        finally:
            if winner.poll() is None:
                winner.kill()
                winner.wait(30)
        return winner, won_out, won_err, loser.returncode, lost


def test_the_loser_of_a_first_sync_removes_nothing_and_the_winner_commits(
    dep: Any, tmp_path: Path
) -> None:
    out = tmp_path / "new-store"  # missing: a first sync for both
    winner, _, won_err, lost_code, lost = _race(dep, out)
    assert "another pmtk sync is writing" in lost, lost
    assert lost_code == 1
    assert winner.returncode == 0, won_err
    assert "No such file" not in won_err
    _complete(dep, out)


def test_a_cron_job_overlapping_itself_on_a_store_keeps_the_store(dep: Any, tmp_path: Path) -> None:
    out = tmp_path / "store"
    with toolkit_client(dep) as client:
        sync(client, out, resources=["Appointment"], progress=False, full=True)
    # the second run must fetch pages for the overlap to happen mid-fetch: --full
    with _stalled_sync(dep, out) as (loser, release):
        time.sleep(0.2)
        winner = subprocess.Popen(
            [*CLI, "sync", "--out", str(out), "-r", "Appointment", "-q", "--full"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(dep, agent=True),
            text=True,
            encoding="utf-8",
        )
        try:
            _wait_for(lambda: _staged(out), winner)
            lost = release().decode("utf-8", "replace")
            _, won_err = winner.communicate(timeout=180)
        finally:
            if winner.poll() is None:
                winner.kill()
                winner.wait(30)
    assert "another pmtk sync is writing" in lost, lost
    assert loser.returncode == 1
    assert winner.returncode == 0, won_err
    _complete(dep, out)


def test_a_lock_held_by_another_process_keeps_a_new_folder(tmp_path: Path) -> None:
    """The cleanup of a failed first sync never removes a folder whose lock is held."""
    from toolkit.sync_command import _forget_failed_first_sync

    out = tmp_path / "new"
    out.mkdir()
    (out / ".staging" / "Appointment").mkdir(parents=True)
    (out / ".staging" / "Appointment" / "state.json").write_text("{}", "utf-8")
    with (out / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _forget_failed_first_sync(out, created=True)
        assert (out / ".staging" / "Appointment" / "state.json").is_file()
        assert (out / ".lock").is_file()
        fcntl.flock(held, fcntl.LOCK_UN)
    _forget_failed_first_sync(out, created=True)  # free now, and nothing committed: removed
    assert not out.exists()
