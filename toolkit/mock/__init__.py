"""The mock deployment: a real HTTP server that behaves like the practice-management API.

>>> from toolkit.mock import serve
>>> with serve(seed=0, scale="small") as dep:  # doctest: +SKIP
...     dep.base_url

See ``docs/mock.md`` for options, data and fault profiles. The mock shares only
the catalogue with the client; it never imports ``toolkit.client``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit._lazy import lazy_exports
from toolkit.mock.faults import FAULT_PROFILES, Fault

if TYPE_CHECKING:
    from toolkit.mock.server import Deployment, serve
    from toolkit.mock.state import CLIENT_ID, CLIENT_SECRET, MockOptions

# The server, app and data generator (uvicorn, Starlette, the synthetic practice) load
# on first use, so that ``pmtk --help`` and ``pmtk check --base-url ...`` don't pay for them.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Deployment": ("toolkit.mock.server", "Deployment"),
        "serve": ("toolkit.mock.server", "serve"),
        "CLIENT_ID": ("toolkit.mock.state", "CLIENT_ID"),
        "CLIENT_SECRET": ("toolkit.mock.state", "CLIENT_SECRET"),
        "MockOptions": ("toolkit.mock.state", "MockOptions"),
    },
)


__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "FAULT_PROFILES",
    "Deployment",
    "Fault",
    "MockOptions",
    "serve",
]
