"""Fixtures of the webhook tests: a mock over loopback, a synced store template, payloads.

Notification bodies are written here by hand from ``public-docs-facts.md`` ("Events"),
in the forms a real deployment may use (absolute and relative references, the
``Type/id`` form, an id-only focus), not produced by pmtk's own mock sender.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import copied_store, synced_store, toolkit_client
from toolkit.client import Client

RATE = 100_000
SECRET_HEADER = ("X-Hook-Auth", 'hook-s3cret-never-shown-\u00e9"\\-42')
"""A hostile secret: a quote, a backslash and non-ASCII (escaped forms must not leak either)."""


def listen_process(
    dep: Any, options: list[str], *, env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen[str]:
    """``pmtk listen OPTIONS`` in a child process, as a user starts it: the deployment's
    credentials (and ``env``) in its environment, its output read as UTF-8 text."""
    environment = {
        **os.environ,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        "PYTHONIOENCODING": "utf-8",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-c", "from toolkit.cli import app; app()", "listen", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        text=True,
        encoding="utf-8",
        **popen,
    )


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def notification(
    *events: tuple[str, str],
    reference: str = "https://au-api.halaxy.com/main/{type}/{id}",
    delete: bool = False,
    topic: str | None = None,
) -> bytes:
    """A ``history`` Bundle announcing ``events`` (``(type, id)`` pairs), as the live service."""
    status: dict[str, Any] = {
        "resourceType": "SubscriptionStatus",
        "status": "active",
        "type": "event-notification",
        "notificationEvent": [
            {
                "eventNumber": str(n),
                "timestamp": "2026-11-23T10:00:00Z",
                "focus": {"reference": reference.format(type=t, id=i)},
            }
            for n, (t, i) in enumerate(events, start=1)
        ],
    }
    if topic is not None:
        status["topic"] = topic
    entries: list[dict[str, Any]] = [{"resource": status}]
    if delete:
        entries += [{"request": {"method": "DELETE", "url": f"{t}/{i}"}} for t, i in events]
    return orjson.dumps({"resourceType": "Bundle", "type": "history", "entry": entries})


@pytest.fixture(scope="module")
def dep() -> Iterator[Any]:
    """A small mock with test controls for the module (tests may write to it)."""
    from toolkit.mock import serve

    with serve(seed=0, scale="small", rate_limit=RATE, test_controls=True) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def template(dep: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Patient and Appointment synced once from ``dep``; copy it, never write to it."""
    resources = ["Patient", "Appointment"]
    return synced_store(dep, tmp_path_factory.mktemp("template") / "store", resources)


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    """A private copy of the synced template."""
    return copied_store(template, tmp_path / "store")


@pytest.fixture
def client(dep: Any) -> Iterator[Client]:
    with toolkit_client(dep) as c:
        yield c


@pytest.fixture(scope="session")
def make_notification() -> Callable[..., bytes]:
    return notification
