"""pandera.polars schemas of the flat views, built from the catalogue's rules.

Every rule comes from :mod:`toolkit.catalogue` through the view's columns
(:attr:`toolkit.views.Column.field`): dtypes, enums (``isin``), id prefixes
(``Resource.id_pattern``), reference targets (per-target id prefixes, aware of
the ``<name>_type`` column where several targets are allowed), formats (phone,
ISO 3166 country, ISO 4217 currency, canonical URL), required fields
(non-nullable) and the uniqueness of the main table's ``id``. Date and date-time
columns are typed by the view, so their dtype is their format check. Every check
is vectorised (Polars expressions); none is element-wise.

Open enums (values the sources give only "for example", such as Appointment
``location_type``) are not checked: a value outside them is an observation, not
a fault.

:func:`validate` collects every failure (``lazy=True``) and, by default, raises
:class:`toolkit.errors.DataValidationError`; with ``errors="warn"`` it emits a
:class:`PmtkDataWarning` carrying the same ``failure_cases`` and returns the frame.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Literal

import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData
from pandera.errors import SchemaError, SchemaErrors

from toolkit import catalogue
from toolkit.errors import DataValidationError
from toolkit.views import Column, View, view

__all__ = ["PmtkDataWarning", "schema_for", "summarise", "validate"]


class PmtkDataWarning(UserWarning):
    """A frame failed its schema in ``errors="warn"`` mode.

    ``failure_cases`` is the pandera failure-cases Polars DataFrame (columns
    ``failure_case``, ``schema_context``, ``column``, ``check``, ``check_number``,
    ``index``), exactly as :class:`~toolkit.errors.DataValidationError` carries it.
    """

    def __init__(self, message: str, failure_cases: pl.DataFrame) -> None:
        super().__init__(message)
        self.failure_cases = failure_cases


def _anchored(body: str) -> str:
    return f"^(?:{body})$"


def _reference_check(v: View, col: Column) -> pa.Check:
    """Reference ids match their target's prefix; per type when the type is a column."""
    assert col.field is not None and col.field.ref is not None
    ref = col.field.ref
    any_target = _anchored("|".join(t.id_pattern for t in ref.targets))
    type_col = col.name[: -len("_id")] + "_type"
    has_type = len(ref.targets) > 1 and type_col in v.schema
    name = col.name

    def check(data: PolarsData) -> pl.LazyFrame:
        value = pl.col(name)
        ok = value.str.contains(any_target)
        if has_type:
            kind = pl.col(type_col)
            per_type = pl.lit(value=False)
            for t in ref.targets:
                per_type = per_type | (
                    (kind == t.type) & value.str.contains(_anchored(t.id_pattern))
                )
            ok = pl.when(kind.is_null()).then(ok).otherwise(per_type.fill_null(value=False))
        return data.lazyframe.select((value.is_null() | ok.fill_null(value=False)).alias(name))

    targets = " | ".join(f"{t.type}({'|'.join(t.prefixes) or 'any id'})" for t in ref.targets)
    return pa.Check(check, name="reference_id", error=f"id of a reference to {targets}")


def _conditional_format_check(col: Column) -> pa.Check:
    """A format that applies only where a sibling column holds given values (telecom)."""
    assert col.when is not None and col.field is not None and col.field.format is not None
    sibling, values = col.when
    pattern = catalogue.format_pattern(col.field.format)
    name = col.name

    def check(data: PolarsData) -> pl.LazyFrame:
        applies = pl.col(sibling).is_in(list(values)).fill_null(value=False)
        ok = ~applies | pl.col(name).is_null() | pl.col(name).str.contains(pattern)
        return data.lazyframe.select(ok.fill_null(value=False).alias(name))

    return pa.Check(
        check,
        name=f"{col.field.format}_format",
        error=f"{col.field.format} format {pattern} where {sibling} in {list(values)}",
    )


def _checks(v: View, col: Column) -> list[pa.Check]:
    f = col.field
    checks: list[pa.Check] = []
    if col.role == "id":
        res = catalogue.RESOURCES[v.resource]
        checks.append(
            pa.Check.str_matches(res.id_pattern, name="id_prefix", error=f"id {res.id_pattern}")
        )
    elif col.role == "ref_id":
        checks.append(_reference_check(v, col))
    elif col.role == "ref_type" and f is not None and f.ref is not None:
        types = list(f.ref.types)
        checks.append(pa.Check.isin(types, name="reference_type", error=f"one of {types}"))
    elif col.role == "key":
        res = catalogue.RESOURCES[v.resource]
        checks.append(pa.Check.str_matches(res.id_pattern, name="id_prefix"))
    elif col.role == "index":
        checks.append(pa.Check.ge(0))
    if f is None or col.role != "value":
        return checks
    if f.enum and not f.open_enum and col.dtype == pl.String:
        allowed = [v for v in f.enum if v is not None]
        checks.append(pa.Check.isin(allowed, name="enum", error=f"one of {allowed}"))
    if col.when is not None:
        checks.append(_conditional_format_check(col))
    elif f.format == "country":
        checks.append(
            pa.Check.isin(
                sorted(catalogue.country_codes()), name="country_code", error="ISO 3166 alpha-2"
            )
        )
    elif f.format == "currency":
        checks.append(
            pa.Check.isin(
                sorted(catalogue.currency_codes()), name="currency_code", error="ISO 4217 code"
            )
        )
    elif f.format in ("phone", "canonical") and col.dtype == pl.String:
        pattern = catalogue.format_pattern(f.format)
        checks.append(
            pa.Check.str_matches(pattern, name=f"{f.format}_format", error=f"{f.format} {pattern}")
        )
    return checks


