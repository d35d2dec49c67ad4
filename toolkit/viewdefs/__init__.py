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
from toolkit.viewdefs.definition import View, load_view, root_fields
from toolkit.viewdefs.depth import cut_deep_entries
from toolkit.viewdefs.load import (
    Part,
    kept_fields,
    read_pages,
    read_pages_projected,
    read_parts_projected,
    sample_too_deep,
)
from toolkit.viewdefs.normalise import read_resources
from toolkit.viewdefs.reads import read_tree
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


def _page_error(index: int, doc: Any) -> DataValidationError:
    if isinstance(doc, dict) and doc.get("resourceType") == "OperationOutcome":
        issues = doc.get("issue") or [{}]
        first = issues[0] if isinstance(issues, list) and issues else {}
        detail = f"{first.get('severity')}/{first.get('code')}: {first.get('diagnostics', '')}"
        return DataValidationError(
            f"page {index} is an OperationOutcome, not a Bundle: {detail}", None
        )
    return DataValidationError(f"page {index} is not a Bundle or a resource", None)


def resources_frame(data: Any, resource_type: str, fields: set[str] | None = None) -> pl.DataFrame:
    """The resources of ``resource_type`` in ``data``, one row each in a ``Struct`` column ``__c``.

    ``data`` is Bundle pages (bytes, str or dict), resources (dicts), or an
    iterable of them. Entries of other resource types are skipped. The schema is
    inferred from every resource read. With ``fields`` (top-level field names, as
    :func:`~toolkit.viewdefs.definition.root_fields` gives for a view), only those
    fields of Bundle pages are read (the others cannot change the view's rows).
    """
    items = _items(data)
    pages = _pages(items)
    if pages is not None and fields is not None:
        fast = read_pages_projected(pages, resource_type, fields)
        if fast is not None:
            return fast
    return _general_frame(items, pages, resource_type, fields)


def _general_frame(
    items: list[Any], pages: list[bytes] | None, resource_type: str, fields: set[str] | None
) -> pl.DataFrame:
    """The read when the projected one refused or cannot apply: every page read by
    Polars and checked exact, else parsed and normalised (:func:`_read_items`)."""
    if pages is not None and not sample_too_deep(pages):
        fast = read_pages(pages, resource_type)
        if fast is not None:
            return fast
    return _read_items(items, resource_type, fields)


def _pages(items: list[Any]) -> list[bytes] | None:
    """The items as Bundle pages' bytes, when every item is one (text or bytes)."""
    if items and all(_is_page(i) for i in items):
        return [i.encode("utf-8") if isinstance(i, str) else bytes(i) for i in items]
    return None


def _read_items(items: list[Any], resource_type: str, fields: set[str] | None) -> pl.DataFrame:
    """The general path: every page parsed, the resources read after normalisation.

    With ``fields``, only those top-level fields (and their ``value[x]`` forms) are
    kept before the normalisation: a field the view does not read cannot change
    its rows, and a value of an odd JSON type there is then not reported either,
    as the projected read does not report it (the warnings do not depend on which
    read took the pages).
    """
    resources: list[dict[str, Any]] = []
    cut: list[str] = []
    for index, item in enumerate(items):
        doc = item
        if _is_page(item):
            doc = _parsed_page(index, item, resource_type, cut)
        if not isinstance(doc, dict):
            raise _page_error(index, doc)
        kind = doc.get("resourceType")
        if kind == "Bundle":
            for entry in doc.get("entry") or []:
                res = entry.get("resource") if isinstance(entry, dict) else None
                if isinstance(res, dict) and res.get("resourceType") == resource_type:
                    resources.append(res)
        elif kind == resource_type:
            resources.append(doc)
        elif not isinstance(kind, str) or kind == "OperationOutcome":
            raise _page_error(index, doc)
    if fields is not None:
        resources = kept_fields(resources, fields)
    return read_resources(resources, resource_type, cut)


def _parsed_page(index: int, item: Any, resource_type: str, cut: list[str]) -> Any:
    """A page parsed; one too deep for the parser is parsed without its too-deep entries
    (their ids added to ``cut``)."""
    raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        error = exc
    if "depth" in str(error):
        shallow = cut_deep_entries(raw)
        if shallow is not None:
            try:
                doc = orjson.loads(shallow[0])
            except orjson.JSONDecodeError as exc:
                error = exc
            else:
                cut.extend(shallow[1])
                return doc
    msg = f"page {index} is not JSON: {error}"
    raise DataValidationError(msg, None) from None


def run_view(view: Any, data: Any, *, max_rows: int | None = None) -> pl.DataFrame:
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
    max_rows
        The row budget: the most rows any step of the evaluation may reach (a
        ``forEach``'s items, a cross product of sibling selects, a ``unionAll``);
        default :data:`toolkit.viewdefs.runner.DEFAULT_MAX_ROWS` (20 million).

    Returns
    -------
    polars.DataFrame
        One column per view column, named and typed as declared, in the
        view's order.

    Raises
    ------
    ViewDefinitionError
        The view is wrong; ``.path`` says where (``select[1].column[0].path``);
        or it would pass the row budget (the message names the select and the
        rows reached).
    DataValidationError
        A page is not a Bundle (an OperationOutcome, say) or not JSON.
    """
    checked = load_view(view)
    raw_records = getattr(data, "raw_records", None)
    if callable(raw_records):
        data = raw_records(checked.resource)
    items = _items(data)
    pages = _pages(items)
    fields = root_fields(checked)
    if pages is not None and fields is not None:
        # evaluated part by part while the next part is decoded (see read_parts_projected)
        parts = read_parts_projected(
            pages,
            checked.resource,
            fields,
            lambda frame: evaluate(checked, frame, max_rows),
            read_tree(checked),
        )
        if parts is not None:
            return _joined(checked, parts, max_rows)
        # the projected read refused the pages: the general read decides
        frame = _general_frame(items, pages, checked.resource, fields)
        return evaluate(checked, frame, max_rows)
    return evaluate(checked, resources_frame(items, checked.resource, fields), max_rows)


def _joined(view: View, parts: list[Part], max_rows: int | None) -> pl.DataFrame:
    """The parts' rows in order: what one evaluation of all the resources gives.

    A view's rows come from each resource alone, so the parts' rows together are
    the whole frame's. Where a part raised (a value that is not a date-time, ...)
    or the parts' columns differ in type, the view is evaluated once more on all
    the resources, so that the error or the types are those of the whole data.
    """
    results = [part.result for part in parts]
    for result in results:
        if isinstance(result, ViewDefinitionError) and "row budget" in str(result):
            raise result  # a budget passed in one part is passed by the whole data
    frames = [r for r in results if isinstance(r, pl.DataFrame)]
    if len(frames) == len(results) and all(f.schema == frames[0].schema for f in frames):
        return pl.concat(frames) if len(frames) > 1 else frames[0]
    return evaluate(view, pl.concat([part.frame for part in parts]), max_rows)
