"""Declared flat views of the listed resources, and the fast Bundle → Polars flattener.

A view is *data*, in the style of a SQL-on-FHIR v2 ViewDefinition: a table name,
an optional ``for_each`` path (one row per element of a repeating structure, for
child tables) and columns, each a ``name``, a ``path`` and a Polars ``dtype``.
:data:`VIEWS` is derived from :mod:`toolkit.catalogue`, so every field, type and
extension url is written once, there.

Path language (a small FHIRPath subset, compiled to Polars expressions):

* ``a.b``                 -- field ``b`` of object ``a``;
* ``first()``             -- first element of an array;
* ``where(url='u')``      -- first element of an array whose ``url`` is ``u``
  (how extension-encoded fields are read);
* ``getReferenceKey()``   -- the id at the end of a reference string, prefix kept
  (``/main/Practitioner/PR-12`` → ``PR-12``);
* ``$this``               -- the row element itself (child tables of references).

Reading is done by Polars' native JSON reader with an explicit schema derived
from the catalogue (:func:`read_schema`); nothing is inferred, so every declared
column exists with its declared dtype even when no record carries it. Top-level
keys the view does not know are kept, as JSON, in the ``extra`` column of the main
table (see :func:`flatten_tables` for how that stays exact and cheap).
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import msgspec
import orjson
import polars as pl
from polars.datatypes import DataTypeClass

from toolkit import catalogue
from toolkit.catalogue import Field, Resource, Source
from toolkit.errors import ConfigurationError, DataValidationError, unknown_name

__all__ = [
    "DATETIME",
    "VIEWS",
    "Column",
    "View",
    "flatten",
    "flatten_tables",
    "read_schema",
    "table_names",
    "view",
    "views_markdown",
]

Role = Literal["value", "id", "ref_id", "ref_type", "key", "index", "extra", "invalid"]

DATETIME = pl.Datetime("us", "UTC")
"""The dtype of every date-time column: microseconds, converted to UTC."""

_PRIMITIVE_READ: dict[str, pl.DataType] = {
    "string": pl.String(),
    "code": pl.String(),
    "canonical": pl.String(),
    "base64": pl.String(),
    "boolean": pl.Boolean(),
    "integer": pl.Int64(),
    "number": pl.Float64(),
    "date": pl.String(),
    "date-time": pl.String(),
}
_PRIMITIVE_COLUMN: dict[str, pl.DataType] = {
    **_PRIMITIVE_READ,
    "date": pl.Date(),
    "date-time": DATETIME,
}
_REFERENCE = pl.Struct({"reference": pl.String(), "type": pl.String()})
_CODING = pl.Struct({"system": pl.String(), "code": pl.String(), "display": pl.String()})

# Names the generic rules would get wrong; keyed by (resource, dotted catalogue path).
_TABLE_RENAMES: dict[tuple[str, str], str] = {
    ("InvoiceLine", "unitPriceComponent"): "price_component",
}
# Column names that would collide with a reference column (``subscriber_id``).
_COLUMN_RENAMES: dict[tuple[str, str], str] = {
    ("Coverage", "subscriberID"): "subscriber_number",
}
# Object segments that add nothing to a column name (``limitMoney.amount.value``
# → ``limit_money_value``; ``type.coding.code`` → ``type_code``).
_ELIDED_SEGMENTS = frozenset({"amount", "coding", "meta"})


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a view: its name, source path, Polars dtype and a note."""

    name: str
    path: str
    dtype: pl.DataType
    doc: str = ""
    field: Field | None = None
    """The catalogue field the column comes from (its rules feed the pandera schema)."""
    role: Role = "value"
    """``value``; ``id`` (the resource id); ``ref_id``/``ref_type`` (the id or type of
    a reference, ``field.ref`` has its targets); ``key``/``index`` (child-table keys);
    ``extra`` (unknown keys)."""
    when: tuple[str, tuple[str, ...]] | None = None
    """``(column, values)``: the field's format applies only where ``column`` is in values."""
    source: Source = "spec"
    """Where the column's rules come from: ``spec``, ``facts`` or ``pmtk`` (the field's
    own source, or that of an enclosing object or resource that is not the spec's)."""


@dataclass(frozen=True, slots=True)
class View:
    """A flat table over one resource type.

    ``for_each`` is ``None`` for the main table (one row per resource) and the
    path of a repeating element for a child table (one row per element, keyed by
    ``<resource>_id`` and ``index``, the element's position).
    """

    name: str
    resource: str
    columns: tuple[Column, ...]
    for_each: str | None = None
    doc: str = ""

    @property
    def key(self) -> str | None:
        """The parent-id column of a child table (``None`` for a main table)."""
        return f"{_snake(self.resource)}_id" if self.for_each else None

    @property
    def schema(self) -> pl.Schema:
        """Column names and dtypes, in order."""
        return pl.Schema({c.name: c.dtype for c in self.columns})


# --------------------------------------------------------------------------- derivation


def _snake(name: str) -> str:
    name = name.replace("-", "_").replace(" ", "_")
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return name.lower()


def _join(prefix: str, child: Field) -> str:
    """The column name of ``child`` nested below a column-name ``prefix``."""
    name = _snake(child.name)
    if not prefix:
        return name
    last = prefix.rsplit("_", 1)[-1]
    if name == last:
        return prefix
    for strip in (last, "amount"):
        if name.startswith(strip + "_"):
            return f"{prefix}_{name[len(strip) + 1 :]}"
    return f"{prefix}_{name}"


def _field_read_dtype(f: Field) -> pl.DataType:
    inner: pl.DataType
    if f.type == "reference":
        inner = _REFERENCE
    elif f.type == "object":
        inner = _level_read_dtype(f.fields)
    else:
        inner = _PRIMITIVE_READ[f.type]
    return pl.List(inner) if f.many else inner


_CODED_KEYS = ("valueCoding", "valueCode", "valueString")
"""The forms a coded extension value arrives in (facts, "Shapes seen on the live service")."""


def _extension_value_dtypes(f: Field) -> dict[str, pl.DataType]:
    """The value keys an extension element is read with: a superset of the live forms."""
    assert f.extension is not None
    key = f.extension.value_key
    if key == "valueReference":
        return {key: _REFERENCE}
    if key in ("valueCoding", "valueCode"):
        return {"valueCoding": _CODING, "valueCode": pl.String(), "valueString": pl.String()}
    return {key: _PRIMITIVE_READ[f.type]}


def _level_read_dtype(fields: tuple[Field, ...]) -> pl.Struct:
    """The read Struct of one object level, extensions grouped by container."""
    out: dict[str, pl.DataType] = {}
    containers: dict[str, dict[str, pl.DataType]] = {}
    for f in fields:
        if f.extension is not None:
            values = containers.setdefault(f.extension.container, {"url": pl.String()})
            values.update(_extension_value_dtypes(f))
        else:
            out[f.name] = _field_read_dtype(f)
    for container, values in containers.items():
        out[container] = pl.List(pl.Struct(values))
    return pl.Struct(out)


_VALUE_ASPECTS: tuple[catalogue.Aspect, ...] = ("type", "enum", "format")


