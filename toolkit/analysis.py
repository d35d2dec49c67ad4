"""Analysis logic shared by the notebooks, as Polars expressions over pmtk frames.

Every function takes eager :class:`polars.DataFrame` objects shaped like the flat
views of :mod:`toolkit.views` (``client.frame(...)`` / ``client.frames(...)``) and
returns a new frame; nothing here talks to a deployment, so each function can be
tested on a few hand-made rows.

The questions answered, by notebook:

* Referral utilisation -- :func:`referral_utilisation`, :func:`referral_recount`,
  :func:`referrals_needing_attention`, :func:`referring_practice`,
  :func:`referral_funder`, :func:`utilisation_summary`.
* Appointments and attendance -- :func:`appointment_visits`, :func:`weekly_volume`,
  :func:`attendance_rates`, :func:`lead_time_summary`, :func:`slot_utilisation`.
* Revenue -- :data:`PRICE_COMPONENT_SIGNS`, :func:`line_values`, :func:`revenue_by`,
  :func:`appointments_without_invoice_line`.
* Conformance -- :func:`report_checks`, :func:`report_summary`,
  :func:`report_observations`, :func:`compare_reports`.

Sign convention for invoice line price components (see :data:`PRICE_COMPONENT_SIGNS`):
``base``, ``surcharge`` and ``tax`` add to the billed value, ``deduction`` and
``discount`` reduce it, ``informational`` is not counted. The *magnitude* of the
amount is used, so a deployment that sends deductions as negative numbers and one
that sends them as positive numbers give the same net value.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl

__all__ = [
    "ATTENDANCE_OUTCOMES",
    "AU_STATE_ZONES",
    "COUNTRY_ZONES",
    "FINANCIAL_YEAR_STARTS",
    "PM_TIMEZONE",
    "PRICE_COMPONENT_SIGNS",
    "PracticeClock",
    "RecordReader",
    "appointment_visits",
    "appointments_without_invoice_line",
    "attendance_rates",
    "check_zone",
    "compare_reports",
    "currencies",
    "data_as_of",
    "financial_year",
    "financial_year_start",
    "lead_time_summary",
    "line_values",
    "local_times",
    "money_share",
    "organization_zones",
    "override_zone",
    "practice_clock",
    "practice_country",
    "practice_zone",
    "practitioner_names",
    "quantity_share",
    "read_roles",
    "reference_id",
    "referral_funder",
    "referral_recount",
    "referral_utilisation",
    "referrals_needing_attention",
    "referring_practice",
    "report_checks",
    "report_observations",
    "report_summary",
    "revenue_by",
    "revenue_total",
    "role_organizations",
    "role_zones",
    "row_counts",
    "single_currency",
    "slot_utilisation",
    "top_n",
    "utilisation_summary",
    "weekly_volume",
    "zone_for_address",
    "zone_label",
]

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

_STATUS_OUTCOME: dict[str, str] = {
    "attended": "attended",
    "cancelled": "cancelled",
    "noshow": "did not attend",
}


# --------------------------------------------------------------------------- helpers


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


def _ratio(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    """``numerator / denominator`` as a float, null where the denominator is null or 0."""
    return (
        pl.when(denominator.is_not_null() & (denominator != 0))
        .then(numerator.cast(pl.Float64) / denominator.cast(pl.Float64))
        .otherwise(None)
    )


def _units_used() -> pl.Expr:
    """Units a referral has used: ``quantityUsed + quantityOffset`` (nulls read as 0)."""
    return pl.col("limit_quantity_used").fill_null(0) + pl.col("limit_quantity_offset").fill_null(0)


def _as_dates(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
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


def _as_utc(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
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


def _utc(value: dt.datetime) -> dt.datetime:
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
    moment = _utc(now if now is not None else dt.datetime.now(dt.UTC))
    seen: list[dt.datetime] = []
    for frame in frames:
        if column in frame.columns and frame.height:
            latest = _as_utc(frame.select(column), column)[column].max()
            if isinstance(latest, dt.datetime):
                seen.append(_utc(latest))
    return min([moment, max(seen)]) if seen else moment


def practitioner_names(practitioner: pl.DataFrame) -> pl.DataFrame:
    """A readable name per practitioner: ``"<prefix> <given> <family>"``.

    Parameters
    ----------
    practitioner
        The practitioner frame (``id``, ``name_prefix``, ``name_given``, ``name_family``).

    Returns
    -------
    pl.DataFrame
        ``practitioner_id`` and ``practitioner`` (the id when there is no name).

    Examples
    --------
    >>> df = pl.DataFrame({"id": ["PR-1"], "name_prefix": [["Dr"]],
    ...                    "name_given": [["Ana", "Li"]], "name_family": ["Kim"]})
    >>> practitioner_names(df).row(0)
    ('PR-1', 'Dr Ana Li Kim')
    """
    parts = [
        pl.col(c).list.join(" ") if isinstance(practitioner.schema[c], pl.List) else pl.col(c)
        for c in ("name_prefix", "name_given", "name_family")
        if c in practitioner.columns
    ]
    name = pl.concat_str(parts, separator=" ", ignore_nulls=True).str.strip_chars()
    return practitioner.select(
        pl.col("id").alias("practitioner_id"),
        pl.when(name.str.len_chars() > 0).then(name).otherwise(pl.col("id")).alias("practitioner"),
    )


def role_organizations(roles: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """PractitionerRole records (as read one by one) as a frame of role -> organization.

    The API lists no PractitionerRole, so roles are read by id; this turns those
    JSON records into a frame :func:`referring_practice` and clinic look-ups can join.

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


def read_roles(client: RecordReader, ids: Iterable[str], *, limit: int = 500) -> pl.DataFrame:
    """Read PractitionerRoles by id and return :func:`role_organizations` of them.

    The spec lists no PractitionerRole endpoint, so a deployment may refuse these
    reads. A missing role (404) is skipped; any other refusal stops the look-ups
    (the deployment does not serve roles at all), and the frame holds what was
    read so far -- callers then fall back to grouping by the role id.

    Parameters
    ----------
    client
        A :class:`toolkit.Client` (or anything with ``read``).
    ids
        Role ids (``EP-...``, ``PR-...``); duplicates and nulls are ignored.
    limit
        At most this many roles are read (each read is one request).

    Returns
    -------
    pl.DataFrame
        ``id``, ``practitioner_id``, ``organization_id``.
    """
    from toolkit.errors import ApiError, NotFound

    records: list[Mapping[str, Any]] = []
    for rid in sorted({i for i in ids if i})[:limit]:
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
    frame
        Any frame with a string ``column``.
    column
        The label column.
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


# --------------------------------------------------------------------------- clock and calendar

PM_TIMEZONE = "PM_TIMEZONE"
"""Environment variable naming one IANA zone that overrides every clinic's own zone."""

AU_STATE_ZONES: dict[str, str] = {
    "NSW": "Australia/Sydney",
    "ACT": "Australia/Sydney",
    "VIC": "Australia/Melbourne",
    "TAS": "Australia/Hobart",
    "QLD": "Australia/Brisbane",
    "SA": "Australia/Adelaide",
    "NT": "Australia/Darwin",
    "WA": "Australia/Perth",
}
"""IANA zone of each Australian state and territory (QLD, NT and WA keep no daylight saving)."""

_AU_STATE_NAMES: dict[str, str] = {
    "NEW SOUTH WALES": "NSW",
    "AUSTRALIAN CAPITAL TERRITORY": "ACT",
    "VICTORIA": "VIC",
    "TASMANIA": "TAS",
    "QUEENSLAND": "QLD",
    "SOUTH AUSTRALIA": "SA",
    "NORTHERN TERRITORY": "NT",
    "WESTERN AUSTRALIA": "WA",
}

COUNTRY_ZONES: dict[str, str] = {"GB": "Europe/London", "NZ": "Pacific/Auckland"}
"""Zones chosen for countries whose tz database lists several (NZ: not the Chatham Islands)."""

FINANCIAL_YEAR_STARTS: dict[str, tuple[int, int]] = {"AU": (7, 1), "NZ": (4, 1), "GB": (4, 6)}
"""``(month, day)`` a country's financial (tax) year starts on; any other country: 1 January."""


def _country_zones() -> dict[str, list[str]]:
    """Zones per ISO 3166 country, from the tz database's ``zone.tab`` (tzdata package)."""
    from importlib import resources

    text = resources.files("tzdata").joinpath("zoneinfo", "zone.tab").read_text("utf-8")
    zones: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            code, _coords, name, *_ = line.split("\t")
            zones.setdefault(code.upper(), []).append(name)
    return zones


