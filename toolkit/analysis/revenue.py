"""Revenue from invoice lines: line values, totals by dimension, appointments without a line."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from toolkit.analysis.money import single_currency
from toolkit.analysis.tables import PRICE_COMPONENT_SIGNS, reference_id


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
