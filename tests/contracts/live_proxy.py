"""A live-shaped deployment for the contract tests: an ASGI proxy in front of the mock.

It is written from ``public-docs-facts.md`` ("Shapes seen on the live service"), not
from pmtk's reader: every JSON answer of the mock is rewritten into the live forms
(full canonical extension urls, coded values cycling through ``valueCoding``,
``valueCode`` and ``valueString``, the regional participant-status system, references
cycling through the relative, absolute and ``Type/id`` forms, Practitioner ``name`` as
an array, Patient usual and official names, ``limitQuantity.quantity`` as a Quantity,
``referralDefinition`` as a Reference with a display). It also swaps credentials: the
proxy's client secret and access tokens may hold any character (the mock's stay
plain), and a ``foreign_next`` resource gets a ``next`` link to another origin.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from toolkit.mock import Deployment

CANONICAL = "https://terminology.halaxy.com/StructureDefinition/"
STATUS_SYSTEM = "https://au-api.halaxy.com/presets/CodeSystem/appointment-participant-status"
LIVE_BASE = "https://au-api.halaxy.com"
LIVE_LACKS = (
    "/main/Patient/{id}",
    "/main/Invoice/{id}",
    "/main/HealthcareService/{id}",
    "/main/ReferralDefinition",
    "/main/ChargeItemDefinition",
    "/main/ChargeItemDefinition/{id}",
    "/main/Slot",
    "/main/Slot/{id}",
    "/main/Schedule/{id}",
)
"""The endpoints outside the spec that no public client is seen using live: the facts
name PractitionerRole (list, read), HealthcareService and Invoice (list),
ReferralDefinition (read), Schedule (list), metadata and Patient $export-ids, and
nothing else."""
_KEPT = ("content-type", "x-ratelimit-limit", "x-ratelimit-remaining", "retry-after")


@dataclass
class Proxy:
    """Rewriting state: the upstream mock, the swapped credentials and counters."""

    upstream: Deployment
    secret: str
    token_text: str
    foreign_next: dict[str, str] = field(default_factory=dict)
    metadata: bool = True
    """Pass ``/main/metadata`` through; ``False`` answers 404 like a deployment without one."""
    missing: tuple[str, ...] = ()
    """Paths the deployment does not serve (404), ``{id}`` standing for one id segment:
    ``("/main/ChargeItemDefinition", "/main/Patient/{id}")``."""
    tokens: dict[str, str] = field(default_factory=dict)
    origin: str = ""
    ref_forms: Iterator[int] = field(default_factory=lambda: itertools.cycle(range(3)))
    code_keys: Iterator[str] = field(
        default_factory=lambda: itertools.cycle(("valueCoding", "valueCode", "valueString"))
    )

    # ------------------------------------------------------------------ rewriting

    def reference(self, text: str) -> str:
        form = next(self.ref_forms)
        if form == 1:
            return LIVE_BASE + text
        if form == 2:
            return text.removeprefix("/main/")
        return text

    def extension(self, ext: dict[str, Any]) -> dict[str, Any]:
        name = ext.get("url")
        if not isinstance(name, str) or "/" in name:
            return ext
        out = {**ext, "url": CANONICAL + name}
        if name == "appointment-participant-status" and isinstance(ext.get("valueCoding"), dict):
            out["valueCoding"] = {"system": STATUS_SYSTEM, **ext["valueCoding"]}
        elif name == "patient-status" and "valueCode" in ext:
            out["valueString"] = out.pop("valueCode")
        elif name == "location-type" and "valueCode" in ext:
            code = out.pop("valueCode")
            key = next(self.code_keys)
            out[key] = {"code": code, "display": code.title()} if key == "valueCoding" else code
        return out

    def resource(self, res: dict[str, Any]) -> dict[str, Any]:
        kind = res.get("resourceType")
        if kind == "Practitioner" and isinstance(res.get("name"), dict):
            res["name"] = [{"use": "official", **res["name"]}]
        if kind == "Patient" and isinstance(res.get("name"), list) and res["name"]:
            first = res["name"][0]
            res["name"] = [{**first, "use": "official"}, {**first, "use": "usual"}]
        if kind == "Referral":
            limit = res.get("limitQuantity")
            if isinstance(limit, dict) and isinstance(limit.get("quantity"), int):
                limit["quantity"] = {"value": limit["quantity"]}
            if isinstance(res.get("referralDefinition"), str):
                res["referralDefinition"] = {"display": res["referralDefinition"]}
        return res

    def rewrite(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.rewrite(v) for v in node]
        if not isinstance(node, dict):
            return node
        node = {k: self.rewrite(v) for k, v in node.items()}
        if isinstance(node.get("reference"), str) and node["reference"].startswith("/main/"):
            node["reference"] = self.reference(node["reference"])
        if "url" in node and any(k.startswith("value") for k in node):
            node = self.extension(node)
        if "resourceType" in node:
            node = self.resource(node)
        return node

    def bundle_links(self, body: dict[str, Any], resource: str) -> None:
        up = self.upstream.base_url.removesuffix("/main")
        for link in body.get("link") or []:
            if isinstance(link.get("url"), str):
                link["url"] = link["url"].replace(up, self.origin)
                if link.get("relation") == "next" and resource in self.foreign_next:
                    link["url"] = self.foreign_next[resource]

    def lacks(self, path: str) -> bool:
        for pattern in self.missing:
            head, _, tail = pattern.partition("{id}")
            if path == pattern:
                return True
            if tail == "" and head and path.startswith(head):
                rest = path[len(head) :]
                if rest and "/" not in rest and not rest.startswith("$"):
                    return True
        return False

    # ------------------------------------------------------------------ ASGI

    async def handle(self, request: Request) -> Response:
        path = request.url.path
        if (path == "/main/metadata" and not self.metadata) or self.lacks(path):
            path = "/main/NoSuchPath"  # the upstream's 404 OperationOutcome, headers and all
        body = await request.body()
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "authorization")
        }
        auth = request.headers.get("authorization")
        if auth:
            bearer = auth.removeprefix("Bearer ")
            headers["authorization"] = f"Bearer {self.tokens.get(bearer, bearer)}"
        if path.endswith("/oauth/token") and body:
            data = json.loads(body)
            if data.get("client_secret") == self.secret:
                data["client_secret"] = self.upstream.client_secret
            body = json.dumps(data).encode()
        url = self.upstream.base_url.removesuffix("/main") + path
        with httpx.Client(timeout=30) as client:
            up = client.request(
                request.method, url, params=request.query_params, content=body, headers=headers
            )
        content = up.content
        out_headers = {k: v for k, v in up.headers.items() if k.lower() in _KEPT}
        if "json" in up.headers.get("content-type", "") and content and "/_test/" not in path:
            data = json.loads(content)
            if path.endswith("/oauth/token") and isinstance(data.get("access_token"), str):
                fake = f"{self.token_text}{len(self.tokens)}"
                self.tokens[fake] = data["access_token"]
                data["access_token"] = fake
            elif isinstance(data, dict):
                data = self.rewrite(data)
                if data.get("resourceType") == "Bundle":
                    self.bundle_links(data, path.rsplit("/", 1)[-1])
            content = json.dumps(data, ensure_ascii=False).encode()
        return Response(content, status_code=up.status_code, headers=out_headers)


@contextmanager
def run_app(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (free port) in a thread; yield its origin."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            msg = "test server did not start"
            raise RuntimeError(msg)
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def live_proxy(
    upstream: Deployment,
    *,
    secret: str,
    token_text: str,
    foreign_next: dict[str, str] | None = None,
    metadata: bool = True,
    missing: tuple[str, ...] = (),
) -> Iterator[str]:
    """Serve the proxy; yield its base URL (with ``/main``)."""
    proxy = Proxy(upstream, secret, token_text, dict(foreign_next or {}), metadata, missing)
    methods = ["GET", "POST", "PATCH", "PUT", "DELETE"]
    app = Starlette(routes=[Route("/{path:path}", proxy.handle, methods=methods)])
    with run_app(app) as origin:
        proxy.origin = origin
        yield f"{origin}/main"


@contextmanager
def recording_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A server on another port that records every request it gets (headers included)."""
    seen: list[dict[str, str]] = []

    async def record(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response("{}", media_type="application/fhir+json")

    app = Starlette(routes=[Route("/{path:path}", record, methods=["GET", "POST"])])
    with run_app(app) as origin:
        yield origin, seen
