"""The client reads a deployment's CapabilityStatement to check search keywords."""

from __future__ import annotations

from tests.contracts.live_proxy import live_proxy
from toolkit.client import Client
from toolkit.mock import serve

UA = "pmtk-tests (tests@example.invalid)"
SECRET = "capability-test-secret"


def test_search_keywords_are_checked_against_what_the_mock_declares() -> None:
    with (
        serve() as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, user_agent=UA) as client,
    ):
        declared = client.declared_search()
        assert declared is not None and {"date", "patient", "_id"} <= declared["Appointment"]
        sent = client.requests_sent
        undeclared = client.undeclared_search(
            "Appointment", date="ge2026-01-01", location="Location/1", count=10, sort="-date"
        )
        assert undeclared == ["location"]
        assert client.undeclared_search("Appointment", practitioner="PR-6001") == []
        assert client.undeclared_search("Patient", name="Ng", last_updated="gt2026-01-01") == []
        assert client.undeclared_search("InvoiceLine", subject="Patient/1") == []
        assert client.requests_sent == sent  # the statement is read once


def test_a_deployment_without_the_fhir_standard_searches_is_told_apart() -> None:
    with (
        serve(fault="vendor-search-only") as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, user_agent=UA) as client,
    ):
        assert client.undeclared_search("Appointment", status="booked", date="2026") == ["status"]


def test_without_a_statement_nothing_is_declared_and_nothing_refused() -> None:
    with (
        serve() as dep,
        live_proxy(dep, secret=SECRET, token_text="tok", metadata=False) as url,
        Client(url, dep.client_id, SECRET, user_agent=UA) as client,
    ):
        assert client.declared_search() is None
        assert client.undeclared_search("Appointment", practitioner="PR-6001") == []
