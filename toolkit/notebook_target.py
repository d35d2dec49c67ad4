"""Which deployment a client talks to, as a folder name: the notebooks' store and the
``$find`` cache are kept per deployment (:mod:`toolkit.notebook_data`,
:mod:`toolkit.find_cache`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlsplit

__all__ = ["embedded_options", "store_target"]


def embedded_options(client: Any) -> Any | None:
    """The options of the embedded mock when ``client`` talks to it, else ``None``."""
    from toolkit.mock import embedded

    dep = embedded.EMBEDDED.get("deployment")
    if dep is None or getattr(client, "base_url", None) != dep.base_url:
        return None
    return dep.options


def store_target(client: Any) -> str:
    """A folder name that says which deployment a notebook store holds.

    Parameters
    ----------
    client
        A :class:`toolkit.Client` (``base_url`` and ``client_id`` are read; the
        secret never is).

    Returns
    -------
    str
        ``embedded-mock-<scale>-seed<seed>-<shapes>`` for the embedded mock of
        :func:`toolkit.connect`; otherwise ``<host>[-<path>]-<hash>``, the hash
        being the first 12 hex digits of SHA-256 over the base URL and client id.

    Examples
    --------
    >>> class C:
    ...     base_url = "https://au-api.halaxy.com/main"
    ...     client_id = "abc"
    >>> store_target(C())
    'au-api.halaxy.com-main-12326c717d7c'
    """
    options = embedded_options(client)
    if options is not None:
        return f"embedded-mock-{options.scale}-seed{options.seed}-{options.shapes}"
    base_url = str(client.base_url)
    parts = urlsplit(base_url)
    readable = "-".join(p for p in (parts.netloc, *parts.path.split("/")) if p)
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", readable).strip("-.")[:80] or "deployment"
    digest = hashlib.sha256(f"{base_url}\n{client.client_id}".encode()).hexdigest()[:12]
    return f"{readable}-{digest}"
