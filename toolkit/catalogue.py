"""The one declarative description of the practice-management API.

Every rule pmtk applies is written here once, as plain typed data, and derived
everywhere else: the flat views and pandera schemas of the fetch layer, the
OpenAPI document and conformance checks of the contract suite, and the write
validation and synthetic data of the mock deployment.

Sources, in order of authority:

* ``spec``  -- ``practice-management-api.md`` (the user's document; it wins).
* ``facts`` -- ``public-docs-facts.md`` (vendor docs and existing clients), used
  only where the spec says "not shown".
* ``pmtk``  -- a decision of ours where both are silent, documented in the README.

This module imports nothing heavier than the standard library and pycountry, so
that the mock, the client and the contract suite can all share it.

JSON shapes chosen where the spec names a field but not its encoding:

* Spec fields that are FHIR *extensions* (``location-type``,
  ``appointment-participant-status``, ``appointment-participant-invoice``,
  ``coverage patient anonymous``, ``coverage payer``, ``coverage organisation``,
  ``invoice-line-funder``) live in ``extension`` (or ``modifierExtension``) as
  ``{"url": <name>, <valueX>: ...}``; :class:`Extension` records which.
* Reference fields are ``{"reference": "/main/<Type>/<id>", "type": "<Type>"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import pycountry

__all__ = [
    "API_PREFIX",
    "DEFAULT_PAGE_SIZE",
    "ENDPOINTS",
    "EU_UK_COUNTRIES",
    "EXPIRES_IN_STATED",
    "MAX_ATTACHMENT_BYTES",
    "MAX_PAGE_SIZE",
    "RATE_LIMIT_PER_MINUTE",
    "REGIONS",
    "RESOURCES",
    "TOKEN_LIFETIME_STATED",
    "Endpoint",
    "Extension",
    "Field",
    "Ref",
    "Resource",
    "Target",
    "country_codes",
    "currency_codes",
    "field_at",
    "format_pattern",
    "resource",
    "weakest",
]

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


API_PREFIX = "/main"
"""Every resource path begins with this (spec section 9)."""

REGIONS: dict[str, str] = {
    "au": "https://au-api.halaxy.com/main",
    "eu": "https://eu-api.halaxy.com/main",
}
"""Regional base URLs (facts, Addresses). EU countries and the UK use ``eu``."""

EU_UK_COUNTRIES: frozenset[str] = frozenset(
    {
        "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE",
        "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE", "GB",
    }
)  # fmt: skip
"""ISO 3166 alpha-2 codes of the 27 EU member states plus the UK (spec section 1)."""

RATE_LIMIT_PER_MINUTE = 500
RATE_LIMIT_WINDOW_SECONDS = 60
RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining")
RETRY_AFTER_HEADER = "retry-after"
"""Sliding-window request limit per OAuth client (spec section 8)."""
TOKEN_LIFETIME_STATED = 900
"""The documented access-token lifetime: 15 minutes (spec sections 5 and 8)."""
EXPIRES_IN_STATED = 3600
"""The ``expires_in`` the token endpoint reports (spec section 5)."""
DEFAULT_PAGE_SIZE = 30
"""``_count`` when absent (facts, client-observed)."""
MAX_PAGE_SIZE = 100
"""Largest accepted ``_count`` (facts, client-observed)."""
MAX_ATTACHMENT_BYTES = 200 * 1024 * 1024
"""Attachment size limit, "200MB" (spec section 8), read as 200 MiB of decoded content."""

ATTACHMENT_CONTENT_TYPES: tuple[str, ...] = (
    "application/msword",
    "application/vnd.ms-excel",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/pdf",
    "image/jpeg",
    "image/png",
)

ORGANIZATION_TYPE_SYSTEM = "http://terminology.hl7.org/CodeSystem/organization-type"
PROFESSION_SYSTEM = "https://terminology.halaxy.com/CodeSystem/profession"


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
    listed: bool = True
    source: Source = "spec"
    doc: str = ""
    create_source: Source = "facts"
    """Where ``create_required`` comes from (the facts list Coverage and Referral needs)."""

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name or f.spec_name == name:
                return f
        msg = f"{self.name} has no field {name!r}"
        raise KeyError(msg)

    @property
    def id_pattern(self) -> str:
        return f"^{Target(self.name, self.id_prefixes).id_pattern}$"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One operation of spec section 4 (plus the token endpoint of section 5)."""

    method: Literal["GET", "POST", "PATCH"]
    path: str
    operation: str
    resource: str
    kind: Literal["list", "read", "create", "update", "book", "find", "token"]
    success: int = 200


