"""Which version of a record wins: the one precedence rule of every path that merges versions.

A sync's incremental merge, the de-duplication of a sync's staged pages (a record
changed during the walk, or read again by a resumed run), a rebuild from the raw
records, a webhook change (:func:`toolkit.store.apply_changes`) and the high-water
mark of a sync all decide "which version of this record is the newest" here, and
nowhere else. Importing this module has no side effect (Polars is imported by the
vectorised functions only when they are called).

The contract
------------
A version is known by its ``meta.lastUpdated``, a FHIR ``instant``:
``YYYY-MM-DDThh:mm:ss[.fraction](Z|+hh:mm|-hh:mm)``.

- **Instants, not texts, are compared.** The same instant written with different
  UTC offsets is one instant (``2026-01-02T10:00:00+10:00`` equals
  ``2026-01-02T00:00:00Z``); ``…05Z`` equals ``…05.000Z``.
- **Precision: the microsecond.** Digits of a fraction beyond the sixth are
  ignored (truncated), as Python's :class:`~datetime.datetime` and Polars'
  ``Datetime("us")`` (the stored ``last_updated`` column) hold them.
- **Unknown is oldest.** A missing stamp, or a text that is not a FHIR instant (no
  offset, a date alone, the year 0000, second 60, month 13, an offset beyond
  ±14:00, spaces or a trailing newline), is *unknown*: it is never newer than
  anything, and any known instant is newer than it.
- **A tie goes to the later arrival.** When neither version is newer (equal
  instants, or both unknown), the version that arrived later wins: the incoming
  change over the stored one, the later staged page over the earlier one. This
  keeps what every path did before the rule was written once, and makes a
  repeated delivery of the same version harmless.

So :func:`replaces` (``incoming`` replaces ``held`` unless ``held`` is strictly
:func:`newer`) is the decision; :func:`newest` the later of two stamps (the
high-water mark); :func:`winning_records` a list of records with each id's losing
versions left out (a batch of pages, a batch of webhook changes);
:func:`instant_expr`, :func:`newer_expr` and :func:`winners` are the same rule
over Polars columns, for the paths that decide for many rows at once (they agree
with the scalar functions row by row: ``tests/store/test_precedence.py`` checks
both against a plain oracle at and beyond 5,000 rows).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "INSTANT",
    "instant",
    "instant_expr",
    "newer",
    "newer_expr",
    "newest",
    "replaces",
    "stamp",
    "winners",
    "winning_records",
]

INSTANT = (
    r"([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)"
    r"-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]{1,9})?(Z|[+-]((0[0-9]|1[0-3]):[0-5][0-9]|14:00))"
)
"""A FHIR instant (years 0001-9999 as FHIR's own expression, the offset required, seconds
00-59, offsets within ±14:00, ASCII digits only: ``\\d`` would match other scripts'
digits); matched whole. The year 0000 is unknown in both forms: Python's datetime has no
year 0, Polars reads one."""

_INSTANT = re.compile(INSTANT)
_UTC_ZERO = "+00:00"


def instant(text: object) -> datetime | None:
    """The point in time of a FHIR instant (aware, microsecond precision); ``None`` if unknown.

    Parameters
    ----------
    text
        A ``meta.lastUpdated`` value as sent (anything else is unknown).

    Returns
    -------
    datetime or None
        ``None`` for a missing value or one that is not a whole FHIR instant
        (``re.fullmatch``: a trailing newline is not accepted).
    """
    if not isinstance(text, str) or _INSTANT.fullmatch(text) is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", _UTC_ZERO))
    except ValueError:  # a day the month does not have (2026-02-30)
        return None


def newer(a: object, b: object) -> bool:
    """Whether the version stamped ``a`` is strictly newer than the one stamped ``b``.

    Known instants compare as points in time; a known instant is newer than an
    unknown one; an unknown one is never newer. ``newer(x, x)`` is false.
    """
    when_a = instant(a)
    if when_a is None:
        return False
    when_b = instant(b)
    return when_b is None or when_a > when_b


def replaces(incoming: object, held: object) -> bool:
    """Whether the version that arrived later (``incoming``) replaces the one ``held``.

    True unless ``held`` is strictly :func:`newer`: on a tie the later arrival wins.
    """
    return not newer(held, incoming)


def newest(a: str | None, b: str | None) -> str | None:
    """The newer of two stamps (``a`` on a tie): a high-water mark kept across pages."""
    return b if newer(b, a) else a


def winning_records(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``records`` with each id's losing versions left out (:func:`replaces`, in order).

    A record without a string ``id`` is kept as it is. The winner of an id takes
    the place of its first version, so an unrepeated list comes back unchanged.
    """
    slot: dict[str, int] = {}
    kept: list[Mapping[str, Any] | None] = []
    for rec in records:
        rid = rec.get("id")
        if not isinstance(rid, str):
            kept.append(rec)
            continue
        at = slot.get(rid)
        if at is None:
            slot[rid] = len(kept)
            kept.append(rec)
        elif replaces(stamp(rec), stamp(kept[at])):
            kept[at] = rec
    return [rec for rec in kept if rec is not None]


