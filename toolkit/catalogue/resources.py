"""Every resource type the API serves or references, with its fields and rules.

One :class:`~toolkit.catalogue.model.Resource` per type; :data:`RESOURCES` maps names
to them. Adding a resource type starts here.
"""

from __future__ import annotations

from toolkit.catalogue.constants import ATTACHMENT_CONTENT_TYPES, prefixes_of
from toolkit.catalogue.model import (
    Alternative,
    Endpoint,
    Extension,
    Field,
    Ref,
    Resource,
    Source,
    Target,
)

# --------------------------------------------------------------------------- helpers


def _ref(*targets: tuple[str, tuple[str, ...]] | str) -> Ref:
    out = []
    for t in targets:
        out.append(Target(t) if isinstance(t, str) else Target(t[0], t[1]))
    return Ref(tuple(out))


def _reference_field(name: str, ref: Ref, **kw: object) -> Field:
    return Field(name, "reference", ref=ref, **kw)  # type: ignore[arg-type]


_USUAL: dict[str, tuple[str, str, int]] = {
    "list": ("GET", "/main/{name}", 200),
    "read": ("GET", "/main/{name}/{{id}}", 200),
    "create": ("POST", "/main/{name}", 201),
    "update": ("PATCH", "/main/{name}/{{id}}", 200),
}


def _endpoints(
    name: str, *operations: tuple[str, str] | Endpoint, source: Source = "spec"
) -> tuple[Endpoint, ...]:
    """The operations of ``name`` in spec order: ``(kind, title)`` at its usual path, or an
    :class:`Endpoint` written out (``$book``, ``$find``, Coverage's trailing slash).
    ``source`` marks the ``(kind, title)`` ones (an endpoint outside the spec: ``facts``)."""
    out: list[Endpoint] = []
    for op in operations:
        if isinstance(op, Endpoint):
            out.append(op)
            continue
        kind, title = op
        method, path, success = _USUAL[kind]
        endpoint = Endpoint(method, path.format(name=name), title, name, kind, success, source)  # type: ignore[arg-type]
        out.append(endpoint)
    return tuple(out)


PR = ("Practitioner", ("PR-",))
PRACTITIONER_ANY = ("Practitioner", prefixes_of("Practitioner"))
ROLE_ANY = ("PractitionerRole", ("PR-", "EP-"))
ORG_ANY = ("Organization", prefixes_of("Organization"))


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
        Field(
            "referralDefinition",
            "string",
            forms=(Alternative("reference", target="ReferralDefinition"),),
        ),
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
                    forms=(Alternative("quantity"),),
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
    endpoints=_endpoints(
        "Referral",
        ("list", "List Referrals"),
        ("read", "Get Referral"),
        ("create", "Create Referral"),
        ("update", "Update Referral"),
    ),
    search=("subject",),
    fhir_search=("patient",),
    owner_search=("subject", "subject"),
    date_search=(("created",), "created"),
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
    endpoints=_endpoints(
        "Appointment",
        ("list", "List Appointments"),
        ("read", "Get Appointment"),
        Endpoint("POST", "/main/Appointment/$book", "Book Appointment", "Appointment", "book", 201),
        ("update", "Update Appointment"),
        Endpoint(
            "GET", "/main/Appointment/$find", "Find Available Appointments", "Appointment", "find"
        ),
    ),
    search=("date", "patient", "actor"),
    fhir_search=("status", "practitioner"),
    owner_search=("patient", "participant.actor"),
    date_search=(("date", "start"), "start"),
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
            forms=(Alternative("one-or-many", "pmtk", reader_only=True),),
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
            forms=(Alternative("one-or-many", "pmtk", reader_only=True),),
            fields=(
                Field("system", "string", source="pmtk"),
                Field("value", "string", source="pmtk"),
            ),
            doc="Medicare or DVA business identifier; structure not shown in the spec.",
        ),
    ),
    create_required=("beneficiary", "subscriber", "payor"),
    endpoints=_endpoints(
        "Coverage",
        ("list", "List Coverage"),
        ("read", "Get Coverage"),
        Endpoint("POST", "/main/Coverage/", "Create Coverage", "Coverage", "create", 201),
        ("update", "Update Coverage"),
    ),
    search=("beneficiary",),
    owner_search=("beneficiary", "beneficiary"),
    date_search=(("period",), "period.start"),
)

