"""Resources nested too deep for a view: the bound, the measures, the cut and the warning.

A resource deeper than :data:`MAX_RECORD_DEPTH` is left out of a view with a
:class:`~toolkit.schemas.PmtkDataWarning` naming it, by every read: the projected and
exact reads of :mod:`toolkit.viewdefs.load` leave pages whose schema is that deep
(:func:`dtype_depth`) to the general read of :mod:`toolkit.viewdefs.normalise`, which
leaves such resources out (:func:`split_deep`); a page too deep for the JSON parser
itself has its deep entries cut out first (:func:`cut_deep_entries`). The measures walk
without recursion, so no depth exhausts Python's stack.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import polars as pl

__all__ = [
    "MAX_RECORD_DEPTH",
    "cut_deep_entries",
    "deep_warning",
    "dtype_depth",
    "split_deep",
    "too_deep",
]

MAX_RECORD_DEPTH = 64
"""The deepest a resource may nest its JSON (objects and arrays inside each other,
the resource itself the first level) to be read into a view. A FHIR resource is some
ten or twenty levels deep (a Questionnaire's nested items, extensions of
extensions); one deeper than this is left out of the view with a
:class:`~toolkit.schemas.PmtkDataWarning` naming it, instead of exhausting Python's
stack (or the JSON libraries' depth limits) and failing the whole view."""


def too_deep(value: Any, limit: int = MAX_RECORD_DEPTH) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(current, dict):
            stack.extend((v, depth + 1) for v in current.values() if isinstance(v, dict | list))
        elif isinstance(current, list):
            stack.extend((v, depth + 1) for v in current if isinstance(v, dict | list))
    return False


def dtype_depth(dtype: Any) -> int:
    """The levels of ``Struct``/``List`` nesting of a Polars type (no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(dtype, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(current, pl.Struct):
            stack.extend((f.dtype, depth + 1) for f in current.fields)
        elif isinstance(current, pl.List):
            stack.append((current.inner, depth + 1))
    return deepest


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")
_ENTRY_KEY = re.compile(rb'"entry"\s*:\s*$')
_ID_KEY = re.compile(rb'"id"\s*:\s*"([^"\\]{1,64})"')


def _measure_entries(
    page: bytes, masked: bytes
) -> tuple[tuple[int, int] | None, list[tuple[int, int, int]]]:
    """Where the page's ``entry`` array opens and closes, and each entry's span and levels.

    The brackets of ``masked`` (the page with its strings blanked) are counted; the
    array is None when the page has none.
    """
    depth = 0
    in_entries = False
    array: tuple[int, int] | None = None
    opened = 0
    start: int | None = None
    deepest = 0
    entries: list[tuple[int, int, int]] = []
    for match in _BRACKET.finditer(masked):
        ch, pos = match.group(), match.start()
        if ch in b"[{":
            depth += 1
            if depth == 2 and ch == b"[" and _ENTRY_KEY.search(page, max(0, pos - 64), pos):
                in_entries, opened = True, pos
            elif depth == 3 and in_entries and ch == b"{":
                start, deepest = pos, 3
            deepest = max(deepest, depth)
            continue
        if depth == 3 and start is not None:
            entries.append((start, pos + 1, deepest - 2))  # the entry's own levels
            start = None
        elif depth == 2 and in_entries:
            in_entries, array = False, (opened, pos)
        depth -= 1
    return array, entries


def _entry_name(page: bytes, masked: bytes, index: int, begin: int, end: int) -> str:
    """The id of the resource of the entry at ``page[begin:end]``, else ``entry[index]``."""
    for found in _ID_KEY.finditer(page, begin, end):
        inside = masked[begin : found.start()]
        if inside.count(b"{") + inside.count(b"[") - inside.count(b"}") - inside.count(b"]") == 2:
            return found.group(1).decode("utf-8", "replace")
    return f"entry[{index}]"


def cut_deep_entries(page: bytes, limit: int = MAX_RECORD_DEPTH) -> tuple[bytes, list[str]] | None:
    """A Bundle page with the entries whose resource nests deeper than ``limit`` cut out.

    For a page too deep for the JSON parser itself (orjson stops at 1,024 levels):
    the brackets outside strings are counted, each entry of the page's ``entry``
    array is measured, and the page is written again with only the entries that
    are shallow enough; the ids of those cut (or ``entry[i]``) are returned with it.
    None when the page has no ``entry`` array to cut from.
    """
    masked = _JSON_STRING.sub(lambda m: b'"' + b"_" * (len(m.group()) - 2) + b'"', page)
    array, entries = _measure_entries(page, masked)
    if array is None:
        return None
    kept: list[bytes] = []
    cut: list[str] = []
    for i, (begin, end, levels) in enumerate(entries):
        # the entry object is one level above its resource
        if levels - 1 <= limit:
            kept.append(page[begin:end])
        else:
            cut.append(_entry_name(page, masked, i, begin, end))
    return page[: array[0] + 1] + b",".join(kept) + page[array[1] :], cut


def deep_warning(resource_type: str, ids: list[str]) -> None:
    """One :class:`~toolkit.schemas.PmtkDataWarning` for the resources left out as too deep."""
    from toolkit.schemas import PmtkDataWarning

    shown = ", ".join(ids[:5]) + (f" (and {len(ids) - 5} more)" if len(ids) > 5 else "")
    msg = (
        f"{len(ids)} {resource_type} resource(s) nest their JSON deeper than "
        f"{MAX_RECORD_DEPTH} levels and were left out of the view: {shown}"
    )
    cases = pl.DataFrame(
        {
            "id": ids,
            "column": ["(resource)"] * len(ids),
            "check": ["depth"] * len(ids),
            "failure_case": [f"deeper than {MAX_RECORD_DEPTH} levels"] * len(ids),
        }
    )
    warnings.warn(PmtkDataWarning(msg, cases), stacklevel=4)


def split_deep(resources: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The resources no deeper than :data:`MAX_RECORD_DEPTH`, and the ids of the others."""
    if not any(too_deep(res) for res in resources):
        return resources, []
    shallow = []
    deep: list[str] = []
    for i, res in enumerate(resources):
        if too_deep(res):
            deep.append(str(res.get("id", f"#{i}")))
        else:
            shallow.append(res)
    return shallow, deep
