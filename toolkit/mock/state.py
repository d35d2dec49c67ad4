"""Mutable state of one mock deployment: virtual clock, tokens, rate windows, faults, stats."""

from __future__ import annotations

import collections
import copy
import hmac
import math
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt

from toolkit import catalogue
from toolkit.mock.data import PracticeData, generate, iso
from toolkit.mock.data.slots import slot_changed
from toolkit.mock.faults import Fault, make_fault
from toolkit.mock.shapes import SHAPES, Shapes
from toolkit.mock.store import Collection, Record
from toolkit.mock.webhooks import DEFAULT_CONCURRENCY as DEFAULT_WEBHOOK_CONCURRENCY
from toolkit.mock.webhooks import WebhookSender, check_concurrency, check_target, split_header

__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "DEFAULT_MAX_BODY_BYTES",
    "MockOptions",
    "MockState",
    "TokenProblem",
]

CLIENT_ID = "pmtk-demo"
CLIENT_SECRET = "pmtk-demo-secret"
WINDOW_SECONDS = float(catalogue.RATE_LIMIT_WINDOW_SECONDS)

DEFAULT_MAX_BODY_BYTES = 4 * math.ceil(catalogue.MAX_ATTACHMENT_BYTES / 3) + 1024 * 1024
"""Largest request body: one maximum-size attachment in base64 (~266.7 MiB) plus 1 MiB."""
DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_HEADER_BYTES = 32 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 60.0
DEFAULT_LIMIT_CONCURRENCY = 128
MAX_TRIGGERS = 100
MAX_CLOCK_OFFSET = 100 * 365 * 86_400.0
"""The virtual clock stays within 100 years of real time (dates must stay printable)."""


