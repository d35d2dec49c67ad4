"""The declared views: columns from the catalogue, a main table and child tables per resource."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

import polars as pl

from toolkit import catalogue
from toolkit.catalogue import Field, Resource, Source, forms
from toolkit.catalogue.constants import LIVE_EXTENSION_BASE
from toolkit.errors import unknown_name

Role = Literal["value", "id", "ref_id", "ref_type", "key", "index", "extra", "invalid", "precision"]


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
    ``extra`` (unknown keys); ``precision`` (how much of a date or date-time
    was sent: ``year``, ``month``, ``day`` or ``time``)."""
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
    extensions: bool = False
    """The resource's extension table (:func:`_extension_view`): one row per
    extension that no column reads, at any depth; filled by the repair path,
    not by ``for_each``."""

    @property
    def key(self) -> str | None:
        """The parent-id column of a child table (``None`` for a main table)."""
        return f"{_snake(self.resource)}_id" if self.for_each or self.extensions else None

    @property
    def unique(self) -> tuple[str, ...]:
        """The columns that name one row together (empty for a main table: ``id`` is unique)."""
        if self.extensions:
            return (f"{_snake(self.resource)}_id", "path", "modifier", "index")
        return (f"{_snake(self.resource)}_id", "index") if self.for_each else ()

    @property
    def schema(self) -> pl.Schema:
        """Column names and dtypes, in order."""
        return pl.Schema({c.name: c.dtype for c in self.columns})


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
        inner = level_read_dtype(f.fields)
    else:
        inner = _PRIMITIVE_READ[f.type]
    return pl.List(inner) if f.many else inner


def _extension_value_dtypes(f: Field) -> dict[str, pl.DataType]:
    """The value keys an extension element is read with: a superset of the live forms."""
    assert f.extension is not None
    key = f.extension.value_key
    if key == "valueReference":
        return {key: _REFERENCE}
    if key in ("valueCoding", "valueCode"):
        return {k: _CODING if k == "valueCoding" else pl.String() for k in forms.CODED_KEYS}
    return {key: _PRIMITIVE_READ[f.type]}


def level_read_dtype(fields: tuple[Field, ...]) -> pl.Struct:
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
        name = _column_name(res, f, table, prefix)
        path = _source_path(f, parent)
        if root and f.many and f.type in ("object", "reference"):
            children.append((name, f, path))
        elif f.type == "reference":
            cols.extend(_reference_columns(f, name, path, src))
        elif f.type == "object":
            cols.extend(_object_columns(res, f, table, prefix, name, path, src))
        else:
            col = _value_column(f, name, path, prefix, root, src)
            cols.append(col)
            if col.dtype in (pl.Date, DATETIME):
                cols.append(_precision_column(col))
    return cols, children


def _precision_column(col: Column) -> Column:
    """``<name>_precision`` beside a date or date-time column: what the value was sent as.

    A FHIR ``dateTime`` may be partial (``2025``, ``2025-09``, ``2025-09-28``) and
    some systems send a ``date`` as a date-time (facts): the column holds the start
    of the period (its calendar date, in the value's own offset), and this column
    says which form came, so the text sent is the value cut to that precision.
    A date-time column expects ``time``, a date column ``day``: anything else is
    an observation (pmtk's reading), never a failure.
    """
    full = "time" if col.dtype == DATETIME else "day"
    return Column(
        f"{col.name}_precision",
        col.path,
        pl.String(),
        f"precision of `{col.name}` as sent: `year`, `month`, `day` or `time` "
        f"(`{full}` expected); null when `{col.name}` is",
        field=col.field,
        role="precision",
        source="pmtk",
    )


def _column_name(res: Resource, f: Field, table: str, prefix: str) -> str:
    """The column name of a field: snake case, prefixed by its enclosing object."""
    if f.extension is None:
        return _COLUMN_RENAMES.get((res.name, f.name)) or _join(prefix, f)
    name = _snake(f.name)
    if name.startswith(table + "_"):
        name = name[len(table) + 1 :]
    return f"{prefix}_{name}" if prefix else name


