"""Projection of the read entries into typed tables, with each row's extra and invalid values."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
import polars as pl

from toolkit.views.check import column_key
from toolkit.views.declare import DATETIME, View, resource_views, view
from toolkit.views.expressions import compile_path, complete_datetimes, typed_expr
from toolkit.views.reader import compiled_reader, compiled_table, read_entries


def _unparsed(typed: pl.DataFrame, raw: pl.DataFrame, view: View) -> pl.DataFrame:
    """``typed`` with each date or date-time text that did not parse kept in ``invalid``.

    The cell stays null, as for a value of an unexpected JSON type, and
    ``validate`` reports it (``check`` ``format``) under the column's rules: a
    spec column fails, never the whole page.
    """
    found: dict[int, list[dict[str, Any]]] = {}
    for c in view.columns:
        if c.dtype not in (pl.Date, DATETIME):
            continue
        parsed, text = typed.get_column(c.name), raw.get_column(c.name)
        if parsed.null_count() == text.null_count():
            continue
        key = column_key(c.path)
        rows = (parsed.is_null() & text.is_not_null()).arg_true().to_list()
        at = raw.get_column("index").to_list() if view.for_each else None
        for row in rows:
            path = f"{view.for_each}[{at[row]}].{key}" if at is not None else key
            problem = {"path": path, "column": c.name, "value": text[row], "check": "format"}
            found.setdefault(row, []).append(problem)
    if not found:
        return typed
    invalid = typed.get_column("invalid").to_list()
    for row, problems in found.items():
        before = msgspec.json.decode(invalid[row]) if invalid[row] is not None else []
        invalid[row] = msgspec.json.encode(before + problems).decode()
    return typed.with_columns(pl.Series("invalid", invalid, dtype=pl.String))


def _row_owner(view: View) -> Any:
    """A test of whether a path (``participant[1].period``) belongs to a row of ``view``.

    A child table's row owns the paths below its element (``<for_each>[<index>]``);
    the main table owns every other path.
    """
    children = tuple(v.for_each for v in resource_views(view.resource) if v.for_each)

    def owns(path: str, index: int | None) -> bool:
        if view.for_each is None:
            return not any(path.startswith(f"{c}[") for c in children if c)
        head = f"{view.for_each}[{index}]"
        return path == head or path.startswith((f"{head}.", f"{head}["))

    return owns


def _per_row(view: View, frame: pl.DataFrame) -> list[pl.Series]:
    """The ``extra`` and ``invalid`` columns of ``view``: what belongs to each row.

    ``frame`` has the record's unknown keys (``extra``, a JSON object by path)
    and odd values (``invalid``, from :func:`_repair`) and, for a child table,
    the element's position in ``index``. Python runs only over the rows that
    have either.
    """
    owns = _row_owner(view)
    out: list[pl.Series] = []
    for name in ("extra", "invalid"):
        column = frame.get_column(name)
        if column.null_count() == frame.height:
            continue
        rows = column.is_not_null().arg_true()
        positions = (
            frame.get_column("index").gather(rows).to_list()
            if view.for_each
            else [None] * len(rows)
        )
        values: list[str | None] = []
        for text, at in zip(column.gather(rows).to_list(), positions, strict=True):
            mine: Any
            if name == "extra":
                mine = {k: v for k, v in msgspec.json.decode(text).items() if owns(k, at)}
            else:
                mine = [
                    {"path": p["path"], "column": p["column"], "value": p["value"]}
                    for p in msgspec.json.decode(text)
                    if p["table"] == view.name and p["index"] == at
                ]
            values.append(msgspec.json.encode(mine).decode() if mine else None)
        per_row = pl.repeat(None, frame.height, dtype=pl.String, eager=True).alias(name)
        out.append(per_row.scatter(rows, pl.Series(values, dtype=pl.String)))
    return out


@dataclass(frozen=True, slots=True)
class _Projection:
    """The Polars expressions of one view, compiled once (see :func:`_projection`)."""

    items: list[pl.Expr] | None  # a child table's select of its elements (None: main table)
    raw: list[pl.Expr]  # each column as read (date-times as text)
    typed: list[pl.Expr]  # each column in its declared dtype, from ``raw``
    id_col: str  # the column that names a row's record in errors


@cache
def _projection(view: View) -> _Projection:
    """Compiling a view's paths costs ~3 ms of Python: once per view, not per call."""
    passed = ("extra", "invalid")
    items: list[pl.Expr] | None = None
    if view.for_each is None:
        base = pl.col("resource")
        raw = [
            (pl.col(c.name) if c.name in passed else compile_path(c.path, base)).alias(c.name)
            for c in view.columns
        ]
        id_col = "id"
    else:
        key = view.key
        assert key is not None
        items = [
            pl.col("resource").struct.field("id").alias(key),
            compile_path(view.for_each, pl.col("resource")).alias("_item"),
            pl.col("extra"),
            pl.col("invalid"),
        ]
        base = pl.col("_item")
        raw = [
            pl.col(c.name)
            if c.name in (key, "index", "extra", "invalid")
            else compile_path(c.path, base).alias(c.name)
            for c in view.columns
        ]
        id_col = key
    typed = [
        typed_expr(pl.col(c.name), c.dtype, c.role).cast(c.dtype).alias(c.name)
        for c in view.columns
    ]
    return _Projection(items, raw, typed, id_col)


