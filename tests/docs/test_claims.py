"""Every "has / has no" sentence in docs/ is either proved by a test or about a third party.

A new such sentence fails :func:`test_every_has_no_sentence_is_accounted_for` until it
is entered in :data:`CLAIMS` with what proves it; the claims about pmtk's own behaviour
that no other test proves are checked here, against the mock over loopback HTTP.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import api_client

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))

PATTERN = re.compile(r"\b(?:has no|have no|does not have|do not have|holds no)\b", re.I)

CLAIMS: dict[tuple[str, str], str] = {
    ("contracts.md", "the spec has no `/metadata`"): "test_the_spec_has_no_metadata_endpoint",
    ("contracts.md", "a path it does not have"): "tests/contracts (the token request first)",
    ("interfaces.md", "has no `end`"): "tests/mock/test_faults.py (missing-required)",
    ("mock.md", "has no `end`"): "tests/mock/test_faults.py (missing-required)",
    ("mock.md", "the API itself has no delete"): "test_the_api_has_no_delete",
    ("mock.md", "The mock has no Patient or Invoice writes"): "test_the_mock_has_no_patient_or_invoice_writes",  # noqa: E501
    ("mock.md", "has no head-size limit"): "third party (uvicorn), tests/hostile",
    ("notebooks.md", "the roles frame has no column"): "an example message (tests/analysis)",
    ("notebooks.md", "ipykernel has no reason"): "third party (ipykernel)",
    ("store.md", "it has no pmtk manifest.json"): "an example message (tests/store/test_safety.py)",
    ("store.md", "of a type pmtk has no view of is accepted"): "test_invoice_is_stored_and_its_events_applied",  # noqa: E501
    ("store.md", "A store that holds no data yet"): "tests/store (identity)",
    ("views.md", "as the text has no offset"): "tests/frames (dates)",
    ("store.md", "only events ever wrote has no high-water mark"): "tests/store/test_sync.py",
    ("store.md", "Parquet has no checksum"): "third party (Parquet, Polars)",
}  # fmt: skip


def _sentences() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = " ".join(doc.read_text(encoding="utf-8").split())
        for match in PATTERN.finditer(text):
            found.append((doc.name, text[max(0, match.start() - 120) : match.end() + 120]))
    return found


def test_every_has_no_sentence_is_accounted_for() -> None:
    unaccounted = [
        (name, around)
        for name, around in _sentences()
        if not any(name == doc and snippet in around for (doc, snippet) in CLAIMS)
    ]
    assert not unaccounted, "\n".join(f"{n}: ...{a}..." for n, a in unaccounted)


def test_no_doc_says_the_store_lacks_invoices() -> None:
    text = " ".join((ROOT / "docs" / "store.md").read_text(encoding="utf-8").split())
    assert "no Invoice table)" not in text and "(Invoice, anything unknown)" not in text


def test_invoice_is_stored_and_its_events_applied(mock_deployment: Any, tmp_path: Path) -> None:
    import toolkit
    from toolkit import views
    from toolkit.store import load, read_manifest, sync

    dep = mock_deployment
    dep.reset_rate_limit()
    with toolkit.connect(
        base_url=dep.base_url, client_id=dep.client_id, client_secret=dep.client_secret
    ) as client:
        summary = sync(client, tmp_path, resources=["Invoice"], progress=False)
    invoices = load("Invoice", tmp_path)
    assert summary["Invoice"].status == "updated" and invoices.height > 0
    assert read_manifest(tmp_path)["resources"]["Invoice"]["tables"]["Invoice"]["rows"] == (
        invoices.height
    )
    assert "Invoice" in views.VIEWS  # the listener applies the events of every viewed type


def test_the_mock_has_no_patient_or_invoice_writes(mock_deployment: Any) -> None:
    with api_client(mock_deployment) as api:
        for path in ("Patient", "Invoice"):
            response = api.post(path, json={"resourceType": path})
            assert response.status_code in (404, 405), (path, response.status_code)
            assert response.json()["resourceType"] == "OperationOutcome"


def test_the_api_has_no_delete() -> None:
    from toolkit.catalogue.endpoints import ENDPOINTS

    assert {e.method for e in ENDPOINTS} <= {"GET", "POST", "PATCH"}


def test_the_spec_has_no_metadata_endpoint() -> None:
    spec = (ROOT.parent / "shared" / "spec" / "practice-management-api.md").read_text("utf-8")
    assert "/main/metadata" not in spec


@pytest.mark.parametrize("show", [None, "first-available"])
def test_find_proposal_ids_are_unique(mock_deployment: Any, show: str | None) -> None:
    import toolkit

    dep = mock_deployment
    dep.reset_rate_limit()
    filters = {"show": show} if show else {}
    with toolkit.connect(
        base_url=dep.base_url, client_id=dep.client_id, client_secret=dep.client_secret
    ) as client:
        frame = client.find("2026-11-02T00:00:00Z", "2026-11-07T00:00:00Z", 30, **filters)
    assert frame.height > 1
    assert frame["id"].n_unique() == frame.height
    # the role is part of the id, so each id still names its own practitioner's slot
    rows = frame.select("id", "practitioner_role").rows()
    assert all(role in pid for pid, role in rows)