def _rule_source(f: Field, aspects: tuple[catalogue.Aspect, ...] = _VALUE_ASPECTS) -> Source:
    """The weakest source among the rules a column checks.

    A column's checks are one schema, so an enum only the facts give (Coverage
    ``status``) makes that column an observation; a reference's id column also
    carries its id-prefix rule (``reference``), its type column does not. How a
    value is encoded (``encoding``) never reaches a frame: the reader takes every form.
    """
    return catalogue.weakest(f.source, *(f.source_of(a) for a in aspects))


def _source_path(f: Field, parent: str) -> str:
    if f.extension is not None:
        ext = f.extension
        coded = ext.value_key in ("valueCoding", "valueCode") and f.type != "object"
        value = "coded()" if coded else ext.value_key
        base = f"{ext.container}.where(url='{ext.url}').{value}"
    else:
        base = f.name
    return f"{parent}.{base}" if parent else base


def _column_dtype(f: Field) -> pl.DataType:
    return _PRIMITIVE_COLUMN[f.type]


def _columns(
    res: Resource,
    fields: tuple[Field, ...],
    table: str,
    prefix: str,
    parent: str,
    root: bool,
    inherited: Source = "spec",
) -> tuple[list[Column], list[tuple[str, Field, str]]]:
    """Columns of one level; repeating objects at the root are returned as children.

    ``inherited`` is the source of the enclosing object (or resource): a field
    inside a rule that only the facts give is itself only as good as the facts.
    """
    cols: list[Column] = []
    children: list[tuple[str, Field, str]] = []
    for f in fields:
        if f.write_only:
            continue
        src: Source = inherited if inherited != "spec" else f.source
        if f.extension is not None:
            name = _snake(f.name)
            if name.startswith(table + "_"):
                name = name[len(table) + 1 :]
            name = f"{prefix}_{name}" if prefix else name
        else:
            name = _COLUMN_RENAMES.get((res.name, f.name)) or _join(prefix, f)
        path = _source_path(f, parent)
        if root and f.many and f.type in ("object", "reference"):
            children.append((name, f, path))
            continue
        if f.type == "reference":
            ref = f.ref
            assert ref is not None
            targets = " | ".join(ref.types)
            cols.append(
                Column(
                    f"{name}_id",
                    f"{path}{'.first()' if f.many else ''}.reference.getReferenceKey()",
                    pl.String(),
                    f"id of the referenced {targets}, prefix kept",
                    field=f,
                    role="ref_id",
                    source=catalogue.weakest(src, _rule_source(f, ("type", "reference"))),
                )
            )
            if len(ref.targets) > 1:
                cols.append(
                    Column(
                        f"{name}_type",
                        f"{path}.getReferenceType()",
                        pl.String(),
                        f"one of {targets}",
                        field=f,
                        role="ref_type",
                        source=catalogue.weakest(src, _rule_source(f, ("type",))),
                    )
                )
        elif f.type == "object":
            step = f"{path}.first()" if f.many else path
            if f.name == "meta":
                sub_prefix = ""
            elif f.name in _ELIDED_SEGMENTS and prefix:
                sub_prefix = prefix
            else:
                sub_prefix = name
            sub, _ = _columns(res, f.fields, table, sub_prefix, step, root=False, inherited=src)
            note = " (first element)" if f.many else ""
            coded = f.extension is not None and f.extension.value_key == "valueCoding"
            cols.extend(
                dataclasses.replace(
                    c,
                    # A coded object's code may arrive as valueCode or valueString too.
                    path=c.path[: -len("valueCoding.code")] + "coded()"
                    if coded and c.path.endswith(".valueCoding.code")
                    else c.path,
                    doc=(c.doc + note).strip(),
                )
                for c in sub
            )
        elif f.extension is not None and f.extension.value_key in ("valueCoding", "valueCode"):
            cols.append(
                Column(
                    name,
                    path,
                    pl.String(),
                    "coded value",
                    field=f,
                    source=catalogue.weakest(src, _rule_source(f)),
                )
            )
        elif f.many:
            cols.append(
                Column(
                    name,
                    path,
                    pl.List(_column_dtype(f)),
                    "array of values",
                    field=f,
                    source=catalogue.weakest(src, _rule_source(f)),
                )
            )
        else:
            note = "converted to UTC" if f.type == "date-time" else ""
            when = None
            if f.format_when is not None:
                sibling, values = f.format_when
                when = (_join(prefix, Field(sibling, "string")), values)
                note = f"{f.format} format where {when[0]} is one of {', '.join(values)}"
            role: Role = "id" if root and f.name == "id" else "value"
            cols.append(
                Column(
                    name,
                    path,
                    _column_dtype(f),
                    note,
                    field=f,
                    role=role,
                    when=when,
                    source=catalogue.weakest(src, _rule_source(f)),
                )
            )
    return cols, children


# Repeating objects whose preferred element also gives main-table columns: the
# ``official`` entry, else the first (``name_family`` beside the ``<type>_name`` table).
_PREFERRED: dict[tuple[str, str], tuple[str, str]] = {
    ("Practitioner", "name"): ("use", "official"),
    ("Patient", "name"): ("use", "official"),
}

_INVALID_DOC = (
    "JSON array of the values of an unexpected JSON type read as null "
    "(`path`, `column`, raw `value`); null when none"
)


def _extra_column() -> Column:
    return Column(
        "extra",
        "(keys the view does not know)",
        pl.String(),
        "JSON object of the row's unknown keys, nested ones by path "
        "(`participant[0].period`); null when none",
        role="extra",
    )


def _invalid_column() -> Column:
    return Column(
        "invalid", "(values of an unexpected JSON type)", pl.String(), _INVALID_DOC, role="invalid"
    )


_READ_AS_ARRAY: frozenset[tuple[str, str]] = frozenset({("Practitioner", "name")})
"""Fields the spec gives as one object and the live service sends as an array (facts):
read as an array, so that the live form takes the fast path (the spec's single
object is one of the alternative forms, :data:`_ALTERNATIVE_FORMS`). The
catalogue keeps the spec's form, which the mock's write checks and the contract
suite use."""


def _reader_fields(res: Resource) -> tuple[Field, ...]:
    """The resource's fields as the reader reads them (see :data:`_READ_AS_ARRAY`)."""
    return tuple(
        dataclasses.replace(f, many=True) if (res.name, f.name) in _READ_AS_ARRAY else f
        for f in res.fields
    )


def _views_for(res: Resource) -> tuple[View, ...]:
    table = _snake(res.name)
    fields = _reader_fields(res)
    cols, children = _columns(res, fields, table, "", "", root=True, inherited=res.source)
    for _name, f, path in children:
        preferred = _PREFERRED.get((res.name, f.name))
        if preferred is None:
            continue
        src: Source = res.source if res.source != "spec" else f.source
        key_, value = preferred
        sub, _ = _columns(
            res, f.fields, table, _snake(f.name), f"{path}.prefer({key_}='{value}')", False, src
        )
        note = f"(the `{value}` entry, else the first)"
        cols.extend(dataclasses.replace(c, doc=f"{c.doc} {note}".strip()) for c in sub)
    cols.append(_extra_column())
    cols.append(_invalid_column())
    views = [View(res.name, res.name, tuple(cols), doc=res.doc)]
    key = f"{table}_id"
    for name, f, path in children:
        child_name = _TABLE_RENAMES.get((res.name, f.name), name)
        src = res.source if res.source != "spec" else f.source
        lead = (
            Column(key, "%parent.id", pl.String(), f"id of the parent {res.name}", role="key"),
            Column("index", "%index", pl.Int64(), "position in the parent's array", role="index"),
        )
        if f.type == "reference":
            sub, _ = _columns(res, (Field(f.name, "reference", ref=f.ref),), "", "", "", False, src)
            sub = [
                dataclasses.replace(c, path=c.path.replace(f"{f.name}.", "$this.", 1), field=f)
                for c in sub
            ]
        else:
            sub, _ = _columns(res, f.fields, f"{table}_{child_name}", "", "", False, src)
        views.append(
            View(
                f"{table}_{child_name}",
                res.name,
                (*lead, *sub, _extra_column(), _invalid_column()),
                for_each=path,
                doc=f.doc,
            )
        )
    return tuple(views)


