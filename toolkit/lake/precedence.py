"""The one precedence rule of a lake: the newest ``meta.lastUpdated`` wins, a tie goes to
the version written later, and a version whose time is unknown never wins over a known one.

Two vectorised forms of :func:`toolkit.store.merge._is_newer`'s rule, with no limit on
how many records they compare:

* :func:`newest_per_id` reduces staged versions to one per id (of two versions with the
  same instant, the one staged later; an instant is compared as a UTC time, so
  ``03:04:05Z`` and ``14:04:05+11:00`` are the same instant);
* :func:`staged_wins` says which of those replace what the lake holds (the staged one
  unless the stored one is strictly newer: a tie goes to the staged version, which is
  how a repeated event or a re-read page repairs a half-written commit).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl


def instants(column: pl.Expr) -> pl.Expr:
    """FHIR instants as UTC datetimes (null when missing or not an instant)."""
    return column.str.to_datetime("%+", time_unit="us", time_zone="UTC", strict=False)


def newest_per_id(raw: pl.DataFrame, part: str) -> pl.DataFrame:
    """``id``, ``last_updated`` and ``part`` of the newest staged version of each id.

    ``raw`` holds the raw-record rows (``id``, ``last_updated`` as sent) with the column
    ``part``: the order the versions were staged in. Newest by instant; among equal
    instants (or where none is known) the one staged last.
    """
    return (
        raw.select("id", "last_updated", part)
        .with_columns(instants(pl.col("last_updated")).alias("_at"))
        .sort(["_at", part], nulls_last=False)
        .unique("id", keep="last", maintain_order=True)
        .drop("_at")
        .sort("id")
    )


def staged_wins(chosen: pl.DataFrame, stored: Mapping[str, str | None]) -> pl.Series:
    """Per row of ``chosen``: whether its version replaces the stored one (or is new)."""
    held = pl.DataFrame(
        {"id": list(stored), "_stored": list(stored.values())},
        schema={"id": pl.String, "_stored": pl.String},
    )
    joined = chosen.join(held, on="id", how="left", maintain_order="left")
    new_at = instants(pl.col("last_updated"))
    old_at = instants(pl.col("_stored"))
    is_held = pl.col("id").is_in(held["id"].implode())
    older_stored = old_at.is_null() | (new_at.is_not_null() & (new_at >= old_at))
    return joined.select((~is_held | older_stored).alias("wins")).to_series()
