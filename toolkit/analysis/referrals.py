"""Referrals and the visits that use them: use, recounts, attention lists, referrers, funders."""

from __future__ import annotations

import datetime as dt

import polars as pl

from toolkit.analysis.clock import check_zone, local_times, override_zone
from toolkit.analysis.money import money_share, quantity_share
from toolkit.analysis.tables import (
    STATUS_OUTCOME,
    as_dates,
    as_utc,
    ratio_of,
    reference_id,
    units_used_expr,
    utc,
)


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
    used = units_used_expr()
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

    Dates and hours are read on the clock of the appointment's clinic: ``tz=`` (or
    ``PM_TIMEZONE``) puts every appointment in one zone, else ``zones`` gives each role
    its clinic's zone.

    Parameters
    ----------
    appointment, participant
        The appointment frame (``id``, ``start``, ``end``, ``created``, ...) and its
        ``appointment_participant`` child table (``appointment_id``, ``actor_id``,
        ``actor_type``, ``status``, ``invoice_id``).
    now
        The moment that separates past appointments from upcoming ones.
    tz
        One IANA zone for every appointment (``"UTC"`` reads all in UTC); wins over
        ``PM_TIMEZONE`` and the zones of ``zones``, whose other columns (``clinic``,
        ...) are still carried.
    zones, default_zone
        :func:`role_zones` (``practitioner_id``: the role id, ``time_zone``, columns
        to carry such as ``clinic``); the zone of others (:func:`practice_zone`).

    Returns
    -------
    pl.DataFrame
        The appointment columns plus ``practitioner_id``, ``patient_id``, ``status``,
        ``invoice_id``, ``outcome`` (:data:`ATTENDANCE_OUTCOMES`), ``is_past``, the
        :func:`local_times` columns of ``start`` with ``time_zone``, ``booked_date``
        (local day of ``created``), ``lead_time_days`` (start minus created) and
        ``booked_days_ahead`` (local days from booking to appointment; 0 is same-day).
        An appointment with no zone, or an unknown zone, raises
        :class:`~toolkit.errors.TimeZoneError`.
    """
    visits = _with_participants(appointment, participant)
    chosen = override_zone(tz)
    # An override zone changes the clock only: each appointment keeps its clinic (and
    # the other columns ``zones`` carries), and local_times writes the one zone.
    visits = _with_role_zones(visits, zones, None if chosen is not None else default_zone)
    visits = _booked_date(local_times(visits, "start", tz=chosen), chosen)
    return visits.with_columns(_outcome_and_lead_times(utc(now), "created" in visits.columns))


def _with_participants(appointment: pl.DataFrame, participant: pl.DataFrame) -> pl.DataFrame:
    """Each appointment (its times in UTC) with its practitioner, patient, status, invoice."""
    times = [c for c in ("start", "end", "created") if c in appointment.columns]
    return as_utc(appointment, *times).join(
        _participants(participant), left_on="id", right_on="appointment_id", how="left"
    )


def _with_role_zones(
    visits: pl.DataFrame, zones: pl.DataFrame | None, default_zone: str | None
) -> pl.DataFrame:
    """``visits`` with each role's ``time_zone`` (and carried columns), else the default."""
    if zones is not None:
        carried = zones.unique("practitioner_id", keep="first", maintain_order=True)
        extra = [c for c in carried.columns if c != "practitioner_id" and c in visits.columns]
        visits = visits.drop(extra).join(carried, on="practitioner_id", how="left")
    if default_zone is None:
        return visits
    fill = pl.lit(check_zone(default_zone, where="default_zone"), dtype=pl.String)
    if "time_zone" in visits.columns:
        return visits.with_columns(pl.col("time_zone").fill_null(fill))
    return visits.with_columns(fill.alias("time_zone"))


