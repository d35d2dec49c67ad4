"""Resources into one Polars ``Struct`` column, with no value silently changed.

Polars infers a schema from every resource, but where one field has values of
different JSON types it quietly makes them all text (an object and a string
become the object's JSON text; a number beside strings becomes a string), and
an object beside an array is an error. So the fast read is checked:

1. Bundle pages (bytes or str) are read by Polars in one ``read_json`` pass,
   the schema inferred from all of them.
2. Each page is then decoded by msgspec into ``Struct`` types that mirror the
   inferred schema exactly (strings are ``str``, integers ``int``, ...). A page
   passes when every value has the JSON type its column has; then the fast read
   lost nothing.
3. Otherwise the resources are read in Python (orjson) and *normalised*: where a
   field is an array in some resources and a single value in others, the single
   values become arrays of one (FHIRPath treats both alike, so no view sees a
   difference); where a field has values of different JSON types (a string where
   the others have an object, say), the odd values become null and are reported
   in one :class:`~toolkit.schemas.PmtkDataWarning` with their resource ids and
   paths. The normalised resources are then read by Polars.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from typing import Any

import msgspec
import orjson
import polars as pl

from toolkit.errors import DataValidationError

__all__ = ["read_pages", "read_pages_projected", "read_resources"]

_counter = itertools.count()


def _msgspec_type(dtype: Any, *, forbid: bool = False) -> Any:
    """The msgspec type that accepts exactly the JSON values Polars read into ``dtype``.

    With ``forbid``, an object with a key the schema does not name fails too (at
    every depth): the check of a schema inferred from a sample of the pages.
    """
    if isinstance(dtype, type):
        dtype = dtype()
    if isinstance(dtype, pl.Struct):
        fields = [
            (f"f{i}", _msgspec_type(f.dtype, forbid=forbid) | None, None)
            for i, f in enumerate(dtype.fields)
        ]
        rename = {f"f{i}": f.name for i, f in enumerate(dtype.fields)}
        return msgspec.defstruct(
            f"S{next(_counter)}", fields, rename=rename, forbid_unknown_fields=forbid
        )
    if isinstance(dtype, pl.List):
        return list[_msgspec_type(dtype.inner, forbid=forbid) | None]  # type: ignore[misc]
    if isinstance(dtype, pl.String):
        return str
    if isinstance(dtype, pl.Boolean):
        return bool
    if isinstance(dtype, pl.Int64 | pl.Int32 | pl.UInt32 | pl.UInt64):
        return int
    if isinstance(dtype, pl.Float64 | pl.Float32):
        return float
    return type(None)  # pl.Null: only nulls were seen


def _page_decoder(resource: pl.DataType) -> msgspec.json.Decoder[Any]:
    res = _msgspec_type(resource)
    entry: Any = msgspec.defstruct(f"E{next(_counter)}", [("resource", res | None, None)])
    page = msgspec.defstruct(f"P{next(_counter)}", [("entry", list[entry] | None, None)])
    return msgspec.json.Decoder(page)


def _empty() -> pl.DataFrame:
    return pl.DataFrame({"__c": pl.Series([], dtype=pl.Null)})


_SAMPLE_PAGES = 12


def _sample(pages: list[bytes]) -> list[bytes]:
    if len(pages) <= _SAMPLE_PAGES:
        return pages
    step = len(pages) / _SAMPLE_PAGES
    return [pages[int(i * step)] for i in range(_SAMPLE_PAGES)] + [pages[-1]]


def _wanted(name: str, roots: set[str]) -> bool:
    """A top-level field the view reads: named, or a choice ``value[x]`` of a named one."""
    return any(
        name == r or (name.startswith(r) and name[len(r) : len(r) + 1].isupper()) for r in roots
    )


def read_pages_projected(
    pages: list[bytes], resource_type: str, roots: set[str]
) -> pl.DataFrame | None:
    """The fast path of the fast path: only the top-level fields the view reads.

    The schema of those fields is inferred from a sample of the pages; then every
    page is checked by msgspec against it with unknown keys forbidden below the top
    level, so a key or a type the sample did not show sends the read to
    :func:`read_pages` (None). Polars then parses only the projected fields.
    """
    try:
        sample = pl.read_json(b"[" + b",".join(_sample(pages)) + b"]", infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError):
        return None
    entry_type = sample.schema.get("entry")
    if not isinstance(entry_type, pl.List) or not isinstance(entry_type.inner, pl.Struct):
        return None
    resource_dtype = {f.name: f.dtype for f in entry_type.inner.fields}.get("resource")
    if not isinstance(resource_dtype, pl.Struct):
        return None
    kept = [f for f in resource_dtype.fields if f.name == "resourceType" or _wanted(f.name, roots)]
    res_fields = [
        (f"f{i}", _msgspec_type(f.dtype, forbid=True) | None, None) for i, f in enumerate(kept)
    ]
    rename = {f"f{i}": f.name for i, f in enumerate(kept)}
    res = msgspec.defstruct(f"R{next(_counter)}", res_fields, rename=rename)
    entry: Any = msgspec.defstruct(f"E{next(_counter)}", [("resource", res | None, None)])
    page: Any = msgspec.defstruct(
        f"P{next(_counter)}", [("resourceType", str), ("entry", list[entry] | None, None)]
    )
    decoder = msgspec.json.Decoder(page)
    try:
        for raw in pages:
            if decoder.decode(raw).resourceType != "Bundle":
                return None
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    schema = {"entry": pl.List(pl.Struct({"resource": pl.Struct(kept)}))}
    try:
        frame = pl.read_json(b"[" + b",".join(pages) + b"]", schema=schema)
    except (pl.exceptions.PolarsError, ValueError):
        return None
    resources = frame.select(
        pl.col("entry").explode().struct.field("resource").alias("__c")
    ).drop_nulls()
    return resources.filter(pl.col("__c").struct.field("resourceType") == resource_type)


def read_pages(pages: list[bytes], resource_type: str) -> pl.DataFrame | None:
    """Bundle pages read by Polars and checked exact; None when the slow path must read them."""
    try:
        # one JSON array of the pages: Polars' array reader is several times faster than
        # its NDJSON reader on lines this long (a page of 100 resources is one line)
        frame = pl.read_json(b"[" + b",".join(pages) + b"]", infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError):
        return None
    if "resourceType" not in frame.columns:
        return None
    kinds = frame.get_column("resourceType")
    if kinds.null_count() or (kinds != "Bundle").any():
        return None
    if "entry" not in frame.columns:
        return _empty()
    entry_type = frame.schema["entry"]
    if isinstance(entry_type, pl.Null):
        return _empty()
    if not isinstance(entry_type, pl.List) or not isinstance(entry_type.inner, pl.Struct):
        return None
    fields = {f.name: f.dtype for f in entry_type.inner.fields}
    if "resource" not in fields:
        return _empty()
    resource_dtype = fields["resource"]
    if not isinstance(resource_dtype, pl.Struct) or "resourceType" not in {
        f.name for f in resource_dtype.fields
    }:
        return None
    decoder = _page_decoder(resource_dtype)
    try:
        for page in pages:
            decoder.decode(page)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    resources = frame.select(
        pl.col("entry").explode().struct.field("resource").alias("__c")
    ).drop_nulls()
    return resources.filter(pl.col("__c").struct.field("resourceType") == resource_type)


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


def _plan(kinds: dict[str, Counter[str]]) -> dict[str, Any]:
    """Per path: ``array`` where a field is an array anywhere; the one kind its values keep."""
    plan: dict[str, Any] = {}
    for path, counter in kinds.items():
        if path.endswith("[]"):
            if len(counter) > 1:
                # the most common kind wins; a tie goes to the richer kind (object first)
                plan[path] = min(counter, key=lambda k: (-counter[k], _KIND_ORDER[k]))
        elif counter["array"]:
            plan[path] = "array"
    return plan


def read_resources(resources: list[dict[str, Any]], resource_type: str) -> pl.DataFrame:
    """Resources (dicts of one type) read by Polars after the shape normalisation above."""
    if not resources:
        return _empty()
    kinds: dict[str, Counter[str]] = {}
    for res in resources:
        _survey_item(res, "", kinds)
    plan = _plan(kinds)
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
    if odd:
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
        warnings.warn(PmtkDataWarning(msg, cases), stacklevel=3)
    return frame.select(pl.struct(pl.all()).alias("__c"))