VIEWS: dict[str, tuple[View, ...]] = {
    name: _views_for(catalogue.RESOURCES[name]) for name in catalogue.LISTED_RESOURCES
}
"""Views per listed resource: the main table first, then its child tables."""


def _resource_views(resource_type: str) -> tuple[View, ...]:
    try:
        return VIEWS[resource_type]
    except (KeyError, TypeError):
        raise unknown_name("resource type", resource_type, VIEWS, " with a view") from None


def table_names(resource_type: str) -> tuple[str, ...]:
    """Names of the tables of ``resource_type``: the main table first.

    Parameters
    ----------
    resource_type
        A listed resource type, for example ``"Appointment"``.

    Returns
    -------
    tuple of str
        For example ``("Appointment", "appointment_participant", ...)``.
    """
    return tuple(v.name for v in _resource_views(resource_type))


def view(resource_type: str, table: str | None = None) -> View:
    """The view of one table of ``resource_type`` (the main table by default).

    Parameters
    ----------
    resource_type
        A listed resource type.
    table
        A table name from :func:`table_names`; ``None`` for the main table.

    Returns
    -------
    View
        The declared view.

    Raises
    ------
    ConfigurationError
        Unknown resource type or table.
    """
    views = _resource_views(resource_type)
    if table is None:
        return views[0]
    for v in views:
        if v.name == table:
            return v
    raise unknown_name("table", table, [v.name for v in views], f" of {resource_type}")


# --------------------------------------------------------------------------- path compiler

_STEP = re.compile(
    r"where\(url='(?P<url>[^']*)'\)"
    r"|prefer\((?P<pkey>\w+)='(?P<pvalue>[^']*)'\)"
    r"|(?P<fn>first|getReferenceKey|getReferenceType|coded)\(\)"
    r"|(?P<key>\$this|[A-Za-z_][\w-]*)"
)


def _steps(path: str) -> Iterator[re.Match[str]]:
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            msg = f"bad view path {path!r} at {pos}"
            raise ConfigurationError(msg)
        yield m
        pos = m.end()
        if pos < len(path) and path[pos] == ".":
            pos += 1


def _url_is(name: str) -> pl.Expr:
    """An extension element's ``url`` names ``name``: bare, or as the last path segment."""
    url = pl.element().struct.field("url")
    return (url == pl.lit(name)) | url.str.ends_with(f"/{name}")


def _compile(path: str, base: pl.Expr) -> pl.Expr:
    expr = base
    for m in _steps(path):
        if m.group("url") is not None:
            expr = expr.list.filter(_url_is(m.group("url"))).list.first()
        elif m.group("pkey") is not None:
            chosen = pl.element().struct.field(m.group("pkey")) == pl.lit(m.group("pvalue"))
            expr = pl.coalesce(expr.list.filter(chosen).list.first(), expr.list.first())
        elif m.group("fn") == "first":
            expr = expr.list.first()
        elif m.group("fn") == "getReferenceKey":
            expr = expr.str.extract(r"[^/]+$", 0)  # no capture group: twice as fast
        elif m.group("fn") == "getReferenceType":
            # The declared type, else the second-last segment of the reference:
            # /main/Patient/1, https://host/main/Patient/1 and Patient/1 alike.
            expr = pl.coalesce(
                expr.struct.field("type"),
                expr.struct.field("reference").str.extract(r"([^/]+)/[^/]+$", 1),
            )
        elif m.group("fn") == "coded":
            expr = pl.coalesce(
                expr.struct.field("valueCoding").struct.field("code"),
                expr.struct.field("valueCode"),
                expr.struct.field("valueString"),
            )
        elif m.group("key") == "$this":
            continue
        else:
            expr = expr.struct.field(m.group("key"))
    return expr


# UTC offsets in the form the fast path reads ("Z", "+10:00", "-03:30") → minutes.
_OFFSETS: dict[str, int] = {"Z": 0} | {
    f"{sign}{h:02d}:{m:02d}": (1 if sign == "+" else -1) * (60 * h + m)
    for sign in "+-"
    for h in range(24)
    for m in range(60)
}


def _datetime_fast(expr: pl.Expr) -> pl.Expr:
    """``YYYY-MM-DDTHH:MM:SS`` + ``Z``/``±HH:MM`` as UTC, or null for any other shape.

    Polars parses the fixed-width date and time without chrono, and the offset
    is a table lookup: 2-3x faster than ``%+``, which is what most values of
    most servers look like. Every null it leaves for a non-null string is
    parsed again by :func:`_datetime_exact` (fractions of a second, other
    separators, bad values), so the two together give exactly what ``%+`` gives.
    """
    naive = expr.str.slice(0, 19).str.to_datetime("%Y-%m-%dT%H:%M:%S", time_unit="us", strict=False)
    offset = expr.str.slice(19).replace_strict(_OFFSETS, default=None, return_dtype=pl.Int64)
    return (naive - pl.duration(minutes=offset)).dt.replace_time_zone("UTC")


def _datetime_exact(values: pl.Series) -> pl.Series:
    """Any ISO 8601 date-time with an offset (chrono's ``%+``), as UTC; null if not one."""
    return values.str.to_datetime("%+", time_unit="us", time_zone="UTC", strict=False)


