"""OAuth 2.0 client credentials as an :class:`httpx.Auth`.

The flow is the one of spec section 5: a JSON ``POST {base}/oauth/token``, then
``Authorization: Bearer <token>`` on every request. The token is fetched lazily,
kept for ``min(expires_in, 900) - 60`` seconds (the stated 15-minute lifetime
wins over ``expires_in: 3600``), and on a 401 a new token is fetched once and
the request replayed once. A 401 means the server did not act on the request,
so replaying even a POST is safe.

An ``expires_in`` that is unusable is never taken at its word (:func:`token_lifetime`):
missing or not a finite number (``"NaN"``, ``"soon"``, ``null``, ``true``) means the
documented 900 s; a number under :data:`MIN_TOKEN_LIFETIME` (60 s, including 0 and
negatives) is raised to it. Overestimating costs one 401 and one replay when the
token really ends; underestimating would cost a token request per API request.

The secret is registered with :mod:`toolkit.redaction` when the auth is built, and
each token as it is issued, so that neither reaches a message, log or file even
when a server echoes it back.

Refresh is guarded by a lock: when eight threads find the token stale at once,
one of them fetches and the others reuse its token.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import httpx
import orjson

from toolkit import catalogue, redaction
from toolkit.config import Secret
from toolkit.errors import AuthError, ConfigurationError, RedirectRefused, error_for_status

__all__ = ["EXPIRY_MARGIN", "MIN_TOKEN_LIFETIME", "ClientCredentialsAuth", "token_lifetime"]

EXPIRY_MARGIN = 60.0
"""Seconds before the computed expiry at which a token is no longer used."""

MIN_TOKEN_LIFETIME = 60.0
"""The shortest lifetime a token is given, whatever its ``expires_in`` says."""


def token_lifetime(expires_in: object) -> tuple[float, str | None]:
    """The lifetime pmtk gives a token, and why it differs from ``expires_in`` (or ``None``).

    Examples
    --------
    >>> token_lifetime(3600)
    (900.0, None)
    >>> token_lifetime(0)
    (60.0, 'expires_in 0 is under 60 s; raised to 60 s')
    >>> token_lifetime("NaN")
    (900.0, "expires_in 'NaN' is not a finite number; the documented 900 s is used")
    """
    stated = float(catalogue.TOKEN_LIFETIME_STATED)
    if expires_in is None:
        return stated, f"expires_in is missing; the documented {stated:g} s is used"
    value: float | None = None
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        value = float(expires_in)
    elif isinstance(expires_in, str):
        try:
            value = float(expires_in.strip())
        except ValueError:
            value = None
    if value is None or not math.isfinite(value):
        shown = repr(expires_in)[:40]
        why = f"expires_in {shown} is not a finite number; the documented {stated:g} s is used"
        return stated, why
    if value < MIN_TOKEN_LIFETIME:
        return MIN_TOKEN_LIFETIME, (
            f"expires_in {value:g} is under {MIN_TOKEN_LIFETIME:g} s; "
            f"raised to {MIN_TOKEN_LIFETIME:g} s"
        )
    return min(value, stated), None


def outcome_details(
    response: httpx.Response,
) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """``(code, diagnostics, outcome)`` from an OperationOutcome body, if there is one."""
    try:
        body = orjson.loads(response.content) if response.content else None
    except orjson.JSONDecodeError:
        return None, None, None
    if not isinstance(body, dict) or body.get("resourceType") != "OperationOutcome":
        return None, None, None
    issues = body.get("issue") or [{}]
    first = issues[0] if isinstance(issues[0], dict) else {}
    code = first.get("code")
    diagnostics = first.get("diagnostics") or (first.get("details") or {}).get("text")
    return (
        code if isinstance(code, str) else None,
        diagnostics if isinstance(diagnostics, str) else None,
        body,
    )


MAX_TOKEN_CHARS = 16 * 1024
"""Longest ``access_token`` accepted. A bearer token travels in the ``Authorization``
header, and servers refuse request heads past 8 to 32 KiB (nginx 8 KiB a header line,
Node.js 16 KiB, the mock 32 KiB), so a longer token could never be sent; refusing it
at once also keeps a hostile token endpoint from making every later log line and
error message search for megabytes (the redaction of :mod:`toolkit.redaction`)."""


def unsendable(token: str) -> str | None:
    """Why ``token`` cannot be sent as a bearer token (``None``: it can). The message
    gives its length and the place of a bad character, never the token."""
    if len(token) > MAX_TOKEN_CHARS:
        return (
            f"the token response's access_token is {len(token):,} characters long; a bearer "
            f"token must fit in a request header (pmtk accepts at most {MAX_TOKEN_CHARS:,})"
        )
    bad = re.search(r"[^!-~]", token)
    if bad is not None:
        what = "a space" if bad.group() == " " else "a control or non-ASCII character"
        return (
            f"the token response's access_token has {what} at position {bad.start()}; "
            "a bearer token is visible ASCII only (RFC 6750)"
        )
    return None


class ClientCredentialsAuth(httpx.Auth):
    """Bearer-token authentication with lazy fetch, timed reuse and one 401 replay.

    Parameters
    ----------
    token_url
        The token endpoint, ``{base_url}/oauth/token``.
    client_id
        The API key's client id.
    client_secret
        The API key's client secret (a :class:`~toolkit.config.Secret` or a string).
    user_agent
        Sent on the token request too; the API refuses requests without one.
    clock
        Monotonic clock in seconds (injectable for tests).

    Notes
    -----
    ``token_requests`` counts the token fetches, ``replays`` the 401 replays.
    Neither the secret nor the token appears in ``repr`` or in any message.
    """

    requires_response_body = True

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: Secret | str,
        *,
        user_agent: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token_url = token_url
        self.client_id = client_id
        self._secret = client_secret if isinstance(client_secret, Secret) else Secret(client_secret)
        redaction.register(self._secret.reveal(), client_id=client_id)
        self.user_agent = user_agent
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Secret | None = None
        self._expires_at = 0.0
        self.token_requests = 0
        self.replays = 0
        self.lifetime_note: str | None = None
        """Why the last token's lifetime differs from its ``expires_in`` (``None``: it does not)."""

    def __repr__(self) -> str:
        state = "valid" if self._current() is not None else "none"
        return (
            f"{type(self).__name__}(token_url={self.token_url!r}, "
            f"client_id={self.client_id!r}, token=<{state}>)"
        )

    # ------------------------------------------------------------------ token cache

    def _current(self) -> Secret | None:
        if self._token is not None and self._clock() < self._expires_at:
            return self._token
        return None

    def invalidate(self) -> None:
        """Forget the cached token; the next request fetches a new one."""
        with self._lock:
            self._token = None
            self._expires_at = 0.0

    def _token_request(self) -> httpx.Request:
        body = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self._secret.reveal(),
        }
        return httpx.Request(
            "POST",
            self.token_url,
            content=orjson.dumps(body),
            headers={
                "Accept": catalogue.FHIR_JSON,
                "Content-Type": "application/json",
                "User-Agent": self.user_agent,
            },
        )

    def _store(self, response: httpx.Response) -> Secret:
        """Keep the token of a 200 answer, with its expiry; raise a typed error otherwise."""
        self._refuse_failed_answer(response)
        token, expires_in = self._token_of(response)
        redaction.register_token(token)
        lifetime, self.lifetime_note = token_lifetime(expires_in)
        # A short-lived token keeps at least half its life rather than none.
        usable = lifetime - EXPIRY_MARGIN if lifetime > 2 * EXPIRY_MARGIN else lifetime / 2
        self._token = Secret(token)
        self._expires_at = self._clock() + usable
        return self._token

    def _refuse_failed_answer(self, response: httpx.Response) -> None:
        """Raise for a redirect, a wrong base URL (404/405) or any other non-200 answer."""
        if 300 <= response.status_code < 400:
            # The token POST carries the secret: it is never sent on to a Location.
            location = response.headers.get("location")
            raise RedirectRefused(
                response.status_code,
                method="POST",
                url=self.token_url,
                diagnostics=(
                    f"the token endpoint redirects to {location[:300]!r}; a POST carrying the "
                    "secret is not followed. Set PM_BASE_URL to the address the API answers at"
                    if location
                    else "the token endpoint answered a redirect without a Location"
                ),
                location=location,
            )
        if response.status_code in (404, 405):
            # Nothing answers at {base}/oauth/token: the address is wrong, not the key.
            msg = (
                f"the token endpoint {self.token_url} answered {response.status_code}: the "
                "base URL is not the API's address. Set PM_BASE_URL (or base_url=) to the "
                f"regional address including {catalogue.API_PREFIX}, for example "
                f"{catalogue.REGIONS['au']}"
            )
            raise ConfigurationError(msg)
        if response.status_code != 200:
            code, diagnostics, outcome = outcome_details(response)
            cls = error_for_status(response.status_code)
            if response.status_code in (400, 401, 403):
                cls = AuthError
            raise cls(
                response.status_code,
                method="POST",
                url=self.token_url,
                code=code,
                diagnostics=diagnostics or "the token request was refused; check the credentials",
                outcome=outcome,
            )

    def _token_of(self, response: httpx.Response) -> tuple[str, Any]:
        """The ``access_token`` (a non-empty string) and ``expires_in`` of a 200 answer."""
        try:
            payload = orjson.loads(response.content)
            token = payload["access_token"]
            expires_in = payload.get("expires_in")
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise AuthError(
                response.status_code,
                method="POST",
                url=self.token_url,
                diagnostics="the token response has no usable access_token",
            ) from None
        if not isinstance(token, str) or not token:
            raise AuthError(
                response.status_code,
                method="POST",
                url=self.token_url,
                diagnostics="the token response has an empty access_token",
            )
        problem = unsendable(token)
        if problem is not None:
            raise AuthError(
                response.status_code, method="POST", url=self.token_url, diagnostics=problem
            )
        return token, expires_in

    def _fresh_token(
        self, stale: Secret | None
    ) -> Generator[httpx.Request, httpx.Response, Secret]:
        """The valid token, fetching one under the lock unless another thread just did.

        ``stale`` is a token the server refused: it is not reused even if the
        local clock still thinks it valid.
        """
        # The lock is held across the yield: in the sync flow the same thread
        # sends the token request and resumes the generator at once, and httpx
        # closes the flow in a ``finally`` (releasing the lock) if the send fails.
        with self._lock:
            token = self._current()
            if token is not None and token != stale:
                return token
            self.token_requests += 1
            response = yield self._token_request()
            return self._store(response)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Attach the token; on a 401 fetch a new token once and replay the request."""
        token = self._current()
        if token is None:
            token = yield from self._fresh_token(None)
        request.headers["Authorization"] = f"Bearer {token.reveal()}"
        response = yield request
        if response.status_code != 401:
            return
        token = yield from self._fresh_token(token)
        self.replays += 1
        request.headers["Authorization"] = f"Bearer {token.reveal()}"
        yield request
