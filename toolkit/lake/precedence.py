"""The lake's use of the one precedence rule, :mod:`toolkit.store.precedence`.

The newest ``meta.lastUpdated`` wins, compared as instants; a tie goes to the
version that arrived later; an unknown time never wins over a known one. The
store's sync, its webhook changes, its rebuild and the lake all decide with that one
module; here are the two questions a lake's commit asks of it, over Polars frames:

* :func:`newest_per_id`: which staged version of each id is the newest (of equal
  instants the one staged later);
* :func:`staged_wins`: which of those replace what the lake holds (the staged one
  unless the stored one is strictly newer: the staged version arrived later, which is
  how a re-read page repairs a half-written commit).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from toolkit.store.precedence import instant_expr, newer_expr, winners


def instants(column: pl.Expr) -> pl.Expr:
    """FHIR instants as UTC datetimes (null when missing or not an instant)."""
    return instant_expr(column)


def newest_per_id(raw: pl.DataFrame, part: str) -> pl.DataFrame:
    """``id``, ``last_updated`` and ``part`` of the newest staged version of each id."""
    return (
        winners(raw.lazy().select("id", "last_updated", part), "id", "last_updated", part)
        .sort("id")
        .collect()
    )


def staged_wins(chosen: pl.DataFrame, stored: Mapping[str, str | None] | pl.DataFrame) -> pl.Series:
    """Per row of ``chosen``: whether its version replaces the stored one (or is new).

    ``stored`` is ``id -> lastUpdated``, as a mapping or a frame of ``id`` and
    ``last_updated`` (what a commit reads of the lake's raw table)."""
    if isinstance(stored, pl.DataFrame):
        held = stored.select(
            pl.col("id").cast(pl.String),
            pl.col("last_updated").cast(pl.String).alias("_stored"),
            pl.lit(True).alias("_held"),
        ).unique("id", keep="last")
    else:
        held = pl.DataFrame(
            {"id": list(stored), "_stored": list(stored.values()), "_held": [True] * len(stored)},
            schema={"id": pl.String, "_stored": pl.String, "_held": pl.Boolean},
        )
    joined = chosen.join(held, on="id", how="left", maintain_order="left")
    held_newer = newer_expr(pl.col("_stored"), pl.col("last_updated"))
    return joined.select((pl.col("_held").is_null() | ~held_newer).alias("wins")).to_series()