def _typed(expr: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    if dtype == pl.Date:
        return expr.str.to_date("%Y-%m-%d", strict=False)
    if dtype == DATETIME:
        return _datetime_fast(expr)
    return expr


def _complete_datetimes(typed: pl.DataFrame, raw: pl.DataFrame, view: View) -> pl.DataFrame:
    """Parse with ``%+`` the date-time strings the fast path left null."""
    fixed = []
    for c in view.columns:
        if c.dtype != DATETIME:
            continue
        parsed, text = typed.get_column(c.name), raw.get_column(c.name)
        if parsed.null_count() == text.null_count():
            continue
        rows = (parsed.is_null() & text.is_not_null()).arg_true()
        fixed.append(parsed.scatter(rows, _datetime_exact(text.gather(rows))))
    return typed.with_columns(fixed) if fixed else typed


@dataclass(frozen=True, slots=True)
class _Compiled:
    resource: str
    resource_dtype: pl.Struct  # entry[].resource as read: every field, or one table's
    unread: frozenset[str]  # known top-level fields this read skips (one table's read)
    unread_arrays: frozenset[str]  # those of them that are arrays (still checked to be one)
    strict: msgspec.json.Decoder[Any]  # see _strict_decoder
    strict_entry: msgspec.json.Decoder[Any]  # the same check of one entry (see _repair)
    views: tuple[View, ...]
    columns: tuple[tuple[str, str | None, str, str], ...]  # see _column_keys

    @property
    def bundle_schema(self) -> dict[str, Any]:
        """The schema a page is read with (see :func:`read_schema`)."""
        entry = pl.List(pl.Struct({"resource": self.resource_dtype}))
        return {**_ENVELOPE.to_schema(), "entry": entry}

    @property
    def batch_schema(self) -> dict[str, Any]:
        """:attr:`bundle_schema` plus the batch sentinel (see :func:`_read_batch`)."""
        return {**self.bundle_schema, _SENTINEL: pl.String()}


_ENVELOPE = pl.Struct(
    {
        "resourceType": pl.String(),
        "issue": pl.List(
            pl.Struct(
                {
                    "severity": pl.String(),
                    "code": pl.String(),
                    "diagnostics": pl.String(),
                    "details": pl.Struct({"text": pl.String()}),
                }
            )
        ),
    }
)


_AnyDtype = pl.DataType | DataTypeClass
"""A dtype as a Struct's fields or a List's inner give it: an instance, or a class."""

_MSGSPEC_LEAVES: dict[Any, Any] = {
    pl.String: str,
    pl.Int64: int,
    pl.Float64: float,
    pl.Boolean: bool,
}


def _msgspec_type(dtype: _AnyDtype, name: str) -> Any:
    """The msgspec type that accepts exactly what Polars reads as ``dtype``, exactly."""
    if isinstance(dtype, pl.Struct):
        fields = [
            (
                f"f{i}",
                _msgspec_type(f.dtype, f"{name}_{i}") | None,
                msgspec.field(default=None, name=f.name),
            )
            for i, f in enumerate(dtype.fields)
        ]
        return msgspec.defstruct(name, fields, forbid_unknown_fields=True, gc=False)
    if isinstance(dtype, pl.List):
        return list[_msgspec_type(dtype.inner, name) | None]  # type: ignore[misc]
    return _MSGSPEC_LEAVES[dtype if isinstance(dtype, type) else type(dtype)]


def _strict_decoder(
    resource_dtype: pl.Struct,
    unread: frozenset[str] = frozenset(),
    unread_arrays: frozenset[str] = frozenset(),
) -> tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]:
    """Decoders that fail on a page (and on one entry) holding anything the fast read would lose.

    Each resource is decoded into msgspec ``Struct`` types mirroring the read
    schema, every level forbidding unknown keys, every leaf typed as Polars
    reads it (``str``, ``int``, ``float``, ``bool``; null everywhere). So it
    fails exactly when some resource has a key the view does not know, at any
    depth, or a value of another JSON type than the schema's (which Polars
    would refuse, or silently coerce: a number read into a String column, 1.5
    truncated into an Int64 one). Everything outside ``entry[].resource`` is
    skipped, and so are the values of the known top-level fields in ``unread``
    (one table's read does not use them; those in ``unread_arrays`` must still
    be arrays, whose elements are skipped). Such a page, or one not shaped as a
    Bundle, goes to :func:`_repair`, which runs the second decoder, the same
    check of one entry, to find the entries that need it.
    """
    fields = [
        (
            f"f{i}",
            _msgspec_type(f.dtype, f"Resource_{i}") | None,
            msgspec.field(default=None, name=f.name),
        )
        for i, f in enumerate(resource_dtype.fields)
    ]
    fields += [
        (
            f"u{i}",
            list[msgspec.Raw] | None if name in unread_arrays else msgspec.Raw,
            msgspec.field(default=None, name=name),
        )
        for i, name in enumerate(sorted(unread))
    ]
    res = msgspec.defstruct("Resource", fields, forbid_unknown_fields=True, gc=False)
    entry = msgspec.defstruct("Entry", [("resource", res | None, None)], gc=False)
    page = msgspec.defstruct("Page", [("entry", list[entry] | None, None)], gc=False)  # type: ignore[valid-type]
    return msgspec.json.Decoder(page), msgspec.json.Decoder(entry)


def _column_key(path: str, prefix: str = "") -> str:
    """A column's path as field names, extension elements named by their url.

    ``modifierExtension.where(url='appointment-participant-status').coded()``
    → ``modifierExtension:appointment-participant-status``: the form
    :func:`_repair` gives the path of a value it could not read.
    """
    parts = prefix.split(".") if prefix else []
    for m in _steps(path):
        if m.group("url") is not None:
            parts[-1] = f"{parts[-1]}:{m.group('url')}"
        elif m.group("key") not in (None, "$this"):
            parts.append(m.group("key"))
    return ".".join(parts)


def _column_keys(views: tuple[View, ...]) -> tuple[tuple[str, str | None, str, str], ...]:
    """``(table, for_each, column, key)`` of every column that reads the resource."""
    out = []
    for v in views:
        if v.for_each is not None and not re.fullmatch(r"[A-Za-z_][\w-]*", v.for_each):
            continue  # pragma: no cover - every child table repeats a top-level field
        for c in v.columns:
            if c.role in ("extra", "invalid", "key", "index"):
                continue
            out.append((v.name, v.for_each, c.name, _column_key(c.path, v.for_each or "")))
    return tuple(out)


@cache
def _compiled(resource_type: str) -> _Compiled:
    views = _resource_views(resource_type)
    res = catalogue.RESOURCES[resource_type]
    fields = tuple(f for f in _reader_fields(res) if not f.write_only)
    resource_struct = _level_read_dtype(fields)
    resource_dtype = pl.Struct({"resourceType": pl.String(), **resource_struct.to_schema()})
    strict, strict_entry = _strict_decoder(resource_dtype)
    return _Compiled(
        resource=resource_type,
        resource_dtype=resource_dtype,
        unread=frozenset(),
        unread_arrays=frozenset(),
        strict=strict,
        strict_entry=strict_entry,
        views=views,
        columns=_column_keys(views),
    )


def _top_fields(view_: View) -> frozenset[str]:
    """The top-level resource fields that ``view_`` reads (besides ``resourceType`` and ``id``)."""
    if view_.for_each is not None:
        paths = [view_.for_each]
    else:
        paths = [
            c.path for c in view_.columns if c.role not in ("extra", "invalid", "key", "index")
        ]
    fields = set()
    for path in paths:
        for m in _steps(path):
            if m.group("key") not in (None, "$this"):
                fields.add(m.group("key"))
                break
    return frozenset(fields)


@cache
def _compiled_table(resource_type: str, table: str) -> _Compiled:
    """:func:`_compiled` for one table: the read schema keeps only the fields it uses.

    Reading a field costs Polars' JSON reader time even when no column needs it
    (Appointment's main table reads 20 % faster without ``participant``), so
    :func:`flatten` of one table reads just that table's top-level fields. The
    exact check types only those fields (the others are skipped as raw JSON) and
    still knows every key: each table reports the odd values and unknown keys of
    what it reads.
    """
    full = _compiled(resource_type)
    (view_,) = [v for v in full.views if v.name == table]
    wanted = _top_fields(view_) | {"resourceType", "id"}
    slim = pl.Struct([f for f in full.resource_dtype.fields if f.name in wanted])
    unread = frozenset(f.name for f in full.resource_dtype.fields if f.name not in wanted)
    arrays = frozenset(
        f.name
        for f in full.resource_dtype.fields
        if f.name in unread and isinstance(f.dtype, pl.List)
    )
    strict, strict_entry = _strict_decoder(slim, unread, arrays)
    return dataclasses.replace(
        full,
        resource_dtype=slim,
        unread=unread,
        unread_arrays=arrays,
        strict=strict,
        strict_entry=strict_entry,
        views=(view_,),
    )


