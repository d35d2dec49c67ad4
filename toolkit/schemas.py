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
from collections.abc import Iterator
from functools import cache
from typing import Literal

import orjson
import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData
from pandera.errors import SchemaError, SchemaErrors

from toolkit import catalogue
from toolkit.errors import DataValidationError
from toolkit.views import VIEWS, Column, View, view

__all__ = [
    "PmtkDataWarning",
    "schema_for",
    "summarise",
    "validate",
]


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
    has_type = type_col in v.schema
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
    elif col.role == "precision" and f is not None:
        full = "time" if f.type == "date-time" else "day"
        checks.append(
            pa.Check.isin([full], name="full_precision", error=f"a full {f.type} (`{full}`)")
        )
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


def _column_source(v: View, col: Column) -> str:
    """Where a column's rules come from; the keys of a table are pmtk's shape of the spec's ids."""
    return "spec" if col.role in ("id", "key", "index", "extra", "invalid") else col.source


@cache
def _schema(resource_type: str, table: str | None, spec: bool = True) -> pa.DataFrameSchema:
    """The spec's rules (``spec=True``: failures) or the other rules (observations).

    The rules of a column come from the column's source (:attr:`Column.source`):
    ``spec`` rules go in the first schema; ``facts`` and ``pmtk`` rules in the
    second, which holds only the columns that have such rules.
    """
    v = view(resource_type, table)
    columns: dict[str, pa.Column] = {}
    for col in v.columns:
        mine = (_column_source(v, col) == "spec") == spec
        if not mine and not spec:
            continue
        required = col.role in ("id", "key", "index") or (
            col.field is not None and col.field.required and col.role == "value"
        )
        columns[col.name] = pa.Column(
            col.dtype,
            checks=_checks(v, col) if mine else [],
            nullable=not (required and mine),
            unique=col.role == "id",
            description=col.doc or None,
        )
    unique = list(v.unique) if v.unique and spec else None
    return pa.DataFrameSchema(
        columns,
        name=v.name,
        unique=unique,
        description=f"{v.name}: flat view of {resource_type}"
        + ("" if spec else " (rules from the facts and pmtk's own reading)"),
    )


def custom_frame_checks(v: View) -> Iterator[tuple[Column, str, str]]:
    """(column, check name, source) of every check of ``v`` whose rule is not the spec's."""
    for col in v.columns:
        source = _column_source(v, col)
        if source == "spec":
            continue
        if col.field is not None and col.field.required and col.role == "value":
            yield col, "not_nullable", source
        for c in _checks(v, col):
            yield col, c.name or str(c), source


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
    df, resource_type, table
        A frame from :func:`toolkit.views.flatten` (or one of the same shape), its
        listed resource type and the table it holds (``None`` for the main table).
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
    failures, observed = _failure_cases(frame, resource_type, table)
    name = table or resource_type
    if observed is not None:
        warnings.warn(PmtkDataWarning(_observed(name, observed), observed), stacklevel=2)
    if failures is None:
        return frame
    message = f"{name}: {failures.height} failure(s) against its schema:\n{summarise(failures)}"
    if errors == "raise":
        raise DataValidationError(message, failures)
    warnings.warn(PmtkDataWarning(message, failures), stacklevel=2)
    return frame


def _failure_cases(
    frame: pl.DataFrame, resource_type: str, table: str | None
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """The failures against the spec's rules and the observations against the others."""
    v = view(resource_type, table)
    unread = _unread_cases(frame, v)
    failures = _with_ids(
        _concat(_pandera_cases(_schema(resource_type, table, spec=True), frame), unread[0]),
        frame,
        v,
    )
    observed = _with_ids(
        _concat(_pandera_cases(_schema(resource_type, table, spec=False), frame), unread[1]),
        frame,
        v,
    )
    return failures, observed


def _observed(name: str, observed: pl.DataFrame) -> str:
    """The warning's text for values that break only non-spec rules."""
    return (
        f"{name}: {observed.height} value(s) break rules that come from the facts or "
        f"pmtk's own reading, not the spec (an observation, not a failure):\n"
        f"{summarise(observed)}"
    )


_CASES_SCHEMA = pl.Schema(
    {
        "failure_case": pl.String(),
        "schema_context": pl.String(),
        "column": pl.String(),
        "check": pl.String(),
        "check_number": pl.Int32(),
        "index": pl.Int32(),
    }
)


def _pandera_cases(schema: pa.DataFrameSchema, frame: pl.DataFrame) -> pl.DataFrame | None:
    try:
        schema.validate(frame, lazy=True)
    except SchemaErrors as exc:
        cases = exc.failure_cases
    except SchemaError as exc:  # pragma: no cover - lazy=True collects into SchemaErrors
        cases = exc.failure_cases if isinstance(exc.failure_cases, pl.DataFrame) else None
        if cases is None:
            raise DataValidationError(str(exc), None) from None
    else:
        return None
    assert isinstance(cases, pl.DataFrame)
    return cases.select(pl.col(n).cast(t) for n, t in _CASES_SCHEMA.items())


def _unread_cases(frame: pl.DataFrame, v: View) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """Failure cases for the values read as null for their JSON type (the ``invalid`` column).

    One row per value: ``column`` is the column that holds the null (for a
    main table, a child table's column as ``<table>.<column>``; the JSON path
    when no column reads it), ``check`` is ``json_type: <path>``, and
    ``failure_case`` the raw value as JSON. Split into (spec rules, other rules).
    """
    if "invalid" not in frame.columns or frame.get_column("invalid").null_count() == frame.height:
        return None, None
    sources = _sources(v.resource)
    rows: tuple[list[dict[str, object]], list[dict[str, object]]] = ([], [])
    for index, text in enumerate(frame.get_column("invalid").to_list()):
        if text is None:
            continue
        for problem in orjson.loads(text):
            column = problem["column"]
            qualified = column if column is None or "." in column else f"{v.name}.{column}"
            source = sources.get(qualified or "", "spec")
            rows[source != "spec"].append(
                {
                    "failure_case": orjson.dumps(problem["value"]).decode(),
                    "schema_context": "Column",
                    "column": column if column is not None else problem["path"],
                    "check": f"{problem.get('check', 'json_type')}: {problem['path']}",
                    "check_number": None,
                    "index": index,
                }
            )
    return tuple(  # type: ignore[return-value]
        pl.DataFrame(r, schema=_CASES_SCHEMA) if r else None for r in rows
    )


@cache
def _sources(resource_type: str) -> dict[str, str]:
    """``<table>.<column>`` → the source of its rules, for every table of the resource."""

    return {
        f"{v.name}.{c.name}": _column_source(v, c) for v in VIEWS[resource_type] for c in v.columns
    }


def _concat(*parts: pl.DataFrame | None) -> pl.DataFrame | None:
    present = [p for p in parts if p is not None and p.height]
    return pl.concat(present) if present else None


def _with_ids(cases: pl.DataFrame | None, frame: pl.DataFrame, v: View) -> pl.DataFrame | None:
    """Add ``id``: the record id of each failing row (a child table's parent id)."""
    if cases is None:
        return None
    key = v.key or "id"
    if key not in frame.columns:
        return cases.with_columns(id=pl.lit(None, dtype=pl.String))
    ids = frame.select(pl.col(key).cast(pl.String).alias("id")).with_row_index("index")
    ids = ids.with_columns(pl.col("index").cast(pl.Int32))
    return cases.join(ids, on="index", how="left", maintain_order="left")
