"""Raw HTTP for the contract suite: one choke point with a budget, pacing and evidence.

The suite must see the deployment's own behaviour, so nothing here retries,
refreshes a token behind the caller's back or follows redirects. Every exchange
is recorded (redacted) so that a finding can carry its evidence and a curl line
that reproduces it. A run-wide request budget stops the suite before it can
exhaust a shared API key, and :meth:`Session.pace` waits when the deployment's
own ``x-ratelimit-remaining`` runs low, so passive checks never cause a 429.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from toolkit import catalogue as cat
from toolkit import redaction
from toolkit.redaction import REDACTED, secret_forms
from toolkit.throttle import RATE_LIMITED, WaitListener, remaining_reason

__all__ = [
    "DEFAULT_USER_AGENT",
    "BudgetExhausted",
    "Exchange",
    "ForeignOrigin",
    "Session",
    "Unreachable",
    "secret_forms",
]

DEFAULT_USER_AGENT = "pmtk-contracts/0.1 (pmtk@example.invalid)"
TOKEN_OPERATION = "POST /main/oauth/token"
PACE_RESERVE = 10
"""Requests kept in hand: below this many remaining, the suite waits for the window."""
BODY_EXCERPT = 1500
_KEPT_RESPONSE_HEADERS = (
    "content-type",
    *cat.RATE_LIMIT_HEADERS,
    cat.RETRY_AFTER_HEADER,
    "www-authenticate",
)


class BudgetExhausted(Exception):
    """The run-wide request budget is spent; the check cannot go on."""


class Unreachable(Exception):
    """The deployment did not answer at all (connection refused, DNS, timeout)."""


class ForeignOrigin(Exception):
    """A URL (a ``next`` link) leads off the configured origin, or from https to http.

    Raised before anything is sent: the suite never contacts another origin, with or
    without credentials.
    """


def origin_of(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port made explicit for http and https."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port


@dataclass
class Exchange:
    """One request and its response, as recorded for evidence and observations."""

    seq: int
    method: str
    url: str
    request_headers: dict[str, str]
    request_body: str | None
    status: int | None
    response_headers: dict[str, str]
    response_body: str
    elapsed: float
    epoch: int
    authenticated: bool
    operation: str
    json: Any = field(default=None, repr=False)

    def header(self, name: str) -> str | None:
        return self.response_headers.get(name.lower())

    def evidence(self) -> dict[str, Any]:
        body = self.response_body
        if len(body) > BODY_EXCERPT:
            body = body[:BODY_EXCERPT] + f"... ({len(self.response_body)} characters)"
        return {
            "request": {
                "method": self.method,
                "url": self.url,
                "headers": self.request_headers,
                "body": self.request_body,
            },
            "response": {
                "status": self.status,
                "headers": {
                    k: v for k, v in self.response_headers.items() if k in _KEPT_RESPONSE_HEADERS
                },
                "body": body,
            },
            "curl": self.curl(),
        }

    def curl(self) -> str:
        parts = ["curl", "-sS", "-i", "-X", self.method, shlex.quote(self.url)]
        for name, value in self.request_headers.items():
            if name.lower() == "authorization" and REDACTED in value:
                parts += ["-H", '"Authorization: Bearer $PM_ACCESS_TOKEN"']
            else:
                parts += ["-H", shlex.quote(f"{name}: {value}")]
        if self.request_body is not None:
            quoted = shlex.quote(self.request_body)
            quoted = quoted.replace(REDACTED, "'\"$PM_CLIENT_SECRET\"'")
            parts += ["--data", quoted]
        return " ".join(parts)


@dataclass
class TokenLife:
    """One token over the run: what it claimed and when the deployment first refused it."""

    number: int
    obtained_at: float
    """``time.monotonic()`` when it was issued (its age is measured from here)."""
    obtained_epoch: int
    expires_in: Any
    jwt_lifetime: int | None
    """``exp - iat`` of its JWT (None: not a JWT or no integer claims)."""
    requests: int = 0
    """Requests sent with it (the refused one included)."""
    refused_after_seconds: float | None = None
    refused_at_request: int | None = None
    """The number of the request (1-based) the deployment first refused it on."""
    refused_code: str | None = None
    refused_seq: int | None = None
    clock_moved: bool = False
    """The virtual clock moved while it was in use: its age on the server is unknown."""


@dataclass
class Token:
    access_token: str = field(repr=False)
    expires_in: Any
    token_type: Any
    obtained_epoch: int
    obtained_at: float
    life: TokenLife | None = field(default=None, repr=False)


class CascadeGuard:
    """Exchanges that one root cause spoiled, and the failures of other checks they caused.

    A root-cause check owns one fault of the deployment (:data:`ROOT_CAUSES`). The session
    marks the exchanges such a fault spoiled as it records them (a 401 on a token revoked
    early, a 5xx, a token endpoint that stops issuing tokens); a check that fails only on
    such exchanges, or whose finding names its cause (``Recorder.fail(..., cause=...)``),
    is not failed in its own category: its finding is grouped under the root cause
    (:meth:`group`), so one fault is reported once, where it belongs. At the end of the run
    a follow-on whose root check did not fail is given back to its own check
    (:meth:`ungrouped`): a finding is never hidden under a root that reports nothing.
    """

    def __init__(self) -> None:
        self.causes: dict[int, str] = {}
        self.follow_ons: dict[str, list[dict[str, Any]]] = {}
        self._evidence: dict[str, list[list[dict[str, Any]]]] = {}
        self.active: set[str] | None = None
        """Root-cause checks selected in this run (None: all); a cause whose check does not
        run groups nothing, so no finding is hidden under a check that is not reported."""

    def mark(self, ex: Exchange, root: str) -> None:
        """``ex`` was spoiled by ``root``'s fault (the first cause marked is kept)."""
        self.causes.setdefault(ex.seq, root)

    def cause_of(self, ex: Exchange) -> str | None:
        return self.causes.get(ex.seq)

    def runs(self, root: str) -> bool:
        """Whether ``root`` is a check of this run (findings may be grouped under it)."""
        return self.active is None or root in self.active

    def root_of(self, exchanges: tuple[Exchange | None, ...]) -> str | None:
        """The root cause of a finding whose every exchange that cause spoiled, else None."""
        given = [ex for ex in exchanges if ex is not None]
        if not given:
            return None
        roots = {self.causes.get(ex.seq) for ex in given}
        if len(roots) != 1 or None in roots:
            return None
        root = roots.pop()
        if root is None or not self.runs(root):
            return None
        return root

    def group(
        self,
        root: str,
        check_id: str,
        category: str,
        message: str,
        evidence: list[dict[str, Any]] | None = None,
    ) -> None:
        self.follow_ons.setdefault(root, []).append(
            {"check": check_id, "category": category, "message": message}
        )
        self._evidence.setdefault(root, []).append(evidence or [])

    def ungrouped(self, failed: set[str]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """Take back every follow-on whose root check is not in ``failed``; return them
        (each with its evidence) so that they fail their own checks."""
        back = []
        for root in [r for r in self.follow_ons if r not in failed]:
            back += list(zip(self.follow_ons.pop(root), self._evidence.pop(root, []), strict=False))
        return back


TOKEN_ROOT_CAUSE = "token-lifetime.observed"
"""The check that owns a token refused before its stated lifetime."""
TOKEN_ENDPOINT_ROOT_CAUSE = "auth.tokens-issued"
"""The check that owns a token request with the run's own credentials answered without a
token (the endpoint failing mid-run): every check that then had no token is its follow-on."""
SERVER_ERROR_ROOT_CAUSE = "schema.server-errors"
"""The check that owns every 5xx answer of the run: a list, read or write that failed on
the server is that one finding, not a paging, write or data finding of its own."""
RATE_LIMIT_HEADERS_ROOT_CAUSE = "rate-limit.headers"
"""The check that owns responses without the ``x-ratelimit-*`` headers (the OpenAPI
document requires them too: schemathesis's missing-header failures are its follow-ons)."""
THROTTLED_ROOT_CAUSE = "rate-limit.paced"
"""The check that owns a 429 the suite ran into outside the burst probe, although it paces
on ``x-ratelimit-remaining``: the headers gave nothing (or too much) to pace on, and the
checks whose requests were refused are its follow-ons."""
NO_AUTH_ROOT_CAUSE = "auth.no-token-refused"
"""The check that owns a deployment answering requests that carry no token: a token still
accepted past its lifetime there says nothing about the token's lifetime."""
DATA_ROOT_CAUSES = {
    "prefix": "prefix.ids",
    "enum": "enum.values",
    "reference": "reference.shape",
    "format": "format.values",
    "schema": "schema.fields",
}
"""Per rule category, the data check (``<check>[<Type>]``) that owns a record breaking it:
a write read back differently because the deployment serves the field broken is its
follow-on."""
ROOT_CAUSES = (
    TOKEN_ROOT_CAUSE,
    TOKEN_ENDPOINT_ROOT_CAUSE,
    SERVER_ERROR_ROOT_CAUSE,
    RATE_LIMIT_HEADERS_ROOT_CAUSE,
    THROTTLED_ROOT_CAUSE,
    NO_AUTH_ROOT_CAUSE,
    *(f"{check}[R]" for check in DATA_ROOT_CAUSES.values()),
)
"""Every check findings of other checks can be grouped under (docs/contracts.md)."""


class Session:
    """HTTP to one deployment, with a request budget, pacing, token cache and a log."""

    def __init__(
        self,
        base_url: str,
        client_id: str,
        client_secret: str,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        budget: int = 300,
        timeout: float = 15.0,
        sleep: Any = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client_id = client_id
        self.client_secret = client_secret
        self.user_agent = user_agent
        self.budget = budget
        self.used = 0
        self.exempt_used = 0
        self.log: list[Exchange] = []
        self.epoch = 0
        self.waited = 0.0
        self._sleep = sleep
        self._listeners: list[WaitListener] = []
        self.add_secret(client_secret)
        self._token: Token | None = None
        self.started = time.monotonic()
        self.token_lives: list[TokenLife] = []
        self.throttled_after: dict[int, str | None] = {}
        """Per paced 429 (its ``seq``): the ``x-ratelimit-remaining`` of the answer before."""
        self.own_token_requests: list[int] = []
        """The ``seq`` of every token request sent with the configured secret."""
        self.cascade = CascadeGuard()
        self._http = httpx.Client(timeout=timeout, follow_redirects=False)
        self.test_controls = False
        self.may_probe_test_controls = False
        """Set by the suite for the embedded mock or ``--test-controls``: only then may a
        request go under ``/_test/`` (a deployment is never sent a probe of the mock's)."""

    # ------------------------------------------------------------------ plumbing

    @property
    def origin(self) -> str:
        """The base URL without the ``/main`` prefix (OpenAPI paths carry it)."""
        return self.base_url.removesuffix(cat.API_PREFIX)

    def url(self, path: str) -> str:
        """An absolute URL for ``path`` (``/Referral``), a ``/main/...`` path or a link."""
        path = path.strip()
        if path.startswith(("\\", "/\\")):
            # Browsers and some URL parsers read a backslash as a slash: keep that reading,
            # so that such a link is judged by the origin it would really reach.
            path = path.replace("\\", "/")
        if path.startswith("//"):
            return f"{urlsplit(self.base_url).scheme}:{path}"
        if "://" in path.split("?", 1)[0]:
            return path
        if path.startswith(cat.API_PREFIX + "/"):
            return urljoin(self.origin + "/", path.lstrip("/"))
        return self.base_url + "/" + path.lstrip("/")

    # Redaction is pmtk's one redactor (toolkit.redaction): what the suite registers
    # is removed from the client's messages too, and the reverse.

    def redact(self, text: str) -> str:
        """``text`` with every known secret, in every encoded form, replaced."""
        return redaction.redact(text)

    def redact_data(self, data: Any) -> Any:
        """A copy of JSON-like ``data`` with secrets removed from every string (keys too).

        Used before anything is serialised, so an escaped secret never needs finding.
        """
        return redaction.redact_json(data)

    def redact_body(self, body: str) -> str:
        """A request or response body redacted by structure: JSON, then form, then text."""
        return redaction.redact_body(body)

    def redact_url(self, url: str) -> str:
        """``url`` with secrets removed from its query values (decoded first) and elsewhere."""
        return redaction.redact_url(url)

    def add_secret(self, value: str, *, token: bool = False) -> None:
        """Register ``value`` (an issued token with ``token``) with pmtk's redactor."""
        if token:
            redaction.register_token(value)
        else:
            redaction.register(value, client_id=self.client_id)

    def check_origin(self, url: str) -> None:
        """Raise :class:`ForeignOrigin` unless ``url`` is on the configured origin."""
        if origin_of(url) != origin_of(self.base_url):
            msg = (
                f"{self.redact_url(url)!r} is not on the configured origin {self.origin!r}; "
                "not followed (credentials go only to the configured origin)"
            )
            raise ForeignOrigin(msg)

    def close(self) -> None:
        self._http.close()

    def new_epoch(self) -> None:
        """Mark a discontinuity (virtual clock moved, window reset): pacing data is stale."""
        self.epoch += 1

    @property
    def remaining_budget(self) -> int:
        return self.budget - self.used

    def last_remaining(self) -> int | None:
        for ex in reversed(self.log):
            if ex.epoch != self.epoch:
                return None
            if ex.authenticated and ex.status is not None:
                value = ex.header(cat.RATE_LIMIT_HEADERS[1])
                try:
                    return int(value) if value is not None else None
                except ValueError:
                    return None
        return None

    def subscribe(self, listener: WaitListener) -> Callable[[], None]:
        """Call ``listener(seconds, reason)`` before every rate-limit wait; returns the unsubscribe.

        The same hook as :meth:`toolkit.throttle.Throttle.subscribe`, so ``pmtk check``
        shows its waits as ``pmtk sync`` does. A listener's error never stops the wait.
        """
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _sleep_for(self, seconds: float, reason: str) -> None:
        """Announce, count in ``waited``, then sleep ``seconds``."""
        for listener in list(self._listeners):
            try:
                listener(seconds, reason)
            except Exception:  # a display that fails must not stop the run
                continue
        self.waited += seconds
        self._sleep(seconds)

    def wait(self, seconds: float, reason: str = RATE_LIMITED) -> None:
        """Sleep ``seconds`` (a 429's ``retry-after``), counted in ``waited``."""
        self._sleep_for(seconds, reason)

    def pace(self) -> None:
        """Wait while the deployment says fewer than PACE_RESERVE requests remain."""
        remaining = self.last_remaining()
        if remaining is None or remaining > PACE_RESERVE:
            return
        # A sliding window frees slots only as old requests age out; wait a slice of it and
        # let the next response say how much room there is.
        self._sleep_for(cat.RATE_LIMIT_WINDOW_SECONDS / 12, remaining_reason(remaining))

    # ------------------------------------------------------------------ requests

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        auth: str | None = "token",
        content_type: str = "application/json",
        exempt: bool = False,
        operation: str | None = None,
    ) -> Exchange:
        """Send one request and record it.

        ``auth``: ``"token"`` (the cached token), ``None`` (no Authorization),
        or a literal bearer value to send as is (malformed or forged tokens).
        ``exempt`` requests (test controls, the opt-in probes) do not use the budget.
        """
        self._spend(exempt=exempt)
        if auth != "token":
            return self._send(
                method, path, params, json_body, headers, auth, content_type, operation, None
            )
        token = self.token()
        ex = self._send(
            method, path, params, json_body, headers, auth, content_type, operation, token
        )
        if not exempt:
            self.throttled(ex)
        if not self.token_answered(token, ex):
            return ex
        # Refused before its time: a new token, and this request once more (as pmtk's
        # client does), so one early revocation does not spoil the checks that follow.
        self.forget_token()
        token = self.token()
        self._spend(exempt=exempt)
        retried = self._send(
            method, path, params, json_body, headers, auth, content_type, operation, token
        )
        self.token_answered(token, retried)
        if not exempt:
            self.throttled(retried)
        return retried

    def throttled(self, ex: Exchange) -> None:
        """Mark a 429 on a paced (budgeted) request: rate-limit.paced's finding.

        The burst probe's requests are exempt and never marked: their 429 is the probe's
        point. What the answer before said (``x-ratelimit-remaining``) is kept for the
        finding.
        """
        if ex.status != 429:
            return
        self.cascade.mark(ex, THROTTLED_ROOT_CAUSE)
        before = [e for e in self.log if e.seq < ex.seq and e.authenticated and e.status]
        said = before[-1].header(cat.RATE_LIMIT_HEADERS[1]) if before else None
        self.throttled_after[ex.seq] = said

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        json_body: Any,
        headers: Mapping[str, str] | None,
        auth: str | None,
        content_type: str,
        operation: str | None,
        token: Token | None,
    ) -> Exchange:
        bearer = token.access_token if token is not None else auth
        sent_headers = self._headers(
            bearer, content_type if json_body is not None else None, headers
        )
        content = json.dumps(json_body) if json_body is not None else None
        url = self.url(path)
        self.check_origin(url)
        started = time.monotonic()
        try:
            response = self._http.request(
                method, url, params=params, content=content, headers=sent_headers
            )
        except (httpx.TransportError, httpx.DecodingError) as exc:
            # A body that will not decode (broken gzip, an encoding not asked for) is as
            # unreadable as no answer: one line, not a library traceback in the report.
            msg = f"{method} {url}: {type(exc).__name__}: {exc}"
            raise Unreachable(self.redact(msg)) from exc
        elapsed = time.monotonic() - started
        return self.record(
            method,
            str(response.request.url),
            sent_headers,
            content,
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            response.text,
            elapsed,
            authenticated=token is not None,
            operation=operation or f"{method} {path.split('?')[0]}",
        )

    def _spend(self, *, exempt: bool) -> None:
        """Count one request against the budget (pacing first), or as exempt."""
        if exempt:
            self.exempt_used += 1
            return
        if self.used >= self.budget:
            msg = f"request budget of {self.budget} exhausted"
            raise BudgetExhausted(msg)
        self.pace()
        self.used += 1

    def _headers(
        self, bearer: str | None, content_type: str | None, extra: Mapping[str, str] | None
    ) -> dict[str, str]:
        """The request's headers: ours, then the caller's; an empty value drops a header."""
        sent: dict[str, str] = {"Accept": cat.FHIR_JSON, "User-Agent": self.user_agent}
        if content_type is not None:
            sent["Content-Type"] = content_type
        if bearer is not None:
            sent["Authorization"] = f"Bearer {bearer}"
        if extra:
            sent.update(extra)
        return {k: v for k, v in sent.items() if v}

    def record(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: str | None,
        status: int | None,
        response_headers: Mapping[str, str],
        text: str,
        elapsed: float,
        *,
        authenticated: bool,
        operation: str,
    ) -> Exchange:
        """Add an exchange made elsewhere (schemathesis) to the log, redacted."""
        shown = {
            self.redact(k): (
                f"Bearer {REDACTED}" if k.lower() == "authorization" else self.redact(v)
            )
            for k, v in headers.items()
        }
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        ex = Exchange(
            seq=len(self.log) + 1,
            method=method,
            url=self.redact_url(url),
            request_headers=shown,
            request_body=self.redact_body(body) if body is not None else None,
            status=status,
            response_headers={k: self.redact(v) for k, v in response_headers.items()},
            response_body=self.redact_body(text),
            elapsed=elapsed,
            epoch=self.epoch,
            authenticated=authenticated,
            operation=operation,
            json=parsed,
        )
        self.log.append(ex)
        if (
            status is not None
            and status >= 500
            and operation != TOKEN_OPERATION
            and "/_test/" not in url
        ):
            self.cascade.mark(ex, SERVER_ERROR_ROOT_CAUSE)
        return ex

    def get(self, path: str, **kwargs: Any) -> Exchange:
        return self.request("GET", path, **kwargs)

    # ------------------------------------------------------------------ tokens

    def request_token(
        self, *, secret: str | None = None, exempt: bool = False, remember: bool = True
    ) -> tuple[Exchange, Token | None]:
        """POST the token endpoint; with ``remember``, a good answer becomes the cached token."""
        body = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self.client_secret if secret is None else secret,
        }
        if secret is not None:
            self.add_secret(secret)
        ex = self.request(
            "POST",
            "/oauth/token",
            json_body=body,
            auth=None,
            exempt=exempt,
            operation=TOKEN_OPERATION,
        )
        data = ex.json if isinstance(ex.json, dict) else {}
        access = data.get("access_token")
        if secret is None:
            self.own_token_requests.append(ex.seq)
        if ex.status != 200 or not isinstance(access, str) or not access:
            if secret is None:
                # The run's own credentials, accepted at the start: a token endpoint that
                # stops issuing is auth.tokens-issued's one finding.
                self.cascade.mark(ex, TOKEN_ENDPOINT_ROOT_CAUSE)
            return ex, None
        self.add_secret(access, token=True)
        # The token itself was recorded before it was known to be secret.
        ex.response_body = self.redact_body(ex.response_body)
        token = Token(
            access_token=access,
            expires_in=data.get("expires_in"),
            token_type=data.get("token_type"),
            obtained_epoch=self.epoch,
            obtained_at=time.monotonic(),
        )
        if remember:
            token.life = TokenLife(
                number=len(self.token_lives) + 1,
                obtained_at=token.obtained_at,
                obtained_epoch=self.epoch,
                expires_in=token.expires_in,
                jwt_lifetime=_jwt_lifetime(access),
            )
            self.token_lives.append(token.life)
            self._token = token
        return ex, token

    def token_answered(self, token: Token, ex: Exchange) -> bool:
        """Count one request sent with the run's ``token``; True if it was refused early.

        A 401 on a token the session still holds as live (issued on this clock, younger
        than the lifetime it keeps one for) is recorded on the token's :class:`TokenLife`
        the first time, and the exchange is marked as spoiled by that root cause.
        """
        life = token.life
        if life is None:
            return False
        life.requests += 1
        if life.obtained_epoch != self.epoch:
            life.clock_moved = True
        if ex.status != 401 or life.clock_moved:
            return False
        if life.refused_at_request is None:
            life.refused_after_seconds = round(time.monotonic() - life.obtained_at, 1)
            life.refused_at_request = life.requests
            life.refused_code = _outcome_code(ex.json)
            life.refused_seq = ex.seq
        self.cascade.mark(ex, TOKEN_ROOT_CAUSE)
        return True

    def token(self) -> Token:
        """The cached token, fetched when absent or obtained before the last clock jump."""
        token = self._token
        lifetime = min(cat.TOKEN_LIFETIME_STATED, _int_or(token.expires_in if token else None))
        if (
            token is None
            or token.obtained_epoch != self.epoch
            or time.monotonic() - token.obtained_at > lifetime - 60
        ):
            ex, token = self.request_token()
            if token is None:
                msg = f"the token endpoint refused the configured credentials ({ex.status})"
                raise TokenRefused(msg, ex)
        return token

    def forget_token(self) -> None:
        self._token = None

    # ------------------------------------------------------------------ test controls

    def _controls_allowed(self) -> None:
        if not self.may_probe_test_controls:
            msg = "a /_test/ request to a target that is not a mock (no --test-controls)"
            raise RuntimeError(msg)

    def detect_test_controls(self) -> bool:
        self._controls_allowed()
        ex = self.request("GET", "/_test/fault", auth=None, exempt=True)
        self.test_controls = ex.status == 200 and isinstance(ex.json, dict)
        return self.test_controls

    def advance_clock(self, seconds: float) -> Exchange:
        self._controls_allowed()
        ex = self.request(
            "POST", "/_test/clock", json_body={"advance": seconds}, auth=None, exempt=True
        )
        self.new_epoch()
        return ex

    def reset_rate_limit(self) -> Exchange:
        self._controls_allowed()
        ex = self.request("POST", "/_test/rate-limit/reset", auth=None, exempt=True)
        self.new_epoch()
        return ex


class TokenRefused(Exception):
    """The configured credentials did not yield a token."""

    def __init__(self, message: str, exchange: Exchange) -> None:
        super().__init__(message)
        self.exchange = exchange


def _jwt_lifetime(access_token: str) -> int | None:
    """``exp - iat`` of an access token that is a JWT (read, not verified), else None."""
    import jwt

    try:
        claims = jwt.decode(access_token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp, iat = claims.get("exp"), claims.get("iat")
    if isinstance(exp, int) and isinstance(iat, int):
        return exp - iat
    return None


def _outcome_code(body: Any) -> str | None:
    """The first issue code of an OperationOutcome body (``expired``, ``login``)."""
    if not isinstance(body, dict):
        return None
    issues = body.get("issue")
    if isinstance(issues, list) and issues and isinstance(issues[0], dict):
        code = issues[0].get("code")
        return code if isinstance(code, str) else None
    return None


def _int_or(value: object, default: int = cat.TOKEN_LIFETIME_STATED) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default
