"""The catalogue rules over records a deployment returned, as contract findings.

:func:`walk_resource` runs :func:`toolkit.rules.check_resource` in read mode with
the live service's forms accepted (null means absent, write-only fields are
skipped, open enums, the catalogue's alternative forms (:mod:`toolkit.catalogue.forms`:
Practitioner's name array, a Referral's Quantity), full extension urls, coded values
in any of ``valueCoding``/``valueCode``/``valueString`` and absolute or ``Type/id``
references are observations) and tags each violation with the contract category
it belongs to (``prefix``, ``enum``, ``reference``, ``format``, ``schema``; a
missing required field is a ``format`` finding) and the source of the rule it
broke: only a ``spec`` problem fails a check. :class:`Seen` accumulates what the
walk saw (enum values, id prefixes, shapes, forms, which fields held a value) for
the report's observations, the reference-form findings and the missing-field check.

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
from toolkit.catalogue import forms

__all__ = ["Problem", "Seen", "walk_resource"]

_ACCEPT_ARRAYS = forms.ACCEPT_ARRAYS

ALTERNATE_SHAPES: frozenset[tuple[str, str]] = frozenset(
    (owner, name) for owner, name in (path.rsplit(".", 1) for path in _ACCEPT_ARRAYS)
)
"""(resource, field) whose spec shape and client-observed shape are both accepted: the
catalogue's checked ``one-or-many`` forms (:mod:`toolkit.catalogue.forms`)."""

CATEGORY_OF_RULE: dict[str, str] = {"type": "schema", "required": "format", "unknown": "schema"}
"""Contract category (one of :data:`toolkit.catalogue.CONTRACT_CATEGORIES`) of a
:class:`toolkit.rules.Violation` category, where the two names differ."""

_PREFIX_RE = re.compile(r"^([A-Z]{2}-)")
_INDEX_RE = re.compile(r"\[\d+\]")
SPEC_REFERENCE_FORM = "relative"


@dataclass(frozen=True, slots=True)
class Problem:
    """One rule violation at a JSON path of one resource."""

    category: str
    resource_type: str
    resource_id: str
    path: str
    message: str
    source: str = "spec"

    def text(self) -> str:
        return f"{self.resource_type}/{self.resource_id} {self.path}: {self.message}"

    @property
    def field(self) -> str:
        """The JSON path without array indices, prefixed by the type: one key per field."""
        return f"{self.resource_type}.{_INDEX_RE.sub('', self.path)}"


@dataclass
class Seen:
    """What the walk observed, accumulated over many resources."""

    enum_values: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    open_enum_outside: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    id_prefixes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    shapes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    resources: Counter[str] = field(default_factory=Counter)
    forms: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    form_examples: dict[tuple[str, str], str] = field(default_factory=dict)
    present: Counter[str] = field(default_factory=Counter)
    unknown_extensions: dict[str, Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    unknown_keys: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    current: str = ""
    """``Type/id`` of the record being walked, for examples."""

    def reference_forms(self) -> list[dict[str, Any]]:
        """Per reference field whose values used a form other than the spec's: the counts.

        One entry per field (never per record): ``field``, ``forms`` (form -> count,
        the spec's ``relative`` included), ``other`` (references not in the spec's form)
        and an ``example`` record and path.
        """
        out = []
        for fpath, counts in sorted(self.forms.items()):
            refs = {k.removeprefix("reference:"): n for k, n in counts.items() if "reference:" in k}
            other = sum(n for k, n in refs.items() if k != SPEC_REFERENCE_FORM)
            if not other:
                continue
            form = next(k for k in refs if k != SPEC_REFERENCE_FORM)
            out.append(
                {
                    "field": fpath,
                    "forms": dict(sorted(refs.items())),
                    "other": other,
                    "example": self.form_examples.get((fpath, f"reference:{form}"), ""),
                }
            )
        return out

    def form_report(self) -> dict[str, dict[str, int]]:
        """Every non-reference form met (full extension urls, value keys, alternates)."""
        return {
            fpath: dict(sorted(c.items()))
            for fpath, c in sorted(self.forms.items())
            if any(not k.startswith("reference:") for k in c)
        }

    def missing_everywhere(self) -> list[dict[str, Any]]:
        """Fields the catalogue (and so the views) declare that no walked record held.

        A field counts only where its parent was seen: a participant field is missing
        everywhere when participants were walked and none held it. Unknown extension
        urls met beside it are listed, since a url that does not match is the usual
        cause of a column that is null everywhere.
        """
        out = []
        for name, fpath, parent, source in _declared_fields():
            walked = self.resources[name] if parent == name else self.present[parent]
            if walked == 0 or self.present[fpath] > 0:
                continue
            unknown: set[str] = set()
            for container in ("extension", "modifierExtension"):
                unknown.update(self.unknown_extensions.get(f"{parent}.{container}", Counter()))
            out.append(
                {
                    "field": fpath,
                    "source": source,
                    "within": parent,
                    "walked": walked,
                    "unknown_extensions_beside": sorted(unknown),
                    "unknown_keys_beside": sorted(self.unknown_keys.get(parent, Counter())),
                }
            )
        return out

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
def _declared_fields() -> tuple[tuple[str, str, str, str], ...]:
    """(resource, field path, parent path, effective source) of every readable field."""
    out: list[tuple[str, str, str, str]] = []

    def visit(name: str, fields: tuple[cat.Field, ...], parent: str, src: cat.Source) -> None:
        for f in fields:
            if f.write_only or f.name == "id":
                continue
            fsrc = cat.weakest(src, f.source)
            out.append((name, f"{parent}.{f.name}", parent, fsrc))
            visit(name, f.fields, f"{parent}.{f.name}", fsrc)

    for name in cat.LISTED_RESOURCES:
        res = cat.resource(name)
        visit(name, res.fields, name, res.source)
    return tuple(out)


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
        "form": seen.forms,
        "unknown-extension": seen.unknown_extensions,
        "unknown-key": seen.unknown_keys,
    }

    def observe(o: rules.Observation) -> None:
        if o.kind == "present":
            seen.present[o.field_path] += 1
            return
        tallies[o.kind][o.field_path][o.value] += 1
        if o.kind == "form":
            seen.form_examples.setdefault((o.field_path, o.value), f"{seen.current} {o.path}")

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
    seen.current = f"{resource_type}/{rid}"
    options = rules.Options(
        mode="read", live_forms=True, accept_arrays=_ACCEPT_ARRAYS, observe=_observer(seen)
    )
    return [
        Problem(
            CATEGORY_OF_RULE.get(v.category, v.category),
            resource_type,
            str(rid),
            v.path,
            v.message,
            v.source,
        )
        for v in rules.check_resource(resource_type, data, options)
    ]