_ZONES_BY_COUNTRY: dict[str, list[str]] = {}


def check_zone(name: str, *, where: str = "tz") -> str:
    """``name`` if it is an IANA time zone; a :class:`~toolkit.errors.TimeZoneError` if not.

    Parameters
    ----------
    name
        A zone name such as ``"Australia/Sydney"``.
    where
        Where the name came from, for the error message (``"tz"``, ``"PM_TIMEZONE"``).

    Returns
    -------
    str
        The name, stripped of surrounding spaces.

    Examples
    --------
    >>> check_zone("Australia/Perth")
    'Australia/Perth'
    """
    import zoneinfo

    from toolkit.errors import TimeZoneError

    clean = name.strip() if isinstance(name, str) else ""
    try:
        # "UTC" and "Etc/..." are valid; a path-like or empty name is refused by zoneinfo
        zoneinfo.ZoneInfo(clean)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        msg = (
            f"{where}={name!r} is not an IANA time zone name; use a name such as "
            "'Australia/Sydney', 'Europe/London' or 'UTC'"
        )
        raise TimeZoneError(msg) from exc
    return clean


def override_zone(tz: str | None = None) -> str | None:
    """The zone that overrides every clinic's own: ``tz``, else ``PM_TIMEZONE``, else None.

    Parameters
    ----------
    tz
        An explicit zone (wins over the environment).

    Returns
    -------
    str or None
        A checked IANA zone name, or None when neither is set.
    """
    if tz is not None:
        return check_zone(tz, where="tz")
    env = os.environ.get(PM_TIMEZONE, "").strip()
    return check_zone(env, where=PM_TIMEZONE) if env else None


def zone_for_address(state: str | None, country: str | None, *, where: str = "address") -> str:
    """The IANA time zone of an address, from its Australian state or its country.

    Australian states and territories map by :data:`AU_STATE_ZONES` (abbreviation or
    full name); GB and NZ by :data:`COUNTRY_ZONES`; any other country by the tz
    database when it lists exactly one zone for it. A country with several zones
    (Australia without a state, the United States, Canada, ...) is an error: set
    ``PM_TIMEZONE`` or pass ``tz=``.

    Parameters
    ----------
    state
        The address ``state`` (``"QLD"``, ``"Western Australia"``); may be None.
    country
        The ISO 3166 two-letter ``country``.
    where
        What the address belongs to, for the error message (``"Organization CL-2001"``).

    Returns
    -------
    str
        An IANA zone name.

    Raises
    ------
    toolkit.errors.TimeZoneError
        When no single zone follows from the address.

    Examples
    --------
    >>> zone_for_address("QLD", "AU")
    'Australia/Brisbane'
    >>> zone_for_address(None, "gb")
    'Europe/London'
    >>> zone_for_address(None, "JP")
    'Asia/Tokyo'
    """
    from toolkit.errors import TimeZoneError

    code = (country or "").strip().upper()
    region = (state or "").strip().upper().replace(".", "")
    hint = "; set PM_TIMEZONE or pass tz= to choose the zone"
    if not code:
        msg = f"{where}: the address has no country, so its time zone is unknown{hint}"
        raise TimeZoneError(msg)
    if code == "AU":
        abbr = _AU_STATE_NAMES.get(region, region)
        if abbr in AU_STATE_ZONES:
            return AU_STATE_ZONES[abbr]
        shown = f"state {state!r}" if region else "no state"
        msg = (
            f"{where}: an Australian address with {shown} has no single time zone "
            f"(expected one of {', '.join(AU_STATE_ZONES)}){hint}"
        )
        raise TimeZoneError(msg)
    if code in COUNTRY_ZONES:
        return COUNTRY_ZONES[code]
    if not _ZONES_BY_COUNTRY:
        _ZONES_BY_COUNTRY.update(_country_zones())
    zones = _ZONES_BY_COUNTRY.get(code)
    if not zones:
        msg = f"{where}: country {country!r} is not an ISO 3166 code the tz database knows{hint}"
        raise TimeZoneError(msg)
    if len(zones) > 1:
        shown = ", ".join(zones[:4]) + (", ..." if len(zones) > 4 else "")
        msg = f"{where}: country {code} has {len(zones)} time zones ({shown}){hint}"
        raise TimeZoneError(msg)
    return zones[0]


def _address_rank() -> pl.Expr:
    """Lower is better: a physical work address describes where the clinic's day happens."""
    physical = pl.col("type").fill_null("").is_in(["physical", "both"])
    work = pl.col("use").fill_null("") == "work"
    postal_only = pl.col("use").fill_null("").is_in(["billing", "mailing"])
    return (
        pl.when(physical & work)
        .then(0)
        .when(physical & ~postal_only)
        .then(1)
        .when(~postal_only)
        .then(2)
        .otherwise(3)
    )


def organization_zones(
    organization: pl.DataFrame,
    address: pl.DataFrame,
    *,
    tz: str | None = None,
    prefixes: Sequence[str] = ("PG-", "CL-"),
) -> pl.DataFrame:
    """The time zone of the practice group and of each clinic, from their addresses.

    Each organization's best address is used: a physical ``work`` address first,
    then any physical one, then any not marked ``billing`` or ``mailing``. With
    ``tz=`` or ``PM_TIMEZONE`` set, every organization gets that zone and addresses
    are not read.

    Parameters
    ----------
    organization
        ``client.frames("Organization")["Organization"]`` (``id``, ``name``).
    address
        The ``organization_address`` child table (``organization_id``, ``use``,
        ``type``, ``state``, ``country``, ``index``).
    tz
        A zone for every organization, overriding addresses and ``PM_TIMEZONE``.
    prefixes
        Which organizations to place: the practice group and its clinics by default
        (funders and external practices need no zone).

    Returns
    -------
    pl.DataFrame
        ``organization_id``, ``organization`` (the name, else the id), ``time_zone``
        and ``zone_source`` (``"tz"``, ``"PM_TIMEZONE"`` or ``"address"``).

    Raises
    ------
    toolkit.errors.TimeZoneError
        When an organization's address gives no single zone (the message names it);
        an organization with no address at all is left out instead, so that a
        caller falls back to the practice's zone.
    """
    chosen = override_zone(tz)
    source = "tz" if tz is not None else PM_TIMEZONE
    wanted = organization.filter(
        pl.any_horizontal(pl.col("id").str.starts_with(p) for p in prefixes)
    ).select(
        pl.col("id").alias("organization_id"),
        pl.coalesce(pl.col("name"), pl.col("id")).alias("organization"),
    )
    schema = {
        "organization_id": pl.String,
        "organization": pl.String,
        "time_zone": pl.String,
        "zone_source": pl.String,
    }
    if chosen is not None:
        return wanted.with_columns(
            pl.lit(chosen).alias("time_zone"), pl.lit(source).alias("zone_source")
        ).cast(schema)  # type: ignore[arg-type]
    best = (
        address.with_columns(_address_rank().alias("_rank"))
        .sort(["organization_id", "_rank", "index"])
        .unique("organization_id", keep="first", maintain_order=True)
        .select("organization_id", "state", "country")
    )
    rows = []
    for org_id, name, state, country in wanted.join(
        best, on="organization_id", how="inner"
    ).iter_rows():
        zone = zone_for_address(state, country, where=f"Organization {org_id}")
        rows.append((org_id, name, zone, "address"))
    return pl.DataFrame(rows, schema=schema, orient="row").sort("organization_id")


def practice_zone(zones: pl.DataFrame) -> str:
    """One zone for the whole practice, for records that belong to no clinic.

    The practice group's (``PG-``) zone when it is known, else the clinics' zone
    when they all share one.

    Parameters
    ----------
    zones
        The output of :func:`organization_zones`.

    Returns
    -------
    str
        An IANA zone name.

    Raises
    ------
    toolkit.errors.TimeZoneError
        When the group has no zone and its clinics are in several (or none).

    Examples
    --------
    >>> z = pl.DataFrame({"organization_id": ["CL-1", "CL-2"],
    ...                   "time_zone": ["Australia/Perth", "Australia/Perth"]})
    >>> practice_zone(z)
    'Australia/Perth'
    """
    from toolkit.errors import TimeZoneError

    group = zones.filter(pl.col("organization_id").str.starts_with("PG-"))["time_zone"]
    if group.len() and group[0] is not None:
        return str(group[0])
    distinct = sorted(zones["time_zone"].drop_nulls().unique().to_list())
    if len(distinct) == 1:
        return str(distinct[0])
    found = ", ".join(distinct) if distinct else "none"
    msg = (
        "the practice group has no address to take a time zone from, and its clinics are in "
        f"{len(distinct)} zones ({found}); set PM_TIMEZONE or pass tz="
    )
    raise TimeZoneError(msg)


