"""The embedded mock deployment: what :func:`toolkit.connect` talks to when nothing is configured.

It starts once per process, in a background thread, and stops at interpreter exit.
:data:`EMBEDDED` holds it while it runs, so that the store and the notebooks can
tell a client of it from a client of a configured deployment
(:mod:`toolkit.store.identity`, :mod:`toolkit.notebook_target`). Like the rest of
the mock, it never imports the client, and it loads the mock's server only when
it starts one, so that ``import toolkit.client`` loads no uvicorn.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from contextlib import ExitStack
from typing import Any

__all__ = ["EMBEDDED", "MOCK_USER_AGENT", "start_for"]

_EMBEDDED_LOCK = threading.Lock()
EMBEDDED: dict[str, Any] = {}  # the embedded mock this process started: connect()


MOCK_USER_AGENT = "pmtk (embedded mock)"
"""The user agent sent to the embedded mock when none is configured (no warning then)."""


def _embedded_mock() -> Any:
    """Start the embedded mock once per process; it stops at interpreter exit."""
    with _EMBEDDED_LOCK:
        dep = EMBEDDED.get("deployment")
        if dep is None:
            # The server (uvicorn, Starlette, the synthetic practice) loads here, on
            # first use: importing the client loads none of it.
            from toolkit.mock.server import serve

            stack = ExitStack()
            dep = stack.enter_context(serve())
            atexit.register(stack.close)
            EMBEDDED["deployment"] = dep
            EMBEDDED["stack"] = stack
        return dep


def start_for(kwargs: dict[str, Any]) -> Any:
    """The embedded mock, started if need be, for a client of the keyword arguments ``kwargs``.

    Says so in one line on stderr, and fills ``kwargs`` in: the mock's demo
    credentials where none were given, and :data:`MOCK_USER_AGENT` when no user
    agent is configured (``user_agent=`` or ``PM_USER_AGENT``).
    """
    dep = _embedded_mock()
    # A notice, not data: stderr, so that piped output stays clean.
    print(
        "pmtk: nothing configured (no PM_BASE_URL); using the embedded mock deployment "
        f"at {dep.base_url}",
        file=sys.stderr,
    )
    kwargs.setdefault("client_id", dep.client_id)
    kwargs.setdefault("client_secret", dep.client_secret)
    if not (kwargs.get("user_agent") or os.environ.get("PM_USER_AGENT")):
        kwargs["user_agent"] = MOCK_USER_AGENT
    return dep
