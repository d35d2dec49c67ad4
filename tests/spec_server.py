"""A small deployment written from the spec and the facts file, not from pmtk's mock.

``SpecDeployment`` serves, on 127.0.0.1 and a free port, the spec's token endpoint
(``POST /main/oauth/token``, JSON body, ``expires_in`` 3600) and, for each resource it
is given, ``GET /main/<Type>`` as a FHIR searchset Bundle (``total``, ``_count`` and
``page`` paging with absolute ``next`` links, as the live service pages) and
``GET /main/<Type>/<id>``. Everything else is a 404 OperationOutcome. Every request
is recorded (method, path with query, headers), so a test can prove what reached it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

CLIENT_ID = "spec-client-id-3f9a7c"
SECRET = "spec-secret-never-shown"
TOKEN = "spec-token-never-shown"
FHIR_JSON = "application/fhir+json"


@dataclass
class Seen:
    """One request that reached the server."""

    method: str
    target: str
    headers: dict[str, str]

    @property
    def path(self) -> str:
        return urlsplit(self.target).path


@dataclass
class SpecDeployment:
    """The server's data and what it saw; ``base_url`` once started."""

    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    client_id: str = CLIENT_ID
    client_secret: str = SECRET
    page_size: int = 100
    throttle_once: set[tuple[str, int]] = field(default_factory=set)
    """``(type, page)`` list pages answered 429 (``retry-after: 1``) the first time asked."""
    seen: list[Seen] = field(default_factory=list)
    base_url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def paths(self) -> list[str]:
        with self.lock:
            return [s.path for s in self.seen]

    # -- answers -------------------------------------------------------------------

    def answer(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """The status and JSON body of one request (429s come from :meth:`throttled`)."""
        with self.lock:
            self.seen.append(Seen(method, target, {k.lower(): v for k, v in headers.items()}))
        parts = urlsplit(target)
        segments = [s for s in parts.path.split("/") if s]
        if method == "POST" and segments == ["main", "oauth", "token"]:
            return self._token(body)
        if len(segments) < 2 or segments[0] != "main" or segments[1] not in self.records:
            return 404, _outcome("not-found", f"no route {parts.path}")
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, _outcome("login", "a bearer token is required")
        if method != "GET":
            return 405, _outcome("not-supported", f"{method} is not supported here")
        rtype = segments[1]
        if len(segments) == 3:
            for record in self.records[rtype]:
                if record.get("id") == segments[2]:
                    return 200, record
            return 404, _outcome("not-found", f"{rtype}/{segments[2]} does not exist")
        if len(segments) != 2:
            return 404, _outcome("not-found", f"no route {parts.path}")
        return 200, self._page(rtype, parse_qs(parts.query))

    def throttled(self, method: str, target: str) -> bool:
        """Whether this request is a list page to answer 429 once (then it is served)."""
        parts = urlsplit(target)
        segments = [s for s in parts.path.split("/") if s]
        if method != "GET" or len(segments) != 2:
            return False
        page = int(parse_qs(parts.query).get("page", ["1"])[0])
        with self.lock:
            key = (segments[1], page)
            if key in self.throttle_once:
                self.throttle_once.discard(key)
                return True
        return False

    def _token(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            form = json.loads(body or b"{}")
        except ValueError:
            return 400, {"error": "invalid_request"}
        if (
            not isinstance(form, dict)
            or form.get("grant_type") != "client_credentials"
            or form.get("client_id") != self.client_id
            or form.get("client_secret") != self.client_secret
        ):
            return 401, {"error": "invalid_client"}
        return 200, {"token_type": "Bearer", "expires_in": 3600, "access_token": TOKEN}

    def _page(self, rtype: str, query: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        count = max(1, min(int(query.get("_count", [str(self.page_size)])[0]), self.page_size))
        page = max(1, int(query.get("page", ["1"])[0]))
        every = self.records[rtype]
        # _lastUpdated (the facts: an incremental sync's filter), with FHIR's prefixes;
        # a filter applied is named in the self link, as FHIR's search rules ask
        since = query.get("_lastUpdated", [])
        for value in since:
            every = [r for r in every if _after(r["meta"]["lastUpdated"], value)]
        kept = "".join(f"&_lastUpdated={quote(v)}" for v in since)
        chunk = every[(page - 1) * count : page * count]
        url = f"{self.base_url}/{rtype}?_count={count}{kept}&page="
        link = [{"relation": "self", "url": f"{url}{page}"}]
        if page * count < len(every):
            link.append({"relation": "next", "url": f"{url}{page + 1}"})
        return {
            "resourceType": "Bundle",
            "type": "searchset",
            "total": len(every),
            "link": link,
            "entry": [
                {
                    "fullUrl": f"{self.base_url}/{rtype}/{r['id']}",
                    "resource": r,
                    "search": {"mode": "match"},
                }
                for r in chunk
            ],
        }


def _after(stamp: str, value: str) -> bool:
    """Whether ``stamp`` passes ``_lastUpdated=value`` (``ge``/``gt``/``le``/``lt``/``eq``)."""
    prefix, bound = (value[:2], value[2:]) if value[:2].isalpha() else ("eq", value)
    left = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    right = datetime.fromisoformat(bound.replace("Z", "+00:00"))
    return {
        "ge": left >= right,
        "gt": left > right,
        "le": left <= right,
        "lt": left < right,
        "eq": left == right,
    }[prefix]


def _outcome(code: str, text: str) -> dict[str, Any]:
    return {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": code, "diagnostics": text}],
    }


@contextmanager
def serve_spec(deployment: SpecDeployment) -> Iterator[SpecDeployment]:
    """Serve ``deployment`` on 127.0.0.1 (a free port) in a thread; always stopped."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            extra: dict[str, str] = {}
            if deployment.throttled(self.command, self.path):
                with deployment.lock:
                    deployment.seen.append(Seen(self.command, self.path, dict(self.headers)))
                status, payload = 429, _outcome("throttled", "rate limit exceeded")
                extra["Retry-After"] = "1"
            else:
                status, payload = deployment.answer(self.command, self.path, self.headers, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", FHIR_JSON)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _reply

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``deployment.seen`` instead."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    deployment.base_url = f"http://127.0.0.1:{server.server_address[1]}/main"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield deployment
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def invoice_line(rid: str, status: str = "unassigned") -> dict[str, Any]:
    """An InvoiceLine with the spec's fields (section 2.6); ``status`` from its enum."""
    return {
        "resourceType": "InvoiceLine",
        "id": rid,
        "meta": {"lastUpdated": "2026-03-01T10:00:00Z"},
        "status": status,
        "subject": {"reference": "/main/Patient/900001", "type": "Patient"},
    }


def appointment(rid: str) -> dict[str, Any]:
    """An Appointment with the spec's required ``start`` and ``end`` (section 2.2)."""
    return {
        "resourceType": "Appointment",
        "id": rid,
        "meta": {"lastUpdated": "2026-03-01T10:00:00Z"},
        "start": "2026-03-02T09:00:00Z",
        "end": "2026-03-02T09:30:00Z",
    }


def referral(rid: str, stamp: str = "2026-03-01T10:00:00Z") -> dict[str, Any]:
    """A Referral with the spec's fields (ids and references as section 2.1 shapes them)."""
    return {
        "resourceType": "Referral",
        "id": rid,
        "meta": {"lastUpdated": stamp},
        "active": True,
        "subject": {"reference": "/main/Patient/900001", "type": "Patient"},
        "created": "2026-02-01T09:00:00Z",
        "period": {"start": "2026-02-01", "end": "2027-02-01"},
    }
