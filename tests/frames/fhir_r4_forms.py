"""Resources written by hand in FHIR R4's own forms, not pmtk's mock's.

Shapes follow the official HL7 FHIR R4 examples (``patient-example``: a birth
time on ``_birthDate``, a name part's own prefix on ``contact[0].name._family``;
``coverage-example``: ``payor`` and ``identifier`` as arrays), HL7 Australia's
AU Base extension urls (indigenous status as a ``valueCoding``, veteran status,
mother's maiden name as a ``valueString``), and the facts file (Coverage's
funder type under ``/main/FunderType/<type>``; ``generalPractitioner`` holding
Organization ``CL-`` and Practitioner ``PR-`` references; partial dates).
"""

from __future__ import annotations

from typing import Any

INDIGENOUS = "http://hl7.org.au/fhir/StructureDefinition/indigenous-status"
VETERAN = "http://hl7.org.au/fhir/StructureDefinition/veteran-status"
MAIDEN = "http://hl7.org/fhir/StructureDefinition/patient-mothersMaidenName"
BIRTH_TIME = "http://hl7.org/fhir/StructureDefinition/patient-birthTime"
OWN_PREFIX = "http://hl7.org/fhir/StructureDefinition/humanname-own-prefix"
FUNDER_TYPE = "https://au-api.halaxy.com/main/FunderType/employer"
PATIENT_STATUS = "https://terminology.halaxy.com/StructureDefinition/patient-status"

# One value of every FHIR R4 type an extension's value[x] may take that the issue
# names, and more: (value[x] key, value, FHIR type, the extension table's text).
VALUES: list[tuple[str, Any, str, str | None]] = [
    ("valueString", "Smith", "string", "Smith"),
    ("valueCode", "archived", "code", "archived"),
    (
        "valueCoding",
        {"system": "http://snomed.info/sct", "code": "186034007", "display": "Ethnicity"},
        "Coding",
        "186034007",
    ),
    (
        "valueCodeableConcept",
        {"coding": [{"system": "urn:iso:std:iso:3166", "code": "NL"}], "text": "Dutch"},
        "CodeableConcept",
        "NL",
    ),
    ("valueBoolean", False, "boolean", "false"),
    ("valueInteger", 42, "integer", "42"),
    ("valueDecimal", 1.25, "decimal", "1.25"),
    ("valueDate", "2014-06", "date", "2014-06"),
    ("valueDateTime", "1974-12-25T14:35:45-05:00", "dateTime", "1974-12-25T14:35:45-05:00"),
    ("valueInstant", "2015-02-07T13:28:17.239+02:00", "instant", "2015-02-07T13:28:17.239+02:00"),
    ("valueTime", "14:35:45", "time", "14:35:45"),
    ("valueUri", "urn:oid:1.2.36.146.595.217.0.1", "uri", "urn:oid:1.2.36.146.595.217.0.1"),
    ("valueUnsignedInt", 0, "unsignedInt", "0"),
    ("valuePositiveInt", 3, "positiveInt", "3"),
    ("valueMarkdown", "*emphasis*", "markdown", "*emphasis*"),
    (
        "valueReference",
        {"reference": "Organization/1", "display": "Gastroenterology"},
        "Reference",
        "Organization/1",
    ),
    (
        "valueQuantity",
        {"value": 185, "unit": "cm", "system": "http://unitsofmeasure.org", "code": "cm"},
        "Quantity",
        "185",
    ),
    (
        "valuePeriod",
        {"start": "2011-05-23", "end": "2012-05-23"},
        "Period",
        "2011-05-23/2012-05-23",
    ),
    (
        "valueIdentifier",
        {"system": "http://ns.electronichealth.net.au/id/medicare-number", "value": "6951449677"},
        "Identifier",
        "6951449677",
    ),
    ("valueMoney", {"value": 12.5, "currency": "AUD"}, "Money", "12.5"),
    (
        "valueAttachment",
        {"contentType": "image/png", "url": "http://x.org/a.png"},
        "Attachment",
        "http://x.org/a.png",
    ),
    ("valueHumanName", {"family": "Windsor", "given": ["Peter"]}, "HumanName", "Windsor"),
    (
        "valueAddress",
        {"text": "534 Erewhon St", "city": "PleasantVille"},
        "Address",
        "534 Erewhon St",
    ),
    ("valueRange", {"low": {"value": 1}, "high": {"value": 5}}, "Range", None),
]


