"""The general read: resources parsed in Python, their shapes normalised, read by Polars.

The read of resources given as dicts, and of the Bundle pages the checked reads of
:mod:`toolkit.viewdefs.load` refuse. Polars infers a schema from every resource, but
where one field has values of different JSON types it quietly makes them all text,
and an object beside an array is an error. So the resources (dicts, parsed by orjson)
are *normalised* first: where a field is an array in some resources and a single
value in others, the single values become arrays of one (FHIRPath treats both alike,
so no view sees a difference); where a field has values of different JSON types (a
string where the others have an object, say), the odd values become null and are
reported in one :class:`~toolkit.schemas.PmtkDataWarning` with their resource ids and
paths. The normalised resources are then read by Polars. A resource nested too deep
is left out (:mod:`toolkit.viewdefs.depth`).

For a resource type the catalogue declares, its facts decide first, as they do for the
declared reader (:mod:`toolkit.views`): a field whose values arrive in both the
catalogue's form and a declared other form (the spec's bare number beside the live
service's Quantity) has them all turned into the form most of them are in
(:func:`toolkit.catalogue.forms.in_one_form`) instead of the fewer read as null, and
where a declared field's values are of several JSON types, the catalogue's type is
the one kept (a ``"30"`` beside a ``60`` in ``minutesDuration`` is the odd one, however
many there are of each).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import orjson
import polars as pl

from toolkit import catalogue
from toolkit.catalogue import Field, forms
from toolkit.errors import DataValidationError
from toolkit.viewdefs.depth import deep_warning, split_deep

__all__ = ["declared_kinds", "empty_frame", "read_resources"]


def empty_frame() -> pl.DataFrame:
    """No resources: a ``__c`` column of no rows."""
    return pl.DataFrame({"__c": pl.Series([], dtype=pl.Null)})


_KIND_ORDER = {"object": 0, "array": 1, "string": 2, "number": 3, "boolean": 4}


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string"


def _survey(value: Any, path: str, kinds: dict[str, Counter[str]]) -> None:
    kind = _kind(value)
    if kind is None:
        return
    if kind == "array":
        kinds.setdefault(path, Counter())["array"] += 1
        for item in value:
            _survey_item(item, path, kinds)
        return
    _survey_item(value, path, kinds)


def _survey_item(value: Any, path: str, kinds: dict[str, Counter[str]]) -> None:
    kind = _kind(value)
    if kind is None:
        return
    # the kind of a single value or of an array's items, path without indexes
    kinds.setdefault(path + "[]", Counter())[kind] += 1
    if kind == "object":
        for key, child in value.items():
            _survey(child, f"{path}.{key}" if path else key, kinds)


def _normalise(
    value: Any, path: str, plan: dict[str, Any], odd: list[tuple[str, str, Any]], rid: str
) -> Any:
    if value is None:
        return None
    as_array = plan.get(path) == "array"
    items = value if isinstance(value, list) else [value]
    out = []
    want = plan.get(path + "[]")
    for item in items:
        kind = _kind(item)
        if kind is None:
            continue
        if want is not None and kind != want and not (want == "number" and kind == "number"):
            odd.append((rid, path, item))
            continue
        if kind == "object":
            item = {
                k: _normalise(v, f"{path}.{k}" if path else k, plan, odd, rid)
                for k, v in item.items()
            }
        out.append(item)
    if as_array or isinstance(value, list):
        return out
    return out[0] if out else None


_JSON_KINDS = {"boolean": "boolean", "integer": "number", "number": "number"}
"""The JSON type of a catalogue type (``object``, ``reference``: an object; else a string)."""


def _declared(fields: tuple[Field, ...], parent: str, out: dict[str, str]) -> dict[str, str]:
    for f in fields:
        if f.extension is not None:
            continue  # an extension-encoded field is an element of its container
        path = f"{parent}.{f.name}" if parent else f.name
        kind = "object" if f.type in ("object", "reference") else _JSON_KINDS.get(f.type)
        out[path + "[]"] = kind or "string"
        _declared(f.fields, path, out)
    return out


def declared_kinds(resource_type: str) -> dict[str, str]:
    """The JSON type of each field the catalogue declares for ``resource_type`` (of an
    array field, of its items), by the paths of :func:`_survey`; none for another type.

    >>> declared_kinds("Appointment")["minutesDuration[]"], declared_kinds("Basic")
    ('number', {})
    """
    res = catalogue.RESOURCES.get(resource_type)
    return {} if res is None else _declared(res.fields, "", {})


def _plan(kinds: dict[str, Counter[str]], declared: dict[str, str]) -> dict[str, Any]:
    """Per path: ``array`` where a field is an array anywhere; the one kind its values keep."""
    plan: dict[str, Any] = {}
    for path, counter in kinds.items():
        if path.endswith("[]"):
            if len(counter) > 1:
                # the catalogue's type, where it declares the field and a value has it;
                # else the most common kind, a tie going to the richer kind (object first)
                want = declared.get(path)
                plan[path] = (
                    want
                    if want in counter
                    else min(counter, key=lambda k: (-counter[k], _KIND_ORDER[k]))
                )
        elif counter["array"]:
            plan[path] = "array"
    return plan


def _read_normalised(
    resources: list[dict[str, Any]], resource_type: str
) -> tuple[pl.DataFrame, list[tuple[str, str, Any]]]:
    """The resources as one Polars frame after the shape normalisation above.

    With it, the values read as null for being of another JSON type than the rest
    of their field: (resource id, path, value).
    """
    resources = forms.in_one_form(resource_type, resources)
    kinds: dict[str, Counter[str]] = {}
    for res in resources:
        _survey_item(res, "", kinds)
    plan = _plan(kinds, declared_kinds(resource_type))
    odd: list[tuple[str, str, Any]] = []
    if plan:
        resources = [
            _normalise(res, "", plan, odd, str(res.get("id", f"#{i}")))
            for i, res in enumerate(resources)
        ]
    lines = [orjson.dumps(res) for res in resources]
    try:
        frame = pl.read_json(b"[" + b",".join(lines) + b"]", infer_schema_length=None)
    except pl.exceptions.PolarsError as exc:  # pragma: no cover - normalised above
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        msg = f"the {resource_type} resources cannot be read as one table ({first})"
        raise DataValidationError(msg, None) from None
    return frame, odd


def _odd_warning(resource_type: str, odd: list[tuple[str, str, Any]]) -> None:
    """One :class:`~toolkit.schemas.PmtkDataWarning` for the values read as null.

    Called by :func:`read_resources` only: the warning names its caller's caller.
    """
    from toolkit.schemas import PmtkDataWarning

    shown = "; ".join(
        f"{rid} {path or '(resource)'} = {orjson.dumps(v).decode()[:60]}"
        for rid, path, v in odd[:5]
    )
    more = f" (and {len(odd) - 5} more)" if len(odd) > 5 else ""
    msg = (
        f"{len(odd)} {resource_type} value(s) of another JSON type than the rest of their "
        f"field were read as null: {shown}{more}"
    )
    cases = pl.DataFrame(
        {
            "id": [rid for rid, _, _ in odd],
            "column": [path for _, path, _ in odd],
            "check": ["json_type"] * len(odd),
            "failure_case": [orjson.dumps(v).decode() for _, _, v in odd],
        }
    )
    warnings.warn(PmtkDataWarning(msg, cases), stacklevel=4)


def read_resources(
    resources: list[dict[str, Any]], resource_type: str, cut: list[str] | None = None
) -> pl.DataFrame:
    """Resources (dicts of one type) read by Polars after the shape normalisation above.

    A resource nested deeper than :data:`MAX_RECORD_DEPTH` is left out with a
    warning, as are those already ``cut`` from their pages (their ids).
    """
    resources, too_deep = split_deep(resources)
    deep = list(cut or []) + too_deep
    if deep:
        deep_warning(resource_type, deep)
    if not resources:
        return empty_frame()
    frame, odd = _read_normalised(resources, resource_type)
    if odd:
        _odd_warning(resource_type, odd)
    return frame.select(pl.struct(pl.all()).alias("__c"))
