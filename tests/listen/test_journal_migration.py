"""A receiver upgraded in place: the file queue an older pmtk left is moved into the journal.

The files are written here by hand in the older format (``queue/`` files of
``{"changes": [...]}``, one ``waiting/`` file per record, ``dead/`` letters with their
reason), as a receiver stopped mid-work would leave them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl

from tests.conftest import api_client, describe
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import EventQueue, listen


def _change(rtype: str, rid: str) -> dict[str, Any]:
    return {"type": rtype, "id": rid, "action": "update", "timestamp": None,
            "event_number": None, "first_ns": 1, "attempts": 0, "last_error": None,
            "received_at": "2026-11-23T10:00:00Z"}  # fmt: skip


def _old_queue(store: Path, queued: list[str]) -> None:
    hooks = store / ".webhooks"
    for name in ("queue", "waiting", "dead"):
        (hooks / name).mkdir(parents=True, exist_ok=True)
    changes = {"changes": [_change("Appointment", rid) for rid in queued]}
    (hooks / "queue" / "00000000000000000001-00000000000000000001-00000000-2e-99b-abcdef01.json"
     ).write_bytes(orjson.dumps(changes))  # fmt: skip
    (hooks / "waiting" / "Invoice-77.json").write_bytes(orjson.dumps(_change("Invoice", "77")))
    letter = {"change": _change("Appointment", "999"), "reason": "gave up: 500",
              "dead_at": "2026-11-23T10:00:01.000+00:00"}  # fmt: skip
    (hooks / "dead" / "00000000000000000002-Appointment-999.json").write_bytes(orjson.dumps(letter))


def test_an_upgraded_receiver_applies_what_the_file_queue_held(
    dep: Any, store: Path, client: Client
) -> None:
    ids = [str(i) for i in load("Appointment", store)["id"][70:72]]
    with api_client(dep) as api:
        for rid in ids:
            describe(api, rid, f"queued before the upgrade {rid}")
    _old_queue(store, ids)
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        assert receiver.wait_idle(30), receiver.status()
        assert receiver.queue.waiting() == {"Invoice": 1}
        (letter,) = receiver.queue.dead_letters()
    assert letter["record"] == "Appointment/999" and letter["reason"] == "gave up: 500"
    rows = load("Appointment", store).filter(pl.col("id").is_in(ids))
    assert set(rows["description"]) == {f"queued before the upgrade {rid}" for rid in ids}
    assert not any((store / ".webhooks" / name).exists() for name in ("queue", "waiting", "dead"))


def test_files_left_by_a_crash_after_the_import_are_not_imported_twice(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _old_queue(store, ["1", "2"])
    saved = {p: p.read_bytes() for p in (store / ".webhooks").rglob("*.json")}
    first = EventQueue(store)
    assert first.states() == {"queued": 2, "claimed": 0, "read": 0, "waiting": 1, "dead": 1}
    first.close()
    for path, data in saved.items():  # as if killed after the commit, before the removal
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    again = EventQueue(store)
    assert again.states() == {"queued": 2, "claimed": 0, "read": 0, "waiting": 1, "dead": 1}
    assert not list((store / ".webhooks").rglob("*.json"))