@dataclass(frozen=True, slots=True)
class MockOptions:
    """Start-up options of a mock deployment (see ``docs/mock.md``)."""

    seed: int = 0
    scale: str = "small"
    rate_limit: int = catalogue.RATE_LIMIT_PER_MINUTE
    token_lifetime: int = catalogue.TOKEN_LIFETIME_STATED
    expires_in: int = catalogue.EXPIRES_IN_STATED
    test_controls: bool = False
    fault: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_attachment_bytes: int = catalogue.MAX_ATTACHMENT_BYTES
    shapes: Shapes = "live"
    """``live`` serves the forms seen on the live service, ``spec`` the spec's literal ones."""
    max_depth: int = DEFAULT_MAX_DEPTH
    """Deepest JSON nesting a written body may have (objects and arrays)."""
    webhook: str | None = None
    """Receiver of the announcements the live service sends (loopback URLs only)."""
    webhook_header: str | None = None
    """``NAME:VALUE`` of the authentication header sent with every announcement."""
    webhook_concurrency: int = DEFAULT_WEBHOOK_CONCURRENCY
    """Announcements in flight at once (1: one at a time, strictly in write order)."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """Largest request line plus headers; more gets 431 and the connection is closed."""
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    """Seconds a connection may take to send a whole request head (408, then closed)."""
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    """Seconds a request may take to send its whole body once the head is in (408)."""
    timeout_keep_alive: int = 5
    """Seconds an idle keep-alive connection stays open (uvicorn's option)."""
    limit_concurrency: int = DEFAULT_LIMIT_CONCURRENCY
    """Connections or requests in progress at once before 503 (uvicorn's option)."""


class TokenProblem(Exception):
    """Why a bearer token was refused; ``code`` is the OperationOutcome issue code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(slots=True)
class Trigger:
    """Touch ``ids`` of ``rtype`` once ``after`` more list pages of ``rtype`` were served."""

    rtype: str
    ids: tuple[str, ...]
    after: int
    seen: int = 0


@dataclass(slots=True)
class _Stats:
    requests: int = 0
    by_status: collections.Counter[str] = field(default_factory=collections.Counter)
    by_path: collections.Counter[str] = field(default_factory=collections.Counter)


class MockState:
    """Everything one running mock knows. Mutations hold :attr:`lock`."""

    def __init__(self, options: MockOptions) -> None:
        fault = make_fault(options.fault)  # ValueError naming the known profiles
        if options.rate_limit < 1:
            msg = "rate_limit must be at least 1"
            raise ValueError(msg)
        if options.shapes not in SHAPES:
            msg = f"unknown shapes {options.shapes!r}; choose {' or '.join(SHAPES)}"
            raise ValueError(msg)
        for name in ("max_depth", "max_header_bytes", "limit_concurrency", "timeout_keep_alive"):
            if getattr(options, name) < 1:
                msg = f"{name} must be at least 1"
                raise ValueError(msg)
        for name in ("header_timeout", "body_timeout"):
            if not getattr(options, name) > 0:
                msg = f"{name} must be a positive number of seconds"
                raise ValueError(msg)
        if options.webhook is not None:
            check_target(options.webhook)
        split_header(options.webhook_header)
        check_concurrency(options.webhook_concurrency)
        self.options = options
        self.webhooks: WebhookSender | None = None
        """Started by :func:`toolkit.mock.serve` when ``options.webhook`` is set."""
        self.data: PracticeData = generate(options.seed, options.scale, options.shapes)
        self.store = self.data.store
        self.lock = threading.RLock()
        self.offset = 0.0
        self.fault: Fault = fault
        """The active fault profile; its hooks keep the spec's behaviour when none is on."""
        self.client_id = CLIENT_ID
        self.client_secret = CLIENT_SECRET
        self._jwt_key = secrets.token_bytes(32)
        self._tokens: dict[str, tuple[str, int, int]] = {}
        self._token_uses: dict[str, int] = {}
        self._windows: dict[str, collections.deque[float]] = {}
        self.stats_data = _Stats()
        self.triggers: list[Trigger] = []
        self.data.grid.on_change = self._slot_changed

    def _slot_changed(self, role: int, unit: int) -> None:
        """A booking, PATCH, cancel or delete turned a grid unit taken or free: its Slot
        was written now (stamped and moved last in list order)."""
        slot_changed(self.store["Slot"], self.data.slots, role, unit, self.now())

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        """Virtual time: the real time plus the offset the test controls added."""
        return time.time() + self.offset

    def advance_clock(self, seconds: float) -> dict[str, Any]:
        """Move the virtual clock; raises ValueError beyond :data:`MAX_CLOCK_OFFSET`."""
        with self.lock:
            if not math.isfinite(seconds) or abs(self.offset + seconds) > MAX_CLOCK_OFFSET:
                msg = "the virtual clock must stay within 100 years of real time"
                raise ValueError(msg)
            self.offset += seconds
            return {"now": iso(self.now()), "offset": self.offset}

    # ------------------------------------------------------------------ faults
    def set_fault(self, name: str | None) -> None:
        """Switch profile ``name`` on (``None``: all off), with fresh every-Nth counters."""
        fault = make_fault(name)
        with self.lock:
            self.fault = fault

    # ------------------------------------------------------------------ tokens
    def check_credentials(self, client_id: str, client_secret: str) -> bool:
        id_ok = hmac.compare_digest(client_id.encode(), self.client_id.encode())
        if not self.fault.checks_secret:
            return id_ok
        secret_ok = hmac.compare_digest(client_secret.encode(), self.client_secret.encode())
        return id_ok and secret_ok

    def issue_token(self, client_id: str) -> str:
        issued = int(self.now())
        expires = issued + self.options.token_lifetime
        claims: dict[str, Any] = {
            "sub": client_id,
            "iat": issued,
            "exp": expires,
            "jti": uuid.uuid4().hex,
        }
        token = jwt.encode(claims, self._jwt_key, algorithm="HS256")
        with self.lock:
            if len(self._tokens) > 10_000:
                self._tokens.clear()
                self._token_uses.clear()
            self._tokens[token] = (client_id, issued, expires)
        return token

    def client_for(self, token: str) -> str:
        """The client id a token belongs to; raises :class:`TokenProblem` if refused."""
        entry = self._tokens.get(token)
        if entry is None:
            try:
                claims = jwt.decode(
                    token,
                    self._jwt_key,
                    algorithms=["HS256"],
                    options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
                )
                entry = (str(claims["sub"]), int(claims["iat"]), int(claims["exp"]))
            except (jwt.PyJWTError, KeyError, TypeError, ValueError):
                raise TokenProblem("login", "the access token is not valid") from None
        client, issued, expires = entry
        now = self.now()
        deadline = self.fault.token_deadline(issued, expires)
        if deadline is not None and now >= deadline:
            raise TokenProblem("expired", "the access token has expired")
        with self.lock:
            uses = self._token_uses.get(token, 0) + 1
            if len(self._token_uses) > 10_000:
                self._token_uses.clear()
            self._token_uses[token] = uses
        if self.fault.token_revoked(uses):
            raise TokenProblem("expired", "the access token has expired")
        return client

    # ------------------------------------------------------------------ rate limit
    def admit(self, client: str) -> tuple[bool, int, int]:
        """Count a request in the client's sliding window.

        Returns ``(allowed, remaining, retry_after)``. A refused request is not
        counted.
        """
        limit = self.options.rate_limit
        with self.lock:
            now = self.now()
            window = self._windows.setdefault(client, collections.deque())
            cutoff = now - WINDOW_SECONDS
            while window and window[0] <= cutoff:
                window.popleft()
            if len(window) >= limit and self.fault.enforces_rate_limit:
                retry = max(1, math.ceil(window[0] + WINDOW_SECONDS - now))
                return False, 0, retry
            window.append(now)
            return True, max(0, limit - len(window)), 0

    def reset_rate_limit(self) -> None:
        with self.lock:
            self._windows.clear()

    # ------------------------------------------------------------------ stats
    def record(self, route: str, status: int) -> None:
        """Count one request under its route template (bounded keys, not raw paths)."""
        with self.lock:
            self.stats_data.requests += 1
            self.stats_data.by_status[str(status)] += 1
            self.stats_data.by_path[route] += 1

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": self.stats_data.requests,
                "responses_by_status": dict(self.stats_data.by_status),
                "requests_by_path": dict(self.stats_data.by_path),
            }

    # ------------------------------------------------------------------ webhooks
    def announce(self, rtype: str, rid: str, action: str) -> None:
        """Queue the webhook the live service would send for this write (if any)."""
        if self.webhooks is not None:
            self.webhooks.announce(rtype, rid, action, self.now())

    # ------------------------------------------------------------------ changing collections
    def touch(self, rtype: str, ids: Sequence[str]) -> dict[str, Any]:
        """Rewrite ``meta.lastUpdated`` of records (now) and move them last in list order.

        Raises ValueError naming an unknown type or id (then nothing is touched).
        """
        with self.lock:
            coll = self._touchable(rtype, ids)
            now = self.now()
            for rid in ids:
                index = coll.pos[rid]
                record = copy.deepcopy(coll.record(index))
                record["meta"] = {**(record.get("meta") or {}), "lastUpdated": iso(now)}
                coll.replace(
                    index, record, updated=now, date=coll.date[index], owner=coll.owner[index]
                )
                coll.move_to_end(index)
                self.announce(rtype, rid, "update")
            return {"type": rtype, "touched": list(ids), "lastUpdated": iso(now)}

    def delete(
        self,
        rtype: str,
        ids: Sequence[str],
        *,
        release_slot: Callable[[MockState, Record], None],
    ) -> dict[str, Any]:
        """Delete records, as a user of the product would (the API has no delete).

        A deleted Appointment frees its slot: ``release_slot(state, record)`` frees
        it (the app's reading of an appointment's slot, passed in by the control that
        deletes; the state does not import the app). Raises ValueError naming an
        unknown type or id (then nothing is deleted).
        """
        with self.lock:
            coll = self._touchable(rtype, ids)
            for rid in dict.fromkeys(ids):
                record = coll.get(rid)
                coll.remove(rid)
                if rtype == "Appointment" and record is not None:
                    release_slot(self, record)
                self.announce(rtype, rid, "delete")
            return {"type": rtype, "deleted": list(dict.fromkeys(ids))}

    def _touchable(self, rtype: str, ids: Sequence[str]) -> Collection:
        coll = self.store.collections.get(rtype)
        if coll is None or rtype not in catalogue.LISTED_RESOURCES:
            listed = ", ".join(catalogue.LISTED_RESOURCES)
            msg = f"type must be a listed resource type ({listed}), got {rtype!r}"
            raise ValueError(msg)
        if not ids:
            msg = "ids must name at least one record"
            raise ValueError(msg)
        missing = [rid for rid in ids if rid not in coll.pos]
        if missing:
            msg = f"{rtype} has no record with id {', '.join(map(repr, missing[:5]))}"
            raise ValueError(msg)
        return coll

    def arm_touch(self, rtype: str, ids: Sequence[str], after: int) -> dict[str, Any]:
        """Touch ``ids`` right after the ``after``-th list page of ``rtype`` from now on."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 1:
            msg = f"after_list_requests must be an integer of at least 1, got {after!r}"
            raise ValueError(msg)
        with self.lock:
            self._touchable(rtype, ids)
            if len(self.triggers) >= MAX_TRIGGERS:
                msg = f"at most {MAX_TRIGGERS} touches may be armed at once"
                raise ValueError(msg)
            self.triggers.append(Trigger(rtype, tuple(ids), after))
            return self.pending()

    def pending(self) -> dict[str, Any]:
        """The armed touches: ``{"armed": [{type, ids, after_list_requests, seen}]}``."""
        with self.lock:
            armed = [
                {
                    "type": t.rtype,
                    "ids": list(t.ids),
                    "after_list_requests": t.after,
                    "seen": t.seen,
                }
                for t in self.triggers
            ]
            return {"armed": armed}

    def clear_triggers(self) -> None:
        with self.lock:
            self.triggers.clear()

    def list_served(self, rtype: str) -> None:
        """Count a served list page of ``rtype``; fire the touches that are due."""
        with self.lock:
            if not self.triggers:
                return
            due = []
            for t in self.triggers:
                if t.rtype == rtype:
                    t.seen += 1
                    if t.seen >= t.after:
                        due.append(t)
            for t in due:
                self.triggers.remove(t)
                self.touch(t.rtype, t.ids)

    def reset_stats(self) -> None:
        with self.lock:
            self.stats_data = _Stats()