def one_version_each(
    raws: Sequence[bytes], records: Sequence[Mapping[str, Any]]
) -> tuple[list[bytes], list[Mapping[str, Any]]]:
    """A staged part's pages with one version of each record (:func:`winning_records`).

    ``raws`` are the pages as received and ``records`` their entries' resources, in
    order. A record changed during a walk comes back in a later page (or the walk's
    recovery) within the same part; both versions in one part would be two rows of
    one id. Returns the Bundles a flattener reads (``raws`` themselves when no id
    repeats, else one Bundle of the kept records) and the kept records.
    """
    import orjson

    kept = winning_records(records)
    if len(kept) == len(records):
        return list(raws), kept
    entries = [{"resource": r} for r in kept]
    return [orjson.dumps({"resourceType": "Bundle", "type": "searchset", "entry": entries})], kept


def stamp(rec: Mapping[str, Any] | None) -> object:
    """A record's ``meta.lastUpdated`` as sent (anything; the functions here take an
    unknown one as the oldest), ``None`` when it has none."""
    meta = rec.get("meta") if rec is not None else None
    return meta.get("lastUpdated") if isinstance(meta, Mapping) else None


# -- the same rule over Polars columns ------------------------------------------------


def instant_expr(stamp: pl.Expr) -> pl.Expr:
    """A ``Datetime("us", "UTC")`` column of the instants of a String column; null if unknown."""
    import polars as pl

    text = stamp.cast(pl.String)
    parsed = text.str.replace(r"Z$", _UTC_ZERO).str.to_datetime(
        format="%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="us", time_zone="UTC", strict=False
    )
    return pl.when(text.str.contains(f"^(?:{INSTANT})$")).then(parsed).otherwise(None)


def newer_expr(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """:func:`newer` row by row over two String columns of stamps (never null)."""
    when_a, when_b = instant_expr(a), instant_expr(b)
    return when_a.is_not_null() & (when_b.is_null() | (when_a > when_b)).fill_null(value=False)


def winners(frame: pl.LazyFrame, key: str, stamp: str, arrival: str) -> pl.LazyFrame:
    """The winning row of each ``key``: the newest ``stamp``, then the latest ``arrival``.

    Parameters
    ----------
    frame
        Rows of versions, several per key.
    key
        The record's id column.
    stamp
        The String column of each version's ``meta.lastUpdated``.
    arrival
        An integer column ordering the versions by arrival (a staged part number).

    Returns
    -------
    polars.LazyFrame
        One row per key, the columns of ``frame``; which row is :func:`replaces`
        applied in arrival order (an unknown stamp loses to any known one).
    """
    import polars as pl

    ranked = frame.with_columns(instant_expr(pl.col(stamp)).alias("__instant"))
    return (
        ranked.sort(["__instant", arrival], nulls_last=False)
        .unique(subset=[key], keep="last", maintain_order=False)
        .drop("__instant")
    )