# --------------------------------------------------------------------------- helpers


def _ref(*targets: tuple[str, tuple[str, ...]] | str) -> Ref:
    out = []
    for t in targets:
        out.append(Target(t) if isinstance(t, str) else Target(t[0], t[1]))
    return Ref(tuple(out))


def _reference_field(name: str, ref: Ref, **kw: object) -> Field:
    return Field(name, "reference", ref=ref, **kw)  # type: ignore[arg-type]


PR = ("Practitioner", ("PR-",))
PRACTITIONER_ANY = ("Practitioner", ("PR-", "EP-"))
ROLE_ANY = ("PractitionerRole", ("PR-", "EP-"))
ORG_ANY = ("Organization", ("PG-", "CL-", "OG-", "FD-", "SP-"))


def _telecom(enum_source: Source = "spec") -> Field:
    """Telecom items; the spec lists system and use values only for Organization."""
    return Field(
        "telecom",
        "object",
        many=True,
        fields=(
            Field(
                "system",
                "code",
                enum=("sms", "phone", "fax", "email"),
                aspects=(("enum", enum_source),),
            ),
            Field(
                "value",
                "string",
                format="phone",
                format_when=("system", ("phone", "sms", "fax")),
                doc="Phone values follow +{country code}{digits}.",
            ),
            Field("use", "code", enum=("home", "work", "mobile"), aspects=(("enum", enum_source),)),
        ),
        doc="Contact details.",
    )


TELECOM = _telecom()

ADDRESS = Field(
    "address",
    "object",
    many=True,
    fields=(
        Field("use", "code", enum=("home", "work", "billing", "mailing")),
        Field("type", "code", enum=("postal", "physical", "both")),
        Field("text", "string"),
        Field("line", "string", many=True),
        Field("city", "string"),
        Field("state", "string"),
        Field("postalCode", "string"),
        Field("country", "string", format="country"),
    ),
)

ATTACHMENTS = Field(
    "attachments",
    "object",
    many=True,
    write_only=True,
    fields=(
        Field("contentType", "code", required=True, enum=ATTACHMENT_CONTENT_TYPES),
        Field("data", "base64", required=True, format="base64"),
        Field("title", "string", required=True),
    ),
    doc="Accepted on create (and appended by PATCH); each at most 200 MB decoded.",
)

MONEY = (
    Field("value", "number"),
    Field("currency", "string", format="currency"),
)

CODING = (
    Field("system", "string"),
    Field("code", "string"),
    Field("display", "string"),
)

META = Field(
    "meta",
    "object",
    fields=(Field("lastUpdated", "date-time", format="date-time"),),
    source="facts",
    doc="Server-maintained; used by _lastUpdated searches and incremental sync.",
)

PARTICIPANT_STATUSES = ("booked", "confirmed", "arrived", "attended", "cancelled", "noshow")
LOCATION_TYPES = ("clinic", "telehealth", "phone", "online")


def _common(*fields: Field) -> tuple[Field, ...]:
    return (Field("id", "string", doc="Resource identifier."), META, *fields)


# --------------------------------------------------------------------------- resources

REFERRAL = Resource(
    "Referral",
    _common(
        _reference_field("coverage", _ref("Coverage")),
        Field(
            "period",
            "object",
            fields=(
                Field("start", "date", format="date"),
                Field("end", "date", format="date"),
            ),
        ),
        _reference_field("performer", _ref(PR)),
        _reference_field("requester", _ref(("PractitionerRole", ("EP-",)))),
        Field("referralDefinition", "string"),
        Field("created", "date-time", format="date-time"),
        Field("active", "boolean"),
        Field(
            "limitQuantity",
            "object",
            fields=(
                Field(
                    "quantity",
                    "integer",
                    aspects=(("type", "pmtk"),),
                    doc="Untyped in the spec; the facts show a Quantity {value}.",
                ),
                Field("quantityOffset", "integer"),
                Field("quantityUsed", "integer"),
            ),
        ),
        Field(
            "limitMoney",
            "object",
            fields=(
                Field("amount", "object", fields=MONEY),
                Field("amountUsed", "number"),
            ),
        ),
        Field("allocationType", "code", enum=("Appointments only", "All fee types")),
        _reference_field("subject", _ref("Patient")),
        Field("includeCancelledAppointment", "boolean"),
        Field("comment", "string"),
        Field("expiryType", "code", enum=("standard", "non-standard", "indefinite")),
        ATTACHMENTS,
        Field("priority", "boolean", source="facts", doc="The patient's preferred referral."),
    ),
    create_required=("coverage", "subject", "requester", "created"),
)

