"""Resources into one Polars ``Struct`` column, with no value silently changed.

Polars infers a schema from every resource, but where one field has values of
different JSON types it quietly makes them all text (an object and a string
become the object's JSON text; a number beside strings becomes a string), and
an object beside an array is an error. So the fast read is checked:

1. Bundle pages (bytes or str) are read by Polars in one ``read_json`` pass,
   the schema inferred from all of them.
2. Each page is then decoded by msgspec into ``Struct`` types that mirror the
   inferred schema exactly (strings are ``str``, integers ``int``, ...). A page
   passes when every value has the JSON type its column has; then the fast read
   lost nothing.
3. Otherwise the resources are read in Python (orjson) and *normalised*
   (:func:`~toolkit.viewdefs.normalise.read_resources`, the general read).

Tried first when a view says which fields it reads, the projected read
(:func:`read_pages_projected`) keeps only those, checked the same way against a
schema inferred from a sample of the pages.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import orjson
import polars as pl

from toolkit.viewdefs.depth import MAX_RECORD_DEPTH, dtype_depth, too_deep
from toolkit.viewdefs.normalise import empty_frame, read_resources
from toolkit.views.reader import executor

Tree = dict[str, Any]
"""Field name → the children read of it (a :data:`Tree`), or None: all of them."""

__all__ = [
    "MAX_RECORD_DEPTH",
    "Part",
    "kept_fields",
    "read_pages",
    "read_pages_projected",
    "read_parts_projected",
    "read_resources",
]

_counter = itertools.count()

_ENCODER = msgspec.json.Encoder()


_INT64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer Polars' ``Int64`` holds: a bigger one fails the check instead of being lost."""


def _msgspec_type(dtype: Any, *, forbid: bool = False) -> Any:
    """The msgspec type that accepts exactly the JSON values Polars read into ``dtype``.

    With ``forbid``, an object with a key the schema does not name fails too (at
    every depth): the check of a schema inferred from a sample of the pages.
    Absent and null fields are omitted when a decoded value is encoded again
    (:func:`read_pages_reencoded`): Polars reads both as null.
    """
    if isinstance(dtype, type):
        dtype = dtype()
    if isinstance(dtype, pl.Struct):
        fields = [
            (f"f{i}", _msgspec_type(f.dtype, forbid=forbid) | None, None)
            for i, f in enumerate(dtype.fields)
        ]
        rename = {f"f{i}": f.name for i, f in enumerate(dtype.fields)}
        return msgspec.defstruct(
            f"S{next(_counter)}",
            fields,
            rename=rename,
            forbid_unknown_fields=forbid,
            omit_defaults=True,
            gc=False,
        )
    if isinstance(dtype, pl.List):
        # a null item of an array is no item to FHIRPath (the general read drops it),
        # but Polars would keep it as a null element, a row of nulls in a forEach: an
        # array with one fails the check; one of only nulls in the sample, any item
        inner = dtype.inner() if isinstance(dtype.inner, type) else dtype.inner
        if isinstance(inner, pl.Null):
            return Annotated[list[None], msgspec.Meta(max_length=0)]
        return list[_msgspec_type(inner, forbid=forbid)]  # type: ignore[misc]
    if isinstance(dtype, pl.String):
        return str
    if isinstance(dtype, pl.Boolean):
        return bool
    if isinstance(dtype, pl.Int64 | pl.Int32 | pl.UInt32 | pl.UInt64):
        return _INT64
    if isinstance(dtype, pl.Float64 | pl.Float32):
        return float
    return type(None)  # pl.Null: only nulls were seen


def _page_decoder(resource: pl.DataType) -> msgspec.json.Decoder[Any]:
    res = _msgspec_type(resource)
    entry: Any = msgspec.defstruct(f"E{next(_counter)}", [("resource", res | None, None)])
    page = msgspec.defstruct(f"P{next(_counter)}", [("entry", list[entry] | None, None)])
    return msgspec.json.Decoder(page)


_SAMPLE_PAGES = 12


def _sample(pages: list[bytes]) -> list[bytes]:
    if len(pages) <= _SAMPLE_PAGES:
        return pages
    step = len(pages) / _SAMPLE_PAGES
    return [pages[int(i * step)] for i in range(_SAMPLE_PAGES)] + [pages[-1]]


