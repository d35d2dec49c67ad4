"""One model of the rules whose source is not the spec, with the two views it is read in.

A rule of the catalogue whose source is the facts or pmtk (``Field.source``,
``Field.aspects``, ``Resource.source``) is read in two places: the contract suite
turns a breach of it into an observation (its view: :func:`catalogue_rules`, the
list in ``docs/contracts.md``, one row per resource, field and aspect), and the
frames' pandera schemas check it as a warning (its view: :func:`frame_checks`, the
list in ``docs/views.md``, one row per table, column and check). Both views are
cut from one model, :func:`non_spec_model`: each catalogue rule (from
:func:`toolkit.rules.non_spec_rules`) with the frame checks that enforce it
(from :mod:`toolkit.schemas`). A frame check is attributed to the narrowest rule
that covers its column's field: the same path and aspect, the same path with
aspect ``all``, an enclosing object's ``all``, or the resource's ``*``. The only
frame checks no catalogue rule covers are pmtk's own reading of the frames (a
date's precision, issue 24): they form rules of their own, marked
``in_catalogue=False``, which the contract view leaves out.

One list pins the model (``tests/rules/test_rule_sources.py``, written by
``tools/regenerate.py``), so a rule that moves to or from the spec shows in review
once, with the frame checks that move with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from toolkit import catalogue
from toolkit.catalogue import Field, Source
from toolkit.rules import RuleSource, non_spec_rules
from toolkit.views import VIEWS

__all__ = [
    "FrameCheck",
    "NonSpecRule",
    "catalogue_rules",
    "frame_checks",
    "frame_rule_rows",
    "non_spec_model",
    "pinned_rows",
    "rules_markdown",
]


class FrameCheck(NamedTuple):
    """One check of a frame's schema whose rule is not the spec's (a warning, never a failure)."""

    table: str
    column: str
    check: str
    source: str


@dataclass(frozen=True, slots=True)
class NonSpecRule:
    """A rule whose source is not the spec, and the frame checks that enforce it."""

    resource: str
    path: str
    """The catalogue field path, ``*`` (the whole resource) or ``(create)``."""
    aspect: str
    source: Source
    rule: str
    checks: tuple[FrameCheck, ...] = ()
    in_catalogue: bool = True
    """``False`` for a rule only the frames have (pmtk's reading of a date's precision)."""

    def source_rule(self) -> RuleSource:
        """The catalogue view of this rule (a row of ``docs/contracts.md``)."""
        return RuleSource(self.resource, self.path, self.aspect, self.source, self.rule)


_CHECK_ASPECT = {
    "enum": "enum",
    "reference_id": "reference",
    "reference_type": "reference",
    "not_nullable": "required",
    "full_precision": "precision",
}
"""A frame check's catalogue aspect; any other check (a format, a code list) is ``format``."""


def _field_paths() -> dict[tuple[str, int], str]:
    """(resource, id of a Field) -> its dotted catalogue path (shared Fields: per resource)."""
    out: dict[tuple[str, int], str] = {}

    def walk(resource: str, fields: tuple[Field, ...], prefix: str) -> None:
        for f in fields:
            out.setdefault((resource, id(f)), prefix + f.name)
            walk(resource, f.fields, f"{prefix}{f.name}.")

    for res in catalogue.RESOURCES.values():
        walk(res.name, res.fields, "")
    return out


def _path_of(resource: str, f: Field, paths: dict[tuple[str, int], str]) -> str:
    """The catalogue path of a view column's field (a view may hold a narrowed copy)."""
    found = paths.get((resource, id(f)))
    if found is not None:
        return found
    same = {p for (r, _), p in paths.items() if r == resource and p.rsplit(".", 1)[-1] == f.name}
    if len(same) == 1:
        return same.pop()
    msg = f"{resource}: no single catalogue field {f.name!r} for a view column ({sorted(same)})"
    raise LookupError(msg)


def _cover(rules: list[NonSpecRule], resource: str, path: str, aspect: str) -> int | None:
    """The index of the narrowest rule covering ``path``'s ``aspect`` in ``resource``."""
    best: tuple[int, int] | None = None  # (rank, index): lower rank is narrower
    for i, r in enumerate(rules):
        if r.resource != resource or not r.in_catalogue:
            continue
        if r.path == path and r.aspect == aspect:
            rank = 0
        elif r.path == path and r.aspect == "all":
            rank = 1
        elif r.aspect == "all" and path.startswith(r.path + "."):
            rank = 2 + (len(path) - len(r.path))  # the nearest enclosing object first
        elif r.path == "*":
            rank = 10_000
        else:
            continue
        if best is None or rank < best[0]:
            best = (rank, i)
    return None if best is None else best[1]