def every_value(base: str) -> list[dict[str, Any]]:
    """One extension per value type, urls ``<base>/<type>``."""
    return [{"url": f"{base}/{kind}", key: value} for key, value, kind, _ in VALUES]


def patient() -> dict[str, Any]:
    """Patient in the shape of FHIR R4's ``patient-example`` plus AU Base extensions.

    Every value type at three depths: on the resource, on an element
    (``name[0]``, ``telecom[0]``, ``address[0]``) and nested in an extension.
    """
    return {
        "resourceType": "Patient",
        "id": "100001",
        "extension": [
            {
                "url": INDIGENOUS,
                "valueCoding": {
                    "system": "https://healthterminologies.gov.au/fhir/CodeSystem/australian-indigenous-status-1",
                    "code": "4",
                    "display": "Neither Aboriginal nor Torres Strait Islander origin",
                },
            },
            {
                "url": VETERAN,
                "valueCodeableConcept": {
                    "coding": [
                        {
                            "system": "https://healthterminologies.gov.au/fhir/CodeSystem/dva-entitlement-type-1",
                            "code": "GOL",
                        }
                    ]
                },
            },
            {"url": MAIDEN, "valueString": "Windsor"},
            {"url": PATIENT_STATUS, "valueString": "current"},
            *every_value("http://example.org/fhir/resource"),
            {
                "url": "http://example.org/fhir/complex",
                "extension": every_value("http://example.org/fhir/nested"),
            },
        ],
        "name": [
            {
                "use": "official",
                "family": "Chalmers",
                "given": ["Peter", "James"],
                "extension": every_value("http://example.org/fhir/name"),
            }
        ],
        "telecom": [
            {
                "system": "phone",
                "value": "+61355556473",
                "use": "work",
                "extension": [{"url": "http://example.org/fhir/telecom", "valueInteger": 1}],
            }
        ],
        "gender": "male",
        "birthDate": "1974-12-25",
        "_birthDate": {
            "extension": [{"url": BIRTH_TIME, "valueDateTime": "1974-12-25T14:35:45-05:00"}]
        },
        "contact": [
            {
                "name": {
                    "family": "du Marché",
                    "_family": {"extension": [{"url": OWN_PREFIX, "valueString": "VV"}]},
                    "given": ["Bénédicte"],
                },
                "telecom": [{"system": "phone", "value": "+33 (237) 998327"}],
            }
        ],
        "generalPractitioner": [
            {"reference": "/main/Organization/CL-7", "type": "Organization"},
            {"reference": "https://au-api.halaxy.com/main/Practitioner/PR-12"},
        ],
    }


def coverage() -> dict[str, Any]:
    """Coverage in the shape of FHIR R4's ``coverage-example``: arrays, a funder-type extension."""
    return {
        "resourceType": "Coverage",
        "id": "9876B1",
        "extension": [{"url": FUNDER_TYPE, "valueString": "employer"}],
        "identifier": [
            {"system": "http://benefitsinc.com/certificate", "value": "12345"},
            {"system": "http://ns.electronichealth.net.au/id/medicare-number", "value": "69514496"},
        ],
        "status": "active",
        "subscriber": {"reference": "Patient/4"},
        "beneficiary": {"reference": "Patient/4"},
        "period": {"start": "2011-05-23"},
        "payor": [{"reference": "Organization/OG-2"}, {"reference": "Patient/4"}],
    }


def appointments() -> list[dict[str, Any]]:
    """Three Appointments; one ``created`` a plain date (a valid FHIR ``dateTime``)."""

    def one(i: int, **more: Any) -> dict[str, Any]:
        return {
            "resourceType": "Appointment",
            "id": str(i),
            "start": "2025-09-29T09:00:00+10:00",
            "end": "2025-09-29T09:30:00+10:00",
            "created": "2025-09-27T16:02:11+10:00",
            **more,
        }

    return [one(1), one(2, created="2025-09-28"), one(3)]


def invoices() -> list[dict[str, Any]]:
    """Invoices whose ``date`` (a plain date in the facts) arrives as a date-time and partial."""
    return [
        {"resourceType": "Invoice", "id": "INV1", "date": "2025-09-28"},
        {"resourceType": "Invoice", "id": "INV2", "date": "2025-09-28T23:30:00+10:00"},
        {"resourceType": "Invoice", "id": "INV3", "date": "2025-09"},
    ]


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceType": "Bundle",
        "type": "searchset",
        "entry": [{"resource": r} for r in resources],
    }
