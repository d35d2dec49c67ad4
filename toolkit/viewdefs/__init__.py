"""SQL-on-FHIR v2 ViewDefinitions, run by Polars.

>>> import toolkit.viewdefs as vd
>>> view = {
...     "resource": "Patient",
...     "select": [
...         {"column": [{"name": "id", "path": "id", "type": "id"}]},
...         {"forEach": "name", "column": [{"name": "family", "path": "family", "type": "string"}]},
...     ],
... }
>>> bundle = {"resourceType": "Bundle", "entry": [
...     {"resource": {"resourceType": "Patient", "id": "p1",
...                   "name": [{"family": "Ng"}, {"family": "Li"}]}},
...     {"resource": {"resourceType": "Patient", "id": "p2"}},
... ]}
>>> vd.run_view(view, [bundle]).rows()
[('p1', 'Ng'), ('p1', 'Li')]

See ``docs/views.md`` ("Your own columns: ViewDefinitions").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import polars as pl

from toolkit.errors import DataValidationError, ViewDefinitionError
from toolkit.viewdefs.definition import View, load_view
from toolkit.viewdefs.runner import evaluate

__all__ = ["View", "ViewDefinitionError", "load_view", "resources_frame", "run_view"]


def _is_page(item: Any) -> bool:
    return isinstance(item, bytes | bytearray | memoryview | str)


def _items(data: Any) -> list[Any]:
    if isinstance(data, dict) or _is_page(data):
        return [data]
    if isinstance(data, pl.DataFrame):
        msg = "run_view takes Bundle pages, resources or a store, not a DataFrame"
        raise ViewDefinitionError(msg, path="")
    if isinstance(data, Iterable):
        return list(data)
    msg = f"run_view takes Bundle pages, resources or a store, not {type(data).__name__}"
    raise ViewDefinitionError(msg, path="")


def _ndjson_frame(lines: list[bytes]) -> pl.DataFrame:
    if not lines:
        return pl.DataFrame({"__c": pl.Series([], dtype=pl.Null)})
    buf = b"\n".join(lines)
    frame = pl.read_ndjson(buf, infer_schema_length=None)
    return frame.select(pl.struct(pl.all()).alias("__c"))


def _fast_pages(pages: list[Any], resource_type: str) -> pl.DataFrame | None:
    """Bundle pages read by Polars in one pass; None when they must be read one by one."""
    lines = []
    for page in pages:
        raw = page.encode("utf-8") if isinstance(page, str) else bytes(page)
        # JSON strings cannot hold a raw newline, so this keeps each page one NDJSON line
        lines.append(raw.replace(b"\r", b" ").replace(b"\n", b" "))
    try:
        frame = pl.read_ndjson(b"\n".join(lines), infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError):
        return None
    if "resourceType" not in frame.columns:
        return None
    kinds = frame.get_column("resourceType")
    if kinds.null_count() or (kinds != "Bundle").any():
        return None
    if "entry" not in frame.columns or not isinstance(frame.schema["entry"], pl.List):
        return _ndjson_frame([])
    entries = frame.select(pl.col("entry").explode()).drop_nulls()
    entry_type = entries.schema["entry"]
    if not isinstance(entry_type, pl.Struct) or "resource" not in {
        f.name for f in entry_type.fields
    }:
        return _ndjson_frame([])
    resources = entries.select(pl.col("entry").struct.field("resource").alias("__c")).drop_nulls()
    rtype = resources.schema["__c"]
    if not isinstance(rtype, pl.Struct) or "resourceType" not in {f.name for f in rtype.fields}:
        return None
    return resources.filter(pl.col("__c").struct.field("resourceType") == resource_type)


def _page_error(index: int, doc: Any) -> DataValidationError:
    if isinstance(doc, dict) and doc.get("resourceType") == "OperationOutcome":
        issues = doc.get("issue") or [{}]
        first = issues[0] if isinstance(issues, list) and issues else {}
        detail = f"{first.get('severity')}/{first.get('code')}: {first.get('diagnostics', '')}"
        return DataValidationError(
            f"page {index} is an OperationOutcome, not a Bundle: {detail}", None
        )
    return DataValidationError(f"page {index} is not a Bundle or a resource", None)


def resources_frame(data: Any, resource_type: str) -> pl.DataFrame:
    """The resources of ``resource_type`` in ``data``, one row each in a ``Struct`` column ``__c``.

    ``data`` is Bundle pages (bytes, str or dict), resources (dicts), or an
    iterable of them. Entries of other resource types are skipped. The schema is
    inferred from every resource read.
    """
    items = _items(data)
    if items and all(_is_page(i) for i in items):
        fast = _fast_pages(items, resource_type)
        if fast is not None:
            return fast
    lines: list[bytes] = []
    for index, item in enumerate(items):
        doc = item
        if _is_page(item):
            try:
                doc = orjson.loads(bytes(item) if not isinstance(item, str) else item)
            except orjson.JSONDecodeError as exc:
                msg = f"page {index} is not JSON: {exc}"
                raise DataValidationError(msg, None) from None
        if not isinstance(doc, dict):
            raise _page_error(index, doc)
        kind = doc.get("resourceType")
        if kind == "Bundle":
            for entry in doc.get("entry") or []:
                res = entry.get("resource") if isinstance(entry, dict) else None
                if isinstance(res, dict) and res.get("resourceType") == resource_type:
                    lines.append(orjson.dumps(res))
        elif kind == resource_type:
            lines.append(orjson.dumps(doc))
        elif not isinstance(kind, str) or kind == "OperationOutcome":
            raise _page_error(index, doc)
    try:
        return _ndjson_frame(lines)
    except pl.exceptions.PolarsError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        msg = (
            f"the {resource_type} resources cannot be read as one table: a field has "
            f"different JSON shapes in different resources ({first})"
        )
        raise DataValidationError(msg, None) from None


def run_view(view: Any, data: Any) -> pl.DataFrame:
    """Run a SQL-on-FHIR v2 ViewDefinition over Bundle pages or resources.

    Parameters
    ----------
    view
        The ViewDefinition: a dict, JSON text, a path to a JSON file, a pydantic
        model, or a :class:`View` from :func:`load_view`. It is checked before
        any data is read.
    data
        Bundle pages (bytes, str or dict), resources (dicts), an iterable of
        them, or a :class:`toolkit.store.Store` (its raw records).

    Returns
    -------
    polars.DataFrame
        One column per view column, named and typed as declared, in the
        view's order.

    Raises
    ------
    ViewDefinitionError
        The view is wrong; ``.path`` says where (``select[1].column[0].path``).
    DataValidationError
        A page is not a Bundle (an OperationOutcome, say) or not JSON.
    """
    checked = load_view(view)
    raw_records = getattr(data, "raw_records", None)
    if callable(raw_records):
        data = raw_records(checked.resource)
    resources = resources_frame(data, checked.resource)
    return evaluate(checked, resources)
