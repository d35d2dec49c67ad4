"""The catalogue's vocabulary: fields, references, extensions, resources, endpoints.

Plain frozen dataclasses, so that every consumer can read the catalogue as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from toolkit.catalogue.constants import API_PREFIX

FieldType = Literal[
    "string",
    "boolean",
    "integer",
    "number",
    "date",
    "date-time",
    "object",
    "reference",
    "code",
    "canonical",
    "base64",
]
Format = Literal["phone", "country", "currency", "date", "date-time", "base64", "canonical"]
Source = Literal["spec", "facts", "pmtk"]
Aspect = Literal["type", "required", "enum", "reference", "format", "encoding"]
"""One kind of rule a field carries; each may come from a different source.

``type`` the JSON type (and array-ness), ``required`` presence, ``enum`` the listed
values, ``reference`` the allowed targets and their id prefixes, ``format`` a format
rule, ``encoding`` where an extension-encoded field lives (container and value key).
"""
SOURCE_RANK: dict[str, int] = {"spec": 0, "facts": 1, "pmtk": 2}


def weakest(*sources: Source) -> Source:
    """The least authoritative of ``sources`` (``spec`` < ``facts`` < ``pmtk``).

    A rule is only as strong as every link of the chain that states it: a spec-typed
    sub-field of a facts-only resource is a facts rule.
    """
    return max(sources, key=SOURCE_RANK.__getitem__, default="spec")


@dataclass(frozen=True, slots=True)
class Target:
    """One allowed target of a reference: the resource type and its id prefixes.

    An empty ``prefixes`` means the target's ids carry no prefix.
    """

    type: str
    prefixes: tuple[str, ...] = ()

    @property
    def id_pattern(self) -> str:
        """Regex (unanchored) for an id of this target."""
        if self.prefixes:
            alts = "|".join(self.prefixes)  # letters and "-": no escaping needed
            return f"(?:{alts})[A-Za-z0-9.\\-]+"
        return "[A-Za-z0-9.\\-]+"


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference shape: ``{"reference": "/main/<Type>/<prefix><id>", "type": "<Type>"}``."""

    targets: tuple[Target, ...]

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t.type for t in self.targets)

    @property
    def pattern(self) -> str:
        """Anchored regex for the ``reference`` string of any allowed target."""
        alts = "|".join(f"{API_PREFIX}/{t.type}/{t.id_pattern}" for t in self.targets)
        return f"^(?:{alts})$"

    def target_for(self, type_name: str) -> Target | None:
        for t in self.targets:
            if t.type == type_name:
                return t
        return None


@dataclass(frozen=True, slots=True)
class Extension:
    """Where an extension-encoded field lives: ``<container>[url == url].<value_key>``."""

    url: str
    value_key: str  # valueCode, valueCoding, valueReference, valueBoolean...
    container: Literal["extension", "modifierExtension"] = "extension"