def practice_country(organization: pl.DataFrame, address: pl.DataFrame) -> str | None:
    """The practice group's country (ISO 3166), else its clinics' when they agree.

    Parameters
    ----------
    organization
        The Organization frame (``id``).
    address
        The ``organization_address`` child table.

    Returns
    -------
    str or None
        An upper-case two-letter code, or None when unknown or ambiguous.
    """
    best = (
        address.with_columns(_address_rank().alias("_rank"))
        .sort(["organization_id", "_rank", "index"])
        .unique("organization_id", keep="first", maintain_order=True)
        .filter(pl.col("organization_id").is_in(organization["id"].implode()))
        .select("organization_id", pl.col("country").str.strip_chars().str.to_uppercase())
    )
    group = best.filter(pl.col("organization_id").str.starts_with("PG-"))["country"].drop_nulls()
    if group.len():
        return str(group[0])
    clinics = best.filter(pl.col("organization_id").str.starts_with("CL-"))["country"]
    distinct = clinics.drop_nulls().unique().to_list()
    return str(distinct[0]) if len(distinct) == 1 else None


def role_zones(
    roles: pl.DataFrame, zones: pl.DataFrame, *, default: str | None = None
) -> pl.DataFrame:
    """Each PractitionerRole's clinic and time zone: role -> organization -> address.

    An appointment names its practitioner through a PractitionerRole, and a role is
    held at one clinic (``PractitionerRole.organization``), so this is the join that
    places an appointment in its clinic's zone.

    Parameters
    ----------
    roles
        ``id``, ``organization_id`` (:func:`read_roles` or :func:`role_organizations`).
    zones
        The output of :func:`organization_zones`.
    default
        Zone of roles whose organization has no zone (:func:`practice_zone`); those
        roles keep a null zone when None.

    Returns
    -------
    pl.DataFrame
        ``practitioner_id`` (the role id, as in :func:`appointment_visits`),
        ``person_id`` (the role's Practitioner), ``clinic_id``, ``clinic`` and
        ``time_zone``.
    """
    person = (
        reference_id("practitioner_id")
        if "practitioner_id" in roles.columns
        else pl.lit(None, dtype=pl.String)
    )
    out = roles.select(
        pl.col("id").alias("practitioner_id"),
        person.alias("person_id"),
        reference_id("organization_id").alias("clinic_id"),
    ).join(
        zones.select(
            pl.col("organization_id").alias("clinic_id"),
            pl.col("organization").alias("clinic"),
            "time_zone",
        ),
        on="clinic_id",
        how="left",
    )
    fill = pl.lit(default, dtype=pl.String)
    return out.with_columns(
        pl.coalesce("clinic", "clinic_id").alias("clinic"),
        pl.col("time_zone").fill_null(fill),
    ).unique("practitioner_id", keep="first", maintain_order=True)


def zone_label(frame: pl.DataFrame, zone_column: str = "time_zone") -> str:
    """Which clock a chart of ``frame`` shows, for its title: one zone, or each clinic's.

    Examples
    --------
    >>> zone_label(pl.DataFrame({"time_zone": ["Australia/Perth"]}))
    'Australia/Perth time'
    >>> zone_label(pl.DataFrame({"time_zone": ["Australia/Perth", "Australia/Sydney"]}))
    "each clinic's local time (Australia/Perth, Australia/Sydney)"
    """
    found = sorted(str(z) for z in frame[zone_column].drop_nulls().unique().to_list())
    if len(found) == 1:
        return f"{found[0]} time"
    return f"each clinic's local time ({', '.join(found)})" if found else "no time zone"


@dataclass(frozen=True, slots=True)
class PracticeClock:
    """Where a practice keeps time: each clinic's zone, a default, its financial year.

    Built by :func:`practice_clock`; pass ``roles`` and ``default_zone`` to
    :func:`appointment_visits` and ``fy_start`` to :func:`financial_year`.
    """

    zones: pl.DataFrame
    """:func:`organization_zones` of the practice group and its clinics."""
    roles: pl.DataFrame
    """:func:`role_zones`: each PractitionerRole's clinic and zone."""
    default_zone: str
    """:func:`practice_zone`: for records that belong to no known clinic."""
    country: str | None
    """The practice's ISO 3166 country (:func:`practice_country`)."""
    fy_start: tuple[int, int]
    """``(month, day)`` the financial year starts on (:func:`financial_year_start`)."""


def practice_clock(
    client: RecordReader,
    organization: pl.DataFrame,
    address: pl.DataFrame,
    role_ids: Iterable[str] = (),
    *,
    tz: str | None = None,
    country: str | None = None,
) -> PracticeClock:
    """Each clinic's zone, the practice's default zone and its financial year, in one call.

    Reads the PractitionerRoles ``role_ids`` (:func:`read_roles`: one request each,
    so pass only the roles that appear in the data) to learn which clinic each
    practitioner works at.

    Parameters
    ----------
    client
        A :class:`toolkit.Client`.
    organization, address
        ``client.frames("Organization")`` tables ``Organization`` and
        ``organization_address``.
    role_ids
        PractitionerRole ids (``PR-...``) named by appointments.
    tz
        One zone for everything (else ``PM_TIMEZONE``, else the addresses).
    country
        The country whose financial year applies (else the practice group's).

    Returns
    -------
    PracticeClock
    """
    zones = organization_zones(organization, address, tz=tz)
    default = practice_zone(zones)
    roles = role_zones(read_roles(client, role_ids), zones, default=default)
    where = country or practice_country(organization, address)
    return PracticeClock(zones, roles, default, where, financial_year_start(where))


def local_times(
    frame: pl.DataFrame,
    column: str,
    *,
    tz: str | None = None,
    zone_column: str = "time_zone",
    prefix: str = "",
) -> pl.DataFrame:
    """Calendar fields of an instant column, read on the wall clock of each row's zone.

    Rows are converted zone by zone (a Polars datetime column holds one zone), so
    appointments of a Sydney and a Perth clinic in one frame are each read in their
    own. Around daylight-saving changes the fields follow the local clock: an
    appointment at 01:30 UTC on 2026-10-25 is at 01:30 GMT in London, the second
    01:30 of that night.

    Parameters
    ----------
    frame
        A frame with the instant ``column`` (zoned, naive read as UTC, or ISO text).
    column
        The instant to read, for example ``"start"`` or ``"entered_date"``.
    tz
        One zone for every row (also ``PM_TIMEZONE``). Without it the zone of each
        row is taken from ``zone_column``.
    zone_column
        Column of IANA zone names per row; written with ``tz`` when that is given.
    prefix
        Put before each added column name (``"booked_"`` gives ``booked_date``, ...).

    Returns
    -------
    pl.DataFrame
        ``frame`` (in its order) plus ``{prefix}local`` (naive wall-clock datetime),
        ``{prefix}date``, ``{prefix}week`` (Monday of the local week),
        ``{prefix}month`` (first day of the local month), ``{prefix}weekday``
        (``Mon`` ... ``Sun``), ``{prefix}weekday_number`` (1 = Monday) and
        ``{prefix}hour`` (0-23), and ``zone_column``.

    Raises
    ------
    toolkit.errors.TimeZoneError
        When no zone is given and a row has none (the message counts them and shows
        a few ids), or a zone name is unknown.

    Examples
    --------
    >>> f = pl.DataFrame({"start": [dt.datetime(2026, 1, 15, 23, 30, tzinfo=dt.UTC)]})
    >>> local_times(f, "start", tz="Australia/Sydney").select("date", "hour").row(0)
    (datetime.date(2026, 1, 16), 10)
    """
    from toolkit.errors import TimeZoneError

    chosen = override_zone(tz)
    out = _as_utc(frame, column).with_row_index("_row")
    if chosen is not None:
        out = out.with_columns(pl.lit(chosen, dtype=pl.String).alias(zone_column))
    elif zone_column not in out.columns:
        msg = (
            f"no time zone to read {column!r} in: give each row a {zone_column!r} "
            "(organization_zones / role_zones), set PM_TIMEZONE, or pass tz= "
            "(tz='UTC' keeps UTC)"
        )
        raise TimeZoneError(msg)
    missing = out.filter(pl.col(zone_column).is_null() & pl.col(column).is_not_null())
    if missing.height:
        ids = missing["id"].head(3).to_list() if "id" in missing.columns else []
        shown = f" (for example {', '.join(map(str, ids))})" if ids else ""
        msg = (
            f"{missing.height} rows have a {column!r} but no {zone_column!r}{shown}; "
            "give their clinic an address, set PM_TIMEZONE, or pass tz="
        )
        raise TimeZoneError(msg)
    for zone in out[zone_column].drop_nulls().unique().to_list():
        check_zone(str(zone), where=zone_column)
    wall = f"{prefix}local"
    parts = []
    for zone, part in out.group_by(zone_column, maintain_order=True):
        name = zone[0]
        instant = pl.col(column)
        if name is not None:
            instant = instant.dt.convert_time_zone(str(name))
        parts.append(part.with_columns(instant.dt.replace_time_zone(None).alias(wall)))
    if not parts:
        parts = [out.with_columns(pl.lit(None, dtype=pl.Datetime("us")).alias(wall))]
    local = pl.col(wall)
    return (
        pl.concat(parts, how="vertical")
        .sort("_row")
        .drop("_row")
        .with_columns(
            local.dt.date().alias(f"{prefix}date"),
            local.dt.truncate("1w").dt.date().alias(f"{prefix}week"),
            local.dt.month_start().dt.date().alias(f"{prefix}month"),
            local.dt.strftime("%a").alias(f"{prefix}weekday"),
            local.dt.weekday().alias(f"{prefix}weekday_number"),
            local.dt.hour().alias(f"{prefix}hour"),
        )
    )