@cache
def _schema(resource_type: str, table: str | None) -> pa.DataFrameSchema:
    v = view(resource_type, table)
    columns: dict[str, pa.Column] = {}
    for col in v.columns:
        required = col.role in ("id", "key", "index") or (
            col.field is not None and col.field.required and col.role == "value"
        )
        columns[col.name] = pa.Column(
            col.dtype,
            checks=_checks(v, col),
            nullable=not required,
            unique=col.role == "id",
            description=col.doc or None,
        )
    unique = [v.key, "index"] if v.key else None
    return pa.DataFrameSchema(
        columns,
        name=v.name,
        unique=unique,
        description=f"{v.name}: flat view of {resource_type}",
    )


def schema_for(resource_type: str, table: str | None = None) -> pa.DataFrameSchema:
    """The pandera.polars schema of one view, built from the catalogue.

    Parameters
    ----------
    resource_type
        A listed resource type, for example ``"Appointment"``.
    table
        A table name (see :func:`toolkit.views.table_names`); ``None`` for the main table.

    Returns
    -------
    pandera.polars.DataFrameSchema
        Dtypes, nullability, enums, id-prefix, reference, and format checks.

    Raises
    ------
    ConfigurationError
        Unknown resource type or table.

    Examples
    --------
    >>> schema_for("Appointment").columns["start"].nullable
    False
    """
    return _schema(resource_type, table)


def summarise(failure_cases: pl.DataFrame, *, examples: int = 3) -> str:
    """One line per (column, check): how many failures, and a few example values.

    Parameters
    ----------
    failure_cases
        A pandera failure-cases frame.
    examples
        How many distinct failing values to show per line.

    Returns
    -------
    str
        For example ``"allocation_type: isin(...) failed 2 time(s), e.g. 'Everything'"``.
    """
    grouped = (
        failure_cases.with_columns(
            pl.col("column").fill_null(pl.col("schema_context")),
            pl.col("failure_case").cast(pl.String),
        )
        .group_by("column", "check", maintain_order=True)
        .agg(pl.len().alias("n"), pl.col("failure_case").unique(maintain_order=True))
    )
    lines = []
    for row in grouped.iter_rows(named=True):
        shown = ", ".join(repr(v) for v in row["failure_case"][:examples])
        lines.append(f"  - {row['column']}: {row['check']} failed {row['n']} time(s), e.g. {shown}")
    return "\n".join(lines)


def validate(
    df: pl.DataFrame | pl.LazyFrame,
    resource_type: str,
    *,
    table: str | None = None,
    errors: Literal["raise", "warn"] = "raise",
) -> pl.DataFrame:
    """Validate a flat frame against its schema, collecting every failure.

    The data checks run only on an eager frame (pandera checks a LazyFrame's
    schema only), so a LazyFrame is collected first.

    Parameters
    ----------
    df
        A frame from :func:`toolkit.views.flatten` (or one of the same shape).
    resource_type
        A listed resource type.
    table
        The table ``df`` holds; ``None`` for the main table.
    errors
        ``"raise"`` (the default: never silently wrong) raises
        :class:`~toolkit.errors.DataValidationError`; ``"warn"`` emits a
        :class:`PmtkDataWarning` and returns ``df`` unchanged. Both carry the
        pandera ``failure_cases`` frame.

    Returns
    -------
    polars.DataFrame
        ``df`` (collected when it was lazy).

    Raises
    ------
    DataValidationError
        ``errors="raise"`` and a check failed; ``.failure_cases`` lists every failure.
    ValueError
        ``errors`` is neither ``"raise"`` nor ``"warn"``.
    """
    if errors not in ("raise", "warn"):
        msg = f"errors must be 'raise' or 'warn', not {errors!r}"
        raise ValueError(msg)
    frame = df.collect() if isinstance(df, pl.LazyFrame) else df
    schema = schema_for(resource_type, table)
    try:
        schema.validate(frame, lazy=True)
    except SchemaErrors as exc:
        cases = exc.failure_cases
    except SchemaError as exc:  # pragma: no cover - lazy=True collects into SchemaErrors
        cases = exc.failure_cases if isinstance(exc.failure_cases, pl.DataFrame) else None
        if cases is None:
            raise DataValidationError(str(exc), None) from None
    else:
        return frame
    assert isinstance(cases, pl.DataFrame)
    name = table or resource_type
    message = f"{name}: {cases.height} failure(s) against its schema:\n{summarise(cases)}"
    if errors == "raise":
        raise DataValidationError(message, cases)
    warnings.warn(PmtkDataWarning(message, cases), stacklevel=2)
    return frame