APPOINTMENT = Resource(
    "Appointment",
    _common(
        Field("description", "string"),
        Field("start", "date-time", required=True, format="date-time"),
        Field("end", "date-time", required=True, format="date-time"),
        Field("minutesDuration", "integer"),
        Field("created", "date-time", format="date-time"),
        _reference_field(
            "supportingInformation",
            _ref("HealthcareService"),
            many=True,
            aspects=(("type", "facts"),),
            doc="One Reference in the spec; an array of them in the facts.",
        ),
        Field(
            "location-type",
            "code",
            enum=LOCATION_TYPES,
            open_enum=True,
            extension=Extension("location-type", "valueCode"),
            aspects=(("enum", "facts"), ("encoding", "pmtk")),
        ),
        Field(
            "participant",
            "object",
            many=True,
            fields=(
                Field(
                    "type",
                    "object",
                    many=True,
                    source="facts",
                    fields=(Field("coding", "object", many=True, fields=CODING),),
                    doc="ATND (attender) for the practitioner participant.",
                ),
                _reference_field(
                    "actor",
                    _ref(ROLE_ANY, "Patient"),
                    source="facts",
                    aspects=(("reference", "pmtk"),),
                ),
                Field(
                    "appointment-participant-status",
                    "code",
                    enum=PARTICIPANT_STATUSES,
                    open_enum=True,
                    extension=Extension(
                        "appointment-participant-status", "valueCoding", "modifierExtension"
                    ),
                    aspects=(("enum", "facts"), ("encoding", "facts")),
                ),
                _reference_field(
                    "appointment-participant-invoice",
                    _ref("Invoice"),
                    extension=Extension("appointment-participant-invoice", "valueReference"),
                    aspects=(("encoding", "facts"),),
                ),
            ),
        ),
    ),
    doc="Booked through $book; the practitioner participant is a PractitionerRole (ATND).",
)

COVERAGE = Resource(
    "Coverage",
    _common(
        _reference_field("beneficiary", _ref("Patient")),
        _reference_field("subscriber", _ref("Patient")),
        Field("subscriberID", "string"),
        Field("dependent", "string"),
        Field("period", "object", fields=(Field("start", "date", format="date"),)),
        Field(
            "status",
            "code",
            enum=("active", "cancelled"),
            aspects=(("enum", "facts"),),
            doc="Values from the facts.",
        ),
        _reference_field(
            "payor",
            _ref("Patient", ("Organization", ("FD-", "OG-"))),
            aspects=(("reference", "pmtk"),),
            doc="The spec allows any Organization; pmtk expects a funder or organization id.",
        ),
        Field(
            "coverage-patient-anonymous",
            "boolean",
            spec_name="coverage patient anonymous",
            extension=Extension("coverage-patient-anonymous", "valueBoolean"),
            aspects=(("type", "pmtk"), ("encoding", "pmtk")),
        ),
        Field(
            "coverage-payer",
            "object",
            spec_name="coverage payer",
            fields=(
                Field("code", "code", enum=("29", "30", "31", "32"), aspects=(("enum", "facts"),)),
                Field("display", "string"),
            ),
            extension=Extension("coverage-payer", "valueCoding"),
            aspects=(("encoding", "facts"),),
        ),
        _reference_field(
            "coverage-organisation",
            _ref(ORG_ANY),
            spec_name="coverage organisation",
            extension=Extension("coverage-organisation", "valueReference"),
            aspects=(("encoding", "facts"),),
        ),
        ATTACHMENTS,
        Field(
            "identifier",
            "object",
            spec_name="identifier (Medicare / DVA coverages)",
            fields=(
                Field("system", "string", source="pmtk"),
                Field("value", "string", source="pmtk"),
            ),
            doc="Medicare or DVA business identifier; structure not shown in the spec.",
        ),
    ),
    create_required=("beneficiary", "subscriber", "payor"),
)