def financial_year_start(country: str | None) -> tuple[int, int]:
    """``(month, day)`` on which the financial year starts in ``country``.

    AU 1 July, NZ 1 April, GB 6 April (the UK tax year), any other (or unknown)
    country 1 January (:data:`FINANCIAL_YEAR_STARTS`).

    Examples
    --------
    >>> financial_year_start("au"), financial_year_start("DE")
    ((7, 1), (1, 1))
    """
    return FINANCIAL_YEAR_STARTS.get((country or "").strip().upper(), (1, 1))


def financial_year(column: str | pl.Expr, *, start: tuple[int, int] = (7, 1)) -> pl.Expr:
    """The financial year of a local date, labelled as a practice writes it.

    A year starting on 1 July 2025 is ``FY2025-26``; a calendar financial year
    (``start=(1, 1)``) is labelled by its year alone, ``FY2026``. Labels sort in
    time order.

    Parameters
    ----------
    column
        A ``pl.Date`` column (a local date: see :func:`local_times`).
    start
        ``(month, day)`` the year starts on (:func:`financial_year_start`).

    Returns
    -------
    pl.Expr
        A string expression; null stays null.

    Examples
    --------
    >>> f = pl.DataFrame({"d": [dt.date(2026, 6, 30), dt.date(2026, 7, 1)]})
    >>> f.select(financial_year("d"))["d"].to_list()
    ['FY2025-26', 'FY2026-27']
    >>> f.select(financial_year("d", start=(1, 1)))["d"].to_list()
    ['FY2026', 'FY2026']
    """
    month, day = start
    dt.date(2001, month, day)  # refuses an impossible start such as (2, 30)
    date = pl.col(column) if isinstance(column, str) else column
    before = (date.dt.month() < month) | ((date.dt.month() == month) & (date.dt.day() < day))
    first = date.dt.year().cast(pl.Int64) - before.cast(pl.Int64)
    if start == (1, 1):
        return pl.format("FY{}", first)
    tail = ((first + 1) % 100).cast(pl.String).str.zfill(2)
    return pl.format("FY{}-{}", first, tail)


def currencies(
    frame: pl.DataFrame, column: str = "currency", value: str | None = None
) -> list[str]:
    """The distinct currencies of ``frame``, sorted; a missing one shows as ``"(none)"``.

    Rows whose ``value`` is zero or null carry no amount, so their missing currency
    is ignored (an invoice line without price components, for example).

    Parameters
    ----------
    frame
        Any frame with a currency column.
    column
        The ISO 4217 currency column.
    value
        Optional amount column; see above.

    Returns
    -------
    list of str

    Examples
    --------
    >>> currencies(pl.DataFrame({"currency": ["AUD", None, "AUD"]}))
    ['(none)', 'AUD']
    """
    rows = frame
    if value is not None:
        rows = frame.filter(pl.col(column).is_not_null() | (pl.col(value).fill_null(0) != 0))
    found = rows[column].fill_null("(none)").unique().to_list()
    return sorted(str(c) for c in found)


def single_currency(
    frame: pl.DataFrame, column: str = "currency", *, value: str | None = None, what: str = "total"
) -> str | None:
    """The one currency of ``frame``; a :class:`~toolkit.errors.MixedCurrencyError` if several.

    Parameters
    ----------
    frame
        Any frame with a currency column.
    column
        The currency column.
    value
        Optional amount column: rows with no amount do not count (see :func:`currencies`).
    what
        What was asked for, for the error message.

    Returns
    -------
    str or None
        The currency, or None when the frame holds no amount or no currency.

    Raises
    ------
    toolkit.errors.MixedCurrencyError
        When more than one currency (or a currency and a missing one) is present.
    """
    from toolkit.errors import MixedCurrencyError

    found = currencies(frame, column, value)
    if len(found) > 1:
        msg = (
            f"a single {what} was asked of amounts in {len(found)} currencies "
            f"({', '.join(found)}); amounts are never added across currencies: "
            f"group by {column!r} instead"
        )
        raise MixedCurrencyError(msg, found)
    return None if not found or found[0] == "(none)" else found[0]


# --------------------------------------------------------------------------- referrals


def quantity_share() -> pl.Expr:
    """Share of a referral's appointment limit used: ``(used + offset) / quantity``.

    Prior units counted into the referral (``limit_quantity_offset``) count as used.
    Null where the referral has no quantity limit (null or 0); a missing used or
    offset count reads as 0.

    Returns
    -------
    pl.Expr
        Float expression named ``quantity_share``.
    """
    used = _units_used()
    return _ratio(used, pl.col("limit_quantity")).alias("quantity_share")


def money_share() -> pl.Expr:
    """Share of a referral's money limit used: ``amountUsed / amount.value``.

    Both amounts are in the referral's own currency (``limit_money_currency``), so
    the share needs no conversion. Null where there is no money limit.

    Returns
    -------
    pl.Expr
        Float expression named ``money_share``.
    """
    used = pl.col("limit_money_used").fill_null(0)
    return _ratio(used, pl.col("limit_money_value")).alias("money_share")


def referral_utilisation(referral: pl.DataFrame) -> pl.DataFrame:
    """Per referral, the share used of its appointment limit and of its money limit.

    Parameters
    ----------
    referral
        The referral frame (``client.frame("Referral")``).

    Returns
    -------
    pl.DataFrame
        The referral columns plus ``quantity_share``, ``money_share``,
        ``quantity_remaining``, ``money_remaining`` and ``share`` (the larger of
        the two shares: how close the referral is to running out).
    """
    used = _units_used()
    return referral.with_columns(
        quantity_share(),
        money_share(),
        (pl.col("limit_quantity") - used).alias("quantity_remaining"),
        (pl.col("limit_money_value") - pl.col("limit_money_used").fill_null(0)).alias(
            "money_remaining"
        ),
    ).with_columns(pl.max_horizontal("quantity_share", "money_share").alias("share"))


def _participants(participant: pl.DataFrame) -> pl.DataFrame:
    """One row per appointment: practitioner, patient and the status that decides the outcome.

    The patient participant's status is preferred (it says whether the patient came);
    the practitioner participant's status is the fallback.
    """
    p = participant.with_columns(
        reference_id("actor_id").alias("_actor"),
        pl.col("actor_type").fill_null("").alias("_kind"),
    )
    is_patient = pl.col("_kind") == "Patient"
    is_practitioner = pl.col("_kind").is_in(["PractitionerRole", "Practitioner"])
    return p.group_by("appointment_id").agg(
        pl.col("_actor").filter(is_practitioner).first().alias("practitioner_id"),
        pl.col("_actor").filter(is_patient).first().alias("patient_id"),
        pl.coalesce(
            pl.col("status").filter(is_patient).first(),
            pl.col("status").filter(is_practitioner).first(),
        ).alias("status"),
        pl.col("invoice_id").drop_nulls().first().alias("invoice_id"),
    )


