"""Checking a store against its manifest's checksums (``pmtk sync --verify``)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.store.layout import read_manifest
from toolkit.store.results import DEFAULT_STORE, FileProblem, StoreDamaged, StoreError
from toolkit.store.transaction import check_table, entry_tables


@dataclass(slots=True)
class VerifyReport:
    """What :func:`verify` checked and what it found.

    Attributes
    ----------
    store
        The store directory.
    files
        Files checked (relative paths), in manifest order.
    bytes
        Bytes hashed.
    problems
        One :class:`FileProblem` per damaged, missing or unverifiable file.
    elapsed
        Seconds spent hashing.
    """

    store: Path
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    problems: list[FileProblem] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every file matched its recorded checksum."""
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raise :class:`StoreDamaged` listing every problem, if there is any."""
        if self.problems:
            raise StoreDamaged(self.store, self.problems)


def verify(
    store: str | os.PathLike[str] = DEFAULT_STORE,
    resources: Sequence[str] | None = None,
) -> VerifyReport:
    """Check every data file of a store against the sha256 its manifest recorded.

    Nothing is written and nothing is fetched. Hashing runs at the disk's
    read speed (see ``docs/store.md`` for figures).

    Parameters
    ----------
    store
        The store directory.
    resources
        Only these resource types (default every resource in the manifest).

    Returns
    -------
    VerifyReport
        ``report.ok`` is true when every file is intact; ``report.problems``
        names each damaged file. ``report.raise_for_problems()`` turns them into
        a :class:`StoreDamaged`.

    Raises
    ------
    StoreError
        When there is no store at ``store``, or it holds none of ``resources``.
    NotAStore, ManifestDamaged
        When the manifest is foreign or unreadable.
    """
    root = Path(store)
    started = time.monotonic()
    manifest = read_manifest(root)
    held: dict[str, Any] = manifest["resources"]
    wanted = list(resources) if resources else list(held)
    missing = [r for r in wanted if r not in held]
    if missing:
        stored = ", ".join(sorted(held)) or "nothing"
        msg = f"the store at {root} holds no {', '.join(missing)} data (it holds: {stored})"
        raise StoreError(msg)
    report = VerifyReport(store=root)
    for rt in wanted:
        _check_resource(report, rt, held[rt])
    report.elapsed = time.monotonic() - started
    return report


def _check_resource(report: VerifyReport, resource_type: str, entry: Mapping[str, Any]) -> None:
    """Check every file of one resource's manifest entry, adding to ``report``."""
    root = report.store
    for table, info in entry_tables(resource_type, entry).items():
        info = info if isinstance(info, dict) else {}
        report.files.append(str(info.get("path", table)))
        problem = check_table(root, resource_type, table, info)
        if problem is not None:
            report.problems.append(problem)
        elif isinstance(info.get("path"), str):
            report.bytes += (root / info["path"]).stat().st_size