ORGANIZATION = Resource(
    "Organization",
    _common(
        Field("active", "boolean"),
        Field("type", "object", many=True, fields=CODING),
        Field("name", "string"),
        TELECOM,
        ADDRESS,
        _reference_field("partOf", _ref(("Organization", ("PG-",)))),
    ),
    id_prefixes=("PG-", "CL-", "OG-", "FD-", "SP-"),
    create_prefixes=("SP-",),
    create_required=("name",),
    create_source="pmtk",
)

PRACTITIONER = Resource(
    "Practitioner",
    _common(
        Field(
            "identifier",
            "object",
            many=True,
            fields=(Field("value", "string", source="facts"),),
        ),
        Field(
            "name",
            "object",
            fields=(
                Field(
                    "use",
                    "code",
                    enum=("usual", "official", "temp", "nickname", "anonymous", "old", "maiden"),
                    aspects=(("enum", "pmtk"),),
                ),
                Field("given", "string", many=True),
                Field("family", "string"),
                Field("prefix", "string", many=True),
            ),
            doc="The spec says one object; the live service sends an array of HumanName "
            "(facts). The views read it as an array and accept both.",
        ),
        _telecom(enum_source="pmtk"),
        Field("active", "boolean"),
        Field(
            "qualification",
            "object",
            many=True,
            fields=(
                Field(
                    "code",
                    "object",
                    source="facts",
                    fields=(Field("coding", "object", many=True, fields=CODING),),
                ),
            ),
        ),
    ),
    id_prefixes=("PR-", "EP-"),
    create_prefixes=("EP-",),
    create_required=("name",),
    create_source="pmtk",
)

INVOICE_LINE = Resource(
    "InvoiceLine",
    _common(
        Field(
            "resource",
            "object",
            fields=(
                Field("type", "code", enum=("service", "product"), source="pmtk"),
                Field("display", "string", source="pmtk"),
            ),
        ),
        Field("description", "string"),
        Field("definition", "canonical", format="canonical"),
        Field("status", "code", enum=("voided", "unassigned", "write-off", "locked", None)),
        Field("code", "string"),
        _reference_field("subject", _ref("Patient")),
        _reference_field("context", _ref("Appointment")),
        Field("enteredDate", "date-time", format="date-time"),
        _reference_field("performer", _ref(PR)),
        _reference_field("invoice", _ref("Invoice")),
        Field("quantity", "number"),
        Field(
            "unitPriceComponent",
            "object",
            many=True,
            fields=(
                Field(
                    "type",
                    "code",
                    enum=("base", "surcharge", "deduction", "discount", "tax", "informational"),
                ),
                Field(
                    "amount",
                    "object",
                    fields=(
                        Field("value", "number"),
                        Field("currency", "string", format="currency", source="pmtk"),
                    ),
                ),
            ),
        ),
        _reference_field(
            "invoice-line-funder",
            _ref(("Organization", ("FD-",))),
            extension=Extension("invoice-line-funder", "valueReference"),
            aspects=(("encoding", "pmtk"),),
        ),
    ),
)

PATIENT = Resource(
    "Patient",
    _common(
        Field(
            "name",
            "object",
            many=True,
            fields=(
                Field("use", "code", enum=("usual", "official", "nickname")),
                Field("given", "string", many=True),
                Field("family", "string"),
            ),
        ),
        TELECOM,
        Field("gender", "code", enum=("male", "female", "other", "unknown")),
        Field("birthDate", "date", format="date"),
        ADDRESS,
        _reference_field("generalPractitioner", _ref(ROLE_ANY), many=True),
        Field(
            "patient-status",
            "code",
            enum=("current", "contact", "archived", "blocked", "deceased"),
            extension=Extension("patient-status", "valueCode"),
        ),
    ),
    source="facts",
)

INVOICE = Resource(
    "Invoice",
    _common(
        Field("status", "code", enum=("active", "issued", "write-off")),
        _reference_field("subject", _ref("Patient"), source="pmtk"),
        Field("date", "date-time", format="date-time", source="pmtk"),
        *(
            Field(name, "object", fields=MONEY)
            for name in ("totalNet", "totalGross", "totalBalance", "totalPaid")
        ),
    ),
    listed=False,
    source="facts",
)

HEALTHCARE_SERVICE = Resource(
    "HealthcareService",
    _common(
        Field("name", "string"),
        Field("active", "boolean"),
        _reference_field("providedBy", _ref(("Organization", ("CL-", "PG-")))),
    ),
    listed=False,
    source="pmtk",
)