def appointment_visits(
    appointment: pl.DataFrame,
    participant: pl.DataFrame,
    *,
    now: dt.datetime,
    tz: str | None = None,
    zones: pl.DataFrame | None = None,
    default_zone: str | None = None,
) -> pl.DataFrame:
    """One row per appointment with its practitioner, patient, outcome and local time.

    Week, weekday, hour and dates are read on the clock of the appointment's clinic:
    ``tz=`` (or ``PM_TIMEZONE``) puts every appointment in one zone; otherwise
    ``zones`` gives each practitioner role its clinic's zone (:func:`role_zones`),
    and ``default_zone`` covers appointments whose role is not in it.

    Parameters
    ----------
    appointment
        The appointment frame (``id``, ``start``, ``end``, ``created``, ...).
    participant
        The ``appointment_participant`` child table (``appointment_id``,
        ``actor_id``, ``actor_type``, ``status``, ``invoice_id``).
    now
        The moment that separates past appointments from upcoming ones.
    tz
        One IANA zone for every appointment; wins over ``PM_TIMEZONE`` and ``zones``.
        ``tz="UTC"`` reads everything in UTC.
    zones
        ``practitioner_id`` (the PractitionerRole id) and ``time_zone``, plus any
        columns to carry along (``clinic_id``, ``clinic``): :func:`role_zones`.
    default_zone
        Zone of appointments with no role in ``zones`` (:func:`practice_zone`).

    Returns
    -------
    pl.DataFrame
        The appointment columns plus ``practitioner_id``, ``patient_id``,
        ``status``, ``invoice_id``, ``outcome`` (one of
        :data:`ATTENDANCE_OUTCOMES`), ``is_past``, ``time_zone``, ``local``
        (wall-clock start), ``date``, ``week`` (Monday of the local week),
        ``month``, ``weekday`` (``Mon`` ... ``Sun``), ``weekday_number``, ``hour``,
        ``booked_date`` (local day the appointment was created), ``lead_time_days``
        (start minus created, in days) and ``booked_days_ahead`` (local calendar
        days from booking to appointment; 0 is a same-day booking).

    Raises
    ------
    toolkit.errors.TimeZoneError
        When an appointment has no zone (no ``tz``, ``PM_TIMEZONE``, matching role
        or ``default_zone``), or a zone name is unknown.
    """
    moment = _utc(now)
    people = _participants(participant)
    times = [c for c in ("start", "end", "created") if c in appointment.columns]
    visits = _as_utc(appointment, *times).join(
        people, left_on="id", right_on="appointment_id", how="left"
    )
    chosen = override_zone(tz)
    if chosen is None and zones is not None:
        carried = zones.unique("practitioner_id", keep="first", maintain_order=True)
        extra = [c for c in carried.columns if c != "practitioner_id" and c in visits.columns]
        visits = visits.drop(extra).join(carried, on="practitioner_id", how="left")
    if chosen is None and default_zone is not None:
        fill = pl.lit(check_zone(default_zone, where="default_zone"), dtype=pl.String)
        if "time_zone" in visits.columns:
            visits = visits.with_columns(pl.col("time_zone").fill_null(fill))
        else:
            visits = visits.with_columns(fill.alias("time_zone"))
    visits = local_times(visits, "start", tz=chosen)
    if "created" in visits.columns:
        visits = local_times(visits, "created", tz=chosen, prefix="_c_")
        scratch = [c for c in visits.columns if c.startswith("_c_") and c != "_c_date"]
        visits = visits.drop(scratch).rename({"_c_date": "booked_date"})
    else:
        visits = visits.with_columns(pl.lit(None, dtype=pl.Date).alias("booked_date"))
    known = pl.col("status").replace_strict(_STATUS_OUTCOME, default=None, return_dtype=pl.String)
    is_past = pl.col("start") < pl.lit(moment)
    created = pl.col("created") if "created" in visits.columns else pl.lit(None, pl.Datetime)
    return visits.with_columns(
        is_past.alias("is_past"),
        pl.when(known.is_not_null())
        .then(known)
        .when(is_past)
        .then(pl.lit("unrecorded"))
        .otherwise(pl.lit("upcoming"))
        .alias("outcome"),
        ((pl.col("start") - created).dt.total_seconds() / 86_400.0).alias("lead_time_days"),
        (pl.col("date") - pl.col("booked_date")).dt.total_days().alias("booked_days_ahead"),
    )


def referral_recount(
    referral: pl.DataFrame,
    visits: pl.DataFrame,
) -> pl.DataFrame:
    """Recount each referral's used appointments from the appointments themselves.

    An appointment counts against a referral when it is for the referral's patient
    (``subject_id``), with the referral's practitioner (``performer_id``; a
    PractitionerRole ``PR-<id>`` matches the Practitioner ``PR-<id>``), and starts
    within the referral period. Attended and did-not-attend appointments always
    count; cancelled ones count only when ``include_cancelled_appointment`` is true.

    Parameters
    ----------
    referral
        The referral frame.
    visits
        The output of :func:`appointment_visits`.

    Returns
    -------
    pl.DataFrame
        One row per referral: ``id``, ``include_cancelled_appointment``,
        ``limit_quantity``, ``limit_quantity_offset``, ``limit_quantity_used``,
        ``attended``, ``did_not_attend``, ``cancelled``, ``used_excluding_cancelled``,
        ``used_including_cancelled``, ``recounted_used`` (by the referral's own
        flag), ``share_excluding_cancelled``, ``share_including_cancelled``,
        ``beyond_limit`` (recounted units past the limit, null without a limit) and
        ``covered_used`` (recounted units the limit absorbs: comparable with the
        deployment's ``limit_quantity_used``, which stops at the limit).
    """
    refs = _as_dates(referral, "period_start", "period_end").select(
        "id",
        reference_id("subject_id").alias("_patient"),
        reference_id("performer_id").alias("_practitioner"),
        pl.col("period_start").alias("_from"),
        pl.col("period_end").alias("_to"),
        "include_cancelled_appointment",
        "limit_quantity",
        "limit_quantity_offset",
        "limit_quantity_used",
    )
    appts = visits.filter(pl.col("is_past")).select(
        reference_id("patient_id").alias("_patient"),
        reference_id("practitioner_id").alias("_practitioner"),
        # the local day of the appointment, as the practice wrote the referral dates
        (pl.col("date") if "date" in visits.columns else pl.col("start").dt.date()).alias("_day"),
        "outcome",
    )
    matched = (
        refs.select("id", "_patient", "_practitioner", "_from", "_to")
        .join(appts, on=["_patient", "_practitioner"], how="inner")
        .filter(
            (pl.col("_from").is_null() | (pl.col("_day") >= pl.col("_from")))
            & (pl.col("_to").is_null() | (pl.col("_day") <= pl.col("_to")))
        )
        .group_by("id")
        .agg(
            (pl.col("outcome") == "attended").sum().alias("attended"),
            (pl.col("outcome") == "did not attend").sum().alias("did_not_attend"),
            (pl.col("outcome") == "cancelled").sum().alias("cancelled"),
        )
    )
    counts = ["attended", "did_not_attend", "cancelled"]
    out = (
        refs.drop("_patient", "_practitioner", "_from", "_to")
        .join(matched, on="id", how="left")
        .with_columns(pl.col(c).fill_null(0).cast(pl.Int64) for c in counts)
        .with_columns(
            (pl.col("attended") + pl.col("did_not_attend")).alias("used_excluding_cancelled"),
        )
        .with_columns(
            (pl.col("used_excluding_cancelled") + pl.col("cancelled")).alias(
                "used_including_cancelled"
            ),
        )
    )
    offset = pl.col("limit_quantity_offset").fill_null(0)
    return (
        out.with_columns(
            pl.when(pl.col("include_cancelled_appointment").fill_null(False))
            .then(pl.col("used_including_cancelled"))
            .otherwise(pl.col("used_excluding_cancelled"))
            .alias("recounted_used"),
            _ratio(pl.col("used_excluding_cancelled") + offset, pl.col("limit_quantity")).alias(
                "share_excluding_cancelled"
            ),
            _ratio(pl.col("used_including_cancelled") + offset, pl.col("limit_quantity")).alias(
                "share_including_cancelled"
            ),
        )
        .with_columns(
            pl.max_horizontal(
                pl.col("recounted_used") + offset - pl.col("limit_quantity"), pl.lit(0)
            ).alias("beyond_limit"),
        )
        .with_columns(
            (pl.col("recounted_used") - pl.col("beyond_limit").fill_null(0)).alias("covered_used"),
        )
    )


