"""Revenue from invoice lines: line values, totals by dimension, appointments without a line."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from toolkit.analysis.joins import require_frames
from toolkit.analysis.money import single_currency
from toolkit.analysis.tables import PRICE_COMPONENT_SIGNS, reference_id
from toolkit.errors import MixedCurrencyError


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
    kinds = _signed_kinds()
    per_line = _component_sums(price_component, kinds)
    _refuse_mixed_currencies(per_line, price_component)
    quantity = pl.col("quantity").fill_null(1)
    return (
        invoice_line.join(
            per_line.drop("_currencies"), left_on="id", right_on="invoice_line_id", how="left"
        )
        .with_columns(pl.col(k).fill_null(0.0) for k in [*kinds, "unit_value"])
        .with_columns(
            *(pl.col(k) * quantity for k in kinds),
            (pl.col("unit_value") * quantity).alias("net_value"),
            pl.col("status").fill_null("open").alias("line_status"),
        )
    )


def _signed_kinds() -> list[str]:
    """The price component types that count towards a line's value (sign not 0)."""
    return [k for k, sign in PRICE_COMPONENT_SIGNS.items() if sign != 0]


def _component_sums(price_component: pl.DataFrame, kinds: list[str]) -> pl.DataFrame:
    """Per invoice line: each kind's signed unit amount, their sum, the currency and how many."""
    sign = pl.col("type").replace_strict(PRICE_COMPONENT_SIGNS, default=0, return_dtype=pl.Int64)
    signed = (sign * pl.col("amount_value").abs()).alias("_signed")
    return (
        price_component.with_columns(signed)
        .group_by("invoice_line_id")
        .agg(
            *(pl.col("_signed").filter(pl.col("type") == k).sum().alias(k) for k in kinds),
            pl.col("_signed").sum().alias("unit_value"),
            pl.col("amount_currency").drop_nulls().first().alias("currency"),
            pl.col("amount_currency").drop_nulls().n_unique().alias("_currencies"),
        )
    )


