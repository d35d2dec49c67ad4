"""The exact check: msgspec types that accept exactly what the fast read keeps."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
import polars as pl
from polars.datatypes import DataTypeClass

from toolkit.views.declare import View
from toolkit.views.expressions import steps

ENVELOPE = pl.Struct(
    {
        "resourceType": pl.String(),
        "issue": pl.List(
            pl.Struct(
                {
                    "severity": pl.String(),
                    "code": pl.String(),
                    "diagnostics": pl.String(),
                    "details": pl.Struct({"text": pl.String()}),
                }
            )
        ),
    }
)


AnyDtype = pl.DataType | DataTypeClass
"""A dtype as a Struct's fields or a List's inner give it: an instance, or a class."""


_MSGSPEC_LEAVES: dict[Any, Any] = {
    pl.String: str,
    # msgspec decodes any JSON integer into an int, and Polars' typed read of one outside
    # Int64 saturates it (-2**63 - 1 was read as -2**63): out of range fails the exact
    # check, so the page takes the repair path, which keeps the value in ``invalid``.
    pl.Int64: Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)],
    pl.Float64: float,
    pl.Boolean: bool,
}


def _known_element(
    dtype: pl.Struct, name: str, path: str, known: Mapping[str, Mapping[str, frozenset[str]]]
) -> Any:
    """The type of an element of the extension container at ``path``: a known url, in a
    form its own column reads.

    A union tagged by ``url``, one member per url the columns read (``known[path]``:
    each name, its full url as the catalogue declares it and in the live service's
    form, :func:`toolkit.views.declare.known_extensions`), each member holding only the
    ``value[x]`` keys that url's column reads. A tag is a hash lookup; the pattern it
    replaced ("the name, bare or as the last path segment") ran Python's regex engine
    for every extension, which took half of the check's time. So an element with any
    other url (even one whose last segment is a known name), with none, or with a known
    url in a form its column does not read (``coverage-payer`` as the ``valueBoolean``
    the container's ``coverage-patient-anonymous`` column reads) fails the check, and
    the repair path reads that entry with the view's own rule (the last path segment,
    :class:`toolkit.views.conform.Conformer`): the same rows, only slower.
    """
    members = []
    for i, (url, keys) in enumerate(sorted(known[path].items())):
        fields = [
            (
                f"f{j}",
                _msgspec_type(f.dtype, f"{name}_{i}_{j}", f"{path}.{f.name}", known) | None,
                msgspec.field(default=None, name=f.name),
            )
            for j, f in enumerate(dtype.fields)
            if f.name in keys
        ]
        members.append(
            msgspec.defstruct(
                f"{name}_{i}",
                fields,
                tag_field="url",
                tag=url,
                forbid_unknown_fields=True,
                omit_defaults=True,
                gc=False,
            )
        )
    # A lone tagged struct would take an element without a url: a url's bare name and its
    # live full url are always two members (known_extensions(declared=True)).
    assert len(members) > 1, path
    return functools.reduce(operator.or_, members)


def _msgspec_type(
    dtype: AnyDtype,
    name: str,
    path: str = "",
    known_urls: Mapping[str, Mapping[str, frozenset[str]]] | None = None,
) -> Any:
    """The msgspec type that accepts exactly what Polars reads as ``dtype``, exactly.

    ``path`` is the field path of ``dtype`` (no indices); the elements of an
    extension container in ``known_urls`` (keyed by such a path) must be objects
    (not null) of one of its urls, in a form that url's column reads
    (:func:`_known_element`): any other element goes to the extension table, or a
    null one to ``extra``, which only the repair path fills.
    """
    known = known_urls or {}
    if isinstance(dtype, pl.Struct):
        if path in known:
            return _known_element(dtype, name, path, known)
        fields = []
        for i, f in enumerate(dtype.fields):
            sub = f"{path}.{f.name}" if path else f.name
            kind = _msgspec_type(f.dtype, f"{name}_{i}", sub, known)
            fields.append((f"f{i}", kind | None, msgspec.field(default=None, name=f.name)))
        return msgspec.defstruct(
            name, fields, forbid_unknown_fields=True, omit_defaults=True, gc=False
        )
    if isinstance(dtype, pl.List):
        inner = _msgspec_type(dtype.inner, name, path, known)
        return list[inner] if path in known else list[inner | None]  # type: ignore[valid-type]
    return _MSGSPEC_LEAVES[dtype if isinstance(dtype, type) else type(dtype)]


_SkippedArray = msgspec.defstruct(
    "SkippedArray", [], array_like=True, forbid_unknown_fields=False, gc=False
)
"""Any JSON array, its elements skipped: decodes to an empty struct, encodes as ``[]``."""


def strict_decoder(
    resource_dtype: pl.Struct,
    unread: frozenset[str] = frozenset(),
    unread_arrays: frozenset[str] = frozenset(),
    known_urls: Mapping[str, Mapping[str, frozenset[str]]] | None = None,
) -> tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]:
    """Decoders that fail on a page (and on one entry) holding anything the fast read would lose.

    Each resource is decoded into msgspec ``Struct`` types mirroring the read
    schema, every level forbidding unknown keys, every leaf typed as Polars
    reads it (``str``, ``int``, ``float``, ``bool``; null everywhere). So it
    fails exactly when some resource has a key the view does not know, at any
    depth, or a value of another JSON type than the schema's (which Polars
    would refuse, or silently coerce: a number read into a String column, 1.5
    truncated into an Int64 one), or an extension no column reads (its url, or its
    form, not a column's: ``known_urls``, see :func:`_known_element`), or a null one.
    Everything outside ``entry[].resource`` is
    skipped (the page's ``resourceType`` is kept as raw JSON), and so are the
    values of the known top-level fields in ``unread`` (one table's read does
    not use them; those in ``unread_arrays`` must still be arrays, whose
    elements are skipped). Such a page, or one not shaped as a Bundle, goes to
    :func:`_repair`, which runs the second decoder, the same check of one
    entry, to find the entries that need it.

    What a page that passes decodes to is exactly what the read keeps of it, so
    :func:`reencoded` writes it back for Polars to read instead of the page.
    """
    fields = [
        (
            f"f{i}",
            _msgspec_type(f.dtype, f"Resource_{i}", f.name, known_urls) | None,
            msgspec.field(default=None, name=f.name),
        )
        for i, f in enumerate(resource_dtype.fields)
    ]
    fields += [
        (
            f"u{i}",
            _SkippedArray | None if name in unread_arrays else msgspec.Raw,
            msgspec.field(default=None, name=name),
        )
        for i, name in enumerate(sorted(unread))
    ]
    res = msgspec.defstruct(
        "Resource", fields, forbid_unknown_fields=True, omit_defaults=True, gc=False
    )
    entry = msgspec.defstruct(
        "Entry", [("resource", res | None, None)], omit_defaults=True, gc=False
    )
    page = msgspec.defstruct(
        "Page",
        [
            ("resourceType", msgspec.Raw, None),
            ("entry", list[entry] | None, None),  # type: ignore[valid-type]
        ],
        gc=False,
    )
    return msgspec.json.Decoder(page), msgspec.json.Decoder(entry)


ENCODER = msgspec.json.Encoder()


_BUNDLE = msgspec.Raw(b'"Bundle"')


def is_utf8(raw: bytes) -> bool:
    """Whether ``raw`` is valid UTF-8 throughout (an ASCII page is, at once)."""
    if raw.isascii():
        return True
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def reencoded(page: Any, raw: bytes) -> bytes | None:
    """A page that passed the exact check, written back as just what the read keeps of it.

    Every field the read schema has, at every depth, with its value as decoded
    (a string as the same string, a number as the same number, an absent field
    or a null omitted, which Polars reads as null alike); the resource's other
    known fields as sent, its arrays among them as ``[]``; nothing else: not
    the page's other keys nor the entries' ``fullUrl``. Polars would otherwise
    parse all that only to skip it (for Appointment's main table, three
    quarters of the bytes).

    ``None`` (read ``raw`` as sent) for a page whose ``resourceType`` is not
    ``"Bundle"``, for the reader to refuse it with what it says, and for a page
    that is not UTF-8 throughout, which Polars refuses as a whole: msgspec
    validates only the strings it decodes.

    Exact because the check decoded every value it keeps with the read's own
    type: strings (escapes resolved) and integers are written back as the same
    values, floats in their shortest exact form (msgspec refuses one out of
    range), booleans and nulls as they were. A key given twice in one object,
    which JSON leaves undefined, keeps its last value, as in the repair path
    (Polars reading a page as sent keeps the first).
    """
    if page.resourceType != _BUNDLE or not is_utf8(raw):
        return None
    if page.entry is None:
        return b'{"resourceType":"Bundle","entry":null}'
    return b'{"resourceType":"Bundle","entry":' + ENCODER.encode(page.entry) + b"}"


def column_key(path: str, prefix: str = "") -> str:
    """A column's path as field names, extension elements named by their url.

    ``modifierExtension.where(url='appointment-participant-status').coded()``
    → ``modifierExtension:appointment-participant-status``: the form
    :func:`_repair` gives the path of a value it could not read.
    """
    parts = prefix.split(".") if prefix else []
    for m in steps(path):
        if m.group("url") is not None:
            parts[-1] = f"{parts[-1]}:{m.group('url')}"
        elif m.group("key") not in (None, "$this"):
            parts.append(m.group("key"))
    return ".".join(parts)


def column_keys(views: tuple[View, ...]) -> tuple[tuple[str, str | None, str, str], ...]:
    """``(table, for_each, column, key)`` of every column that reads the resource."""
    out = []
    for v in views:
        if v.extensions:
            continue  # filled by the repair path, not read by a path
        if v.for_each is not None and not re.fullmatch(r"[A-Za-z_][\w-]*", v.for_each):
            continue  # pragma: no cover - every child table repeats a top-level field
        for c in v.columns:
            if c.role in ("extra", "invalid", "key", "index"):
                continue
            out.append((v.name, v.for_each, c.name, column_key(c.path, v.for_each or "")))
    return tuple(out)


def top_fields(view_: View) -> frozenset[str]:
    """The top-level resource fields that ``view_`` reads (besides ``resourceType`` and ``id``)."""
    if view_.extensions:
        return frozenset()
    if view_.for_each is not None:
        paths = [view_.for_each]
    else:
        paths = [
            c.path for c in view_.columns if c.role not in ("extra", "invalid", "key", "index")
        ]
    fields = set()
    for path in paths:
        for m in steps(path):
            if m.group("key") not in (None, "$this"):
                fields.add(m.group("key"))
                break
    return frozenset(fields)
