"""Small building blocks over the frames: reference ids, counts, freshness, roles and top-n."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import polars as pl

from toolkit.errors import ApiError, MethodNotAllowed, NotFound

PRICE_COMPONENT_SIGNS: dict[str, int] = {
    "base": 1,
    "surcharge": 1,
    "tax": 1,
    "deduction": -1,
    "discount": -1,
    "informational": 0,
}
"""How each ``unitPriceComponent.type`` counts towards a line's billed value."""


ATTENDANCE_OUTCOMES: tuple[str, ...] = (
    "attended",
    "cancelled",
    "did not attend",
    "unrecorded",
    "upcoming",
)
"""Outcome labels of :func:`appointment_visits` (``noshow`` reads "did not attend")."""


STATUS_OUTCOME: dict[str, str] = {
    "attended": "attended",
    "cancelled": "cancelled",
    "noshow": "did not attend",
}


def reference_id(column: str | pl.Expr) -> pl.Expr:
    """The id at the end of a reference string: ``PR-12`` of ``/main/Practitioner/PR-12``.

    A bare id (no ``/``) is returned unchanged, so the expression is safe on columns
    that already hold ids.

    Parameters
    ----------
    column
        Column name or expression holding reference strings or ids.

    Returns
    -------
    pl.Expr
        A string expression; null stays null.

    Examples
    --------
    >>> df = pl.DataFrame({"ref": ["/main/Practitioner/PR-1", "PR-2", None]})
    >>> df.select(reference_id("ref")).to_series().to_list()
    ['PR-1', 'PR-2', None]
    """
    expr = pl.col(column) if isinstance(column, str) else column
    return expr.str.split("/").list.last()