PRACTITIONER_ROLE = Resource(
    "PractitionerRole",
    _common(
        Field("active", "boolean"),
        _reference_field("practitioner", _ref(PRACTITIONER_ANY)),
        _reference_field("organization", _ref(("Organization", ("CL-", "SP-", "PG-")))),
    ),
    id_prefixes=("PR-", "EP-"),
    listed=False,
    source="pmtk",
)

CHARGE_ITEM_DEFINITION = Resource(
    "ChargeItemDefinition",
    _common(
        Field("title", "string"),
        Field("code", "string"),
        Field("price", "object", fields=MONEY),
    ),
    listed=False,
    source="pmtk",
)

SLOT = Resource(
    "Slot",
    _common(
        Field("start", "date-time", required=True, format="date-time"),
        Field("end", "date-time", required=True, format="date-time"),
        Field("status", "code", enum=("free", "busy")),
        _reference_field("practitionerRole", _ref(ROLE_ANY)),
        _reference_field("healthcareService", _ref("HealthcareService")),
    ),
    listed=False,
    source="pmtk",
    doc="Internal to the mock; exposed only through $find's proposed Appointments.",
)

RESOURCES: dict[str, Resource] = {
    r.name: r
    for r in (
        REFERRAL,
        APPOINTMENT,
        COVERAGE,
        ORGANIZATION,
        PRACTITIONER,
        INVOICE_LINE,
        PATIENT,
        INVOICE,
        HEALTHCARE_SERVICE,
        PRACTITIONER_ROLE,
        CHARGE_ITEM_DEFINITION,
        SLOT,
    )
}

# --------------------------------------------------------------------------- endpoints

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("POST", "/main/oauth/token", "Get Token", "Token", "token"),
    Endpoint("GET", "/main/Referral", "List Referrals", "Referral", "list"),
    Endpoint("GET", "/main/Referral/{id}", "Get Referral", "Referral", "read"),
    Endpoint("POST", "/main/Referral", "Create Referral", "Referral", "create", 201),
    Endpoint("PATCH", "/main/Referral/{id}", "Update Referral", "Referral", "update"),
    Endpoint("GET", "/main/Appointment", "List Appointments", "Appointment", "list"),
    Endpoint("GET", "/main/Appointment/{id}", "Get Appointment", "Appointment", "read"),
    Endpoint("POST", "/main/Appointment/$book", "Book Appointment", "Appointment", "book", 201),
    Endpoint("PATCH", "/main/Appointment/{id}", "Update Appointment", "Appointment", "update"),
    Endpoint(
        "GET", "/main/Appointment/$find", "Find Available Appointments", "Appointment", "find"
    ),
    Endpoint("GET", "/main/Coverage", "List Coverage", "Coverage", "list"),
    Endpoint("GET", "/main/Coverage/{id}", "Get Coverage", "Coverage", "read"),
    Endpoint("POST", "/main/Coverage/", "Create Coverage", "Coverage", "create", 201),
    Endpoint("PATCH", "/main/Coverage/{id}", "Update Coverage", "Coverage", "update"),
    Endpoint("GET", "/main/Organization", "List Organizations", "Organization", "list"),
    Endpoint("GET", "/main/Organization/{id}", "Get Organization", "Organization", "read"),
    Endpoint(
        "POST",
        "/main/Organization",
        "Create Organization (professional contact practice)",
        "Organization",
        "create",
        201,
    ),
    Endpoint("GET", "/main/Practitioner", "List Practitioners", "Practitioner", "list"),
    Endpoint("GET", "/main/Practitioner/{id}", "Get Practitioner", "Practitioner", "read"),
    Endpoint(
        "POST",
        "/main/Practitioner",
        "Create Practitioner (professional contact)",
        "Practitioner",
        "create",
        201,
    ),
    Endpoint("GET", "/main/InvoiceLine", "List InvoiceLines", "InvoiceLine", "list"),
    Endpoint("GET", "/main/InvoiceLine/{id}", "Get InvoiceLine", "InvoiceLine", "read"),
    Endpoint("GET", "/main/Patient", "List patients", "Patient", "list"),
)

SEARCH_PARAMETERS: dict[str, tuple[str, ...]] = {
    "Appointment": ("date", "patient"),
    "Referral": ("subject",),
    "Coverage": ("beneficiary",),
    "InvoiceLine": ("subject",),
    "Patient": ("name", "family", "given"),
    "Organization": ("name",),
    "Practitioner": (),
}
"""Per-resource search parameters (facts); all lists also take the common ones."""