def referrals_needing_attention(
    utilisation: pl.DataFrame,
    *,
    today: dt.date,
    threshold: float = 0.8,
    within_days: int = 30,
) -> pl.DataFrame:
    """Active referrals that are nearly used up or about to expire.

    Parameters
    ----------
    utilisation
        The output of :func:`referral_utilisation`.
    today
        The day the question is asked.
    threshold
        A referral whose quantity or money share is at least this is "nearly used up".
    within_days
        A referral whose period ends within this many days from ``today``
        (inclusive, and not already ended) is "expiring".

    Returns
    -------
    pl.DataFrame
        The active referrals that qualify, with ``nearly_used_up``, ``expiring``,
        ``days_left`` and a readable ``reason``, most urgent first.
    """
    days_left = (pl.col("period_end") - pl.lit(today)).dt.total_days()
    nearly = pl.col("share").fill_null(0.0) >= threshold
    expiring = days_left.is_between(0, within_days) & days_left.is_not_null()
    flagged = (
        _as_dates(utilisation, "period_end")
        .with_columns(
            nearly.alias("nearly_used_up"),
            expiring.fill_null(False).alias("expiring"),
            days_left.alias("days_left"),
        )
        .filter(pl.col("active").fill_null(False) & (pl.col("nearly_used_up") | pl.col("expiring")))
    )
    reason = pl.concat_str(
        pl.when(pl.col("nearly_used_up"))
        .then(pl.format("{}% used", (pl.col("share") * 100).round(0).cast(pl.Int64)))
        .otherwise(None),
        pl.when(pl.col("expiring"))
        .then(pl.format("ends in {} days", pl.col("days_left")))
        .otherwise(None),
        separator="; ",
        ignore_nulls=True,
    )
    return flagged.with_columns(reason.alias("reason")).sort(
        ["days_left", "share"], descending=[False, True], nulls_last=True
    )