def ratio_of(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    """``numerator / denominator`` as a float, null where the denominator is null or 0."""
    return (
        pl.when(denominator.is_not_null() & (denominator != 0))
        .then(numerator.cast(pl.Float64) / denominator.cast(pl.Float64))
        .otherwise(None)
    )


def units_used_expr() -> pl.Expr:
    """Units a referral has used: ``quantityUsed + quantityOffset`` (nulls read as 0)."""
    return pl.col("limit_quantity_used").fill_null(0) + pl.col("limit_quantity_offset").fill_null(0)


def as_dates(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """``columns`` as ``pl.Date``, whether they hold dates, datetimes or ISO strings."""
    out = []
    for name in columns:
        dtype = frame.schema[name]
        col = pl.col(name)
        if dtype == pl.Date:
            continue
        if isinstance(dtype, pl.Datetime):
            out.append(col.dt.date())
        else:
            out.append(col.cast(pl.String).str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False))
    return frame.with_columns(out) if out else frame


def as_utc(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """``columns`` as UTC datetimes, whether they arrive zoned, naive (read as UTC) or as text."""
    out = []
    for name in columns:
        dtype = frame.schema[name]
        col = pl.col(name)
        if isinstance(dtype, pl.Datetime):
            zoned = col.dt.replace_time_zone("UTC") if dtype.time_zone is None else col
            out.append(zoned.dt.convert_time_zone("UTC"))
        else:
            out.append(col.cast(pl.String).str.to_datetime(time_zone="UTC", strict=False))
    return frame.with_columns(out) if out else frame


def utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def row_counts(frames: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """Rows and columns of each frame, for an overview of what a deployment holds.

    Parameters
    ----------
    frames
        Table name to frame.

    Returns
    -------
    pl.DataFrame
        Columns ``table``, ``rows``, ``columns`` in the order given.

    Examples
    --------
    >>> row_counts({"referral": pl.DataFrame({"id": ["a", "b"]})}).row(0)
    ('referral', 2, 1)
    """
    return pl.DataFrame(
        {
            "table": list(frames),
            "rows": [f.height for f in frames.values()],
            "columns": [f.width for f in frames.values()],
        },
        schema={"table": pl.String, "rows": pl.Int64, "columns": pl.Int64},
    )


def data_as_of(
    *frames: pl.DataFrame, column: str = "last_updated", now: dt.datetime | None = None
) -> dt.datetime:
    """The moment the data describes: the latest ``meta.lastUpdated`` seen, capped at now.

    Against a live deployment this is (nearly) the current time. Against the
    embedded mock, whose data is anchored to a fixed date, it is that date, so
    "past", "upcoming" and "the coming weeks" mean the same on every run.

    Parameters
    ----------
    *frames
        Frames with a ``column`` of UTC datetimes (the views' ``last_updated``).
    column
        The column to read.
    now
        The current time; ``datetime.now(UTC)`` when ``None``.

    Returns
    -------
    datetime.datetime
        A timezone-aware UTC datetime.

    Examples
    --------
    >>> f = pl.DataFrame({"last_updated": [dt.datetime(2026, 1, 2, tzinfo=dt.UTC)]})
    >>> data_as_of(f, now=dt.datetime(2026, 5, 1, tzinfo=dt.UTC)).isoformat()
    '2026-01-02T00:00:00+00:00'
    """
    moment = utc(now if now is not None else dt.datetime.now(dt.UTC))
    seen: list[dt.datetime] = []
    for frame in frames:
        if column in frame.columns and frame.height:
            latest = as_utc(frame.select(column), column)[column].max()
            if isinstance(latest, dt.datetime):
                seen.append(utc(latest))
    return min([moment, max(seen)]) if seen else moment


def role_organizations(roles: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """PractitionerRole records (as read one by one) as a frame of role -> organization.

    Where a deployment lists no PractitionerRole (the spec names no endpoint for
    them), roles are read by id; this turns those JSON records into the frame
    :func:`referring_practice` and clinic look-ups join, as :func:`read_roles` gives
    from the list.

    Parameters
    ----------
    roles
        PractitionerRole records (dicts with ``id``, ``practitioner``, ``organization``).

    Returns
    -------
    pl.DataFrame
        ``id``, ``practitioner_id`` and ``organization_id`` (ids, prefixes kept).

    Examples
    --------
    >>> role = {"id": "EP-1", "organization": {"reference": "/main/Organization/SP-2"}}
    >>> role_organizations([role]).row(0)
    ('EP-1', None, 'SP-2')
    """

    def key(record: Mapping[str, Any], name: str) -> str | None:
        value = record.get(name)
        ref = value.get("reference") if isinstance(value, Mapping) else None
        return ref.rsplit("/", 1)[-1] if isinstance(ref, str) and ref else None

    rows = [
        {
            "id": r.get("id"),
            "practitioner_id": key(r, "practitioner"),
            "organization_id": key(r, "organization"),
        }
        for r in roles
    ]
    return pl.DataFrame(
        rows,
        schema={"id": pl.String, "practitioner_id": pl.String, "organization_id": pl.String},
    )


class RecordReader(Protocol):
    """Anything that reads one record by id, such as :class:`toolkit.Client`."""

    def read(self, resource_type: str, record_id: str) -> dict[str, Any]:
        """The record ``resource_type/record_id`` as a dict."""
        ...


def roles_among(roles: pl.DataFrame, ids: Iterable[str]) -> pl.DataFrame:
    """The rows of a ``PractitionerRole`` table whose id is one of ``ids``, as
    :func:`read_roles` returns them (``id``, ``practitioner_id``, ``organization_id``,
    one row per id, sorted by id).

    >>> roles = pl.DataFrame({"id": ["PR-2", "PR-1"], "practitioner_id": ["PR-2", "PR-1"],
    ...                       "organization_id": ["CL-1", "CL-2"]})
    >>> roles_among(roles, ["PR-1", "EP-9"]).rows()
    [('PR-1', 'PR-1', 'CL-2')]
    """
    wanted = sorted({i for i in ids if i})
    columns = ["id", "practitioner_id", "organization_id"]
    found = roles.select(columns).filter(pl.col("id").is_in(wanted))
    return found.unique("id", keep="first").sort("id")


def read_roles(client: RecordReader, ids: Iterable[str], *, limit: int = 500) -> pl.DataFrame:
    """The PractitionerRoles ``ids`` as :func:`role_organizations` gives them.

    With a :class:`toolkit.Client`, one walk of ``GET /main/PractitionerRole`` (the
    list public clients use live; one request per 100 roles). When the deployment
    does not serve that list (404 or 405; the spec does not name it), or ``client``
    only reads, the roles are read by id instead, one request each: a missing role
    (404) is skipped, and any other refusal stops the look-ups (the deployment does
    not serve roles at all); the frame then holds what was read so far, and callers
    fall back to grouping by the role id.

    Parameters
    ----------
    client
        A :class:`toolkit.Client` (or anything with ``read``).
    ids
        Role ids (``EP-...``, ``PR-...``); duplicates and nulls are ignored.
    limit
        At most this many roles are read one by one.

    Returns
    -------
    pl.DataFrame
        ``id``, ``practitioner_id``, ``organization_id``, one row per role found,
        sorted by id.
    """

    wanted = sorted({i for i in ids if i})
    frame = getattr(client, "frame", None)
    if callable(frame):
        try:
            listed = frame("PractitionerRole")
        except (NotFound, MethodNotAllowed):
            pass  # not served: read them one by one
        else:
            return roles_among(listed, wanted)
    records: list[Mapping[str, Any]] = []
    for rid in wanted[:limit]:
        try:
            records.append(client.read("PractitionerRole", rid))
        except NotFound:
            continue
        except ApiError:
            break
    return role_organizations(records)


def top_n(
    frame: pl.DataFrame,
    column: str,
    *,
    n: int = 8,
    weight: str | None = None,
    other: str = "Other",
) -> pl.DataFrame:
    """Keep the ``n`` largest groups of ``column`` and relabel the rest as ``other``.

    Charts stay readable (and small) at any practice size: eight lines and an
    "Other" line, rather than one line per practitioner of a large group.

    Parameters
    ----------
    frame, column
        Any frame, and its string label column.
    n
        How many labels to keep.
    weight
        Column summed to rank the labels; rows are counted when ``None``.
    other
        The label given to everything else.

    Returns
    -------
    pl.DataFrame
        ``frame`` with ``column`` relabelled (ties broken by label, so the result
        is deterministic).

    Examples
    --------
    >>> df = pl.DataFrame({"who": ["a", "a", "b", "c", "c", "c"]})
    >>> top_n(df, "who", n=2)["who"].to_list()
    ['a', 'a', 'Other', 'c', 'c', 'c']
    """
    size = pl.col(weight).sum() if weight is not None else pl.len()
    ranked = (
        frame.group_by(column)
        .agg(size.alias("_size"))
        .sort(["_size", column], descending=[True, False], nulls_last=True)
        .head(n)
    )
    keep = ranked[column].implode()
    return frame.with_columns(
        pl.when(pl.col(column).is_in(keep))
        .then(pl.col(column))
        .otherwise(pl.lit(other))
        .alias(column)
    )


def shown_of(total: int, shown: int, order: str = "") -> str:
    """Say whether a table shows every row or only the first ones.

    Parameters
    ----------
    total
        Rows the question has.
    shown
        Rows the table shows (``head(n)``).
    order
        What comes first when the table is cut, e.g. ``"most used first"``.

    Returns
    -------
    str
        ``"all 8 shown"`` when nothing is cut, else ``"15 of 29 shown, most used first"``.

    Examples
    --------
    >>> shown_of(29, 15, "most used first")
    '15 of 29 shown, most used first'
    >>> shown_of(8, 15)
    'all 8 shown'
    """
    if shown >= total:
        return f"all {total:,} shown"
    text = f"{shown:,} of {total:,} shown"
    return f"{text}, {order}" if order else text