def _booked_date(visits: pl.DataFrame, chosen: str | None) -> pl.DataFrame:
    """``visits`` plus ``booked_date``: the local day of ``created`` (null without it)."""
    if "created" not in visits.columns:
        return visits.with_columns(pl.lit(None, dtype=pl.Date).alias("booked_date"))
    visits = local_times(visits, "created", tz=chosen, prefix="_c_")
    scratch = [c for c in visits.columns if c.startswith("_c_") and c != "_c_date"]
    return visits.drop(scratch).rename({"_c_date": "booked_date"})


def _outcome_and_lead_times(moment: dt.datetime, has_created: bool) -> list[pl.Expr]:
    """``is_past``, ``outcome``, ``lead_time_days`` and ``booked_days_ahead``."""
    known = pl.col("status").replace_strict(STATUS_OUTCOME, default=None, return_dtype=pl.String)
    is_past = pl.col("start") < pl.lit(moment)
    created = pl.col("created") if has_created else pl.lit(None, pl.Datetime)
    return [
        is_past.alias("is_past"),
        pl.when(known.is_not_null())
        .then(known)
        .when(is_past)
        .then(pl.lit("unrecorded"))
        .otherwise(pl.lit("upcoming"))
        .alias("outcome"),
        ((pl.col("start") - created).dt.total_seconds() / 86_400.0).alias("lead_time_days"),
        (pl.col("date") - pl.col("booked_date")).dt.total_days().alias("booked_days_ahead"),
    ]


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
    refs = as_dates(referral, "period_start", "period_end").select(
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
    return _against_limits(_with_counts(refs, _matched_visits(refs, visits)))


def _matched_visits(refs: pl.DataFrame, visits: pl.DataFrame) -> pl.DataFrame:
    """Per referral: its past visits (same patient and practitioner, in its period) by outcome."""
    appts = visits.filter(pl.col("is_past")).select(
        reference_id("patient_id").alias("_patient"),
        reference_id("practitioner_id").alias("_practitioner"),
        # the local day of the appointment, as the practice wrote the referral dates
        (pl.col("date") if "date" in visits.columns else pl.col("start").dt.date()).alias("_day"),
        "outcome",
    )
    return (
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


def _with_counts(refs: pl.DataFrame, matched: pl.DataFrame) -> pl.DataFrame:
    """The referrals with their visit counts, used units excluding and including cancellations."""
    counts = ["attended", "did_not_attend", "cancelled"]
    return (
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


def _against_limits(out: pl.DataFrame) -> pl.DataFrame:
    """The recounted use beside the referral's limit: shares, units beyond it, units it covers."""
    offset = pl.col("limit_quantity_offset").fill_null(0)
    return (
        out.with_columns(
            pl.when(pl.col("include_cancelled_appointment").fill_null(False))
            .then(pl.col("used_including_cancelled"))
            .otherwise(pl.col("used_excluding_cancelled"))
            .alias("recounted_used"),
            ratio_of(pl.col("used_excluding_cancelled") + offset, pl.col("limit_quantity")).alias(
                "share_excluding_cancelled"
            ),
            ratio_of(pl.col("used_including_cancelled") + offset, pl.col("limit_quantity")).alias(
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
        as_dates(utilisation, "period_end")
        .with_columns(
            nearly.alias("nearly_used_up"),
            expiring.fill_null(False).alias("expiring"),
            days_left.alias("days_left"),
        )
        .filter(pl.col("active").fill_null(False) & (pl.col("nearly_used_up") | pl.col("expiring")))
    )
    return flagged.with_columns(_attention_reason().alias("reason")).sort(
        ["days_left", "share"], descending=[False, True], nulls_last=True
    )


def _attention_reason() -> pl.Expr:
    """``"85% used; ends in 12 days"``: the flags of a referral needing attention, in words."""
    return pl.concat_str(
        pl.when(pl.col("nearly_used_up"))
        .then(pl.format("{}% used", (pl.col("share") * 100).round(0).cast(pl.Int64)))
        .otherwise(None),
        pl.when(pl.col("expiring"))
        .then(pl.format("ends in {} days", pl.col("days_left")))
        .otherwise(None),
        separator="; ",
        ignore_nulls=True,
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