def referring_practice(
    referral: pl.DataFrame,
    practitioner_role: pl.DataFrame | None = None,
    organization: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Attach the referring practice to each referral.

    The requester is a PractitionerRole ``EP-<id>``; when the role frame is given and
    names an ``SP-`` organization, that practice (and its name, when the organization
    frame is given) is used. Otherwise the referral is grouped by the requester id.

    Parameters
    ----------
    referral
        Referral frame (or the output of :func:`referral_utilisation`).
    practitioner_role
        Optional frame with ``id`` and ``organization_id``.
    organization
        Optional frame with ``id`` and ``name``.

    Returns
    -------
    pl.DataFrame
        The input plus ``requester`` (the EP- id), ``practice_id`` (SP- id or null)
        and ``referring_practice`` (practice name, else practice id, else requester).
    """
    out = referral.with_columns(reference_id("requester_id").alias("requester"))
    out = out.with_columns(pl.lit(None, dtype=pl.String).alias("practice_id"))
    if practitioner_role is not None and "organization_id" in practitioner_role.columns:
        roles = practitioner_role.select(
            pl.col("id").alias("requester"),
            reference_id("organization_id").alias("_practice"),
        ).unique("requester", keep="first")
        out = (
            out.join(roles, on="requester", how="left")
            .with_columns(
                pl.when(pl.col("_practice").str.starts_with("SP-"))
                .then(pl.col("_practice"))
                .otherwise(None)
                .alias("practice_id")
            )
            .drop("_practice")
        )
    label = pl.coalesce("practice_id", "requester")
    if organization is not None and "name" in organization.columns:
        names = organization.select(pl.col("id").alias("practice_id"), pl.col("name").alias("_n"))
        out = out.join(names, on="practice_id", how="left")
        label = pl.coalesce("_n", "practice_id", "requester")
        return out.with_columns(label.alias("referring_practice")).drop("_n")
    return out.with_columns(label.alias("referring_practice"))


def referral_funder(
    referral: pl.DataFrame,
    coverage: pl.DataFrame,
    organization: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Attach the funder (the coverage's ``payor`` organization) to each referral.

    Parameters
    ----------
    referral
        Referral frame (or the output of :func:`referral_utilisation`).
    coverage
        Coverage frame with ``id`` and ``payor_id``.
    organization
        Optional organization frame with ``id`` and ``name``, for readable labels.

    Returns
    -------
    pl.DataFrame
        The input plus ``funder_id`` (an ``FD-``/``OG-`` id, or null when the payor is
        a patient or the coverage is unknown) and ``funder`` (name, else id, else
        ``"(no funder)"``).
    """
    payors = coverage.select(
        pl.col("id").alias("_coverage"),
        reference_id("payor_id").alias("_payor"),
    )
    out = (
        referral.with_columns(reference_id("coverage_id").alias("_coverage"))
        .join(payors, on="_coverage", how="left")
        .with_columns(
            pl.when(pl.col("_payor").str.contains(r"^(FD|OG)-"))
            .then(pl.col("_payor"))
            .otherwise(None)
            .alias("funder_id")
        )
        .drop("_coverage", "_payor")
    )
    label = pl.coalesce("funder_id", pl.lit("(no funder)"))
    if organization is not None and "name" in organization.columns:
        names = organization.select(pl.col("id").alias("funder_id"), pl.col("name").alias("_n"))
        out = out.join(names, on="funder_id", how="left")
        label = pl.coalesce("_n", "funder_id", pl.lit("(no funder)"))
        return out.with_columns(label.alias("funder")).drop("_n")
    return out.with_columns(label.alias("funder"))


def utilisation_summary(utilisation: pl.DataFrame, by: str | Sequence[str]) -> pl.DataFrame:
    """Referral utilisation rolled up by a grouping column (practice, funder, ...).

    Quantity shares are pooled (total used over total limit), so a group's share is
    not skewed by referrals with tiny limits. Money is summed per group, so when
    referrals carry more than one currency ``limit_money_currency`` must be in
    ``by``; otherwise :class:`~toolkit.errors.MixedCurrencyError` is raised.

    Parameters
    ----------
    utilisation
        The output of :func:`referral_utilisation` with the grouping column(s).
    by
        Column name(s) to group by.

    Returns
    -------
    pl.DataFrame
        ``by`` plus ``referrals``, ``active``, ``units_limit``, ``units_used``,
        ``quantity_share``, ``money_limit``, ``money_used``, ``money_share``, sorted
        by number of referrals (descending).
    """
    keys = [by] if isinstance(by, str) else list(by)
    if "limit_money_currency" in utilisation.columns and "limit_money_currency" not in keys:
        # money limits are summed per group: one group must not add AUD to NZD
        single_currency(
            utilisation,
            "limit_money_currency",
            value="limit_money_value",
            what="money limit per group",
        )
    used = _units_used()
    has_limit = pl.col("limit_quantity").is_not_null()
    has_money = pl.col("limit_money_value").is_not_null()
    return (
        utilisation.group_by(keys)
        .agg(
            pl.len().alias("referrals"),
            pl.col("active").fill_null(False).sum().alias("active"),
            pl.col("limit_quantity").sum().alias("units_limit"),
            used.filter(has_limit).sum().alias("units_used"),
            pl.col("limit_money_value").sum().alias("money_limit"),
            pl.col("limit_money_used").fill_null(0).filter(has_money).sum().alias("money_used"),
        )
        .with_columns(
            _ratio(pl.col("units_used"), pl.col("units_limit")).alias("quantity_share"),
            _ratio(pl.col("money_used"), pl.col("money_limit")).alias("money_share"),
        )
        .sort(["referrals", *keys], descending=[True, *([False] * len(keys))])
    )


# --------------------------------------------------------------------------- appointments


def weekly_volume(visits: pl.DataFrame, by: str | Sequence[str] = ()) -> pl.DataFrame:
    """Appointments per week (Monday start), optionally per practitioner, clinic, ...

    Cancelled appointments are counted separately from the ones that took (or will
    take) place.

    Parameters
    ----------
    visits
        The output of :func:`appointment_visits`.
    by
        Extra grouping column(s).

    Returns
    -------
    pl.DataFrame
        ``week``, ``by`` columns, ``appointments`` (all), ``booked`` (not cancelled)
        and ``cancelled``, sorted by week.
    """
    keys = ["week", *([by] if isinstance(by, str) else list(by))]
    cancelled = pl.col("outcome") == "cancelled"
    return (
        visits.group_by(keys)
        .agg(
            pl.len().alias("appointments"),
            (~cancelled).sum().alias("booked"),
            cancelled.sum().alias("cancelled"),
        )
        .sort(keys)
    )


def attendance_rates(visits: pl.DataFrame, by: str | Sequence[str]) -> pl.DataFrame:
    """Attendance, cancellation and did-not-attend rates of past appointments.

    Rates are shares of all past appointments in the group; appointments whose
    outcome was never recorded stay in the denominator (``unrecorded``) so the three
    rates do not overstate what is known.

    Parameters
    ----------
    visits
        The output of :func:`appointment_visits`.
    by
        Grouping column(s), for example ``"practitioner_id"``, ``"weekday"``, ``"hour"``.

    Returns
    -------
    pl.DataFrame
        ``by`` plus ``appointments``, ``attended``, ``cancelled``, ``did_not_attend``,
        ``unrecorded``, ``attendance_rate``, ``cancellation_rate`` and ``dna_rate``,
        sorted by ``by``.
    """
    keys = [by] if isinstance(by, str) else list(by)
    outcome = pl.col("outcome")
    return (
        visits.filter(pl.col("is_past"))
        .group_by(keys)
        .agg(
            pl.len().alias("appointments"),
            (outcome == "attended").sum().alias("attended"),
            (outcome == "cancelled").sum().alias("cancelled"),
            (outcome == "did not attend").sum().alias("did_not_attend"),
            (outcome == "unrecorded").sum().alias("unrecorded"),
        )
        .with_columns(
            _ratio(pl.col("attended"), pl.col("appointments")).alias("attendance_rate"),
            _ratio(pl.col("cancelled"), pl.col("appointments")).alias("cancellation_rate"),
            _ratio(pl.col("did_not_attend"), pl.col("appointments")).alias("dna_rate"),
        )
        .sort(keys)
    )


def lead_time_summary(visits: pl.DataFrame, by: str | Sequence[str] = ()) -> pl.DataFrame:
    """Booking lead time (start minus created) in days: median, mean and 90th percentile.

    Appointments without a ``created`` time, or created after they started
    (back-entered records), are left out.

    Parameters
    ----------
    visits
        The output of :func:`appointment_visits`.
    by
        Optional grouping column(s).

    Returns
    -------
    pl.DataFrame
        ``by`` plus ``appointments``, ``median_days``, ``mean_days``, ``p90_days``,
        ``same_day_share`` (booked on the local day of the appointment; without
        ``booked_days_ahead``, less than 24 hours ahead).
    """
    keys = [by] if isinstance(by, str) else list(by)
    lead = pl.col("lead_time_days")
    aggs = [
        pl.len().alias("appointments"),
        lead.median().alias("median_days"),
        lead.mean().alias("mean_days"),
        lead.quantile(0.9, interpolation="linear").alias("p90_days"),
        (
            (pl.col("booked_days_ahead") == 0)
            if "booked_days_ahead" in visits.columns
            else (lead < 1)
        )
        .mean()
        .alias("same_day_share"),
    ]
    valid = visits.filter(lead.is_not_null() & (lead >= 0))
    if not keys:
        return valid.select(aggs)
    return valid.group_by(keys).agg(aggs).sort(keys)


def slot_utilisation(
    visits: pl.DataFrame,
    proposed: pl.DataFrame,
    *,
    start: dt.datetime,
    end: dt.datetime,
    by: str = "practitioner_id",
) -> pl.DataFrame:
    """Share of available time already booked, per practitioner, over a coming window.

    Booked time is the minutes of non-cancelled appointments starting in
    ``[start, end)``; free time is the minutes of the proposed appointments that
    ``$find`` returned for the same window. Utilisation is
    ``booked / (booked + free)``.

    Parameters
    ----------
    visits
        The output of :func:`appointment_visits`.
    proposed
        ``client.find(...)`` output: one row per proposed appointment with
        ``start``, ``end`` and a ``practitioner_id`` column (or the ``by`` column).
    start, end
        The window ``$find`` was asked about.
    by
        The column identifying the practitioner in both frames.

    Returns
    -------
    pl.DataFrame
        ``by`` plus ``booked_minutes``, ``free_minutes``, ``booked_appointments``,
        ``free_slots`` and ``utilisation``, busiest first.
    """
    lo, hi = _utc(start), _utc(end)

    def minutes(frame: pl.DataFrame) -> pl.DataFrame:
        return (_as_utc(frame, "start", "end").rename({"start": "_s", "end": "_e"})).with_columns(
            ((pl.col("_e") - pl.col("_s")).dt.total_seconds() / 60.0).alias("_minutes"),
            reference_id(by).alias("_who"),
        )

    booked = (
        minutes(visits)
        .filter(
            (pl.col("_s") >= pl.lit(lo))
            & (pl.col("_s") < pl.lit(hi))
            & (pl.col("outcome") != "cancelled")
        )
        .group_by("_who")
        .agg(
            pl.col("_minutes").sum().alias("booked_minutes"),
            pl.len().alias("booked_appointments"),
        )
    )
    free = (
        minutes(proposed)
        .filter((pl.col("_s") >= pl.lit(lo)) & (pl.col("_s") < pl.lit(hi)))
        .group_by("_who")
        .agg(pl.col("_minutes").sum().alias("free_minutes"), pl.len().alias("free_slots"))
    )
    return (
        booked.join(free, on="_who", how="full", coalesce=True)
        .with_columns(
            pl.col("booked_minutes").fill_null(0.0),
            pl.col("free_minutes").fill_null(0.0),
            pl.col("booked_appointments").fill_null(0).cast(pl.Int64),
            pl.col("free_slots").fill_null(0).cast(pl.Int64),
        )
        .with_columns(
            _ratio(
                pl.col("booked_minutes"), pl.col("booked_minutes") + pl.col("free_minutes")
            ).alias("utilisation")
        )
        .rename({"_who": by})
        .sort(["utilisation", by], descending=[True, False], nulls_last=True)
    )


# --------------------------------------------------------------------------- revenue


def line_values(invoice_line: pl.DataFrame, price_component: pl.DataFrame) -> pl.DataFrame:
    """Billed value of each invoice line from its unit price components.

    ``net_value = quantity * sum(sign * |amount|)`` with the signs of
    :data:`PRICE_COMPONENT_SIGNS`; a missing quantity counts as 1. Each component
    type is also returned as its own signed line total (``base`` ... ``tax``, each
    times the quantity), so the five columns add up to ``net_value``.

    Parameters
    ----------
    invoice_line
        The invoice line frame (``id``, ``quantity``, ``status``, ...).
    price_component
        The ``invoice_line_price_component`` child table (``invoice_line_id``,
        ``type``, ``amount_value``, ``amount_currency``).

    Returns
    -------
    pl.DataFrame
        The invoice line columns plus ``base``, ``surcharge``, ``deduction``,
        ``discount``, ``tax`` (signed, times quantity), ``unit_value`` (per unit),
        ``net_value``,
        ``currency`` and ``line_status`` (the status with null shown as ``"open"``).

    Raises
    ------
    toolkit.errors.MixedCurrencyError
        When one line's components are in more than one currency (the message
        names the lines): such a line has no single value.
    """
    kinds = [k for k, sign in PRICE_COMPONENT_SIGNS.items() if sign != 0]
    sign = pl.col("type").replace_strict(PRICE_COMPONENT_SIGNS, default=0, return_dtype=pl.Int64)
    signed = (sign * pl.col("amount_value").abs()).alias("_signed")
    quantity = pl.col("quantity").fill_null(1)
    per_line = (
        price_component.with_columns(signed)
        .group_by("invoice_line_id")
        .agg(
            *(pl.col("_signed").filter(pl.col("type") == k).sum().alias(k) for k in kinds),
            pl.col("_signed").sum().alias("unit_value"),
            pl.col("amount_currency").drop_nulls().first().alias("currency"),
            pl.col("amount_currency").drop_nulls().n_unique().alias("_currencies"),
        )
    )
    mixed = per_line.filter(pl.col("_currencies") > 1)
    if mixed.height:
        from toolkit.errors import MixedCurrencyError

        found = sorted(
            price_component.filter(
                pl.col("invoice_line_id").is_in(mixed["invoice_line_id"].implode())
            )["amount_currency"]
            .drop_nulls()
            .unique()
            .to_list()
        )
        ids = ", ".join(mixed["invoice_line_id"].head(5).to_list())
        msg = (
            f"{mixed.height} invoice lines price their components in more than one currency "
            f"({', '.join(found)}), so they have no single value: lines {ids}"
        )
        raise MixedCurrencyError(msg, found)
    per_line = per_line.drop("_currencies")
    return (
        invoice_line.join(per_line, left_on="id", right_on="invoice_line_id", how="left")
        .with_columns(pl.col(k).fill_null(0.0) for k in [*kinds, "unit_value"])
        .with_columns(
            *(pl.col(k) * quantity for k in kinds),
            (pl.col("unit_value") * quantity).alias("net_value"),
            pl.col("status").fill_null("open").alias("line_status"),
        )
    )


def revenue_by(
    lines: pl.DataFrame,
    by: str | Sequence[str],
    *,
    exclude_statuses: Iterable[str] = ("voided",),
) -> pl.DataFrame:
    """Billed value rolled up by month, financial year, funder, practitioner, ...

    Values are added up per currency: ``currency`` is always one of the grouping
    columns (added after ``by`` when not named), so no total mixes currencies.

    Parameters
    ----------
    lines
        The output of :func:`line_values` (with any grouping columns added).
    by
        Grouping column(s).
    exclude_statuses
        Line statuses left out of ``billed`` (voided lines were never owed).
        Written-off lines stay in ``billed`` and are also reported in ``written_off``.

    Returns
    -------
    pl.DataFrame
        ``by`` plus ``currency`` (when not in ``by``), ``lines``, ``billed``,
        ``written_off`` and ``excluded`` (value of the excluded lines), sorted by
        the keys.
    """
    keys = [by] if isinstance(by, str) else list(by)
    if "currency" not in keys:
        keys.append("currency")
    excluded = pl.col("line_status").is_in(list(exclude_statuses))
    value = pl.col("net_value")
    return (
        lines.group_by(keys)
        .agg(
            (~excluded).sum().alias("lines"),
            value.filter(~excluded).sum().alias("billed"),
            value.filter(pl.col("line_status") == "write-off").sum().alias("written_off"),
            value.filter(excluded).sum().alias("excluded"),
        )
        .sort(keys, nulls_last=True)
    )


def revenue_total(
    lines: pl.DataFrame,
    *,
    exclude_statuses: Iterable[str] = ("voided",),
) -> tuple[float, str | None]:
    """The billed value of all ``lines`` as one amount, and its currency.

    Parameters
    ----------
    lines
        The output of :func:`line_values` (or a filtered part of it).
    exclude_statuses
        Line statuses left out, as in :func:`revenue_by`.

    Returns
    -------
    tuple of (float, str or None)
        The total and its ISO 4217 currency (None when no line carries one).

    Raises
    ------
    toolkit.errors.MixedCurrencyError
        When the lines are in more than one currency: use :func:`revenue_by`,
        which totals each currency apart.

    Examples
    --------
    >>> lines = pl.DataFrame({"net_value": [110.0, 50.0], "currency": ["AUD", "AUD"],
    ...                       "line_status": ["open", "locked"]})
    >>> revenue_total(lines)
    (160.0, 'AUD')
    """
    kept = lines.filter(~pl.col("line_status").is_in(list(exclude_statuses)))
    currency = single_currency(kept, value="net_value", what="revenue total")
    return float(kept["net_value"].sum()), currency


def appointments_without_invoice_line(
    visits: pl.DataFrame,
    invoice_line: pl.DataFrame,
    *,
    outcomes: Iterable[str] = ("attended", "did not attend"),
) -> pl.DataFrame:
    """Past appointments that no (non-voided) invoice line refers to.

    Parameters
    ----------
    visits
        The output of :func:`appointment_visits`.
    invoice_line
        The invoice line frame (``context_id`` references the appointment).
    outcomes
        Which past outcomes are expected to be billed. Did-not-attend appointments
        are often charged a fee, so they are included by default.

    Returns
    -------
    pl.DataFrame
        The matching rows of ``visits``, oldest first.
    """
    billed = invoice_line.filter(pl.col("status").fill_null("") != "voided").select(
        reference_id("context_id").alias("id")
    )
    return (
        visits.filter(pl.col("is_past") & pl.col("outcome").is_in(list(outcomes)))
        .join(billed.unique(), on="id", how="anti")
        .sort("start")
    )


# --------------------------------------------------------------------------- conformance


def report_checks(report: Mapping[str, Any]) -> pl.DataFrame:
    """The checks of a contract-suite ``report.json`` as a table.

    Parameters
    ----------
    report
        A parsed ``report.json`` written by ``pmtk check`` (format 1).

    Returns
    -------
    pl.DataFrame
        One row per check: ``id``, ``category``, ``status`` (passed, failed or
        skipped), ``message`` (its first line), ``problems`` (lines in the
        message) and ``evidence`` (number of recorded exchanges), in report order.

    Examples
    --------
    >>> report = {"checks": [{"id": "auth.token", "category": "auth", "status": "passed",
    ...                       "message": "", "evidence": []}]}
    >>> report_checks(report).row(0)
    ('auth.token', 'auth', 'passed', '', 0, 0)
    """
    rows = []
    for check in report.get("checks") or []:
        message = str(check.get("message") or "")
        lines = [line for line in message.splitlines() if line.strip()]
        rows.append(
            {
                "id": str(check.get("id", "")),
                "category": str(check.get("category", "")),
                "status": str(check.get("status", "")),
                "message": lines[0] if lines else "",
                "problems": len(lines),
                "evidence": len(check.get("evidence") or []),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "id": pl.String,
            "category": pl.String,
            "status": pl.String,
            "message": pl.String,
            "problems": pl.Int64,
            "evidence": pl.Int64,
        },
    )


def report_summary(checks: pl.DataFrame) -> pl.DataFrame:
    """Passed, failed and skipped checks per category.

    Parameters
    ----------
    checks
        The output of :func:`report_checks`.

    Returns
    -------
    pl.DataFrame
        ``category``, ``passed``, ``failed``, ``skipped``, ``total``, in the order
        the categories first appear in the report.
    """
    status = pl.col("status")
    return (
        checks.with_row_index("_order")
        .group_by("category")
        .agg(
            pl.col("_order").min(),
            (status == "passed").sum().cast(pl.Int64).alias("passed"),
            (status == "failed").sum().cast(pl.Int64).alias("failed"),
            (status == "skipped").sum().cast(pl.Int64).alias("skipped"),
            pl.len().cast(pl.Int64).alias("total"),
        )
        .sort("_order")
        .drop("_order")
    )


def report_observations(report: Mapping[str, Any]) -> pl.DataFrame:
    """The observations of a ``report.json`` (what was seen, not judged) as a table.

    Parameters
    ----------
    report
        A parsed ``report.json``.

    Returns
    -------
    pl.DataFrame
        ``observation`` and ``value`` (compact JSON text). Keys starting with ``_``
        are the suite's own scratch space and are left out.
    """
    observed = report.get("observations") or {}
    rows = [
        {"observation": str(key), "value": json.dumps(value, sort_keys=True, default=str)}
        for key, value in observed.items()
        if not str(key).startswith("_")
    ]
    return pl.DataFrame(rows, schema={"observation": pl.String, "value": pl.String})


def compare_reports(current: pl.DataFrame, baseline: pl.DataFrame) -> pl.DataFrame:
    """What changed between a baseline report and the current one, check by check.

    Parameters
    ----------
    current, baseline
        Outputs of :func:`report_checks`.

    Returns
    -------
    pl.DataFrame
        ``id``, ``baseline`` and ``current`` status and ``change``: ``new finding``
        (failed now, not before), ``fixed`` (failed before, passed now), ``still
        failing``, ``changed`` (any other status change), ``new check``,
        ``removed`` or ``same``; changes first.
    """
    left = baseline.select("id", pl.col("status").alias("baseline")).unique("id", keep="first")
    right = current.select("id", pl.col("status").alias("current")).unique("id", keep="first")
    both = left.join(right, on="id", how="full", coalesce=True)
    was, now = pl.col("baseline"), pl.col("current")
    change = (
        pl.when(was.is_null())
        .then(pl.lit("new check"))
        .when(now.is_null())
        .then(pl.lit("removed"))
        .when((now == "failed") & (was != "failed"))
        .then(pl.lit("new finding"))
        .when((was == "failed") & (now == "passed"))
        .then(pl.lit("fixed"))
        .when((was == "failed") & (now == "failed"))
        .then(pl.lit("still failing"))
        .when(was != now)
        .then(pl.lit("changed"))
        .otherwise(pl.lit("same"))
    )
    rank = {
        "new finding": 0,
        "fixed": 1,
        "still failing": 2,
        "changed": 3,
        "new check": 4,
        "removed": 5,
        "same": 6,
    }
    order = pl.col("change").replace_strict(rank, return_dtype=pl.Int64)
    return both.with_columns(change.alias("change")).sort([order, "id"])