def _wanted(name: str, roots: set[str]) -> bool:
    """A top-level field the view reads: named, or a choice ``value[x]`` of a named one."""
    return any(
        name == r or (name.startswith(r) and name[len(r) : len(r) + 1].isupper()) for r in roots
    )


def kept_fields(resources: list[dict[str, Any]], roots: set[str]) -> list[dict[str, Any]]:
    """Each resource with only ``resourceType`` and the fields a view reads (:func:`_wanted`)."""
    keep: dict[str, bool] = {}
    out = []
    for res in resources:
        kept = {}
        for key, value in res.items():
            wanted = keep.get(key)
            if wanted is None:
                wanted = keep[key] = key == "resourceType" or _wanted(key, roots)
            if wanted:
                kept[key] = value
        out.append(kept)
    return out


#: The names FHIR gives the types of a choice element ``value[x]`` (``valueCoding``, ...).
_CHOICE_TYPES = (
    "Base64Binary",
    "Boolean",
    "Canonical",
    "Code",
    "Date",
    "DateTime",
    "Decimal",
    "Id",
    "Instant",
    "Integer",
    "Integer64",
    "Markdown",
    "Oid",
    "PositiveInt",
    "String",
    "Time",
    "UnsignedInt",
    "Uri",
    "Url",
    "Uuid",
    "Address",
    "Age",
    "Annotation",
    "Attachment",
    "CodeableConcept",
    "CodeableReference",
    "Coding",
    "ContactDetail",
    "ContactPoint",
    "Contributor",
    "Count",
    "DataRequirement",
    "Distance",
    "Dosage",
    "Duration",
    "Expression",
    "ExtendedContactDetail",
    "HumanName",
    "Identifier",
    "Meta",
    "Money",
    "ParameterDefinition",
    "Period",
    "Quantity",
    "Range",
    "Ratio",
    "RatioRange",
    "Reference",
    "RelatedArtifact",
    "SampledData",
    "Signature",
    "Timing",
    "TriggerDefinition",
    "UsageContext",
    "Availability",
    "VirtualServiceDetail",
    "MonetaryComponent",
)

_CHUNK = 2048
"""Resources encoded and read by Polars together (some 0.5 MB for a view of a few
fields: larger documents read slower, their working set outgrows the CPU cache)."""


def _read_key(name: str, tree: Tree) -> tuple[bool, Tree | None]:
    """Whether the JSON field ``name`` is read under ``tree`` (named, or a choice
    ``value[x]`` of a named one), and the children read of it (None: all of them)."""
    found = False
    merged: Tree | None = {}
    for key, sub in tree.items():
        if _wanted(name, {key}):
            found = True
            merged = None if sub is None or merged is None else _merge(merged, sub)
    return found, merged


def _merge(a: Tree, b: Tree) -> Tree:
    out = dict(a)
    for key, sub in b.items():
        if key not in out:
            out[key] = sub
        else:
            old = out[key]
            out[key] = None if old is None or sub is None else _merge(old, sub)
    return out


def _pruned(dtype: Any, tree: Tree | None) -> tuple[Any, Any]:
    """The Polars type of what a view reads of a value of ``dtype``, and the msgspec type
    that checks it exactly (without ``| None``); ``tree`` None keeps the value whole."""
    if tree is not None and isinstance(dtype, pl.Struct):
        return _pruned_struct(dtype, tree)
    if tree is not None and isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct):
        inner, checked = _pruned_struct(dtype.inner, tree)
        return pl.List(inner), list[checked]  # type: ignore[valid-type]
    return dtype, _msgspec_type(dtype, forbid=True)