def read_schema(resource_type: str) -> pl.Schema:
    """The explicit schema Polars reads a Bundle page of ``resource_type`` with.

    Parameters
    ----------
    resource_type
        A listed resource type.

    Returns
    -------
    polars.Schema
        ``resourceType``, ``issue`` (to report an OperationOutcome) and
        ``entry: list[struct{resource: struct{...}}]``, derived from the catalogue.
    """
    return pl.Schema(_compiled(resource_type).bundle_schema)


# --------------------------------------------------------------------------- reading


def _as_bytes(page: Any) -> bytes:
    if isinstance(page, bytes | bytearray | memoryview):
        return bytes(page)
    if isinstance(page, str):
        return page.encode()
    if isinstance(page, Mapping):
        return orjson.dumps(page)
    msg = f"a page must be Bundle JSON as bytes, str or dict, not {type(page).__name__}"
    raise DataValidationError(msg, None)


def _iter_pages(pages: Any) -> Iterator[Any]:
    if isinstance(pages, bytes | bytearray | memoryview | str | Mapping):
        yield pages
    else:
        yield from pages


def _outcome_text(row: dict[str, Any]) -> str:
    issues = row.get("issue") or []
    parts = []
    for issue in issues[:3]:
        if issue is None:
            continue
        details = (issue.get("details") or {}).get("text")
        text = issue.get("diagnostics") or details or ""
        parts.append(f"{issue.get('severity')}/{issue.get('code')}: {text}".strip())
    return "; ".join(parts) or "no issue details"


_Problem = dict[str, Any]
_Leftovers = dict[str, Any]
_SKIP = object()


def _one_as_array(value: Any, path: str, extra: _Leftovers) -> Any:
    """The spec's single HumanName object, as the live service's one-element array."""
    return [value] if isinstance(value, dict) else value


def _quantity_value(value: Any, path: str, extra: _Leftovers) -> Any:
    """A Quantity ``{"value": 10, ...}`` (the live form) read as its number."""
    if not isinstance(value, dict) or "value" not in value:
        return value
    for key, other in value.items():
        if key != "value":
            extra[f"{path}.{key}"] = other
    return value["value"]


def _reference_display(value: Any, path: str, extra: _Leftovers) -> Any:
    """A Reference ``{"reference": ..., "display": ...}`` read as its display, else reference."""
    if not isinstance(value, dict):
        return value
    chosen = "display" if isinstance(value.get("display"), str) else "reference"
    for key, other in value.items():
        if key != chosen:
            extra[f"{path}.{key}"] = other
    return value.get(chosen)


def _codeable_as_coding(value: Any, path: str, extra: _Leftovers) -> Any:
    """A FHIR CodeableConcept ``{"coding": [{system, code, display}]}`` read as its first coding.

    The spec gives Organization ``type`` items as ``{system, code, display}``;
    FHIR servers (and pmtk's mock) wrap them in ``coding``. Further codings and
    other keys (``text``) are kept in ``extra``.
    """
    if not isinstance(value, dict) or not isinstance(value.get("coding"), list) or "code" in value:
        return value
    coding = value["coding"]
    for key, other in value.items():
        if key != "coding":
            extra[f"{path}.{key}"] = other
    for i, other in enumerate(coding[1:], 1):
        extra[f"{path}.coding[{i}]"] = other
    return coding[0] if coding else None


_ALTERNATIVE_FORMS: dict[tuple[str, str], Any] = {
    ("Organization", "type[]"): _codeable_as_coding,
    ("Practitioner", "name"): _one_as_array,
    ("Patient", "name"): _one_as_array,
    ("Referral", "limitQuantity.quantity"): _quantity_value,
    ("Referral", "referralDefinition"): _reference_display,
}
"""Known alternative forms of a field (facts, "Shapes seen on the live service"),
keyed by resource and field path (``[]``: each element of an array), with the
function that reads one as the canonical form. Anything the form does not use is
kept in ``extra``."""

_EXTENSION_CONTAINERS = frozenset({"extension", "modifierExtension"})


def _primitive(value: Any, dtype: _AnyDtype) -> Any:
    """``value`` as Polars reads it into ``dtype``; ``_SKIP`` when it is another JSON type.

    Stricter than Polars, which reads a number into a String column and
    truncates 1.5 into an Int64 one; an integral float (``10.0``) is an integer.
    """
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(dtype, pl.String) and isinstance(value, str):
        return value
    if isinstance(dtype, pl.Boolean) and isinstance(value, bool):
        return value
    if isinstance(dtype, pl.Float64) and numeric:
        return value
    if isinstance(dtype, pl.Int64) and numeric and float(value).is_integer():
        whole = int(value)
        if -(2**63) <= whole < 2**63:
            return whole
    return _SKIP


class _Conformer:
    """Bring one resource to the read schema: alternative forms normalised, wrong types nulled.

    ``problems`` collects ``(path, key, raw value)`` of every value nulled for
    its JSON type; ``extra`` every key the schema does not know, by path.
    """

    def __init__(
        self,
        resource: str,
        unread: frozenset[str] = frozenset(),
        unread_arrays: frozenset[str] = frozenset(),
    ) -> None:
        self.resource = resource
        self.unread = unread  # top-level fields this read does not use: dropped
        self.unread_arrays = unread_arrays  # ... but checked to be arrays
        self.problems: list[tuple[str, str, Any]] = []
        self.extra: _Leftovers = {}

    def value(
        self,
        value: Any,
        dtype: _AnyDtype,
        path: str,
        key: str,
        form_key: str | None = None,
    ) -> Any:
        if value is None:
            return None
        form = _ALTERNATIVE_FORMS.get((self.resource, key if form_key is None else form_key))
        raw = value
        if form is not None:
            value = form(value, path, self.extra)
            if value is None:
                return None
        if isinstance(dtype, pl.Struct) and isinstance(value, dict):
            return self.struct(value, dtype, path, key)
        if isinstance(dtype, pl.List) and isinstance(value, list):
            return [self.item(v, dtype.inner, f"{path}[{i}]", key) for i, v in enumerate(value)]
        primitive = _primitive(value, dtype)
        if primitive is not _SKIP:
            return primitive
        self.problems.append((path, key, raw))
        return None

    def item(self, value: Any, dtype: _AnyDtype, path: str, key: str) -> Any:
        container = key.rsplit(".", 1)[-1]
        if container in _EXTENSION_CONTAINERS and isinstance(value, dict):
            url = value.get("url")
            key = f"{key}:{url.rsplit('/', 1)[-1]}" if isinstance(url, str) else key
        return self.value(value, dtype, path, key, form_key=f"{key}[]")

    def struct(self, obj: dict[str, Any], dtype: pl.Struct, path: str, key: str) -> dict[str, Any]:
        fields = dtype.to_schema()
        out: dict[str, Any] = {}
        for name, value in obj.items():
            sub_path = f"{path}.{name}" if path else name
            inner = fields.get(name)
            if inner is None:
                if not path and name in self.unread:
                    if name in self.unread_arrays and not isinstance(value, list | None):
                        self.problems.append((name, name, value))
                    continue
                self.extra[sub_path] = value
                continue
            out[name] = self.value(value, inner, sub_path, f"{key}.{name}" if key else name)
        return out