@cache
def _build() -> tuple[tuple[NonSpecRule, ...], dict[FrameCheck, int]]:
    """The model, and each frame check's position in view order."""
    from toolkit.schemas import custom_frame_checks

    rules = [NonSpecRule(r.resource, r.path, r.aspect, r.source, r.rule) for r in non_spec_rules()]
    checks: dict[int, list[FrameCheck]] = {}
    order: dict[FrameCheck, int] = {}
    paths = _field_paths()
    for views in VIEWS.values():
        for v in views:
            for col, check, source in custom_frame_checks(v):
                assert col.field is not None  # a rule not the spec's is some field's
                path = _path_of(v.resource, col.field, paths)
                aspect = _CHECK_ASPECT.get(check, "format")
                index = _cover(rules, v.resource, path, aspect)
                if index is None:  # pmtk's own reading of the frames: a rule of its own
                    key = (v.resource, path, aspect)
                    own = [i for i, r in enumerate(rules) if not r.in_catalogue]
                    index = next((i for i in own if _key(rules[i]) == key), None)
                    if index is None:
                        text = f"{check} of a {col.field.type} (the frames' reading)"
                        rules.append(NonSpecRule(*key, "pmtk", text, in_catalogue=False))
                        index = len(rules) - 1
                found = FrameCheck(v.name, col.name, check, source)
                checks.setdefault(index, []).append(found)
                order[found] = len(order)
    model = tuple(
        NonSpecRule(
            r.resource, r.path, r.aspect, r.source, r.rule, tuple(checks.get(i, ())), r.in_catalogue
        )
        for i, r in enumerate(rules)
    )
    return model, order


def _key(rule: NonSpecRule) -> tuple[str, str, str]:
    return (rule.resource, rule.path, rule.aspect)


def non_spec_model() -> tuple[NonSpecRule, ...]:
    """Every rule not the spec's, in the catalogue's order, each with its frame checks.

    Rules only the frames have come after those of the catalogue, in view order.
    """
    return _build()[0]


def catalogue_rules() -> list[RuleSource]:
    """The contract suite's view: one row per catalogue rule (``docs/contracts.md``)."""
    return [r.source_rule() for r in non_spec_model() if r.in_catalogue]


def frame_checks() -> list[FrameCheck]:
    """The frames' view: every check of the model's rules, in view order (``docs/views.md``)."""
    model, order = _build()
    return sorted((c for r in model for c in r.checks), key=order.__getitem__)


def pinned_rows() -> dict[tuple[str, str, str, str], list[str]]:
    """The model as its pinned list: each rule and the frame checks that enforce it.

    Keys are ``(resource, path, aspect, source)``; values ``"table.column check
    (source)"``, empty for a rule no frame checks (the frames have no column for it).
    """
    return {
        (r.resource, r.path, r.aspect, r.source): [
            f"{c.table}.{c.column} {c.check} ({c.source})" for c in r.checks
        ]
        for r in non_spec_model()
    }


def frame_rule_rows() -> list[tuple[str, str, str, str]]:
    """Every rule of the frames' schemas that does not come from the spec.

    The frames' view of :func:`toolkit.rule_sources.non_spec_model`, the one model
    of these rules (the contract suite reads the other view).

    Returns
    -------
    list of (table, column, check, source)
        ``source`` is ``facts`` or ``pmtk``; a violation of one of these rules is
        a :class:`PmtkDataWarning`, never a :class:`~toolkit.errors.DataValidationError`.
        The JSON type of a column with such a source is an observation too
        (``json_type``); it is not listed, to keep the list short.
    """
    return [tuple(c) for c in frame_checks()]  # type: ignore[misc]


def rules_markdown() -> str:
    """The ``docs/views.md`` list of the rules that are not the spec's (generated).

    Returns
    -------
    str
        A Markdown table: table, column, check, source.
    """
    lines = [
        "| Table | Column | Check | Source |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{t}` | `{c}` | {k} | {s} |" for t, c, k, s in frame_rule_rows()]
    return "\n".join(lines) + "\n"
