"""One redaction boundary: echoed secrets reach no console, manifest, log or queue file.

Two servers written from issue 23, each echoing what it was sent in every form a
careless server might (raw, JSON-escaped, URL-encoded, base64, and base64 of
``client_id:secret`` as HTTP Basic would carry it):

* a token endpoint that puts the request body in its 401 diagnostics: ``pmtk sync``
  prints the error without the client secret and writes no secret to the store;
* an API that quotes the ``Authorization`` header in its errors: the bearer token
  reaches neither ``pmtk sync``'s output, nor ``manifest.json``, nor the listener's
  log and failed-event files.

The forms looked for are written out here, not taken from :mod:`toolkit.redaction`.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from typer.testing import CliRunner

from tests.hostile.conftest import serve
from toolkit import redaction
from toolkit.cli import app
from toolkit.client import Client
from toolkit.errors import PmtkError

CLIENT_ID = "hostile-redaction-client"
SECRET = 'r3d"act\\me/\u00fc+secret never'
"""A quote, a backslash, a slash, non-ASCII, a plus and a space: every encoding differs."""
TOKEN = 'eyJ"hostile/bearer+token=='


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def forms(secret: str, *, client_id: str | None = None) -> dict[str, str]:
    """The forms a server may echo ``secret`` in, by name."""
    found = {
        "raw": secret,
        "json": json.dumps(secret)[1:-1],
        "json-utf8": json.dumps(secret, ensure_ascii=False)[1:-1],
        "url": quote(secret, safe=""),
        "form": quote_plus(secret),
        "base64": _b64(secret),
    }
    if client_id:
        found["basic"] = _b64(f"{client_id}:{secret}")
    return found


def echo(secret: str, *, client_id: str | None = None) -> str:
    """Diagnostics quoting ``secret`` in every form."""
    return " | ".join(f"{name}={form}" for name, form in forms(secret, client_id=client_id).items())


def outcome(status: int, diagnostics: str) -> Response:
    body = {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": "security", "diagnostics": diagnostics}],
    }
    return JSONResponse(body, status_code=status)


def leaks(text: str, secret: str, *, client_id: str | None = None) -> list[str]:
    """The names of the forms of ``secret`` found in ``text``."""
    return [name for name, form in forms(secret, client_id=client_id).items() if form in text]


def store_text(root: Path) -> str:
    """Every file under ``root``, as text (bytes decoded leniently), names included."""
    parts = []
    for path in sorted(root.rglob("*")):
        parts.append(str(path))
        if path.is_file():
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def _sync(base_url: str, out: Path) -> Any:
    args = ["sync", "--out", str(out), "-r", "Patient"]
    args += ["--base-url", base_url, "--client-id", CLIENT_ID]
    return CliRunner().invoke(app, args, env={"PM_CLIENT_SECRET": SECRET, "COLUMNS": "400"})


# ---------------------------------------------------------------- a token endpoint that echoes


def _echoing_token_endpoint() -> Starlette:
    async def token(request: Request) -> Response:
        body = (await request.body()).decode("utf-8", "replace")
        sent = json.loads(body).get("client_secret", "")
        text = f"refused: you sent {body} ; {echo(sent, client_id=CLIENT_ID)}"
        return outcome(401, text)

    return Starlette(routes=[Route("/main/oauth/token", token, methods=["POST"])])


def _existing_store(root: Path) -> Path:
    """An empty pmtk store, made before the sync: a failed first sync into a folder it
    made removes what it wrote, while a store that was there keeps its manifest, and
    the manifest records the failure (where an echoed secret could land)."""
    from toolkit.store.layout import claim, init_manifest, locked

    claim(root)
    with locked(root):
        init_manifest(root)
    return root


def test_pmtk_sync_prints_and_stores_no_echoed_secret(tmp_path: Path) -> None:
    out = _existing_store(tmp_path / "store")
    with serve(_echoing_token_endpoint()) as port:
        result = _sync(f"http://127.0.0.1:{port}/main", out)
    assert result.exit_code == 2, result.output  # refused credentials (README, exit codes)
    assert "<redacted>" in result.output  # the echo was there, and was removed
    assert leaks(result.output, SECRET, client_id=CLIENT_ID) == []
    assert "<redacted>" in (out / "manifest.json").read_text()  # the error is recorded
    assert leaks(store_text(tmp_path), SECRET, client_id=CLIENT_ID) == []


def test_the_token_error_itself_carries_no_secret() -> None:
    with serve(_echoing_token_endpoint()) as port:
        client = Client(
            f"http://127.0.0.1:{port}/main", CLIENT_ID, SECRET, progress=False, timeout=5
        )
        with client, pytest.raises(PmtkError) as info:
            client.read("Patient", "1")
    error = info.value
    texts = [str(error), repr(error), str(error.args), repr(getattr(error, "outcome", None))]
    texts.append(str(getattr(error, "diagnostics", "")))
    assert "refused: you sent" in str(error)
    assert leaks("\n".join(texts), SECRET, client_id=CLIENT_ID) == []


# ---------------------------------------------------------------- an API that echoes the header


class EchoingApi:
    """Issues :data:`TOKEN`; a list answers, reads (and, when told, lists) echo Authorization."""

    def __init__(self) -> None:
        self.echo_lists = True

    def app(self) -> Starlette:
        async def token(request: Request) -> Response:
            body = await request.json()
            if body.get("client_secret") != SECRET:
                return outcome(401, "bad secret")
            return JSONResponse({"token_type": "Bearer", "expires_in": 900, "access_token": TOKEN})

        def echoed(request: Request) -> Response:
            header = request.headers.get("authorization", "")
            sent = header.removeprefix("Bearer ")
            text = f"bad request; Authorization: {header} ; {json.dumps(header)} ; {echo(sent)}"
            return outcome(400, text)

        async def listing(request: Request) -> Response:
            if self.echo_lists:
                return echoed(request)
            patient = {
                "resourceType": "Patient",
                "id": "1",
                "meta": {"lastUpdated": "2026-11-20T10:00:00Z"},
            }
            return JSONResponse(
                {
                    "resourceType": "Bundle",
                    "type": "searchset",
                    "total": 1,
                    "entry": [{"resource": patient}],
                    "link": [{"relation": "self", "url": str(request.url)}],
                }
            )

        async def read(request: Request) -> Response:
            return echoed(request)

        return Starlette(
            routes=[
                Route("/main/oauth/token", token, methods=["POST"]),
                Route("/main/Patient", listing, methods=["GET"]),
                Route("/main/Patient/{rid}", read, methods=["GET"]),
            ]
        )


@pytest.fixture
def echoing_api() -> Iterator[tuple[EchoingApi, str]]:
    api = EchoingApi()
    with serve(api.app()) as port:
        yield api, f"http://127.0.0.1:{port}/main"


def test_pmtk_sync_prints_and_stores_no_echoed_bearer_token(
    echoing_api: tuple[EchoingApi, str], tmp_path: Path
) -> None:
    _, base_url = echoing_api
    out = _existing_store(tmp_path / "store")
    result = _sync(base_url, out)
    assert result.exit_code == 1, result.output  # the API answered 400 (README, exit codes)
    assert "<redacted>" in result.output
    assert leaks(result.output, TOKEN) == []
    assert "<redacted>" in (out / "manifest.json").read_text()  # the error is recorded
    assert leaks(store_text(tmp_path), TOKEN) == []


def _notification(rid: str) -> bytes:
    status = {
        "resourceType": "SubscriptionStatus",
        "status": "active",
        "type": "event-notification",
        "notificationEvent": [
            {
                "eventNumber": "1",
                "timestamp": "2026-11-23T10:00:00Z",
                "focus": {"reference": f"Patient/{rid}"},
            }
        ],
    }
    return orjson.dumps(
        {"resourceType": "Bundle", "type": "history", "entry": [{"resource": status}]}
    )


def test_the_listener_logs_and_sets_aside_no_echoed_bearer_token(
    echoing_api: tuple[EchoingApi, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from toolkit.store import sync
    from toolkit.webhooks import listen

    api, base_url = echoing_api
    store = tmp_path / "store"
    caplog.set_level(logging.DEBUG)
    client = Client(
        base_url, CLIENT_ID, SECRET, progress=False, requests_per_minute=None, timeout=5
    )
    with client:
        api.echo_lists = False
        sync(client, store, resources=["Patient"])  # the store has a Patient table
        api.echo_lists = True
        with listen(store, client=client, port=0, catch_up=False, no_auth=True) as listener:
            answer = httpx.post(
                listener.url,
                content=_notification("1"),
                headers={"Content-Type": "application/fhir+json"},
            )
            assert answer.status_code == 202
            for _ in range(500):  # the worker applies (here: sets aside) in the background
                if listener.stats.failures:
                    break
                time.sleep(0.02)
            assert listener.stats.failures == 1
    import contextlib
    import sqlite3

    journal = store / ".webhooks" / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(journal)) as db:
        rows = db.execute("SELECT reason, last_error, event FROM changes WHERE state = 'dead'")
        files = "\n".join(str(row) for row in rows)
    assert files, "the event went to the dead letters with its reason"
    assert "<redacted>" in files
    assert leaks(files, TOKEN) == []
    assert leaks(store_text(store), TOKEN) == []
    assert "<redacted>" in caplog.text
    assert leaks(caplog.text, TOKEN) == []
    assert leaks("\n".join(r.getMessage() for r in caplog.records), TOKEN) == []


# ---------------------------------------------------------------- the redactor itself


def test_every_form_is_redacted_and_structures_before_serialising() -> None:
    redaction.register(SECRET, client_id=CLIENT_ID)
    text = echo(SECRET, client_id=CLIENT_ID)
    assert leaks(redaction.redact(text), SECRET, client_id=CLIENT_ID) == []
    data = {"outer": {"k": [SECRET, f"x{SECRET}y"]}, SECRET: 1}
    dumped = json.dumps(redaction.redact_json(data))
    assert leaks(dumped, SECRET) == []
    assert json.loads(dumped) == {"outer": {"k": ["<redacted>", "x<redacted>y"]}, "<redacted>": 1}


def test_log_lines_of_pmtk_loggers_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    redaction.register_token(TOKEN)
    caplog.set_level(logging.INFO)
    for name in redaction.LOGGERS:
        logging.getLogger(name).info("echo %s and %r", TOKEN, {"t": TOKEN})
    assert len(caplog.records) == len(redaction.LOGGERS)
    assert leaks(caplog.text, TOKEN) == []
    assert caplog.text.count("<redacted>") == 2 * len(redaction.LOGGERS)


def test_every_logger_pmtk_names_is_redacted() -> None:
    # A logger added later (a new module) must be on the list, or its lines go unredacted.
    import re

    root = Path(__file__).resolve().parents[2]
    names = set()
    for folder in ("toolkit", "contracts"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names |= set(re.findall(r"""getLogger\(\s*["']([\w.]+)["']\s*\)""", text))
            names |= set(re.findall(r"""redaction\.logger\(\s*["']([\w.]+)["']\s*\)""", text))
    names.discard("httpx")  # third-party, but on the list as well
    missing = sorted(n for n in names if n not in redaction.LOGGERS)
    assert missing == [], f"add {missing} to toolkit.redaction.LOGGERS"
