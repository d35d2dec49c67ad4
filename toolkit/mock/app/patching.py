"""JSON merge patches, with the live service's merge of participants by actor."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from toolkit import catalogue
from toolkit.catalogue import Field, forms
from toolkit.mock.store import Record
from toolkit.mock.validation import Problem

_HUMAN_PARTS = frozenset({"family", "given", "text"})
"""Sub-fields that mark a declared ``name`` object as FHIR's HumanName."""


def _name_field(resource: str) -> Field | None:
    res = catalogue.RESOURCES.get(resource)
    return next((f for f in res.fields if f.name == "name"), None) if res is not None else None


def _name_texts(value: Any, part: str, human: bool) -> Iterator[str]:
    """The texts of one arriving ``name`` value that a ``part`` search compares.

    Every form FHIR allows is read, whatever the declaration says (the tolerant
    reader): a string, a HumanName object, an array of either; anything else (a
    number, null, a missing name) gives nothing. ``human`` is the declared form:
    only a HumanName has the ``family`` and ``given`` parts, and only its string
    items (FHIR: ``family`` 0..1 string, ``given`` 0..* string) are compared.
    """
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, list):  # FHIR has no array of arrays of names
                yield from _name_texts(item, part, human)
    elif isinstance(value, str):
        if part == "name" and value:
            yield value
    elif isinstance(value, dict):
        family, given, text = value.get("family"), value.get("given"), value.get("text")
        if human and part in ("name", "family") and isinstance(family, str) and family:
            yield family
        if human and part in ("name", "given"):
            items = given if isinstance(given, list) else [given]
            yield from (g for g in items if isinstance(g, str) and g)
        if part == "name" and isinstance(text, str) and text:
            yield text


def names_of(record: Record, resource: str, part: str) -> list[str]:
    """The texts a ``name``/``family``/``given`` search of ``resource`` compares.

    The catalogue's declaration of the type's ``name`` field gives its form: an
    ``object`` with sub-fields is a HumanName (parts ``family``, ``given``, ``text``),
    a ``string`` is the name itself. A name in one of the field's alternative forms
    (``Field.forms``: a Reference whose ``display`` is the name, say) is also read as
    the form's reader reads it (:func:`toolkit.catalogue.forms.readings`). No resource
    type is named here.
    """
    field = _name_field(resource)
    if field is None:
        return []
    human = field.type == "object" and any(f.name in _HUMAN_PARTS for f in field.fields)
    texts: list[str] = []
    for value in forms.readings(field, record.get("name")):
        texts.extend(_name_texts(value, part, human))
    return texts


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value; ``target`` is not changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def actor_key(entry: Any) -> str | None:
    actor = entry.get("actor") if isinstance(entry, dict) else None
    text = actor.get("reference") if isinstance(actor, dict) else None
    return text if isinstance(text, str) and text else None


def _merge_extensions(current: Any, patch: list[Any]) -> list[Any]:
    """Extension arrays inside a participant merge by (bare) url; null removes one."""
    result = [copy.deepcopy(x) for x in current] if isinstance(current, list) else []
    for item in patch:
        url = item.get("url") if isinstance(item, dict) else None
        found = next(
            (n for n, x in enumerate(result) if isinstance(x, dict) and x.get("url") == url), None
        )
        if url is None or found is None:
            result.append(copy.deepcopy(item))
        else:
            result[found] = copy.deepcopy(item)
    return result


def merge_participants(current: Any, patch: list[Any]) -> tuple[list[Any], list[Problem]]:
    """Merge a PATCH's ``participant`` entries into the current ones BY ACTOR.

    The live service does this (facts, "Cancelling a patient's attendance"): a patch
    with only the patient's participant changes that participant and keeps the
    practitioner's. RFC 7386 would replace the whole array; this is the one place the
    mock departs from it. Inside a matched entry, members merge as RFC 7386 and the
    ``extension``/``modifierExtension`` arrays merge by url. An entry with an actor
    that matches none is added. Every patch entry needs an actor.
    """
    result = [copy.deepcopy(p) for p in current] if isinstance(current, list) else []
    problems: list[Problem] = []
    for n, entry in enumerate(patch):
        key = actor_key(entry)
        if not isinstance(entry, dict) or key is None:
            message = "is required in a PATCH: participants are merged by their actor"
            problems.append((f"participant[{n}].actor.reference", message))
            continue
        found = next((i for i, p in enumerate(result) if actor_key(p) == key), None)
        if found is None:
            result.append(merge_patch({}, entry))
            continue
        merged = merge_patch(result[found], {k: v for k, v in entry.items() if "xtension" not in k})
        for container in ("extension", "modifierExtension"):
            if container not in entry:
                continue
            value = entry[container]
            if value is None:
                merged.pop(container, None)
            elif isinstance(value, list):
                merged[container] = _merge_extensions(merged.get(container), value)
            else:
                merged[container] = copy.deepcopy(value)  # the rules report the wrong type
        result[found] = merged
    return result, problems
