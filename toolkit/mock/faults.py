"""Fault profiles: each one breaks exactly one rule of the spec, on purpose.

The contract suite is proved against these. ``category`` names the contract
category that must catch the fault, or ``None`` for profiles that only exercise
a client's resilience (retries, reconnects, link handling).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAULT_PROFILES", "FaultProfile"]


@dataclass(frozen=True, slots=True)
class FaultProfile:
    """One deliberate deviation from the spec."""

    name: str
    description: str
    category: str | None


_PROFILES = (
    FaultProfile(
        "wrong-id-prefix",
        "Practitioner ids in lists and reads use XP- instead of PR-",
        "prefix",
    ),
    FaultProfile(
        "enum-outside-spec",
        "Some Referral allocationType values are 'Everything'",
        "enum",
    ),
    FaultProfile(
        "bad-reference",
        "Referral performer points at /main/Practitioner/EP-...",
        "reference",
    ),
    FaultProfile(
        "bad-phone",
        "Organization phone values contain spaces (+61 2 9876 5432)",
        "format",
    ),
    FaultProfile("bad-country", "Organization address country is 'Australia'", "format"),
    FaultProfile("missing-required", "Some Appointments have no end", "format"),
    FaultProfile("no-ratelimit-headers", "No x-ratelimit-* headers", "rate-limit"),
    FaultProfile("no-retry-after", "429 answers carry no retry-after", "rate-limit"),
    FaultProfile("rate-limit-not-enforced", "Never answers 429", "rate-limit"),
    FaultProfile(
        "tokens-die-early",
        "Tokens are refused after 300 s (the JWT still says 900)",
        "token-lifetime",
    ),
    FaultProfile("tokens-outlive-expires-in", "Tokens never expire", "token-lifetime"),
    FaultProfile("auth-not-enforced", "Resource requests without a valid token get data", "auth"),
    FaultProfile("any-secret-accepted", "The token endpoint accepts any secret", "auth"),
    FaultProfile("paging-loop", "Page 2's next link points back to page 1", "paging"),
    FaultProfile("total-mismatch", "Bundle.total is 5 more than the records served", "paging"),
    FaultProfile("wrong-content-type", "Responses are application/json", "schema"),
    FaultProfile("double-booking", "$book books an already-taken slot again", "write"),
    FaultProfile(
        "attachment-type-unchecked", "Attachments of any content type are accepted", "write"
    ),
    FaultProfile(
        "flaky-503", "Every 4th resource request answers 503 with an OperationOutcome", None
    ),
    FaultProfile("drop-connections", "Every 5th list response is cut off mid-body", None),
    FaultProfile(
        "relative-next-links",
        "next/last links are relative (/main/Appointment?...)",
        None,
    ),
)

FAULT_PROFILES: dict[str, FaultProfile] = {p.name: p for p in _PROFILES}
"""Every fault profile by name, in the order of docs/interfaces.md."""