def _locate(comp: _Compiled, path: str, key: str) -> tuple[str, int | None, str | None]:
    """``(table, index, column)`` of a value at ``path`` (field ``key``); index in child tables."""
    first = re.match(r"([^.\[]+)(?:\[(\d+)\])?", path)
    head, index = (first.group(1), first.group(2)) if first else (path, None)
    table = comp.resource  # the main table is named after the resource
    at: int | None = None
    for name, for_each, _column, _key in comp.columns:
        if for_each == head and index is not None:
            table, at = name, int(index)
            break
    for name, _for_each, column, col_key in comp.columns:
        if name != table:
            continue
        if (
            col_key == key
            or col_key.startswith((f"{key}.", f"{key}:"))
            or key.startswith((f"{col_key}.", f"{col_key}:"))
        ):
            return table, at, column
    return table, at, None


@dataclass(frozen=True, slots=True)
class _Fix:
    """What :func:`_repair` found on one page, per entry (JSON text, or null)."""

    extra: list[str | None]
    invalid: list[str | None]


class _Skeleton(msgspec.Struct, gc=False):
    """A page as :func:`_repair` first sees it: its kind and each entry's raw JSON."""

    resourceType: str | None = None  # the JSON key
    entry: list[msgspec.Raw] | None = None


_SKELETON = msgspec.json.Decoder(_Skeleton)


