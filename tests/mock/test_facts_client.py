"""A client written from the facts file, not from pmtk, reads ``pmtk mock`` without an error.

``FactsClient`` below knows nothing of pmtk: plain httpx and the shapes
``public-docs-facts.md`` gives for the live service (JSON token body, FHIR Bundles
with ``next`` links, ``limitQuantity.quantity`` as a Quantity ``{"value": n}``,
``referralDefinition`` as a Reference, full extension urls, absolute references,
``Type/id`` reference searches). It is written the way the public clients are: it
calls ``.get`` on what the facts say is an object, so an integer where a Quantity
belongs fails as one of them did (``'int' object has no attribute 'get'``).

``pmtk mock`` runs as a real server (the console script's entry point) on a free
loopback port, and is stopped with Ctrl-C at the end.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

AGENT = "facts-client-test (tests@example.invalid)"
STATUS_URL_END = "/appointment-participant-status"


class FactsClient:
    """The smallest client the facts allow: a token, a GET, and Bundle walking."""

    def __init__(self, base_url: str, client_id: str, secret: str) -> None:
        self.base = base_url.rstrip("/")
        self.read: dict[tuple[str, str], dict[str, Any]] = {}
        token = httpx.post(
            f"{self.base}/oauth/token",
            json={
                "grant_type": "client_credentials",
                "client_id": client_id,
                "client_secret": secret,
            },
            headers={"User-Agent": AGENT, "Accept": "application/fhir+json"},
            timeout=30,
        )
        token.raise_for_status()
        self.http = httpx.Client(
            headers={
                "Authorization": f"Bearer {token.json()['access_token']}",
                "Accept": "application/fhir+json",
                "User-Agent": AGENT,
            },
            timeout=30,
        )

    def close(self) -> None:
        self.http.close()

    def get(self, path_or_url: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        url = path_or_url if path_or_url.startswith("http") else f"{self.base}/{path_or_url}"
        response = self.http.get(url, params=params)
        body: dict[str, Any] = response.json()
        if response.status_code != 200 or body.get("resourceType") == "OperationOutcome":
            raise RuntimeError(f"{url}: {response.status_code} {body}")
        return body

    def search(self, resource: str, **params: Any) -> Iterator[dict[str, Any]]:
        body = self.get(resource, params)
        while True:
            if body.get("resourceType") != "Bundle" or "entry" not in body:
                raise RuntimeError(f"{resource}: not a searchset Bundle: {body}")
            for entry in body["entry"]:
                yield entry["resource"]
            following = [x["url"] for x in body.get("link", []) if x.get("relation") == "next"]
            if not following:
                return
            body = self.get(following[0])

    def follow(self, reference: dict[str, Any]) -> dict[str, Any]:
        """Read what a Reference points at (its last two path segments: ``Type/id``),
        once per target (the rate limit is 500 requests a minute)."""
        kind, rid = reference.get("reference", "").rstrip("/").split("/")[-2:]
        if (kind, rid) not in self.read:
            self.read[kind, rid] = self.get(f"{kind}/{rid}")
        return self.read[kind, rid]


def referral_summary(client: FactsClient, referral: dict[str, Any]) -> dict[str, Any]:
    """What a public client's referral tool reads, the way it reads it."""
    limit = referral.get("limitQuantity", {})
    definition = referral.get("referralDefinition", {})
    read = client.follow(definition)
    return {
        "id": referral["id"],
        "allowed": limit.get("quantity", {}).get("value"),  # a Quantity, live
        "used": limit.get("quantityUsed"),
        "type": definition.get("display"),
        "type_record": read,
        "patient": referral.get("subject", {}).get("reference"),
    }


def participant_status(participant: dict[str, Any]) -> str | None:
    for ext in participant.get("modifierExtension", []):
        if ext.get("url", "").endswith(STATUS_URL_END):
            return ext.get("valueCoding", {}).get("code")
    return None


@pytest.fixture(scope="module")
def pmtk_mock() -> Iterator[FactsClient]:
    entry = "from toolkit.cli import main; main()"  # what the pmtk console script runs
    proc = subprocess.Popen(
        [sys.executable, "-c", entry, "mock", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        banner: dict[str, str] = {}
        while "shapes" not in banner:
            line = proc.stdout.readline()
            assert line, "pmtk mock exited early"
            key, _, value = line.partition(":")
            banner[key.strip()] = value.strip()
        assert banner["base URL"].startswith("http://127.0.0.1:")
        client = FactsClient(banner["base URL"], banner["client id"], banner["client secret"])
        try:
            yield client
        finally:
            client.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_referrals_and_their_definitions(pmtk_mock: FactsClient) -> None:
    summaries = [referral_summary(pmtk_mock, r) for r in pmtk_mock.search("Referral", _count=100)]
    assert summaries
    for s in summaries:
        assert isinstance(s["allowed"], int) and s["allowed"] > 0
        assert s["type_record"]["resourceType"] == "ReferralDefinition"
        assert s["type_record"]["name"] == s["type"]


def test_a_patients_appointments_by_actor(pmtk_mock: FactsClient) -> None:
    referral = next(pmtk_mock.search("Referral", _count=1))
    patient = referral["subject"]["reference"].rstrip("/").split("/")[-1]
    appointments = list(pmtk_mock.search("Appointment", actor=f"Patient/{patient}", _count=100))
    assert appointments
    for a in appointments:
        actors = [p.get("actor", {}).get("reference", "") for p in a["participant"]]
        assert any(x.endswith(f"/Patient/{patient}") for x in actors)
        statuses = [participant_status(p) for p in a["participant"]]
        assert all(isinstance(s, str) for s in statuses)
    total = pmtk_mock.get("Appointment", {"_count": 1})["total"]
    assert len(appointments) < total


def test_one_patient_by_email(pmtk_mock: FactsClient) -> None:
    found = pmtk_mock.get("Patient", {"email": "nobody@example.invalid", "_count": 1})
    assert found["total"] == 0 and found["entry"] == []
    patient = next(
        p
        for p in pmtk_mock.search("Patient", _count=100)
        if any(t.get("system") == "email" for t in p.get("telecom", []))
    )
    email = next(t["value"] for t in patient["telecom"] if t["system"] == "email")
    one = pmtk_mock.get("Patient", {"email": email, "_count": 1})
    assert one["entry"][0]["resource"]["id"] == patient["id"]


def test_schedules_and_a_three_hour_slot_window(pmtk_mock: FactsClient) -> None:
    schedules = list(pmtk_mock.search("Schedule"))
    assert schedules
    for schedule in schedules:
        role = pmtk_mock.follow(schedule["actor"][0])
        assert role["resourceType"] == "PractitionerRole"
        assert pmtk_mock.get(f"Schedule/{schedule['id']}")["id"] == schedule["id"]
    role_id = schedules[0]["actor"][0]["reference"].rstrip("/").split("/")[-1]
    first = next(
        pmtk_mock.search(
            "Slot",
            **{"practitioner-role": role_id, "start": "ge2026-11-23T00:00:00Z", "_sort": "start"},
            _count=1,
        )
    )
    start = dt.datetime.fromisoformat(first["start"].replace("Z", "+00:00"))
    end = start + dt.timedelta(hours=3)
    window = list(
        pmtk_mock.search(
            "Slot",
            **{
                "practitioner-role": role_id,
                "start": f"ge{start:%Y-%m-%dT%H:%M:%SZ}",
                "end": f"le{end:%Y-%m-%dT%H:%M:%SZ}",
            },
        )
    )
    assert len(window) == 6  # six 30-minute slots, not thousands