ORGANIZATION = Resource(
    "Organization",
    _common(
        Field("active", "boolean"),
        Field(
            "type",
            "object",
            many=True,
            fields=CODING,
            forms=(Alternative("codeable-concept", "pmtk", reader_only=True),),
        ),
        Field("name", "string"),
        TELECOM,
        ADDRESS,
        _reference_field("partOf", _ref(("Organization", ("PG-",)))),
    ),
    id_prefixes=prefixes_of("Organization"),
    create_prefixes=("SP-",),
    create_required=("name",),
    create_source="pmtk",
    endpoints=_endpoints(
        "Organization",
        ("list", "List Organizations"),
        ("read", "Get Organization"),
        ("create", "Create Organization (professional contact practice)"),
    ),
    search=("name",),
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
            forms=(Alternative("one-or-many"),),
            prefer=("use", "official"),
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
    id_prefixes=prefixes_of("Practitioner"),
    create_prefixes=("EP-",),
    create_required=("name",),
    create_source="pmtk",
    endpoints=_endpoints(
        "Practitioner",
        ("list", "List Practitioners"),
        ("read", "Get Practitioner"),
        ("create", "Create Practitioner (professional contact)"),
    ),
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
    endpoints=_endpoints("InvoiceLine", ("list", "List InvoiceLines"), ("read", "Get InvoiceLine")),
    search=("subject",),
    owner_search=("subject", "subject"),
    date_search=(("enteredDate", "date"), "enteredDate"),
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
            forms=(Alternative("one-or-many", "pmtk", reader_only=True),),
            prefer=("use", "official"),
        ),
        TELECOM,
        Field(
            "active",
            "boolean",
            source="facts",
            doc="Whether the record is in use (FHIR R4); read-only, set by the server "
            "(facts); a production client searches active=true.",
        ),
        Field("gender", "code", enum=("male", "female", "other", "unknown")),
        Field("birthDate", "date", format="date"),
        ADDRESS,
        _reference_field(
            "generalPractitioner",
            # The vendor's pages show Organization (CL-) and Practitioner (PR-)
            # targets (facts); FHIR R4 also allows PractitionerRole.
            _ref(ROLE_ANY, ("Practitioner", ("PR-", "EP-")), ORG_ANY),
            many=True,
        ),
        Field(
            "patient-status",
            "code",
            enum=("current", "contact", "archived", "blocked", "deceased"),
            extension=Extension("patient-status", "valueCode"),
        ),
    ),
    source="facts",
    create_required=("name",),
    create_source="pmtk",
    endpoints=(
        *_endpoints("Patient", ("list", "List patients")),
        *_endpoints("Patient", ("read", "Get Patient"), source="pmtk"),
        # a production client creates a patient when a lookup by email finds none (facts)
        *_endpoints("Patient", ("create", "Create Patient"), source="facts"),
    ),
    # general-practitioner and active: a production client searches by them live (facts,
    # client-observed)
    search=("name", "family", "given", "email", "general-practitioner", "active"),
    fhir_search=("birthdate", "gender"),
)

# The referenced resources of spec section 2.7 (fields "not shown"): their fields are
# the FHIR R4 base resource's, or the facts' where they name them; their endpoints are
# the ones public clients use live (facts) or pmtk's own (pmtk). A deployment without
# them is reported as an observation, never failed.

INVOICE = Resource(
    "Invoice",
    _common(
        Field("status", "code", enum=("active", "issued", "write-off")),
        _reference_field("subject", _ref("Patient"), source="pmtk"),
        _reference_field(
            "recipient",
            _ref("Patient", ("Organization", ("FD-", "OG-"))),
            source="pmtk",
            doc="Who is billed: the funder of its lines, else the patient (FHIR R4).",
        ),
        Field("date", "date", format="date", doc="A plain date on the live service (facts)."),
        *(
            Field(name, "object", fields=MONEY)
            for name in ("totalNet", "totalGross", "totalBalance", "totalPaid")
        ),
    ),
    source="facts",
    doc="An invoice; its totals are the sums of its InvoiceLines.",
    endpoints=(
        *_endpoints("Invoice", ("list", "List Invoices"), source="facts"),
        *_endpoints("Invoice", ("read", "Get Invoice"), source="pmtk"),
    ),
    search=("created", "recipient"),
    fhir_search=("status", "subject"),
    date_search=(("created",), "date"),
)

HEALTHCARE_SERVICE = Resource(
    "HealthcareService",
    _common(
        Field("name", "string"),
        Field("active", "boolean"),
        _reference_field("providedBy", _ref(("Organization", ("CL-", "PG-")))),
    ),
    source="pmtk",
    doc="A service a clinic offers; what an Appointment's supportingInformation names.",
    endpoints=(
        *_endpoints("HealthcareService", ("list", "List HealthcareServices"), source="facts"),
        *_endpoints("HealthcareService", ("read", "Get HealthcareService"), source="pmtk"),
    ),
)

