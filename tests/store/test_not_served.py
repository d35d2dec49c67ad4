"""A deployment without the endpoints outside the spec: the store syncs what it serves.

The deployment is the live-shaped proxy of the contract tests, lacking exactly the
endpoints no public client is seen using live (``LIVE_LACKS``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.contracts.live_proxy import LIVE_LACKS, live_proxy
from toolkit import Client, catalogue
from toolkit.cli import app
from toolkit.mock import serve
from toolkit.store import SyncFailed, load, read_manifest, sync

SECRET = "proxy-secret-0123456789"


def _client(url: str) -> Client:
    return Client(url, "pmtk-demo", SECRET)


def test_a_default_sync_skips_the_types_the_deployment_does_not_serve(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with (
        serve(test_controls=True, rate_limit=100_000) as dep,
        live_proxy(dep, secret=SECRET, token_text="tok", missing=LIVE_LACKS) as url,
        _client(url) as client,
    ):
        summary = sync(client, store, progress=False)
        status = {r.resource: r.status for r in summary.resources}
        assert list(status) == list(catalogue.LISTED_RESOURCES)
        absent = {"ReferralDefinition", "ChargeItemDefinition", "Slot"}
        assert {t for t, s in status.items() if s == "not served"} == absent
        assert all(s == "updated" for t, s in status.items() if t not in absent)
        for result in summary.resources:
            if result.resource in absent:
                assert result.error is not None and "404" in result.error
                assert result.requests == 1  # its first page, and nothing else
        assert set(read_manifest(store)["resources"]) == set(status) - absent
        assert load("PractitionerRole", store).height == 30  # the small practice's roles

        # Named on purpose, a type the deployment does not serve is a failure.
        with pytest.raises(SyncFailed, match="ChargeItemDefinition"):
            sync(client, store, resources=["ChargeItemDefinition"], progress=False)

        again = sync(client, store, progress=False)
        assert {r.resource: r.status for r in again.resources} == {
            t: "not served" if t in absent else "unchanged" for t in status
        }


def test_pmtk_sync_names_what_was_not_served_and_exits_0(tmp_path: Path) -> None:
    with (
        serve(test_controls=True, rate_limit=100_000) as dep,
        live_proxy(dep, secret=SECRET, token_text="tok", missing=LIVE_LACKS) as url,
    ):
        result = CliRunner().invoke(
            app,
            ["sync", "--out", str(tmp_path / "store")],
            env={"PM_BASE_URL": url, "PM_CLIENT_ID": "pmtk-demo", "PM_CLIENT_SECRET": SECRET},
            terminal_width=250,
        )
    assert result.exit_code == 0, result.output
    assert "not served by this deployment (outside the spec): ReferralDefinition" in " ".join(
        result.output.split()
    )
    assert SECRET not in result.output
