"""A practice's calendar day as a search: the two UTC bounds of one local day.

The API keeps every instant in UTC, so ``date=2026-11-03`` selects the UTC day: in
Sydney (UTC+11 in November) that is 11:00 on the 3rd to 11:00 on the 4th, parts of
two local days. :func:`local_day` gives the bounds of the practice's own day, for a
search keyword that takes a list (a repeated parameter: both bounds apply).
"""

from __future__ import annotations

import datetime as dt

from toolkit.analysis.clock import check_zone
from toolkit.config import read_environment
from toolkit.errors import ConfigurationError, TimeZoneError

__all__ = ["local_day"]


def local_day(day: str | dt.date, tz: str | None = None) -> list[str]:
    """The search bounds of one calendar day in a time zone: ``[ge<start>, lt<end>]``.

    Pass the result as a search keyword (``client.frame("Appointment",
    date=local_day("2026-11-03"))``): a list repeats the parameter, and the server
    ANDs the two bounds. Both are UTC instants (``Z``), each worked out with the
    offset of its own midnight, so a day with a daylight-saving change is 23 or 25
    hours long, as on the clinic's wall.

    Parameters
    ----------
    day
        The local calendar day: ``"YYYY-MM-DD"`` or a :class:`datetime.date` (not a
        datetime, which names an instant rather than a day).
    tz
        An IANA zone (``"Australia/Sydney"``); default the configured
        ``PM_TIMEZONE`` (environment, else ``.env``).

    Returns
    -------
    list[str]
        ``["ge<start>Z", "lt<end>Z"]``.

    Raises
    ------
    toolkit.errors.TimeZoneError
        No zone given or configured, or a name that is not an IANA zone.
    toolkit.errors.ConfigurationError
        ``day`` is not a calendar date.

    Examples
    --------
    >>> local_day("2026-11-03", tz="Australia/Sydney")
    ['ge2026-11-02T13:00:00Z', 'lt2026-11-03T13:00:00Z']
    >>> local_day(dt.date(2026, 10, 4), tz="Australia/Sydney")  # clocks go forward: 23 h
    ['ge2026-10-03T14:00:00Z', 'lt2026-10-04T13:00:00Z']
    """
    import zoneinfo

    zone = zoneinfo.ZoneInfo(_zone(tz))
    first = _calendar_day(day)
    bounds = []
    for prefix, date in (("ge", first), ("lt", first + dt.timedelta(days=1))):
        midnight = dt.datetime.combine(date, dt.time(0), tzinfo=zone).astimezone(dt.UTC)
        bounds.append(f"{prefix}{midnight:%Y-%m-%dT%H:%M:%S}Z")
    return bounds


def _calendar_day(day: object) -> dt.date:
    if isinstance(day, dt.date) and not isinstance(day, dt.datetime):
        return day
    if isinstance(day, str):
        try:
            return dt.date.fromisoformat(day.strip())
        except ValueError:
            pass
    msg = f"local_day() takes a calendar day ('2026-11-03' or a datetime.date), got {day!r}"
    raise ConfigurationError(msg)


def _zone(tz: str | None) -> str:
    """``tz``, else the configured ``PM_TIMEZONE``, checked; a clear error without one."""

    if tz is not None:
        return check_zone(tz, where="tz")

    configured = read_environment(None).timezone
    if configured and configured.strip():
        return check_zone(configured, where="PM_TIMEZONE")
    msg = (
        "local_day() needs the practice's time zone: pass tz='Australia/Sydney' (an IANA "
        "name) or set PM_TIMEZONE"
    )
    raise TimeZoneError(msg)