PRACTITIONER_ROLE = Resource(
    "PractitionerRole",
    _common(
        Field("active", "boolean"),
        _reference_field("practitioner", _ref(PRACTITIONER_ANY)),
        _reference_field("organization", _ref(("Organization", ("CL-", "SP-", "PG-")))),
        _reference_field(
            "healthcareService",
            _ref("HealthcareService"),
            many=True,
            doc="The services the role provides (its clinic's).",
        ),
    ),
    id_prefixes=("PR-", "EP-"),
    source="pmtk",
    doc="A practitioner at a clinic: what an Appointment's practitioner participant names.",
    endpoints=_endpoints(
        "PractitionerRole",
        ("list", "List PractitionerRoles"),
        ("read", "Get PractitionerRole"),
        source="facts",
    ),
    # a production client searches by it live (facts, client-observed)
    search=("practitioner",),
)

REFERRAL_DEFINITION = Resource(
    "ReferralDefinition",
    _common(
        Field("name", "string", doc="The referral type, as a Referral's referralDefinition."),
        Field("active", "boolean"),
        _reference_field("funder", _ref(("Organization", ("FD-",)))),
        Field(
            "limitQuantity",
            "object",
            fields=(
                Field(
                    "quantity",
                    "integer",
                    # read as Referral's is sent live (a Quantity {value}); the checker
                    # and the mock keep the number, as no source shows this one sent
                    forms=(Alternative("quantity", source="pmtk", reader_only=True),),
                ),
            ),
            doc="The appointments a referral of this type allows by default.",
        ),
        Field(
            "limitMoney",
            "object",
            fields=(Field("amount", "object", fields=MONEY),),
            doc="The money a referral of this type allows by default.",
        ),
    ),
    source="pmtk",
    doc="A referral type (Halaxy's own resource; the facts name only its read).",
    endpoints=(
        *_endpoints("ReferralDefinition", ("list", "List ReferralDefinitions"), source="pmtk"),
        *_endpoints("ReferralDefinition", ("read", "Get ReferralDefinition"), source="facts"),
    ),
)

CHARGE_ITEM_DEFINITION = Resource(
    "ChargeItemDefinition",
    _common(
        Field("title", "string"),
        Field("code", "string"),
        Field("price", "object", fields=MONEY),
    ),
    source="pmtk",
    doc="A fee: what an InvoiceLine's definition names.",
    endpoints=_endpoints(
        "ChargeItemDefinition",
        ("list", "List ChargeItemDefinitions"),
        ("read", "Get ChargeItemDefinition"),
        source="pmtk",
    ),
)

SLOT = Resource(
    "Slot",
    _common(
        Field("start", "date-time", required=True, format="date-time"),
        Field("end", "date-time", required=True, format="date-time"),
        Field(
            "status",
            "code",
            enum=("busy", "free", "busy-unavailable", "busy-tentative", "entered-in-error"),
            doc="FHIR R4's values; the mock serves free and busy.",
        ),
        _reference_field("practitionerRole", _ref(ROLE_ANY)),
        _reference_field("healthcareService", _ref("HealthcareService")),
        _reference_field(
            "schedule",
            _ref("Schedule"),
            doc="The Schedule the Slot belongs to, its role's (FHIR R4: required).",
        ),
    ),
    source="pmtk",
    doc="A 30-minute unit of a role's bookable time, free or busy; what $find draws from.",
    endpoints=_endpoints("Slot", ("list", "List Slots"), ("read", "Get Slot"), source="pmtk"),
    # start, end, practitioner, practitioner-role: public clients send them live (facts)
    search=("start", "end", "practitioner", "practitioner-role"),
    fhir_search=("status", "schedule"),
    date_search=(("start",), "start"),
)

SCHEDULE = Resource(
    "Schedule",
    _common(
        Field("active", "boolean"),
        _reference_field(
            "actor",
            _ref(ROLE_ANY, "HealthcareService"),
            many=True,
            doc="Whose time it is: the role (FHIR R4: one or more actors).",
        ),
        Field(
            "planningHorizon",
            "object",
            fields=(
                Field("start", "date-time", format="date-time"),
                Field("end", "date-time", format="date-time"),
            ),
            doc="The period the schedule's Slots cover.",
        ),
        Field("comment", "string", doc="The working hours, with the clinic's time zone."),
    ),
    source="facts",
    doc="A role's bookable time: the Slots of one PractitionerRole over a planning horizon.",
    endpoints=(
        *_endpoints("Schedule", ("list", "List Schedules"), source="facts"),
        *_endpoints("Schedule", ("read", "Get Schedule"), source="pmtk"),
    ),
    search=("actor", "active"),
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
        REFERRAL_DEFINITION,
        CHARGE_ITEM_DEFINITION,
        SLOT,
        SCHEDULE,
    )
}
