"""Run the mock on 127.0.0.1 in a background thread: :func:`serve`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from toolkit._protocol import Limits, guarded_config
from toolkit._serving import start
from toolkit.errors import ConfigurationError
from toolkit.mock.app import create_app, release_slot
from toolkit.mock.state import MockOptions, MockState
from toolkit.mock.webhooks import WebhookSender, split_header

__all__ = ["HOST", "Deployment", "serve"]

HOST = "127.0.0.1"
"""The only address the mock ever listens on."""
START_TIMEOUT = 60.0


class Deployment:
    """A running mock: where it is, the demo credentials and (optionally) test controls."""

    def __init__(self, state: MockState, port: int) -> None:
        self._state = state
        self.port = port
        self.base_url = f"http://{HOST}:{port}/main"
        self.client_id = state.client_id
        self.client_secret = state.client_secret
        self.options = state.options

    def __repr__(self) -> str:  # never shows the secret
        return f"Deployment(base_url={self.base_url!r}, client_id={self.client_id!r})"

    def _controls(self) -> MockState:
        if not self._state.options.test_controls:
            msg = "test controls are off; start the mock with test_controls=True"
            raise ConfigurationError(msg)
        return self._state

    def advance_clock(self, seconds: float) -> dict[str, Any]:
        """Move the virtual clock forward (token expiry and rate windows follow it)."""
        return self._controls().advance_clock(seconds)

    def reset_rate_limit(self) -> None:
        """Empty every client's sliding window."""
        self._controls().reset_rate_limit()

    def set_fault(self, name: str | None) -> None:
        """Switch the active fault profile (``None`` for a faithful mock)."""
        try:
            self._controls().set_fault(name)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    def stats(self) -> dict[str, Any]:
        """Request counters: ``requests``, ``responses_by_status``, ``requests_by_path``."""
        return self._controls().stats()

    def reset_stats(self) -> None:
        self._controls().reset_stats()

    def touch(self, rtype: str, ids: list[str]) -> dict[str, Any]:
        """Touch records now: ``meta.lastUpdated`` becomes now, and they move last in lists."""
        try:
            return self._controls().touch(rtype, ids)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    def touch_after(self, rtype: str, ids: list[str], after_list_requests: int) -> dict[str, Any]:
        """Touch records right after the ``after_list_requests``-th list page of ``rtype``."""
        try:
            return self._controls().arm_touch(rtype, ids, after_list_requests)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    def pending_touches(self) -> dict[str, Any]:
        """The armed touches not yet fired."""
        return self._controls().pending()

    def clear_touches(self) -> None:
        """Disarm every pending touch."""
        self._controls().clear_triggers()

    def delete(self, rtype: str, ids: list[str]) -> dict[str, Any]:
        """Delete records as a user of the product would; announced by webhook."""
        try:
            return self._controls().delete(rtype, ids, release_slot=release_slot)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    def webhooks_sent(self, timeout: float = 10.0) -> bool:
        """Wait until every announcement was delivered (true) or ``timeout`` passed."""
        sender = self._state.webhooks
        return True if sender is None else sender.wait_sent(timeout)

    def webhook_stats(self) -> dict[str, int]:
        """``sent``, ``retries``, ``refused``, ``dropped`` and ``pending`` (queued or in
        flight) announcements, and ``most_in_flight`` (the most delivered at once)."""
        sender = self._state.webhooks
        if sender is None:
            return {
                "sent": 0,
                "retries": 0,
                "refused": 0,
                "dropped": 0,
                "pending": 0,
                "most_in_flight": 0,
            }
        return {
            "sent": sender.sent,
            "retries": sender.retries,
            "refused": sender.refused,
            "dropped": sender.dropped,
            "pending": sender.pending(),
            "most_in_flight": sender.most_in_flight,
        }


def build_state(**options: Any) -> MockState:
    """A :class:`MockState` from keyword options, with a ConfigurationError for bad ones."""
    try:
        return MockState(MockOptions(**options))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"bad mock option: {exc}") from None


def _server_config(state: MockState, *, port: int, log_level: str) -> uvicorn.Config:
    """The uvicorn settings of the mock: loopback, its limits, no access log or lifespan."""
    opts = state.options
    limits = Limits(
        max_header_bytes=opts.max_header_bytes,
        header_timeout=opts.header_timeout,
        body_timeout=opts.body_timeout,
        clock=state.now,
    )
    # httptools with the head-size limit and deadlines uvicorn lacks (toolkit/_protocol.py)
    return guarded_config(
        create_app(state),
        limits,
        host=HOST,
        port=port,
        log_level=log_level,
        timeout_keep_alive=opts.timeout_keep_alive,
        limit_concurrency=opts.limit_concurrency,
        date_header=False,  # the app sends Date from the virtual clock
    )


@contextmanager
def serve(*, port: int = 0, log_level: str = "warning", **options: Any) -> Iterator[Deployment]:
    """Serve a mock deployment on 127.0.0.1 until the ``with`` block ends.

    ``port=0`` picks a free port. Other options are those of
    :class:`toolkit.mock.state.MockOptions`: ``seed``, ``scale``, ``shapes``
    (``"live"`` or ``"spec"``), ``rate_limit``, ``token_lifetime``, ``expires_in``,
    ``test_controls``, ``fault``, ``max_body_bytes``, ``max_attachment_bytes``,
    ``max_depth``, ``max_header_bytes``, ``header_timeout``, ``body_timeout``,
    ``timeout_keep_alive``, ``limit_concurrency``, ``webhook`` (a loopback URL that
    receives an announcement of every write the live service announces),
    ``webhook_header`` (``"NAME:VALUE"`` sent with each) and ``webhook_concurrency``
    (announcements in flight at once, default 8).
    """
    state = build_state(**options)
    opts = state.options
    config = _server_config(state, port=port, log_level=log_level)
    running = start(config, name="pmtk-mock", what="the mock", timeout=START_TIMEOUT)
    bound = running.port
    if opts.webhook is not None:
        state.webhooks = WebhookSender(
            opts.webhook,
            split_header(opts.webhook_header),
            f"http://{HOST}:{bound}",
            concurrency=opts.webhook_concurrency,
        )
        state.webhooks.start()
    try:
        yield Deployment(state, bound)
    finally:
        if state.webhooks is not None:
            state.webhooks.stop()
        running.stop()