def _pruned_struct(dtype: pl.Struct, tree: Tree) -> tuple[Any, Any]:
    """The fields of ``dtype`` that ``tree`` reads, each exact below (see :func:`_pruned`).

    Keys ``tree`` does not read are skipped; a field it reads that the sample never
    showed (or another type of a choice element) must be absent or null: a value
    fails the check instead of being skipped. A struct of which nothing read was in
    the sample is kept whole (Polars has no struct of no fields).
    """
    kept: dict[str, Any] = {}
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    for f in dtype.fields:
        read, sub = _read_key(f.name, tree)
        if read:
            kept[f.name], checked = _pruned(f.dtype, sub)
            rename[f"f{len(fields)}"] = f.name
            fields.append((f"f{len(fields)}", checked | None, None))
    if not kept:
        return dtype, _msgspec_type(dtype, forbid=True)
    seen = {f.name for f in dtype.fields}
    missing = {r for r in tree if r not in seen}
    unseen = sorted(missing | {r + t for r in missing for t in _CHOICE_TYPES} - seen)
    for j, name in enumerate(unseen):
        fields.append((f"u{j}", type(None), None))
        rename[f"u{j}"] = name
    struct = msgspec.defstruct(
        f"R{next(_counter)}", fields, rename=rename, omit_defaults=True, gc=False
    )
    return pl.Struct(kept), struct


def _projected_decoder(
    resource: pl.Struct, roots: set[str], tree: Tree | None = None
) -> tuple[pl.Struct, msgspec.json.Decoder[Any]]:
    """What the projected read keeps of ``resource`` (the sample's type), and the page
    decoder that checks it: the top-level fields the view reads (``roots``), each
    whole, or with ``tree`` (:func:`toolkit.viewdefs.reads.read_tree`) only the
    children it reads, at any depth (see :func:`_pruned_struct`).
    """
    wanted: Tree = tree if tree is not None else dict.fromkeys(roots)
    wanted = {"resourceType": None, **wanted}
    kept, res = _pruned_struct(resource, wanted)
    entry: Any = msgspec.defstruct(f"E{next(_counter)}", [("resource", res | None, None)], gc=False)
    page: Any = msgspec.defstruct(
        f"P{next(_counter)}",
        [("resourceType", str), ("entry", list[entry | None] | None, None)],
        gc=False,
    )
    return kept, msgspec.json.Decoder(page)


def _check_page(
    raw: bytes, resource_type: str, decoder: msgspec.json.Decoder[Any]
) -> list[Any] | None:
    """The resources of ``resource_type`` in one page, checked exact; None when it fails."""
    # msgspec checks only the strings it decodes; Polars refuses a page that is not
    # UTF-8 throughout, which the general path then reports
    if not raw.isascii():
        try:
            raw.decode()
        except UnicodeDecodeError:
            return None
    try:
        page = decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    if page.resourceType != "Bundle":
        return None
    return [
        res
        for entry in page.entry or ()
        if entry is not None and (res := entry.resource) is not None and res.f0 == resource_type
    ]


class _SampleEntry(msgspec.Struct, gc=False):
    resource: dict[str, msgspec.Raw] | None = None


class _SamplePage(msgspec.Struct, gc=False):
    entry: list[_SampleEntry] | None = None


_SAMPLE_DECODER = msgspec.json.Decoder(_SamplePage)


def _sample_schema(pages: list[bytes], roots: set[str]) -> pl.Struct | None:
    """The Polars type of the fields the view reads, inferred from a sample of the pages.

    msgspec reads the sample's resources as raw JSON values (unparsed), those
    fields are kept, and Polars infers their types from them. ``resourceType``
    comes first (the decoder reads the kind as its first field); None when the
    sample is not a set of Bundles of resources.
    """
    try:
        # a dict of raw values, filtered here: a struct of the hundreds of names
        # (every choice type of every root) decoded several times slower
        found = [
            res
            for raw in _sample(pages)
            for e in _SAMPLE_DECODER.decode(raw).entry or ()
            if (res := e.resource)
        ]
        resources = kept_fields(found, roots)
        if not resources:
            return None
        encoded = _ENCODER.encode(resources)
        # Polars infers a deeply nested schema very slowly (seconds for one resource
        # 600 levels deep): a sample that deep sends the pages to the general read
        if too_deep(orjson.loads(encoded), MAX_RECORD_DEPTH + 1):
            return None
        sample = pl.read_json(encoded, infer_schema_length=None)
    except (
        msgspec.ValidationError,
        msgspec.DecodeError,
        pl.exceptions.PolarsError,
        ValueError,
        RecursionError,
    ):
        return None
    fields = dict(sample.schema.items())
    kind = fields.pop("resourceType", None)
    if not isinstance(kind, pl.String):
        return None
    return pl.Struct({"resourceType": kind, **fields})