def _reference_columns(f: Field, name: str, path: str, src: Source) -> list[Column]:
    """``<name>_id`` (prefix kept) and ``<name>_type`` (the sent type, else the path's)."""
    ref = f.ref
    assert ref is not None
    targets = " | ".join(ref.types)
    first = ".first()" if f.many else ""
    # Every reference keeps its type, even with one declared target: a type
    # outside the declared ones is then seen, not read as the declared one.
    return [
        Column(
            f"{name}_id",
            f"{path}{first}.reference.getReferenceKey()",
            pl.String(),
            f"id of the referenced {targets}, prefix kept",
            field=f,
            role="ref_id",
            source=catalogue.weakest(src, _rule_source(f, ("type", "reference"))),
        ),
        Column(
            f"{name}_type",
            f"{path}{first}.getReferenceType()",
            pl.String(),
            f"one of {targets}" if len(ref.targets) > 1 else f"{targets} expected",
            field=f,
            role="ref_type",
            source=catalogue.weakest(src, _rule_source(f, ("type",))),
        ),
    ]


def _object_columns(
    res: Resource, f: Field, table: str, prefix: str, name: str, path: str, src: Source
) -> list[Column]:
    """The columns of an object's fields (of its first element, for an array)."""
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
    return [
        dataclasses.replace(
            c,
            # A coded object's code may arrive as valueCode or valueString too.
            path=c.path[: -len("valueCoding.code")] + "coded()"
            if coded and c.path.endswith(".valueCoding.code")
            else c.path,
            doc=(c.doc + note).strip(),
        )
        for c in sub
    ]


def _value_column(f: Field, name: str, path: str, prefix: str, root: bool, src: Source) -> Column:
    """The column of a value: a coded extension, an array of values, or one value."""
    source = catalogue.weakest(src, _rule_source(f))
    if f.extension is not None and f.extension.value_key in ("valueCoding", "valueCode"):
        return Column(name, path, pl.String(), "coded value", field=f, source=source)
    if f.many:
        return Column(
            name, path, pl.List(_column_dtype(f)), "array of values", field=f, source=source
        )
    note = "converted to UTC" if f.type == "date-time" else ""
    when = None
    if f.format_when is not None:
        sibling, values = f.format_when
        when = (_join(prefix, Field(sibling, "string")), values)
        note = f"{f.format} format where {when[0]} is one of {', '.join(values)}"
    role: Role = "id" if root and f.name == "id" else "value"
    return Column(name, path, _column_dtype(f), note, field=f, role=role, when=when, source=source)


# Repeating objects whose preferred element also gives main-table columns: the
# ``official`` entry, else the first (``name_family`` beside the ``<type>_name`` table).
# The catalogue's ``Field.prefer``.
_PREFERRED: dict[tuple[str, str], tuple[str, str]] = forms.PREFERRED


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


_READ_AS_ARRAY: frozenset[tuple[str, str]] = forms.READ_AS_ARRAY
"""Fields the spec gives as one object and the live service (facts) or FHIR R4
(Coverage ``payor``, ``identifier``) sends as an array (a ``one-or-many`` form in the
catalogue, :mod:`toolkit.catalogue.forms`): read as an array, so that the live form
takes the fast path (the spec's single object is one of the alternative forms,
:data:`_ALTERNATIVE_FORMS`); the first entry also gives the main table's columns, the
one of the spec's object. The catalogue keeps the spec's form, which the mock's write
checks and the contract suite use."""


def reader_fields(res: Resource) -> tuple[Field, ...]:
    """The resource's fields as the reader reads them (see :data:`_READ_AS_ARRAY`)."""
    return tuple(
        dataclasses.replace(f, many=True) if (res.name, f.name) in _READ_AS_ARRAY else f
        for f in res.fields
    )


def _views_for(res: Resource) -> tuple[View, ...]:
    table = _snake(res.name)
    fields = reader_fields(res)
    cols, children = _columns(res, fields, table, "", "", root=True, inherited=res.source)
    for _name, f, path in children:
        src: Source = res.source if res.source != "spec" else f.source
        if (res.name, f.name) in _READ_AS_ARRAY and (res.name, f.name) not in _PREFERRED:
            # One object in the spec: its columns stay, from the first entry.
            first, _ = _columns(res, (f,), table, "", "", root=False, inherited=src)
            cols.extend(dataclasses.replace(c, doc=f"{c.doc} (first entry)".strip()) for c in first)
            continue
        preferred = _PREFERRED.get((res.name, f.name))
        if preferred is None:
            continue
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
    views.append(_extension_view(res))
    return tuple(views)


