"""The queue is bounded in bytes and the receiver's memory by one batch, not by what arrives.

The issue's case: notifications of just under 1 MiB (about 8,000 events each) took
205 MiB of disk and 720 MiB of receiver memory for 100 of them, against a cap of
100,000 files. Here a real ``pmtk listen`` (a child process, so its memory is its
own) gets 30 such notifications while a writer holds the store, so nothing can be
applied and everything accumulates: the disk stays at the byte cap (then 503 with
``Retry-After``) and the peak resident memory grows by far less than the bodies.
"""

from __future__ import annotations

import fcntl
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.listen.conftest import SECRET_HEADER, listen_process, notification

NAME, VALUE = SECRET_HEADER
CAP = 8 * 1024 * 1024
HEADERS = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}


def _memory(pid: int, field: str) -> int:
    """``VmRSS``/``VmHWM`` of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    msg = f"{field} not in /proc/{pid}/status"
    raise AssertionError(msg)


def _big_body(start: int) -> bytes:
    """A notification just under the 1 MiB body cap."""
    count = 7000
    while True:
        body = notification(*[("Appointment", str(90_000_000 + start + n)) for n in range(count)])
        if len(body) < 1024 * 1024 - 2048:
            return body
        count -= 200


def test_big_notifications_stay_within_the_byte_cap_and_memory_does_not_follow(
    dep: Any, store: Path
) -> None:
    env = {"PM_WEBHOOK_AUTH": f"{NAME}: {VALUE}"}
    options = ["--store", str(store), "--port", "0", "--no-catch-up", "--base-url", dep.base_url]
    options += ["--max-queue-bytes", str(CAP)]
    with listen_process(dep, options, env=env) as proc:
        held = (store / ".lock").open("a+")
        try:
            assert proc.stdout is not None
            banner = "".join(proc.stdout.readline() for _ in range(3))
            assert banner.startswith("webhook URL: "), proc.stderr.read() if proc.stderr else ""
            url = banner.splitlines()[0].split(": ", 1)[1].strip()
            # one change applied first, so the worker has loaded what it needs (Polars...)
            warm = notification(("Appointment", "10000001"))
            assert httpx.post(url, content=warm, headers=HEADERS).status_code == 202
            deadline = time.monotonic() + 60
            status_url = url.replace("/webhook", "/status")
            while httpx.get(status_url, headers=HEADERS).json()["applied"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            fcntl.flock(held, fcntl.LOCK_EX)  # a long sync now: nothing is applied meanwhile
            before = _memory(proc.pid, "VmRSS")
            codes = []
            posted = 0
            for n in range(30):
                body = _big_body(n * 10_000)
                posted += len(body)
                answer = httpx.post(url, content=body, headers=HEADERS, timeout=60)
                codes.append(answer.status_code)
                if answer.status_code == 503:
                    assert answer.headers["retry-after"].isdigit()
            peak = _memory(proc.pid, "VmHWM")
            queue = store / ".webhooks" / "queue"
            on_disk = sum(p.stat().st_size for p in queue.glob("*.json"))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
            fcntl.flock(held, fcntl.LOCK_UN)
            held.close()
    assert 202 in codes and 503 in codes, codes
    assert 202 not in codes[codes.index(503) :]  # full stays full while nothing applies
    one = 2 * 1024 * 1024  # the last notification accepted below the cap, as queued
    assert on_disk <= CAP + one, on_disk
    assert posted > 25 * 1024 * 1024
    # the bodies came and went: the receiver grew by a fraction of what was posted
    assert peak - before < 120 * 1024 * 1024, (before, peak)
