"""The JSON forms the mock accepts and serves: the spec's literal forms or the live service's.

``public-docs-facts.md`` ("Shapes seen on the live service") shows that the live
service writes extension urls in full (``https://terminology.halaxy.com/
StructureDefinition/<name>``), gives the participant status coding a ``system``
and a ``display``, serves Practitioner ``name`` as an array of HumanName and
references as absolute urls, where the spec shows bare names, a single name
object and ``/main/<Type>/<id>``. A deployment serves one of two *shapes*:

``live`` (the default)
    The live forms above; ``patient-status`` as ``valueString``; a Referral's
    ``limitQuantity.quantity`` as a Quantity ``{"value": n}`` and its
    ``referralDefinition`` as a Reference to the ReferralDefinition of that name,
    with the name as its ``display``.
``spec``
    The spec's literal forms (bare extension names, one Practitioner name
    object, relative references).

Writes are accepted in every form in both modes: :func:`to_spec` turns a body
into the spec form (the form the catalogue rules check), and :func:`to_stored`
turns a checked record into the deployment's form. References are *stored*
relative in both modes; :func:`absolute_references` rewrites them in the
response bytes of a live deployment, with the origin the mock is reached at,
so that every absolute reference resolves against the mock itself.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from toolkit import catalogue
from toolkit.catalogue import forms
from toolkit.catalogue.constants import LIVE_EXTENSION_BASE

__all__ = [
    "EXTENSION_BASE",
    "SHAPES",
    "STATUS_SYSTEM",
    "Shapes",
    "absolute_references",
    "extension_name",
    "local_reference",
    "status_code",
    "to_spec",
    "to_stored",
]

Shapes = Literal["live", "spec"]
SHAPES: tuple[Shapes, ...] = ("live", "spec")
EXTENSION_BASE = LIVE_EXTENSION_BASE
STATUS_SYSTEM = "https://au-api.halaxy.com/presets/CodeSystem/appointment-participant-status"
STATUS_URL = "appointment-participant-status"
NO_CHARGE = "cancelled (no charge)"
STATUS_DISPLAY = {
    "booked": "Booked",
    "confirmed": "Confirmed",
    "arrived": "Arrived",
    "attended": "Attended",
    "cancelled": "Cancelled",
    "noshow": "No Show",
}
CODED_KEYS = ("valueCoding", "valueCode", "valueString")


def _extensions() -> dict[str, catalogue.Field]:
    out: dict[str, catalogue.Field] = {}
    for res in catalogue.RESOURCES.values():
        for _path, f in catalogue.walk_fields(res.fields):
            if f.extension is not None:
                out[f.extension.url] = f
    return out


EXTENSIONS: dict[str, catalogue.Field] = _extensions()
"""Every extension the catalogue declares, by its bare name."""

_ABSOLUTE = re.compile(r"https?://[^/\s?#]+(/main/[A-Za-z]+/[^/\s?#]+)")


def local_reference(text: str) -> str:
    """``https://host/main/Patient/1`` as ``/main/Patient/1``; other text unchanged."""
    match = _ABSOLUTE.fullmatch(text)
    return match.group(1) if match else text


def extension_name(url: str) -> str:
    """The bare name of a known extension url (full or bare); other urls unchanged."""
    if url in EXTENSIONS:
        return url
    if url.startswith(("https://", "http://")):
        name = url.rstrip("/").rsplit("/", 1)[-1]
        if name in EXTENSIONS:
            return name
    return url


def status_code(item: dict[str, Any]) -> str | None:
    """The code of a coded extension value in any of its three forms (or None)."""
    coding = item.get("valueCoding")
    if isinstance(coding, dict) and isinstance(coding.get("code"), str):
        return str(coding["code"])
    for key in ("valueCode", "valueString"):
        if isinstance(item.get(key), str):
            return str(item[key])
    return None


def _spec_extension(item: Any) -> Any:
    if not isinstance(item, dict) or not isinstance(item.get("url"), str):
        return item
    name = extension_name(item["url"])
    f = EXTENSIONS.get(name)
    out = {**item, "url": name}
    if f is None or f.extension is None or f.extension.value_key not in CODED_KEYS:
        return out
    # A coded value may come as valueCoding, valueCode or valueString (facts):
    # keep one, in the key the catalogue declares, so the rules check its code.
    present = [k for k in CODED_KEYS if k in out]
    if len(present) != 1:
        return out  # none or several: the rules report it
    code = status_code(out)
    if code is None:
        return out
    if name == STATUS_URL and code == NO_CHARGE:
        code = "cancelled"  # the live service stores "cancelled (no charge)" as cancelled
    key = f.extension.value_key
    value = out.pop(present[0])
    if key == "valueCoding":
        coding = dict(value) if isinstance(value, dict) else {}
        coding["code"] = code
        out[key] = coding
    else:
        out[key] = code
    return out