def _refuse_mixed_currencies(per_line: pl.DataFrame, price_component: pl.DataFrame) -> None:
    """Raise MixedCurrencyError naming the lines whose components are in several currencies."""
    mixed = per_line.filter(pl.col("_currencies") > 1)
    if not mixed.height:
        return

    found = sorted(
        price_component.filter(pl.col("invoice_line_id").is_in(mixed["invoice_line_id"].implode()))[
            "amount_currency"
        ]
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


_RECONCILED_COLUMNS = (
    "invoice_id",
    "invoice_status",
    "currency",
    "lines",
    "lines_value",
    "lines_tax",
    "excluded_value",
    "total_net_value",
    "total_gross_value",
    "net_gap",
    "gross_gap",
    "finding",
)


def invoice_reconciliation(
    invoices: pl.DataFrame,
    invoice_lines: pl.DataFrame,
    price_components: pl.DataFrame,
    *,
    exclude_statuses: Iterable[str] = (),
    tolerance: float = 0.005,
) -> pl.DataFrame:
    """Per invoice, the value of its lines beside its totals, the gap and a finding.

    Lines are valued as in :func:`line_values` (tax included) and added up per invoice;
    ``net_gap`` and ``gross_gap`` are ``total_net_value`` and ``total_gross_value``
    minus ``lines_value`` (a ``totalNet`` without tax shows ``net_gap = −lines_tax``).
    Nothing is dropped: an invoice without lines, a line whose invoice is not in
    ``invoices`` and a line with no invoice each get a row.

    Parameters
    ----------
    invoices, invoice_lines, price_components
        ``Invoice`` (``id``, ``total_net_value``, ``total_gross_value``; ``status``,
        ``total_gross_currency`` when present), ``InvoiceLine`` (``id``, ``invoice_id``,
        ``quantity``, ``status``) and ``invoice_line_price_component``
        (``invoice_line_id``, ``type``, ``amount_value``, ``amount_currency``).
    exclude_statuses
        Line statuses left out of ``lines_value`` (reported in ``excluded_value``).
        None by default: the embedded mock's totals count every line, voided ones
        included; pass ``("voided",)`` for a deployment that drops them.
    tolerance
        A gap up to this (in the invoice's currency) still reconciles.

    Returns
    -------
    pl.DataFrame
        ``invoice_id``, ``invoice_status``, ``currency``, ``lines``, ``lines_value``,
        ``lines_tax``, ``excluded_value``, ``total_net_value``, ``total_gross_value``,
        ``net_gap``, ``gross_gap``, ``finding`` (``ok``, ``gap``, ``no lines``, ``no
        total``, ``currency differs``, ``invoice not found``, ``line without invoice``)
        and ``reconciled`` (finding is ``ok``); invoices first, in their order, then
        the lines' orphans. A line pricing its components in two currencies raises
        :class:`~toolkit.errors.MixedCurrencyError` (:func:`line_values`).
    """
    lines = _reconciliation_lines(invoices, invoice_lines, price_components)
    per_invoice = _invoice_line_sums(lines, list(exclude_statuses))
    rows = _invoices_beside_lines(_invoice_heads(invoices), per_invoice)
    return (
        rows.with_columns(_currency_and_gaps())
        .with_columns(_finding(tolerance).alias("finding"))
        .select(*_RECONCILED_COLUMNS, (pl.col("finding") == "ok").alias("reconciled"))
    )


def _reconciliation_lines(
    invoices: pl.DataFrame, invoice_lines: pl.DataFrame, price_components: pl.DataFrame
) -> pl.DataFrame:
    """The valued lines (:func:`line_values`), after checking the three frames' columns."""
    require_frames(
        "invoice_reconciliation",
        (invoices, "invoices", ["id", "total_net_value", "total_gross_value"]),
        (invoice_lines, "invoice_lines", ["id", "invoice_id", "quantity", "status"]),
        (price_components, "price_components", _COMPONENT_COLUMNS),
    )
    return line_values(invoice_lines, price_components)


_COMPONENT_COLUMNS = ("invoice_line_id", "type", "amount_value", "amount_currency")


def _invoice_line_sums(lines: pl.DataFrame, skipped: list[str]) -> pl.DataFrame:
    """Per invoice id: line count, kept value and tax, excluded value, the lines' currencies."""
    excluded = pl.col("line_status").is_in(skipped)
    return lines.group_by(reference_id("invoice_id").alias("invoice_id")).agg(
        pl.len().alias("lines"),
        pl.col("net_value").filter(~excluded).sum().alias("lines_value"),
        pl.col("tax").filter(~excluded).sum().alias("lines_tax"),
        pl.col("net_value").filter(excluded).sum().alias("excluded_value"),
        pl.col("currency").drop_nulls().first().alias("_line_currency"),
        pl.col("currency").drop_nulls().n_unique().alias("_line_currencies"),
    )


def _invoice_heads(invoices: pl.DataFrame) -> pl.DataFrame:
    """One row per invoice id: its status, currency and totals, marked as known."""
    missing = pl.lit(None, pl.String)
    status = pl.col("status") if "status" in invoices.columns else missing
    currency = (
        pl.col("total_gross_currency") if "total_gross_currency" in invoices.columns else missing
    )
    return (
        invoices.filter(pl.col("id").is_not_null())
        .unique("id", keep="first", maintain_order=True)
        .select(
            pl.col("id").alias("invoice_id"),
            status.alias("invoice_status"),
            currency.alias("_invoice_currency"),
            pl.col("total_net_value").cast(pl.Float64),
            pl.col("total_gross_value").cast(pl.Float64),
            pl.lit(True).alias("_known"),
        )
    )


def _invoices_beside_lines(heads: pl.DataFrame, per_invoice: pl.DataFrame) -> pl.DataFrame:
    """Every invoice with its lines' sums, then the sums whose invoice is unknown (or null)."""
    orphans = (
        per_invoice.join(heads, on="invoice_id", how="anti", nulls_equal=True)
        .sort("invoice_id", nulls_last=True)
        .with_columns(
            pl.lit(None, pl.String).alias("invoice_status"),
            pl.lit(None, pl.String).alias("_invoice_currency"),
            pl.lit(None, pl.Float64).alias("total_net_value"),
            pl.lit(None, pl.Float64).alias("total_gross_value"),
            pl.lit(False).alias("_known"),
        )
    )
    known = heads.join(per_invoice, on="invoice_id", how="left", maintain_order="left")
    return pl.concat([known, orphans], how="diagonal").with_columns(
        pl.col("lines").fill_null(0).cast(pl.Int64),
        *(pl.col(c).fill_null(0.0) for c in ("lines_value", "lines_tax", "excluded_value")),
    )


def _currency_and_gaps() -> list[pl.Expr]:
    """``currency`` (the invoice's, else its lines'), ``net_gap`` and ``gross_gap``."""
    return [
        pl.coalesce("_invoice_currency", "_line_currency").alias("currency"),
        (pl.col("total_net_value") - pl.col("lines_value")).round(6).alias("net_gap"),
        (pl.col("total_gross_value") - pl.col("lines_value")).round(6).alias("gross_gap"),
    ]


def _finding(tolerance: float) -> pl.Expr:
    """The first finding that applies to a row, in order of how much it explains."""
    differs = (pl.col("_line_currencies").fill_null(0) > 1) | (
        pl.col("_invoice_currency").is_not_null()
        & pl.col("_line_currency").is_not_null()
        & (pl.col("_invoice_currency") != pl.col("_line_currency"))
    )
    return (
        pl.when(pl.col("invoice_id").is_null())
        .then(pl.lit("line without invoice"))
        .when(~pl.col("_known"))
        .then(pl.lit("invoice not found"))
        .when(pl.col("lines") == 0)
        .then(pl.lit("no lines"))
        .when(pl.col("net_gap").is_null() | pl.col("gross_gap").is_null())
        .then(pl.lit("no total"))
        .when(differs)
        .then(pl.lit("currency differs"))
        .when((pl.col("net_gap").abs() > tolerance) | (pl.col("gross_gap").abs() > tolerance))
        .then(pl.lit("gap"))
        .otherwise(pl.lit("ok"))
    )
