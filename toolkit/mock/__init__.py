"""The mock deployment: a real HTTP server that behaves like the practice-management API.

>>> from toolkit.mock import serve
>>> with serve(seed=0, scale="small") as dep:  # doctest: +SKIP
...     dep.base_url

See ``docs/mock.md`` for options, data and fault profiles. The mock shares only
the catalogue with the client; it never imports ``toolkit.client``.
"""

from __future__ import annotations

from toolkit.mock.faults import FAULT_PROFILES, FaultProfile
from toolkit.mock.server import Deployment, serve
from toolkit.mock.state import CLIENT_ID, CLIENT_SECRET, MockOptions

__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "FAULT_PROFILES",
    "Deployment",
    "FaultProfile",
    "MockOptions",
    "serve",
]