def _extension_rows(view: View, entries: pl.DataFrame) -> pl.DataFrame:
    """The extension table: the rows the repair path found (``extensions``), with the record id."""
    key = view.key
    assert key is not None
    texts = entries.get_column("extensions")
    if texts.null_count() == entries.height:
        return pl.DataFrame(schema=view.schema)
    rows = texts.is_not_null().arg_true()
    ids = entries.get_column("resource").struct.field("id").gather(rows).to_list()
    found = [
        {key: record, **row}
        for record, text in zip(ids, texts.gather(rows).to_list(), strict=True)
        for row in msgspec.json.decode(text)
    ]
    return pl.DataFrame(found, schema=view.schema, orient="row")


def _without_null_items(raw: pl.DataFrame, items: pl.Series) -> pl.DataFrame:
    """A child table's rows but those of null array items (``participant: [null, {...}]``).

    FHIR JSON has no null items, and to FHIRPath a collection holds none (the
    ViewDefinition runner drops them too): such an item is no row, and the other
    rows keep their positions in ``index``. An item the repair could not read is
    null as well, but it keeps its row for what its ``extra`` or ``invalid`` says;
    a row with nothing in either holds nothing at all.
    """
    nothing = items.is_null() & raw.get_column("extra").is_null()
    nothing = nothing & raw.get_column("invalid").is_null()
    if not nothing.any():
        return raw
    return raw.filter(~nothing)


def _project(view: View, entries: pl.DataFrame) -> pl.DataFrame:
    if view.extensions:
        return _extension_rows(view, entries)
    compiled = _projection(view)
    frame = entries
    if compiled.items is not None:
        frame = (
            entries.select(compiled.items)
            .filter(pl.col("_item").list.len() > 0)
            .with_columns(index=pl.int_ranges(pl.col("_item").list.len(), dtype=pl.Int64))
            .explode("_item", "index")
        )
    raw = frame.select(compiled.raw)
    if any(raw.get_column(n).null_count() != raw.height for n in ("extra", "invalid")):
        raw = raw.with_columns(_per_row(view, raw))
    if compiled.items is not None:
        raw = _without_null_items(raw, frame.get_column("_item"))
    typed = raw.select(compiled.typed)
    if any(c.dtype in (pl.Date, DATETIME) for c in view.columns):
        typed = complete_datetimes(typed, raw, view)
        typed = _unparsed(typed, raw, view)
    return typed


def flatten_tables(resource_type: str, pages: Any) -> dict[str, pl.DataFrame]:
    """Flatten Bundle pages into the main table and every child table.

    Each page is read once by Polars' JSON reader with the explicit schema of
    :func:`read_schema` (consecutive pages in batches of about 512 KiB, joined
    into one JSON array; a batch that does not read as one Bundle per page is
    read page by page); columns are then projected with Polars expressions.
    Top-level keys outside the view are found exactly by a msgspec decode of
    each page that skips every value; only pages that have one are parsed a
    second time (with msgspec, exact for integers beyond 64 bits) to build the
    exact ``extra`` JSON of each record (unknown keys at any depth, by path) and
    the rows of its extension table
    (every extension no column reads, at any depth, with its url).

    Parameters
    ----------
    resource_type
        A listed resource type, for example ``"Appointment"``.
    pages
        An iterable of Bundle JSON pages (bytes, str or dict), or a single page.

    Returns
    -------
    dict of str to polars.DataFrame
        The main table under the resource name, child tables under
        ``<resource>_<child>`` (see :data:`VIEWS`) and the extension table
        ``<resource>_extension``, each with every declared column in its
        declared dtype.

    Raises
    ------
    ConfigurationError
        ``resource_type`` has no view.
    DataValidationError
        A page is an OperationOutcome or not a Bundle, or cannot be read with the
        declared types. A date or date-time in no FHIR form is not an error
        here: its cell is null and the text is kept in ``invalid``.

    Examples
    --------
    >>> page = {"resourceType": "Bundle", "entry": [{"resource": {
    ...     "resourceType": "Referral", "id": "7",
    ...     "performer": {"reference": "/main/Practitioner/PR-12", "type": "Practitioner"}}}]}
    >>> flatten_tables("Referral", [page])["Referral"].get_column("performer_id").to_list()
    ['PR-12']
    """
    comp = compiled_reader(resource_type)
    entries = read_entries(comp, pages)
    return {v.name: _project(v, entries) for v in comp.views}


def flatten(resource_type: str, pages: Any, *, table: str | None = None) -> pl.DataFrame:
    """Flatten Bundle pages into one table of ``resource_type`` (the main table by default).

    Parameters
    ----------
    resource_type
        A listed resource type, for example ``"Appointment"``.
    pages
        An iterable of Bundle JSON pages (bytes, str or dict), or a single page.
    table
        A table name from :func:`table_names`, for example
        ``"appointment_participant"``; ``None`` for the main table.

    Returns
    -------
    polars.DataFrame
        Every declared column of the view, in its declared dtype.

    Raises
    ------
    ConfigurationError
        Unknown resource type or table.
    DataValidationError
        As for :func:`flatten_tables`.

    Notes
    -----
    Only the top-level fields the table uses are read (the main Appointment table
    reads no ``participant``), which is faster than :func:`flatten_tables`; a value
    of the wrong JSON type in a field the table does not use therefore stops only
    the tables that use it. Unknown keys are checked against every field.

    Examples
    --------
    >>> flatten("Appointment", []).schema["start"]
    Datetime(time_unit='us', time_zone='UTC')
    """
    view_ = view(resource_type, table)
    entries = read_entries(compiled_table(resource_type, view_.name), pages)
    return _project(view_, entries)
