"""pmtk's declared views (``toolkit.views.VIEWS``) written as SQL-on-FHIR v2 ViewDefinitions.

Each declared table becomes one ViewDefinition named after it: the main table
selects from the resource, a child table adds a ``forEach`` over its array with
the parent id first and ``%rowIndex`` as ``index``. The declared paths use a few
shorthands of pmtk's reader, written here in standard FHIRPath so that the
tolerant reading carries over:

=============================================  =====================================================
declared                                       ViewDefinition
=============================================  =====================================================
``extension.where(url='N')``                   ``extension.where(url = 'N' or url.endsWith('/N'))``
``E.coded()``                                  ``(E.value.ofType(Coding).code | E.value.ofType(code)
                                               | E.value.ofType(string)).first()``
``E.valueReference.reference…``                ``E.value.ofType(Reference)…``
``X.reference.getReferenceKey()``              ``X.getReferenceKey()``
``X.getReferenceType()``                       ``(X.type | X.reference.where(matches(…))
                                               .replaceMatches(…, '$2')).first()``
``name.prefer(use='official').F``              ``(name.where(use = 'official') | name).first().F``
``%parent.id`` / ``%index``                    ``id`` (a column before ``forEach``) / ``%rowIndex``
=============================================  =====================================================

A column below a field that the catalogue declares an alternative form for (Referral
``limitQuantity.quantity`` as a number or a Quantity, ``referralDefinition`` as a string or
a Reference, an Organization ``type`` item as a Coding or a CodeableConcept) reads it
with that form's FHIRPath (``toolkit.catalogue.forms.VIEW_FORMS``), and ``coded()`` reads
the keys of ``forms.CODED_KEYS``: the facts of the forms are declared once, in the
catalogue's registry, for the reader and the export alike.

Date and date-time columns are typed ``date``/``dateTime`` with an ``ansi/type``
tag (``DATE``, ``TIMESTAMP WITH TIME ZONE``) so the runner gives the same Polars
types as the reader. The reader's ``extra`` and ``invalid`` columns (unknown keys
and odd values, kept by path) are not FHIRPath values and are not exported.
A ``<date>_precision`` column is written as the reader computes it, from the
length of the text sent. The ``<resource>_extension`` tables are not exported:
their rows come from every ``extension`` and ``modifierExtension`` array at any
depth, minus those a column already reads, which no single ``forEach`` names;
a user pulls one extension by url with ``extension('URL')`` in a view of their own.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from toolkit.catalogue import forms
from toolkit.errors import ViewDefinitionError, unknown_name
from toolkit.views import VIEWS

__all__ = ["NOT_EXPORTED", "declared_view_definitions", "view_definition"]

#: The declared columns that have no ViewDefinition form, by role.
NOT_EXPORTED = ("extra", "invalid")

_PRIMITIVES = {"boolean", "string", "code", "integer", "decimal", "date", "dateTime", "uri"}
_REF_TYPE = "'^(.*/)?([A-Za-z]+)/[^/]+$'"


def _value_type(name: str) -> str:
    lower = name[:1].lower() + name[1:]
    return lower if lower in _PRIMITIVES else name


_PLAIN = re.compile(r"[A-Za-z]\w*(\.[A-Za-z]\w*)*")
_KINDS = {pl.Int64: "integer", pl.Float64: "decimal", pl.Boolean: "boolean"}


def _alternative(table: Any, column: Any) -> str | None:
    """The column's path read in each form the catalogue declares for its field, or None.

    A column below a field with an alternative form (``forms.VIEW_FORMS``) reads it with
    the form's ``fhirpath``: Referral ``limitQuantity.quantity`` as a number or a
    Quantity, an Organization ``type`` item as a Coding or a CodeableConcept.
    """
    if not _PLAIN.fullmatch(column.path):
        return None
    full = f"{table.for_each}.{column.path}" if table.for_each else column.path
    for (resource, declared), form in forms.VIEW_FORMS.items():
        if resource != table.resource or form.fhirpath is None:
            continue
        if full == declared:
            rest = ""
        elif full.startswith(declared + "."):
            rest = full[len(declared) + 1 :]
        else:
            continue
        value = column.path[: -len(rest) - 1] if rest else column.path
        kind = _KINDS.get(type(column.dtype), "string")
        return form.fhirpath(value, rest, kind)
    return None


def _coded(base: str) -> str:
    """``coded()``: the first of the keys a coded value arrives under (``forms.CODED_KEYS``)."""
    parts = []
    for key in forms.CODED_KEYS:
        kind = _value_type(key[len("value") :])
        parts.append(f"{base}.value.ofType({kind})" + (".code" if kind == "Coding" else ""))
    return "(" + " | ".join(parts) + ").first()"


def _translate(path: str) -> str:
    """A declared path in standard FHIRPath."""
    if path == "%index":
        return "%rowIndex"
    # extension(s) matched on the bare name or the last segment of a full url
    path = re.sub(
        r"(\w+)\.where\(url='([^']+)'\)",
        lambda m: f"{m.group(1)}.where(url = '{m.group(2)}' or url.endsWith('/{m.group(2)}'))",
        path,
    )
    path = re.sub(
        r"(\w+)\.prefer\((\w+)='([^']+)'\)",
        lambda m: f"({m.group(1)}.where({m.group(2)} = '{m.group(3)}') | {m.group(1)}).first()",
        path,
    )
    path = re.sub(r"\.value([A-Z]\w*)", lambda m: f".value.ofType({_value_type(m.group(1))})", path)
    path = re.sub(r"(^|\.)\$this\.reference\.getReferenceKey\(\)", r"\1getReferenceKey()", path)
    path = path.replace(".reference.getReferenceKey()", ".getReferenceKey()")
    if path.endswith(".getReferenceType()"):
        base = path[: -len(".getReferenceType()")]
        return (
            f"({base}.type | {base}.reference.where(matches({_REF_TYPE}))"
            f".replaceMatches({_REF_TYPE}, '$2')).first()"
        )
    if path.endswith(".coded()"):
        return _coded(path[: -len(".coded()")])
    if ".where(url = " in path:
        return f"({path}).first()"
    return path


def _precision(path: str) -> str:
    """The reader's ``<date>_precision`` as FHIRPath: by the text's length, as the reader
    (``year`` for 4 characters, ``month`` for 7, ``day`` for 10, else ``time``)."""
    branches = [(r"^.{4}$", "year"), (r"^.{7}$", "month"), (r"^.{10}$", "day")]
    parts = [
        f"{path}.where(matches('{pattern}')).replaceMatches('^.*$', '{name}')"
        for pattern, name in branches
    ]
    parts.append(
        f"{path}.where(matches('^(.{{4}}|.{{7}}|.{{10}})$').not()).replaceMatches('^.*$', 'time')"
    )
    return "(" + " | ".join(parts) + ").first()"


def _column(column: Any, table: Any) -> dict[str, Any]:
    dtype = column.dtype
    path = _alternative(table, column) or _translate(column.path)
    if column.role == "precision":
        path = _precision(path)
    out: dict[str, Any] = {"name": column.name, "path": path}
    if isinstance(dtype, pl.List):
        out["collection"] = True
        dtype = dtype.inner
    if dtype == pl.Date:
        out["type"] = "date"
        out["tag"] = [{"name": "ansi/type", "value": "DATE"}]
    elif isinstance(dtype, pl.Datetime):
        out["type"] = "dateTime"
        out["tag"] = [{"name": "ansi/type", "value": "TIMESTAMP WITH TIME ZONE"}]
    elif dtype == pl.Boolean:
        out["type"] = "boolean"
    elif dtype == pl.Int64:
        out["type"] = "integer"
    elif dtype == pl.Float64:
        out["type"] = "decimal"
    else:
        out["type"] = "id" if column.role in {"id", "key", "ref_id"} else "string"
    if column.doc:
        out["description"] = column.doc
    return out


def view_definition(table: Any) -> dict[str, Any]:
    """One declared table (a :class:`toolkit.views.View`) as a ViewDefinition dict."""
    columns = [c for c in table.columns if c.role not in NOT_EXPORTED]
    body: dict[str, Any] = {
        "resourceType": "ViewDefinition",
        "name": table.name,
        "status": "active",
        "resource": table.resource,
    }
    if table.doc:
        body["description"] = table.doc
    if table.for_each is None:
        body["select"] = [{"column": [_column(c, table) for c in columns]}]
        return body
    keys = [c for c in columns if c.role == "key"]
    rest = [c for c in columns if c.role != "key"]
    body["select"] = [
        {"column": [{**_column(k, table), "path": "id"} for k in keys]},
        {"forEach": _translate(table.for_each), "column": [_column(c, table) for c in rest]},
    ]
    return body


def declared_view_definitions(resource_type: str | None = None) -> dict[str, dict[str, Any]]:
    """Every declared table (of ``resource_type``, or of all) as a ViewDefinition, by table name.

    Examples
    --------
    >>> views = declared_view_definitions("Appointment")
    >>> sorted(views)
    ['Appointment', 'appointment_participant', 'appointment_supporting_information']
    >>> views["appointment_participant"]["select"][1]["forEach"]
    'participant'
    """

    if resource_type is not None and resource_type not in VIEWS:
        err = unknown_name("resource type", resource_type, VIEWS)
        raise ViewDefinitionError(str(err), path="resource")
    out: dict[str, dict[str, Any]] = {}
    for name, tables in VIEWS.items():
        if resource_type is not None and name != resource_type:
            continue
        for table in tables:
            if getattr(table, "extensions", False):
                continue  # rows from extensions at any depth (module docstring)
            out[table.name] = view_definition(table)
    return out
