"""Repairing odd values: alternative forms to the canonical one, wrong JSON types to null."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from toolkit.catalogue.forms import READERS
from toolkit.errors import DataValidationError
from toolkit.views.check import AnyDtype

_json = msgspec.json.encode
"""JSON text of a value as the repair path decoded it: msgspec writes an integer beyond 64
bits exactly (FHIR's ``decimal`` has no bound), where orjson refused it and failed the read."""


def as_bytes(page: Any) -> bytes:
    if isinstance(page, bytes | bytearray | memoryview):
        return bytes(page)
    if isinstance(page, str):
        return page.encode()
    if isinstance(page, Mapping):
        return _json(page)
    msg = f"a page must be Bundle JSON as bytes, str or dict, not {type(page).__name__}"
    raise DataValidationError(msg, None)


def iter_pages(pages: Any) -> Iterator[Any]:
    if isinstance(pages, bytes | bytearray | memoryview | str | Mapping):
        yield pages
    else:
        yield from pages


def outcome_text(row: dict[str, Any]) -> str:
    issues = row.get("issue") or []
    parts = []
    for issue in issues[:3]:
        if issue is None:
            continue
        details = (issue.get("details") or {}).get("text")
        text = issue.get("diagnostics") or details or ""
        parts.append(f"{issue.get('severity')}/{issue.get('code')}: {text}".strip())
    return "; ".join(parts) or "no issue details"


Problem = dict[str, Any]


_Leftovers = dict[str, Any]


_SKIP = object()


_ALTERNATIVE_FORMS: dict[tuple[str, str], Any] = READERS
"""Known alternative forms of a field, keyed by resource and field path (``[]``: each
element of an array), with the function that reads one as the canonical form: the
catalogue's declarations (``Field.forms``, :mod:`toolkit.catalogue.forms`). Anything
the form does not use is kept in ``extra``."""


_EXTENSION_CONTAINERS = frozenset({"extension", "modifierExtension"})


def _primitive(value: Any, dtype: AnyDtype) -> Any:
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


_PRIMITIVE_TYPES = frozenset(
    {
        "base64Binary",
        "boolean",
        "canonical",
        "code",
        "date",
        "dateTime",
        "decimal",
        "id",
        "instant",
        "integer",
        "integer64",
        "markdown",
        "oid",
        "positiveInt",
        "string",
        "time",
        "unsignedInt",
        "uri",
        "url",
        "uuid",
    }
)
"""FHIR R4's primitive types: spelled with a lower-case initial, as ``value[x]`` does not."""


def _value_type(key: str) -> str:
    """The FHIR type named by a ``value[x]`` key: ``valueString`` → ``string``."""
    name = key[len("value") :]
    lower = name[:1].lower() + name[1:]
    return lower if lower in _PRIMITIVE_TYPES else name


_TEXT_KEYS = ("value", "code", "reference", "url", "text", "display", "family", "id")


def _value_text(value: Any) -> str | None:
    """An extension value as one text: see the ``value`` column of the extension table."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return _json(value).decode()
    if not isinstance(value, dict):
        return None
    if "start" in value or "end" in value:  # Period
        return f"{value.get('start') or ''}/{value.get('end') or ''}"
    coding = value.get("coding")
    if isinstance(coding, list) and coding and isinstance(coding[0], dict) and "code" not in value:
        found = coding[0].get("code")  # CodeableConcept
        if isinstance(found, str):
            return found
    for key in _TEXT_KEYS:
        found = value.get(key)
        if isinstance(found, str | int | float) and not isinstance(found, bool):
            return found if isinstance(found, str) else _json(found).decode()
    return None


def _element_path(path: str) -> str:
    """The element a path names: a primitive's extension holder ``_birthDate`` is ``birthDate``."""
    return ".".join(part[1:] if part.startswith("_") else part for part in path.split("."))


_EMPTIED = object()
"""What :meth:`Conformer.unknown` leaves of an object that held only extensions."""


class Conformer:
    """Bring one resource to the read schema: alternative forms normalised, wrong types nulled.

    ``problems`` collects ``(path, key, raw value)`` of every value nulled for
    its JSON type; ``extra`` every key the schema does not know, by path;
    ``extensions`` one row of the extension table per extension no column reads
    (``known_urls``: extension containers by field path → the url names read).
    """

    def __init__(
        self,
        resource: str,
        unread: frozenset[str] = frozenset(),
        unread_arrays: frozenset[str] = frozenset(),
        known_urls: Mapping[str, Mapping[str, frozenset[str]]] | None = None,
    ) -> None:
        self.resource = resource
        self.unread = unread  # top-level fields this read does not use: dropped
        self.unread_arrays = unread_arrays  # ... but checked to be arrays
        self.known_urls = known_urls or {}
        self.problems: list[tuple[str, str, Any]] = []
        self.extra: _Leftovers = {}
        self.extensions: list[dict[str, Any]] = []
        self.urls: dict[str, str] = {}  # path of a read extension element → its url

    def extension(
        self, element: Any, carrier: str, container: str, index: int, parent: str | None
    ) -> None:
        """One extension element as a row (and its nested ones); a non-object to ``extra``."""
        here = f"{carrier}.{container}[{index}]" if carrier else f"{container}[{index}]"
        if not isinstance(element, dict):
            self.extra[here] = element
            return
        url = element.get("url")
        keys = [k for k in element if k.startswith("value") and k[5:6].isupper()]
        key = keys[0] if keys else None
        value = element[key] if key is not None else None
        self.extensions.append(
            {
                "path": _element_path(carrier),
                "modifier": container == "modifierExtension",
                "index": index,
                "url": url if isinstance(url, str) else None,
                "parent_url": parent,
                "value_type": _value_type(key) if key is not None else None,
                "value": _value_text(value),
                "value_json": _json(value).decode() if key is not None else None,
            }
        )
        own = url if isinstance(url, str) else None
        for name, other in element.items():
            if name in _EXTENSION_CONTAINERS and isinstance(other, list):
                for i, nested in enumerate(other):
                    self.extension(nested, here, name, i, own)
            elif name not in ("url", key):
                self.extra[f"{here}.{name}"] = other  # a second value[x], an id: kept

    def unknown(self, path: str, name: str, value: Any) -> None:
        """A key the schema does not know: its extensions as rows, the rest to ``extra``."""
        kept = self.strip(value, path, name)
        if kept is not _EMPTIED:
            self.extra[path] = kept

    def strip(self, value: Any, path: str, name: str) -> Any:
        """``value`` (at ``path``, key ``name``) without its extension arrays, each a row."""
        carrier = path.rsplit(".", 1)[0] if "." in path else ""
        if name in _EXTENSION_CONTAINERS and isinstance(value, list):
            for i, element in enumerate(value):
                self.extension(element, carrier, name, i, self.urls.get(carrier))
            return _EMPTIED
        if isinstance(value, dict):
            out = {}
            for key, other in value.items():
                kept = self.strip(other, f"{path}.{key}", key)
                if kept is not _EMPTIED:
                    out[key] = kept
            return out if out or not value else _EMPTIED
        if isinstance(value, list):
            items = [self.strip(v, f"{path}[{i}]", name) for i, v in enumerate(value)]
            emptied = any(v is _EMPTIED for v in items)
            if emptied and all(v is _EMPTIED or v is None for v in items):
                return _EMPTIED  # ``_given``: [null, {"extension": [...]}]
            return [None if v is _EMPTIED else v for v in items]
        return value

    def known(self, element: Any, inner: AnyDtype, key: str) -> bool:
        """Whether a column reads this extension element: a url it names, in a value form it reads.

        A known url with a value form its column does not read (``valueBoolean`` for a
        coded one, even where another column of the container reads ``valueBoolean``)
        is an extension the view does not read: a row, with its url. Its other keys
        (nested extensions, ``id``) do not change that.
        """
        if not isinstance(element, dict) or not isinstance(inner, pl.Struct):
            return False
        url = element.get("url")
        if not isinstance(url, str):
            return False
        reads = self.known_urls.get(key, {}).get(url.rsplit("/", 1)[-1])
        if reads is None:
            return False
        return all(k in reads for k in element if k.startswith("value") and k[5:6].isupper())

    def value(
        self,
        value: Any,
        dtype: AnyDtype,
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
            container = key.rsplit(".", 1)[-1]
            if container in _EXTENSION_CONTAINERS:
                carrier = path.rsplit(".", 1)[0] if "." in path else ""
                read = []
                for i, v in enumerate(value):
                    if self.known(v, dtype.inner, key):
                        self.urls[f"{path}[{i}]"] = v["url"]  # parent of nested ones
                        read.append(self.item(v, dtype.inner, f"{path}[{i}]", key))
                    else:
                        self.extension(v, carrier, container, i, None)
                return read
            return [self.item(v, dtype.inner, f"{path}[{i}]", key) for i, v in enumerate(value)]
        primitive = _primitive(value, dtype)
        if primitive is not _SKIP:
            return primitive
        self.problems.append((path, key, raw))
        return None

    def item(self, value: Any, dtype: AnyDtype, path: str, key: str) -> Any:
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
                self.unknown(sub_path, name, value)
                continue
            out[name] = self.value(value, inner, sub_path, f"{key}.{name}" if key else name)
        return out


@dataclass(frozen=True, slots=True)
class Fix:
    """What :func:`_repair` found on one page, per entry (JSON text, or null)."""

    extra: list[str | None]
    invalid: list[str | None]
    extensions: list[str | None]


class _Skeleton(msgspec.Struct, gc=False):
    """A page as :func:`_repair` first sees it: its kind and each entry's raw JSON."""

    resourceType: str | None = None  # the JSON key
    entry: list[msgspec.Raw] | None = None


SKELETON = msgspec.json.Decoder(_Skeleton)
