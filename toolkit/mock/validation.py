"""Validation of write bodies, derived from the catalogue's Field tree.

:func:`validate` walks the catalogue description of a resource and reports
every broken rule as a ``(path, message)`` pair, where ``path`` is the
FHIRPath-like location used in ``OperationOutcome.issue[].expression``
(``attachments[0].contentType``). Nothing here knows about HTTP.

Rules applied: JSON types; enums (JSON null only where the catalogue allows
it; open enums accept any string); reference shape (``Ref.pattern``), ``type``
agreeing with the path, and the target existing in the store; formats (date,
date-time, country from ``country_codes()``, currency from
``currency_codes()``, base64, canonical); ``Field.required`` and the resource's
``create_required``; attachments' content type and decoded size. A format
with ``Field.format_when = (sibling, values)`` applies only when the sibling
holds one of the values (telecom ``value`` is a phone only for phone, sms, fax).
"""

from __future__ import annotations

import binascii
import datetime as dt
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from toolkit import catalogue
from toolkit.catalogue import Field, Resource

__all__ = ["Problem", "validate"]

Problem = tuple[str, str]
SERVER_FIELDS = frozenset({"id", "meta", "resourceType"})


@cache
def _regex(fmt: str) -> re.Pattern[str]:
    return re.compile(catalogue.format_pattern(fmt))


