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
from toolkit.webhooks import EventQueue

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))

PATTERN = re.compile(r"\b(?:has no|have no|does not have|do not have|holds no)\b", re.I)

CLAIMS: dict[tuple[str, str], str] = {
    ("contracts.md", "the spec has no `/metadata`"): "test_the_spec_has_no_metadata_endpoint",
    ("contracts.md", "a path it does not have"): "tests/contracts (the token request first)",
    ("interfaces.md", "has no `end`"): "tests/mock/test_faults.py (missing-required)",
    ("mock.md", "has no `end`"): "tests/mock/test_faults.py (missing-required)",
    ("mock.md", "the API itself has no delete"): "test_the_api_has_no_delete",
    ("mock.md", "The mock has no Patient PATCH and no Invoice writes"): "test_the_mock_has_no_patient_patch_and_no_invoice_writes",  # noqa: E501
    ("mock.md", "has no head-size limit"): "third party (uvicorn), tests/hostile",
    ("notebooks.md", "the roles frame has no column"): "an example message (tests/analysis)",
    ("notebooks.md", "ipykernel has no reason"): "third party (ipykernel)",
    ("store.md", "it has no pmtk manifest.json"): "an example message (tests/store/test_safety.py)",
    ("store.md", "of a type pmtk has no view of is accepted"): "test_an_event_of_a_type_without_a_view_is_accepted_logged_and_not_queued",  # noqa: E501
    ("store.md", "A store that holds no data yet"): "tests/store (identity)",
    ("store.md", "or the event has no number"): "tests/listen/test_every_event_once.py (digest)",
    ("views.md", "as the text has no offset"): "tests/frames (dates)",
    ("views.md", "a collection holds no nulls"): "test_a_null_item_of_an_array_is_no_item_by_every_read",  # noqa: E501
    ("store.md", "only events ever wrote has no high-water mark"): "tests/store/test_sync.py",
    ("store.md", "Parquet has no checksum"): "third party (Parquet, Polars)",
    ("lake.md", "Delta has no multi-table transaction"): "third party (Delta Lake protocol)",
    ("lake.md", "only when it has no live holder"): "test_a_lease_held_by_a_live_writer_makes_the_other_wait_then_stop",  # noqa: E501
    ("lake.md", "Delta has no notion of an API key"): "third party (Delta Lake protocol)",
    ("testing.md", "(FHIR's decimal has no bound)"): "third party (FHIR R4 datatypes: decimal)",
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


def _files(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) and its sha256."""
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in _BOOKKEEPING
    }


_BOOKKEEPING = (
    "receiver.json",
    "events-seen.json",
    "journal.sqlite3",
    "journal.sqlite3-wal",
    "journal.sqlite3-shm",
)
"""The receiver's own notes in ``.webhooks/`` (who serves the store, the event numbers
it has seen) and its journal, whose rows the test checks: not the store's data."""


def test_an_event_of_a_type_without_a_view_is_accepted_logged_and_not_queued(
    mock_deployment: Any, tmp_path: Path
) -> None:
    """docs/store.md: "an event of a type pmtk has no view of is accepted (202), logged
    and not queued", by the real ``pmtk listen`` over loopback HTTP."""
    import json
    import os
    import subprocess

    import httpx

    import toolkit
    from tests.listen.test_command_output import PMTK, Piped
    from toolkit import views
    from toolkit.store import sync

    dep = mock_deployment
    dep.reset_rate_limit()
    assert "Encounter" not in views.VIEWS  # FHIR's Encounter: a type pmtk has no view of
    store = tmp_path / "store"
    with toolkit.connect(
        base_url=dep.base_url, client_id=dep.client_id, client_secret=dep.client_secret
    ) as client:
        sync(client, store, resources=["Patient"], progress=False)
    secret = "hook-value-for-the-claim-42"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PM_", "NO_COLOR"))}
    env.update(
        PM_CLIENT_ID=dep.client_id,
        PM_CLIENT_SECRET=dep.client_secret,
        PM_USER_AGENT="pmtk tests (tests@example.org)",
        PM_WEBHOOK_AUTH=f"Authorization: Bearer {secret}",
    )
    # The notification as public-docs-facts.md "Events" gives it: a history Bundle whose
    # first entry is a SubscriptionStatus, notificationEvent[].focus naming the record.
    body = {
        "resourceType": "Bundle",
        "type": "history",
        "timestamp": "2026-11-26T03:00:00Z",
        "entry": [
            {
                "resource": {
                    "resourceType": "SubscriptionStatus",
                    "status": "active",
                    "type": "event-notification",
                    "notificationEvent": [
                        {
                            "eventNumber": "1",
                            "timestamp": "2026-11-26T03:00:00Z",
                            "focus": {
                                "reference": "https://au-api.halaxy.com/main/Encounter/enc-77"
                            },
                        }
                    ],
                }
            }
        ],
    }
    args = ["listen", "--store", str(store), "--port", "0", "--no-catch-up"]
    with Piped([*args, "--base-url", dep.base_url], env) as run:
        line = run.wait_for(run.out, lambda text: text.startswith("webhook URL: "))
        url = line.split(": ", 1)[1]
        before = _files(store)  # the queue folders exist once the receiver runs
        answer = httpx.post(
            url,
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
            trust_env=False,
            timeout=30,
        )
        assert answer.status_code == 202, answer.text  # accepted
        logged = run.wait_for(run.err, lambda text: "Encounter/enc-77" in text)
        port = url.split(":")[2].split("/")[0]
        status = subprocess.run(
            [PMTK, *args[:3], "--status", "--port", port, "--output", "json"],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
    assert logged == (
        "pmtk listen: accepted Encounter/enc-77 (change) but not applied: "
        "pmtk keeps no Encounter table"
    )
    report = json.loads(status.stdout)["status"]
    assert report["worker"] == "running" and report["received"] == 1  # it was this receiver
    assert report["queue"]["events"] == 0 and report["queue"]["waiting_for_sync"] == {}
    assert not any(EventQueue(store).states().values())  # not queued, not parked, not dead
    assert _files(store) == before  # nothing in the store changed


def test_the_mock_has_no_patient_patch_and_no_invoice_writes(mock_deployment: Any) -> None:
    with api_client(mock_deployment) as api:
        invoice = api.get("Invoice", params={"_count": 1}).json()["entry"][0]["resource"]["id"]
        for method, path in (
            ("PATCH", "Patient/100001"),
            ("POST", "Invoice"),
            ("PATCH", f"Invoice/{invoice}"),
        ):
            response = api.request(method, path, json={"active": True})
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
