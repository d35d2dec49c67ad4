"""The practice clock: time zones of practices and practitioners, local times, financial years."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl

from toolkit import catalogue
from toolkit.analysis.tables import RecordReader, as_utc, read_roles, reference_id, roles_among
from toolkit.errors import TimeZoneError

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

    code = (country or "").strip().upper()
    if not code:
        msg = f"{where}: the address has no country, so its time zone is unknown{_ZONE_HINT}"
        raise TimeZoneError(msg)
    if code == "AU":
        return _australian_zone(state, where)
    if code in COUNTRY_ZONES:
        return COUNTRY_ZONES[code]
    return _single_country_zone(code, country, where)


_ZONE_HINT = "; set PM_TIMEZONE or pass tz= to choose the zone"


def _australian_zone(state: str | None, where: str) -> str:
    """The zone of an Australian state or territory, by abbreviation or full name."""

    region = (state or "").strip().upper().replace(".", "")
    abbr = _AU_STATE_NAMES.get(region, region)
    if abbr in AU_STATE_ZONES:
        return AU_STATE_ZONES[abbr]
    shown = f"state {state!r}" if region else "no state"
    msg = (
        f"{where}: an Australian address with {shown} has no single time zone "
        f"(expected one of {', '.join(AU_STATE_ZONES)}){_ZONE_HINT}"
    )
    raise TimeZoneError(msg)


def _single_country_zone(code: str, country: str | None, where: str) -> str:
    """The tz database's one zone for country ``code``; an error when it has none or several."""

    if not _ZONES_BY_COUNTRY:
        _ZONES_BY_COUNTRY.update(_country_zones())
    zones = _ZONES_BY_COUNTRY.get(code)
    if not zones:
        msg = (
            f"{where}: country {country!r} is not an ISO 3166 code the tz database "
            f"knows{_ZONE_HINT}"
        )
        raise TimeZoneError(msg)
    if len(zones) > 1:
        shown = ", ".join(zones[:4]) + (", ..." if len(zones) > 4 else "")
        msg = f"{where}: country {code} has {len(zones)} time zones ({shown}){_ZONE_HINT}"
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
    prefixes: Sequence[str] = (catalogue.PRACTICE_GROUP_PREFIX, catalogue.CLINIC_PREFIX),
) -> pl.DataFrame:
    """The time zone of the practice group and of each clinic, from their addresses.

    Each organization's best address is used: a physical ``work`` address first,
    then any physical one, then any not marked ``billing`` or ``mailing``. With
    ``tz=`` or ``PM_TIMEZONE`` set, every organization gets that zone and addresses
    are not read.

    Parameters
    ----------
    organization, address
        ``client.frames("Organization")``: the ``Organization`` table (``id``,
        ``name``) and its ``organization_address`` child table (``organization_id``,
        ``use``, ``type``, ``state``, ``country``, ``index``).
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
        one with no address at all is left out, so a caller uses the practice's zone.
    """
    chosen = override_zone(tz)
    source = "tz" if tz is not None else PM_TIMEZONE
    wanted = organization.filter(
        pl.any_horizontal(pl.col("id").str.starts_with(p) for p in prefixes)
    ).select(pl.col("id").alias("organization_id"), _NAME_ELSE_ID.alias("organization"))
    if chosen is not None:
        return wanted.with_columns(
            pl.lit(chosen).alias("time_zone"), pl.lit(source).alias("zone_source")
        ).cast(_ZONE_SCHEMA)  # type: ignore[arg-type]
    return _zones_from_addresses(wanted, address)


_NAME_ELSE_ID = pl.coalesce(pl.col("name"), pl.col("id"))

_ZONE_SCHEMA = {
    "organization_id": pl.String,
    "organization": pl.String,
    "time_zone": pl.String,
    "zone_source": pl.String,
}


