"""Where a sync's pages come from: the client given, or one :func:`toolkit.connect` opens,
and the resources it walks (every listed one unless told).

The store's :func:`~toolkit.store.sync` and the lake's :func:`~toolkit.lake.sync`
both start here; the lake imports it rather than the store's entry points, which
hand a lake to the lake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import toolkit
from toolkit import catalogue
from toolkit.errors import ConfigurationError
from toolkit.store.results import PageSource


@contextlib.contextmanager
def connected(client: PageSource | None) -> Iterator[PageSource]:
    """``client``, or one of :func:`toolkit.connect` (closed on the way out)."""
    if client is not None:
        yield client
        return

    owned: Any = toolkit.connect()
    try:
        yield owned
    finally:
        close = getattr(owned, "close", None)
        if close is not None:
            close()


def listed_resources(resources: Sequence[str] | None) -> list[str]:
    """The resources to sync, in order; a type without a list endpoint is refused."""
    wanted = list(resources) if resources else list(catalogue.LISTED_RESOURCES)
    unknown = [r for r in wanted if r not in catalogue.LISTED_RESOURCES]
    if unknown:
        known = ", ".join(catalogue.LISTED_RESOURCES)
        msg = f"cannot sync {', '.join(unknown)}: not a listed resource (choose from {known})"
        raise ConfigurationError(msg)
    return wanted
