"""Hand-made conforming records, shared by the rule and walker tests.

Each function returns a fresh deep copy, so a test may change what it gets. The
records are in the spec's forms (absolute ``/main/...`` references, extensions by
their short urls); each test breaks one thing at a time and expects that one finding.
"""

from __future__ import annotations

import copy
from typing import Any

_ORGANIZATION: dict[str, Any] = {
    "resourceType": "Organization",
    "id": "CL-1",
    "name": "Clinic",
    "telecom": [
        {"system": "phone", "value": "+61298765432", "use": "work"},
        {"system": "email", "value": "a@b.example", "use": "work"},
    ],
    "address": [{"use": "work", "type": "physical", "country": "AU"}],
    "partOf": {"reference": "/main/Organization/PG-1", "type": "Organization"},
}

_APPOINTMENT: dict[str, Any] = {
    "resourceType": "Appointment",
    "id": "77",
    "start": "2026-11-23T09:00:00Z",
    "end": "2026-11-23T09:30:00Z",
    "extension": [{"url": "location-type", "valueCode": "clinic"}],
    "participant": [
        {
            "actor": {"reference": "/main/PractitionerRole/PR-1", "type": "PractitionerRole"},
            "modifierExtension": [
                {"url": "appointment-participant-status", "valueCoding": {"code": "booked"}}
            ],
            "extension": [
                {
                    "url": "appointment-participant-invoice",
                    "valueReference": {"reference": "/main/Invoice/9", "type": "Invoice"},
                }
            ],
        }
    ],
}


def organization() -> dict[str, Any]:
    """A clinic: two telecoms (phone, email), a work address, a parent group."""
    return copy.deepcopy(_ORGANIZATION)


def appointment() -> dict[str, Any]:
    """An appointment with its location type, one practitioner role booked, and the
    participant's invoice extension (a reference encoded in an extension)."""
    return copy.deepcopy(_APPOINTMENT)