def _zones_from_addresses(wanted: pl.DataFrame, address: pl.DataFrame) -> pl.DataFrame:
    """Each wanted organization that has an address, with the zone of its best one."""
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
    return pl.DataFrame(rows, schema=_ZONE_SCHEMA, orient="row").sort("organization_id")


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

    group = zones.filter(
        pl.col("organization_id").str.starts_with(catalogue.PRACTICE_GROUP_PREFIX)
    )["time_zone"]
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
    group = best.filter(pl.col("organization_id").str.starts_with(catalogue.PRACTICE_GROUP_PREFIX))[
        "country"
    ].drop_nulls()
    if group.len():
        return str(group[0])
    clinics = best.filter(pl.col("organization_id").str.starts_with(catalogue.CLINIC_PREFIX))[
        "country"
    ]
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
    roles: pl.DataFrame | None = None,
    tz: str | None = None,
    country: str | None = None,
) -> PracticeClock:
    """Each clinic's zone, the practice's default zone and its financial year, in one call.

    Looks up the PractitionerRoles ``role_ids`` to learn which clinic each
    practitioner works at: in ``roles`` when given with rows (no request), else with
    :func:`read_roles` (one list walk, or one read each where the deployment lists
    no roles, so pass only the roles that appear in the data).

    Parameters
    ----------
    client
        A :class:`toolkit.Client`.
    organization, address
        ``client.frames("Organization")`` tables ``Organization`` and
        ``organization_address``.
    role_ids
        PractitionerRole ids (``PR-...``) named by appointments.
    roles
        The ``PractitionerRole`` table, when it was already listed.
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
    if roles is not None and roles.height:
        found = roles_among(roles, role_ids)
    else:
        found = read_roles(client, role_ids)
    where = country or practice_country(organization, address)
    zoned = role_zones(found, zones, default=default)
    return PracticeClock(zones, zoned, default, where, financial_year_start(where))


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
    own. Around daylight-saving changes the fields follow the local clock: 01:30 UTC
    on 2026-10-25 is the second 01:30 GMT of that night in London.

    Parameters
    ----------
    frame, column
        A frame and its instant column to read (zoned, naive read as UTC, or ISO
        text), for example ``"start"`` or ``"entered_date"``.
    tz, zone_column
        One zone for every row (also ``PM_TIMEZONE``), written to ``zone_column``;
        without it each row's zone is read from ``zone_column`` (IANA names).
    prefix
        Put before each added column name (``"booked_"`` gives ``booked_date``, ...).

    Returns
    -------
    pl.DataFrame
        ``frame`` (in its order) plus ``{prefix}local`` (naive wall-clock datetime),
        ``{prefix}date``, ``{prefix}week`` (Monday), ``{prefix}month`` (its first
        day), ``{prefix}weekday`` (``Mon`` ... ``Sun``), ``{prefix}weekday_number``
        (1 = Monday), ``{prefix}hour`` (0-23) and ``zone_column``.

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
    out = _zoned_rows(frame, column, tz=tz, zone_column=zone_column)
    wall = f"{prefix}local"
    return _wall_clock(out, column, zone_column, wall).with_columns(_calendar(wall, prefix))


def _zoned_rows(
    frame: pl.DataFrame, column: str, *, tz: str | None, zone_column: str
) -> pl.DataFrame:
    """``frame`` with ``column`` in UTC, a ``_row`` index and a checked zone on every row."""

    chosen = override_zone(tz)
    out = as_utc(frame, column).with_row_index("_row")
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
    return out


def _wall_clock(out: pl.DataFrame, column: str, zone_column: str, wall: str) -> pl.DataFrame:
    """``out`` in its ``_row`` order plus ``wall``: ``column`` on its row's zone's clock."""
    parts = []
    for zone, part in out.group_by(zone_column, maintain_order=True):
        name = zone[0]
        instant = pl.col(column)
        if name is not None:
            instant = instant.dt.convert_time_zone(str(name))
        parts.append(part.with_columns(instant.dt.replace_time_zone(None).alias(wall)))
    if not parts:
        parts = [out.with_columns(pl.lit(None, dtype=pl.Datetime("us")).alias(wall))]
    return pl.concat(parts, how="vertical").sort("_row").drop("_row")


def _calendar(wall: str, prefix: str) -> list[pl.Expr]:
    """The date, week, month, weekday (name, number) and hour of the wall-clock column."""
    local = pl.col(wall)
    return [
        local.dt.date().alias(f"{prefix}date"),
        local.dt.truncate("1w").dt.date().alias(f"{prefix}week"),
        local.dt.month_start().dt.date().alias(f"{prefix}month"),
        local.dt.strftime("%a").alias(f"{prefix}weekday"),
        local.dt.weekday().alias(f"{prefix}weekday_number"),
        local.dt.hour().alias(f"{prefix}hour"),
    ]


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