def _repair(comp: _Compiled, raw: bytes) -> tuple[bytes, _Fix] | None:
    """One page brought to the read schema, and what that took, per entry.

    Only the entries that fail the exact check (``comp.strict_entry``) are
    parsed and rebuilt; the others are copied as sent, so a page with one odd
    record costs about one record's repair, not a page's. Alternative forms
    become the canonical one, values of a wrong JSON type become null
    (recorded with their path, table, column and raw value), keys the schema
    does not know, at any depth, go to ``extra`` by path, and entries of other
    resource types are reduced to their ``resourceType`` (the reader skips
    them). ``None`` when the page is not a JSON Bundle object: the reader then
    refuses it with the reason.
    """
    try:
        page = _SKELETON.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # malformed, not UTF-8, or not a Bundle
        return None
    if page.resourceType != "Bundle":
        return None
    parts: list[bytes] = []
    fix = _Fix([], [])
    for entry_raw in page.entry or ():
        try:
            comp.strict_entry.decode(entry_raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass
        else:
            parts.append(bytes(entry_raw))
            fix.extra.append(None)
            fix.invalid.append(None)
            continue
        try:
            entry = orjson.loads(bytes(entry_raw))
        except ValueError:  # pragma: no cover - the skeleton decode checked the JSON
            return None
        repaired = _repair_entry(comp, entry)
        if repaired is None:
            return None
        parts.append(repaired[0])
        fix.extra.append(repaired[1])
        fix.invalid.append(repaired[2])
    return b'{"resourceType":"Bundle","entry":[' + b",".join(parts) + b"]}", fix


def _repair_entry(comp: _Compiled, entry: Any) -> tuple[bytes, str | None, str | None] | None:
    """One entry as the reader can read it, with its ``extra`` and ``invalid`` JSON texts."""
    res = entry.get("resource") if isinstance(entry, dict) else None
    if not isinstance(res, dict) or res.get("resourceType", comp.resource) != comp.resource:
        kind = res.get("resourceType") if isinstance(res, dict) else None
        reduced = {"resource": {"resourceType": kind} if isinstance(kind, str) else None}
        return orjson.dumps(reduced), None, None
    conformer = _Conformer(comp.resource, comp.unread, comp.unread_arrays)
    fixed = conformer.struct(res, comp.resource_dtype, "", "")
    extra = orjson.dumps(conformer.extra).decode() if conformer.extra else None
    problems: list[_Problem] = []
    for path, key, value in conformer.problems:
        table, index, column = _locate(comp, path, key)
        problems.append(
            {"path": path, "table": table, "index": index, "column": column, "value": value}
        )
    invalid = orjson.dumps(problems).decode() if problems else None
    try:
        return orjson.dumps({"resource": fixed}), extra, invalid
    except orjson.JSONEncodeError:
        return None


def _prepare(comp: _Compiled, batch: list[bytes]) -> tuple[list[bytes], list[_Fix | None]]:
    """Check each page exactly (:func:`_strict_decoder`); repair the pages that fail.

    Called on the reader threads, one batch at a time, before the batch is read.
    """
    pages: list[bytes] = []
    fixes: list[_Fix | None] = []
    for raw in batch:
        try:
            comp.strict.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            repaired = _repair(comp, raw)
            if repaired is not None:
                pages.append(repaired[0])
                fixes.append(repaired[1])
                continue
        pages.append(raw)
        fixes.append(None)
    return pages, fixes


_WORKERS = max(2, min(8, os.cpu_count() or 2))

_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The module's persistent reader threads (created on first use, then reused).

    A pool per call cost more than the reads of a single page, which is how
    :mod:`toolkit.store` calls the flattener. A forked child process has none
    of its parent's threads, so it gets a pool of its own.
    """
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="pmtk-read")
            _pool = (os.getpid(), pool)
        return _pool[1]


def _read_error(comp: _Compiled, index: int, exc: Exception) -> DataValidationError:
    text = str(exc).strip()
    detail = text.splitlines()[0][:300] if text else type(exc).__name__
    msg = (
        f"page {index} is not a Bundle of {comp.resource} that the view can read "
        f"(a value has the wrong JSON type, or the JSON is malformed): {detail}"
    )
    return DataValidationError(msg, None)


def _kind_error(raw: bytes, kind: str | None, index: int) -> DataValidationError:
    if kind == "OperationOutcome":
        try:
            row = pl.read_json(raw, schema=_ENVELOPE.to_schema()).row(0, named=True)
        except (pl.exceptions.PolarsError, OSError, ValueError):  # pragma: no cover
            row = {}  # it was read with the wider Bundle schema already
        detail = _outcome_text(row)
        msg = f"page {index} is an OperationOutcome (an error answer), not a Bundle: {detail}"
    else:
        msg = f"page {index} is not a Bundle (resourceType {kind!r})"
    return DataValidationError(msg, None)


@dataclass(frozen=True, slots=True)
class _Block:
    """What one reader thread made of consecutive pages."""

    kinds: pl.Series  # each page's resourceType
    counts: pl.Series  # each page's number of entries
    resources: pl.Series  # the entry resources of every page, in order
    fixes: list[_Fix | None]  # each page: what its repair found (None: read as sent)
    failure: tuple[int, Exception] | None  # (page index, error) of the page it stopped at


_BATCH_BYTES = 512 * 1024
"""Pages are read by Polars in batches of about this many bytes (a JSON array of
the pages): one call per page spent a fixed ~70 µs setting up the nested schema,
and much larger documents read slower than this size (the parser's working set
outgrows the CPU cache)."""


def _batches(raws: list[bytes], start: int) -> Iterator[tuple[int, list[bytes]]]:
    """Consecutive pages grouped into batches of at most :data:`_BATCH_BYTES`."""
    batch: list[bytes] = []
    size = 0
    first = start
    for i, raw in enumerate(raws, start):
        if batch and size + len(raw) > _BATCH_BYTES:
            yield first, batch
            batch, size, first = [], 0, i
        batch.append(raw)
        size += len(raw)
    if batch:
        yield first, batch


_SENTINEL = "_pmtk_batch_sentinel"
_NONCE = secrets.token_hex(8)
"""Random per process, so that no page can contain a sentinel's value."""


def _read_batch(comp: _Compiled, batch: list[bytes]) -> pl.DataFrame | None:
    """Read several pages in one call; ``None`` when they must be read page by page.

    The pages are joined into one JSON array with a sentinel object between
    each two (``{"entry": [], "_pmtk_batch_sentinel": "<nonce>-<i>"}``, the
    nonce random per process; an empty rather than a null ``entry`` keeps the
    explode of the entries a copy-free one). The read is kept only when the
    rows alternate page, sentinel, page, ... with every sentinel in its place:
    no page text can hold a sentinel's value, so each page then is exactly one
    JSON value, which is what reading it alone requires. A page that is
    malformed, an array, two values, or half of a value completed by its
    neighbour fails that test or the read, and the caller reads the batch page
    by page, which names the page.

    Returns
    -------
    polars.DataFrame or None
        One row per page and one per sentinel (odd rows), read with
        ``comp.batch_schema``. Only ``Series`` methods that do not go through
        Polars' query engine are used here: this runs once per batch on the
        reader threads, and a query per batch cost more than the batching saved.
    """
    if len(batch) < 2:
        return None
    parts = [b"[", batch[0]]
    expected: list[str | None] = [None]
    for i, page in enumerate(batch[1:]):
        sentinel = f"{_NONCE}-{i}"
        parts += [b',{"entry":[],"', _SENTINEL.encode(), b'":"', sentinel.encode(), b'"},', page]
        expected += [sentinel, None]
    parts.append(b"]")
    try:
        df = pl.read_json(b"".join(parts), schema=comp.batch_schema)
    except (pl.exceptions.PolarsError, OSError, ValueError):
        return None
    if df.height != len(expected) or df.get_column(_SENTINEL).to_list() != expected:
        return None
    return df


def _read_block(comp: _Compiled, raws: list[bytes], start: int) -> _Block:
    """Read consecutive pages; stop at the first that cannot be read as one Bundle object.

    Each batch is first checked exactly, and the pages that fail the check are
    repaired (:func:`_prepare`). The block's entries are gathered and exploded
    here, on the reader thread, so that the caller only joins a few long Series.
    """
    schema = comp.bundle_schema
    kinds: list[pl.Series] = [pl.Series("resourceType", [], dtype=pl.String)]
    lists: list[pl.Series] = [pl.Series("entry", [], dtype=schema["entry"])]
    is_page: list[bool] = []  # False for the rows of batch sentinels
    fixes: list[_Fix | None] = []
    failure: tuple[int, Exception] | None = None
    for first, sent in _batches(raws, start):
        batch, batch_fixes = _prepare(comp, sent)
        together = _read_batch(comp, batch)
        if together is not None:
            kinds.append(together.get_column("resourceType"))
            lists.append(together.get_column("entry"))
            is_page += [True, False] * (len(batch) - 1) + [True]
            fixes += batch_fixes
            continue
        for i, (raw, fix) in enumerate(zip(batch, batch_fixes, strict=True), first):
            try:
                df = pl.read_json(raw, schema=schema)
            except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
                failure = (i, exc)
                break
            if df.height != 1:  # a JSON array, not one Bundle object
                failure = (i, ValueError(f"a JSON array of {df.height} values, not one object"))
                break
            kinds.append(df.get_column("resourceType"))
            lists.append(df.get_column("entry"))
            is_page.append(True)
            fixes.append(fix)
        if failure is not None:
            break
    entry_lists = pl.concat(lists)
    resources = entry_lists.explode(empty_as_null=False, keep_nulls=False).struct.field("resource")
    pages = pl.Series("page", is_page, dtype=pl.Boolean)
    return _Block(
        kinds=pl.concat(kinds, rechunk=True).filter(pages),
        counts=entry_lists.list.len().fill_null(0).filter(pages),
        resources=resources,
        fixes=fixes,
        failure=failure,
    )


def _read_entries(comp: _Compiled, pages: Any) -> pl.DataFrame:
    """One row per entry resource of ``comp.resource``: ``resource``, ``extra``, ``invalid``."""
    raws = [_as_bytes(page) for page in _iter_pages(pages)]
    if not raws:
        return pl.DataFrame(
            schema={"resource": comp.resource_dtype, "extra": pl.String(), "invalid": pl.String()}
        )
    # pl.read_json releases the GIL: contiguous blocks of pages are read on the
    # persistent threads (one block each, in batches of _BATCH_BYTES). Each
    # thread runs the exact check (msgspec, which holds the GIL) on a batch
    # right before reading it, so one thread checks while the other reads; the
    # check on this thread, beside the readers, kept them waiting for the GIL
    # (measured 10 % slower on 2 cores). A single page is read inline.
    if len(raws) == 1:
        blocks = [_read_block(comp, raws, 0)]
    else:
        size = -(-len(raws) // _WORKERS)
        futures = [
            _executor().submit(_read_block, comp, raws[i : i + size], i)
            for i in range(0, len(raws), size)
        ]
        blocks = [f.result() for f in futures]
    failure: tuple[int, Exception] | None = None
    for n, block in enumerate(blocks):
        if block.failure is not None:
            failure = block.failure
            blocks = blocks[: n + 1]
            break
    # Errors in page order: the first page that is not a readable Bundle.
    kind = pl.concat([b.kinds for b in blocks])
    not_bundle = (kind != "Bundle").fill_null(value=True)
    if not_bundle.any():
        first = int(not_bundle.arg_true()[0])
        raise _kind_error(raws[first], kind[first], first)
    if failure is not None:
        raise _read_error(comp, *failure)
    counts = pl.concat([b.counts for b in blocks])
    entries = pl.concat([b.resources for b in blocks]).alias("resource").to_frame()
    fixes = [f for b in blocks for f in b.fixes]
    if any(f is not None for f in fixes):
        extra: list[str | None] = []
        invalid: list[str | None] = []
        for i, (n, fix) in enumerate(zip(counts.to_list(), fixes, strict=True)):
            if fix is None:
                extra.extend([None] * n)
                invalid.extend([None] * n)
                continue
            if len(fix.extra) != n:  # pragma: no cover - both parsers read the same document
                msg = f"page {i}: {len(fix.extra)} entries by orjson but {n} by polars"
                raise DataValidationError(msg, None)
            extra.extend(fix.extra)
            invalid.extend(fix.invalid)
        entries = entries.with_columns(
            extra=pl.Series("extra", extra, dtype=pl.String),
            invalid=pl.Series("invalid", invalid, dtype=pl.String),
        )
    else:
        entries = entries.with_columns(
            extra=pl.lit(None, dtype=pl.String), invalid=pl.lit(None, dtype=pl.String)
        )
    kind_expr = pl.col("resource").struct.field("resourceType")
    keep = pl.col("resource").is_not_null() & (kind_expr.is_null() | (kind_expr == comp.resource))
    # Filtering copies every nested column: only do it when something is dropped.
    if entries.select((~keep).any()).item():
        entries = entries.filter(keep)
    return entries


# --------------------------------------------------------------------------- projection


def _check_parsed(df: pl.DataFrame, raw: pl.DataFrame, view: View, id_col: str) -> None:
    """Raise when a date or date-time string did not parse (never silently null)."""
    checks = [
        c.name
        for c in view.columns
        if c.dtype in (pl.Date, DATETIME)
        and df.get_column(c.name).null_count() != raw.get_column(c.name).null_count()
    ]
    if not checks:
        return
    cases = pl.concat(
        [
            pl.DataFrame(
                {
                    "column": c,
                    "failure_case": raw.get_column(c),
                    "id": df.get_column(id_col),
                    "parsed": df.get_column(c).is_null(),
                }
            )
            .filter(pl.col("parsed") & pl.col("failure_case").is_not_null())
            .drop("parsed")
            for c in checks
        ]
    )
    shown = ", ".join(f"{r['column']}={r['failure_case']!r}" for r in cases.head(5).to_dicts())
    msg = f"{view.name}: {cases.height} date/date-time value(s) could not be parsed: {shown}"
    raise DataValidationError(msg, cases)


def _row_owner(view: View) -> Any:
    """A test of whether a path (``participant[1].period``) belongs to a row of ``view``.

    A child table's row owns the paths below its element (``<for_each>[<index>]``);
    the main table owns every other path.
    """
    children = tuple(v.for_each for v in _resource_views(view.resource) if v.for_each)

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
    positions = frame.get_column("index").to_list() if view.for_each else None
    out: list[pl.Series] = []
    for name in ("extra", "invalid"):
        column = frame.get_column(name)
        if column.null_count() == frame.height:
            continue
        values: list[str | None] = []
        for row, text in enumerate(column.to_list()):
            at = positions[row] if positions is not None else None
            mine: Any = None
            if text is not None and name == "extra":
                mine = {k: v for k, v in orjson.loads(text).items() if owns(k, at)}
            elif text is not None:
                mine = [
                    {"path": p["path"], "column": p["column"], "value": p["value"]}
                    for p in orjson.loads(text)
                    if p["table"] == view.name and p["index"] == at
                ]
            values.append(orjson.dumps(mine).decode() if mine else None)
        out.append(pl.Series(name, values, dtype=pl.String))
    return out


def _project(view: View, entries: pl.DataFrame) -> pl.DataFrame:
    passed = ("extra", "invalid")
    if view.for_each is None:
        base = pl.col("resource")
        frame = entries
        raw_exprs = [
            (pl.col(c.name) if c.name in passed else _compile(c.path, base)).alias(c.name)
            for c in view.columns
        ]
        id_col = "id"
    else:
        items = _compile(view.for_each, pl.col("resource"))
        key = view.key
        assert key is not None
        frame = (
            entries.select(
                pl.col("resource").struct.field("id").alias(key),
                items.alias("_item"),
                "extra",
                "invalid",
            )
            .filter(pl.col("_item").list.len() > 0)
            .with_columns(index=pl.int_ranges(pl.col("_item").list.len(), dtype=pl.Int64))
            .explode("_item", "index")
        )
        base = pl.col("_item")
        raw_exprs = [
            pl.col(c.name)
            if c.name in (key, "index", "extra", "invalid")
            else _compile(c.path, base).alias(c.name)
            for c in view.columns
        ]
        id_col = key
    raw = frame.select(raw_exprs)
    if any(raw.get_column(n).null_count() != raw.height for n in ("extra", "invalid")):
        raw = raw.with_columns(_per_row(view, raw))
    typed = raw.select(
        _typed(pl.col(c.name), c.dtype).cast(c.dtype).alias(c.name) for c in view.columns
    )
    if any(c.dtype in (pl.Date, DATETIME) for c in view.columns):
        typed = _complete_datetimes(typed, raw, view)
        _check_parsed(typed, raw, view, id_col)
    return typed


def flatten_tables(resource_type: str, pages: Any) -> dict[str, pl.DataFrame]:
    """Flatten Bundle pages into the main table and every child table.

    Each page is read once by Polars' JSON reader with the explicit schema of
    :func:`read_schema` (consecutive pages in batches of about 512 KiB, joined
    into one JSON array; a batch that does not read as one Bundle per page is
    read page by page); columns are then projected with Polars expressions.
    Top-level keys outside the view are found exactly by a msgspec decode of
    each page that skips every value; only pages that have one are parsed a
    second time (with orjson) to build the exact ``extra`` JSON of each record.
    Unknown keys inside a known object are not kept.

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
        ``<resource>_<child>`` (see :data:`VIEWS`), each with every declared
        column in its declared dtype.

    Raises
    ------
    ConfigurationError
        ``resource_type`` has no view.
    DataValidationError
        A page is an OperationOutcome or not a Bundle, cannot be read with the
        declared types, or holds a date or date-time that does not parse.

    Examples
    --------
    >>> page = {"resourceType": "Bundle", "entry": [{"resource": {
    ...     "resourceType": "Referral", "id": "7",
    ...     "performer": {"reference": "/main/Practitioner/PR-12", "type": "Practitioner"}}}]}
    >>> flatten_tables("Referral", [page])["Referral"].get_column("performer_id").to_list()
    ['PR-12']
    """
    comp = _compiled(resource_type)
    entries = _read_entries(comp, pages)
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
    entries = _read_entries(_compiled_table(resource_type, view_.name), pages)
    return _project(view_, entries)


# --------------------------------------------------------------------------- docs


def _dtype_text(dtype: pl.DataType) -> str:
    return str(dtype).replace("time_zone=", "").replace("time_unit=", "")


def _rules_note(c: Column) -> str:
    f = c.field
    if f is None or c.role != "value":
        return c.doc
    notes = [c.doc] if c.doc else []
    if f.required:
        notes.append("required")
    if f.enum:
        values = ", ".join("null" if v is None else f"`{v}`" for v in f.enum)
        notes.append(f"{'e.g.' if f.open_enum else 'one of'} {values}")
    if f.format in ("country", "currency", "canonical") or (f.format == "phone" and not c.when):
        notes.append(f"{f.format} format")
    return "; ".join(notes)


def views_markdown() -> str:
    """The ``docs/views.md`` tables of every view, generated from :data:`VIEWS`.

    Returns
    -------
    str
        Markdown: one section per resource, one table per view.
    """
    lines = [
        "## Tables",
        "",
        "Generated by `toolkit.views.views_markdown()` from `VIEWS`; a test keeps this",
        "section equal to the generated text.",
        "",
    ]
    for resource_type, views in VIEWS.items():
        lines.append(f"### {resource_type}")
        lines.append("")
        for v in views:
            head = f"#### `{v.name}`"
            if v.for_each:
                head += f" (one row per `{v.for_each}` element)"
            lines += [head, "", "| Column | Dtype | Path | Notes |", "|---|---|---|---|"]
            for c in v.columns:
                path = c.path.replace("|", "\\|")
                doc = _rules_note(c).replace("|", "\\|")
                lines.append(f"| `{c.name}` | `{_dtype_text(c.dtype)}` | `{path}` | {doc} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
