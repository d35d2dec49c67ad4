"""JSON merge patches, with the live service's merge of participants by actor."""

from __future__ import annotations

import copy
from typing import Any

from toolkit.mock.store import Record
from toolkit.mock.validation import Problem


def _names_of(record: Record, resource: str, part: str) -> list[str]:
    if resource == "Organization":
        return [record.get("name", "")] if part == "name" else []
    out: list[str] = []
    for name in record.get("name") or []:
        if part in ("name", "family") and name.get("family"):
            out.append(name["family"])
        if part in ("name", "given"):
            out.extend(name.get("given") or [])
        if part == "name" and name.get("text"):
            out.append(name["text"])
    return out


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


def _actor_key(entry: Any) -> str | None:
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
        key = _actor_key(entry)
        if not isinstance(entry, dict) or key is None:
            message = "is required in a PATCH: participants are merged by their actor"
            problems.append((f"participant[{n}].actor.reference", message))
            continue
        found = next((i for i, p in enumerate(result) if _actor_key(p) == key), None)
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
