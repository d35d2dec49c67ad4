"""The mock deployment: a real HTTP server that behaves like the practice-management API.

>>> from toolkit.mock import serve
>>> with serve(seed=0, scale="small") as dep:  # doctest: +SKIP
...     dep.base_url

See ``docs/mock.md`` for options, data and fault profiles. The mock shares only
the catalogue with the client; it never imports ``toolkit.client``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.mock.faults import FAULT_PROFILES, FaultProfile

if TYPE_CHECKING:
    from toolkit.mock.server import Deployment, serve
    from toolkit.mock.state import CLIENT_ID, CLIENT_SECRET, MockOptions

# The server, app and data generator (uvicorn, Starlette, the synthetic practice) load
# on first use, so that ``pmtk --help`` and ``pmtk check --base-url ...`` don't pay for them.
_LAZY = {
    "Deployment": "toolkit.mock.server",
    "serve": "toolkit.mock.server",
    "CLIENT_ID": "toolkit.mock.state",
    "CLIENT_SECRET": "toolkit.mock.state",
    "MockOptions": "toolkit.mock.state",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'toolkit.mock' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "FAULT_PROFILES",
    "Deployment",
    "FaultProfile",
    "MockOptions",
    "serve",
]
