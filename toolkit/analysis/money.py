"""Currencies and shares of amounts: one currency per total, never a silent mix."""

from __future__ import annotations

import polars as pl

from toolkit.analysis.tables import ratio_of, units_used_expr
from toolkit.errors import MixedCurrencyError


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

    found = currencies(frame, column, value)
    if len(found) > 1:
        msg = (
            f"a single {what} was asked of amounts in {len(found)} currencies "
            f"({', '.join(found)}); amounts are never added across currencies: "
            f"group by {column!r} instead"
        )
        raise MixedCurrencyError(msg, found)
    return None if not found or found[0] == "(none)" else found[0]


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
    used = units_used_expr()
    return ratio_of(used, pl.col("limit_quantity")).alias("quantity_share")


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
    return ratio_of(used, pl.col("limit_money_value")).alias("money_share")
