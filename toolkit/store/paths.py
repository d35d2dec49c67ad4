"""The one rule for a path a manifest names: inside its own table's folder, and nowhere else.

A table entry of the manifest (``{"path": ..., "sha256": ...}``) is trusted only
when its ``path`` is exactly what pmtk writes for that table:
``<table>/data-<16 hex digits>.parquet`` (``<table>/data.parquet`` in a store
written before content-named files), where ``<table>`` is the entry's own table,
one of the tables of the entry's resource (its view's tables and its raw records).
So a path is refused when it is absolute (``/...``, ``C:...``, ``\\\\server``), has
a ``..``, a backslash, an empty or ``.`` part, more or fewer than two parts, a
folder other than its table's (two entries swapped), or a file name pmtk does not
write; every name is matched whole (:func:`re.fullmatch`: a trailing newline is
not accepted). The rule is used by every reader and writer of the manifest:
:func:`toolkit.store.load`, :func:`toolkit.store.verify`,
:func:`toolkit.store.apply_changes`, a sync's incremental merge and its commit,
``pmtk sync --rebuild`` and ``--rebind``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit import views
from toolkit.store.rawtable import raw_table
from toolkit.store.results import FileProblem, StoreDamaged

__all__ = ["TABLE_FILE", "path_problem", "table_path"]

TABLE_FILE = re.compile(r"data(-[0-9a-f]{16})?\.parquet")
"""The name of a committed data file pmtk writes (content-named, or a format-1 store's)."""


def _tables_of(resource_type: str) -> set[str]:
    """The tables of a resource: its view's tables and its raw records (none if unknown)."""
    declared = views.VIEWS.get(resource_type)
    if declared is None:
        return set()
    return {v.name for v in declared} | {raw_table(resource_type)}


def path_problem(resource_type: str, table: str, info: Mapping[str, Any]) -> str | None:
    """Why the path a table entry names is not one pmtk writes for it (``None`` if it is).

    Parameters
    ----------
    resource_type
        The resource whose manifest entry holds the table entry.
    table
        The table entry's name (its key in the entry's ``tables``).
    info
        The table entry: ``path`` and ``sha256``.

    Returns
    -------
    str or None
        A short reason (``"path ../x is outside its table's folder Organization/"``).
    """
    if table not in _tables_of(resource_type):
        return f"{table!r} is not a table of {resource_type}; pmtk reads nothing it names"
    rel = info.get("path")
    if not isinstance(rel, str):
        return "the entry names no path"
    parts = rel.split("/")
    escaped = (
        "\\" in rel
        or ":" in rel
        or rel.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or len(parts) != 2
        or parts[0] != table
    )
    if escaped:
        return f"path {rel!r} is outside its table's folder {table}/; pmtk reads nothing there"
    if TABLE_FILE.fullmatch(parts[1]) is None:
        return f"path {rel!r} is not a data file name pmtk writes"
    return None


def table_path(root: Path, resource_type: str, table: str, info: Mapping[str, Any]) -> Path:
    """The file a table entry names, inside ``root``; :class:`StoreDamaged` when its path
    breaks the rule (naming the resource, the table and the path)."""

    problem = path_problem(resource_type, table, info)
    if problem is not None:
        shown = str(info.get("path") or f"{table}/?")
        raise StoreDamaged(root, [FileProblem(resource_type, table, shown, problem)])
    return root / str(info["path"])
