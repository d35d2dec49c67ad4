"""Repairing odd values: alternative forms to the canonical one, wrong JSON types to null."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
import polars as pl

from toolkit.errors import DataValidationError
from toolkit.views.check import _AnyDtype


def _as_bytes(page: Any) -> bytes:
    if isinstance(page, bytes | bytearray | memoryview):
        return bytes(page)
    if isinstance(page, str):
        return page.encode()
    if isinstance(page, Mapping):
        return orjson.dumps(page)
    msg = f"a page must be Bundle JSON as bytes, str or dict, not {type(page).__name__}"
    raise DataValidationError(msg, None)


def _iter_pages(pages: Any) -> Iterator[Any]:
    if isinstance(pages, bytes | bytearray | memoryview | str | Mapping):
        yield pages
    else:
        yield from pages


def _outcome_text(row: dict[str, Any]) -> str:
    issues = row.get("issue") or []
    parts = []
    for issue in issues[:3]:
        if issue is None:
            continue
        details = (issue.get("details") or {}).get("text")
        text = issue.get("diagnostics") or details or ""
        parts.append(f"{issue.get('severity')}/{issue.get('code')}: {text}".strip())
    return "; ".join(parts) or "no issue details"


_Problem = dict[str, Any]


_Leftovers = dict[str, Any]


_SKIP = object()


def _one_as_array(value: Any, path: str, extra: _Leftovers) -> Any:
    """The spec's single HumanName object, as the live service's one-element array."""
    return [value] if isinstance(value, dict) else value


def _quantity_value(value: Any, path: str, extra: _Leftovers) -> Any:
    """A Quantity ``{"value": 10, ...}`` (the live form) read as its number."""
    if not isinstance(value, dict) or "value" not in value:
        return value
    for key, other in value.items():
        if key != "value":
            extra[f"{path}.{key}"] = other
    return value["value"]


def _reference_display(value: Any, path: str, extra: _Leftovers) -> Any:
    """A Reference ``{"reference": ..., "display": ...}`` read as its display, else reference."""
    if not isinstance(value, dict):
        return value
    chosen = "display" if isinstance(value.get("display"), str) else "reference"
    for key, other in value.items():
        if key != chosen:
            extra[f"{path}.{key}"] = other
    return value.get(chosen)


def _codeable_as_coding(value: Any, path: str, extra: _Leftovers) -> Any:
    """A FHIR CodeableConcept ``{"coding": [{system, code, display}]}`` read as its first coding.

    The spec gives Organization ``type`` items as ``{system, code, display}``;
    FHIR servers (and pmtk's mock) wrap them in ``coding``. Further codings and
    other keys (``text``) are kept in ``extra``.
    """
    if not isinstance(value, dict) or not isinstance(value.get("coding"), list) or "code" in value:
        return value
    coding = value["coding"]
    for key, other in value.items():
        if key != "coding":
            extra[f"{path}.{key}"] = other
    for i, other in enumerate(coding[1:], 1):
        extra[f"{path}.coding[{i}]"] = other
    return coding[0] if coding else None


_ALTERNATIVE_FORMS: dict[tuple[str, str], Any] = {
    ("Organization", "type[]"): _codeable_as_coding,
    ("Practitioner", "name"): _one_as_array,
    ("Patient", "name"): _one_as_array,
    ("Referral", "limitQuantity.quantity"): _quantity_value,
    ("Referral", "referralDefinition"): _reference_display,
}
"""Known alternative forms of a field (facts, "Shapes seen on the live service"),
keyed by resource and field path (``[]``: each element of an array), with the
function that reads one as the canonical form. Anything the form does not use is
kept in ``extra``."""


_EXTENSION_CONTAINERS = frozenset({"extension", "modifierExtension"})


def _primitive(value: Any, dtype: _AnyDtype) -> Any:
    """``value`` as Polars reads it into ``dtype``; ``_SKIP`` when it is another JSON type.

    Stricter than Polars, which reads a number into a String column and
    truncates 1.5 into an Int64 one; an integral float (``10.0``) is an integer.
    """
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(dtype, pl.String) and isinstance(value, str):
        return value
    if isinstance(dtype, pl.Boolean) and isinstance(value, bool):
        return value
    if isinstance(dtype, pl.Float64) and numeric:
        return value
    if isinstance(dtype, pl.Int64) and numeric and float(value).is_integer():
        whole = int(value)
        if -(2**63) <= whole < 2**63:
            return whole
    return _SKIP


class _Conformer:
    """Bring one resource to the read schema: alternative forms normalised, wrong types nulled.

    ``problems`` collects ``(path, key, raw value)`` of every value nulled for
    its JSON type; ``extra`` every key the schema does not know, by path.
    """

    def __init__(
        self,
        resource: str,
        unread: frozenset[str] = frozenset(),
        unread_arrays: frozenset[str] = frozenset(),
    ) -> None:
        self.resource = resource
        self.unread = unread  # top-level fields this read does not use: dropped
        self.unread_arrays = unread_arrays  # ... but checked to be arrays
        self.problems: list[tuple[str, str, Any]] = []
        self.extra: _Leftovers = {}

    def value(
        self,
        value: Any,
        dtype: _AnyDtype,
        path: str,
        key: str,
        form_key: str | None = None,
    ) -> Any:
        if value is None:
            return None
        form = _ALTERNATIVE_FORMS.get((self.resource, key if form_key is None else form_key))
        raw = value
        if form is not None:
            value = form(value, path, self.extra)
            if value is None:
                return None
        if isinstance(dtype, pl.Struct) and isinstance(value, dict):
            return self.struct(value, dtype, path, key)
        if isinstance(dtype, pl.List) and isinstance(value, list):
            return [self.item(v, dtype.inner, f"{path}[{i}]", key) for i, v in enumerate(value)]
        primitive = _primitive(value, dtype)
        if primitive is not _SKIP:
            return primitive
        self.problems.append((path, key, raw))
        return None

    def item(self, value: Any, dtype: _AnyDtype, path: str, key: str) -> Any:
        container = key.rsplit(".", 1)[-1]
        if container in _EXTENSION_CONTAINERS and isinstance(value, dict):
            url = value.get("url")
            key = f"{key}:{url.rsplit('/', 1)[-1]}" if isinstance(url, str) else key
        return self.value(value, dtype, path, key, form_key=f"{key}[]")

    def struct(self, obj: dict[str, Any], dtype: pl.Struct, path: str, key: str) -> dict[str, Any]:
        fields = dtype.to_schema()
        out: dict[str, Any] = {}
        for name, value in obj.items():
            sub_path = f"{path}.{name}" if path else name
            inner = fields.get(name)
            if inner is None:
                if not path and name in self.unread:
                    if name in self.unread_arrays and not isinstance(value, list | None):
                        self.problems.append((name, name, value))
                    continue
                self.extra[sub_path] = value
                continue
            out[name] = self.value(value, inner, sub_path, f"{key}.{name}" if key else name)
        return out


@dataclass(frozen=True, slots=True)
class _Fix:
    """What :func:`_repair` found on one page, per entry (JSON text, or null)."""

    extra: list[str | None]
    invalid: list[str | None]


class _Skeleton(msgspec.Struct, gc=False):
    """A page as :func:`_repair` first sees it: its kind and each entry's raw JSON."""

    resourceType: str | None = None  # the JSON key
    entry: list[msgspec.Raw] | None = None


_SKELETON = msgspec.json.Decoder(_Skeleton)