def to_spec(value: Any, rtype: str | None = None, names: forms.Names = forms.NO_NAMES) -> Any:
    """A copy of a written body in the spec's form (references, extension urls, codes).

    With ``rtype``, a field the catalogue declares in another form (facts) comes back
    in the catalogue's form too (:func:`toolkit.catalogue.forms.to_canonical`): a
    Referral's ``limitQuantity.quantity`` as a Quantity gives its number, its
    ``referralDefinition`` as a Reference its ``display``, else the name of the
    record it points at (``names``).
    """
    out = _to_spec(value)
    if rtype is not None and isinstance(out, dict):
        out = forms.to_canonical(rtype, out, names)
    return out


def _to_spec(value: Any) -> Any:
    if isinstance(value, list):
        return [to_spec(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in ("extension", "modifierExtension") and isinstance(item, list):
            out[key] = [_spec_extension(_to_spec(x)) for x in item]
        elif key == "reference" and isinstance(item, str):
            out[key] = local_reference(item)
        else:
            out[key] = _to_spec(item)
    return out


def _live_extension(item: Any) -> Any:
    if not isinstance(item, dict) or item.get("url") not in EXTENSIONS:
        return item
    name = item["url"]
    out = {**item, "url": EXTENSION_BASE + name}
    if name == STATUS_URL:
        code = status_code(item)
        if code is not None:
            out["valueCoding"] = {
                "system": STATUS_SYSTEM,
                "code": code,
                "display": STATUS_DISPLAY.get(code, code),
            }
    elif name == "patient-status" and isinstance(item.get("valueCode"), str):
        out["valueString"] = out.pop("valueCode")
    return out


def _live(value: Any) -> Any:
    if isinstance(value, list):
        return [_live(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in ("extension", "modifierExtension") and isinstance(item, list):
            out[key] = [_live_extension(_live(x)) for x in item]
        else:
            out[key] = _live(item)
    return out


def _spec_stored(value: Any) -> Any:
    if isinstance(value, list):
        return [_spec_stored(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "modifierExtension" and isinstance(item, list):
            out[key] = [
                {"url": STATUS_URL, "valueCoding": {"code": status_code(x)}}
                if isinstance(x, dict) and x.get("url") == STATUS_URL and status_code(x)
                else _spec_stored(x)
                for x in item
            ]
        else:
            out[key] = _spec_stored(item)
    return out


def to_stored(
    rtype: str,
    record: dict[str, Any],
    shapes: Shapes,
    names: forms.Names = forms.NO_NAMES,
) -> dict[str, Any]:
    """A spec-form record (references relative) in the deployment's stored form.

    In ``live`` shapes each field the catalogue declares in another form is served in
    it (:func:`toolkit.catalogue.forms.to_live`); ``names`` lets a Reference name the
    record of its target type with that name (a name none has becomes a Reference
    with only a ``display``, which FHIR allows).
    """
    for name in sorted(forms.LIVE_ARRAYS.get(rtype, ())):
        value = record.get(name)
        if shapes == "spec" and isinstance(value, list) and len(value) == 1:
            record = {**record, name: value[0]}
        elif shapes == "live" and isinstance(value, dict):
            record = {**record, name: [value]}
    if shapes == "spec":
        result: dict[str, Any] = _spec_stored(record)
        return result
    live: dict[str, Any] = _live(forms.to_live(rtype, record, names))
    return live


_REFERENCE = b'"reference":"/main/'


def absolute_references(content: bytes, origin: str) -> bytes:
    """Rewrite every ``"reference":"/main/...`` of serialised JSON as ``origin/main/...``.

    orjson writes no spaces and escapes every quote inside a string, so the
    pattern only ever matches a ``reference`` member, never text inside a value.
    """
    if _REFERENCE not in content:
        return content
    return content.replace(_REFERENCE, b'"reference":"' + origin.encode() + b"/main/")