@dataclass(frozen=True, slots=True)
class Alternative:
    """Another form a field's value may arrive in: one of :data:`toolkit.catalogue.forms.FORMS`.

    ``form`` names the form (``one-or-many``, ``quantity``, ``reference``,
    ``codeable-concept``); ``source`` says where it is known from (``facts``: seen on the
    live service). The tolerant reader reads every declared form; the checker (the rules'
    live forms, the contract walk, the OpenAPI document, the mock's writes) accepts it
    too unless ``reader_only`` (a form FHIR R4 allows that the live service is not known
    to send: the checker keeps the catalogue's form).
    """

    form: str
    source: Source = "facts"
    reader_only: bool = False
    target: str | None = None
    """For a ``reference`` form: the resource type the Reference points at, whose record
    of the same ``name`` it names (the mock serves and reads the Reference by it)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a resource or of a nested object.

    ``name`` is the JSON key (for an extension, the extension url). ``many``
    marks a JSON array of ``type``. ``fields`` describes the items of an
    object (or of an array of objects). ``enum`` values may include ``None``
    where JSON null is an allowed value. ``open_enum`` marks a list the sources
    give only "for example": a value outside it is an observation, not a fault.
    """

    name: str
    type: FieldType
    required: bool = False
    many: bool = False
    enum: tuple[str | None, ...] = ()
    open_enum: bool = False
    ref: Ref | None = None
    format: Format | None = None
    fields: tuple[Field, ...] = ()
    extension: Extension | None = None
    spec_name: str | None = None
    write_only: bool = False
    source: Source = "spec"
    doc: str = ""
    format_when: tuple[str, tuple[str, ...]] | None = None
    """``(sibling, values)``: ``format`` applies only when the sibling field holds one of
    ``values`` (a telecom ``value`` is a phone number only for ``system`` phone, sms, fax)."""
    aspects: tuple[tuple[Aspect, Source], ...] = ()
    """Per-aspect sources where they differ from ``source``: the spec names Coverage
    ``status`` but its values come from the facts, so ``(("enum", "facts"),)``."""
    forms: tuple[Alternative, ...] = ()
    """The other forms its value may arrive in (:mod:`toolkit.catalogue.forms`): the
    reader, the rules, the OpenAPI document, the contract walk and the mock follow them."""
    prefer: tuple[str, str] | None = None
    """``(sub-field, value)`` of a repeating object's preferred entry, whose members also
    give the main table's columns (``("use", "official")``: the official name, else the
    first)."""

    def source_of(self, aspect: Aspect) -> Source:
        """Where this field's ``aspect`` rule comes from (never stronger than ``source``)."""
        for name, src in self.aspects:
            if name == aspect:
                return weakest(self.source, src)
        return self.source

    def child(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        msg = f"field {self.name!r} has no sub-field {name!r}"
        raise KeyError(msg)


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource type: its id prefixes, fields and create requirements."""

    name: str
    fields: tuple[Field, ...]
    id_prefixes: tuple[str, ...] = ()
    create_prefixes: tuple[str, ...] = ()
    create_required: tuple[str, ...] = ()
    source: Source = "spec"
    doc: str = ""
    create_source: Source = "facts"
    """Where ``create_required`` comes from (the facts list Coverage and Referral needs)."""
    endpoints: tuple[Endpoint, ...] = ()
    """Its operations of spec section 4, in spec order; none: only referenced by others."""
    search: tuple[str, ...] = ()
    """Its own search parameters (facts); every list also takes the common ones."""
    fhir_search: tuple[str, ...] = ()
    """FHIR R4's standard search parameters that generic FHIR clients use most, on fields
    its records carry, that no source says the vendor serves (pmtk): the mock serves them
    and its CapabilityStatement declares them, and a deployment without them is an
    observation of ``pmtk check``, never a failure."""
    owner_search: tuple[str, str] | None = None
    """(search parameter, field path) naming the patient a record belongs to (facts)."""
    date_search: tuple[tuple[str, ...], str] | None = None
    """(the names a date search or ``_sort`` accepts, the field they select on); pmtk's
    reading of the facts' ``date`` parameter and ``_sort``."""

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name or f.spec_name == name:
                return f
        msg = f"{self.name} has no field {name!r}"
        raise KeyError(msg)

    @property
    def listed(self) -> bool:
        """Whether it has a list endpoint."""
        return any(e.kind == "list" for e in self.endpoints)

    @property
    def id_pattern(self) -> str:
        return f"^{Target(self.name, self.id_prefixes).id_pattern}$"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One operation of spec section 4 (plus the token endpoint of section 5).

    ``source`` says where it is known from: an endpoint the spec does not list
    (``facts``: one the live service serves; ``pmtk``) is served by the mock and
    read by the client, but a deployment without it is never failed for that.
    """

    method: Literal["GET", "POST", "PATCH"]
    path: str
    operation: str
    resource: str
    kind: Literal["list", "read", "create", "update", "book", "find", "token"]
    success: int = 200
    source: Source = "spec"


@dataclass(frozen=True, slots=True)
class Include:
    """One ``_include`` a list of ``source`` takes: ``Source:param[:Target]`` (FHIR syntax).

    ``path`` is the reference field it follows (``("participant", "actor")``),
    ``targets`` the types it brings in (narrowed by ``:Target``, or by the patient
    search of :attr:`Resource.owner_search`). Derived from the catalogue's reference
    fields by :func:`toolkit.catalogue.endpoints.includes_of`.
    """

    source: str
    param: str
    path: tuple[str, ...]
    targets: tuple[str, ...]
    narrowed: bool = False
    """``True`` for the ``Source:param:Target`` form (``targets`` is that one type)."""

    @property
    def name(self) -> str:
        """``Appointment:actor``, ``Appointment:actor:PractitionerRole``."""
        base = f"{self.source}:{self.param}"
        return f"{base}:{self.targets[0]}" if self.narrowed else base

    def references(self, record: Any) -> list[tuple[str, str]]:
        """The ``(type, id)`` pairs ``record`` refers to along :attr:`path`, of the targets.

        A reference is read by the last two path segments of its ``reference``
        (absolute ``https://host/main/Patient/1``, ``/main/Patient/1`` and
        ``Patient/1`` alike; facts, "Shapes seen on the live service"); a bare id
        takes its type from the reference's ``type``. In record order, repeats kept.

        >>> inc = Include("Appointment", "patient", ("participant", "actor"), ("Patient",))
        >>> inc.references({"participant": [
        ...     {"actor": {"reference": "https://h/main/PractitionerRole/PR-1"}},
        ...     {"actor": {"reference": "/main/Patient/7"}}]})
        [('Patient', '7')]
        """
        level: list[Any] = [record]
        for key in self.path:
            nxt: list[Any] = []
            for item in level:
                value = item.get(key) if isinstance(item, dict) else None
                nxt.extend(value if isinstance(value, list) else [value])
            level = nxt
        out: list[tuple[str, str]] = []
        for ref in level:
            pair = reference_pair(ref)
            if pair is not None and pair[0] in self.targets:
                out.append(pair)
        return out


def reference_pair(ref: Any) -> tuple[str, str] | None:
    """``(type, id)`` of a Reference object by the last two segments of its ``reference``.

    >>> reference_pair({"reference": "http://127.0.0.1:8000/main/Patient/12?x=1"})
    ('Patient', '12')
    >>> reference_pair({"reference": "12", "type": "Patient"})
    ('Patient', '12')
    >>> reference_pair({"display": "no reference"}) is None
    True
    """
    text = ref.get("reference") if isinstance(ref, dict) else None
    if not isinstance(text, str):
        return None
    parts = [p for p in text.split("?", 1)[0].split("#", 1)[0].split("/") if p]
    if len(parts) >= 2:
        return parts[-2], parts[-1]
    kind = ref.get("type")
    if len(parts) == 1 and isinstance(kind, str) and kind:
        return kind, parts[0]
    return None
