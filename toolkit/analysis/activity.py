"""Appointment activity: utilisation, weekly volume, attendance, lead times and slot use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import polars as pl

from toolkit.analysis.money import single_currency
from toolkit.analysis.tables import as_utc, ratio_of, reference_id, units_used_expr, utc


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
    used = units_used_expr()
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
            ratio_of(pl.col("units_used"), pl.col("units_limit")).alias("quantity_share"),
            ratio_of(pl.col("money_used"), pl.col("money_limit")).alias("money_share"),
        )
        .sort(["referrals", *keys], descending=[True, *([False] * len(keys))])
    )


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
            ratio_of(pl.col("attended"), pl.col("appointments")).alias("attendance_rate"),
            ratio_of(pl.col("cancelled"), pl.col("appointments")).alias("cancellation_rate"),
            ratio_of(pl.col("did_not_attend"), pl.col("appointments")).alias("dna_rate"),
        )
        .sort(keys)
    )


def outcomes_by_slot(visits: pl.DataFrame) -> pl.DataFrame:
    """Outcome rates per local weekday and hour, each rate beside its count.

    The heatmap of notebook 03: every appointment sits in the weekday and hour
    of *its clinic's* clock (``weekday`` and ``hour`` of
    :func:`toolkit.analysis.appointment_visits`, whose zones come from
    :func:`toolkit.analysis.practice_clock`), never UTC's. A rate alone hides
    how many appointments it rests on, so ``label`` carries both.

    Parameters
    ----------
    visits
        The output of :func:`appointment_visits` (``weekday_number``,
        ``weekday``, ``hour``, ``outcome``, ``is_past``).

    Returns
    -------
    pl.DataFrame
        The columns of :func:`attendance_rates` by ``weekday_number``,
        ``weekday`` and ``hour``, plus ``label``: the did-not-attend rate and the
        count of past appointments, ``"12%\\nn=25"`` (two lines in the chart).

    Examples
    --------
    >>> import datetime as dt
    >>> v = pl.DataFrame({"weekday_number": [1, 1, 1], "weekday": ["Mon"] * 3,
    ...                   "hour": [9, 9, 9], "is_past": [True] * 3,
    ...                   "outcome": ["attended", "did not attend", "attended"]})
    >>> outcomes_by_slot(v).select("hour", "appointments", "label").row(0)
    (9, 3, '33%\\nn=3')
    """
    rates = attendance_rates(visits, ["weekday_number", "weekday", "hour"])
    percent = (pl.col("dna_rate") * 100).round(0).cast(pl.Int64).cast(pl.String)
    return rates.with_columns(
        pl.concat_str(
            [percent.fill_null("–"), pl.lit("%\nn="), pl.col("appointments").cast(pl.String)]
        ).alias("label")
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
    in_window = (pl.col("_s") >= pl.lit(utc(start))) & (pl.col("_s") < pl.lit(utc(end)))
    booked = (
        _slot_minutes(visits, by)
        .filter(in_window & (pl.col("outcome") != "cancelled"))
        .group_by("_who")
        .agg(
            pl.col("_minutes").sum().alias("booked_minutes"),
            pl.len().alias("booked_appointments"),
        )
    )
    free = (
        _slot_minutes(proposed, by)
        .filter(in_window)
        .group_by("_who")
        .agg(pl.col("_minutes").sum().alias("free_minutes"), pl.len().alias("free_slots"))
    )
    return _utilisation(booked, free, by)


def _slot_minutes(frame: pl.DataFrame, by: str) -> pl.DataFrame:
    """``frame`` with UTC ``_s``/``_e``, its length in ``_minutes`` and the ``_who`` id."""
    return (as_utc(frame, "start", "end").rename({"start": "_s", "end": "_e"})).with_columns(
        ((pl.col("_e") - pl.col("_s")).dt.total_seconds() / 60.0).alias("_minutes"),
        reference_id(by).alias("_who"),
    )


def _utilisation(booked: pl.DataFrame, free: pl.DataFrame, by: str) -> pl.DataFrame:
    """Booked beside free time per practitioner, with their ratio, busiest first."""
    return (
        booked.join(free, on="_who", how="full", coalesce=True)
        .with_columns(
            pl.col("booked_minutes").fill_null(0.0),
            pl.col("free_minutes").fill_null(0.0),
            pl.col("booked_appointments").fill_null(0).cast(pl.Int64),
            pl.col("free_slots").fill_null(0).cast(pl.Int64),
        )
        .with_columns(
            ratio_of(
                pl.col("booked_minutes"), pl.col("booked_minutes") + pl.col("free_minutes")
            ).alias("utilisation")
        )
        .rename({"_who": by})
        .sort(["utilisation", by], descending=[True, False], nulls_last=True)
    )