def read_pages_projected(
    pages: list[bytes], resource_type: str, roots: set[str]
) -> pl.DataFrame | None:
    """The fast path of the fast path: only the top-level fields the view reads.

    The schema of those fields is inferred by Polars from a sample of the pages.
    Every page is then decoded by msgspec into ``Struct`` types of just those
    fields, exact below the top level (a value of another JSON type, or a key the
    sample did not show, fails) and with the fields the view reads but the sample
    never showed required to be absent. A page that fails sends the whole read to
    :func:`read_pages` (None). What the pages decoded to is written back as JSON
    arrays of resources, a fraction of the bytes, which Polars reads with the
    known schema: the values are exactly those of the pages, since each was
    decoded with the type Polars reads it as. This thread decodes the pages in
    order; each chunk it writes back is read by Polars on a reader thread of
    :mod:`toolkit.views` (Polars' read releases the GIL while the next chunk is
    decoded).
    """
    parts = read_parts_projected(pages, resource_type, roots, None)
    if parts is None:
        return None
    return pl.concat([part.frame for part in parts])


@dataclass
class Part:
    """Consecutive resources of a projected read, and what was made of them."""

    frame: pl.DataFrame
    """The resources, one row each in a ``Struct`` column ``__c``."""
    result: Any
    """``then(frame)``, or the exception it raised (None without ``then``)."""


_PART = 40_000
"""Resources per part of :func:`read_parts_projected`: a part is worked on (a view
evaluated) while the next is decoded; each costs a fixed ~20 ms of Polars planning."""


class _PartQueue:
    """Decoded resources batched into chunks read on the pool, and the chunks into parts.

    Every :data:`_CHUNK` resources are re-encoded and read by Polars on a reader
    thread; every :data:`_PART` resources read make a part, whose work (``then``)
    is queued after its chunks' reads, so the reader thread that takes it never
    waits for a read no thread has taken.
    """

    def __init__(
        self, pool: Executor, schema: pl.Schema, then: Callable[[pl.DataFrame], Any] | None
    ) -> None:
        self.pool, self.schema, self.then = pool, schema, then
        self.parts: list[Future[Part]] = []
        self.chunks: list[Future[pl.DataFrame]] = []
        self.kept: list[bytes] = []
        self.count = 0
        self.size = 0

    def add(self, resources: list[Any]) -> None:
        """One page's resources; a chunk (and a part) submitted once there are enough.

        The page's resources are encoded at once, while their values are still in
        the CPU's cache, and dropped: encoding and freeing each chunk of 2,048
        decoded resources at the end took half again as long (the values had left
        the cache by then).
        """
        if not resources:
            return
        self.kept.append(_ENCODER.encode(resources)[1:-1])
        self.count += len(resources)
        if self.count >= _CHUNK:
            self.flush()
            if self.size >= _PART:
                self.close()

    def flush(self) -> None:
        """The resources kept so far submitted as one chunk's read (one JSON array)."""
        if self.kept:
            encoded = b"[" + b",".join(self.kept) + b"]"
            self.chunks.append(self.pool.submit(pl.read_json, encoded, schema=self.schema))
            self.size += self.count
            self.kept, self.count = [], 0

    def close(self) -> None:
        """The chunks submitted so far made one part."""
        if self.chunks:
            self.parts.append(self.pool.submit(_finish_part, list(self.chunks), self.then))
            self.chunks, self.size = [], 0

    def cancel(self) -> None:
        """Every chunk and part not yet started, cancelled."""
        for chunk in self.chunks:
            chunk.cancel()
        for part in self.parts:
            part.cancel()


