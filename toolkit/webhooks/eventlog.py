"""Which events the receiver has queued: every event once, and the numbers that never came.

The vendor's notifications carry, per subscription, ``notificationEvent[].eventNumber``
and ``SubscriptionStatus.eventsSinceSubscriptionStart`` (``public-docs-facts.md``,
"Events"); it documents no retries and no redelivery. So the receiver keeps, per
subscription, the event numbers it has queued (as ranges, the newest
:data:`NUMBER_WINDOW` numbers) and, for deliveries without numbers, the sha256 of
the body (the newest :data:`DIGEST_WINDOW`). Both are written to
``.webhooks/events-seen.json`` after each accepted delivery, so they survive a restart.

- **Every event once**: an event whose (subscription, eventNumber) was queued, or a
  numberless delivery whose body was, is answered 202 and not queued again, so a
  replay makes no read. An event is *claimed* before it is queued and *confirmed*
  after the queue's fsync; a copy arriving meanwhile waits for that outcome, and a
  claim whose queueing failed is released (the sender retries, nothing is lost).
  Losing this file costs at most one more read per replayed event, never a change.
- **Gaps noticed**: numbers missing between the first number seen of a subscription
  and the highest one announced (an ``eventNumber`` or ``eventsSinceSubscriptionStart``)
  are a gap once they are still missing after a grace period (deliveries may arrive
  out of order); the worker then logs them and heals them with an incremental sync
  of the subscription's resource types (:meth:`EventLog.due_gaps`).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

NUMBER_WINDOW = 100_000
"""Event numbers remembered per subscription (below the newest minus this, forgotten)."""

DIGEST_WINDOW = 10_000
"""Digests of numberless deliveries remembered (the oldest dropped first)."""

SUBSCRIPTIONS_MAX = 256
"""Subscriptions remembered (the least recently heard of dropped first)."""

MISSING_SHOWN = 50
"""Missing numbers named in a log line or the status (the count is always given)."""

DEFAULT_GAP_GRACE = 30.0
"""Seconds a missing event number may still arrive (out of order) before it is a gap."""

FILE_NAME = "events-seen.json"

SAVE_EVERY = 0.5
"""Seconds between writes of the log while deliveries arrive (and once more on stop):
a crash forgets at most this much, which costs a repeated read per replay, no change."""


def _add(ranges: list[list[int]], number: int) -> bool:
    """Add ``number`` to sorted disjoint ``[lo, hi]`` ranges; false if it was there."""
    lo, hi = 0, len(ranges)
    while lo < hi:  # the first range whose end is >= number - 1
        mid = (lo + hi) // 2
        if ranges[mid][1] < number - 1:
            lo = mid + 1
        else:
            hi = mid
    i = lo
    if i < len(ranges) and ranges[i][0] <= number <= ranges[i][1]:
        return False
    if i < len(ranges) and ranges[i][1] == number - 1:
        ranges[i][1] = number
        if i + 1 < len(ranges) and ranges[i + 1][0] == number + 1:
            ranges[i][1] = ranges[i + 1][1]
            del ranges[i + 1]
    elif i < len(ranges) and ranges[i][0] == number + 1:
        ranges[i][0] = number
    else:
        ranges.insert(i, [number, number])
    return True


def _union(ranges: list[list[int]], more: list[list[int]]) -> list[list[int]]:
    """Sorted disjoint ``[lo, hi]`` ranges holding every number of both."""
    merged: list[list[int]] = []
    for lo, hi in sorted([*ranges, *more]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _has(ranges: list[list[int]], number: int) -> bool:
    return any(lo <= number <= hi for lo, hi in ranges)


def _missing(ranges: list[list[int]], upto: int) -> list[int]:
    """Numbers absent from ``ranges`` between its first number and ``upto`` (at most
    :data:`NUMBER_WINDOW` of them, the lowest first)."""
    if not ranges:
        return []
    out: list[int] = []
    bounds = [*(r[0] for r in ranges[1:]), max(upto, ranges[-1][1]) + 1]
    for (_lo, hi), nxt in zip(ranges, bounds, strict=True):
        out.extend(range(hi + 1, min(nxt, hi + 1 + NUMBER_WINDOW - len(out))))
        if len(out) >= NUMBER_WINDOW:
            break
    return out


@dataclass(slots=True)
class _Subscription:
    ranges: list[list[int]] = field(default_factory=list)
    announced: int = 0  # the highest eventsSinceSubscriptionStart or eventNumber heard of
    types: set[str] = field(default_factory=set)
    first_missing_at: dict[int, float] = field(default_factory=dict)  # monotonic, in memory
    healed: int = 0

    def trim(self) -> None:
        if not self.ranges:
            return
        floor = max(self.announced, self.ranges[-1][1]) - NUMBER_WINDOW
        while self.ranges and self.ranges[0][1] < floor:
            del self.ranges[0]
        if self.ranges and self.ranges[0][0] < floor:
            self.ranges[0][0] = floor


@dataclass(frozen=True, slots=True)
class Gap:
    """Event numbers of a subscription still missing after the grace period."""

    subscription: str
    missing: tuple[int, ...]
    types: frozenset[str]


@dataclass(slots=True)
class _Claim:
    done: threading.Event = field(default_factory=threading.Event)
    kept: bool = False


class EventLog:
    """The event numbers and delivery digests queued so far, persisted in the store."""

    def __init__(self, folder: Path, *, gap_grace: float = DEFAULT_GAP_GRACE) -> None:
        self.path = folder / FILE_NAME
        self.gap_grace = gap_grace
        self._lock = threading.Lock()
        self._subs: OrderedDict[str, _Subscription] = OrderedDict()
        self._digests: OrderedDict[str, None] = OrderedDict()
        self._claims: dict[tuple[str, str], _Claim] = {}
        self.duplicates = 0
        self.gaps_found = 0
        self.last_gap: dict[str, Any] | None = None
        self._dirty = False
        self._saved_at = 0.0
        self._deferred = False
        self._load()

    # -- persistence -----------------------------------------------------------------

    def _load(self) -> None:
        try:
            data = orjson.loads(self.path.read_bytes())
            subs = data.get("subscriptions") or {}
            for name, entry in subs.items():
                sub = _Subscription(
                    ranges=[[int(lo), int(hi)] for lo, hi in entry.get("ranges") or []],
                    announced=int(entry.get("announced") or 0),
                    types={str(t) for t in entry.get("types") or []},
                    healed=int(entry.get("healed") or 0),
                )
                self._subs[str(name)] = sub
            for digest in data.get("digests") or []:
                self._digests[str(digest)] = None
            self.last_gap = data.get("last_gap")
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            # an unreadable file costs at most a repeated read per replayed event
            self._subs.clear()
            self._digests.clear()

    def defer_saves(self) -> None:
        """Keep what is confirmed in memory only, until :meth:`adopt`: while a receiver
        being taken over still writes the file, a save here would overwrite its numbers."""
        self._deferred = True

    def adopt(self) -> None:
        """Merge in what the file holds now: the numbers and digests a receiver this one
        took over queued after this log was loaded (both served for a moment), so that
        they are neither queued again nor reported as a gap. Then write the union."""
        other = EventLog(self.path.parent, gap_grace=self.gap_grace)
        with self._lock:
            self._deferred = False
            for name, theirs in other._subs.items():
                mine = self._subs.setdefault(name, _Subscription())
                mine.ranges = _union(mine.ranges, theirs.ranges)
                for number in [n for n in mine.first_missing_at if _has(mine.ranges, n)]:
                    del mine.first_missing_at[number]
                mine.announced = max(mine.announced, theirs.announced)
                mine.types |= theirs.types
                mine.healed = max(mine.healed, theirs.healed)
                mine.trim()
            for digest in other._digests:
                self._digests.setdefault(digest, None)
            while len(self._digests) > DIGEST_WINDOW:
                self._digests.popitem(last=False)
            self.last_gap = self.last_gap or other.last_gap
            self._dirty = True
        self.save()

    def flush(self, *, force: bool = False) -> None:
        """Write the log if it changed and :data:`SAVE_EVERY` has passed (or ``force``);
        never while saves are deferred (:meth:`defer_saves`)."""
        due = force or time.monotonic() - self._saved_at >= SAVE_EVERY
        if self._dirty and not self._deferred and due:
            self.save()

    def save(self) -> None:
        """Write the log (atomically; not fsynced: losing it costs reads, not changes)."""
        with self._lock:
            self._dirty = False
            self._saved_at = time.monotonic()
            data = orjson.dumps(
                {
                    "subscriptions": {
                        name: {
                            "ranges": sub.ranges,
                            "announced": sub.announced,
                            "types": sorted(sub.types),
                            "healed": sub.healed,
                        }
                        for name, sub in self._subs.items()
                    },
                    "digests": list(self._digests),
                    "last_gap": self.last_gap,
                }
            )
        tmp = self.path.with_name(f".{self.path.name}.{threading.get_ident()}.tmp")
        with contextlib.suppress(OSError):
            tmp.write_bytes(data)
            tmp.replace(self.path)

    # -- every event once ------------------------------------------------------------

    @staticmethod
    def keys(
        body: bytes, subscription: str | None, numbers: Sequence[str | None]
    ) -> list[tuple[str, str]]:
        """One key per event: ``(subscription, number)``, or the body's digest and the
        event's place when the delivery names no subscription or the event no number
        (a number alone says nothing: each subscription counts from 1)."""
        digest: str | None = None
        keys: list[tuple[str, str]] = []
        for place, number in enumerate(numbers):
            value = None if number is None else _as_int(number)
            if subscription and value is not None:
                keys.append((subscription, str(value)))
            else:
                digest = digest or hashlib.sha256(body).hexdigest()
                keys.append(("#" + digest, str(place)))
        return keys

    def claim(self, keys: Sequence[tuple[str, str]]) -> tuple[list[bool], list[_Claim]]:
        """For each key: true when it is new and now claimed by the caller; false when
        it was queued already. Also the claims of other deliveries in flight for some
        of the keys (wait for them, then claim again)."""
        fresh: list[bool] = []
        waits: list[_Claim] = []
        with self._lock:
            for key in keys:
                other = self._claims.get(key)
                if other is not None:
                    waits.append(other)
                    fresh.append(False)
                elif self._seen(key):
                    fresh.append(False)
                else:
                    self._claims[key] = _Claim()
                    fresh.append(True)
        if waits:
            # nothing is claimed by a caller that must wait: it claims again afterwards
            self.release([k for k, f in zip(keys, fresh, strict=True) if f])
            return [False] * len(keys), waits
        return fresh, []

    def release(self, keys: Iterable[tuple[str, str]]) -> None:
        """Give up claims whose events could not be queued (the sender sends them again)."""
        with self._lock:
            for key in keys:
                claim = self._claims.pop(key, None)
                if claim is not None:
                    claim.done.set()

    def confirm(
        self,
        keys: Sequence[tuple[str, str]],
        types: Sequence[str],
        announced: tuple[str | None, int | None] | None = None,
    ) -> None:
        """Remember claimed events as queued (``types``: each event's resource type), and
        what a notification announced (``(subscription, eventsSinceSubscriptionStart)``)."""
        now = time.monotonic()
        with self._lock:
            touched = {key[0] for key in keys if not key[0].startswith("#")}
            for key, rtype in zip(keys, types, strict=True):
                self._remember(key, rtype)
                claim = self._claims.pop(key, None)
                if claim is not None:
                    claim.kept = True
                    claim.done.set()
            if announced is not None and announced[0] and announced[1] is not None:
                name = announced[0]
                sub = self._subs.get(name)
                if sub is not None and sub.ranges:
                    # a hostile count cannot make the receiver look for a billion numbers
                    top = sub.ranges[-1][1] + NUMBER_WINDOW
                    sub.announced = max(sub.announced, min(announced[1], top))
                    touched.add(name)
            for name in touched:
                sub = self._subs.get(name)
                if sub is not None:
                    self._note_missing(sub, now)
            self._dirty = True
        self.flush()

    def _seen(self, key: tuple[str, str]) -> bool:
        name, number = key
        if name.startswith("#"):
            return f"{name}/{number}" in self._digests
        sub = self._subs.get(name)
        return sub is not None and _has(sub.ranges, int(number))

    def _remember(self, key: tuple[str, str], rtype: str) -> None:
        name, number = key
        if name.startswith("#"):
            self._digests[f"{name}/{number}"] = None
            while len(self._digests) > DIGEST_WINDOW:
                self._digests.popitem(last=False)
            return
        sub = self._subs.pop(name, None) or _Subscription()
        self._subs[name] = sub  # most recently heard of last
        while len(self._subs) > SUBSCRIPTIONS_MAX:
            self._subs.popitem(last=False)
        _add(sub.ranges, int(number))
        sub.announced = max(sub.announced, int(number))
        sub.types.add(rtype)
        sub.first_missing_at.pop(int(number), None)
        sub.trim()

    def _note_missing(self, sub: _Subscription, now: float) -> None:
        for number in _missing(sub.ranges, sub.announced):
            sub.first_missing_at.setdefault(number, now)

    # -- gaps ------------------------------------------------------------------------

    def due_gaps(self) -> list[Gap]:
        """The gaps whose numbers are still missing after the grace period."""
        now = time.monotonic()
        gaps: list[Gap] = []
        with self._lock:
            for name, sub in self._subs.items():
                late = sorted(
                    n
                    for n, since in sub.first_missing_at.items()
                    if now - since >= self.gap_grace and not _has(sub.ranges, n)
                )
                if late:
                    gaps.append(Gap(name, tuple(late), frozenset(sub.types)))
        return gaps

    def healed(self, gap: Gap) -> None:
        """A sync covered ``gap``: its numbers count as seen (a late copy is not read)."""
        with self._lock:
            sub = self._subs.get(gap.subscription)
            if sub is not None:
                for number in gap.missing:
                    _add(sub.ranges, number)
                    sub.first_missing_at.pop(number, None)
                sub.healed += len(gap.missing)
                sub.trim()
            self.gaps_found += 1
            self.last_gap = {
                "subscription": gap.subscription,
                "missing": list(gap.missing[:MISSING_SHOWN]),
                "missing_count": len(gap.missing),
                "types": sorted(gap.types),
                "healed_at": time.time(),
            }
        self.save()

    def status(self) -> dict[str, Any]:
        """What ``--status`` shows: per subscription, the numbers seen and missing."""
        now = time.monotonic()
        with self._lock:
            subs: dict[str, Any] = {}
            for name, sub in self._subs.items():
                waiting = sorted(n for n in sub.first_missing_at if not _has(sub.ranges, n))
                subs[name] = {
                    "highest": max(sub.announced, sub.ranges[-1][1] if sub.ranges else 0),
                    "missing": waiting[:MISSING_SHOWN],
                    "missing_count": len(waiting),
                    "oldest_missing_s": round(
                        max((now - sub.first_missing_at[n] for n in waiting), default=0.0), 1
                    ),
                    "healed_by_sync": sub.healed,
                }
            return {
                "subscriptions": subs,
                "duplicates": self.duplicates,
                "last_gap": self.last_gap,
            }


def _as_int(text: str) -> int | None:
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if 0 <= value < 2**62 else None