COMMON_SEARCH_PARAMETERS = ("_id", "_lastUpdated", "_sort", "_count", "page", "_total")

LISTED_RESOURCES: tuple[str, ...] = tuple(e.resource for e in ENDPOINTS if e.kind == "list")
"""Resources with a list endpoint, in spec order."""


# --------------------------------------------------------------------------- lookups


def resource(name: str) -> Resource:
    """The catalogue entry for ``name``; :class:`~toolkit.errors.UnknownName` otherwise."""
    try:
        return RESOURCES[name]
    except (KeyError, TypeError):
        from toolkit.errors import unknown_name

        raise unknown_name("resource type", name, RESOURCES) from None


def search_keywords(resource_type: str) -> dict[str, str]:
    """Python keyword -> API parameter, for every search a list of ``resource_type`` takes.

    The common parameters (``_id``, ``_lastUpdated``, ``_sort``, ``_count``, ``page``,
    ``_total``, ``_summary``, ``_include``) and the resource's own (facts), with the
    spellings :func:`toolkit.client.search_params` accepts.

    Examples
    --------
    >>> search_keywords("Appointment")["date"]
    'date'
    >>> search_keywords("Appointment")["last_updated"]
    '_lastUpdated'
    """
    resource(resource_type)
    out = {
        "id": "_id",
        "ids": "_id",
        "last_updated": "_lastUpdated",
        "lastUpdated": "_lastUpdated",
        "count": "_count",
        "sort": "_sort",
        "total": "_total",
        "summary": "_summary",
        "include": "_include",
        "page": "page",
    }
    for name in (*COMMON_SEARCH_PARAMETERS, "_summary", "_include"):
        out[name] = name
    for name in SEARCH_PARAMETERS.get(resource_type, ()):
        out[name.replace("-", "_")] = name
    return out


def field_at(resource_name: str, path: str) -> Field:
    """The field at a dotted path, for example ``field_at("Referral", "limitMoney.amount")``."""
    parts = path.split(".")
    f = resource(resource_name).field(parts[0])
    for part in parts[1:]:
        f = f.child(part)
    return f


def walk_fields(
    fields: tuple[Field, ...], prefix: str = ""
) -> list[tuple[str, Field]]:  # pragma: no cover - trivial
    """Every (dotted path, field) pair below ``fields``, depth first."""
    out: list[tuple[str, Field]] = []
    for f in fields:
        path = f"{prefix}{f.name}"
        out.append((path, f))
        if f.fields:
            out.extend(walk_fields(f.fields, path + "."))
    return out


@cache
def country_codes() -> frozenset[str]:
    """ISO 3166-1 alpha-2 codes (from pycountry)."""
    return frozenset(c.alpha_2 for c in pycountry.countries)


@cache
def currency_codes() -> frozenset[str]:
    """ISO 4217 alphabetic codes (from pycountry)."""
    return frozenset(c.alpha_3 for c in pycountry.currencies)


_FORMAT_PATTERNS: dict[str, str] = {
    "phone": r"^\+[1-9][0-9]{5,14}$",
    "country": r"^[A-Z]{2}$",
    "currency": r"^[A-Z]{3}$",
    "date": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
    "date-time": (
        r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
    ),
    "base64": r"^[A-Za-z0-9+/]*={0,2}$",
    "canonical": r"^/main/ChargeItemDefinition/[A-Za-z0-9.\-]+$",
}


def format_pattern(fmt: str) -> str:
    """Anchored regex (Rust- and Python-compatible) for a format rule's *shape*.

    Country and currency also need membership in :func:`country_codes` and
    :func:`currency_codes`; dates also need to be real calendar dates.
    """
    return _FORMAT_PATTERNS[fmt]


ID_PREFIX_MEANINGS: dict[str, tuple[str, str]] = {
    "PG-": ("Organization", "Practice group"),
    "CL-": ("Organization", "Clinic"),
    "OG-": ("Organization", "Organization"),
    "FD-": ("Organization", "Funder"),
    "SP-": ("Organization", "Professional contact's practice"),
    "PR-": ("Practitioner", "Practitioner or administrator within the practice group"),
    "EP-": ("Practitioner", "External practitioner from the professional contacts list"),
}
"""Spec section 1: id prefixes exist only in the API, never in the product UI."""