def read_parts_projected(
    pages: list[bytes],
    resource_type: str,
    roots: set[str],
    then: Callable[[pl.DataFrame], Any] | None,
    tree: Tree | None = None,
) -> list[Part] | None:
    """:func:`read_pages_projected` in parts of some :data:`_PART` resources, in order.

    ``then`` (a view's evaluation, say) runs on a reader thread on each part as
    soon as it is read, while this thread decodes the next part; an exception it
    raises is kept in :attr:`Part.result` for the caller to decide. With ``tree``
    (:func:`toolkit.viewdefs.reads.read_tree`), only the fields the view reads are
    kept, at every depth.
    """
    resource_dtype = _sample_schema(pages, roots)
    if resource_dtype is None or dtype_depth(resource_dtype) > MAX_RECORD_DEPTH:
        # a resource deeper than the sample's shape fails the exact decoding below
        return None
    kept, decoder = _projected_decoder(resource_dtype, roots, tree)
    schema = pl.Schema({f.name: f.dtype for f in kept.fields})

    # One thread (this one) decodes and re-encodes, which holds the interpreter lock;
    # Polars reads each chunk on a reader thread meanwhile (its read releases the
    # lock). Two threads decoding at once only took turns with the lock, and the
    # switching cost more CPU than the decoding itself (see _PartQueue).
    queue = _PartQueue(executor(), schema, then)
    with _collector_paused():
        for raw in pages:
            resources = _check_page(raw, resource_type, decoder)
            if resources is None:
                queue.cancel()
                return None
            queue.add(resources)
    queue.flush()
    queue.close()
    try:
        done = [part.result() for part in queue.parts]
    except (pl.exceptions.PolarsError, ValueError):  # pragma: no cover - re-encoded exactly
        return None
    return done or None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while the pages are decoded.

    The decoded values are a tree (no reference cycles: the collector would free
    nothing), but each list of them counts towards the next collection, and the
    collections that follow walk every value decoded so far: a third of the
    decoding time for 100,000 resources. The collector is left as it was found
    (still off if the caller had turned it off).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _finish_part(
    chunks: list[Future[pl.DataFrame]], then: Callable[[pl.DataFrame], Any] | None
) -> Part:
    frame = pl.concat([chunk.result() for chunk in chunks])
    frame = frame.select(pl.struct(pl.all()).alias("__c"))
    if then is None:
        return Part(frame, None)
    try:
        return Part(frame, then(frame))
    except Exception as exc:  # handed to the caller, who decides what it means
        return Part(frame, exc)


def sample_too_deep(pages: list[bytes]) -> bool:
    """Whether a resource of the sampled pages nests deeper than :data:`MAX_RECORD_DEPTH`.

    The general read then takes the pages at once: Polars' whole read would spend
    seconds inferring such a schema only to be refused.
    """
    try:
        found = [
            res
            for raw in _sample(pages)
            for e in _SAMPLE_DECODER.decode(raw).entry or ()
            if (res := e.resource)
        ]
        return too_deep(orjson.loads(_ENCODER.encode(found)), MAX_RECORD_DEPTH + 1)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, RecursionError):
        return True


def read_pages(pages: list[bytes], resource_type: str) -> pl.DataFrame | None:
    """Bundle pages read by Polars and checked exact; None when the slow path must read them."""
    try:
        # one JSON array of the pages: Polars' array reader is several times faster than
        # its NDJSON reader on lines this long (a page of 100 resources is one line)
        frame = pl.read_json(b"[" + b",".join(pages) + b"]", infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError, RecursionError):
        return None
    if "resourceType" not in frame.columns:
        return None
    kinds = frame.get_column("resourceType")
    if kinds.null_count() or (kinds != "Bundle").any():
        return None
    if "entry" not in frame.columns:
        return empty_frame()
    entry_type = frame.schema["entry"]
    if isinstance(entry_type, pl.Null):
        return empty_frame()
    if not isinstance(entry_type, pl.List) or not isinstance(entry_type.inner, pl.Struct):
        return None
    fields = {f.name: f.dtype for f in entry_type.inner.fields}
    if "resource" not in fields:
        return empty_frame()
    resource_dtype = fields["resource"]
    if dtype_depth(resource_dtype) > MAX_RECORD_DEPTH:
        return None  # the general read leaves the too-deep resources out, with a warning
    if not isinstance(resource_dtype, pl.Struct) or "resourceType" not in {
        f.name for f in resource_dtype.fields
    }:
        return None
    decoder = _page_decoder(resource_dtype)
    try:
        for page in pages:
            decoder.decode(page)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    resources = frame.select(
        pl.col("entry").explode().struct.field("resource").alias("__c")
    ).drop_nulls()
    return resources.filter(pl.col("__c").struct.field("resourceType") == resource_type)