def _extension_view(res: Resource) -> View:
    """``<resource>_extension``: every extension no column reads, with its url.

    Filled from every ``extension`` and ``modifierExtension`` array at any depth
    (nested extensions, extensions of primitive values ``_birthDate`` and of
    unknown elements included) by the repair path, which each page holding one
    takes (:func:`toolkit.views.check._msgspec_type`). The JSON of such an
    extension is kept here only, not in ``extra``.
    """
    table = _snake(res.name)
    columns = (
        Column(f"{table}_id", "%parent.id", pl.String(), f"id of the {res.name}", role="key"),
        Column(
            "path",
            "(element path)",
            pl.String(),
            "the element that carries the extension (`name[0]`, `birthDate` for "
            "`_birthDate`, `extension[2]` for a nested one); empty for the resource itself",
        ),
        Column("modifier", "(container)", pl.Boolean(), "true in `modifierExtension`"),
        Column("index", "%index", pl.Int64(), "position in its array", role="index"),
        Column("url", "url", pl.String(), "the extension url, as sent"),
        Column(
            "parent_url",
            "(enclosing url)",
            pl.String(),
            "url of the enclosing extension of a nested one; null at the top",
        ),
        Column(
            "value_type",
            "value[x]",
            pl.String(),
            "FHIR type of `value[x]` (`string`, `Coding`, `Reference`, ...); "
            "null when the extension has none (only nested ones)",
        ),
        Column(
            "value",
            "value[x]",
            pl.String(),
            "the value as text: a primitive as sent, a Coding's or CodeableConcept's code, "
            "a Reference's reference, an Identifier's or Quantity's value, a Period as "
            "`start/end`",
        ),
        Column("value_json", "value[x]", pl.String(), "the value as JSON"),
    )
    return View(
        f"{table}_extension",
        res.name,
        columns,
        doc="Every extension no column reads, at any depth.",
        extensions=True,
    )


KnownUrls = dict[str, dict[str, frozenset[str]]]
"""Extension containers (by field path, no indices) → url → the ``value[x]`` keys its
column reads (:func:`known_extensions`)."""


def known_extensions(
    fields: tuple[Field, ...], prefix: str = "", *, declared: bool = False
) -> KnownUrls:
    """Extension containers (by field path, no indices) → the url names their columns read,
    each with the ``value[x]`` keys its column reads it in.

    An element of a known url in another form (``coverage-payer`` as a ``valueBoolean``,
    a form another column of the same container reads) is read by no column: the
    extension table has it. With ``declared``, also each name as the catalogue writes
    it and in the live service's full form (:data:`LIVE_EXTENSION_BASE`): the urls the
    exact check accepts as they are (:func:`toolkit.views.check._known_element`); any
    other form of a known url still reads, through the repair path.
    """
    out: dict[str, dict[str, set[str]]] = {}
    for f in fields:
        if f.write_only:
            continue
        if f.extension is not None:
            key = f"{prefix}.{f.extension.container}" if prefix else f.extension.container
            name = f.extension.url.rsplit("/", 1)[-1]
            urls = {name, f.extension.url, LIVE_EXTENSION_BASE + name} if declared else {name}
            for url in urls:
                out.setdefault(key, {}).setdefault(url, set()).update(_extension_value_dtypes(f))
        elif f.type == "object":
            sub = known_extensions(
                f.fields, f"{prefix}.{f.name}" if prefix else f.name, declared=declared
            )
            for key, names in sub.items():
                for url, values in names.items():
                    out.setdefault(key, {}).setdefault(url, set()).update(values)
    return {k: {url: frozenset(v) for url, v in names.items()} for k, names in out.items()}


VIEWS: dict[str, tuple[View, ...]] = {
    name: _views_for(catalogue.RESOURCES[name]) for name in catalogue.LISTED_RESOURCES
}
"""Views per listed resource: the main table first, then its child tables."""


def resource_views(resource_type: str) -> tuple[View, ...]:
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
    return tuple(v.name for v in resource_views(resource_type))


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
    views = resource_views(resource_type)
    if table is None:
        return views[0]
    for v in views:
        if v.name == table:
            return v
    raise unknown_name("table", table, [v.name for v in views], f" of {resource_type}")


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
        "Generated by `toolkit.views.views_markdown()` from `VIEWS`; `tools/regenerate.py`",
        "writes this section and a test fails while it is stale.",
        "",
    ]
    for resource_type, views in VIEWS.items():
        lines.append(f"### {resource_type}")
        lines.append("")
        for v in views:
            head = f"#### `{v.name}`"
            if v.for_each:
                head += f" (one row per `{v.for_each}` element)"
            elif v.extensions:
                head += " (one row per extension no column reads)"
            lines += [head, "", "| Column | Dtype | Path | Notes |", "|---|---|---|---|"]
            for c in v.columns:
                path = c.path.replace("|", "\\|")
                doc = _rules_note(c).replace("|", "\\|")
                lines.append(f"| `{c.name}` | `{_dtype_text(c.dtype)}` | `{path}` | {doc} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
