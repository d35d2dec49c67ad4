"""A real ``pmtk listen`` killed with SIGKILL at every state change of its journal.

One notification announces three updated Appointments, one whose first read fails
(500: retried), one the API refuses (400: dead) and an Invoice (no table: waiting).
The child (``tests/listen/killpoint.py``) dies before or after the commit of one
step: the intake, the claim, the reads' outcomes, the store's commit, the journal
forgetting what the store committed, and the retry's second claim and read. A new
receiver on the same store then finishes the work, and the test checks, from the
store and the journal read with plain ``sqlite3``:

- every change of a notification answered 202 is applied (or dead, or waiting);
- no change is applied twice: a record the killed child had already committed to
  the store is not written again by the new receiver.

A reviewer's reordering (a 202 before the intake commit, the journal forgetting a
change before the store's commit) fails one of these cases.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.conftest import api_client, describe
from tests.listen.conftest import SECRET_HEADER, notification
from tests.listen.flaky import flaky_upstream, made_through
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import listen

NAME, VALUE = SECRET_HEADER
HEADERS = {NAME: VALUE.encode(), "Content-Type": "application/fhir+json"}
KILLPOINT = Path(__file__).with_name("killpoint.py")
ROOT = Path(__file__).resolve().parents[2]

CASES = [
    ("intake", "before", 1),
    ("intake", "after", 1),
    # ("claim", "before", 1) is the state "intake" "after" leaves: the same case
    ("claim", "after", 1),
    ("read", "before", 1),
    ("read", "after", 1),
    ("store", "before", 1),
    ("store", "after", 1),
    ("applied", "before", 1),
    ("applied", "after", 1),
    ("claim", "after", 2),  # the retried change claimed again (its second read next)
]


def _rows(store: Path) -> list[tuple[str, str]]:
    path = store / ".webhooks" / "journal.sqlite3"
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [(str(r), str(s)) for r, s in db.execute("SELECT rid, state FROM changes")]


def _descriptions(store: Path, ids: list[str]) -> dict[str, str | None]:
    rows = load("Appointment", store).filter(pl.col("id").is_in(ids))
    return dict(zip(rows["id"].to_list(), rows["description"].to_list(), strict=True))


def _child(dep: Any, store: Path, base_url: str, case: tuple[str, str, int]) -> Any:
    env = {
        **os.environ,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        "PM_WEBHOOK_AUTH": f"{NAME}: {VALUE}",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONPATH": str(ROOT),
    }
    step, when, nth = case
    options = ["--store", str(store), "--port", "0", "--no-catch-up", "--base-url", base_url]
    return subprocess.Popen(
        [sys.executable, str(KILLPOINT), step, when, str(nth), "listen", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        encoding="utf-8",
    )


def _killed_run(dep: Any, store: Path, base_url: str, case: tuple[str, str, int]) -> int:
    """Post the notification to a child that dies at ``case``; the answer's status
    (``0``: no answer, the child died first)."""
    body = notification(*[("Appointment", rid) for rid in _ids(store)], ("Invoice", "77001"))
    with _child(dep, store, base_url, case) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split(": ", 1)[1].strip()
            try:
                status = httpx.post(url, content=body, headers=HEADERS, timeout=30).status_code
            except httpx.HTTPError:
                status = 0
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            _out, errors = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, errors  # the kill point was reached
    return status


def _ids(store: Path) -> list[str]:
    return [str(i) for i in load("Appointment", store)["id"][60:65]]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_a_kill_at_any_state_change_loses_nothing_and_applies_nothing_twice(
    case: tuple[str, str, int],
    dep: Any,
    store: Path,
    client: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = _ids(store)
    retried, refused = ids[3], ids[4]
    texts = {rid: f"journal {'-'.join(map(str, case))} {n}" for n, rid in enumerate(ids[:4])}
    with api_client(dep) as api:
        for rid, text in texts.items():
            describe(api, rid, text)

    def policy(_rtype: str, rid: str, seen: int) -> int | None:
        return 400 if rid == refused else 500 if rid == retried and seen == 0 else None

    with flaky_upstream(dep.base_url, policy) as flaky:
        made_through(store, flaky.base_url)
        status = _killed_run(dep, store, flaky.base_url, case)
        kept = _rows(store)
        landed = {rid for rid, text in _descriptions(store, ids).items() if text == texts.get(rid)}
        written: list[str] = []
        import toolkit.webhooks.target as target  # where the receiver's store target calls it

        real = target.apply_changes

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            written.extend(result.upserted)
            return result

        monkeypatch.setattr(target, "apply_changes", counted)
        with (
            Client(base_url=flaky.base_url, client_id=dep.client_id,
                   client_secret=dep.client_secret, requests_per_minute=None,
                   progress=False) as through,
            listen(store, client=through, no_auth=True, catch_up=False) as receiver,
        ):  # fmt: skip
            assert receiver.wait_idle(60), receiver.status()
    assert not set(written) & landed, (landed, written)  # nothing applied twice
    assert len(written) == len(set(written)), written
    rows = _rows(store)
    if status != 202 and not kept:  # never acknowledged nor journaled: nothing half-kept
        assert not rows and not landed
        return
    # acknowledged, or journaled before the child could answer (the sender retries
    # then, and its copy is one more announcement of the same changes)
    descriptions = _descriptions(store, ids)
    assert {rid: descriptions[rid] for rid in texts} == texts  # every change applied
    # by the killed run or by the counted one (a count that saw nothing proves nothing)
    assert set(texts) <= landed | set(written), (texts, landed, written)
    assert sorted(rows) == sorted([(refused, "dead"), ("77001", "waiting")]), rows
