"""The walk's index of ids: the same answers in memory and spilled to SQLite."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest

from toolkit import seen
from toolkit.errors import PmtkError


def _replay(index: seen.Seen, seed: int) -> list[Any]:
    """A walk-like sequence of lookups and writes; every answer, in order."""
    rng = random.Random(seed)
    answers: list[Any] = []
    for page in range(60):
        ids = [f"AP-{rng.randrange(2_000)}" for _ in range(50)]
        known = index.lookup(ids)
        answers.append(sorted(known.items()))
        rows = {
            rid: (rng.choice([None, rng.randrange(10**12)]), page, pos, 1 + page // 20)
            for pos, rid in enumerate(ids)
        }
        index.write(rows)
        answers.append(len(index))
    answers.append(index.count_before(5 * 10**11))
    answers.append(sorted(index.versions()))
    return answers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_spilled_index_answers_as_the_dict_does(seed: int) -> None:
    memory, spilled = seen.Seen(spill_at=10**9), seen.Seen(spill_at=100)
    assert _replay(memory, seed) == _replay(spilled, seed)
    assert spilled.spilled and not memory.spilled
    spilled.close()
    assert len(spilled) == 0 and not spilled.spilled


def test_without_room_for_a_temporary_file_the_index_stays_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite3, "connect", refuse)
    index = seen.Seen(spill_at=100)
    expected = _replay(seen.Seen(spill_at=10**9), 3)
    assert _replay(index, 3) == expected
    assert not index.spilled


def test_a_disk_failure_after_spilling_is_a_pmtk_error() -> None:
    index = seen.Seen(spill_at=1)
    index.write({"a": (1, 0, 0, 1), "b": (2, 0, 1, 1)})
    assert index.spilled
    index._db.close()  # type: ignore[union-attr]  # the file went away under the walk
    with pytest.raises(PmtkError, match="could not be kept on disk"):
        index.write({"c": (3, 0, 2, 1)})
    with pytest.raises(PmtkError, match="could not be kept on disk"):
        index.lookup(["a"])
