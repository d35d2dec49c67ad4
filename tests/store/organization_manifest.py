"""The manifest entry of the Organization store the commit and verify tests damage.

``tests/store/test_commit_verify.py`` and ``tests/store/test_commit_bites.py`` (the
mutation target ``commit``) sync one resource and read or forge its table entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

RESOURCE = "Organization"


def manifest_tables(store: Path) -> dict[str, dict[str, Any]]:
    """The manifest's entry of each table of :data:`RESOURCE` (path, sha256, ...)."""
    manifest = orjson.loads((store / "manifest.json").read_bytes())
    found: dict[str, dict[str, Any]] = manifest["resources"][RESOURCE]["tables"]
    return found


def write_manifest_tables(store: Path, entries: Any) -> None:
    """Replace :data:`RESOURCE`'s ``tables`` in the manifest (by hand, as a forger would)."""
    path = store / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    manifest["resources"][RESOURCE]["tables"] = entries
    path.write_bytes(orjson.dumps(manifest))
