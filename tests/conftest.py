"""Shared fixtures: a real mock deployment over loopback HTTP.

Fixtures (all servers listen on 127.0.0.1 only, on a free port):

``mock_deployment`` (session)
    ``toolkit.mock.serve(seed=0, scale="small", test_controls=True)``. Shared by
    every test of the session: do not change its data or switch a fault on it.
    Read-only tests use it; call ``mock_deployment.reset_rate_limit()`` if you
    send many requests (the ``mock_api`` fixture does this for you).
``fresh_mock`` (function)
    A new deployment with the same options, for tests that write, advance the
    clock, exhaust the rate limit or switch fault profiles (``dep.set_fault``).
    Starts in about 0.2 s.
``mock_client`` (module)
    A ``toolkit.Client`` of ``mock_deployment``, unpaced, its rate window emptied
    first: for tests that read the session mock through the toolkit.
``mock_visits`` (session)
    Notebook 03's chain on ``mock_deployment`` (:class:`MockVisits`): the listed
    Appointment tables and roles, the practice clock, the data's "now" and the
    visits on each clinic's clock. Read-only.
``mock_api`` / ``fresh_api`` (function)
    An ``httpx.Client`` whose ``base_url`` is the deployment's ``base_url`` plus
    ``/``, with a valid bearer token, ``Accept: application/fhir+json`` and a
    ``User-Agent``; use relative paths such as ``client.get("Referral")``.

Helpers importable by tests: :func:`token_for` (fetch an access token),
:func:`api_client` (build an authenticated client for any deployment) and
:func:`toolkit_client` (an unpaced ``toolkit.Client`` of a deployment).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from toolkit.client import Client
from toolkit.mock import Deployment, serve

USER_AGENT = "pmtk-tests (tests@example.invalid)"


# Every test runs as an application that identifies itself, as a configured user does
# (set at import, so that module- and session-scoped fixtures see it too). Without
# PM_USER_AGENT a client warns (toolkit.config.PmtkConfigWarning); the tests of that
# warning delete the variable themselves.
os.environ["PM_USER_AGENT"] = USER_AGENT

# Lake syncs stage their pages in a folder kept across runs (toolkit.lake.stage); the
# tests' go to a temporary folder of this run, never to the user's cache.
if "PMTK_LAKE_STAGE" not in os.environ:
    import tempfile

    os.environ["PMTK_LAKE_STAGE"] = tempfile.mkdtemp(prefix="pmtk-tests-lake-stage-")


def load_script(path: Path, name: str) -> ModuleType:
    """A script that is not in a package (``tools/*.py``, a benchmark), imported as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def token_for(dep: Deployment) -> str:
    """A fresh access token from ``dep``'s token endpoint."""
    response = httpx.post(
        f"{dep.base_url}/oauth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": dep.client_id,
            "client_secret": dep.client_secret,
        },
        headers={"User-Agent": USER_AGENT, "Accept": "application/fhir+json"},
    )
    response.raise_for_status()
    token: str = response.json()["access_token"]
    return token


def api_client(dep: Deployment, **kwargs: Any) -> httpx.Client:
    """An authenticated ``httpx.Client`` rooted at ``dep.base_url + "/"``."""
    return httpx.Client(
        base_url=dep.base_url + "/",
        headers={
            "Authorization": f"Bearer {token_for(dep)}",
            "Accept": "application/fhir+json",
            "User-Agent": USER_AGENT,
        },
        timeout=30,
        **kwargs,
    )


def describe(api: httpx.Client, rid: str, text: str) -> None:
    """Change Appointment ``rid``'s ``description`` on the deployment (a merge patch, as a
    user's write would be), asserting the deployment took it."""
    answer = api.patch(
        f"Appointment/{rid}",
        json={"description": text},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 200, answer.text


def toolkit_client(dep: Any) -> Client:
    """An unpaced ``toolkit.Client`` of ``dep`` (the mock, a spec server, anything with
    ``base_url``, ``client_id`` and ``client_secret``), without progress bars."""
    return Client(
        base_url=dep.base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=None,
        progress=False,
    )


def synced_store(dep: Any, path: Path, resources: list[str]) -> Path:
    """``path`` holding ``resources`` synced in full from ``dep`` by an unpaced client."""
    from toolkit.store import sync

    with toolkit_client(dep) as client:
        sync(client, path, resources=resources, progress=False)
    return path


def copied_store(template: Path, into: Path) -> Path:
    """A private copy of a synced store at ``into``: a test writes to it, never to the template."""
    shutil.copytree(template, into)
    return into


@pytest.fixture(scope="session")
def mock_deployment() -> Iterator[Deployment]:
    """One small mock with test controls for the whole session (treat it as read-only)."""
    with serve(seed=0, scale="small", test_controls=True) as dep:
        yield dep


@pytest.fixture
def fresh_mock() -> Iterator[Deployment]:
    """A new small mock with test controls, for tests that change state."""
    with serve(seed=0, scale="small", test_controls=True) as dep:
        yield dep


@pytest.fixture(scope="module")
def mock_client(mock_deployment: Deployment) -> Iterator[Client]:
    """An unpaced client of the session's mock (its rate window emptied first)."""
    mock_deployment.reset_rate_limit()
    with toolkit_client(mock_deployment) as client:
        assert client.base_url.startswith("http://127.0.0.1:")
        yield client


@dataclass(frozen=True)
class MockVisits:
    """What notebook 03 computes from the session mock, up to the visits."""

    tables: dict[str, Any]
    """``client.frames("Appointment")``: the Appointment table and its child tables."""
    roles: Any
    """``client.frame("PractitionerRole")``."""
    clock: Any
    """``analysis.practice_clock`` of the roles the appointments name."""
    as_of: dt.datetime
    """``analysis.data_as_of`` of the appointments."""
    visits: Any
    """``analysis.appointment_visits`` on each role's clinic clock."""


@pytest.fixture(scope="session")
def mock_visits(mock_deployment: Deployment) -> MockVisits:
    """Notebook 03's chain, once a session: listed roles, the practice clock, visits."""
    import polars as pl

    from toolkit import analysis

    mock_deployment.reset_rate_limit()
    with toolkit_client(mock_deployment) as client:
        orgs = client.frames("Organization")
        tables = client.frames("Appointment")
        roles = client.frame("PractitionerRole")
        participant = tables["appointment_participant"]
        role_ids = (
            participant.filter(pl.col("actor_type") == "PractitionerRole")["actor_id"]
            .unique()
            .to_list()
        )
        clock = analysis.practice_clock(
            client, orgs["Organization"], orgs["organization_address"], role_ids, roles=roles
        )
    as_of = analysis.data_as_of(tables["Appointment"])
    visits = analysis.appointment_visits(
        tables["Appointment"],
        participant,
        now=as_of,
        zones=clock.roles,
        default_zone=clock.default_zone,
    )
    return MockVisits(tables=tables, roles=roles, clock=clock, as_of=as_of, visits=visits)


@pytest.fixture
def mock_api(mock_deployment: Deployment) -> Iterator[httpx.Client]:
    """Authenticated client for ``mock_deployment`` (its rate window emptied first)."""
    mock_deployment.reset_rate_limit()
    with api_client(mock_deployment) as client:
        yield client


@pytest.fixture
def fresh_api(fresh_mock: Deployment) -> Iterator[httpx.Client]:
    """Authenticated client for ``fresh_mock``."""
    with api_client(fresh_mock) as client:
        yield client


@pytest.fixture(autouse=True)
def _tokens_of_this_test_only() -> Iterator[None]:
    """Forget, after each test, the access tokens it registered for redaction.

    :mod:`toolkit.redaction` keeps one registry per process with the last
    ``MAX_TOKENS`` (256) issued tokens, and a ``pmtk check`` runs every one of their
    patterns over every body it records. A test worker issues tokens to hundreds of
    mocks, so the registry would sit full for most of the session. Each test redacts
    the tokens issued during it and before it by the fixtures it shares, as one
    ``pmtk`` process redacts its own; secrets (few, fixed) are kept for the session.
    """
    from toolkit.redaction import REGISTRY

    with REGISTRY._lock:
        tokens = REGISTRY._tokens.copy()
    yield
    with REGISTRY._lock:
        if REGISTRY._tokens != tokens:
            REGISTRY._tokens = tokens
            REGISTRY._order()  # the compiled patterns of exactly these secrets and tokens
