"""The catalogue rules over records a deployment returned, as contract findings.

:func:`walk_resource` runs :func:`toolkit.rules.check_resource` in read mode
(null means absent, write-only fields are skipped, open enums and Practitioner's
name array are observations) and tags each violation with the contract category
it belongs to (``prefix``, ``enum``, ``reference``, ``format``, ``schema``; a
missing required field is a ``format`` finding). :class:`Seen` accumulates what
the walk saw (enum values, id prefixes, shapes) for the report's observations.

It is pure: no HTTP, no pytest, so the rules can be unit-tested on hand-made JSON.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from toolkit import catalogue as cat
from toolkit import rules

__all__ = ["Problem", "Seen", "walk_resource"]

ALTERNATE_SHAPES: frozenset[tuple[str, str]] = frozenset({("Practitioner", "name")})
"""(resource, field) whose spec shape and client-observed shape are both accepted."""

_ACCEPT_ARRAYS = frozenset(f"{resource}.{name}" for resource, name in ALTERNATE_SHAPES)

CATEGORIES: dict[str, str] = {"type": "schema", "required": "format", "unknown": "schema"}
"""Contract category of a :class:`toolkit.rules.Violation` category, where they differ."""

_PREFIX_RE = re.compile(r"^([A-Z]{2}-)")


@dataclass(frozen=True, slots=True)
class Problem:
    """One rule violation at a JSON path of one resource."""

    category: str
    resource_type: str
    resource_id: str
    path: str
    message: str

    def text(self) -> str:
        return f"{self.resource_type}/{self.resource_id} {self.path}: {self.message}"


@dataclass
class Seen:
    """What the walk observed, accumulated over many resources."""

    enum_values: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    open_enum_outside: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    id_prefixes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    shapes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    resources: Counter[str] = field(default_factory=Counter)

    def enum_report(self) -> dict[str, dict[str, list[str]]]:
        """Per enum field: values seen, allowed values never seen, values outside the list."""
        out: dict[str, dict[str, list[str]]] = {}
        for key, allowed in _enum_fields().items():
            res = key.split(".", 1)[0]
            if self.resources[res] == 0:
                continue
            seen = self.enum_values.get(key, Counter())
            out[key] = {
                "seen": sorted(seen),
                "never_seen": [_enum_key(v) for v in allowed if _enum_key(v) not in seen],
                "outside_open_enum": sorted(self.open_enum_outside.get(key, Counter())),
            }
        return out


def _enum_key(value: object) -> str:
    return "null" if value is None else str(value)


@cache
def _enum_fields() -> dict[str, tuple[str | None, ...]]:
    out: dict[str, tuple[str | None, ...]] = {}
    for name in cat.LISTED_RESOURCES:
        res = cat.resource(name)
        for path, f in cat.walk_fields(res.fields):
            if f.enum and not f.write_only:
                out[f"{name}.{path}"] = f.enum
    return out


# --------------------------------------------------------------------------- walk


def _observer(seen: Seen) -> Callable[[rules.Observation], None]:
    tallies = {
        "enum": seen.enum_values,
        "open-enum": seen.open_enum_outside,
        "shape": seen.shapes,
    }

    def observe(o: rules.Observation) -> None:
        tallies[o.kind][o.field_path][o.value] += 1

    return observe


def walk_resource(resource_type: str, data: Any, seen: Seen | None = None) -> list[Problem]:
    """Every catalogue rule ``data`` (one resource's JSON) breaks.

    ``seen`` (optional) accumulates observations over many calls.
    """
    seen = seen if seen is not None else Seen()
    if not isinstance(data, dict):
        return [Problem("schema", resource_type, "?", "", "resource is not a JSON object")]
    rid = data.get("id")
    seen.resources[resource_type] += 1
    if isinstance(rid, str) and rid:
        m = _PREFIX_RE.match(rid)
        seen.id_prefixes[resource_type][m.group(1) if m else "(none)"] += 1
    options = rules.Options(mode="read", accept_arrays=_ACCEPT_ARRAYS, observe=_observer(seen))
    return [
        Problem(CATEGORIES.get(v.category, v.category), resource_type, str(rid), v.path, v.message)
        for v in rules.check_resource(resource_type, data, options)
    ]