@cache
def _ref_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Checker:
    def __init__(
        self,
        *,
        resolves: Callable[[str], bool] | None,
        max_attachment_bytes: int,
        check_attachment_types: bool,
    ) -> None:
        self.resolves = resolves
        self.max_attachment_bytes = max_attachment_bytes
        self.check_attachment_types = check_attachment_types
        self.problems: list[Problem] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    # ------------------------------------------------------------------ objects
    def fields(self, fields: tuple[Field, ...], obj: dict[str, Any], path: str) -> None:
        extensions: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for container in ("extension", "modifierExtension"):
            items = obj.get(container)
            if items is None:
                continue
            if not isinstance(items, list):
                self.fail(f"{path}{container}", f"expected an array, got {_type_name(items)}")
                continue
            for n, item in enumerate(items):
                item_path = f"{path}{container}[{n}]"
                if not isinstance(item, dict) or not isinstance(item.get("url"), str):
                    self.fail(item_path, "an extension must be an object with a string url")
                    continue
                extensions.setdefault(item["url"], []).append((item_path, item))
        for f in fields:
            if f.extension is not None:
                for item_path, item in extensions.get(f.extension.url, []):
                    if f.extension.container == "modifierExtension" and not item_path.startswith(
                        f"{path}modifierExtension"
                    ):
                        self.fail(item_path, f"{f.name} belongs in modifierExtension")
                        continue
                    key = f.extension.value_key
                    if key not in item:
                        self.fail(f"{item_path}.{key}", f"{f.name} needs {key}")
                        continue
                    value = item[key]
                    if key == "valueCoding" and f.type == "code":
                        if not isinstance(value, dict):
                            self.fail(f"{item_path}.{key}", "expected an object")
                            continue
                        self.value(f, value.get("code"), f"{item_path}.{key}.code")
                    else:
                        self.value(f, value, f"{item_path}.{key}")
                continue
            if f.name not in obj or f.name in SERVER_FIELDS:
                if f.required and f.name not in obj:
                    self.fail(f"{path}{f.name}", "is required")
                continue
            use_format = f.format_when is None or obj.get(f.format_when[0]) in f.format_when[1]
            self.value(f, obj[f.name], f"{path}{f.name}", use_format)

    def value(self, f: Field, value: Any, path: str, use_format: bool = True) -> None:
        if f.many:
            if not isinstance(value, list):
                self.fail(path, f"expected an array, got {_type_name(value)}")
                return
            for n, item in enumerate(value):
                self.single(f, item, f"{path}[{n}]", use_format)
            return
        self.single(f, value, path, use_format)

    def single(self, f: Field, value: Any, path: str, use_format: bool = True) -> None:
        if value is None:
            if None not in f.enum:
                self.fail(path, "must not be null")
            return
        kind = f.type
        if kind == "object":
            if not isinstance(value, dict):
                self.fail(path, f"expected an object, got {_type_name(value)}")
                return
            self.fields(f.fields, value, path + ".")
            if f.name == "attachments":
                self.attachment(value, path)
            return
        if kind == "reference":
            self.reference(f, value, path)
            return
        if kind == "boolean":
            if not isinstance(value, bool):
                self.fail(path, f"expected a boolean, got {_type_name(value)}")
            return
        if kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                self.fail(path, f"expected an integer, got {_type_name(value)}")
            return
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(path, f"expected a number, got {_type_name(value)}")
            return
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_type_name(value)}")
            return
        if f.enum and not f.open_enum and value not in f.enum:
            if not (f.name == "contentType" and not self.check_attachment_types):
                allowed = ", ".join(repr(v) for v in f.enum if v is not None)
                self.fail(path, f"{value!r} is not one of {allowed}")
            return
        if not use_format:
            return
        fmt = f.format or (
            "date-time" if kind == "date-time" else "date" if kind == "date" else None
        )
        if fmt is not None and fmt != "base64":
            self.format(fmt, value, path)

    def format(self, fmt: str, value: str, path: str) -> None:
        if not _regex(fmt).match(value):
            self.fail(path, f"{value!r} is not a valid {fmt}")
            return
        if fmt == "country" and value not in catalogue.country_codes():
            self.fail(path, f"{value!r} is not an ISO 3166 alpha-2 country code")
        elif fmt == "currency" and value not in catalogue.currency_codes():
            self.fail(path, f"{value!r} is not an ISO 4217 currency code")
        elif fmt == "date":
            try:
                dt.date.fromisoformat(value)
            except ValueError:
                self.fail(path, f"{value!r} is not a real calendar date")
        elif fmt == "date-time":
            try:
                dt.datetime.fromisoformat(value)
            except ValueError:
                self.fail(path, f"{value!r} is not a real date-time")

    def reference(self, f: Field, value: Any, path: str) -> None:
        assert f.ref is not None
        if not isinstance(value, dict):
            self.fail(path, f"expected a reference object, got {_type_name(value)}")
            return
        target = value.get("reference")
        if not isinstance(target, str):
            self.fail(f"{path}.reference", "is required and must be a string")
            return
        if not _ref_regex(f.ref.pattern).match(target):
            shapes = " or ".join(
                f"/main/{t.type}/{'|'.join(t.prefixes)}<id>"
                if t.prefixes
                else f"/main/{t.type}/<id>"
                for t in f.ref.targets
            )
            self.fail(f"{path}.reference", f"{target!r} does not have the shape {shapes}")
            return
        named = target.split("/")[2]
        declared = value.get("type")
        if declared is not None and declared != named:
            self.fail(f"{path}.type", f"{declared!r} does not match the reference ({named})")
            return
        if self.resolves is not None and not self.resolves(target):
            self.fail(f"{path}.reference", f"{target} does not exist")

    def attachment(self, value: dict[str, Any], path: str) -> None:
        data = value.get("data")
        if not isinstance(data, str):
            return
        stripped = data.rstrip("=")
        decoded_size = len(stripped) * 3 // 4
        if decoded_size > self.max_attachment_bytes:
            self.fail(
                f"{path}.data",
                f"decodes to {decoded_size} bytes, more than the "
                f"{self.max_attachment_bytes} allowed",
            )
            return
        try:
            binascii.a2b_base64(data, strict_mode=True)
        except (binascii.Error, ValueError):
            self.fail(f"{path}.data", "is not valid base64")


def validate(
    resource: Resource,
    body: dict[str, Any],
    *,
    create: bool,
    resolves: Callable[[str], bool] | None = None,
    max_attachment_bytes: int = catalogue.MAX_ATTACHMENT_BYTES,
    check_attachment_types: bool = True,
) -> list[Problem]:
    """Every catalogue rule ``body`` breaks, as ``(path, message)`` pairs.

    ``create`` adds the resource's ``create_required`` fields to the required
    ones. ``resolves`` (``/main/<Type>/<id>`` -> bool) checks that references
    point at existing records.
    """
    checker = _Checker(
        resolves=resolves,
        max_attachment_bytes=max_attachment_bytes,
        check_attachment_types=check_attachment_types,
    )
    declared = body.get("resourceType")
    if declared is not None and declared != resource.name:
        checker.fail("resourceType", f"{declared!r} is not {resource.name!r}")
    if create:
        for name in resource.create_required:
            f = resource.field(name)
            present = (
                any(
                    isinstance(e, dict) and e.get("url") == f.extension.url
                    for e in body.get(f.extension.container) or []
                )
                if f.extension is not None
                else body.get(f.name) is not None
            )
            if not present:
                checker.fail(f.name, "is required on create")
    checker.fields(resource.fields, body, "")
    return checker.problems
